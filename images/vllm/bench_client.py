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
A conversations run (multi-turn chats, which vLLM 0.32's bench has no dataset for) runs here instead, in this
process (`run_conversations`), with vLLM's own chat request function and random dataset, between the same
snapshots, and writes the same files (result.json in vLLM's format, with each request's conversation and turn).
A run whose server stops answering fails, and the runs after it are not started: nothing waits on a dead
server. Exit status: 0 every run ok, 1 a run failed (out/client.json says which), 2 bad plan.

Standard library only (and vLLM, imported lazily): this file is copied to the host and run with the image's Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
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


# --- conversations: multi-turn chats (vLLM 0.32's `vllm bench serve` has no multi-turn dataset) -------------------
#
# A conversation sends turn 1, waits for its whole streamed answer, appends the answer to the history, waits the
# think time, then sends turn 2 with the whole history (user and assistant turns alternating), and so on. Every
# request goes through vLLM's own chat request function, so TTFT, the chunk intervals and the latency are measured
# by the code `vllm bench serve` measures with; the user turns are drawn from the run's seed by vLLM's random
# dataset, so the same seed sends the same user turns.


class ConversationSeam:
    """THE TEST SEAM of run_conversations: everything that talks to vLLM. `vllm_seam` builds the real one; the
    unit tests pass their own (tests/unit/test_conversation_client.py), so the loop runs there without vLLM.

    request(input, session): vLLM's async_request_openai_chat_completions (-> its RequestFuncOutput);
    make_input(**fields): vLLM's RequestFuncInput; session(): an async context manager giving the HTTP session;
    user_turns[c][t]: conversation c's user turn t+1, (text, its tokens); count_tokens(text): the tokenizer's count
    of an answer, which vLLM uses where the server's usage gave none."""

    def __init__(
        self,
        request: Callable[[Any, Any], Awaitable[Any]],
        make_input: Callable[..., Any],
        session: Callable[[], Any],
        user_turns: list[list[tuple[str, int]]],
        count_tokens: Callable[[str], int],
    ) -> None:
        self.request, self.make_input, self.session = request, make_input, session
        self.user_turns, self.count_tokens = user_turns, count_tokens


def vllm_seam(spec: dict[str, Any]) -> ConversationSeam:
    """The real seam: vLLM's chat request function and input, an aiohttp session opened as `vllm bench serve` opens
    it (a connection per conversation in flight, its 6-hour total timeout), and the user turns drawn by vLLM's
    random dataset from the run's seed with the served model's tokenizer (`--random-range-ratio 0`: every turn
    input_len tokens as vLLM counts them, the tokenizer's special tokens left to the server's template)."""
    import aiohttp  # type: ignore[import-not-found]
    from vllm.benchmarks.datasets.datasets import RandomDataset  # type: ignore[import-not-found]
    from vllm.benchmarks.lib.endpoint_request_func import (  # type: ignore[import-not-found]
        RequestFuncInput,
        async_request_openai_chat_completions,
    )
    from vllm.tokenizers import get_tokenizer  # type: ignore[import-not-found]

    tokenizer = get_tokenizer(spec["tokenizer"], tokenizer_mode="auto", trust_remote_code=False)
    n, turns = int(spec["num_conversations"]), int(spec["turns"])
    drawn = RandomDataset(random_seed=int(spec["seed"]), dataset_path=None).sample(
        tokenizer=tokenizer, num_requests=n * turns, prefix_len=0, input_len=int(spec["input_len"]),
        output_len=int(spec["output_len"]), range_ratio=0.0, request_id_prefix="",
    )  # fmt: skip
    pairs = [(str(r.prompt), int(r.prompt_len)) for r in drawn]
    cap = int(spec.get("max_concurrency") or 0)

    def session() -> Any:
        connector = aiohttp.TCPConnector(
            limit=cap, limit_per_host=cap, ttl_dns_cache=300, use_dns_cache=True, keepalive_timeout=60,
            enable_cleanup_closed=True, force_close=False,
        )  # fmt: skip
        return aiohttp.ClientSession(
            connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
        )

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    return ConversationSeam(
        async_request_openai_chat_completions,
        RequestFuncInput,
        session,
        [pairs[c * turns : (c + 1) * turns] for c in range(n)],
        count_tokens,
    )


class Turn:
    """One request of a conversation as it went: vLLM's RequestFuncOutput, and the time it waited in the client
    (turn 1 for a conversation slot; later turns not at all: each is sent when its think time ends)."""

    def __init__(self, conversation: int, turn: int, output: Any, queue_s: float) -> None:
        self.conversation, self.turn, self.output, self.queue_s = conversation, turn, output, queue_s


async def _conversation(
    c: int, spec: dict[str, Any], seam: ConversationSeam, session: Any, slots: Any, turns: list[Turn], prefix: str
) -> None:
    """Conversation c, turn after turn, inside one of the run's conversation slots; a failed turn ends it. Its
    requests' ids are prefix<c>-<turn> (vllm bench serve's are bench-<8 hex>-<i>)."""
    api_url = str(spec["base_url"]).rstrip("/") + str(spec["endpoint"])
    extra_body: dict[str, Any] = {"temperature": spec.get("temperature", 0.0)}
    if spec.get("cache_salt"):
        extra_body["cache_salt"] = spec["cache_salt"]
    think = float(spec.get("think_time_s") or 0.0)
    ready = time.perf_counter()
    async with slots:
        history: list[dict[str, str]] = []
        history_tokens = 0
        for t, (text, tokens) in enumerate(seam.user_turns[c], 1):
            if t > 1 and think > 0:
                await asyncio.sleep(think)
                ready = time.perf_counter()
            history.append({"role": "user", "content": text})
            request = seam.make_input(
                prompt=text, api_url=api_url, prompt_len=history_tokens + tokens, output_len=int(spec["output_len"]),
                model=spec["model"], extra_body=dict(extra_body), ignore_eos=bool(spec.get("ignore_eos", True)),
                request_id=f"{prefix}{c}-{t}", chat_messages=list(history),
            )  # fmt: skip
            output = await seam.request(request, session)
            turns.append(Turn(c, t, output, output.start_time - ready))
            if not output.success:
                return
            history.append({"role": "assistant", "content": output.generated_text})
            history_tokens += tokens + int(output.output_tokens or 0)
            ready = time.perf_counter()


async def _converse(spec: dict[str, Any], seam: ConversationSeam, turns: list[Turn], clock: dict[str, float]) -> None:
    """Every conversation of the run, at most max_concurrency in flight (none: all of them at once)."""
    cap = spec.get("max_concurrency")
    slots = asyncio.Semaphore(int(cap)) if cap else contextlib.nullcontext()
    prefix = f"conv-{uuid.uuid4().hex[:8]}-"
    async with seam.session() as session:
        clock["start"] = time.perf_counter()
        await asyncio.gather(
            *(_conversation(c, spec, seam, session, slots, turns, prefix) for c in range(len(seam.user_turns)))
        )


def _percentile(xs: list[float], p: float) -> float:
    """numpy's default percentile (linear between order statistics), as vLLM reports its p50, p90 and p99."""
    xs = sorted(xs)
    h = (len(xs) - 1) * p / 100.0
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def _metric(result: dict[str, Any], name: str, values: list[float]) -> None:
    """mean, median, std, p50, p90, p99 of values (s) in ms, under vLLM's keys (0 for none, as numpy gives it)."""
    xs = values or [0.0]
    result[f"mean_{name}_ms"] = statistics.fmean(xs) * 1000
    result[f"median_{name}_ms"] = statistics.median(xs) * 1000
    result[f"std_{name}_ms"] = statistics.pstdev(xs) * 1000
    for p in (50, 90, 99):
        result[f"p{p}_{name}_ms"] = _percentile(xs, p) * 1000


def _peaks(turns: list[Turn]) -> tuple[float, int]:
    """vLLM's peak figures: the most output tokens in one second of the run, and the requests active in the
    busiest second (per-second buckets from the first successful request's send)."""
    ok = [t.output for t in turns if t.output.success]
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    seconds = math.ceil(max(o.start_time + o.latency for o in ok) - t0) + 1
    tokens, active = [0] * seconds, [0] * seconds
    for o in ok:
        at = o.start_time + o.ttft
        for dt in [0.0, *o.itl]:
            at += dt
            if 0 <= int(at - t0) < seconds:
                tokens[int(at - t0)] += 1
        for s in range(int(o.start_time - t0), int(o.start_time + o.latency - t0) + 1):
            active[s] += 1
    return float(max(tokens)), max(active)


def conversation_result(
    spec: dict[str, Any], seam: ConversationSeam, turns: list[Turn], duration: float, not_sent: int
) -> dict[str, Any]:
    """The run's result.json in the format `vllm bench serve --save-detailed` writes (its run-level and
    per-request fields, failed requests recorded as vLLM records them: output length 0, the error text), in
    conversation order, with each request's `conversation` (from 0) and `turn` (from 1), and the turns not sent."""
    turns = sorted(turns, key=lambda t: (t.conversation, t.turn))
    outs = [t.output for t in turns]
    lens = [int(o.output_tokens or seam.count_tokens(o.generated_text)) if o.success else 0 for o in outs]
    ok = [(o, n) for o, n in zip(outs, lens, strict=True) if o.success]
    total_in = sum(o.prompt_len for o, _ in ok)
    per_s = 1.0 / duration if duration > 0 else 0.0
    peak_tokens, peak_active = _peaks(turns)
    result: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": "openai-chat", "backend": "openai-chat",
        "label": None, "model_id": spec["model"], "tokenizer_id": spec["tokenizer"], "dataset": "conversations",
        "num_conversations": spec["num_conversations"], "turns": spec["turns"], "think_time_s": spec["think_time_s"],
        "num_prompts": int(spec["num_conversations"]) * int(spec["turns"]), "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": spec.get("max_concurrency"), "duration": duration,
        "completed": len(ok), "failed": len(outs) - len(ok), "not_sent": not_sent,
        "total_input_tokens": total_in, "total_output_tokens": sum(lens),
        "request_throughput": len(ok) * per_s, "request_goodput": None,
        "output_throughput": sum(lens) * per_s, "total_token_throughput": (total_in + sum(lens)) * per_s,
        "input_lens": [o.prompt_len for o in outs], "output_lens": lens, "ttfts": [o.ttft for o in outs],
        "itls": [list(o.itl) for o in outs], "latencies": [o.latency for o in outs],
        "start_times": [o.start_time for o in outs], "queue_times": [t.queue_s for t in turns],
        "generated_texts": [o.generated_text for o in outs], "errors": [o.error for o in outs],
        "conversation": [t.conversation for t in turns], "turn": [t.turn for t in turns],
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_active, "rtfx": 0.0,
    }  # fmt: skip
    _metric(result, "ttft", [o.ttft for o, _ in ok])
    _metric(result, "tpot", [(o.latency - o.ttft) / (n - 1) for o, n in ok if n > 1])
    _metric(result, "itl", [x for o, _ in ok for x in o.itl])
    _metric(result, "e2el", [o.latency for o, _ in ok])
    _metric(result, "client_queue_time", [t.queue_s for t in turns if t.output.success])
    return result


