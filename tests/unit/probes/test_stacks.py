"""py-spy dumps: parsing the real JSON, aggregating where threads sit."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from probes.readers import kernel, stacks

FIX = Path(__file__).parent.parent.parent / "fixtures"


def _thread(name: str, frames: list[tuple[str, str]], active: bool = False, gil: bool = False) -> dict[str, object]:
    return {
        "thread_name": name,
        "active": active,
        "owns_gil": gil,
        "frames": [{"name": n, "filename": f, "short_filename": f.rsplit("/", 1)[-1], "line": 7} for n, f in frames],
    }


def test_parse_real_dump() -> None:
    threads = stacks.parse_dump((FIX / "py-spy-0.4.3" / "dump-worker-idle.json").read_text())
    assert [t["thread_name"] for t in threads] == ["DeathPipeMonitor", "tqdm_monitor", "MainThread"]
    assert threads[2]["frames"][0]["name"] == "Poller.poll"


def test_parse_rejects_non_list() -> None:
    with pytest.raises(ValueError, match="list of threads"):
        stacks.parse_dump('{"error": 1}')


def test_aggregate_counts_innermost_and_vllm_frames() -> None:
    wait = ("Condition.wait", "/usr/lib/python3.11/threading.py")
    zmq = ("Poller.poll", "/opt/vllm/lib/python3.11/site-packages/zmq/sugar/poll.py")
    step = ("EngineCore.step", "/opt/vllm/lib/python3.11/site-packages/vllm/v1/engine/core.py")
    fwd = ("forward", "/opt/vllm/lib/python3.11/site-packages/vllm/model_executor/models/llama.py")
    dumps = [
        (30, "engine_core", [_thread("MainThread", [wait, step])]),
        (30, "engine_core", [_thread("MainThread", [fwd, step], active=True, gil=True)]),
        (30, "engine_core", [_thread("MainThread", [wait, step])]),
        (1, "api_server", [_thread("MainThread", [])]),
        (54, "worker", [_thread("MainThread", [zmq])]),
    ]
    out = stacks.aggregate(dumps)
    assert [(s.pid, s.thread_name) for s in out] == [(1, "MainThread"), (30, "MainThread"), (54, "MainThread")]
    assert not out[2].innermost_vllm  # zmq in vLLM's venv is not vLLM
    ec = out[1]
    assert (ec.samples, ec.active, ec.owns_gil) == (3, 1, 1)
    assert ec.innermost.most_common(1)[0] == ("Condition.wait (threading.py:7)", 2)
    assert ec.innermost_vllm["forward (llama.py:7)"] == 1
    assert ec.innermost_vllm["EngineCore.step (core.py:7)"] == 2
    assert out[0].innermost["(no Python frames)"] == 1
    text = stacks.format_aggregate(out)
    assert "pid 30 (engine_core)" in text and "active 1/3 gil 1/3" in text


def test_perf_sample_count_header() -> None:
    assert kernel.sample_count("# Total Lost Samples: 0\n#\n# Samples: 1K of event 'cpu-clock'\n") == 1000
    assert kernel.sample_count("# Samples: 312  of event 'cpu-clock'\n") == 312
    assert kernel.sample_count("nothing") is None


def test_wchan_sampling_of_this_process(tmp_path: Path) -> None:
    import os

    from probes.readers.procs import VllmProcess

    me = VllmProcess(os.getpid(), "api_server", "pytest", "pytest")
    started = time.monotonic()
    res = kernel.sample_wchan([me], seconds=0.3, rate_hz=20)
    assert res.status == "successful"
    assert res.rounds >= 3
    key = next(k for k in res.counts if k.startswith(f"{os.getpid()} api_server/"))
    # One reading per round for each thread of that name (numpy's BLAS threads share the process's name).
    comm = key.split("/", 1)[1]
    tasks = [t for t in Path(f"/proc/{os.getpid()}/task").iterdir() if (t / "comm").read_text().strip() == comm]
    assert sum(res.counts[key].values()) == res.rounds * len(tasks)
    # Each of those threads' waits, timestamped on the monotonic clock within the window, in order.
    mine = {k: v for k, v in res.transitions.items() if k.startswith(f"{key} ")}
    assert sorted(int(k.rsplit(" ", 1)[1]) for k in mine) == sorted(int(t.name) for t in tasks)
    for changes in mine.values():
        times = [t for t, _ in changes]
        # Stamps are rounded to the millisecond (probes/readers/kernel.py), and rounding keeps order.
        assert times == sorted(times) and round(started, 3) <= times[0] <= time.monotonic()
        assert all(a[1] != b[1] for a, b in itertools.pairwise(changes))  # changes only
        assert {w for _, w in changes} <= set(res.counts[key])
    kernel.write_wchan(res, tmp_path)
    written = json.loads((tmp_path / "wchan.json").read_text())
    assert written["rounds"] == res.rounds and written["clock"] == "CLOCK_MONOTONIC"
    assert written["transitions"] == {k: [list(c) for c in v] for k, v in res.transitions.items()}
    assert "wchan:" in (tmp_path / "wchan.txt").read_text()


def test_wchan_without_processes_is_skipped() -> None:
    res = kernel.sample_wchan([], seconds=0.1)
    assert res.status == "skipped" and res.reason is not None and "no vLLM" in res.reason
