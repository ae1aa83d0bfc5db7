"""The NVML replay seam: a stand-in for pynvml that answers each call with what a real GPU answered.

It reads what tests/device/nvml_record.py RECORDED on a real GPU (tests/fixtures/recorded-h200/nvml-samples.jsonl:
a `system` line, a `static` line per GPU, a `sample` line per GPU per 200 ms with each call's value or its NVML
error, an `events` line) and answers the N-th call of a function on a GPU with that function's value in the N-th
sample, or raises the error recorded there, as pynvml would. A second, optional file holds CONSTRUCTED additions,
for what the recording lacks (a healthy GPU raised no XID event and resent no PCIe packet), each in NVML's shape:

  {"kind": "xid_event", "after_sample": N, "index": I, "eventType": 8, "eventData": 79, ...}  delivered by the
      first nvmlEventSetWait_v2 after sample N (0-based) was served, as an nvmlEventData_t of GPU I
  {"kind": "sample_values", "index": I, "from_sample": N, "values": {"nvmlDeviceGetPcieReplayCounter": 3}}
      from sample N on, these calls of GPU I return these values instead of the recorded ones (the latest N wins);
      "errors": {"CALL": {"error": "NVMLError_NotSupported", "code": 3, "message": "Not Supported"}} raises instead

It is opened only through probes.readers.nvml.REPLAY_ENV ("RECORDED[,CONSTRUCTED]"), which the tests set; its label, and
the source column of every nvml.log line the sampler writes from it, say REPLAYED.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class NVMLError(Exception):
    """As pynvml's: `value` is NVML's return code; each error is a subclass named as pynvml names it."""

    def __init__(self, value: int, message: str = "") -> None:
        super().__init__(message)
        self.value, self.message = value, message

    def __str__(self) -> str:
        return self.message


_ERROR_CLASSES: dict[str, type[NVMLError]] = {}


def nvml_error(name: str, code: int, message: str) -> NVMLError:
    """The error a recorded {"error": "NVMLError_NotSupported", "code": 3, "message": ...} stands for."""
    cls = _ERROR_CLASSES.setdefault(name, type(name, (NVMLError,), {}))
    return cls(code, message)


# The structs pynvml returns, by their field names (c_nvmlUtilization_t, c_nvmlMemory_t, c_nvmlEventData_t).
@dataclass(frozen=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True)
class Memory:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class EventData:
    device: Handle
    eventType: int  # NVML's field names
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


@dataclass(frozen=True)
class Handle:
    index: int


_TIMEOUT = {"error": "NVMLError_Timeout", "code": 10, "message": "Timeout"}


class ReplayNvml:
    """pynvml's functions and constants, answered from a recording (and constructed additions)."""

    NVMLError = NVMLError
    # pynvml's values (tests check them against the real module).
    NVML_ERROR_TIMEOUT = 10
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, recorded: Path, constructed: Path | None = None) -> None:
        self.recorded, self.constructed = recorded, constructed
        self.system: dict[str, Any] = {}
        self.static: dict[int, dict[str, Any]] = {}
        self.samples: dict[int, list[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []  # still to deliver, each with its after_sample
        self.wait_error: dict[str, Any] = _TIMEOUT
        self.overrides: list[dict[str, Any]] = []
        for number, rec in _records(recorded):
            kind = rec.get("kind")
            if kind == "system":
                self.system = rec
            elif kind == "static":
                self.static[int(rec["index"])] = rec
            elif kind == "sample":
                self.samples.setdefault(int(rec["index"]), []).append(rec)
            elif kind == "events":
                # A recorded event is delivered after the sample it followed (recordings before that was written
                # down: by the first wait). The error the waits met most is what a wait with nothing to deliver
                # raises (NVMLError_Timeout on the H200).
                self.events += [{"after_sample": -1, "index": 0, **e} for e in rec.get("events") or []]
                errors = rec.get("errors") or {}
                if errors:
                    self.wait_error = max(errors.values(), key=lambda e: e.get("n", 0))
            else:
                raise ValueError(f"{recorded} line {number}: kind {kind!r} is not a recording's: re-record it")
        if not self.static or not self.samples:
            raise ValueError(f"{recorded}: no static or sample lines: name a recording made by nvml_record.py")
        for number, rec in _records(constructed) if constructed else ():
            if rec.get("kind") == "xid_event":
                self.events.append(rec)
            elif rec.get("kind") == "sample_values":
                self.overrides.append(rec)
            else:
                raise ValueError(f"{constructed} line {number}: kind must be xid_event or sample_values")
        self.samples_recorded = min(len(s) for s in self.samples.values())
        self._cursor: Counter[tuple[int, str]] = Counter()
        self.served = 0  # samples served so far (the furthest any call has gone)
        name = self.static[min(self.static)]["values"].get("nvmlDeviceGetName", "a GPU")
        driver = self.system.get("values", {}).get("nvmlSystemGetDriverVersion", "?")
        self.label = f"REPLAYED NVML: {recorded.name}, recorded on {name}, driver {driver}" + (
            f", with CONSTRUCTED additions {constructed.name}" if constructed else ""
        )

    @classmethod
    def from_env(cls, value: str) -> ReplayNvml:
        paths = [Path(p) for p in value.split(",") if p]
        for p in paths:
            if not p.is_file():
                raise ValueError(
                    f"REFDEPLOY_NVML_REPLAY={value}: {p} is not a file: name a recording made by "
                    "tests/device/nvml_record.py, then optionally a file of constructed additions"
                )
        if len(paths) not in (1, 2):
            raise ValueError(f"REFDEPLOY_NVML_REPLAY={value}: name one recording, then at most one constructed file")
        return cls(paths[0], paths[1] if len(paths) == 2 else None)

    # --- answering ---------------------------------------------------------------------------------------------

    @staticmethod
    def _answer(rec: dict[str, Any], key: str) -> Any:
        if key in rec.get("values", {}):
            return rec["values"][key]
        e = rec.get("errors", {}).get(key)
        if e is None:
            raise nvml_error("NVMLError_FunctionNotFound", 13, f"{key} was not recorded")
        raise nvml_error(e["error"], e["code"] if e["code"] is not None else 999, e["message"])

    def _sample(self, h: Handle, key: str) -> Any:
        k = self._cursor[(h.index, key)]
        recs = self.samples[h.index]
        if k >= len(recs):
            raise RuntimeError(f"replay: {self.recorded.name} holds {len(recs)} samples of GPU {h.index}, all served")
        self._cursor[(h.index, key)] += 1
        self.served = max(self.served, k + 1)
        due = [o for o in self.overrides if o["index"] == h.index and k >= o["from_sample"]
               and (key in o.get("values", {}) or key in o.get("errors", {}))]  # fmt: skip
        return self._answer(max(due, key=lambda o: o["from_sample"]) if due else recs[k], key)  # the latest wins

    def _static(self, h: Handle, key: str) -> Any:
        return self._answer(self.static[h.index], key)

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._answer(self.system, "nvmlSystemGetDriverVersion"))

    def nvmlDeviceGetCount(self) -> int:
        return len(self.static)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if index not in self.static:
            raise nvml_error("NVMLError_InvalidArgument", 2, "Invalid Argument")
        return Handle(index)

    def nvmlDeviceGetIndex(self, h: Handle) -> int:
        return h.index

    def nvmlDeviceGetName(self, h: Handle) -> str:
        return str(self._static(h, "nvmlDeviceGetName"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Handle) -> int:
        return int(self._static(h, "nvmlDeviceGetMaxPcieLinkGeneration"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Handle) -> int:
        return int(self._static(h, "nvmlDeviceGetMaxPcieLinkWidth"))

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Utilization:
        return Utilization(**self._sample(h, "nvmlDeviceGetUtilizationRates"))

    def nvmlDeviceGetMemoryInfo(self, h: Handle) -> Memory:
        return Memory(**self._sample(h, "nvmlDeviceGetMemoryInfo"))

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        return int(self._sample(h, "nvmlDeviceGetPowerUsage"))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Handle) -> int:
        return int(self._sample(h, "nvmlDeviceGetTotalEnergyConsumption"))

    def nvmlDeviceGetClockInfo(self, h: Handle, clock: int) -> int:
        return int(self._sample(h, "nvmlDeviceGetClockInfo." + {1: "SM", 2: "MEM"}[clock]))

    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        return int(self._sample(h, "nvmlDeviceGetTemperature." + {0: "GPU"}[sensor]))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Handle) -> int:
        return int(self._sample(h, "nvmlDeviceGetCurrPcieLinkGeneration"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Handle) -> int:
        return int(self._sample(h, "nvmlDeviceGetCurrPcieLinkWidth"))

    def nvmlDeviceGetPcieThroughput(self, h: Handle, counter: int) -> int:
        return int(self._sample(h, "nvmlDeviceGetPcieThroughput." + {0: "TX", 1: "RX"}[counter]))

    def nvmlDeviceGetPcieReplayCounter(self, h: Handle) -> int:
        return int(self._sample(h, "nvmlDeviceGetPcieReplayCounter"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Handle) -> int:
        return int(self._sample(h, "nvmlDeviceGetCurrentClocksEventReasons"))

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: Handle, types: int, evset: object) -> None:
        pass

    def nvmlEventSetWait_v2(self, evset: object, timeout_ms: int) -> EventData:
        due = [e for e in self.events if e["after_sample"] < self.served]
        if not due:
            e = self.wait_error
            raise nvml_error(e["error"], e["code"], e["message"])
        ev = due[0]
        self.events.remove(ev)
        gi, ci = (int(ev.get(k, 0xFFFFFFFF)) for k in ("gpuInstanceId", "computeInstanceId"))
        return EventData(Handle(int(ev["index"])), int(ev["eventType"]), int(ev["eventData"]), gi, ci)

    def nvmlEventSetFree(self, evset: object) -> None:
        pass


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path} line {number}: not JSON ({e})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{path} line {number}: not a JSON object")
        out.append((number, rec))
    return out
