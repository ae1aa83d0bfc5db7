"""The CPU a thread really gets, on captures RECORDED on this machine with the condition induced for real
(tests/fixtures/diagnose/README.md says how each was made): the engine core narrowed to the worker's CPU, a busy loop
outside the container on the engine's CPUs, and a healthy control; and the rules at their thresholds (WAIT_PCT,
CPUS_BUSY) on evidence built here, both sides, so each test can fail both ways."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from probes.readers.cpus import HostUse
from serving.diagnose.engine import render_text, run_diagnosis
from serving.diagnose.evidence import Evidence, Src, ThreadCpu, load_evidence
from serving.diagnose.model import Diagnosis, Finding
from serving.diagnose.rules import contention, threads

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "diagnose"


def _run(name: str, tmp_path: Path) -> tuple[Diagnosis, Path]:
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run)
    d, _js, _txt = run_diagnosis(run)
    for f in d.findings:  # every figure cites a file the run holds
        for g in f.figures:
            for artifact in g.artifact.split(", "):
                assert artifact == "-" or (run / artifact).is_file(), f"{f.rule}: {g.name} cites {artifact}"
    return d, run


def _of(d: Diagnosis, rule: str) -> list[Finding]:
    return [f for f in d.findings if f.rule == rule]


def test_the_healthy_control_has_no_wait_finding_and_judges_the_engines_cpus(tmp_path: Path) -> None:
    d, _ = _run("capture-cpu-tiny-cpus-control", tmp_path)
    assert [f.rule for f in d.findings if f.verdict == "consistent with"] == ["interval", "threads"], render_text(d)
    [t] = _of(d, "threads")
    assert t.title.startswith("execution-bound decode: the engine_core's thread VLLM::EngineCor runs 82% of a CPU")
    # The worker's thread waited 21% (vLLM binds it to CPU 0 itself): under WAIT_PCT, so no finding of its own.
    assert "worker/VLLM::Worker (tid 54) 78% (max 90%, waiting for a CPU 21%)" in t.symptom
    [c] = _of(d, "contention")
    assert c.verdict == "rules out" and c.symptom.startswith("the engine's CPUs (0-1) 99% busy, others 0.20 CPUs")
    assert "no process used a twentieth of a CPU" in c.symptom


def test_the_engine_core_narrowed_to_the_workers_cpu_waits_for_it_and_names_the_worker(tmp_path: Path) -> None:
    d, _ = _run("capture-cpu-tiny-engine-core-on-cpu0", tmp_path)
    wait, busy = _of(d, "threads")
    assert wait.title == (
        "waiting for a CPU in decode: the engine_core's thread VLLM::EngineCor waits 84% of the window and runs "
        "12%, on CPU 0 only (its affinity within the cpuset 0-1)"
    )
    assert "CPU 0 100% busy; on those CPUs too: worker/VLLM::Worker (tid 122) 78%" in wait.symptom
    # Ranked by what the wait costs: the execution share (prefill and decode: all but the 0% queueing) times the
    # wait's share of the window; above the worker's own execution-bound finding (78%).
    assert wait.explains == pytest.approx(0.84, abs=0.01)
    assert d.findings[1].title == wait.title
    assert busy.title.endswith("runs 78% of a CPU on CPU 0 only (its affinity within the cpuset 0-1)")
    # Host-wide the engine's CPUs were 70% busy, and no one outside used them: contention rightly ruled out.
    [c] = _of(d, "contention")
    assert c.verdict == "rules out" and "the engine's CPUs (0-1) 70% busy" in c.symptom


def test_a_busy_loop_on_the_engines_cpus_is_a_wait_and_contention_naming_it(tmp_path: Path) -> None:
    d, _ = _run("capture-cpu-tiny-busy-loop-on-cpus", tmp_path)
    [wait] = _of(d, "threads")
    assert wait.title.startswith("waiting for a CPU in decode: the engine_core's thread VLLM::EngineCor waits 64%")
    loop = "sh (host pid 17827, CPUs 0-1) 0.46 CPU"
    assert f"outside the container (over 17 s around the window): {loop}" in wait.symptom
    [c] = _of(d, "contention")
    assert c.verdict == "consistent with"
    assert c.title == "contention from outside the container: others used 0.8 of the engine's CPUs (0-1) while they " \
        "were saturated"  # fmt: skip
    assert loop in c.symptom and 0.35 < c.explains < 0.45
    assert [f.rule for f in d.findings[:3]] == ["interval", "threads", "contention"]


# --- the rules at their thresholds -----------------------------------------------------------------------------


def _ev(**kw: object) -> Evidence:
    ev = Evidence(run_dir=Path("/r"), kind="capture", window_s=20.0, windows=[(100.0, 120.0)])
    ev.client = {"ttft_p50_ms": Src(20.0, "r"), "tpot_p50_ms": Src(5.0, "r"), "output_len": Src(33, "r")}
    for k, v in kw.items():
        setattr(ev, k, v)
    return ev


def test_a_thread_waiting_wait_pct_of_the_window_is_a_finding_and_just_under_it_is_not() -> None:
    rows = [ThreadCpu(7, 7, "VLLM::Worker", "worker", 40.0, 50.0, 20, threads.WAIT_PCT, (1,)),
            ThreadCpu(9, 9, "VLLM::EngineCor", "engine_core", 60.0, 70.0, 20, 5.0, (0, 1))]  # fmt: skip
    host = [HostUse(4242, "stress", "1", "/", 0.9, 1), HostUse(4343, "idle-ish", "1", "/", 0.01, 1),
            HostUse(4444, "elsewhere", "2-3", "/", 1.0, 2)]  # fmt: skip
    ev = _ev(threads=Src(rows, "samplers/pidstat.log"), cpuset=Src([0, 1, 2, 3], "h"), cpuset_cpus=Src(4, "h"),
             cpu_busy=Src({0: 0.5, 1: 0.99, 2: 1.0, 3: 0.1}, "c"), host_use=Src(host, "p"))  # fmt: skip
    [f] = threads.run(ev)
    assert f.verdict == "consistent with" and f.title == (
        "waiting for a CPU in decode: the worker's thread VLLM::Worker waits 30% of the window and runs 40%, on CPU "
        "1 only (its affinity within the cpuset 0-3)"
    )
    # Only what may run on CPU 1 and used a twentieth of a CPU is named: not the process bound to CPUs 2-3.
    assert "CPU 1 99% busy; on those CPUs too: engine_core/VLLM::EngineCor (tid 9) 60%" in f.symptom
    assert "stress (host pid 4242, CPUs 1) 0.90 CPU" in f.symptom
    assert "idle-ish" not in f.symptom and "elsewhere" not in f.symptom
    rows[0] = ThreadCpu(7, 7, "VLLM::Worker", "worker", 40.0, 50.0, 20, threads.WAIT_PCT - 1, (1,))
    assert [f.verdict for f in threads.run(ev)] == ["rules out"]


def _level(usage_s: float) -> dict[str, object]:
    return {"path": "/docker/abc", "cpu_usage_s": usage_s}


def test_contention_is_judged_on_the_engines_cpus_not_the_host() -> None:
    # A 4-CPU host: the engine may run on CPUs 0-1, busy CPUS_BUSY; 2-3 idle (the host 45-50% busy, which a
    # host-wide judgement rules out). The container used 0.8 CPU over the 20 s: others 1.0 of its 2 CPUs.
    rows = [ThreadCpu(7, 7, "VLLM::Worker", "worker", 50.0, 60.0, 20, 45.0, (0, 1))]
    per_cpu = {0: contention.CPUS_BUSY, 1: contention.CPUS_BUSY, 2: 0.0, 3: 0.0}
    vm = {"us": [(101.0, 48.0)], "sy": [(101.0, 2.0)]}
    ev = _ev(threads=Src(rows, "p"), cpuset=Src([0, 1, 2, 3], "h"), cpu_busy=Src(per_cpu, "c"), host_cpus=4,
             vmstat=Src(vm, "v"), cgroup=Src([_level(16.0)], "g"), cgroup_span=(100.0, 120.0))  # fmt: skip
    [f] = contention.run(ev)
    assert f.verdict == "consistent with" and "others used 1.0 of the engine's CPUs (0-1)" in f.title
    ev.cpu_busy = Src({0: 0.89, 1: 0.89, 2: 0.0, 3: 0.0}, "c")  # just under CPUS_BUSY
    assert [f.verdict for f in contention.run(ev)] == ["rules out"]
    ev.cpu_busy = None  # no per-CPU reading (a bench): the host's 4 CPUs at 50% are judged, and rule it out
    [f] = contention.run(ev)
    assert f.verdict == "rules out" and "the host's 4 CPUs 50% busy" in f.symptom


def test_affinity_read_at_both_ends_is_the_threads_cpus_within_the_cpuset() -> None:
    ev = load_evidence(FIXTURES / "capture-cpu-tiny-engine-core-on-cpu0")
    by_tid = {t.tid: t for t in ev.threads.value} if ev.threads else {}
    assert by_tid[67].allowed == (0,) and by_tid[122].allowed == (0,) and by_tid[1].allowed == (0, 1)
    assert ev.cpu_busy is not None and round(ev.cpu_busy.value[0], 2) == 1.0
