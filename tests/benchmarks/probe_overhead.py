"""Benchmark: what the probes cost the server, as decode tokens/s with and without them.

Not a test: it prints figures and writes every trial to runs/bench/probe-overhead-<UTC>.json.

    .venv/bin/python -m tests.benchmarks.probe_overhead [--pairs 9] [--requests 16] [--concurrency 4]
                                                        [--max-tokens 256] [--only sidecar|record]

Needs the embedded default deployed (`make deploy`), with its samplers sidecar.

Two experiments, each as interleaved pairs on the same running server:
  sidecar  the default sidecar (vmstat, iostat, pidstat on vLLM's PIDs; nvidia-smi where there is one)
           running versus stopped (`docker stop/start refdeploy-vllm-samplers`).
  record   `py-spy record --subprocesses` of the API server, EngineCore and Worker at 100 Hz (the capture's
           on-demand recording) running versus not.
  ranktrace  the patched runtime's per-step rank trace (patch 0004) recording versus paused (its `paused` file
           in the host's trace directory); only with --only ranktrace, on a profile with probes.rank_trace (e.g.
           `make deploy PROFILE=cpu-tiny-pp2`). Paused, the worker still runs the trace's hooks (a check and no-op
           context managers per step), so this is the cost of recording: building, timing and writing each step.
A trial sends `requests` completions, `concurrency` at a time, each `max_tokens` long with ignore_eos, and
takes generated tokens / wall time. Each pair runs both conditions back to back, alternating which goes
first (ABBA), so drift on a noisy machine falls on both sides; the figure is the median of the per-pair
ratios probed / unprobed, and the cost is 1 - that median. One warm-up trial is run and discarded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from probes.base import unix_http

REPO = Path(__file__).resolve().parents[2]
# vLLM's unix socket (it has no address: serving/plan/render.py API_SOCKET_DIR); the host part is the Host header.
SOCKET = "/var/lib/refdeploy/api/refdeploy-vllm/vllm.sock"
URL = "http://localhost/v1/completions"
SERVING = "refdeploy-vllm"
SIDECAR = "refdeploy-vllm-samplers"
RECORDER = "refdeploy-bench-pyspy"


def _docker(*args: str, check: bool = True) -> str:
    cp = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=False)
    if check and cp.returncode != 0:
        raise SystemExit(f"docker {' '.join(args)}: {cp.stderr.strip()}")
    return cp.stdout.strip()


def _complete(max_tokens: int, out: list[int]) -> None:
    body = json.dumps({"model": "tiny-llama", "prompt": "def f(x):", "max_tokens": max_tokens, "ignore_eos": True})
    req = urllib.request.Request(URL, data=body.encode(), headers={"Content-Type": "application/json"})
    with unix_http.opener(SOCKET).open(req, timeout=300) as resp:
        out.append(int(json.loads(resp.read())["usage"]["completion_tokens"]))


def trial(requests: int, concurrency: int, max_tokens: int) -> dict[str, float]:
    """Decode throughput of one batch: generated tokens / wall seconds."""
    tokens: list[int] = []
    queue = list(range(requests))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                queue.pop()
            _complete(max_tokens, tokens)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    if sum(tokens) != requests * max_tokens:
        raise SystemExit(f"expected {requests * max_tokens} tokens, got {sum(tokens)}: is ignore_eos honoured?")
    return {"tokens": float(sum(tokens)), "seconds": seconds, "tok_s": sum(tokens) / seconds}


def _sidecar(on: bool) -> None:
    _docker("start" if on else "stop", SIDECAR)
    if on:
        time.sleep(2.0)  # the samplers are running and past their first report


def _recorder(on: bool, probes_image: str, seconds: int) -> None:
    if on:
        _docker(
            "run",
            "-d",
            "--rm",
            "--name",
            RECORDER,
            "--pid",
            f"container:{SERVING}",
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "SYS_PTRACE",
            "--tmpfs",
            "/tmp",
            probes_image,
            "py-spy",
            "record",
            "--format",
            "speedscope",
            "--output",
            "/tmp/p.json",
            "--duration",
            str(seconds),
            "--rate",
            "100",
            "--pid",
            "1",
            "--subprocesses",
            "--nonblocking",
            "--idle",
        )
        time.sleep(2.0)  # attached to every process
        if _docker("container", "inspect", "--format", "{{.State.Running}}", RECORDER, check=False) != "true":
            raise SystemExit(f"py-spy record did not keep running: {_docker('logs', RECORDER, check=False)}")
    else:
        _docker("rm", "-f", RECORDER, check=False)


RANK_TRACE_MOUNT = "/run/refdeploy/rank-trace"


def _rank_trace_dir() -> Path:
    """The host directory the serving container's rank trace writes to (its bind mount), or exit saying why."""
    mounts = json.loads(_docker("container", "inspect", "--format", "{{json .Mounts}}", SERVING))
    found = [m["Source"] for m in mounts if m.get("Destination") == RANK_TRACE_MOUNT]
    if not found:
        raise SystemExit(f"{SERVING} has no rank trace: deploy a profile with probes.rank_trace (PROFILE=cpu-tiny-pp2)")
    return Path(found[0])


