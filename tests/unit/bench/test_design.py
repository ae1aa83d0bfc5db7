"""serving/bench/compare.py design_2x2: each change alone, both together and their interaction, over bench directories
built from real `vllm bench serve` results (tests/helpers/bench_dirs.py make_bench). Change 1 is max_num_seqs,
change 2 the workload's input_len; TTFT is scaled per side to make the effects known."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.bench import compare
from tests.helpers.bench_dirs import SMOKE, make_bench, side

LONGER = SMOKE.model_copy(update={"input_len": 64})
VARIABLES = ["max_num_seqs", "input_len"]


def _sides(tmp_path: Path, both: float) -> list[compare.Side]:
    """A: TTFT as measured; B (max_num_seqs 1) and C (input_len 64): twice it; D (both): `both` times it."""
    dirs = [
        make_bench(tmp_path, "a", 1000, 1.0, max_num_seqs=8),
        make_bench(tmp_path, "b", 2000, 2.0, max_num_seqs=1),
        make_bench(tmp_path, "c", 3000, 2.0, max_num_seqs=8, workload=LONGER),
        make_bench(tmp_path, "d", 4000, both, max_num_seqs=1, workload=LONGER),
    ]
    return [side(n, [d], tmp_path) for n, d in zip("ABCD", dirs, strict=True)]


def test_changes_that_compound_show_an_interaction(tmp_path: Path) -> None:
    r = compare.design_2x2(_sides(tmp_path, both=8.0), VARIABLES)
    ttft = r["points"]["c1"]["ttft_ms"]
    m = ttft["medians"]
    assert m["B"] == pytest.approx(2 * m["A"]) and m["D"] == pytest.approx(8 * m["A"])
    e = ttft["effects"]
    assert e["change1"]["estimate"] == pytest.approx(m["A"]) and e["change1"]["excludes_zero"]
    assert e["both"]["estimate"] == pytest.approx(7 * m["A"])
    # 8 - 2 - 2 + 1 = 5 times A's median: together the changes did far more than each alone.
    assert e["interaction"]["estimate"] == pytest.approx(5 * m["A"]) and e["interaction"]["ci"][0] > 0
    text = compare.render_2x2(r)
    assert "design 2x2: change 1 = max_num_seqs (A -> B), change 2 = input_len (A -> C), both (A -> D)" in text
    assert "interaction (D - B - C + A)" in text
    assert r["figures_tested"] == 2 * 5 * 4


def test_changes_that_add_up_show_no_interaction(tmp_path: Path) -> None:
    r = compare.design_2x2(_sides(tmp_path, both=3.0), VARIABLES)  # 3 = 2 + 2 - 1: additive
    e = r["points"]["c1"]["ttft_ms"]["effects"]
    assert e["interaction"]["estimate"] == pytest.approx(0, abs=1e-9)
    assert not e["interaction"]["excludes_zero"] and e["both"]["excludes_zero"]
    # TPOT was not touched on any side: no change, no interaction.
    assert not any(x["excludes_zero"] for x in r["points"]["c1"]["tpot_ms"]["effects"].values())


def test_a_side_that_is_not_its_cell_is_refused(tmp_path: Path) -> None:
    a, b, c, d = _sides(tmp_path, both=8.0)
    # B given as D: D must differ from A in both changes.
    with pytest.raises(compare.CompareRefused, match=r"do not differ in input_len \(D is A with both\)"):
        compare.design_2x2([a, b, c, b], VARIABLES)
    # C and B swapped: C would differ from A in max_num_seqs, which is not change 2.
    with pytest.raises(compare.CompareRefused, match="refusing to compare"):
        compare.design_2x2([a, c, b, d], VARIABLES)
    with pytest.raises(compare.CompareRefused, match="four sides"):
        compare.design_2x2([a, b, c, d], ["max_num_seqs"])


def test_a_cell_with_one_valid_run_is_not_compared_at_that_point(tmp_path: Path) -> None:
    a, b, c, d = _sides(tmp_path, both=8.0)
    # D's first c4 run left out by its bench: one run a cell is not run-to-run spread.
    d.observations["c4"] = {k: [bench[:1] for bench in d.observations["c4"][k]] for k in d.observations["c4"]}
    r = compare.design_2x2([a, b, c, d], VARIABLES)
    assert r["too_few_runs"] == {
        "c4": "not compared: D has 1 valid measured run(s) here, at least 2 a side are needed (more runs: RUNS=n)"
    }
    assert r["points"]["c4"] == dict.fromkeys(compare.FIGURES)
    assert r["points"]["c1"]["ttft_ms"]["effects"]["interaction"]["excludes_zero"]
    assert "c4:\n  not compared: D has 1" in compare.render_2x2(r)
