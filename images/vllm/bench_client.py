"""The benchmark client's driver: runs inside the runtime image, on the serving host, beside vLLM.

  python3 bench_client.py PLAN_JSON

The plan (serving/bench/protocol.py, `plan_bench`) lists the runs; for each, in order: the server's /health, a /metrics
snapshot, a prefix-cache reset where the server offers one, `vllm bench serve` with the run's argv, a second
snapshot. Every run leaves out/runs/<id>/: status.json (what happened, on both clocks), result.json (vLLM's
`--save-detailed` result), stdout.log and stderr.log, metrics-before.txt and metrics-after.txt. A thread samples
the load gauges twice a second (out/gauges.log), and the sidecar samplers' lines of the bench window are copied
to out/samplers/, all stamped `mono_s<TAB>wall<TAB>line` (CLOCK_MONOTONIC, shared by every container on the host).

`vllm bench serve` runs in a forked child of this process, which imported vLLM's benchmark module once (~12 s
saved per run); a child that outlives its run's timeout is terminated, then killed, and the run is failed.
A conversations run (multi-turn chats, which vLLM 0.32's bench has no dataset for) runs here instead, in this
process (`run_conversations`; the conversations themselves: bench_conversations.py), with vLLM's own chat request
function and random dataset, between the same snapshots, and writes the same files (result.json in vLLM's format,
with each request's conversation and turn). Around each run the served files' page cache is made and read, and
the engine's read volume too (bench_page_cache.py). A run whose server stops answering fails, and the runs after
it are not started: nothing waits on a dead server. Exit status: 0 every run ok, 1 a run failed (out/client.json
says which), 2 bad plan.

Standard library only (and vLLM, imported lazily): this file is copied to the host with the modules it imports
from beside it (bench_conversations.py, bench_page_cache.py, probes/base/unix_http.py, and serving/standalone/knee.py
and serving/standalone/knee_runs.py: ansible/roles/bench/tasks/main.yml) and run with the image's Python.

The server has no TCP address: it is reached on its unix socket (the plan's server_socket), and so are the
requests, unless they go through the front door or an operator's proxy (requests_socket None).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_conversations import ConversationSeam, Turn, conversation_result, converse, endings, vllm_seam
from bench_page_cache import ResidencyReader, engine_io, make_page_cache_state, served_files
from unix_http import opener, route_aiohttp  # type: ignore[import-not-found]  # probes/base/unix_http.py, beside this

HTTP_TIMEOUT_S = 10.0
GAUGE_PERIOD_S = 0.5
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_TERM_GRACE_S = 5.0
# The server's API key, mounted read-only from the host's root-only key file when the deploy has one
# (serving/config/redact.py API_KEY_MOUNT); `vllm bench serve` sends OPENAI_API_KEY as its bearer token.
API_KEY_MOUNT = Path("/run/refdeploy/api-key")
# First words of the samplers' header lines (vmstat, iostat, pidstat), kept so the window's lines can be parsed.
HEADER_WORDS = (["procs"], ["r"], ["Device"], ["Device:"], ["#"], ["Linux"])


# The product's progress lines on stderr (serving/bridge/progress.py MARK; this file runs inside the runtime image).
PROGRESS_MARK = "refdeploy-progress: "


def say(text: str) -> None:
    print(PROGRESS_MARK + text, file=sys.stderr, flush=True)


def stamp() -> tuple[float, str]:
    return time.monotonic(), datetime.now(UTC).isoformat()


# The server's /health, /metrics and cache resets: over its socket once run_plan has read the plan.
_server = opener(None)


def http(method: str, url: str, timeout: float = HTTP_TIMEOUT_S) -> tuple[int, str]:
    """(status, body) from the server; status 0 with the reason as body when the server did not answer."""
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with _server.open(req, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), str(exc.reason)
    except (OSError, ValueError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"


class GaugeSampler(threading.Thread):
    """The load gauges from /metrics every GAUGE_PERIOD_S, stamped, into one log."""

    def __init__(self, base_url: str, path: Path) -> None:
        super().__init__(daemon=True)
        self.url = base_url + "/metrics"
        self.path = path
        self.stop = threading.Event()

    def run(self) -> None:
        with self.path.open("a") as log:
            while not self.stop.is_set():
                code, body = http("GET", self.url, timeout=2.0)
                mono, wall = stamp()
                if code == 200:
                    for line in body.splitlines():
                        if line.startswith(GAUGES):
                            log.write(f"{mono:.6f}\t{wall}\t{line}\n")
                else:
                    log.write(f"{mono:.6f}\t{wall}\t# no metrics: {code} {body[:200]}\n")
                log.flush()
                self.stop.wait(GAUGE_PERIOD_S)


def _child(argv: list[str], out_dir: str) -> None:
    """In the forked child: vllm bench serve with argv, its output in out_dir."""
    out = os.open(Path(out_dir) / "stdout.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(Path(out_dir) / "stderr.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 0
    try:
        import argparse

        from vllm.benchmarks.serve import add_cli_args, main  # type: ignore[import-not-found]

        parser = argparse.ArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        main(parser.parse_args(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # everything is recorded in stderr.log and the exit code
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_bench(argv: list[str], run_dir: Path, timeout_s: float) -> tuple[int | None, bool]:
    """(exit code or None, timed out) of one `vllm bench serve` in a forked child."""
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(argv, str(run_dir)))
    proc.start()
    proc.join(timeout_s)
    if proc.is_alive():
        proc.terminate()
        proc.join(_TERM_GRACE_S)
        if proc.is_alive():
            proc.kill()
            proc.join(_TERM_GRACE_S)
        return proc.exitcode, True
    return proc.exitcode, False


def run_conversations(
    spec: dict[str, Any], run_dir: Path, timeout_s: float, seam: ConversationSeam | None = None
) -> tuple[int | None, bool]:
    """(exit code, timed out) of one conversations run, as run_bench gives them for `vllm bench serve`: its
    result.json, stdout.log and stderr.log in run_dir. Exit 0 when it ran (failed requests are in result.json, as
    vLLM records them), 1 when it could not (the traceback in stderr.log). A run past timeout_s is stopped, and what
    it had is written."""
    with (run_dir / "stdout.log").open("w") as out, (run_dir / "stderr.log").open("w") as err:
        try:
            seam = seam or vllm_seam(spec)
            print(f"conversations: {json.dumps(spec, sort_keys=True)}", file=out, flush=True)
            turns: list[Turn] = []
            clock: dict[str, float] = {}
            timed_out = False
            try:
                asyncio.run(asyncio.wait_for(converse(spec, seam, turns, clock), timeout_s))
            except TimeoutError:
                timed_out = True
            duration = time.perf_counter() - clock.get("start", time.perf_counter())
            not_sent, lines = endings(spec, turns, timed_out)
            result = conversation_result(spec, seam, turns, duration, not_sent)
            write_json(run_dir / "result.json", result)
            for line in lines + [f"error: {e}" for e in result["errors"] if e][:10]:
                print(line, file=out)
            print(f"requests: {result['completed']} ok, {result['failed']} failed, {not_sent} not sent; "
                  f"duration {duration:.3f} s; median TTFT {result['median_ttft_ms']:.2f} ms", file=out)  # fmt: skip
            return 0, timed_out
        except Exception:  # everything is recorded in stderr.log and the exit code
            traceback.print_exc(file=err)
            return 1, False


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def copy_sampler_window(samplers_dir: Path, out: Path, start_mono: float, end_mono: float) -> dict[str, int]:
    """The sidecar's stamped lines from one second before the first run to one second after the last."""
    copied: dict[str, int] = {}
    out.mkdir(parents=True, exist_ok=True)
    for log in sorted(samplers_dir.glob("*.log")):
        lines: list[str] = []
        headers: list[str] = []  # column headers printed once, before the window (vmstat -n)
        for path in (log.with_name(log.name + ".1"), log):
            if not path.is_file():
                continue
            with path.open(errors="replace") as f:
                for line in f:
                    head = line.split("\t", 1)[0]
                    try:
                        mono = float(head)
                    except ValueError:
                        continue
                    if start_mono - 1.0 <= mono <= end_mono + 1.0:
                        lines.append(line)
                    elif mono < start_mono and line.split("\t", 2)[-1].split()[:1] in HEADER_WORDS:
                        headers.append(line)
        (out / log.name).write_text("".join(headers[-4:] + lines))
        copied[log.name] = len(lines)
    return copied


