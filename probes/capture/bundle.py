"""One evidence bundle: every sampler, the metrics, stacks, kernel waits and host state over one window.

Runs in the probe container beside vLLM (its PID namespace, its network namespace for `/metrics`, the host's
cgroup tree read-only, the served files read-only, one writable output directory). Every reading carries
`time.monotonic()` (one clock for every container on the host) and UTC wall time, so a slow request seen
in the metrics can be matched to what the CPUs, disks and threads were doing at that second.

Order of work: host state and `/metrics` before; then, for SECONDS, the samplers, a `/metrics` scrape
every second (gauges and per-second latency), wchan sampling, perf on the compute process, and py-spy
dumps spread over the window; then `/metrics` and host state after (the steps: probes/capture/steps.py; what
a capture is asked for, and the input checked first: probes/capture/config.py). The bundle:

  bundle.json            what ran, each part's status (successful / failed / skipped: reason), the window
  summary.txt            the plain-text summary (also printed)
  timeline.html          plots of GPU, CPU, I/O, request latency and queue against time (self-contained; drawn on
                         the controller from timeline.json once fetched: serving/evidence/capture_report.py)
  timeline.json          the series behind the plots, traceable to the files below
  samplers/              vmstat.log iostat.log pidstat.log nvml.log or nvidia-smi.log (stamped lines), samplers.json
  metrics/               before.prom after.prom scrapes/NNNN.prom delta.json delta.txt gauges.json
  stacks/                py-spy dumps (raw JSON), aggregate.txt, aggregate.json, speedscope recordings
  kernel/                perf data and report, wchan.json, wchan.txt
  host-state/            before/ and after/ snapshots, cgroup-delta.json
  ranks/                 each worker rank's steps in the window (the patched runtime's rank trace, where it is on)

`make probe PROBE=<part>` runs the same with one part (`--only`).

  python -m probes.capture.bundle --out DIR --seconds N [--only stacks,metrics]
      [--metrics-url URL] [--metrics-socket PATH]
                           [--data-file F ...] [--cgroup-root DIR] [--stack-dumps 3] [--record-seconds 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.base import progress
from probes.base.unix_http import VLLM_SOCKET
from probes.capture import summary
from probes.capture.config import CaptureConfig, CaptureInputError, check_input
from probes.capture.parts import DEFAULT_PARTS, PARTS
from probes.capture.steps import Capture
from probes.senders import load

# Exit status of a capture that broke (an exception outside any part); 1 is a part that failed, 2 bad input.
EXIT_CAPTURE_ERROR = 4


def _say_window(c: Capture, every_s: float = 5.0) -> None:
    """A progress line every few seconds while the window is open: how much of it is left."""

    def tick() -> None:
        progress.say(f"capture: window open, {c.cfg.seconds:g} s left of {c.cfg.seconds:g} s")
        while not c.stop.wait(every_s):
            left = c.t0 + c.cfg.seconds - time.monotonic()
            if left <= 0:
                progress.say("capture: the window has ended; waiting for its parts to finish")
                return
            progress.say(f"capture: window open, {left:.0f} s left of {c.cfg.seconds:g} s")

    threading.Thread(target=tick, name="capture-progress", daemon=True).start()


def run_capture(cfg: CaptureConfig) -> dict[str, Any]:
    """One evidence bundle in cfg.out: the window's samplers, scrapes, stacks, wchan, perf and host state."""
    found = check_input(cfg)
    if cfg.load is not None:
        try:
            load.Load(cfg.load)  # the key file reads: checked before anything is written
        except load.LoadInputError as e:
            raise CaptureInputError(str(e)) from None
    cfg.out.mkdir(parents=True, exist_ok=True)
    c = Capture(cfg, found)
    progress.say(f"capture: the state before the window ({', '.join(cfg.parts)})")
    c.before()
    c.open_window()
    _say_window(c)
    c.through_window()
    progress.say("capture: the window closed; reading what the parts wrote")
    c.sampler_results()
    # The requests still in flight first: the closing /metrics scrape then counts every request the capture sent.
    c.request_results()
    c.metrics_after()
    c.thread_results()
    c.after()
    c.rank_steps()
    return c.write()


def exit_code(bundle: Mapping[str, Any]) -> int:
    """0 when every requested part succeeded or was skipped with a reason; 1 when one failed."""
    return 1 if any(bundle["parts"][p]["status"] == "failed" for p in bundle["requested_parts"]) else 0


