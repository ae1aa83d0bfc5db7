"""Record what NVML returns, call by call, for the NVML sampler's replay seam (issue 28, item 10).

Run on a real GPU host (the device machine), not in CI. Writes JSON lines: one "static" line per GPU, then one
"sample" line per GPU per interval with every call's value, or the NVML error it raised (name, code, message);
then one "events" line with what the XID event set returned. Values are NVML's own units (mW, mJ, MHz, KB/s).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from pathlib import Path
from typing import Any

import pynvml as N


def plain(v: Any) -> Any:
    """ctypes structs to dicts, bytes to str, so a line is JSON."""
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if hasattr(v, "_fields_"):
        return {name: plain(getattr(v, name)) for name, *_ in v._fields_}
    if isinstance(v, (list, tuple, ctypes.Array)):
        return [plain(x) for x in v]
    return v


def call(values: dict[str, Any], errors: dict[str, Any], key: str, fn: Any, *args: Any) -> None:
    try:
        values[key] = plain(fn(*args))
    except N.NVMLError as e:
        errors[key] = {"error": type(e).__name__, "code": e.value, "message": str(e)}
    except Exception as e:  # a function this binding lacks, say
        errors[key] = {"error": type(e).__name__, "code": None, "message": str(e)}


def reasons_fn() -> Any:
    return getattr(N, "nvmlDeviceGetCurrentClocksEventReasons", None) or N.nvmlDeviceGetCurrentClocksThrottleReasons


STATIC = [
    ("nvmlDeviceGetName", lambda h: N.nvmlDeviceGetName(h)),
    ("nvmlDeviceGetUUID", lambda h: N.nvmlDeviceGetUUID(h)),
    ("nvmlDeviceGetPciInfo", lambda h: N.nvmlDeviceGetPciInfo(h)),
    ("nvmlDeviceGetCudaComputeCapability", lambda h: N.nvmlDeviceGetCudaComputeCapability(h)),
    ("nvmlDeviceGetMaxPcieLinkGeneration", lambda h: N.nvmlDeviceGetMaxPcieLinkGeneration(h)),
    ("nvmlDeviceGetGpuMaxPcieLinkGeneration", lambda h: N.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)),
    ("nvmlDeviceGetMaxPcieLinkWidth", lambda h: N.nvmlDeviceGetMaxPcieLinkWidth(h)),
    ("nvmlDeviceGetPowerManagementLimit", lambda h: N.nvmlDeviceGetPowerManagementLimit(h)),
    ("nvmlDeviceGetPowerManagementDefaultLimit", lambda h: N.nvmlDeviceGetPowerManagementDefaultLimit(h)),
    ("nvmlDeviceGetEnforcedPowerLimit", lambda h: N.nvmlDeviceGetEnforcedPowerLimit(h)),
    ("nvmlDeviceGetPersistenceMode", lambda h: N.nvmlDeviceGetPersistenceMode(h)),
    ("nvmlDeviceGetEccMode", lambda h: N.nvmlDeviceGetEccMode(h)),
    ("nvmlDeviceGetApplicationsClock.SM", lambda h: N.nvmlDeviceGetApplicationsClock(h, N.NVML_CLOCK_SM)),
    ("nvmlDeviceGetApplicationsClock.MEM", lambda h: N.nvmlDeviceGetApplicationsClock(h, N.NVML_CLOCK_MEM)),
    ("nvmlDeviceGetMaxClockInfo.SM", lambda h: N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM)),
    ("nvmlDeviceGetMaxClockInfo.MEM", lambda h: N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM)),
    ("nvmlDeviceGetNumaNodeId", lambda h: N.nvmlDeviceGetNumaNodeId(h)),
    ("nvmlDeviceGetMemoryAffinity", lambda h: N.nvmlDeviceGetMemoryAffinity(h, 4, 0)),
    ("nvmlDeviceGetCpuAffinity", lambda h: N.nvmlDeviceGetCpuAffinity(h, 4)),
]

SAMPLE = [
    ("nvmlDeviceGetUtilizationRates", lambda h: N.nvmlDeviceGetUtilizationRates(h)),
    ("nvmlDeviceGetMemoryInfo", lambda h: N.nvmlDeviceGetMemoryInfo(h)),
    ("nvmlDeviceGetPowerUsage", lambda h: N.nvmlDeviceGetPowerUsage(h)),
    ("nvmlDeviceGetTotalEnergyConsumption", lambda h: N.nvmlDeviceGetTotalEnergyConsumption(h)),
    ("nvmlDeviceGetClockInfo.SM", lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)),
    ("nvmlDeviceGetClockInfo.MEM", lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)),
    ("nvmlDeviceGetTemperature.GPU", lambda h: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)),
    ("nvmlDeviceGetCurrPcieLinkGeneration", lambda h: N.nvmlDeviceGetCurrPcieLinkGeneration(h)),
    ("nvmlDeviceGetCurrPcieLinkWidth", lambda h: N.nvmlDeviceGetCurrPcieLinkWidth(h)),
    ("nvmlDeviceGetPcieThroughput.TX", lambda h: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES)),
    ("nvmlDeviceGetPcieThroughput.RX", lambda h: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES)),
    ("nvmlDeviceGetPcieReplayCounter", lambda h: N.nvmlDeviceGetPcieReplayCounter(h)),
    ("nvmlDeviceGetCurrentClocksEventReasons", lambda h: reasons_fn()(h)),
    ("nvmlDeviceGetPerformanceState", lambda h: N.nvmlDeviceGetPerformanceState(h)),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    N.nvmlInit()
    handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    with Path(a.out).open("w") as out:
        system: dict[str, Any] = {}
        errors: dict[str, Any] = {}
        call(system, errors, "nvmlSystemGetDriverVersion", N.nvmlSystemGetDriverVersion)
        call(system, errors, "nvmlSystemGetNVMLVersion", N.nvmlSystemGetNVMLVersion)
        call(system, errors, "nvmlSystemGetCudaDriverVersion", N.nvmlSystemGetCudaDriverVersion)
        call(system, errors, "nvmlDeviceGetCount", N.nvmlDeviceGetCount)
        out.write(json.dumps({"kind": "system", "values": system, "errors": errors}) + "\n")
        for i, h in enumerate(handles):
            values, errors = {}, {}
            for key, fn in STATIC:
                call(values, errors, key, fn, h)
            out.write(json.dumps({"kind": "static", "index": i, "values": values, "errors": errors}) + "\n")
        evset, ev_errors = None, {}
        try:
            evset = N.nvmlEventSetCreate()
            for h in handles:
                N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, evset)
        except N.NVMLError as e:
            ev_errors["register"] = {"error": type(e).__name__, "code": e.value, "message": str(e)}
        events: list[Any] = []
        ticks = 0
        end = time.monotonic() + a.seconds
        next_t = time.monotonic()
        while time.monotonic() < end:
            for i, h in enumerate(handles):
                values, errors = {}, {}
                mono, wall = time.monotonic(), time.time()
                for key, fn in SAMPLE:
                    call(values, errors, key, fn, h)
                out.write(
                    json.dumps(
                        {
                            "kind": "sample",
                            "index": i,
                            "mono": round(mono, 6),
                            "wall": round(wall, 6),
                            "values": values,
                            "errors": errors,
                        }
                    )
                    + "\n"
                )
            ticks += 1
            if evset is not None:
                try:
                    d = N.nvmlEventSetWait_v2(evset, 1)
                    # nvmlEventData_t has no gpuId (the first version read one): the device's index, and the
                    # number of samples per GPU taken before it arrived, for the replay (probes/readers/nvml_replay.py).
                    events.append(
                        {
                            "eventType": d.eventType,
                            "eventData": d.eventData,
                            "index": N.nvmlDeviceGetIndex(d.device),
                            "after_sample": ticks - 1,
                            "gpuInstanceId": d.gpuInstanceId,
                            "computeInstanceId": d.computeInstanceId,
                        }
                    )
                except N.NVMLError as e:
                    key = type(e).__name__
                    ev_errors[key] = ev_errors.get(key, {"error": key, "code": e.value, "message": str(e), "n": 0})
                    ev_errors[key]["n"] += 1
            next_t += a.interval
            time.sleep(max(0.0, next_t - time.monotonic()))
        out.write(json.dumps({"kind": "events", "events": events, "errors": ev_errors}) + "\n")
    N.nvmlShutdown()


if __name__ == "__main__":
    main()