def _endings(spec: dict[str, Any], turns: list[Turn], timed_out: bool) -> tuple[int, list[str]]:
    """The turns not sent, and a line per conversation that did not send all of its turns, saying why."""
    total = int(spec["turns"])
    not_sent, lines = 0, []
    for c in range(int(spec["num_conversations"])):
        mine = sorted((t for t in turns if t.conversation == c), key=lambda t: t.turn)
        missing = total - len(mine)
        if not missing:
            continue
        not_sent += missing
        if mine and not mine[-1].output.success:
            error = (str(mine[-1].output.error).strip().splitlines() or ["no error text"])[-1]
            why = f"its turn {mine[-1].turn} failed ({error[:200]}), which ends a conversation"
        else:
            why = "the run's timeout stopped it" if timed_out else "it was not run"
        lines.append(f"conversation {c}: {missing} of {total} turns not sent: {why}")
    return not_sent, lines


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
                asyncio.run(asyncio.wait_for(_converse(spec, seam, turns, clock), timeout_s))
            except TimeoutError:
                timed_out = True
            duration = time.perf_counter() - clock.get("start", time.perf_counter())
            not_sent, lines = _endings(spec, turns, timed_out)
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


def served_files(paths: list[str]) -> list[str]:
    """Every regular file under the served paths (the model, a GPU profile's data), sorted; links not followed."""
    files: list[str] = []
    for top in paths:
        for root, _dirs, names in os.walk(top):
            files += [
                str(Path(root) / n) for n in names if (Path(root) / n).is_file() and not (Path(root) / n).is_symlink()
            ]
    return sorted(files)


