"""serving/record/fleet.py: a roll's summary and the verify table of a group, from what the run saw."""

from __future__ import annotations

from serving.record import fleet

HOSTS = ["gpu-a", "gpu-b", "gpu-c"]


def test_a_roll_that_completed_names_every_host_done() -> None:
    lines = fleet.roll_summary("fleet", HOSTS, HOSTS, {})
    assert lines == [
        "roll of fleet: all 3 hosts deployed and verified, one batch at a time",
        "  done (serving the new deploy): gpu-a, gpu-b, gpu-c",
        "  failed: none",
        "  untouched (not deployed by this roll): none",
    ]


def test_a_roll_stopped_at_its_second_host_names_done_failed_and_untouched() -> None:
    why = "gpu-b is on a device that misses the I/O thresholds of class rtx3090-pp3:\n QD1: 11000 IOPS"
    lines = fleet.roll_summary("fleet", HOSTS, ["gpu-a", "gpu-b"], {"gpu-b": why})
    assert lines[0] == "roll of fleet STOPPED at the first failure: 1 done, 1 failed, 1 untouched"
    assert lines[1] == "  done (serving the new deploy): gpu-a"
    assert (
        lines[2]
        == "  failed: gpu-b: gpu-b is on a device that misses the I/O thresholds of class rtx3090-pp3: QD1: 11000 IOPS"
    )
    assert lines[3] == "  untouched (not deployed by this roll): gpu-c"
    assert "brings the last good container back" in lines[4]


def test_the_verify_table_puts_the_hosts_that_differ_first() -> None:
    results = {
        "gpu-a": {"must_match": 0, "lines": ["  informational container.id: ..."], "path": "runs/gpu-a/x/verify.json"},
        "gpu-b": {"must_match": 2, "lines": ['  MUST-MATCH container.cmd.--max-num-seqs: reference "8", now "4"']},
    }
    lines = fleet.verify_table("fleet", HOSTS, results, {"gpu-c": "gpu-c does not answer /health"})
    assert lines[0] == "verify of fleet: hosts by must-match differences from the reference"
    rows = [ln.split() for ln in lines[2:]]
    assert [(r[0], r[1]) for r in rows] == [("gpu-c", "NOT"), ("gpu-b", "DIFFERS"), ("gpu-a", "matches")]
    assert 'MUST-MATCH container.cmd.--max-num-seqs: reference "8", now "4"' in lines[3]
    assert lines[4].split()[2] == "0" and "runs/gpu-a/x/verify.json" in lines[4]
