"""What a probe's exit means for the operator: a pass, a finding, or an error, and the one line to stop on.

The probe containers exit with the codes probes/io/probe.py and probes/capture/bundle.py document; timeout(1) adds 124
and a kill 137. A finding (the storage missed a threshold, a capture part failed) is a measurement that ran and found
something: it is named FINDING, and its run directory holds the evidence. An error (bad input, a broken probe,
a run past its bound, a container that did not start) means there is no verdict: it is named ERROR and says
what to do. Both stop the playbook (make exits 2 for either: GNU make has no other failure status), so the
first word of the line is what tells them apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

Kind = Literal["pass", "finding", "error"]

# probes/io/probe.py and probes/capture/bundle.py
EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_IO_SKIPPED = 3
EXIT_PROBE_BROKE = 4
# timeout(1)
EXIT_TIMED_OUT = 124


def _last(lines: Sequence[str] | None, default: str = "") -> str:
    kept = [str(x).strip() for x in lines or [] if str(x).strip()]
    return kept[-1] if kept else default


def _reasons(result_file: Any) -> list[str]:
    """The reasons of fio's verdict, from the fetched result.json (none when it is missing or unreadable)."""
    try:
        data = json.loads(Path(str(result_file)).read_text()) if result_file else {}
    except (OSError, ValueError):
        return []
    return [str(r) for r in data.get("reasons") or []] if isinstance(data, dict) else []


def _outcome(kind: Kind, line: str) -> dict[str, Any]:
    prefix = {"pass": "", "finding": "FINDING: ", "error": "ERROR: "}[kind]
    return {"kind": kind, "ok": kind == "pass", "line": prefix + line if line else ""}


# fio reads 4 KiB blocks: a smaller file has not one (probes/io/probe.py BLOCK_SIZE_BYTES, in the probe image).
IO_BLOCK_BYTES = 4096


def io_target_problem(host: str, target: str, rc: int, stdout: str, stderr: str) -> str | None:
    """Why fio could not read `target` on `host`, in one line naming it and what to do, or None: judged from the
    host's `stat -L -c '%F|%s'` of it (rc, stdout, stderr), before the run makes anything (its probe image, its run
    directory), so that a refusal leaves no run directory behind. The container's own check (probes/io/probe.py
    check_target) refuses the same files, and more (a target that resolves out of the data directories)."""
    what = "set probe_io_target to a model weight or data file the serving stack reads"
    if rc != 0:
        said = _last(stderr.splitlines(), f"stat exited {rc}")
        if "No such file" in said:
            return f"probe_io_target {target} does not exist on {host} (or is a link to nothing): {what}"
        return f"probe_io_target {target} cannot be read on {host} ({said}): {what}"
    kind, _, size = _last(stdout.splitlines()).rpartition("|")
    if kind not in ("regular file", "regular empty file"):
        return f"probe_io_target {target} on {host} is {kind or 'unknown'}, not a regular file: {what}"
    if not size.isdigit() or int(size) < IO_BLOCK_BYTES:
        return (
            f"probe_io_target {target} on {host} is {size or '?'} bytes, smaller than one 4 KiB read: give a "
            "larger file the serving stack reads"
        )
    return None


def io_outcome(run: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """`make probe-io` (and the I/O gate of a GPU deploy): the fio container's run -> pass, finding or error.

    run: the command task's result (rc, stdout_lines, stderr, stderr_lines). settings: host, container,
    timeout_s, result_file (the fetched result.json, on the controller: its reasons), gate_message (the I/O
    gate's line, "" for make probe-io).
    """
    rc = int(run.get("rc", -1))
    host, container = str(settings["host"]), str(settings["container"])
    stderr = list(run.get("stderr_lines") or [])
    if rc == 0:
        return _outcome("pass", "")
    if rc == EXIT_FINDING:
        reasons = "; ".join(str(r) for r in _reasons(settings.get("result_file"))) or "reasons above"
        gate = str(settings.get("gate_message") or "")
        if gate:  # the deploy's I/O gate: a refusal in the words of the plan's other refusals
            return {"kind": "finding", "ok": False, "line": f"{gate}: {reasons}"}
        return _outcome("finding", f"the I/O check FAILED on {host}: {reasons}")
    if rc == EXIT_BAD_INPUT:
        return _outcome("error", str(run.get("stderr") or "").strip() or f"fio refused its input on {host}")
    if rc == EXIT_IO_SKIPPED:
        return _outcome("error", f"the I/O check was skipped on {host}: {_last(run.get('stdout_lines'))}")
    if rc == EXIT_PROBE_BROKE:
        return _outcome("error", f"no I/O verdict on {host}: {_last(stderr, 'the probe broke')}")
    if rc == EXIT_TIMED_OUT:
        return _outcome(
            "error",
            f"no I/O verdict on {host}: the fio docker run ({container}) did not finish within "
            f"{settings['timeout_s']} s and was stopped; rerun make probe-io, and look at the drive if it happens "
            "again",
        )
    return _outcome(
        "error",
        f"no I/O verdict on {host}: the fio container {container} exited {rc} ({_last(stderr, 'no stderr')}); "
        "check Docker and the probe image (make images), then rerun make probe-io",
    )


def capture_outcome(run: Mapping[str, Any], change: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """`make capture` / `make probe`: the probe container's run and the serving container's change -> pass,
    finding or error; `why` is what a bundle cut short records (probes.capture.cutshort.write).

    run: the command task's result. change: serving.evidence.continuity.serving_change's (changed, line).
    settings: host, container, timeout_s, bundle (where the controller keeps what the capture wrote).
    """
    rc = int(run.get("rc", -1))
    host, container, bundle = str(settings["host"]), str(settings["container"]), str(settings["bundle"])
    stderr = list(run.get("stderr_lines") or [])
    kept = f"what it had is kept in {bundle}"
    if change.get("changed"):
        out = _outcome(
            "error",
            f"{change['line']}. What the capture had is kept in {bundle}; capture again once it is healthy "
            f"(make status HOST={host})",
        )
        out.update(why=str(change["line"]), cut_short=rc not in (0, EXIT_FINDING))
        return out
    if rc == 0:
        out = _outcome("pass", "")
    elif rc == EXIT_FINDING:
        out = _outcome("finding", f"a part of the capture FAILED on {host} (bundle.json says which; the rest is kept)")
    elif rc == EXIT_BAD_INPUT:
        refused = str(run.get("stderr") or "").strip() or f"the capture refused its input on {host}"
        out = _outcome("error", refused)
        out["why"] = f"the capture refused its input: {refused}"
    elif rc == EXIT_PROBE_BROKE:
        out = _outcome("error", _last(stderr, f"the capture broke on {host}"))
    elif rc == EXIT_TIMED_OUT:
        out = _outcome(
            "error",
            f"the probe container run (docker run {container}) did not finish within {settings['timeout_s']} s "
            f"and was stopped; {kept}",
        )
        out["why"] = f"the capture ran past {settings['timeout_s']} s (timeout of its docker run) and was stopped"
    else:
        out = _outcome(
            "error",
            f"the probe container {container} exited {rc} before writing its bundle ({_last(stderr, 'no stderr')}); "
            f"{kept}",
        )
    out.setdefault("why", f"the probe container exited {rc}")
    # A capture that did not finish wrote no index of its own: it is indexed from what it had. So is one whose
    # container refused its input after the run directory was made (issue 46): its bundle.json says what was
    # refused and why, where the directory held only serving-container.json before.
    out["cut_short"] = rc not in (0, EXIT_FINDING)
    return out
