"""A py-spy dump that exits 0 and prints nothing is tried once more, then failed, never recorded as successful
(probes/readers/stacks.py dump_once; seen once in a CI-like run under load). py-spy is a stand-in script on
PATH here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from probes.readers import stacks
from probes.readers.procs import VllmProcess


def test_an_empty_dump_is_retried_and_then_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "py-spy"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit 0\n')  # exit 0, nothing on stdout
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    out.mkdir()
    res, threads = stacks.dump_once(VllmProcess(os.getpid(), "worker", "VLLM::Worker", "python3"), 1, out)
    assert (res.status, threads) == ("failed", [])
    assert res.reason == f"py-spy dump --pid {os.getpid()} exited 0 and printed nothing, twice"
    assert len(calls.read_text().splitlines()) == 2
