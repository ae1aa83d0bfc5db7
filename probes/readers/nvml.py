"""The GPU sampler's NVML reader: every GPU read through NVML (nvidia-ml-py's `pynvml`) in this process every 200 ms,
and the XID events NVML delivers, as stamped lines of `samplers/nvml.log` (read back in probes/readers/nvml_log.py).

Where NVML cannot be opened (no driver library in the container, no pynvml in the image), probes/readers/samplers.py
runs `nvidia-smi -lms 200` instead, and the sampler's `via` says which ran and why. The replay seam
(probes/readers/nvml_replay.py, a stand-in for pynvml that returns what tests/device/nvml_record.py recorded on a real
GPU) is opened only where the environment names a recording (REPLAY_ENV, which the tests set); every line it
produces carries the source `replayed`.

Meanings and units are NVML's own, from the NVML API Reference Guide (docs.nvidia.com/deploy/nvml-api/,
"Device Queries" and "Event Handling Methods"):
- nvmlDeviceGetUtilizationRates: `gpu`, percent of the last sample period in which a kernel ran; `memory`, percent
  in which device memory was read or written.
- nvmlDeviceGetMemoryInfo: `used`, bytes.   nvmlDeviceGetPowerUsage: milliwatts, the board and its memory.
- nvmlDeviceGetClockInfo (NVML_CLOCK_SM, NVML_CLOCK_MEM): MHz.   nvmlDeviceGetTemperature (NVML_TEMPERATURE_GPU): °C.
- nvmlDeviceGetCurrPcieLinkGeneration / Width: the link as negotiated now; nvmlDeviceGetMaxPcieLinkGeneration /
  Width: the most "possible with this device and system" (nvidia-smi's pcie.link.gen.max).
- nvmlDeviceGetCurrentClocksEventReasons: a bit mask of nvmlClocksEventReason* (sampler_logs.CLOCK_EVENT_REASONS).
- nvmlDeviceGetPcieThroughput (NVML_PCIE_UTIL_TX_BYTES, _RX_BYTES): KB/s, a byte counter over a 20 ms interval.
- nvmlDeviceGetPcieReplayCounter: the PCIe replay counter (packets the link resent), cumulative.
- nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver was last reloaded (Volta and newer).
- nvmlEventSetWait_v2 after nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError): nvmlEventData_t, whose
  `eventData` holds the Xid; NVML_ERROR_TIMEOUT when none arrived in the wait.

nvml.log lines (after samplers' `mono_s<TAB>wall<TAB>`), comma-separated, a field NVML could not read left empty:
  SOURCE,INDEX,<LOG_FIELDS[2:]>         one sample of one GPU, in NVML's units (SOURCE: nvml or replayed)
  SOURCE,INDEX,xid,XID                  an XID event NVML delivered for that GPU
  SOURCE,INDEX,error,CALL,NVMLError_X   the first time CALL failed on that GPU with that error ("-": no GPU)
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Set by the tests (never by the product) to replay a recording instead of opening the driver: the recorded
# file, then optionally, after a comma, a file of CONSTRUCTED additions (probes/readers/nvml_replay.py).
REPLAY_ENV = "REFDEPLOY_NVML_REPLAY"
LOG_NAME = "nvml.log"
SOURCE_NVML, SOURCE_REPLAYED = "nvml", "replayed"
LOG_FIELDS = (
    "source", "index", "utilization.gpu", "utilization.memory", "memory.used_bytes", "power_mw", "clocks.sm",
    "clocks.mem", "temperature.gpu", "pcie.link.gen.gpucurrent", "pcie.link.gen.max", "pcie.link.width.current",
    "pcie.link.width.max", "clocks_event_reasons.active", "pcie.tx_kb_s", "pcie.rx_kb_s", "pcie.replay_counter",
    "energy_mj",
)  # fmt: skip
# Events drained per tick at most (each wait 1 ms, as recorded: nvml-samples.jsonl's 120 waits timed out).
MAX_EVENTS_PER_TICK = 16

Call = tuple[str, Callable[[Any, Any], Any], Callable[[Any], list[Any]], tuple[str, ...]]


def _calls() -> list[Call]:
    """Per sample and GPU: (the recorder's key, the NVML call, its value as the columns, the columns). The keys are
    tests/device/nvml_record.py's, so the replay answers each call with what that call returned on the H200."""

    def one(v: Any) -> list[Any]:
        return [v]

    def reasons(api: Any, h: Any) -> Any:  # renamed from ...ThrottleReasons in newer bindings
        fn = getattr(api, "nvmlDeviceGetCurrentClocksEventReasons", None)
        return (fn or api.nvmlDeviceGetCurrentClocksThrottleReasons)(h)

    return [
        ("nvmlDeviceGetUtilizationRates", lambda a, h: a.nvmlDeviceGetUtilizationRates(h), lambda v: [v.gpu, v.memory],
         ("utilization.gpu", "utilization.memory")),
        ("nvmlDeviceGetMemoryInfo", lambda a, h: a.nvmlDeviceGetMemoryInfo(h), lambda v: [v.used],
         ("memory.used_bytes",)),
        ("nvmlDeviceGetPowerUsage", lambda a, h: a.nvmlDeviceGetPowerUsage(h), one, ("power_mw",)),
        ("nvmlDeviceGetClockInfo.SM", lambda a, h: a.nvmlDeviceGetClockInfo(h, a.NVML_CLOCK_SM), one, ("clocks.sm",)),
        ("nvmlDeviceGetClockInfo.MEM", lambda a, h: a.nvmlDeviceGetClockInfo(h, a.NVML_CLOCK_MEM), one,
         ("clocks.mem",)),
        ("nvmlDeviceGetTemperature.GPU", lambda a, h: a.nvmlDeviceGetTemperature(h, a.NVML_TEMPERATURE_GPU), one,
         ("temperature.gpu",)),
        ("nvmlDeviceGetCurrPcieLinkGeneration", lambda a, h: a.nvmlDeviceGetCurrPcieLinkGeneration(h), one,
         ("pcie.link.gen.gpucurrent",)),
        ("nvmlDeviceGetCurrPcieLinkWidth", lambda a, h: a.nvmlDeviceGetCurrPcieLinkWidth(h), one,
         ("pcie.link.width.current",)),
        ("nvmlDeviceGetCurrentClocksEventReasons", reasons, lambda v: [f"0x{int(v):x}"],
         ("clocks_event_reasons.active",)),
        ("nvmlDeviceGetPcieThroughput.TX", lambda a, h: a.nvmlDeviceGetPcieThroughput(h, a.NVML_PCIE_UTIL_TX_BYTES),
         one, ("pcie.tx_kb_s",)),
        ("nvmlDeviceGetPcieThroughput.RX", lambda a, h: a.nvmlDeviceGetPcieThroughput(h, a.NVML_PCIE_UTIL_RX_BYTES),
         one, ("pcie.rx_kb_s",)),
        ("nvmlDeviceGetPcieReplayCounter", lambda a, h: a.nvmlDeviceGetPcieReplayCounter(h), one,
         ("pcie.replay_counter",)),
        ("nvmlDeviceGetTotalEnergyConsumption", lambda a, h: a.nvmlDeviceGetTotalEnergyConsumption(h), one,
         ("energy_mj",)),
    ]  # fmt: skip


# Read once per GPU when the sampler starts, repeated on every line so that each line stands alone.
STATIC_CALLS: list[Call] = [
    ("nvmlDeviceGetMaxPcieLinkGeneration", lambda a, h: a.nvmlDeviceGetMaxPcieLinkGeneration(h), lambda v: [v],
     ("pcie.link.gen.max",)),
    ("nvmlDeviceGetMaxPcieLinkWidth", lambda a, h: a.nvmlDeviceGetMaxPcieLinkWidth(h), lambda v: [v],
     ("pcie.link.width.max",)),
]  # fmt: skip


@dataclass(frozen=True)
class Opened:
    """NVML, initialised: the real pynvml module, or the replay seam standing in for it."""

    api: Any
    label: str  # what reads the GPUs, for samplers.json and the reports
    source: str  # SOURCE_NVML or SOURCE_REPLAYED: the first column of every line
    max_samples: int | None = None  # a replay ends with its recording


@dataclass(frozen=True)
class Unavailable:
    reason: str


def open_api(environ: Mapping[str, str] | None = None) -> Opened | Unavailable:
    """NVML for the GPU sampler: the replay where REPLAY_ENV names a recording (tests), else the driver's through
    pynvml; Unavailable with the reason where neither opens. A REPLAY_ENV that names no recording is bad input
    (ValueError, one line naming it)."""
    env = os.environ if environ is None else environ
    if env.get(REPLAY_ENV):
        from probes.readers.nvml_replay import ReplayNvml

        replay = ReplayNvml.from_env(env[REPLAY_ENV])
        return Opened(replay, replay.label, SOURCE_REPLAYED, replay.samples_recorded)
    try:
        api = importlib.import_module("pynvml")
    except ImportError:
        return Unavailable("the pynvml module (nvidia-ml-py) is not installed in this image")
    try:
        api.nvmlInit()
    except api.NVMLError as e:
        return Unavailable(f"nvmlInit: {type(e).__name__}: {e}")
    try:
        driver = api.nvmlSystemGetDriverVersion()
    except api.NVMLError as e:
        driver = type(e).__name__
    try:
        version = importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return Opened(api, f"NVML (nvidia-ml-py {version}, driver {driver}) in this process", SOURCE_NVML)


@dataclass
class NvmlReader:
    """Reads every GPU every `interval_s` and drains XID events, writing nvml.log lines through `write`, until
    `stop` is set (or, for a replay, its recording is spent). NVML is shut down when it ends. As a sampler
    (samplers.Reader), it runs in a thread of its own: start, then stop, which says what broke it, if anything."""

    opened: Opened
    interval_s: float = 0.2
    _seen: set[tuple[str, str, str]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    crashed: str | None = None

    def start(self, write: Callable[[str], None]) -> None:
        def guarded() -> None:
            try:
                self.run(write, self._stop)
            except Exception as e:  # a sampler must not take the run down with it: its result says what broke
                self.crashed = f"{type(e).__name__}: {e}"

        self._thread = threading.Thread(target=guarded, name="sampler-nvml", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> str | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.crashed or (f"still reading {timeout_s:g} s after it was told to stop" if self.alive() else None)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _error(self, write: Callable[[str], None], index: str, call: str, e: Exception) -> None:
        key = (index, call, type(e).__name__)
        if key not in self._seen:  # once per GPU, call and error: a GeForce's unsupported field is not news
            self._seen.add(key)
            write(f"{self.opened.source},{index},error,{call},{type(e).__name__}")

    def _columns(self, write: Callable[[str], None], index: int, handle: Any, calls: Sequence[Call]) -> dict[str, str]:
        api, out = self.opened.api, dict[str, str]()
        for key, fn, cols, names in calls:
            try:
                values = cols(fn(api, handle))
            except api.NVMLError as e:
                self._error(write, str(index), key, e)
                values = [""] * len(names)
            out.update(zip(names, (str(v) for v in values), strict=True))
        return out

    def _register_xid(self, write: Callable[[str], None], handles: Sequence[Any]) -> Any:
        api = self.opened.api
        try:
            evset = api.nvmlEventSetCreate()
        except api.NVMLError as e:
            self._error(write, "-", "nvmlEventSetCreate", e)
            return None
        for i, h in enumerate(handles):
            try:
                api.nvmlDeviceRegisterEvents(h, api.nvmlEventTypeXidCriticalError, evset)
            except api.NVMLError as e:  # XID events of this GPU go unwatched; the log says so
                self._error(write, str(i), "nvmlDeviceRegisterEvents", e)
        return evset

    def _drain_events(self, write: Callable[[str], None], evset: Any) -> None:
        api = self.opened.api
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data = api.nvmlEventSetWait_v2(evset, 1)
            except api.NVMLError as e:
                if getattr(e, "value", None) != api.NVML_ERROR_TIMEOUT:
                    self._error(write, "-", "nvmlEventSetWait_v2", e)
                return
            try:
                index = str(api.nvmlDeviceGetIndex(data.device))
            except api.NVMLError:
                index = "-"
            if int(data.eventType) & api.nvmlEventTypeXidCriticalError:
                write(f"{self.opened.source},{index},xid,{int(data.eventData)}")

    def run(self, write: Callable[[str], None], stop: threading.Event) -> None:
        api = self.opened.api
        try:
            handles = [api.nvmlDeviceGetHandleByIndex(i) for i in range(api.nvmlDeviceGetCount())]
            static = [self._columns(write, i, h, STATIC_CALLS) for i, h in enumerate(handles)]
            evset = self._register_xid(write, handles)
            calls, n, next_t = _calls(), 0, time.monotonic()
            while not stop.is_set() and (self.opened.max_samples is None or n < self.opened.max_samples):
                for i, h in enumerate(handles):
                    cols = {**self._columns(write, i, h, calls), **static[i], "source": self.opened.source,
                            "index": str(i)}  # fmt: skip
                    write(",".join(cols[f] for f in LOG_FIELDS))
                if evset is not None:
                    self._drain_events(write, evset)
                n += 1
                next_t = max(next_t + self.interval_s, time.monotonic())  # late: the next tick, not a burst
                stop.wait(next_t - time.monotonic())
            if evset is not None:
                api.nvmlEventSetFree(evset)
        finally:
            api.nvmlShutdown()