def make_page_cache_state(state: str, files: list[str]) -> dict[str, Any]:
    """Before a run: "cold" evicts each served file's clean, unmapped pages (posix_fadvise DONTNEED: this file's
    pages only, nothing else on the host); "warm" reads each file through; "as-found" touches nothing.
    What was done, and what could not be (a file that would not open)."""
    t0 = time.monotonic()
    done: dict[str, Any] = {"state": state, "files": len(files), "bytes_read": 0, "errors": []}
    if state not in ("cold", "warm"):
        return done
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError as exc:
            done["errors"].append(f"{f}: {exc.strerror}")
            continue
        try:
            if state == "cold":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while chunk := os.read(fd, 1 << 20):
                    done["bytes_read"] += len(chunk)
        except OSError as exc:
            done["errors"].append(f"{f}: {exc.strerror}")
        finally:
            os.close(fd)
    done["seconds"] = round(time.monotonic() - t0, 3)
    return done


CAP_FOWNER = 3


def has_fowner() -> bool:
    """Whether this process holds CAP_FOWNER (its effective set in /proc/self/status)."""
    try:
        eff = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("CapEff:"))
        return bool(int(eff.split()[1], 16) & (1 << CAP_FOWNER))
    except (OSError, StopIteration, ValueError):
        return False


