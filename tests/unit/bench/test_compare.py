"""serving.bench.compare and serving.bench.report over bench directories built from real `vllm bench serve`
results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from serving.bench import compare, stats
from serving.bench import conditions as bench_conditions
from serving.bench import protocol as bench
from serving.bench import report as bench_report
from serving.evidence.plots import PANEL_COLOURS
from tests.helpers.bench_dirs import SMOKE, make_bench, serving_plan, side

REPO = Path(__file__).resolve().parents[3]


def test_a_run_its_bench_flagged_is_left_out_and_named(tmp_path: Path) -> None:
    a = make_bench(tmp_path, "a", 1000)
    b = make_bench(tmp_path, "b", 2000)
    run = b / "runs" / "c1-m1" / "result.json"
    result = json.loads(run.read_text())
    result["output_lens"][0] = 5  # a short request: the bench flags the run
    run.write_text(json.dumps(result))
    r = compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), [])
    assert r["excluded"]["A"] == []
    (left_out,) = r["excluded"]["B"]
    assert left_out.startswith(f"{b} c1-m1: output length mismatch")
    # B keeps one valid run at c1: too few to compare there (one run's spread is not run-to-run spread)
    assert r["points"]["c1"] == dict.fromkeys(compare.FIGURES)
    why = "not compared: B has 1 valid measured run(s) here, at least 2 a side are needed (more runs: RUNS=n)"
    assert r["too_few_runs"] == {"c1": why}
    c4 = r["points"]["c4"]["ttft_ms"]
    assert (c4["n_runs_a"], c4["n_runs_b"]) == (2, 2)
    text = compare.render_text(r)
    assert f"left out of B (its bench flagged it): {b} c1-m1: output length mismatch" in text
    assert f"c1:\n  {why}\n" in text


def test_same_deployment_shows_no_measurable_difference(tmp_path: Path) -> None:
    a = make_bench(tmp_path, "a", 1000)
    b = make_bench(tmp_path, "b", 2000)
    r = compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), [])
    verdicts = {e["verdict"] for fig in r["points"].values() for e in fig.values() if e}
    assert verdicts == {compare.NO_DIFFERENCE}
    assert r["order"] == "A then B"
    assert "conditions equal on both sides" in compare.render_text(r)


def test_a_real_shift_is_reported_with_its_direction(tmp_path: Path) -> None:
    a = make_bench(tmp_path, "a", 2000, max_num_seqs=8)
    b = make_bench(tmp_path, "b", 1000, scale_ttft=4.0, max_num_seqs=1)
    r = compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), ["max_num_seqs"])
    ttft = r["points"]["c4"]["ttft_ms"]
    assert ttft["verdict"] == "B higher (worse)"
    assert ttft["ci"][0] > 0
    assert r["points"]["c4"]["tpot_ms"]["verdict"] == compare.NO_DIFFERENCE
    assert r["declared_differences"] == {"profile.vllm.max_num_seqs": {"A": 8, "B": 1}}
    assert r["order"] == "B then A"


def test_manifests_that_differ_are_refused_with_the_fields(tmp_path: Path) -> None:
    a = make_bench(tmp_path, "a", 1000)
    b = make_bench(tmp_path, "b", 2000, max_num_seqs=1, workload=SMOKE.model_copy(update={"input_len": 64}))
    with pytest.raises(compare.CompareRefused) as exc:
        compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), ["max_num_seqs"])
    msg = str(exc.value)
    assert "workload.input_len: A=32 B=64" in msg
    assert "max_num_seqs" not in msg.split("(declared")[1].split(")", 1)[1]
    with pytest.raises(compare.CompareRefused, match=r"profile\.vllm\.max_num_seqs: A=8 B=1"):
        compare.compare(side("A", [a], tmp_path), side("B", [make_bench(tmp_path, "c", 3000, max_num_seqs=1)],
                                                        tmp_path), [])  # fmt: skip


def test_interleaved_sides_are_pooled_and_their_order_reported(tmp_path: Path) -> None:
    a1, b1 = make_bench(tmp_path, "a1", 1000), make_bench(tmp_path, "b1", 2000)
    a2, b2 = make_bench(tmp_path, "a2", 3000), make_bench(tmp_path, "b2", 4000)
    r = compare.compare(side("A", [a1, a2], tmp_path), side("B", [b1, b2], tmp_path), [])
    assert r["order"].startswith("interleaved: A/B/A/B (B ran later on average")
    assert r["points"]["c1"]["tpot_ms"]["n_runs_a"] == 4
    r = compare.compare(side("A", [a1, b2], tmp_path), side("B", [b1, a2], tmp_path), [])
    assert r["order"] == "balanced: A/B/B/A (a steady drift falls equally on A and B)"


def test_intervals_are_simultaneous_over_the_figures(tmp_path: Path) -> None:
    """Ten figures at 95% each would call identical deployments different in up to 40% of compares: each
    interval is widened to 1 - 0.05/10, and is wider than the 95% one."""
    a1, b1 = make_bench(tmp_path, "a1", 1000, 1.0), make_bench(tmp_path, "b1", 2000, 1.1)
    b2, a2 = make_bench(tmp_path, "b2", 3000, 1.15), make_bench(tmp_path, "a2", 4000, 0.95)
    r = compare.compare(side("A", [a1, a2], tmp_path), side("B", [b1, b2], tmp_path), [])
    assert r["figures_tested"] == 10 and r["level_per_figure"] == pytest.approx(0.995)
    assert "simultaneous at 95% over the 10 figures below (Bonferroni: each at 99.5%)" in compare.render_text(r)
    e = r["points"]["c1"]["ttft_ms"]
    _, lo95, hi95 = stats.welch_interval(e["bench_medians_a"], e["bench_medians_b"])  # type: ignore[misc]
    lo, hi = e["welch_ci_over_benches"]
    assert lo < lo95 and hi > hi95


def test_a_stricter_family_level_widens_every_interval(tmp_path: Path) -> None:
    """LEVEL=0.999: the same benches, every interval wider than at the default 95%, and the report says so."""
    a1, b1 = make_bench(tmp_path, "a1", 1000, 1.0), make_bench(tmp_path, "b1", 2000, 1.1)
    b2, a2 = make_bench(tmp_path, "b2", 3000, 1.15), make_bench(tmp_path, "a2", 4000, 0.95)
    sides = side("A", [a1, a2], tmp_path), side("B", [b1, b2], tmp_path)
    default, strict = compare.compare(*sides, []), compare.compare(*sides, [], family_level=0.999)
    assert strict["family_level"] == 0.999 and strict["level_per_figure"] == pytest.approx(0.9999)
    assert "simultaneous at 99.9% over the 10 figures below (Bonferroni: each at 99.99%)" in compare.render_text(strict)
    for point, figures in default["points"].items():
        for name, e in figures.items():
            s = strict["points"][point][name]
            assert s["ci"][0] <= e["ci"][0] and s["ci"][1] >= e["ci"][1], (point, name)
            assert s["welch_ci_over_benches"][0] <= e["welch_ci_over_benches"][0], (point, name)
    ttft, ttft_strict = default["points"]["c1"]["ttft_ms"], strict["points"]["c1"]["ttft_ms"]  # benches spread here
    assert ttft_strict["welch_ci_over_benches"][0] < ttft["welch_ci_over_benches"][0]


@pytest.mark.parametrize("level", [0.2, 1.0, 95.0])
def test_a_level_outside_its_range_is_refused(tmp_path: Path, level: float) -> None:
    a, b = make_bench(tmp_path, "a", 1000), make_bench(tmp_path, "b", 2000)
    with pytest.raises(compare.CompareRefused, match=r"LEVEL=.*a fraction in \[0.5, 1\), e.g. 0.99"):
        compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), [], family_level=level)


def test_other_prompts_are_another_condition(tmp_path: Path) -> None:
    """Two sides that sent different prompts (another seed offset) do not read "conditions equal"."""
    a, b = make_bench(tmp_path, "a", 1000), make_bench(tmp_path, "b", 2000, seed_offset=100)
    with pytest.raises(compare.CompareRefused, match=r"seed_offset: A=0 B=100"):
        compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), [])
    r = compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), ["seed_offset"])
    assert r["declared_differences"] == {"seed_offset": {"A": 0, "B": 100}}
    # A manifest written before the offset was recorded ran with 0.
    m = json.loads((a / "manifest.json").read_text())
    del m["seed_offset"]
    assert bench_conditions.conditions(m)["seed_offset"] == 0


def test_a_side_with_mixed_conditions_is_refused(tmp_path: Path) -> None:
    a1, a2 = make_bench(tmp_path, "a1", 1000), make_bench(tmp_path, "a2", 2000, max_num_seqs=2)
    with pytest.raises(compare.CompareRefused, match=r"side A: .* not run under the same conditions"):
        compare.compare(side("A", [a1, a2], tmp_path), side("B", [a1], tmp_path), ["max_num_seqs"])


def test_run_ids_resolve_under_the_runs_dir(tmp_path: Path) -> None:
    make_bench(tmp_path / "localhost", "20261129T000000Z", 1000)
    assert compare.resolve_bench_dir("20261129T000000Z", tmp_path).parent.name == "20261129T000000Z"
    with pytest.raises(compare.InputError, match="not a bench run"):
        compare.resolve_bench_dir("nothing-here", tmp_path)


def test_a_run_id_under_two_hosts_or_outside_the_runs_dir_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for host in ("gpu-a", "gpu-b"):
        make_bench(runs / host, "20261129T000000Z", 1000)
    with pytest.raises(compare.InputError, match=r"several hosts \(.*gpu-a/20261129T000000Z, .*gpu-b/2026.*path"):
        compare.resolve_bench_dir("20261129T000000Z", runs)
    assert compare.resolve_bench_dir(str(runs / "gpu-b" / "20261129T000000Z"), runs).parent.parent.name == "gpu-b"
    make_bench(tmp_path / "elsewhere", "20261130T000000Z", 1000)
    (runs / "gpu-a" / "20261130T000000Z").symlink_to(tmp_path / "elsewhere" / "20261130T000000Z")
    with pytest.raises(compare.InputError, match="resolves outside"):
        compare.resolve_bench_dir("20261130T000000Z", runs)
    with pytest.raises(compare.InputError, match="not a bench run"):
        compare.resolve_bench_dir("..", runs / "gpu-a")


def test_a_truncated_bench_manifest_is_one_line_naming_it(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    (d / "manifest.json").write_text((d / "manifest.json").read_text()[:100])
    with pytest.raises(compare.InputError, match=r"manifest.json: the bench manifest is not valid JSON .*make bench"):
        compare.load_side("A", [str(d)], tmp_path)
    (d / "manifest.json").write_text('{"kind": "bench", "runs": [1]}')
    with pytest.raises(compare.InputError, match=r"runs are missing or malformed"):
        compare.load_side("A", [str(d)], tmp_path)


def test_report_from_raw_artifacts(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    s = bench_report.write_report(d)
    assert s["status"] == "ok"
    text = (d / "report.txt").read_text()
    assert "TTFT = t1 - t0; TPOT = (tN - t1)/(N - 1); decode rate = (N - 1)/(tN - t1)" in text
    assert "one token per chunk in every request" in text
    assert "the client shares the server's CPUs" in text
    page = (d / "report.html").read_text()
    assert page.count("<svg") >= 6
    assert PANEL_COLOURS["latency"][0] in page  # the CDFs were drawn
    assert PANEL_COLOURS["gpu"][0] in page  # the scaling plot was drawn
    summary: dict[str, Any] = json.loads((d / "summary.json").read_text())
    c4 = next(p for p in summary["points"] if p["point"] == "c4")
    assert c4["tpot_ms"]["n"] == 16 and c4["runs_valid"] == 2


def test_report_of_a_failed_bench_keeps_what_there_is(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    shutil.rmtree(d / "runs" / "c4-m2")
    (d / "client.json").write_text(json.dumps({"status": "failed", "reason": "the server stopped answering"}))
    s = bench_report.write_report(d)
    assert s["status"] == "failed" and s["reason"] == "the server stopped answering"
    run = next(r for r in s["runs"] if r["id"] == "c4-m2")
    assert run["status"] == "not run"
    assert "status: FAILED" in (d / "report.txt").read_text()


def test_a_bench_reports_first_and_then_says_in_one_line_why_it_did_not_complete(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    done = bench_report.report_bench(d, {"host": "h1", "client_rc": 0, "timeout_s": 900, "change": {}})
    assert done["ok"] is True and done["line"] == "" and done["lines"][-2] == f"report: {d / 'report.txt'}"
    shutil.rmtree(d / "runs" / "c4-m2")
    (d / "client.json").write_text(json.dumps({"status": "failed", "reason": "the server stopped answering"}))
    died = {"changed": True, "line": "refdeploy-vllm died or was replaced in the window: restarts 0 -> 1"}
    out = bench_report.report_bench(d, {"host": "h1", "client_rc": 1, "timeout_s": 900, "change": died})
    assert out["ok"] is False and out["lines"][-1] == died["line"]
    assert out["line"] == (
        "refdeploy-vllm died or was replaced in the window: restarts 0 -> 1; the bench on h1 FAILED (a run failed): "
        f"the server stopped answering; partial data kept in {d}/"
    )
    late = bench_report.report_bench(d, {"host": "h1", "client_rc": 124, "timeout_s": 900, "change": {}})
    assert "FAILED (it ran past 900 s and was stopped)" in late["line"]


def test_class_reference_figures_sit_beside_the_measured_ones(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["gpu_class"] = {
        "name": "rtxpro6000",
        "reference": {"e2e_tok_s_concurrency_1": 57.6, "aggregate_tok_s_concurrency_4": 144.4,
                      "aggregate_tok_s_concurrency_2": 97.4, "scaling_concurrency_4": 2.5, "ms_per_token": 17.5},
    }  # fmt: skip
    (d / "manifest.json").write_text(json.dumps(manifest))
    s = bench_report.write_report(d)
    beside = {b["key"]: b for b in s["reference_beside_measured"]}
    c1, c4 = (next(p for p in s["points"] if p["point"] == c) for c in ("c1", "c4"))
    assert beside["aggregate_tok_s_concurrency_4"]["measured"] == c4["output_tok_s"]["median"]
    assert beside["aggregate_tok_s_concurrency_2"]["measured"] is None  # smoke has no concurrency 2
    # 57.6 is tokens over wall time, prefill included: beside N/(tN-t0), not the decode rate (N-1)/(tN-t1).
    e2e = beside["e2e_tok_s_concurrency_1"]
    assert e2e["measured"] == c1["e2e_tok_s"]["median"] != c1["decode_tok_s"]["median"]
    assert e2e["measured"] < c1["decode_tok_s"]["median"]
    # Seed 004's scaling: aggregate at 4 over aggregate at 1, the same definition on both sides.
    assert beside["scaling_concurrency_4"]["measured"] == pytest.approx(
        c4["output_tok_s"]["median"] / c1["output_tok_s"]["median"]
    )
    assert "ms_per_token" not in beside
    text = (d / "report.txt").read_text()
    assert "aggregate_tok_s_concurrency_4: 144.4   measured here at concurrency 4:" in text
    assert "(per-request tokens over wall time N/(tN-t0), prefill included, tok/s (median))" in text


def test_a_profiled_bench_is_never_compared_with_an_unprofiled_one(tmp_path: Path) -> None:
    # make profile leaves the engine running with the torch profiler configured (KEEP=1); a bench of it records
    # the profiler (the container's label), and its figures are not results (seed 000 §6): not even as the
    # declared variable.
    a = make_bench(tmp_path, "a", 1000)
    b = make_bench(tmp_path, "b", 2000)
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["profiler"] is None
    manifest["profiler"] = "torch"
    (b / "manifest.json").write_text(json.dumps(manifest))
    for variables in ([], ["profiler"]):
        with pytest.raises(compare.CompareRefused, match=r"^refusing to compare: profiler: A=None B='torch': "):
            compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), variables)
    c = make_bench(tmp_path, "c", 3000)
    (c / "manifest.json").write_text(json.dumps(manifest))
    r = compare.compare(side("A", [b], tmp_path), side("B", [c], tmp_path), [])
    assert r["points"]  # profiled against profiled: compared


def test_the_plan_of_a_profiled_engine_configures_vllms_profiler_and_labels_it() -> None:
    from serving.config.profile import load_profile
    from serving.plan.plan import plan_from_profile
    from serving.plan.render import PROFILER_LABEL, PROFILER_MOUNT

    plain_plan = serving_plan(None)
    plain = bench.plan_bench(SMOKE, plain_plan, "/o", "0-1", "0-1")["manifest"]
    assert plain["profiler"] is None and "--profiler-config" not in plain["server"]["argv"]
    profile = load_profile("cpu-tiny")
    plan = plan_from_profile(profile, "localhost", {"hostname": "localhost", "served_files": ""}, profiler="torch")
    assert plan.profiler is not None and plan.profiler.container_dir == PROFILER_MOUNT
    assert plan.launch is not None
    spec = plan.launch.spec
    i = spec["command"].index("--profiler-config")
    assert json.loads(spec["command"][i + 1]) == {
        "profiler": "torch", "torch_profiler_dir": PROFILER_MOUNT, "torch_profiler_with_stack": False,
    }  # fmt: skip
    assert f"/var/lib/refdeploy/profiles/refdeploy-vllm:{PROFILER_MOUNT}" in spec["volumes"]
    assert spec["labels"][PROFILER_LABEL] == "torch"
    # Another spec: the deploy replaces the container (and rolls back as ever), and `make deploy` puts it back.
    assert plan.spec_digest != plain_plan.spec_digest and plan.argv == spec["command"]
    assert bench.plan_bench(SMOKE, plan, "/o", "0-1", "0-1")["manifest"]["profiler"] == "torch"


def test_a_hypothesis_at_a_point_with_too_few_runs_is_inconclusive_and_says_why(tmp_path: Path) -> None:
    a = make_bench(tmp_path, "a", 1000)
    b = make_bench(tmp_path, "b", 2000, scale_ttft=4.0)
    run = b / "runs" / "c1-m1" / "result.json"
    result = json.loads(run.read_text())
    result["output_lens"][0] = 5  # B keeps one valid run at c1
    run.write_text(json.dumps(result))
    claim = {"statement": "s", "predict": "ttft_ms up at c1", "written_unix_s": 0.0}
    r = compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), [], hypothesis=claim)
    assert r["hypothesis"]["verdict"] == "inconclusive"
    assert r["hypothesis"]["points"]["c1"]["why"].startswith("not compared: B has 1 valid measured run(s) here")


def _ran_against(bench: Path, container: str) -> None:
    (bench / "serving-container.json").write_text(json.dumps({"before": {"id": container}, "changed": False}))


def test_the_restarts_design_needs_each_bench_of_a_side_from_its_own_deploy(tmp_path: Path) -> None:
    a1, a2 = make_bench(tmp_path, "a1", 1000), make_bench(tmp_path, "a2", 3000)
    b1, b2 = make_bench(tmp_path, "b1", 2000), make_bench(tmp_path, "b2", 4000)
    for d, container in ((a1, "c1"), (a2, "c1"), (b1, "c2"), (b2, "c3")):
        _ran_against(d, container)
    a, b = side("A", [a1, a2], tmp_path), side("B", [b1, b2], tmp_path)
    assert (a.deploys(), b.deploys()) == (1, 2)
    with pytest.raises(compare.CompareRefused, match=r"DESIGN=restarts: side A has 2 bench\(es\) from 1 serving"):
        compare.compare(a, b, [], restarts=True)
    _ran_against(a2, "c4")
    r = compare.compare(side("A", [a1, a2], tmp_path), b, [], restarts=True)
    assert r["design"] == "restarts" and r["deploys"] == {"A": 2, "B": 2}
    assert "restart-to-restart variation is in the interval over benches" in compare.render_text(r)
    # Without the design the report still says how many deploys each side's benches came from.
    plain = compare.render_text(compare.compare(side("A", [a1], tmp_path), b, []))
    assert "A's 1 bench(es) ran against 1 serving container(s), B's 2 against 2" in plain


def test_a_refused_compare_leaves_no_hypothesis_it_recorded_itself(tmp_path: Path) -> None:
    a, b = make_bench(tmp_path, "a", 1000), make_bench(tmp_path, "b", 2000, max_num_seqs=1)
    cp = subprocess.run(
        [sys.executable, "-m", "serving.cli", "compare", "--a", str(a), "--b", str(b), "--runs-dir", str(tmp_path),
         "--hypothesis", "max_num_seqs=1 queues requests", "--predict", "ttft_ms up"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False,
    )  # fmt: skip
    assert cp.returncode == 2 and "max_num_seqs" in cp.stderr, cp.stderr
    assert list((tmp_path / "hypotheses").glob("*.json")) == []
