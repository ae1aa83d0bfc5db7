"""A probe's exit read for the operator (serving/evidence/probe_outcome.py): pass, FINDING or ERROR, and one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.evidence.probe_outcome import capture_outcome, io_outcome

IO = {"host": "gpu1", "container": "refdeploy-probe-io", "timeout_s": 200}
CAP = {"host": "gpu1", "container": "refdeploy-probe-capture", "timeout_s": 320, "bundle": "/r/gpu1/1/capture/"}
SAME = {"changed": False, "line": "refdeploy-vllm ran throughout the window"}


def _run(rc: int, stdout: str = "", stderr: str = "") -> dict[str, Any]:
    return {
        "rc": rc,
        "stdout_lines": stdout.splitlines(),
        "stderr": stderr,
        "stderr_lines": stderr.splitlines(),
    }


def test_a_missed_threshold_is_a_finding_with_fios_reasons(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"verdict": "FAIL", "reasons": ["QD1: 900 IOPS < 4000", "QD64: p99.9 81 ms > 50"]}))
    out = io_outcome(_run(1), {**IO, "result_file": str(result)})
    assert out == {
        "kind": "finding",
        "ok": False,
        "line": "FINDING: the I/O check FAILED on gpu1: QD1: 900 IOPS < 4000; QD64: p99.9 81 ms > 50",
    }
    gate = io_outcome(_run(1), {**IO, "result_file": str(result), "gate_message": "gpu1 cannot be deployed to"})
    assert gate["line"] == "gpu1 cannot be deployed to: QD1: 900 IOPS < 4000; QD64: p99.9 81 ms > 50"
    missing = io_outcome(_run(1), {**IO, "result_file": str(tmp_path / "none.json")})
    assert missing["line"].endswith("FAILED on gpu1: reasons above")


@pytest.mark.parametrize(
    ("rc", "stdout", "stderr", "line"),
    [
        (0, "PASS", "", ""),
        (2, "", "probe_io_depths: 0 is not a queue depth\n", "ERROR: probe_io_depths: 0 is not a queue depth"),
        (
            3,
            "x\nskipped: fio is not installed\n",
            "",
            "ERROR: the I/O check was skipped on gpu1: skipped: fio is not installed",
        ),
        (
            4,
            "",
            "Traceback...\nprobe error: OSError: [Errno 5]\n",
            "ERROR: no I/O verdict on gpu1: probe error: OSError: [Errno 5]",
        ),
        (
            124,
            "",
            "",
            "ERROR: no I/O verdict on gpu1: the fio docker run (refdeploy-probe-io) did not finish within 200 s and "
            "was stopped; rerun make probe-io, and look at the drive if it happens again",
        ),
        (
            125,
            "",
            "docker: Error response from daemon: no such image\n",
            "ERROR: no I/O verdict on gpu1: the fio container refdeploy-probe-io exited 125 (docker: Error response "
            "from daemon: no such image); check Docker and the probe image (make images), then rerun make probe-io",
        ),
    ],
)
def test_every_other_exit_of_the_fio_container_is_an_error_with_what_to_do(
    rc: int, stdout: str, stderr: str, line: str
) -> None:
    out = io_outcome(_run(rc, stdout, stderr), IO)
    assert out["line"] == line and out["ok"] == (rc == 0)
    assert out["kind"] == ("pass" if rc == 0 else "error")


def test_a_capture_part_that_failed_is_a_finding_and_the_bundle_is_its_own_index() -> None:
    out = capture_outcome(_run(1), SAME, CAP)
    assert out["kind"] == "finding" and out["line"].startswith("FINDING: a part of the capture FAILED on gpu1")
    assert out["cut_short"] is False
    assert capture_outcome(_run(0), SAME, CAP) | {"why": None} == {
        "kind": "pass",
        "ok": True,
        "line": "",
        "why": None,
        "cut_short": False,
    }


def test_a_capture_cut_short_is_an_error_and_says_why_for_its_index() -> None:
    timed_out = capture_outcome(_run(124), SAME, CAP)
    assert timed_out["line"] == (
        "ERROR: the probe container run (docker run refdeploy-probe-capture) did not finish within 320 s and was "
        "stopped; what it had is kept in /r/gpu1/1/capture/"
    )
    assert timed_out["why"] == "the capture ran past 320 s (timeout of its docker run) and was stopped"
    assert timed_out["cut_short"] is True
    died = {"changed": True, "line": "refdeploy-vllm died or was replaced in the window (restarts 0 -> 1)"}
    killed = capture_outcome(_run(137), died, CAP)
    assert killed["kind"] == "error" and killed["why"] == died["line"] and killed["cut_short"] is True
    assert killed["line"].startswith("ERROR: refdeploy-vllm died or was replaced in the window (restarts 0 -> 1). ")
    # A refusal by the capture container comes after its run directory was made: it is indexed too, saying why.
    refused = capture_outcome(_run(2, stderr="--data-file /d/x: not a regular file\n"), SAME, CAP)
    assert refused["line"] == "ERROR: --data-file /d/x: not a regular file" and refused["cut_short"] is True
    assert refused["why"] == "the capture refused its input: --data-file /d/x: not a regular file"
    assert capture_outcome(_run(99), SAME, CAP)["why"] == "the probe container exited 99"