def _rank_trace(on: bool, directory: Path) -> None:
    paused = directory / "paused"
    if on:
        paused.unlink(missing_ok=True)
    else:
        paused.touch()
    time.sleep(1.0)  # the workers look for the file at most every 0.5 s


def experiment(
    name: str, switch: Callable[[bool], None], pairs: int, requests: int, concurrency: int, max_tokens: int
) -> dict[str, Any]:
    rows = []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got: dict[bool, dict[str, float]] = {}
        for on in order:
            switch(on)
            try:
                got[on] = trial(requests, concurrency, max_tokens)
            finally:
                if on:
                    switch(False)
        ratio = got[True]["tok_s"] / got[False]["tok_s"]
        rows.append(
            {
                "pair": i + 1,
                "first": "on" if order[0] else "off",
                "on": got[True],
                "off": got[False],
                "ratio_on_over_off": ratio,
            }
        )
        print(
            f"  {name} pair {i + 1}: on {got[True]['tok_s']:7.1f} tok/s  off {got[False]['tok_s']:7.1f} tok/s  "
            f"ratio {ratio:.4f}  ({'on' if order[0] else 'off'} first)",
            flush=True,
        )
    ratios = [r["ratio_on_over_off"] for r in rows]
    median = statistics.median(ratios)
    return {
        "experiment": name,
        "pairs": rows,
        "median_ratio": median,
        "cost_pct": 100 * (1 - median),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "median_tok_s_on": statistics.median(r["on"]["tok_s"] for r in rows),
        "median_tok_s_off": statistics.median(r["off"]["tok_s"] for r in rows),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--only", choices=["sidecar", "record", "ranktrace"])
    a = ap.parse_args()
    if a.pairs < 5:
        raise SystemExit("--pairs: at least 5 pairs, or the median of ratios means little on a noisy machine")
    sidecar = json.loads(_docker("container", "inspect", SIDECAR, check=False) or "[]")
    if not sidecar:
        raise SystemExit(f"{SIDECAR} is not there: run `make deploy` (with a profile that has sidecar_samplers)")
    probes_image = sidecar[0]["Config"]["Image"]
    serving_image = json.loads(_docker("container", "inspect", SERVING))[0]["Config"]["Image"]
    print("warm-up trial (discarded) ...", flush=True)
    trial(a.requests, a.concurrency, a.max_tokens)
    results = []
    try:
        if a.only == "ranktrace":
            trace_dir = _rank_trace_dir()
            results.append(
                experiment(
                    "ranktrace",
                    lambda on: _rank_trace(on, trace_dir),
                    a.pairs,
                    a.requests,
                    a.concurrency,
                    a.max_tokens,
                )
            )
            _rank_trace(True, trace_dir)
        if a.only in (None, "sidecar"):
            results.append(experiment("sidecar", _sidecar, a.pairs, a.requests, a.concurrency, a.max_tokens))
        if a.only in (None, "record"):
            _sidecar(False)  # measure py-spy alone
            results.append(
                experiment(
                    "record",
                    lambda on: _recorder(on, probes_image, 600),
                    a.pairs,
                    a.requests,
                    a.concurrency,
                    a.max_tokens,
                )
            )
    finally:
        _docker("rm", "-f", RECORDER, check=False)
        _sidecar(True)
    out = REPO / "runs" / "bench" / f"probe-overhead-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"serving_image": serving_image, "probes_image": probes_image, "settings": vars(a), "results": results}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print()
    print(f"{'experiment':<10} {'pairs':>5} {'median on/off':>14} {'cost':>8} {'range of ratios':>17}  tok/s on / off")
    for r in results:
        print(
            f"{r['experiment']:<10} {len(r['pairs']):>5} {r['median_ratio']:>14.4f} {r['cost_pct']:>7.2f}% "
            f"{r['ratio_min']:>8.3f}-{r['ratio_max']:<8.3f}  {r['median_tok_s_on']:.1f} / "
            f"{r['median_tok_s_off']:.1f}"
        )
    print(f"\nraw trials: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