def pack(out: Path, archive: Path) -> None:
    """The bundle as one gzipped tar beside it (top-level directory `bundle`), written under a temporary name and
    renamed, so an archive that exists is whole. In the capture container, which the CPU weight it is given keeps
    from being starved by a busy engine (serving/evidence/probe_plan.py PROBE_CPU_SHARES): as an Ansible task on the
    host the same tar took 10.4 s under load."""
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        tar.add(out, arcname="bundle")
    tmp.replace(archive)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.capture.bundle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--only", default=",".join(DEFAULT_PARTS), help=f"comma-separated parts of {','.join(PARTS)}")
    ap.add_argument("--metrics-url", default="http://localhost/metrics")
    # vLLM's unix socket inside this container ("" for metrics_url over TCP).
    ap.add_argument("--metrics-socket", default=VLLM_SOCKET)
    ap.add_argument("--data-file", type=Path, action="append", default=[])
    ap.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"))
    ap.add_argument("--stack-dumps", type=int, default=3)
    ap.add_argument("--record-seconds", type=int, default=0, help="add py-spy record for this long (0: no)")
    ap.add_argument("--perf-seconds", type=int, default=10)
    ap.add_argument("--host", default="localhost")
    ap.add_argument("--container", default="refdeploy-vllm")
    ap.add_argument("--data-file-note", default="", help="why no --data-file is given (the page-cache reading says it)")
    ap.add_argument("--perf-skip-note", default="", help="why perf is skipped: it was given no capability")
    ap.add_argument("--pcie-min-gen", type=int, help="the class's PCIe generation a busy GPU's link must reach")
    ap.add_argument("--pcie-min-width", type=int, default=16, help="the class's PCIe link width")
    ap.add_argument("--rank-trace-dir", type=Path, help="the engine's per-step rank trace files (patch 0004)")
    ap.add_argument("--archive", type=Path, help="pack the bundle into this .tar.gz when it ends, whatever its exit")
    ap.add_argument(
        "--engine-json", default="", help='the serving container\'s labels: {"profiler": ..., "stand_in": ...}'
    )
    ap.add_argument(
        "--workload-json", default="", help="send this workload's requests in the window (probes/senders/load.py)"
    )
    args = ap.parse_args(argv)
    parts = tuple(p for p in args.only.split(",") if p)
    if args.record_seconds > 0 and "record" not in parts:
        parts += ("record",)
    cfg = CaptureConfig(
        out=args.out,
        seconds=args.seconds,
        parts=parts,
        metrics_url=args.metrics_url,
        metrics_socket=args.metrics_socket or None,
        data_files=tuple(args.data_file),
        cgroup_root=args.cgroup_root,
        stack_dumps=args.stack_dumps,
        record_seconds=args.record_seconds,
        perf_seconds=args.perf_seconds,
        host=args.host,
        container=args.container,
        data_file_note=args.data_file_note,
        perf_skip_note=args.perf_skip_note,
        pcie_min=(args.pcie_min_gen, args.pcie_min_width) if args.pcie_min_gen else None,
        rank_trace_dir=args.rank_trace_dir,
    )
    try:
        cfg.engine = _engine(args.engine_json)
    except ValueError as e:
        print(f"capture: --engine-json: {e}", file=sys.stderr)
        return 2
    code = _run(cfg, args.out, args.workload_json)
    if args.archive is not None and code != 2 and args.out.is_dir():
        try:
            pack(args.out, args.archive)
        except OSError as e:
            print(f"capture: could not pack the bundle into {args.archive}: {e}", file=sys.stderr)
    return code


def _engine(text: str) -> dict[str, str] | None:
    """--engine-json: {"profiler": str, "stand_in": str}, both strings ("" for none); None when not given."""
    if not text:
        return None
    doc = json.loads(text)  # a JSONDecodeError is a ValueError
    if not isinstance(doc, dict) or set(doc) != {"profiler", "stand_in"}:
        raise ValueError(f"give an object with exactly the keys profiler and stand_in, not {text[:80]}")
    return {k: str(v or "") for k, v in doc.items()}


def _run(cfg: CaptureConfig, out: Path, workload_json: str) -> int:
    """The capture and its exit: 0, 1 (a part failed), 2 (bad input: nothing written), 4 (it broke)."""
    try:
        if workload_json:
            cfg.load = load.LoadSpec.from_json(json.loads(workload_json))
        bundle = run_capture(cfg)
    except (CaptureInputError, summary.ReportInputError, load.LoadInputError, json.JSONDecodeError) as e:
        print(f"capture: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a broken capture is not a finding: one line, its own status; the files stay
        with contextlib.suppress(OSError):
            (out / "capture-error.txt").write_text("".join(traceback.format_exception(e)))
        print(
            f"capture: the capture broke ({type(e).__name__}: {e}); what it had written is kept, the traceback in "
            "capture-error.txt. Capture again; if it breaks again, report it with that file",
            file=sys.stderr,
        )
        return EXIT_CAPTURE_ERROR
    print((out / "summary.txt").read_text(), end="")
    return exit_code(bundle)


if __name__ == "__main__":
    sys.exit(main())
