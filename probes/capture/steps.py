"""One capture's steps, in the order probes/capture/bundle.py runs them (`Capture`): the state before, the window (the
samplers, a /metrics scrape every second, and the parts that run in threads beside the stack dumps), what each part
reported, the state after, and the bundle's files (timeline.json, bundle.json, summary.txt).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probes.base import progress, unix_http
from probes.capture import cutshort, summary
from probes.capture.config import CaptureConfig, PartStatus, Status
from probes.capture.parts import PARTS
from probes.capture.report_input import OPTIONAL_PANEL_KEYS, PANEL_KEYS
from probes.capture.timeline import (
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
from probes.readers import cpus, hoststate, kernel, metrics, procs, rank_steps, samplers, stacks
from probes.senders import load

SCHEMA_VERSION = 1
METRICS_TIMEOUT_S = 5.0
MAX_SCRAPES = 1200
PERF_END_MARGIN_S = 0.25


def scrape(url: str, socket: str | None = None) -> tuple[str, float, float]:
    """GET /metrics (over vLLM's unix socket where `socket` is given): (text, monotonic_s, unix_s) read when the
    response arrived."""
    with unix_http.opener(socket).open(url, timeout=METRICS_TIMEOUT_S) as resp:
        text = str(resp.read().decode())
    return text, time.monotonic(), time.time()


class Poller(threading.Thread):
    """Scrape /metrics every `period_s` until stopped; keep parsed snapshots and the raw texts on disk."""

    def __init__(self, url: str, out_dir: Path, period_s: float = 1.0, socket: str | None = None) -> None:
        super().__init__(name="metrics-poller", daemon=True)
        self.url, self.out_dir, self.period_s, self.socket = url, out_dir, period_s, socket
        self.stop_event = threading.Event()
        self.snapshots: list[metrics.Snapshot] = []
        self.errors: list[str] = []

    def run(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        while not self.stop_event.is_set() and len(self.snapshots) < MAX_SCRAPES:
            t0 = time.monotonic()
            try:
                text, mono, unix = scrape(self.url, self.socket)
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


class Capture:
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
        self.poller: Poller | None = None
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
        self.rank_trace: dict[str, Any] | None = None
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
            # Per-CPU time and each vLLM thread's affinity, here and after the window (probes/readers/cpus.py).
            cpus.write(cpus.snapshot(self.pids, cfg.proc_root), cfg.out / "host-state" / "before")
        if "metrics" in cfg.parts:
            self.mdir.mkdir(parents=True)
            try:
                text, mono, unix = scrape(cfg.metrics_url, cfg.metrics_socket)
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
            self.poller = Poller(cfg.metrics_url, self.mdir / "scrapes", socket=cfg.metrics_socket)
            self.poller.start()
        if cfg.load is not None:
            # Its own process, so its own interpreter lock (probes/senders/load.py main says why).
            argv = [sys.executable, "-m", "probes.senders.load", "--spec-json", json.dumps(asdict(cfg.load)),
                    "--stop-at", repr(self.t0 + cfg.seconds), "--out", str(cfg.out)]  # fmt: skip
            with (cfg.out / "requests.stderr.txt").open("wb") as err:
                self.load_proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        if "wchan" in cfg.parts:

            def wchan() -> None:
                self.wchan_res.append(
                    kernel.sample_wchan(self.found, cfg.seconds, cfg.wchan_rate_hz, cfg.proc_root, self.stop)
                )

            self.threads.append(_thread(wchan, "wchan", self.crashed))
        if "perf" in cfg.parts and not cfg.perf_skip_note:
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
            text, mono, unix = scrape(url, self.cfg.metrics_socket)
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
        if self.cfg.perf_skip_note:
            self.parts["perf"] = PartStatus("skipped", self.cfg.perf_skip_note)
            return
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
        cpus.write(cpus.snapshot(self.pids, self.cfg.proc_root), out / "host-state" / "after")
        cg = hoststate.host_state_cgroup_delta(self.hs_before, hs_after)
        (out / "host-state" / "cgroup-delta.json").write_text(json.dumps(cg, indent=2, default=str) + "\n")
        self.notes.extend(cgroup_notes(cg))
        self.parts["hoststate"] = PartStatus(
            "successful", None, ["host-state/before/", "host-state/after/", "host-state/cgroup-delta.json"]
        )

    def rank_steps(self) -> None:
        """Each rank's steps from the window's start until now (the patched runtime's rank trace), where the engine
        writes one."""
        src = self.cfg.rank_trace_dir
        if src is None:
            return
        try:
            # To now, not the window's end: the requests still in flight when it closed were waited for.
            self.rank_trace = rank_steps.copy_window(src, self.cfg.out, self.t0, time.monotonic())
        except OSError as e:
            self.rank_trace = {"dir": str(src), "ranks": {}, "unreadable": [f"{src}: {e.strerror or e}"]}
        for what in self.rank_trace["unreadable"]:
            self.notes.append(f"rank trace: unreadable: {what} ({src})")
        if not self.rank_trace["ranks"]:
            self.notes.append(f"rank trace: no step of any rank in the window ({src})")

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
            "rank_trace": self.rank_trace,
            "engine": cfg.engine,
            "parts": {k: asdict(v) for k, v in parts.items()},
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        }
        (cfg.out / "bundle.json").write_text(json.dumps(bundle, indent=2, default=str) + "\n")
        summary.write_summary(cfg.out)
        return bundle
