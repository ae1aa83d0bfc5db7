"""summary.json is written through its schema (serving/bench/summary_schema.py) and reads back through it: the same
bytes again, an earlier bench's summary without the later keys, and a summary the schema refuses as one line that
names the file. The bench directories are test_compare's (the real fixtures of vllm-bench-serve-0.32.0)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serving.bench import report as bench_report
from serving.bench.summary_schema import read_summary
from serving.errors import InputError
from tests.helpers.bench_dirs import make_bench


def test_a_written_summary_reads_back_to_the_same_bytes(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    bench_report.write_report(d)
    path = d / bench_report.SUMMARY_JSON
    s = read_summary(path)
    assert s.dumps() == path.read_text()
    assert [r.id for r in s.runs if r.phase == "measured"] and s.points[0].ttft_ms.n > 0


def test_an_earlier_summary_without_the_later_figures_still_reads(tmp_path: Path) -> None:
    d = make_bench(tmp_path, "a", 1000)
    bench_report.write_report(d)
    path = d / bench_report.SUMMARY_JSON
    doc = json.loads(path.read_text())
    for key in ("page_cache", "energy", "gpu_health", "gpu_links", "knee", "memory_at_decode", "server_cgroup"):
        doc.pop(key)
    for r in doc["runs"]:
        for key in ("page_cache", "slo", "wall_clock_step_s"):
            r.pop(key)
    path.write_text(json.dumps(doc))
    s = read_summary(path)
    assert s.energy is None and s.runs[0].slo is None
    assert "energy" not in s.dump() and "slo" not in s.dump()["runs"][0]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda doc: doc.update(schema_version=2), "bench summary schema_version 2, this reader takes 1"),
        (lambda doc: doc["runs"][0].update(flags="none"), "runs.0.flags: Input should be a valid list"),
        (lambda doc: doc.update(headline={}), "headline: unknown key: remove it, or correct its spelling"),
    ],
)
def test_a_summary_the_schema_refuses_fails_in_one_line_naming_the_file(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], said: str
) -> None:
    d = make_bench(tmp_path, "a", 1000)
    bench_report.write_report(d)
    path = d / bench_report.SUMMARY_JSON
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        read_summary(path)
    assert str(e.value).startswith(f"{path}: ") and said in str(e.value) and "\n" not in str(e.value)


def test_a_file_that_is_not_json_fails_in_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text("{")
    with pytest.raises(InputError, match=r"summary.json: not a readable bench summary"):
        read_summary(path)