def drop_to(uid: int) -> None:
    """Become the runtime user (no capabilities left), with its home: what `vllm bench serve` runs as."""
    import pwd

    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    try:
        os.environ["HOME"] = pwd.getpwuid(uid).pw_dir
    except KeyError:
        os.environ["HOME"] = "/tmp"


def _bench_between_snapshots(
    run: dict[str, Any],
    run_dir: Path,
    base: str,
    reset_prefix_cache: bool,
    status: dict[str, Any],
    page_cache: dict[str, Any] | None = None,
    reader: ResidencyReader | None = None,
) -> tuple[int | None, bool]:
    """One run's `vllm bench serve` (or its conversations) between two /metrics snapshots (after a prefix-cache
    reset when the plan asks for one, and with the served files' page-cache state made first): (exit code or
    None, timed out).
    What happened, on both clocks, goes into `status`, with the residency and the engine's read volume before
    and after."""
    cache = page_cache or {}
    files = served_files(list(cache.get("paths") or []))
    read = (reader or ResidencyReader()).read
    status["page_cache"] = {"made": make_page_cache_state(str(cache.get("state", "as-found")), files)}
    status["page_cache"]["before"] = read(files)
    engine_pid = int(cache.get("engine_pid") or 1)
    status["engine_io_before"] = engine_io(engine_pid)
    code, body = http("GET", base + "/metrics")
    if code == 200:
        (run_dir / "metrics-before.txt").write_text(body)
    status["metrics_before_status"] = code
    if reset_prefix_cache:
        code, body = http("POST", base + "/reset_prefix_cache")
        status["prefix_cache_reset"] = {"status": code, "body": body[:200]}
    status["started_mono_s"], status["started_wall"] = stamp()
    status["started_unix_s"] = time.time()
    if run.get("conversations"):
        rc, timed_out = run_conversations(dict(run["conversations"]), run_dir, float(run["timeout_s"]))
    else:
        rc, timed_out = run_bench(list(run["argv"]), run_dir, float(run["timeout_s"]))
    status["ended_mono_s"], status["ended_wall"] = stamp()
    status["ended_unix_s"] = time.time()
    status.update(exit_code=rc, timed_out=timed_out)
    code, body = http("GET", base + "/metrics")
    if code == 200:
        (run_dir / "metrics-after.txt").write_text(body)
    status["metrics_after_status"] = code
    status["engine_io_after"] = engine_io(engine_pid)
    status["page_cache"]["after"] = read(files)
    return rc, timed_out


