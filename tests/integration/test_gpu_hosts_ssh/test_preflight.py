"""preflight over SSH: each class's host passes it (its GPUs, cpuset and NUMA nodes, the RAM budget's verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_gpu_hosts_ssh.gpu_hosts import make

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0


def _preflight(inv: Path, host: str, extra: str = "") -> tuple[int, str]:
    r = make("preflight", f"INVENTORY={inv}", f"HOST={host}", *([f"ANSIBLE_ARGS={extra}"] if extra else []))
    # Ansible folds long messages over lines: compare with whitespace runs made single spaces.
    return r.rc, " ".join(r.output.split())


def test_the_3090_host_passes_preflight_over_ssh(hosts: tuple[Path, Path]) -> None:
    rc, out = _preflight(hosts[0], "rdtest-gpu3090")
    assert rc == 0, out[-4000:]
    assert "rdtest-gpu3090 passed preflight for profile rtx3090-pp3 (GPUs 0,1,2, cpuset 0-27 on NUMA node(s) 0" in out
    assert "verdict: FITS" in out


def test_the_pro6000_host_passes_preflight_over_ssh(hosts: tuple[Path, Path]) -> None:
    rc, out = _preflight(hosts[0], "rdtest-gpupro")
    assert rc == 0, out[-4000:]
    assert "rdtest-gpupro passed preflight for profile rtxpro6000-tp8 (GPUs 0,1,2,3,4,5,6,7" in out
    assert "on NUMA node(s) 0-1" in out
