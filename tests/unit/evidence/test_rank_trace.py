"""The patched runtime's rank trace (serving/evidence/rank_trace.py, probes/readers/rank_steps.py) on the RECORDED
steps of a two-stage CPU engine (tests/fixtures/rank_trace/README.md): the figures seed 000 §8 reads, the capture's
cut to its window, and the steps as trace.json tracks read back by Perfetto's trace processor."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.readers.rank_steps import copy_window
from serving.evidence import rank_trace
from serving.evidence.capture_trace import write_trace
from tests.helpers.perfetto import TraceProcessor, require_node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "rank_trace" / "pp2-cpu-tiny"
# The same engine on vLLM's V2 model runner (Triton's interpreter for the CPU backend the image lacks; the README).
V2 = FIXTURES.parent / "pp2-cpu-tiny-v2-interpret"


def _steps(variant: str, fixtures: Path = FIXTURES) -> list[rank_trace.Step]:
    steps, bad = rank_trace.read_steps(fixtures / variant)
    assert bad == 0
    return steps


def test_vllms_order_receives_first_and_the_deferred_receive_sits_inside_the_preparation() -> None:
    first = {f["rank"]: f for f in rank_trace.rank_figures(_steps("receive-first"))}
    deferred = {f["rank"]: f for f in rank_trace.rank_figures(_steps("deferred"))}
    assert (first[1]["steps"], first[1]["receive_before_preparation"], first[1]["receive_inside_preparation"]) == (
        20, 20, 0,
    )  # fmt: skip
    assert (deferred[1]["receive_before_preparation"], deferred[1]["receive_inside_preparation"]) == (0, 20)
    # The first stage receives nothing; it sends.
    assert "recv_metadata" not in first[0]["spans_ms"] and "send" in first[0]["spans_ms"]
    # In vLLM's order the next stage's forward waits for the send, the receive, then the preparation: every step's
    # hand-off is at least its preparation. The first stage has no previous stage.
    steps = _steps("receive-first")
    sends = {s.step: s.first("send") for s in steps if s.rank == 0}
    for s in (s for s in steps if s.rank == 1 and s.first("forward")):
        handoff = rank_trace.handoffs([x for x in steps if x.rank == 0 and x.step == s.step], [s])
        assert handoff and handoff[0] >= s.total("preprocess") - s.receive_inside_preprocess() > 0, (s.step, sends)
    assert first[0]["handoff_ms"] is None and first[1]["handoff_ms"]["median"] is not None
    # Preparation proper is preprocess less the receive inside it: in the deferred run that is most of preprocess.
    pre, prep = deferred[1]["spans_ms"]["preprocess"]["median"], deferred[1]["preparation_ms"]["median"]
    assert pre is not None and prep is not None and prep < 0.5 * pre


def test_the_v2_runner_records_v1s_sections_names_itself_and_the_deferred_receive_nests_in_its_preprocess() -> None:
    """Patch 0004 on V2, which has no record_function scoping: the same sections as V1 on each rank, and 0005's
    receive inside the preparation, as on V1."""
    for variant in ("receive-first", "deferred"):
        v1 = {f["rank"]: f for f in rank_trace.rank_figures(_steps(variant))}
        v2 = {f["rank"]: f for f in rank_trace.rank_figures(_steps(variant, V2))}
        assert [f["runner"] for f in v2.values()] == ["V2", "V2"]
        assert [f["runner"] for f in v1.values()] == ["not recorded"] * 2  # recorded before the field
        for rank, own in ((0, {"send"}), (1, {"recv_metadata", "recv_tensors", "sample"})):
            shared = {"preprocess", "forward", "postprocess", "sample_tokens"} | own
            assert shared <= set(v1[rank]["spans_ms"]) and shared <= set(v2[rank]["spans_ms"]), (variant, rank)
        assert {"bookkeep", "eplb"} <= set(v1[1]["spans_ms"]) and not {"bookkeep", "eplb"} & set(v2[1]["spans_ms"])
        first, inside = v2[1]["receive_before_preparation"], v2[1]["receive_inside_preparation"]
        assert (first, inside) == ((20, 0) if variant == "receive-first" else (0, 20)), variant
    # On V2 too the preparation proper is preprocess less the receive nested in it.
    deferred = [s for s in _steps("deferred", V2) if s.rank == 1 and s.first("forward")]
    assert all(0 < s.receive_inside_preprocess() < s.total("preprocess") for s in deferred)


def test_a_middle_stage_receives_and_sends_and_its_deferred_receive_nests_in_its_preparation() -> None:
    """PP=3 (cpu-tiny-pp3, RECORDED): the middle stage is the one that both receives from the first and sends to the
    last; with patch 0005 on, both non-first stages receive inside their preparation."""
    pp3 = FIXTURES.parent / "pp3-cpu-tiny"
    first = {f["rank"]: f for f in rank_trace.rank_figures(_steps("receive-first", pp3))}
    deferred = {f["rank"]: f for f in rank_trace.rank_figures(_steps("deferred", pp3))}
    assert sorted(first) == [0, 1, 2]
    receives, sends = {"recv_metadata", "recv_tensors"}, {"send"}
    assert sends <= set(first[0]["spans_ms"]) and not receives & set(first[0]["spans_ms"])
    assert receives | sends | {"preprocess", "forward"} <= set(first[1]["spans_ms"])
    assert receives <= set(first[2]["spans_ms"]) and not sends & set(first[2]["spans_ms"])
    for rank in (1, 2):
        assert (first[rank]["receive_before_preparation"], first[rank]["receive_inside_preparation"]) == (20, 0)
        assert (deferred[rank]["receive_before_preparation"], deferred[rank]["receive_inside_preparation"]) == (0, 20)
    # Each stage's forward follows the previous stage's send: a hand-off measured at both receiving stages.
    assert all(first[rank]["handoff_ms"]["median"] is not None for rank in (1, 2))


def test_a_line_that_is_not_a_step_is_counted_and_the_window_cuts(tmp_path: Path) -> None:
    lines = (FIXTURES / "receive-first" / "rank1.steps.jsonl").read_text().splitlines()
    (tmp_path / "rank1.steps.jsonl").write_text("\n".join([*lines[:5], "{not json", '{"rank": 1}']) + "\n")
    steps, bad = rank_trace.read_steps(tmp_path)
    assert (len(steps), bad) == (5, 2)
    third = json.loads(lines[2])
    cut, _ = rank_trace.read_steps(tmp_path, start=third["t0"], end=third["t1"])
    assert [s.step for s in cut] == [3]  # a rank's steps follow one another: the neighbours end before, start after


def test_the_capture_keeps_the_steps_that_overlap_its_window_byte_for_byte(tmp_path: Path) -> None:
    src = tmp_path / "host"
    src.mkdir()
    lines = (FIXTURES / "receive-first" / "rank0.steps.jsonl").read_text().splitlines()
    # The rotated file holds the older steps; an engine before this one left its own lines in the same file.
    (src / "rank0.steps.jsonl.1").write_text("\n".join(lines[:10]) + "\n")
    (src / "rank0.steps.jsonl").write_text("\n".join(lines[10:]) + "\n")
    (src / "other.txt").write_text("not a rank file\n")
    # An earlier engine's third stage (PP=3 before this PP=2): its steps all ended before the window.
    (src / "rank2.steps.jsonl").write_text(lines[0] + "\n")
    start, end = json.loads(lines[8])["t0"], json.loads(lines[12])["t1"]
    got = copy_window(src, tmp_path / "bundle", start, end)
    kept = (tmp_path / "bundle" / "ranks" / "rank0.steps.jsonl").read_text().splitlines()
    assert kept == [ln for ln in lines if json.loads(ln)["t1"] >= start and json.loads(ln)["t0"] <= end]
    assert kept[0] == lines[8] and kept[-1] == lines[12]  # across the rotation, in order
    assert got == {"dir": str(src), "ranks": {"0": len(kept)}, "unreadable": []}
    assert sorted(p.name for p in (tmp_path / "bundle" / "ranks").iterdir()) == ["rank0.steps.jsonl"]


def test_the_cli_prints_the_figures_and_refuses_an_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rank_trace.main([str(FIXTURES / "deferred")]) == 0
    out = capsys.readouterr().out
    # Recorded before the patch wrote the runner: the reader says so rather than guess.
    assert (
        "rank 1 (PP 1, TP 0, model runner not recorded): 20 steps with a forward pass; the receive came first in 0 "
        "of 20 steps"
    ) in out
    assert rank_trace.main([str(tmp_path)]) == 2
    assert "no rank step" in capsys.readouterr().err


def test_the_capture_prints_a_line_per_rank_with_its_runner_and_where_the_receive_ran(tmp_path: Path) -> None:
    lines = rank_trace.summary_lines(FIXTURES / "deferred")
    assert [ln.split(":")[0] for ln in lines] == ["rank trace"] * 2
    assert lines[1].startswith(
        "rank trace: rank 1 (PP 1, TP 0), model runner not recorded: 20 steps with a forward pass, median preprocess "
    )
    assert lines[1].endswith("; the receive first in 0, inside preprocess in 20"), lines[1]
    assert "metadata receive" in lines[1] and "metadata receive" not in lines[0]  # the first stage receives nothing
    assert rank_trace.summary_lines(tmp_path / "no-such-dir") == []


@pytest.fixture(scope="module")
def tp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TraceProcessor]:
    require_node()
    with TraceProcessor.start(tmp_path_factory.mktemp("tp") / "stderr.txt") as t:
        yield t


def _bundle(d: Path, variant: str, fixtures: Path = FIXTURES) -> Path:
    """A capture bundle whose window holds the fixture's steps: timeline.json and ranks/ (nothing else ran)."""
    steps = _steps(variant, fixtures)
    t0, t1 = min(s.t0 for s in steps) - 0.5, max(s.t1 for s in steps) + 0.5
    d.mkdir(parents=True)
    panels = {k: {"title": k, "unit": "%", "status": "skipped", "reason": "test", "series": {}}
              for k in ("gpu", "cpu", "io", "latency", "queue")}  # fmt: skip
    timeline = {"schema_version": 1, "host": "localhost", "container": "refdeploy-vllm",
                "window": {"start_mono_s": t0, "end_mono_s": t1, "seconds": t1 - t0}, "panels": panels,
                "events": [], "summary": {}, "notes": [], "artifacts": {}}  # fmt: skip
    (d / "timeline.json").write_text(json.dumps(timeline))
    shutil.copytree(fixtures / variant, d / "ranks")
    return d


