"""Fixtures shared by unit test modules: the fake /proc and cgroup trees of tests/helpers/cgroup_trees.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cgroup_trees import CID, V2_SCOPE, build_proc, build_v1, build_v2, cgroup_lines_v1


@pytest.fixture
def v1(tmp_path: Path) -> tuple[Path, Path]:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, cgroup_lines_v1(CID))
    build_v1(cg)
    return proc, cg


@pytest.fixture
def v2(tmp_path: Path) -> tuple[Path, Path]:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, f"0::{V2_SCOPE}\n")
    build_v2(cg)
    return proc, cg
