"""One evidence bundle: every sampler, the metrics, stacks, kernel waits and host state over one window.

Runs in the probe container beside vLLM (its PID namespace, its network namespace for `/metrics`, the host's
cgroup tree read-only, the served files read-only, one writable output directory). Every reading carries
`time.monotonic()` (one clock for every container on the host) and UTC wall time, so a slow request seen
in the metrics can be matched to what the CPUs, disks and threads were doing at that second.

Order of work: host state and `/metrics` before; then, for SECONDS, the samplers, a `/metrics` scrape
every second (gauges and per-second latency), wchan sampling, perf on the compute process, and py-spy
dumps spread over the window; then `/metrics` and host state after. The bundle:

  bundle.json            what ran, each part's status (successful / failed / skipped: reason), the window
  summary.txt            the plain-text summary (also printed)
  timeline.html          plots of GPU, CPU, I/O, request latency and queue against time (self-contained; drawn on
                         the controller from timeline.json once fetched: serving/capture_report.py)
  timeline.json          the series behind the plots, traceable to the files below
  samplers/              vmstat.log iostat.log pidstat.log nvml.log or nvidia-smi.log (stamped lines), samplers.json
  metrics/               before.prom after.prom scrapes/NNNN.prom delta.json delta.txt gauges.json
  stacks/                py-spy dumps (raw JSON), aggregate.txt, aggregate.json, speedscope recordings
  kernel/                perf data and report, wchan.json, wchan.txt
  host-state/            before/ and after/ snapshots, cgroup-delta.json

`make probe PROBE=<part>` runs the same with one part (`--only`).

  python -m probes.capture --out DIR --seconds N [--only stacks,metrics] [--metrics-url URL]
                           [--data-file F ...] [--cgroup-root DIR] [--stack-dumps 3] [--record-seconds 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tarfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from probes import cutshort, hoststate, kernel, load, metrics, procs, progress, samplers, stacks, summary
from probes.parts import DEFAULT_PARTS, PARTS
from probes.report_input import OPTIONAL_PANEL_KEYS, PANEL_KEYS
from probes.timeline import (
    LATENCY_SERIES,
    cgroup_notes,
    gauge_series,
    gpu_health,
    gpu_links,
    kv_cache_figures,
    kv_cache_series,
    latency_series,
    perf_events,
    perf_lag_notes,
    preemption_events,
    sampler_panels,
    summary_figures,
)

SCHEMA_VERSION = 1
METRICS_TIMEOUT_S = 5.0
MAX_SCRAPES = 1200
PERF_END_MARGIN_S = 0.25
# Exit status of a capture that broke (an exception outside any part); 1 is a part that failed, 2 bad input.
EXIT_CAPTURE_ERROR = 4

Status = Literal["successful", "failed", "skipped"]


class CaptureInputError(ValueError):
    """Bad input: nothing was captured."""


@dataclass
class PartStatus:
    status: Status
    reason: str | None = None
    files: list[str] = field(default_factory=list)


@dataclass
class CaptureConfig:
    out: Path
    seconds: float
    parts: tuple[str, ...] = DEFAULT_PARTS
    metrics_url: str = "http://127.0.0.1:8000/metrics"
    data_files: tuple[Path, ...] = ()
    cgroup_root: Path = Path("/sys/fs/cgroup")
    proc_root: Path = Path("/proc")
    stack_dumps: int = 3
    record_seconds: int = 0
    perf_seconds: int = 10
    wchan_rate_hz: float = 10.0
    host: str = "localhost"
    container: str = "refdeploy-vllm"
    # Why no data file was given (the page-cache reading is skipped with it); "" when files were given.
    data_file_note: str = ""
    # The class's PCIe link (generation, width) that a busy GPU must reach; None where no class says.
    pcie_min: tuple[int, int] | None = None
    # The requests the capture sends through its window (make capture WORKLOAD=...); None: it only watches.
    load: load.LoadSpec | None = None


def scrape(url: str) -> tuple[str, float, float]:
    """GET /metrics: (text, monotonic_s, unix_s) read when the response arrived."""
    with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as resp:
        text = str(resp.read().decode())
    return text, time.monotonic(), time.time()


class _Poller(threading.Thread):
    """Scrape /metrics every `period_s` until stopped; keep parsed snapshots and the raw texts on disk."""

    def __init__(self, url: str, out_dir: Path, period_s: float = 1.0) -> None:
        super().__init__(name="metrics-poller", daemon=True)
        self.url, self.out_dir, self.period_s = url, out_dir, period_s
        self.stop_event = threading.Event()
        self.snapshots: list[metrics.Snapshot] = []
        self.errors: list[str] = []

    def run(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        while not self.stop_event.is_set() and len(self.snapshots) < MAX_SCRAPES:
            t0 = time.monotonic()
            try:
                text, mono, unix = scrape(self.url)
                (self.out_dir / f"{len(self.snapshots):04d}.prom").write_text(text)
                self.snapshots.append(metrics.snapshot_from_text(text, mono, unix))
            except (OSError, ValueError) as e:
                self.errors.append(f"{time.monotonic():.3f} {e}")
            self.stop_event.wait(max(0.0, self.period_s - (time.monotonic() - t0)))


def _thread(target: Callable[[], None], name: str, crashed: dict[str, str]) -> threading.Thread:
    """Run a part in a thread; an exception is recorded against the part, never lost."""

    def guarded() -> None:
        try:
            target()
        except Exception as e:  # a probe must not take the bundle down with it
            crashed[name] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=guarded, name=name, daemon=True)
    t.start()
    return t


def _check_input(cfg: CaptureConfig) -> list[procs.VllmProcess]:
    """The vLLM processes to capture, or CaptureInputError before anything is written."""
    unknown = sorted(set(cfg.parts) - set(PARTS))
    if unknown:
        raise CaptureInputError(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    if cfg.seconds <= 0:
        raise CaptureInputError(f"--seconds must be positive, got {cfg.seconds:g}")
    if cfg.out.exists() and any(cfg.out.iterdir()):
        raise CaptureInputError(f"{cfg.out} is not empty: a bundle goes into a new directory")
    found = procs.discover(cfg.proc_root)
    if not found:
        raise CaptureInputError(procs.NO_VLLM)
    for f in cfg.data_files:
        if not f.is_file():
            raise CaptureInputError(f"--data-file {f}: not a regular file (mount the served files read-only)")
    return found


class _Capture:
    """One capture, in the order it runs: the state before, the window (samplers, scrapes, and the parts that
    run in threads beside the stack dumps), what each part reported, the state after, and the bundle."""

    def __init__(self, cfg: CaptureConfig, found: list[procs.VllmProcess]) -> None:
        self.cfg, self.found = cfg, found
        self.pids = [p.pid for p in found]
        self.parts: dict[str, PartStatus] = {
            p: PartStatus("failed", "it reported no result (still running when the capture ended?)")
            if p in cfg.parts
            else PartStatus("skipped", "not part of this capture")
            for p in PARTS
        }
        self.events: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.mdir, self.sdir = cfg.out / "metrics", cfg.out / "samplers"
        self.hs_before: Any = None
        self.before_snap: metrics.Snapshot | None = None
        self.sset: samplers.SamplerSet | None = None
        self.poller: _Poller | None = None
        self.threads: list[threading.Thread] = []
        self.crashed: dict[str, str] = {}
        self.wchan_res: list[kernel.WchanResult] = []
        self.perf_res: list[kernel.PerfResult] = []
        self.rec_res: list[stacks.RecordResult] = []
        self.stacks_res: Any = None
        self.results: dict[str, samplers.SamplerResult] = {}
        self.summary: dict[str, float | None] = {}
        self.latency: dict[str, list[tuple[float, float]]] = {k: [] for k in LATENCY_SERIES}
        self.queue: dict[str, list[tuple[float, float]]] = {"running": [], "waiting": []}
        self.kv_cache: dict[str, list[tuple[float, float]]] = {"KV cache used": []}
        self.stop = threading.Event()
        self.load_proc: subprocess.Popen[bytes] | None = None
        self.requests: dict[str, Any] | None = None
        self.spans: list[dict[str, Any]] = []
        self.in_flight: list[tuple[float, int]] = []

    def _host_state(self) -> Any:
        c = self.cfg
        files = list(c.data_files)
        return hoststate.snapshot(self.pids, files, c.proc_root, c.cgroup_root, no_data_files=c.data_file_note)

    def before(self) -> None:
        """The host state and one /metrics scrape, before the window opens."""
        cfg = self.cfg
        if "hoststate" in cfg.parts:
            self.hs_before = self._host_state()
            hoststate.write_host_state(self.hs_before, cfg.out / "host-state" / "before")
        if "metrics" in cfg.parts:
            self.mdir.mkdir(parents=True)
            try:
                text, mono, unix = scrape(cfg.metrics_url)
                (self.mdir / "before.prom").write_text(text)
                self.before_snap = metrics.snapshot_from_text(text, mono, unix)
            except (OSError, ValueError) as e:
                self.parts["metrics"] = PartStatus("failed", f"GET {cfg.metrics_url}: {e}")

    def open_window(self) -> None:
        """Stamp the window's opening (a capture cut short is indexed from it), start the samplers and the
        per-second scrapes, and the parts that run in threads: wchan, perf of every rank, py-spy record."""
        cfg = self.cfg
        self.start = samplers.stamp()
        self.t0 = self.start[0]
        started = {
            "schema_version": SCHEMA_VERSION,
            "host": cfg.host,
            "container": cfg.container,
            "requested_parts": list(cfg.parts),
            "processes": [asdict(p) for p in self.found],
            "window": {"start_wall": self.start[1], "start_mono_s": self.t0, "seconds_planned": cfg.seconds},
        }
        (cfg.out / cutshort.STARTED).write_text(json.dumps(started, indent=2) + "\n")
        if "samplers" in cfg.parts:
            self.sdir.mkdir(parents=True)
            specs = samplers.build_specs(samplers.SAMPLER_NAMES, self.pids)
            self.sset = samplers.SamplerSet(specs, self.sdir, samplers.DEFAULT_MAX_BYTES)
            self.sset.start()
        if self.before_snap is not None:
            self.poller = _Poller(cfg.metrics_url, self.mdir / "scrapes")
            self.poller.start()
        if cfg.load is not None:
            # Its own process, so its own interpreter lock (probes/load.py main says why).
            argv = [sys.executable, "-m", "probes.load", "--spec-json", json.dumps(asdict(cfg.load)),
                    "--stop-at", repr(self.t0 + cfg.seconds), "--out", str(cfg.out)]  # fmt: skip
            with (cfg.out / "requests.stderr.txt").open("wb") as err:
                self.load_proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        if "wchan" in cfg.parts:

            def wchan() -> None:
                self.wchan_res.append(
                    kernel.sample_wchan(self.found, cfg.seconds, cfg.wchan_rate_hz, cfg.proc_root, self.stop)
                )

            self.threads.append(_thread(wchan, "wchan", self.crashed))
        if "perf" in cfg.parts:
            # Every worker rank (each its own process), else the engine core: a slow rank shows beside the others.
            # Each records until PERF_END_MARGIN_S before the window (or its perf_seconds) ends, counted when it
            # starts: a recording that started 0.1 s in for the window's whole length ended after the window.
            perf_end = self.t0 + min(cfg.seconds, cfg.perf_seconds) - PERF_END_MARGIN_S
            for target in kernel.perf_targets(self.found):

                def perf(pid: int = target.pid) -> None:
                    # At least a second of recording, ending at perf_end however late perf starts its workload.
                    until = max(perf_end, time.monotonic() + 1.0)
                    seconds = until - time.monotonic()
                    self.perf_res.append(kernel.perf_capture(pid, seconds, cfg.out / "kernel", until_mono=until))

                self.threads.append(_thread(perf, f"perf-{target.pid}", self.crashed))
        if "record" in cfg.parts:
            rec_s = max(1, int(min(cfg.seconds, cfg.record_seconds or cfg.seconds)))
            self.events.append({"t_s": round(time.monotonic() - self.t0, 3), "label": f"py-spy record {rec_s} s"})

            def record() -> None:
                self.rec_res.append(stacks.record(self.found[0], rec_s, 100, cfg.out / "stacks", subprocesses=True))

            self.threads.append(_thread(record, "record", self.crashed))

    def through_window(self) -> None:
        """The stack dumps, spread over the window at (i + 0.5) / N of it; then the window closes."""
        cfg = self.cfg
        if "stacks" in cfg.parts:
            n = max(1, cfg.stack_dumps)
            interval = cfg.seconds / n
            time.sleep(interval / 2)
            label = f"py-spy dumps x{n}, {interval:.1f} s apart"
            self.events.append({"t_s": round(time.monotonic() - self.t0, 3), "label": label})
            self.stacks_res = stacks.run_stacks(self.found, cfg.out / "stacks", n, interval)
        self.stop.wait(max(0.0, self.t0 + cfg.seconds - time.monotonic()))
        self.stop.set()
        self.end = samplers.stamp()
        self.results = self.sset.stop() if self.sset else {}
        if self.poller:
            self.poller.stop_event.set()
            self.poller.join(METRICS_TIMEOUT_S + 1)
        for t in self.threads:
            t.join(cfg.perf_seconds + 60)

    def request_results(self) -> None:
        """The requests the capture sent: waited for (those in flight when the window closed), written, and
        drawn as spans and an in-flight count relative to the window's start."""
        spec, proc = self.cfg.load, self.load_proc
        if spec is None or proc is None:
            return
        progress.say(f"capture: waiting for the requests still in flight (at most {spec.timeout_s:g} s each)")
        try:
            rc = proc.wait(spec.timeout_s + load.CONNECT_TIMEOUT_S + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        err = self.cfg.out / "requests.stderr.txt"
        try:
            records = load.read_records(self.cfg.out)
            self.requests = json.loads((self.cfg.out / load.SUMMARY_FILE).read_text())
        except (OSError, ValueError) as e:
            why = err.read_text(errors="replace").strip().splitlines()[-1:] if err.is_file() else []
            self.notes.append(f"requests: the client (exit {rc}) left no records ({e}) {' '.join(why)}".strip())
            self.requests = {"sent": 0, "completed": 0, "failed": 0, "claimed": 0}
            return
        if err.is_file() and not err.read_text().strip():
            err.unlink()
        t0 = self.t0

        def rel(x: float | None) -> float | None:
            return None if x is None else round(x - t0, 4)

        self.spans = [
            {"id": r.id, "lane": r.client, "start_s": rel(r.t0_mono_s), "first_token_s": rel(r.first_token_mono_s),
             "end_s": rel(r.end_mono_s), "ok": r.ok}
            for r in records
        ]  # fmt: skip
        self.in_flight = load.in_flight_series(records, t0)
        req = self.requests
        self.summary.update({
            "capture_requests_sent": req["sent"], "capture_requests_completed": req["completed"],
            "capture_requests_failed": req["failed"], "capture_requests_one_burst": req["one_burst"],
            "capture_ttft_p50_ms": req["ttft_ms_p50"],
            "capture_ttft_p99_ms": req["ttft_ms_p99"], "capture_tpot_p50_ms": req["tpot_ms_p50"],
            "capture_tpot_p99_ms": req["tpot_ms_p99"],
        })  # fmt: skip
        if req.get("one_burst"):
            self.notes.append(
                f"requests: {req['one_burst']} of {req['completed']} got all their tokens within "
                f"{load.ONE_BURST_S * 1000:g} ms of each other: the server sent them together (its API process "
                "fell behind the engine), so the client's TPOT of those is not the decode's"
            )
        failed = [r for r in records if not r.ok]
        if failed:
            self.notes.append(f"requests: {len(failed)} of {len(records)} failed; the first: {failed[0].error}")
        if req["claimed"] != req["sent"]:
            self.notes.append(
                f"requests: {req['claimed']} were started but {req['sent']} recorded: a client outlived its bound"
            )

    def sampler_results(self) -> None:
        if self.sset:
            results = self.results
            samplers.write_results(self.sdir, results, self.pids, self.start, self.end)
            bad = [r for r in results.values() if r.status == "failed"]
            self.parts["samplers"] = PartStatus(
                "failed" if bad else "successful",
                "; ".join(f"{r.name}: {r.reason}" for r in bad) or None,
                [f"samplers/{r.log}" for r in results.values() if r.log] + ["samplers/samplers.json"],
            )
            for r in results.values():
                if r.status == "skipped":
                    self.notes.append(f"sampler {r.name}: skipped: {r.reason}")
        self.links = gpu_links(self.sdir, self.cfg.pcie_min)
        self.notes.extend(self.links["flags"])
        self.health = gpu_health(self.sdir, self.t0, self.end[0])  # XID events and PCIe replays (NVML)
        self.notes.extend(self.health["notes"])
        self.events.extend(self.health["events"])

    def metrics_after(self) -> None:
        """The closing scrape, the window's delta, its summary figures and the per-second series."""
        if self.before_snap is None or self.poller is None:
            return
        mdir, url = self.mdir, self.cfg.metrics_url
        try:
            text, mono, unix = scrape(url)
            (mdir / "after.prom").write_text(text)
            after_snap = metrics.snapshot_from_text(text, mono, unix)
            d = metrics.delta(self.before_snap, after_snap)
            (mdir / "delta.json").write_text(json.dumps(metrics.to_json(d), indent=2) + "\n")
            (mdir / "delta.txt").write_text(metrics.summarize(d))
            self.summary.update(summary_figures(d))
            snaps = [self.before_snap, *self.poller.snapshots, after_snap]
            self.summary.update(kv_cache_figures(snaps))
            self.latency = latency_series(snaps, self.t0)
            self.queue = gauge_series(snaps, self.t0)
            self.kv_cache = kv_cache_series(snaps, self.t0)
            self.events.extend(preemption_events(snaps, self.t0))
            gs = metrics.GaugeSeries()
            for s in snaps:
                gs.add(s)
            (mdir / "gauges.json").write_text(json.dumps(gs.to_json(), indent=2) + "\n")
            status: Status = "failed" if d.reset_detected else "successful"
            self.parts["metrics"] = PartStatus(
                status,
                "the server restarted in the window" if d.reset_detected else None,
                [f"metrics/{f}" for f in ("before.prom", "after.prom", "delta.json", "delta.txt", "gauges.json")]
                + ["metrics/scrapes/"],
            )
            if self.poller.errors:
                n, first = len(self.poller.errors), self.poller.errors[0]
                self.notes.append(f"metrics: {n} scrape(s) failed in the window: {first}")
        except (OSError, ValueError) as e:
            self.parts["metrics"] = PartStatus("failed", f"GET {url} after the window: {e}")

    def thread_results(self) -> None:
        """What the parts that ran beside the window reported (a crash is its part's failure)."""
        out, parts = self.cfg.out, self.parts
        for name, why in self.crashed.items():
            parts[name] = PartStatus("failed", f"the probe crashed: {why}")
        if self.stacks_res is not None:
            files = ["stacks/aggregate.txt", "stacks/aggregate.json", "stacks/result.json"]
            parts["stacks"] = PartStatus(self.stacks_res.status, self.stacks_res.reason, files)
        if self.wchan_res:
            w = self.wchan_res[0]
            kernel.write_wchan(w, out / "kernel")
            parts["wchan"] = PartStatus(w.status, w.reason, ["kernel/wchan.txt", "kernel/wchan.json"])
        if "perf" in self.cfg.parts:
            self._perf_results()
        if self.rec_res:
            rr = self.rec_res[0]
            parts["record"] = PartStatus(rr.status, rr.reason, [f"stacks/{rr.file}"] if rr.file else [])

    def _perf_results(self) -> None:
        perf_res = self.perf_res
        self.events.extend(perf_events(perf_res, self.found, self.t0, self.end[0]))
        self.notes.extend(perf_lag_notes(perf_res, self.found, self.t0, self.end[0]))
        perf_crashed = {k: v for k, v in self.crashed.items() if k.startswith("perf-")}
        for k in perf_crashed:
            self.crashed.pop(k)
        failures = sum(r.status == "failed" for r in perf_res) + len(perf_crashed)
        if perf_res or perf_crashed:
            perf_status: Status = (
                "failed"
                if failures
                else ("successful" if any(r.status == "successful" for r in perf_res) else "skipped")
            )
            reasons = [f"pid {r.pid}: {r.reason}" for r in perf_res if r.reason] + [
                f"{k}: the probe crashed: {v}" for k, v in perf_crashed.items()
            ]
            self.parts["perf"] = PartStatus(
                perf_status, "; ".join(reasons) or None, [f"kernel/{f}" for r in perf_res for f in r.files]
            )

    def after(self) -> None:
        """The host state after the window, and the cgroup's delta over it."""
        if self.hs_before is None:
            return
        out = self.cfg.out
        hs_after = self._host_state()
        hoststate.write_host_state(hs_after, out / "host-state" / "after")
        cg = hoststate.host_state_cgroup_delta(self.hs_before, hs_after)
        (out / "host-state" / "cgroup-delta.json").write_text(json.dumps(cg, indent=2, default=str) + "\n")
        self.notes.extend(cgroup_notes(cg))
        self.parts["hoststate"] = PartStatus(
            "successful", None, ["host-state/before/", "host-state/after/", "host-state/cgroup-delta.json"]
        )

    def _panels(self) -> dict[str, Any]:
        panels = sampler_panels(self.sdir, self.results, self.found, self.t0, self.end[0])
        m = self.parts["metrics"]
        panels["latency"] = {
            "title": "Request latency (mean per second, from /metrics)",
            "unit": "ms",
            "status": m.status,
            "reason": m.reason,
            "source": "vllm:*_seconds histograms, scraped every second (metrics/scrapes/)",
            "series": {k: [[round(t, 3), round(v, 3)] for t, v in s] for k, s in self.latency.items()},
        }
        panels["queue"] = {
            "title": "Requests in the engine",
            "unit": "requests",
            "status": m.status,
            "reason": m.reason,
            "source": "vllm:num_requests_running / _waiting (metrics/gauges.json)",
            "series": {k: [[round(t, 3), v] for t, v in s] for k, s in self.queue.items()},
        }
        panels["cache"] = {
            "title": "KV cache in use (preemptions marked)",
            "unit": "%",
            "status": m.status,
            "reason": m.reason,
            "source": "vllm:kv_cache_usage_perc, and vllm:num_preemptions_total's increases (metrics/scrapes/)",
            "series": {k: [[round(t, 3), v] for t, v in s] for k, s in self.kv_cache.items()},
        }
        if self.requests is not None:
            spec = self.cfg.load
            panels["requests"] = {
                "title": "Requests the capture sent (one lane per client; first token marked)",
                "unit": "requests",
                "status": "successful" if self.requests["sent"] else "failed",
                "reason": None if self.requests["sent"] else "no request was sent in the window",
                "source": f"{load.REQUESTS_FILE} (workload {spec.workload if spec else '?'}, CLOCK_MONOTONIC)",
                "series": {"in flight": [[t, v] for t, v in self.in_flight]},
                "spans": self.spans,
            }
        return panels

    def write(self) -> dict[str, Any]:
        """timeline.json, bundle.json and summary.txt (the page is drawn on the controller)."""
        cfg, parts = self.cfg, self.parts
        for name, ps in parts.items():
            if name in cfg.parts and ps.status != "successful":
                self.notes.append(f"{name}: {ps.status}: {ps.reason}")
        panels = self._panels()
        t0, t1 = self.t0, self.end[0]
        artifacts = {"timeline": "timeline.html", "bundle index": "bundle.json"}
        artifacts.update({name: ps.files[0] for name, ps in parts.items() if ps.files})
        timeline = {
            "schema_version": 1,
            "host": cfg.host,
            "container": cfg.container,
            "window": {
                "start_wall": self.start[1],
                "end_wall": self.end[1],
                "start_mono_s": t0,
                "end_mono_s": t1,
                "seconds": round(t1 - t0, 3),
            },
            "panels": {k: panels[k] for k in (*PANEL_KEYS, *OPTIONAL_PANEL_KEYS) if k in panels},
            "events": sorted(self.events, key=lambda e: e["t_s"]),
            "summary": self.summary,
            "notes": self.notes,
            "artifacts": artifacts,
        }
        (cfg.out / "timeline.json").write_text(json.dumps(timeline, indent=2) + "\n")
        bundle = {
            "schema_version": SCHEMA_VERSION,
            "host": cfg.host,
            "container": cfg.container,
            "window": timeline["window"],
            "processes": [asdict(p) for p in self.found],
            "requested_parts": list(cfg.parts),
            "gpu_links": self.links,
            "gpu_health": self.health,
            "requests": self.requests,
            "parts": {k: asdict(v) for k, v in parts.items()},
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        }
        (cfg.out / "bundle.json").write_text(json.dumps(bundle, indent=2, default=str) + "\n")
        summary.write_summary(cfg.out)
        return bundle


def _say_window(c: _Capture, every_s: float = 5.0) -> None:
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
    found = _check_input(cfg)
    if cfg.load is not None:
        try:
            load.Load(cfg.load)  # the key file reads: checked before anything is written
        except load.LoadInputError as e:
            raise CaptureInputError(str(e)) from None
    cfg.out.mkdir(parents=True, exist_ok=True)
    c = _Capture(cfg, found)
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
    return c.write()


def exit_code(bundle: Mapping[str, Any]) -> int:
    """0 when every requested part succeeded or was skipped with a reason; 1 when one failed."""
    return 1 if any(bundle["parts"][p]["status"] == "failed" for p in bundle["requested_parts"]) else 0


def pack(out: Path, archive: Path) -> None:
    """The bundle as one gzipped tar beside it (top-level directory `bundle`), written under a temporary name and
    renamed, so an archive that exists is whole. In the capture container, which the CPU weight it is given keeps
    from being starved by a busy engine (serving/probe_plan.py PROBE_CPU_SHARES): as an Ansible task on the host
    the same tar took 10.4 s under load."""
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        tar.add(out, arcname="bundle")
    tmp.replace(archive)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.capture", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--only", default=",".join(DEFAULT_PARTS), help=f"comma-separated parts of {','.join(PARTS)}")
    ap.add_argument("--metrics-url", default="http://127.0.0.1:8000/metrics")
    ap.add_argument("--data-file", type=Path, action="append", default=[])
    ap.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"))
    ap.add_argument("--stack-dumps", type=int, default=3)
    ap.add_argument("--record-seconds", type=int, default=0, help="add py-spy record for this long (0: no)")
    ap.add_argument("--perf-seconds", type=int, default=10)
    ap.add_argument("--host", default="localhost")
    ap.add_argument("--container", default="refdeploy-vllm")
    ap.add_argument("--data-file-note", default="", help="why no --data-file is given (the page-cache reading says it)")
    ap.add_argument("--pcie-min-gen", type=int, help="the class's PCIe generation a busy GPU's link must reach")
    ap.add_argument("--pcie-min-width", type=int, default=16, help="the class's PCIe link width")
    ap.add_argument("--archive", type=Path, help="pack the bundle into this .tar.gz when it ends, whatever its exit")
    ap.add_argument("--workload-json", default="", help="send this workload's requests in the window (probes/load.py)")
    args = ap.parse_args(argv)
    parts = tuple(p for p in args.only.split(",") if p)
    if args.record_seconds > 0 and "record" not in parts:
        parts += ("record",)
    cfg = CaptureConfig(
        out=args.out,
        seconds=args.seconds,
        parts=parts,
        metrics_url=args.metrics_url,
        data_files=tuple(args.data_file),
        cgroup_root=args.cgroup_root,
        stack_dumps=args.stack_dumps,
        record_seconds=args.record_seconds,
        perf_seconds=args.perf_seconds,
        host=args.host,
        container=args.container,
        data_file_note=args.data_file_note,
        pcie_min=(args.pcie_min_gen, args.pcie_min_width) if args.pcie_min_gen else None,
    )
    code = _run(cfg, args.out, args.workload_json)
    if args.archive is not None and code != 2 and args.out.is_dir():
        try:
            pack(args.out, args.archive)
        except OSError as e:
            print(f"capture: could not pack the bundle into {args.archive}: {e}", file=sys.stderr)
    return code


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
