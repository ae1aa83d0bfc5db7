"""The reports of make bench, capture, probe-io, profile, validate and verify as plain text: a refdeploy_print task
(action_plugins/refdeploy_print.py) hands its lines to callback_plugins/refdeploy_print.py, which prints them as
they are, not as Ansible's YAML dump of a debug message. Real ansible-playbook against this machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.ansible_run import run_tasks

REPO = Path(__file__).resolve().parents[3]
# What a debug task's YAML dump did to a report: quotes doubled, a long line folded, the list marked.
LINES = [
    "point 1: the server's TTFT p50 12.3 ms [10.1-14.9], TPOT p50 4.56 ms; 3 of 3 runs pooled, 0 left out",
    "flags: " + "a long line that Ansible's YAML result format folds at eighty columns " * 3,
    "report: runs/localhost/20261205T050000Z/bench/report.txt",
]


def _play(tmp_path: Path, task: str) -> subprocess.CompletedProcess[str]:
    return run_tasks(tmp_path, task, "refdeploy_print", ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")


def test_a_report_is_printed_line_for_line_under_the_hosts_name(tmp_path: Path) -> None:
    quoted = ", ".join('"' + line.replace('"', '\\"') + '"' for line in LINES)
    cp = _play(tmp_path, f"    - name: Print the report\n      refdeploy_print:\n        lines: [{quoted}]\n")
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    out = cp.stdout.splitlines()
    at = out.index("--- localhost ---")
    assert out[at + 1 : at + 1 + len(LINES)] == LINES, cp.stdout
    # Not also as a dump: no msg, no doubled quote.
    assert "msg:" not in cp.stdout and "server''s" not in cp.stdout


def test_lines_that_are_not_a_list_fail_the_task_naming_what_was_given(tmp_path: Path) -> None:
    cp = _play(tmp_path, "    - name: Print\n      refdeploy_print:\n        lines: {a: 1}\n")
    assert cp.returncode != 0
    assert "refdeploy_print: lines must be a list of strings, got {'a': 1}" in cp.stdout, cp.stdout[-2000:]