def _run_failure(
    run: dict[str, Any], rc: int | None, timed_out: bool, result_path: Path, tolerate_failed_requests: bool = False
) -> str:
    """Why a run that was started failed, "" when it did not: a run is ok only if `vllm bench serve` (or the
    conversations client) exited 0 in time and its result.json says every request succeeded, and for
    conversations every turn was sent (or, in a search, that it has a result)."""
    tool = "the conversations client" if run.get("conversations") else "vllm bench serve"
    if timed_out:
        return f"{tool} ran past the run timeout ({run['timeout_s']} s) and was stopped"
    if rc != 0:
        return f"{tool} exited {rc} (stderr.log)"
    if not result_path.is_file():
        return f"{tool} wrote no result.json"
    try:
        result = json.loads(result_path.read_text())
        failed, not_sent = int(result.get("failed", 0)), int(result.get("not_sent", 0))
        if (failed or not_sent) and not tolerate_failed_requests:
            said = f"{failed} of {result.get('num_prompts', '?')} requests failed"
            return said + (f"; {not_sent} turns not sent (a failed turn ends its conversation)" if not_sent else "")
    except (ValueError, OSError) as exc:
        return f"result.json unreadable: {exc}"
    return ""


class Runner:
    """Runs one run after another (the plan's, then a search's), and remembers a server that stopped answering:
    the runs after it are not started."""

    def __init__(
        self, plan: dict[str, Any], out: Path, base: str, reader: ResidencyReader | None, client: dict[str, Any]
    ) -> None:
        self.plan, self.out, self.base, self.reader, self.client = plan, out, base, reader, client
        self.server_lost: str | None = None
        self.failed = 0

    def run(self, run: dict[str, Any], tolerate_failed_requests: bool = False) -> str:
        """One run, its record in out/runs/<id>/: its status ("ok", "failed", "not run"). A search tolerates
        failed requests (an overloaded server's requests fail: they are SLO misses, not a broken run)."""
        base = self.base
        run_dir = self.out / "runs" / run["id"]
        run_dir.mkdir(parents=True, exist_ok=True)
        status: dict[str, Any] = {"id": run["id"], "phase": run["phase"]}
        if run.get("conversations"):
            status["conversations"] = run["conversations"]
            write_json(run_dir / "conversations.json", run["conversations"])
        else:
            status["argv"] = ["vllm", "bench", "serve", *run["argv"]]
            write_json(run_dir / "argv.json", status["argv"])
        if self.server_lost:
            status.update(status="not run", reason=self.server_lost)
            write_json(run_dir / "status.json", status)
            self.client["runs"].append({"id": run["id"], "status": "not run"})
            return "not run"
        code, body = http("GET", base + "/health")
        if code != 200:
            self.server_lost = (
                f"the server at {base} did not answer /health before run {run['id']} ({code} {body[:200]})"
            )
            status.update(status="failed", reason=self.server_lost)
            write_json(run_dir / "status.json", status)
            self.client["runs"].append({"id": run["id"], "status": "failed"})
            self.failed += 1
            return "failed"
        rc, timed_out = _bench_between_snapshots(
            run, run_dir, base, self.plan.get("prefix_cache") == "fresh", status, self.plan.get("page_cache"),
            self.reader,
        )  # fmt: skip
        reason = _run_failure(run, rc, timed_out, run_dir / "result.json", tolerate_failed_requests)
        if reason:
            self.failed += 1
            h, hbody = http("GET", base + "/health", timeout=5.0)
            if h != 200:
                self.server_lost = f"the server stopped answering during run {run['id']} ({h} {hbody[:200]})"
                reason += f"; {self.server_lost}"
        status.update(status="failed" if reason else "ok", reason=reason)
        write_json(run_dir / "status.json", status)
        self.client["runs"].append({"id": run["id"], "status": status["status"]})
        return str(status["status"])


