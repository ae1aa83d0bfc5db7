"""serving/bench/hypothesis.py: a prediction written before the runs, and compare's verdict on it, over bench
directories built from real `vllm bench serve` results (tests/helpers/bench_dirs.py make_bench)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.bench import compare, hypothesis
from tests.helpers.bench_dirs import make_bench, side

FIGURES = list(compare.FIGURES)


def _compare(tmp_path: Path, predict: str, written: float, shift: float = 4.0) -> dict[str, object]:
    a = make_bench(tmp_path, "a", 2000, max_num_seqs=8)
    b = make_bench(tmp_path, "b", 3000, scale_ttft=shift, max_num_seqs=1)
    path = hypothesis.record("max_num_seqs=1 queues the requests of a wave", predict, FIGURES, tmp_path, now=written)
    claim = hypothesis.load(path.stem, tmp_path)
    r = compare.compare(side("A", [a], tmp_path), side("B", [b], tmp_path), ["max_num_seqs"], hypothesis=claim)
    return r["hypothesis"]  # type: ignore[no-any-return]


def test_a_prediction_the_data_bear_out_is_confirmed(tmp_path: Path) -> None:
    h = _compare(tmp_path, "ttft_ms up >= 50% at c4", written=1000)
    assert h["verdict"] == hypothesis.CONFIRMED and h["written_before_runs"] is True
    (point,) = h["points"]  # type: ignore[attr-defined]
    assert point == "c4"


def test_a_prediction_the_data_contradict_is_refuted(tmp_path: Path) -> None:
    h = _compare(tmp_path, "ttft_ms down at c4", written=1000)
    assert h["verdict"] == hypothesis.REFUTED
    lines = hypothesis.render(h)  # type: ignore[arg-type]
    assert lines[-1] == "  verdict: REFUTED"
    assert any(line.startswith("  c4: B-A [+") and line.endswith("against B - A < 0: refuted") for line in lines)


def test_no_change_refutes_a_predicted_one_and_a_straddling_interval_is_inconclusive(tmp_path: Path) -> None:
    # Identical sides: TPOT did not go down 20% (the interval sits at 0).
    assert _compare(tmp_path, "tpot_ms down >= 20%", written=1000, shift=1.0)["verdict"] == hypothesis.REFUTED
    # A bound at the effect's own point estimate lies inside its interval: neither confirmed nor refuted.
    diff = _compare(tmp_path / "x", "ttft_ms up at c4", written=1000)["points"]["c4"]["diff"]  # type: ignore[index]
    h = _compare(tmp_path / "y", f"ttft_ms up >= {diff:.6f} at c4", written=1000)
    lo, hi = h["points"]["c4"]["interval"]  # type: ignore[index]
    assert lo < diff < hi and h["verdict"] == hypothesis.INCONCLUSIVE


def test_a_hypothesis_written_after_the_runs_says_so(tmp_path: Path) -> None:
    h = _compare(tmp_path, "ttft_ms up at c4", written=2500)  # A's runs started at 2000
    assert h["written_before_runs"] is False
    assert "  note: written after the compared runs began, so it was not a prediction" in hypothesis.render(h)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("predict", "said"),
    [
        ("tpot goes down", "write it as '<figure> up|down"),
        ("tpot down", "'tpot' is not a compared figure"),
        ("tpot_ms sideways", "write it as"),
        ("tpot_ms down >= -5%", "write it as"),
    ],
)
def test_a_prediction_that_cannot_be_read_is_refused_before_anything_is_written(
    tmp_path: Path, predict: str, said: str
) -> None:
    with pytest.raises(hypothesis.HypothesisError, match=said.replace("|", r"\|").replace("(", r"\(")):
        hypothesis.record("x", predict, FIGURES, tmp_path)
    assert not (tmp_path / "hypotheses").exists() or not list((tmp_path / "hypotheses").iterdir())


def test_a_point_that_was_not_compared_is_named(tmp_path: Path) -> None:
    with pytest.raises(hypothesis.HypothesisError, match=r"point c8 was not compared \(compared: c1, c4\)"):
        _compare(tmp_path, "ttft_ms up at c8", written=1000)


def test_the_record_keeps_when_it_was_written(tmp_path: Path) -> None:
    path = hypothesis.record("s", "output_tok_s up >= 10 at c4", FIGURES, tmp_path, now=1796252539.5)
    doc = json.loads(path.read_text())
    assert path.name == "20261202T230219Z.json" and doc["written_unix_s"] == 1796252539.5
    assert doc["prediction"] == {"figure": "output_tok_s", "direction": "up", "amount": 10.0, "relative": False,
                                 "point": "c4"}  # fmt: skip


def test_a_truncated_or_foreign_hypothesis_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = hypothesis.record("max_num_seqs=1 queues requests", "ttft_ms up", FIGURES, tmp_path, now=1000)
    path.write_text(path.read_text()[:30])
    with pytest.raises(hypothesis.HypothesisError, match=rf"^HYPOTHESIS={path.stem}: {path} is not valid JSON \(.*"
                       r"restore it, or write the hypothesis again \(make hypothesis\)$"):  # fmt: skip
        hypothesis.load(path.stem, tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(hypothesis.HypothesisError, match=r"is not a hypothesis \(statement, predict, prediction\)"):
        hypothesis.load(str(path), tmp_path)
