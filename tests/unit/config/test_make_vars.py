"""serving/config/make_vars.py: the make variables' patterns, the one line a bad one gets, ANSIBLE_ARGS's mistakes,
and the Makefile's variables all checked. The bad-input table (test_bad_input_table.py) drives the same checks
through make itself; here each rule is shown to hold a good value and refuse a bad one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.config import make_vars
from serving.config.make_vars import VARS, ansible_args_error, check, shown

REPO = Path(__file__).resolve().parents[3]
GOOD = {"HOST": "localhost", "INVENTORY": "inventory/local", "REFDEPLOY_SECONDS": "20", "REQUESTS": "4"}

# (variable, a value it takes, a value it refuses)
CASES = [
    ("HOST", "gpu-a.lab_1", "gpu-a;id"),
    ("INVENTORY", "/etc/refdeploy/inventory", "inventory/../../etc"),
    ("PROFILE", "cpu-tiny", "cpu tiny"),
    ("PROFILE", "profiles/mine.yaml", "{{ lookup('pipe','id') }}"),
    ("WORKLOAD", "serving/workloads/smoke.yaml", "smoke$(id)"),
    ("VIA", "front", "front;id"),
    ("VIA", "proxy.lab:3128", "http://proxy:3128"),
    ("VIA", "[::1]:3128", "::1:3128 x"),
    ("VIA", "https://proxy.lab:8443", "https://proxy.lab:8443/v1"),
    ("A", "20261205T101010Z,runs/gpu-a/20261205T101011Z", "../../etc"),
    ("A", "runs/gpu-a/20261205T101010Z/bench", "runs/gpu-a/..,x"),
    ("VARIABLE", "REFDEPLOY_PP_DEFER_RECV,enforce_eager", "max_num_seqs;id"),
    ("LEVEL", "0.99", "1"),
    ("REF", "/srv/runs/gpu-a/20261205T101010Z/manifest.json", "`id`"),
    ("RUN", "20261205T101010Z", "x\nid"),
    ("PROBE", "stacks", "stack"),
    ("REFDEPLOY_SECONDS", "300", "0"),
    ("RUNS", "3", "3.0"),
    ("KEEP", "1", "yes"),
    ("PROFILER", "torch", "perf"),
    ("HYPOTHESIS", "more seqs: tpot up, 'a' & \"b\" $x", "line one\nline two"),
    ("PYTEST_ARGS", "-k 'manifest and not slow'", "-k 'unclosed"),
    ("LOCK_WHEELHOUSE", "/opt/wheels", "/opt/wheels;id"),
]


@pytest.mark.parametrize(("var", "good", "bad"), CASES, ids=[f"{c[0]}={c[2]!r}" for c in CASES])
def test_each_variable_takes_its_kind_of_value_and_refuses_the_rest_in_one_line(var: str, good: str, bad: str) -> None:
    assert check("bench", {**GOOD, var: good}) is None
    line = check("bench", {**GOOD, var: bad})
    name = "SECONDS" if var == "REFDEPLOY_SECONDS" else var
    assert line is not None and line.startswith(f"make bench: {name}="), line
    assert "\n" not in line
    assert re.search(r"\b(give|choose|close)\b", line), line


def test_a_refusal_shows_the_value_as_typed_on_one_line_and_never_a_credential() -> None:
    assert shown("SEARCH", "fast") == "SEARCH=fast"
    assert shown("VIA", "a b'c\nd") == "VIA='a b'\\''c\\nd'"
    assert shown("VIA", "http://user:pw-secret@proxy:3128") == "VIA=http://***@proxy:3128"
    line = check("bench", {**GOOD, "ANSIBLE_ARGS": "-e x=pw-secret\n"})
    assert line is not None and "ANSIBLE_ARGS=<not shown" in line and "pw-secret" not in line


def test_what_a_target_cannot_run_without() -> None:
    assert check("probe", GOOD) == (
        "make probe: set PROBE=io, samplers, metrics, stacks, wchan, perf, hoststate or record"
    )
    assert check("probe", {**GOOD, "PROBE": "io", "REFDEPLOY_SECONDS": ""}) is None  # the I/O probe has no window
    assert check("probe", {**GOOD, "PROBE": "wchan", "REFDEPLOY_SECONDS": ""}) == (
        "make probe: SECONDS=: give SECONDS=n, the window in whole seconds, 1 or more (default 20)"
    )
    assert check("compare", {**GOOD, "A": "x"}) is not None
    assert check("compare", {**GOOD, "A": "x", "B": "y"}) is None
    assert check("validate", {**GOOD, "A": "x", "B": "y", "PROFILE": "p"}) == (
        "make validate: A and B name the profiles; leave PROFILE unset"
    )
    assert check("status", {**GOOD, "REQUESTS": ""}) is None
    assert check("profile", {**GOOD, "REQUESTS": ""}) is not None


ARGS = [
    # (ANSIBLE_ARGS, what the line must say; "" where it is good)
    ("--check --diff -e serve_force_replace=true", ""),
    ("-e '{\"probe_io_depths\": [1, 64]}' -e @mine.yml", ""),
    ("-e bench_runs=2", "-e bench_runs: the Makefile sets bench_runs from RUNS: give RUNS= instead"),
    ("--extra-vars=bench_runs=2", "-e bench_runs: the Makefile sets bench_runs from RUNS"),
    ("-e '{\"bench_runs\": 2}'", "-e bench_runs: the Makefile sets bench_runs from RUNS"),
    ('-e {"probe_io_depths": [1, 64]}', "-e probe_io_depths: its JSON was split at a space or lost its quotes"),
    ("-e probe_io_depths=[1,64]", "-e probe_io_depths=[...: key=value gives a string, never a list"),
    ("-e 'x=1", "No closing quotation"),
    ("-e \"x={{ lookup('pipe', 'id') }}\"", "-e x: holds a template"),
    ('-e \'{"y": "{% if 1 %}"}\'', "-e y: holds a template"),
]


@pytest.mark.parametrize(("text", "says"), ARGS, ids=[a[0] for a in ARGS])
def test_ansible_args_refused_where_ansible_would_lose_a_value_or_report_forty_lines(text: str, says: str) -> None:
    line = ansible_args_error(text, {"bench_runs": "RUNS"}, "bench")
    if not says:
        assert line is None
    else:
        assert line is not None and line.startswith("make bench: ANSIBLE_ARGS: ") and says in line, line
        assert "\n" not in line


def test_the_makefile_exports_and_checks_every_variable_the_operator_sets() -> None:
    text = (REPO / "Makefile").read_text()
    listed = re.search(r"^MAKE_VARS := ((?:.*\\\n)*.*)$", text, re.M)
    assert listed is not None
    assert listed.group(1).replace("\\\n", " ").split() == list(VARS)
    # Every `NAME ?=` of the Makefile is an operator's variable, PYTHON (the interpreter itself) aside.
    assert set(re.findall(r"^([A-Z_]+) *\?=", text, re.M)) - {"PYTHON"} == set(VARS)
    # No recipe pastes one into a shell line: each is read from the environment, "$$NAME" (REFDEPLOY_SECONDS for
    # SECONDS), or tested by make itself (emptiness, a word).
    recipes = "\n".join(ln for ln in text.splitlines() if ln.startswith("\t") or ln.startswith(" "))
    for name in VARS:
        pasted = re.findall(rf"\$\({name}\)", recipes)
        emptiness = re.findall(rf"\$\((?:if |if \$\(strip |filter [a-z ]+,)\$\({name}\)[,)]", recipes)
        assert len(pasted) == len(emptiness), name


def test_it_runs_on_the_system_python_alone_and_fast() -> None:
    """Before the virtualenv exists, on every target: -I -S, nothing but the standard library."""
    env = {"PATH": os.environ["PATH"], "HOST": "localhost", "INVENTORY": "inventory/local", "VIA": "x;id"}
    argv = [sys.executable, "-I", "-S", str(REPO / "serving" / "config" / "make_vars.py"), "bench"]
    start = time.monotonic()
    cp = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=30)
    took = time.monotonic() - start
    assert (cp.returncode, cp.stdout) == (2, "")
    assert cp.stderr.startswith("make bench: VIA='x;id': give VIA=front"), cp.stderr
    assert took < 2.0, took  # ~0.03 s on an idle machine; the bound is for a loaded one
    ok = subprocess.run([*argv[:-1], "status"], env={**env, "VIA": ""}, capture_output=True, text=True, check=False)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    assert make_vars.main([]) == 2