@pytest.mark.parametrize("fixtures", [FIXTURES, V2], ids=["v1", "v2"])
@pytest.mark.parametrize("variant", ["receive-first", "deferred"])
def test_each_ranks_steps_are_a_track_in_its_worker_with_the_spans_nested(
    tp: TraceProcessor, tmp_path: Path, variant: str, fixtures: Path
) -> None:
    tp.load(write_trace(_bundle(tmp_path / "capture", variant, fixtures)).read_bytes())
    errors = tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    assert errors == []
    rows = tp.query(
        "select s.name, s.depth, t.tid, t.name as track, p.pid from slice s join thread_track tt on s.track_id = tt.id "
        "join thread t using (utid) join process p using (upid) where s.category = 'rank step'"
    )
    steps = _steps(variant, fixtures)
    pids = {s.rank: s.pid for s in steps}
    runner = "V2" if fixtures == V2 else "not recorded"
    for rank in (0, 1):
        mine = [r for r in rows if r["tid"] == rank_trace.STEPS_TID + rank]
        assert {r["pid"] for r in mine} == {pids[rank]}
        assert mine[0]["track"] == f"rank {rank} steps (PP {rank}, TP 0, model runner {runner}; patch 0004)"
        assert sum(1 for r in mine if r["name"].startswith("step ") and r["depth"] == 0) == 40
        assert {r["name"] for r in mine if r["depth"] == 1} >= {"preprocess", "forward"}
    recv = {r["depth"] for r in rows if r["name"] == "recv_metadata"}
    # vLLM's order: the receive is a span of its own in the step; deferred: inside preprocess.
    assert recv == ({1} if variant == "receive-first" else {2})
    assert not [r for r in rows if r["name"] == "recv_metadata" and r["tid"] == rank_trace.STEPS_TID]


