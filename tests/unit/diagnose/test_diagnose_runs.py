"""`make diagnose` end to end on recorded runs of this machine (tests/fixtures/diagnose/README.md says what each is):
a healthy light capture and bench, whose only true finding is the CPU build's (decode bound by its worker thread's
CPU), and the capture with a CONSTRUCTED GPU sampler log stamped into its window (launch-bound, a link at Gen 1 x8).
The faults induced for real are tests/integration/test_diagnose_faults.py's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from serving.diagnose.engine import diagnose, render_text, run_diagnosis
from serving.diagnose.evidence import load_evidence
from serving.diagnose.model import Diagnosis, json_schema

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "diagnose"
SCHEMA = REPO / "docs" / "diagnosis.schema.json"
RANK_TRACE = REPO / "tests" / "fixtures" / "rank_trace" / "pp2-cpu-tiny"


def _consistent(d: Diagnosis) -> list[str]:
    return [f.rule for f in d.findings if f.verdict == "consistent with"]


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(FIXTURES / name, out)
    return out


def _cites_what_exists(d: Diagnosis, run_dir: Path) -> None:
    for f in d.findings:
        for g in f.figures:
            for artifact in g.artifact.split(", "):
                assert (run_dir / artifact).is_file(), f"{f.rule}: {g.name} cites {artifact}, not in {run_dir}"


def test_a_healthy_capture_finds_decode_bound_by_its_worker_thread_and_nothing_else(tmp_path: Path) -> None:
    run = _copy("capture-cpu-tiny", tmp_path)
    d, js, txt = run_diagnosis(run)
    assert _consistent(d) == ["interval", "threads"], render_text(d)
    assert d.slow_interval.startswith("decode (93%")
    top = d.findings[1]
    assert top.title.startswith("execution-bound decode: the worker's thread VLLM::Worker runs 86% of a CPU")
    assert "and vLLM's threads use 1.7 of the container's 2 CPUs" in top.title
    assert 0.7 < top.explains < 0.9
    # The rest is ruled out, each by a rule that ran; GPU and voiding could not, and say why.
    ruled = {f.rule for f in d.findings if f.verdict == "rules out"}
    assert ruled == {"disagreement", "overload", "cgroup", "contention", "kv", "numa", "page_cache"}
    cannot = {r.rule: r.why for r in d.rules if r.status == "could not run"}
    assert set(cannot) == {"pp_order", "scaling", "gpu", "voiding"} and "no GPU samples" in cannot["gpu"]
    assert cannot["scaling"].startswith("a capture offers one load")
    assert "no rank trace" in cannot["pp_order"]
    _cites_what_exists(d, run)
    # Written beside the evidence, the text leading with the findings.
    assert js == run / "diagnosis.json" and txt.read_text().splitlines()[3].startswith("findings, where the time goes")
    jsonschema.validate(json.loads(js.read_text()), json.loads(SCHEMA.read_text()))


@pytest.mark.parametrize(
    ("engine", "verdict"),
    [({"profiler": "", "stand_in": ""}, "rules out"), ({"profiler": "torch", "stand_in": ""}, "consistent with")],
)
def test_a_capture_that_records_its_engines_labels_is_voided_when_profiled(
    tmp_path: Path, engine: dict[str, str], verdict: str
) -> None:
    """The recorded capture with the "engine" its capture role now writes (the serving container's labels)."""
    run = _copy("capture-cpu-tiny", tmp_path)
    bundle = json.loads((run / "bundle.json").read_text())
    (run / "bundle.json").write_text(json.dumps({**bundle, "engine": engine}))
    d, _js, _txt = run_diagnosis(run)
    [f] = [f for f in d.findings if f.rule == "voiding"]
    assert f.verdict == verdict, render_text(d)
    assert "voiding" not in {r.rule for r in d.rules if r.status == "could not run"}
    if engine["profiler"]:
        assert f.title == "these figures are not the deployment's speed: the engine ran under the profiler (torch)"
        assert [g.artifact for g in f.figures] == ["bundle.json", "bundle.json"]
    else:
        assert f.symptom == "the capture's engine ran as the deployment serves"


def test_a_healthy_bench_finds_the_same_and_judges_only_its_measured_runs(tmp_path: Path) -> None:
    run = _copy("bench-cpu-tiny", tmp_path)
    ev = load_evidence(run)
    assert ev.windows is not None and len(ev.windows) == 4  # c1-m1, c1-m2, c4-m1, c4-m2
    d = diagnose(ev)
    # Its two points (concurrency 1 and 4) scale: seed 004's reading, a third finding (tests/unit/diagnose/
    # test_scaling.py has the rule's own cases).
    assert _consistent(d) == ["interval", "threads", "scaling"], render_text(d)
    assert "at point c4" in d.findings[0].title
    assert d.findings[2].title.startswith("idle capacity at low load: aggregate output kept rising (175.0 -> 574.4")
    # A bench reads no numa_maps and no rank trace.
    assert {r.rule for r in d.rules if r.status == "could not run"} == {"pp_order", "gpu", "numa"}
    _cites_what_exists(d, run)


def test_a_launch_bound_gpu_on_a_slow_link_is_diagnosed_as_such(tmp_path: Path) -> None:
    """CONSTRUCTED GPU samples (tests/fixtures/diagnose/README.md) in the recorded capture's window."""
    run = _copy("capture-cpu-tiny", tmp_path)
    bundle = json.loads((run / "bundle.json").read_text())
    bundle["config"]["pcie_min"] = [4, 16]  # the 3090 class's PCIe 4.0 x16 (inventory gpu_class)
    (run / "bundle.json").write_text(json.dumps(bundle))
    t0 = float(bundle["window"]["start_mono_s"])
    lines = (FIXTURES / "nvidia-smi-3x3090-launch-bound.constructed.csv").read_text().splitlines()
    (run / "samplers" / "nvidia-smi.log").write_text(
        "".join(f"{t0 + 0.5 + 0.2 * (i // 3):.6f}\t2026-12-04T12:00:00+00:00\t{ln}\n" for i, ln in enumerate(lines))
    )
    d, _js, _txt = run_diagnosis(run)
    gpu = [f for f in d.findings if f.rule == "gpu" and f.verdict == "consistent with"]
    assert [f.title.split(":")[0] for f in gpu] == [
        "launch-bound",
        "GPU 0's PCIe link ran below the class's while busy",
    ]
    assert "the GPUs ran kernels 28% of the time while a worker thread ran 86% of a CPU" in gpu[0].title
    assert "GPU 0: PCIe link at Gen 1 x8 in 15 of 15 busy samples" in gpu[1].symptom
    assert {f.rule for f in gpu} == {"gpu"} and not any("GPU 1" in f.title or "GPU 2" in f.title for f in gpu)


@pytest.mark.parametrize(("trace", "runner"), [("pp2-cpu-tiny", "not recorded"), ("pp2-cpu-tiny-v2-interpret", "V2")])
@pytest.mark.parametrize(("variant", "verdict"), [("receive-first", "consistent with"), ("deferred", "rules out")])
def test_a_second_stage_that_receives_before_it_prepares_is_seed_8s_ordering(
    tmp_path: Path, variant: str, verdict: str, trace: str, runner: str
) -> None:
    """The recorded capture with a PP=2 engine's RECORDED rank trace in it (tests/fixtures/rank_trace/), on V1 (its
    lines written before the patch named the runner) and on V2: the finding names the runner."""
    run = _copy("capture-cpu-tiny", tmp_path)
    shutil.copytree(RANK_TRACE.parent / trace / variant, run / "ranks")
    d, _js, _txt = run_diagnosis(run)
    found = [f for f in d.findings if f.rule == "pp_order"]
    assert [f.verdict for f in found] == [verdict], render_text(d)
    f = found[0]
    if verdict == "consistent with":
        assert f.title.startswith(
            f"rank 1 (PP 1, model runner {runner}) prepares inputs only after a receive that waited for the previous "
            "stage: up to "
        )
        if trace == "pp2-cpu-tiny":
            # Rank 1's receive waited 7.70 ms of its 12.81 ms step; its preparation, 1.33 ms, is what deferring can win.
            assert f.title.endswith("up to 1.33 ms of a 12.81 ms token could overlap")
            assert f.symptom == (f"rank 1 (PP 1, model runner {runner}): 1.33 ms of preparation behind a 7.70 ms "
                                 "receive in a 12.81 ms step")  # fmt: skip
            assert f.explains == round(1.33 / 12.807, 3)
        else:
            assert 0.05 <= f.explains <= 1.0
        assert "REFDEPLOY_PP_DEFER_RECV=1" in f.not_established
        assert f.next_steps[0].startswith("make hypothesis ") and "at c1'" in f.next_steps[0]
    else:
        assert f.symptom == "inside the preparation in 20 of 20 steps"
        assert f.title.startswith(f"rank 1 (PP 1, model runner {runner}) already prepares before it receives")
    assert {g.artifact for g in f.figures} == {"ranks/rank*.steps.jsonl"}
    assert [g.value for g in f.figures if g.name.endswith(": model runner")] == [runner]


def test_three_stages_sum_the_overlap_of_both_receiving_stages_and_a_deferred_middle_stage_is_ruled_out(
    tmp_path: Path,
) -> None:
    """The RECORDED PP=3 traces (cpu-tiny-pp3, the middle stage receives and sends): both non-first stages waited for
    their metadata, and the overlap deferring can win is each stage's smaller of preparation and wait, summed."""
    found = {}
    for variant in ("receive-first", "deferred"):
        run = _copy("capture-cpu-tiny", tmp_path / variant)
        shutil.copytree(RANK_TRACE.parent / "pp3-cpu-tiny" / variant, run / "ranks")
        d, _js, _txt = run_diagnosis(run)
        found[variant] = [f for f in d.findings if f.rule == "pp_order"]
    (first,) = found["receive-first"]
    assert first.verdict == "consistent with"
    # Rank 1: 1.50 ms of preparation behind a 3.46 ms receive; rank 2: 1.32 ms behind 11.32 ms; the last stage's
    # step (the token) 15.92 ms. Preparation is the smaller at both, so the overlap is 1.496 + 1.324 ms.
    assert first.title == (
        "2 stages prepare inputs only after a receive that waited for the previous stage: up to 2.82 ms of a "
        "15.92 ms token could overlap"
    )
    assert first.explains == round(2.82 / 15.924, 3)
    assert [f.verdict for f in found["deferred"]] == ["rules out", "rules out"]
    assert [f.title.split(")")[0] for f in found["deferred"]] == [
        "rank 1 (PP 1, model runner V1", "rank 2 (PP 2, model runner V1",
    ]  # fmt: skip


def test_a_receive_that_did_not_wait_is_ruled_out_though_it_came_first(tmp_path: Path) -> None:
    """RECORDED (tests/fixtures/rank_trace/pp2-cpu-tiny-heavy-last/): vLLM's order, the receive first in every step,
    but the last stage the slower (layers 1/3) under concurrency 8, so the previous stage's metadata was already
    there: the ordering alone is no cause, and deferring the receive wins nothing."""
    run = _copy("capture-cpu-tiny", tmp_path)
    shutil.copytree(RANK_TRACE.parent / "pp2-cpu-tiny-heavy-last", run / "ranks")
    d, _js, _txt = run_diagnosis(run)
    (f,) = [f for f in d.findings if f.rule == "pp_order"]
    assert f.verdict == "rules out", render_text(d)
    assert f.title == (
        "rank 1 (PP 1, model runner V1) receives before it prepares, but the receive did not wait: 0.05 ms of a "
        "3.671 ms step (under 5%): the metadata was there, and deferring it wins nothing"
    )
    assert f.symptom == "the receive came first in 60 of 60 steps" and f.explains == 0


def test_the_schema_file_is_the_models_and_rejects_what_the_model_does() -> None:
    assert json.loads(SCHEMA.read_text()) == json.loads(json.dumps(json_schema())), (
        "docs/diagnosis.schema.json is stale: python -m serving.diagnose.model > docs/diagnosis.schema.json"
    )
    d = diagnose(load_evidence(FIXTURES / "capture-cpu-tiny")).model_dump(mode="json")
    d["findings"][0]["verdict"] = "proves"  # the seed's words only
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, json_schema())


def test_diagnose_refuses_what_is_not_a_run_in_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "serving.cli", "diagnose", "--run", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, check=False)  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        f"{tmp_path}: not a capture or bench run (expected runs/<host>/<timestamp>/capture/ or bench/)"
    )
    # A run id that leads out of runs/ is refused too (serving/record/run_dirs.py, as compare's sides).
    r = subprocess.run([sys.executable, "-m", "serving.cli", "diagnose", "--run", "..", "--runs-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, check=False)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip() == (
        "..: not a capture or bench run (expected runs/<host>/<timestamp>/capture/ or bench/)"
    )


def test_the_docs_carry_the_rules_thresholds_as_the_modules_state_them() -> None:
    from serving.diagnose.rules import thresholds_table

    assert thresholds_table() in (REPO / "docs" / "diagnose.md").read_text(), (
        "docs/diagnose.md's table is stale: python -m serving.diagnose.rules.table"
    )