def prefix_hits(run_dir: Path) -> float | None:
    """vllm:prefix_cache_hits_total over the run (tokens), from its two /metrics snapshots; None without them."""

    def total(name: str) -> float | None:
        try:
            text = (run_dir / name).read_text()
        except OSError:
            return None
        hits = [line for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits_total")]
        return sum(float(line.rsplit(" ", 1)[1]) for line in hits)

    before, after = total("metrics-before.txt"), total("metrics-after.txt")
    return None if before is None or after is None else after - before


def search_knee(search: dict[str, Any], runner: Runner, out: Path, warmed: tuple[float, float] | None = None) -> None:
    """The knee search (serving/standalone/knee.py decides the loads; serving/standalone/knee_runs.py sizes each run to
    hold its load for the search's duration and says what a run shows after its ramp-up): each step's runs at its load,
    each run's outcome recorded, then the steady runs that check the answer (the knee must hold, the load above it must
    fail). The runs made go into client.json ("search_runs", with the ids, points and seeds the report reads), the
    search's result into out/search.json."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import knee  # type: ignore[import-not-found]  # serving/standalone/knee.py, copied beside this file
    import knee_runs  # type: ignore[import-not-found]  # serving/standalone/knee_runs.py, copied beside this file

    rate = search["kind"] == "rate"
    s = knee.Search(
        search["kind"], search["start"], search["limit"], search["min_share"],
        probe_runs=search["probe_runs"], confirm_runs=search["confirm_runs"], resolution=search["resolution"],
        max_runs=search["max_runs"],
    )  # fmt: skip
    made: list[dict[str, Any]] = []
    per_point: dict[str, int] = {}
    # (load, req/s) of each run that measured a throughput, oldest first: the first is the warm-up's, at the start
    # load, so that a concurrency search's first run is sized from it.
    last: list[tuple[float, float]] = [warmed] if warmed else []

    def measure(load: float, phase: str, duration_s: float) -> dict[str, Any]:
        point = f"r{load:g}" if rate else f"c{int(load)}"
        per_point[point] = per_point.get(point, 0) + 1
        run_id = f"{point}-m{per_point[point]}"
        seed = int(search["seed"]) + len(made)
        prompts = knee_runs.prompts_for(search["kind"], load, duration_s, search["min_prompts"], last)
        argv = [*search["argv"], "--num-prompts", str(prompts), "--seed", str(seed),
                "--result-dir", f"{out}/runs/{run_id}"]  # fmt: skip
        argv += ["--request-rate", repr(float(load))] if rate else ["--request-rate", "inf"]
        argv += [] if rate else ["--max-concurrency", str(int(load))]
        salt = f"{search['cache_salt']}-{run_id}" if search.get("cache_salt") else None
        if salt:
            argv += ["--extra-body", json.dumps({"cache_salt": salt})]
        run = {
            "id": run_id, "point": point, "phase": "measured", "seed": seed, "cache_salt": salt,
            "max_concurrency": None if rate else int(load), "request_rate": float(load) if rate else None,
            "timeout_s": search["timeout_s"], "argv": argv, "search_phase": phase, "prompts": prompts,
            "duration_s": duration_s,
        }  # fmt: skip
        say(f"search {phase}: {run_id}, {prompts} prompts for {duration_s:g} s ({len(made) + 1} of at most "
            f"{search['max_runs'] + 2})")  # fmt: skip
        state = runner.run(run, tolerate_failed_requests=True)
        made.append({k: v for k, v in run.items() if k != "argv"})
        result_path = out / "runs" / run_id / "result.json"
        got: dict[str, Any] = {"share_met": None, "achieved_over_requested": None, "goodput_req_s": None,
                               "valid": False, "note": state}  # fmt: skip
        if state == "ok" and result_path.is_file():
            result = json.loads(result_path.read_text())
            gauges = out / "gauges.log"  # the GaugeSampler's, written while the run ran
            running = knee_runs.running_counts(gauges.read_text().splitlines()) if gauges.is_file() else []
            got = knee_runs.run_outcome(result, search["slo_ms"], run["request_rate"], duration_s,
                                        search["ramp_up_s"], search["min_completed"], running)  # fmt: skip
            throughput = result.get("request_throughput")
            if isinstance(throughput, int | float) and throughput > 0:
                last.append((load, float(throughput)))
            # As the report judges it (serving/bench/runs.py): the cache served more of the prefill than chance.
            hits = None if search.get("hits_intended") else prefix_hits(out / "runs" / run_id)
            prompt_tokens = result.get("total_input_tokens")
            flag = knee_runs.hits_flag(hits, prompt_tokens, knee_runs.SEARCH_HITS_MAX_SHARE)
            if flag:
                got.update(valid=False, note=flag)
            elif hits and prompt_tokens:
                said = f"prefix-cache hits {hits / prompt_tokens:.1%} of prompt tokens (random prompts that coincide)"
                got["note"] = f"{got['note']}; {said}" if got.get("note") else said
        got["run"] = run_id
        return got

    while (step := s.next_step()) is not None:
        for _ in range(step.runs):
            got = measure(step.load, step.phase, search["duration_s"])
            s.record(step.load, knee.Outcome(
                share_met=got["share_met"], achieved_over_requested=got["achieved_over_requested"],
                valid=got["valid"], goodput_req_s=got["goodput_req_s"], held_s=got.get("held_s"),
                note=" ".join(x for x in (got["run"], got.get("note") or "ok") if x),
            ))  # fmt: skip
            if runner.server_lost:
                break
        if runner.server_lost:
            break
    result = s.result()
    checks = []
    for load, expect in [] if runner.server_lost else knee_runs.checks_for(result):
        checks.append({"load": load, "expect": expect, **measure(load, "check", search["check_duration_s"])})
        if runner.server_lost:
            break
    runner.client["search_runs"] = made
    write_json(out / "search.json", knee_runs.conclude(result, checks, search["check_duration_s"]))


def warm_throughput(plan: dict[str, Any], out: Path) -> tuple[float, float] | None:
    """The last warm-up's load and request throughput (req/s), from its result.json; None without one."""
    warm = [r for r in plan["runs"] if r["phase"] == "warmup"]
    if not warm:
        return None
    try:
        result = json.loads((out / "runs" / warm[-1]["id"] / "result.json").read_text())
    except (OSError, ValueError):
        return None
    load = warm[-1].get("request_rate") or warm[-1].get("max_concurrency")
    throughput = result.get("request_throughput")
    ok = isinstance(load, int | float) and isinstance(throughput, int | float) and throughput > 0
    return (float(load), float(throughput)) if ok else None


def run_plan(plan: dict[str, Any], reader: ResidencyReader | None = None) -> int:
    global _server
    _server = opener(plan.get("server_socket"))
    if plan.get("requests_socket"):
        # Before vLLM's benchmark module is imported and the runs fork: each run's connector is then the socket's.
        route_aiohttp(str(plan["requests_socket"]))
    out = Path(plan["out"])
    (out / "runs").mkdir(parents=True, exist_ok=True)
    # The server itself for /health, /metrics and cache resets; the requests go to base_url (a proxy, the front
    # door, or the server again).
    base = str(plan.get("server_url") or plan["base_url"]).rstrip("/")
    client: dict[str, Any] = {"schema_version": 1, "pid": os.getpid(), "runs": [], "status": "ok", "reason": ""}
    client["started_mono_s"], client["started_wall"] = stamp()
    t0 = time.monotonic()
    import_started = time.monotonic()
    say(f"importing vLLM's benchmark module, then {len(plan['runs'])} runs")
    try:
        import vllm.benchmarks.serve  # type: ignore[import-not-found]  # noqa: F401 - imported once, before the forks
    except Exception as exc:  # recorded; the runs fail one by one below
        client["import_error"] = f"{type(exc).__name__}: {exc}"
    client["import_s"] = time.monotonic() - import_started
    gauges = GaugeSampler(base, out / "gauges.log")
    gauges.start()
    runner = Runner(plan, out, base, reader, client)
    for i, run in enumerate(plan["runs"], 1):
        say(f"run {i} of {len(plan['runs'])}: {run['id']} ({run['phase']})")
        runner.run(run)
    if plan.get("search"):
        search_knee(plan["search"], runner, out, warm_throughput(plan, out))
    failed, server_lost = runner.failed, runner.server_lost
    gauges.stop.set()
    gauges.join(5.0)
    client["ended_mono_s"], client["ended_wall"] = stamp()
    client["seconds"] = time.monotonic() - t0
    if plan.get("samplers_dir") and Path(plan["samplers_dir"]).is_dir():
        try:
            client["samplers_copied"] = copy_sampler_window(
                Path(plan["samplers_dir"]), out / "samplers", client["started_mono_s"], client["ended_mono_s"]
            )
        except OSError as exc:
            client["samplers_copied"] = {"error": str(exc)}
    if failed:
        client["status"] = "failed"
        client["reason"] = server_lost or f"{failed} run(s) failed"
    write_json(out / "client.json", client)
    print(f"bench client: {len(plan['runs'])} runs, {failed} failed, {client['seconds']:.1f} s")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: bench_client.py PLAN_JSON", file=sys.stderr)
        return 2
    try:
        plan = json.loads(Path(argv[0]).read_text())
        if not isinstance(plan.get("runs"), list):
            raise ValueError("no runs in the plan")
    except (OSError, ValueError) as exc:
        print(f"bench client: bad plan {argv[0]}: {exc}", file=sys.stderr)
        return 2
    # Started as root with FOWNER, SETUID and SETGID only (serving/bench/protocol.py): the residency reader keeps root's
    # FOWNER, everything else runs as the runtime user, with no capability. The reader starts before the key is
    # read, so the one process left with a capability never holds the key in its environment.
    reader = ResidencyReader.start() if os.geteuid() == 0 else None
    if plan.get("api_key"):
        try:
            key = API_KEY_MOUNT.read_text().strip()
        except OSError as exc:
            print(f"bench client: the deploy has an API key; {API_KEY_MOUNT} cannot be read: {exc}", file=sys.stderr)
            if reader is not None:
                reader.close()
            return 2
        # In this process's environment only (root-only /proc/<pid>/environ), never in an argv or an artifact.
        os.environ["OPENAI_API_KEY"] = key
    if plan.get("ca_file"):
        # The front door's certificate: vLLM's client (aiohttp's default TLS context) and this process's urllib
        # check the door's TLS against it, through OpenSSL's SSL_CERT_FILE.
        os.environ["SSL_CERT_FILE"] = str(plan["ca_file"])
    if reader is not None:
        drop_to(int(plan.get("run_as_uid", 10001)))
    shutil.rmtree(Path(plan["out"]), ignore_errors=True)
    try:
        return run_plan(plan, reader)
    finally:
        if reader is not None:
            reader.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