def test_the_procedure_refuses_a_trace_without_each_stages_spans_or_its_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pp-receive.sh checks the trace before it measures anything (--require-spans): the recorded PP=3 and V2 traces
    pass; the PP=2 V1 one, recorded before the steps named their runner, and a stage without its receive do not."""
    pp3 = FIXTURES.parent / "pp3-cpu-tiny"
    assert rank_trace.missing_spans(rank_trace.rank_figures(_steps("deferred", pp3))) == []
    assert rank_trace.main([str(V2 / "receive-first"), "--require-spans"]) == 0
    assert rank_trace.main([str(FIXTURES / "receive-first"), "--require-spans"]) == 1
    err = capsys.readouterr().err
    assert "rank 0 (PP 0, model runner not recorded): the steps do not name their model runner" in err
    # The middle stage's receive spans gone (an engine whose worker the patch did not reach).
    for r in (0, 1, 2):
        text = (pp3 / "receive-first" / f"rank{r}.steps.jsonl").read_text()
        if r == 1:
            rows = [json.loads(ln) for ln in text.splitlines()]
            for row in rows:
                row["spans"] = [sp for sp in row["spans"] if not sp[0].startswith("recv_")]
            text = "".join(json.dumps(row) + "\n" for row in rows)
        (tmp_path / f"rank{r}.steps.jsonl").write_text(text)
    assert rank_trace.missing_spans(rank_trace.rank_figures(rank_trace.read_steps(tmp_path)[0])) == [
        "rank 1 (PP 1, model runner V1): no recv_metadata, recv_tensors span in 20 steps"
    ]