def _owner(path: str) -> int | None:
    try:
        return Path(path).stat().st_uid
    except OSError:
        return None


def residency(files: list[str]) -> dict[str, Any]:
    """The served files' pages in the page cache now, from util-linux fincore (mincore(2) per file): totals in
    pages and bytes, and per file; {"error": why} when fincore could not say.

    mincore(2) tells the truth only to a caller that owns the file, may write it, or holds CAP_FOWNER: for anyone
    else the kernel reports every page resident (a side-channel guard). Measured here: 100% resident in a
    container without FOWNER while the host's fincore read 0 after an eviction. So no figure is better than
    that one."""
    if not files:
        return {"error": "no served files found"}
    if not has_fowner():
        foreign = [f for f in files if _owner(f) != os.geteuid()]
        if foreign:
            return {
                "error": f"not read: uid {os.geteuid()} without CAP_FOWNER neither owns nor may write {foreign[0]}, "
                "and mincore(2) reports every page of such a file resident"
            }
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        proc = subprocess.run(
            ["fincore", "--json", "--bytes", "--output", "RES,PAGES,SIZE,FILE", *files],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        rows = json.loads(proc.stdout or "{}").get("fincore") or []
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"error": f"fincore: {type(exc).__name__}: {exc}"}
    if not rows:
        return {"error": f"fincore exited {proc.returncode}: {proc.stderr.strip()[:300]}"}
    total = sum(-(-int(r["size"]) // page) for r in rows)
    resident = sum(int(r["pages"]) for r in rows)
    return {
        "files": len(rows),
        "pages": total,
        "resident_pages": resident,
        "size_bytes": sum(int(r["size"]) for r in rows),
        "resident_bytes": resident * page,
        "fraction": resident / total if total else None,
        "per_file": {r["file"]: int(r["pages"]) for r in rows},
    }


class ResidencyReader:
    """Reads residency in a helper process that keeps root's CAP_FOWNER (started before the client drops to the
    runtime user, which runs everything else): one JSON line of files in, one JSON line of residency out."""

    def __init__(self, proc: subprocess.Popen[str] | None = None) -> None:
        self.proc = proc

    @classmethod
    def start(cls) -> ResidencyReader:
        helper = [sys.executable, "-I", str(Path(__file__).resolve()), "--residency-helper"]
        return cls(subprocess.Popen(helper, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))

    def read(self, files: list[str]) -> dict[str, Any]:
        if self.proc is None or self.proc.stdin is None or self.proc.stdout is None:
            return residency(files)
        try:
            self.proc.stdin.write(json.dumps(files) + "\n")
            self.proc.stdin.flush()
            got: dict[str, Any] = json.loads(self.proc.stdout.readline() or "{}")
            return got or {"error": f"the residency helper exited ({self.proc.poll()})"}
        except (OSError, ValueError) as exc:
            return {"error": f"the residency helper: {type(exc).__name__}: {exc}"}

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.wait(10)


def residency_helper() -> int:
    """--residency-helper: residency() of each JSON list of files read from stdin, as a JSON line on stdout."""
    for line in sys.stdin:
        print(json.dumps(residency(list(json.loads(line)))), flush=True)
    return 0


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


def engine_io(engine_pid: int = 1) -> dict[str, Any]:
    """Read volume so far of every process of the serving container: `engine_pid` (its init, in this container's
    view of PIDs: the host's, serving/bench.py) and its descendants. /proc/<pid>/io's rchar (read syscalls,
    page-cache hits included) and read_bytes (what the block layer was asked to read); pids that could not be
    read are named with the reason."""
    parents: dict[int, int] = {}
    comms: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comms[int(d.name)] = stat[stat.find("(") + 1 : stat.rfind(")")]
        parents[int(d.name)] = int(stat[stat.rfind(")") + 2 :].split()[1])

    def under(pid: int) -> bool:
        seen = 0
        while pid != engine_pid and parents.get(pid, 0) not in (0, pid) and seen < 4096:
            pid, seen = parents[pid], seen + 1
        return pid == engine_pid

    out: dict[str, Any] = {"pids": {}, "unreadable": {}}
    for pid in sorted(p for p in parents if under(p)):
        try:
            text = (Path("/proc") / str(pid) / "io").read_text()
            fields: dict[str, str] = dict(line.split(": ", 1) for line in text.splitlines())
            reading: dict[str, Any] = {"comm": comms[pid]}
            reading.update({k: int(v) for k, v in fields.items() if k in ("rchar", "read_bytes", "syscr")})
            out["pids"][str(pid)] = reading
        except (OSError, ValueError) as exc:
            out["unreadable"][str(pid)] = f"{comms.get(pid, '?')}: {getattr(exc, 'strerror', None) or exc}"
    return out


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
    """The knee search (serving/knee.py decides the loads; serving/knee_runs.py sizes each run to hold its load for
    the search's duration and says what a run shows after its ramp-up): each step's runs at its load, each run's
    outcome recorded, then the steady runs that check the answer (the knee must hold, the load above it must
    fail). The runs made go into client.json ("search_runs", with the ids, points and seeds the report reads), the
    search's result into out/search.json."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import knee  # type: ignore[import-not-found]  # serving/knee.py, copied beside this file
    import knee_runs  # type: ignore[import-not-found]  # serving/knee_runs.py, copied beside this file

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
            # As the report judges it (serving/bench_runs.py): the cache served more of the prefill than chance.
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
    if argv == ["--residency-helper"]:
        return residency_helper()
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
    # Started as root with FOWNER, SETUID and SETGID only (serving/bench.py): the residency reader keeps root's
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
