"""Seed 004's rule (serving/diagnose/rules/scaling.py) on two benches RECORDED on this machine's CPU default, one
below the engine's capacity and one past it (tests/fixtures/diagnose/README.md), and on the seed's own sweep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.diagnose.engine import diagnose, render_text
from serving.diagnose.evidence import Evidence, LoadPoint, Src, load_evidence
from serving.diagnose.rules import CannotRun
from serving.diagnose.rules.scaling import run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnose"


def _figure(finding: object, name: str) -> object:
    return next(g.value for g in finding.figures if g.name == name)  # type: ignore[attr-defined]


def test_below_capacity_aggregate_keeps_rising_idle_capacity_and_the_per_layer_budget() -> None:
    ev = load_evidence(FIXTURES / "bench-cpu-tiny-c1-c2-c4")
    [f] = run(ev)
    assert f.verdict == "consistent with", f
    assert f.title.startswith("idle capacity at low load: aggregate output kept rising (211.7 -> 300.1 -> 718.0 tok/s")
    assert "interconnect tuning will not move it" in f.title
    assert _figure(f, "share of the added load that became output, 1 -> 2") == 0.42
    assert _figure(f, "share of the added load that became output, 2 -> 4") == 1.39
    # The tiny model's 4 layers, from the plan's read of its config.json (manifest.json's model).
    assert _figure(f, "decoder layers") == 4
    assert _figure(f, "TPOT per layer at the lowest load") == pytest.approx(1130.4, abs=0.1)
    assert "no decode floor: the bench's class gives no memory bandwidth" in f.symptom
    assert f.next_steps[0].startswith("make profile")
    assert 0.8 < f.explains < 0.95  # decode's share of a request at concurrency 1


def test_past_capacity_aggregate_flat_is_a_shared_limit_and_the_queue_says_which() -> None:
    ev = load_evidence(FIXTURES / "bench-cpu-tiny-c8-c16-c32")
    d = diagnose(ev)
    [f] = [f for f in d.findings if f.rule == "scaling"]
    assert f.verdict == "consistent with", render_text(d)
    assert f.title.startswith("a shared limit from concurrency 8: aggregate output went 904.3 -> 912.2 tok/s (1% of")
    # Past max_num_seqs 8 the added requests wait for a place: TTFT grows, each token's time hardly.
    assert "(TTFT 50 -> 883 ms, TPOT 7.60 -> 7.78 ms)" in f.title
    assert f.explains == pytest.approx(0.75, abs=0.02)
    # The rule beside it names the resource: the engine's batch, as queueing.
    assert "overload" in [g.rule for g in d.findings if g.verdict == "consistent with"]


def _seed_004(layers: int | None, active_bytes: int | None, bandwidth: float | None) -> Evidence:
    """Seed 004's sweep (REFERENCE §10): aggregate 57.6, 97.4, 144.4 tok/s at 1, 2, 4 requests, each request at
    57, 49 and 36 tok/s; ~17.5 ms a token. TTFT is not in the seed: 200 ms, a stand-in that moves no figure here."""
    ev = Evidence(run_dir=Path("/nonexistent"), kind="bench")
    sweep = ((1, 57.6, 57.1), (2, 97.4, 49.0), (4, 144.4, 36.0))
    points = [LoadPoint(f"c{c}", c, None, agg, per, 1000 / per, 200.0, 200 + 127 * 1000 / per) for c, agg, per in sweep]
    ev.points = Src(points, "summary.json")
    ev.client["output_len"] = Src(128, "manifest.json")
    if layers is not None:
        ev.model = Src({"layers": layers, "active_weight_bytes": active_bytes}, "manifest.json")
    if bandwidth is not None:
        ev.memory_bandwidth_gb_s = Src(bandwidth, "manifest.json")
    ev.parallel = (8, 1)
    return ev


def test_seed_004s_own_sweep_is_idle_capacity_with_its_225_us_a_layer_and_a_decode_floor_far_below() -> None:
    # GLM-5: 78 layers; 40B parameters active a token (nvidia/GLM-5-NVFP4's model card: 744B, 40B activated) at Q4_K's
    # 4.5 bits a weight (ggml's block_q4_K: 144 bytes a 256) = 22.5 GB a step over 8 ranks; RTX PRO 6000: 1792 GB/s.
    [f] = run(_seed_004(78, 22_500_000_000, 1792.0))
    assert f.verdict == "consistent with" and f.title.startswith("idle capacity at low load")
    assert _figure(f, "TPOT per layer at the lowest load") == pytest.approx(224.5, abs=0.5)  # the seed's ~225 us
    assert _figure(f, "decode floor: those bytes read once") == pytest.approx(1.569, abs=0.001)
    assert _figure(f, "TPOT over the decode floor") == pytest.approx(11.2, abs=0.1)
    assert "reading its 2.81 GB of weights per rank once at 1792 GB/s takes 1.57 ms: TPOT is 11.2x that" in f.symptom
    # Without the model's facts or the class's bandwidth it says what it lacks, and still reads the sweep.
    [bare] = run(_seed_004(None, None, None))
    assert bare.title == f.title
    assert "no per-layer budget: the bench manifest has no model facts with a layer count" in bare.symptom


def test_one_load_cannot_tell_scaling_and_says_what_would(tmp_path: Path) -> None:
    run_dir = tmp_path / "bench"
    shutil.copytree(FIXTURES / "bench-cpu-tiny-c1-c2-c4", run_dir)
    ev = load_evidence(run_dir)
    ev.points = Src([p for p in ev.points.value if p.concurrency == 1], "summary.json")  # type: ignore[union-attr]
    with pytest.raises(CannotRun, match=r"the bench has one load point: scaling needs several concurrencies"):
        run(ev)
    capture = load_evidence(FIXTURES / "capture-cpu-tiny")
    with pytest.raises(CannotRun, match=r"^a capture offers one load"):
        run(capture)
