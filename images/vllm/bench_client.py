"""The benchmark client's driver: runs inside the runtime image, on the serving host, beside vLLM.

  python3 bench_client.py PLAN_JSON

The plan (serving/bench.py, `plan_bench`) lists the runs; for each, in order: the server's /health, a /metrics
snapshot, a prefix-cache reset where the server offers one, `vllm bench serve` with the run's argv, a second
snapshot. Every run leaves out/runs/<id>/: status.json (what happened, on both clocks), result.json (vLLM's
`--save-detailed` result), stdout.log and stderr.log, metrics-before.txt and metrics-after.txt. A thread samples
the load gauges twice a second (out/gauges.log), and the sidecar samplers' lines of the bench window are copied
to out/samplers/, all stamped `mono_s<TAB>wall<TAB>line` (CLOCK_MONOTONIC, shared by every container on the host).

`vllm bench serve` runs in a forked child of this process, which imported vLLM's benchmark module once (~12 s
saved per run); a child that outlives its run's timeout is terminated, then killed, and the run is failed.
A run whose server stops answering fails, and the runs after it are not started: nothing waits on a dead
server. Exit status: 0 every run ok, 1 a run failed (out/client.json says which), 2 bad plan.

Standard library only (and vLLM, imported lazily): this file is copied to the host and run with the image's Python.
"""

from __future__ import annotations

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

HTTP_TIMEOUT_S = 10.0
GAUGE_PERIOD_S = 0.5
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_TERM_GRACE_S = 5.0
# The server's API key, mounted read-only from the host's root-only key file when the deploy has one
# (serving/redact.py API_KEY_MOUNT); `vllm bench serve` sends OPENAI_API_KEY as its bearer token.
API_KEY_MOUNT = Path("/run/refdeploy/api-key")
# First words of the samplers' header lines (vmstat, iostat, pidstat), kept so the window's lines can be parsed.
HEADER_WORDS = (["procs"], ["r"], ["Device"], ["Device:"], ["#"], ["Linux"])


# The product's progress lines on stderr (serving/progress.py MARK; this file runs inside the runtime image).
PROGRESS_MARK = "refdeploy-progress: "


def say(text: str) -> None:
    print(PROGRESS_MARK + text, file=sys.stderr, flush=True)


def stamp() -> tuple[float, str]:
    return time.monotonic(), datetime.now(UTC).isoformat()


def http(method: str, url: str, timeout: float = HTTP_TIMEOUT_S) -> tuple[int, str]:
    """(status, body); status 0 with the reason as body when the server did not answer."""
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
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


def _bench_between_snapshots(
    run: dict[str, Any], run_dir: Path, base: str, reset_prefix_cache: bool, status: dict[str, Any]
) -> tuple[int | None, bool]:
    """One run's `vllm bench serve` between two /metrics snapshots (after a prefix-cache reset when the plan
    asks for one): (exit code or None, timed out). What happened, on both clocks, goes into `status`."""
    code, body = http("GET", base + "/metrics")
    if code == 200:
        (run_dir / "metrics-before.txt").write_text(body)
    status["metrics_before_status"] = code
    if reset_prefix_cache:
        code, body = http("POST", base + "/reset_prefix_cache")
        status["prefix_cache_reset"] = {"status": code, "body": body[:200]}
    status["started_mono_s"], status["started_wall"] = stamp()
    status["started_unix_s"] = time.time()
    rc, timed_out = run_bench(list(run["argv"]), run_dir, float(run["timeout_s"]))
    status["ended_mono_s"], status["ended_wall"] = stamp()
    status["ended_unix_s"] = time.time()
    status.update(exit_code=rc, timed_out=timed_out)
    code, body = http("GET", base + "/metrics")
    if code == 200:
        (run_dir / "metrics-after.txt").write_text(body)
    status["metrics_after_status"] = code
    return rc, timed_out


def _run_failure(run: dict[str, Any], rc: int | None, timed_out: bool, result_path: Path) -> str:
    """Why a run that was started failed, "" when it did not: a run is ok only if `vllm bench serve` exited 0
    in time and its result.json says every request succeeded."""
    if timed_out:
        return f"vllm bench serve ran past the run timeout ({run['timeout_s']} s) and was stopped"
    if rc != 0:
        return f"vllm bench serve exited {rc} (stderr.log)"
    if not result_path.is_file():
        return "vllm bench serve wrote no result.json"
    try:
        result = json.loads(result_path.read_text())
        if int(result.get("failed", 0)):
            return f"{result['failed']} of {result.get('num_prompts', '?')} requests failed"
    except (ValueError, OSError) as exc:
        return f"result.json unreadable: {exc}"
    return ""


def run_plan(plan: dict[str, Any]) -> int:
    out = Path(plan["out"])
    (out / "runs").mkdir(parents=True, exist_ok=True)
    base = str(plan["base_url"]).rstrip("/")
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
    server_lost: str | None = None
    failed = 0
    for i, run in enumerate(plan["runs"], 1):
        say(f"run {i} of {len(plan['runs'])}: {run['id']} ({run['phase']})")
        run_dir = out / "runs" / run["id"]
        run_dir.mkdir(parents=True, exist_ok=True)
        argv = ["vllm", "bench", "serve", *run["argv"]]
        status: dict[str, Any] = {"id": run["id"], "phase": run["phase"], "argv": argv}
        write_json(run_dir / "argv.json", status["argv"])
        if server_lost:
            status.update(status="not run", reason=server_lost)
            write_json(run_dir / "status.json", status)
            client["runs"].append({"id": run["id"], "status": "not run"})
            continue
        code, body = http("GET", base + "/health")
        if code != 200:
            server_lost = f"the server at {base} did not answer /health before run {run['id']} ({code} {body[:200]})"
            status.update(status="failed", reason=server_lost)
            write_json(run_dir / "status.json", status)
            client["runs"].append({"id": run["id"], "status": "failed"})
            failed += 1
            continue
        rc, timed_out = _bench_between_snapshots(run, run_dir, base, plan.get("prefix_cache") == "fresh", status)
        reason = _run_failure(run, rc, timed_out, run_dir / "result.json")
        if reason:
            failed += 1
            h, hbody = http("GET", base + "/health", timeout=5.0)
            if h != 200:
                server_lost = f"the server stopped answering during run {run['id']} ({h} {hbody[:200]})"
                reason += f"; {server_lost}"
        status.update(status="failed" if reason else "ok", reason=reason)
        write_json(run_dir / "status.json", status)
        client["runs"].append({"id": run["id"], "status": status["status"]})
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
    if plan.get("api_key"):
        try:
            key = API_KEY_MOUNT.read_text().strip()
        except OSError as exc:
            print(f"bench client: the deploy has an API key; {API_KEY_MOUNT} cannot be read: {exc}", file=sys.stderr)
            return 2
        # In this process's environment only (root-only /proc/<pid>/environ), never in an argv or an artifact.
        os.environ["OPENAI_API_KEY"] = key
    shutil.rmtree(Path(plan["out"]), ignore_errors=True)
    return run_plan(plan)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
