"""make profile's pieces that decide: the per-rank summary of torch profiler traces
(serving/evidence/profiler_summary.py) and the requests container's argv (serving/bridge/playbooks.py profiler_argv).

The traces here are small ones in the format vLLM's torch profiler writes (Kineto's Chrome trace: `cpu_op`,
`python_function` and `user_annotation` complete events in microseconds, `baseTimeNanoseconds`); the real ones, a
trace per rank of the two-rank CPU engine, are read in tests/integration/test_tp2.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.errors import InputError
from serving.evidence import profiler_summary as torch_profile
from serving.plan.plan import plan_from_profile


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 36) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 36, "tid": tid, "ts": ts, "dur": dur}


def _write(d: Path, name: str, events: list[dict[str, Any]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 1790857026000000000, "traceEvents": events}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def test_self_time_is_an_operators_time_less_its_childrens() -> None:
    events = [
        _x("aten::linear", 0, 100),
        _x("aten::addmm", 10, 60),  # child of linear
        _x("_C::onednn_mm", 20, 40),  # child of addmm
        _x("aten::linear", 200, 50),
        _x("threading wait", 0, 1000, cat="python_function"),  # not an operator
    ]
    times = torch_profile.self_times(events, ("cpu_op",))
    assert dict(times) == {"aten::linear": [100 - 60 + 50, 2], "aten::addmm": [20, 1], "_C::onednn_mm": [40, 1]}


def test_a_rank_summary_has_its_busy_share_top_operators_and_gaps(tmp_path: Path) -> None:
    events = [
        _x("execute_context_1(4)_generation_0(0)", 0, 20_000, cat="user_annotation"),
        _x("_C::onednn_mm", 0, 3_000),
        _x("aten::add", 3_500, 500),  # a 0.5 ms gap before it: under 1 ms, not counted
        _x("_C::onednn_mm", 9_000, 3_000),  # a 5 ms gap before it
        _x("aten::add", 12_000, 1_000),
        _x("aten::add", 30_000, 1_000),  # a 17 ms gap before it
        _x("aten::mul", 5_000, 100, tid=99),  # another thread: busy, but not the main thread's gaps
    ]
    path = _write(tmp_path / "p", "rank1.1796.pt.trace.json.gz", events)
    r = torch_profile.summarise_rank(path)
    assert (r.rank, r.events, r.span_ms, r.main_thread) == ("rank1", 7, 31.0, 36)
    assert r.busy_pct == pytest.approx(100 * 8.6 / 31, abs=0.1)
    assert [(g["at_ms"], g["ms"]) for g in r.largest_gaps] == [(13.0, 17.0), (4.0, 5.0)]
    assert (r.gaps, r.gap_ms) == (2, 22.0)
    assert [(o["name"], o["self_ms"], o["calls"]) for o in r.top_cpu_ops] == [
        ("_C::onednn_mm", 6.0, 2), ("aten::add", 2.5, 3), ("aten::mul", 0.1, 1),
    ]  # fmt: skip
    assert r.top_kernels == [] and r.base_time_ns == 1790857026000000000


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank0.1796219752529280509.pt.trace.json.gz", "rank0"),
        ("4042812b12d0_1.async_llm.1796219751332403755.pt.trace.json.gz", "async_llm"),
    ],
)
def test_each_trace_is_named_by_its_rank(name: str, rank: str) -> None:
    assert torch_profile.rank_name(Path(name)) == rank


def test_the_summary_says_first_that_the_figures_are_profiled(tmp_path: Path) -> None:
    d = tmp_path / "profile"
    _write(d, "rank0.1.pt.trace.json.gz", [_x("aten::add", 0, 10)])
    (d / "profile-run.json").write_text(json.dumps({"requests": {"sent": 2, "failed": 0},
                                                    "stop_profile": {"seconds": 28.3}}))  # fmt: skip
    text = torch_profile.write_summary(d)
    assert text.startswith("PROFILED: ") and "not results (seed 000 §6)" in text.splitlines()[0]
    assert "profiled: 2 requests (0 failed); the profiler's stop took 28.3 s" in text
    doc = json.loads((d / "summary.json").read_text())
    assert doc["profiled"] is True and [r["rank"] for r in doc["ranks"]] == ["rank0"]


def test_no_trace_or_a_broken_one_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no torch profiler trace"):
        torch_profile.summarise(tmp_path)
    (tmp_path / "rank0.1.pt.trace.json.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not a readable torch profiler trace"):
        torch_profile.summarise(tmp_path)


def _plan(profiler: str | None) -> dict[str, Any]:
    plan = plan_from_profile(load_profile("cpu-tiny"), "localhost", {"hostname": "localhost", "served_files": ""},
                             profiler=profiler)  # fmt: skip
    return plan.model_dump(mode="json")


def test_the_profile_requests_run_beside_the_profiled_engine_only() -> None:
    settings = {"out": "/var/lib/refdeploy/probe-runs/x-profile", "workload": "smoke", "requests": 3}
    got = playbooks.profiler_argv(_plan("torch"), settings)
    argv = got["argv"]
    assert argv[:6] == ["docker", "run", "--rm", "--name", "refdeploy-vllm-profile", "--network"]
    # No network: vLLM's socket, its directory mounted, as a member of the socket's group.
    assert argv[argv.index("--network") + 1] == "none" and argv[argv.index("--group-add") + 1] == "10002"
    assert "/var/lib/refdeploy/api/refdeploy-vllm:/run/refdeploy/api:ro" in argv
    spec = json.loads(argv[argv.index("--spec-json") + 1])
    assert (spec["workload"], spec["output_len"], spec["api_key_file"]) == ("smoke", 32, "")
    assert argv[argv.index("--requests") + 1] == "3"
    assert got["timeout_s"] == 3 * 120 + 600 + 60
    assert "error" in playbooks.profiler_argv(_plan(None), settings)
    assert "1 to 1000" in playbooks.profiler_argv(_plan("torch"), {**settings, "requests": 0})["error"]
    assert "unknown workload" in playbooks.profiler_argv(_plan("torch"), {**settings, "workload": "nope"})["error"]
