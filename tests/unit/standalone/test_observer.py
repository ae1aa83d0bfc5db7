"""serving/standalone/observer.py: `python -m serving.standalone.observer CMD` becomes CMD in the CPU cgroup
refdeploy-observer, where no one else manages the tree. Real processes and, where this machine allows it (root, cgroup
v1 at the root as here), the real cgroup; /proc is replaced by a directory only where the reading of mountinfo is
tested."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.standalone import observer

REPO = Path(__file__).resolve().parents[3]
V1 = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
V1_JOINT = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
V2 = "25 30 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def _proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    (tmp_path / "self").mkdir()
    (tmp_path / "self/mountinfo").write_text("22 1 8:1 / / rw - ext4 /dev/vda rw\n" + mountinfo)
    (tmp_path / "self/cgroup").write_text(cgroup)
    return tmp_path


@pytest.mark.parametrize(
    ("mountinfo", "cgroup", "found"),
    [
        (V1, "4:memory:/x\n1:cpu:/\n0::/\n", (Path("/sys/fs/cgroup/cpu"), 1)),
        (V1_JOINT, "2:cpu,cpuacct:/\n", (Path("/sys/fs/cgroup/cpu,cpuacct"), 1)),
        (V1, "1:cpu:/docker/abc\n", None),  # in a container's cgroup: not ours to move
        (V1_JOINT, "2:cpu,cpuacct:/user.slice\n", None),  # systemd's tree
        (V2, "0::/user.slice/user-0.slice/session-1.scope\n", None),  # systemd's tree, cgroup v2
        ("", "0::/\n", None),  # no CPU controller mounted
    ],
)
def test_the_cpu_hierarchy_is_used_only_where_the_process_sits_at_its_root(
    tmp_path: Path, mountinfo: str, cgroup: str, found: tuple[Path, int] | None
) -> None:
    assert observer.cpu_hierarchy(_proc(tmp_path, mountinfo, cgroup)) == found


def _observe(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", "-m", "serving.standalone.observer", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_runs_in_the_observers_cgroup() -> None:
    here = observer.cpu_hierarchy()
    got = _observe("cat", "/proc/self/cgroup")
    assert got.returncode == 0, got.stderr
    if here is None:  # someone else's tree: the command runs as it is, and nothing is said
        assert got.stderr == ""
        return
    if os.geteuid() != 0:
        assert "needs root" in got.stderr
        return
    root, version = here
    lines = [line.split(":", 2) for line in got.stdout.splitlines()]
    cpu = next(path for _, ctl, path in lines if ("cpu" in ctl.split(",") if version == 1 else ctl == ""))
    assert cpu == f"/{observer.NAME}", got.stdout
    weight = (root / observer.NAME / ("cpu.shares" if version == 1 else "cpu.weight")).read_text().strip()
    assert weight == str(observer.SHARES_V1 if version == 1 else observer.WEIGHT_V2)


def test_the_exit_status_is_the_commands() -> None:
    assert _observe("sh", "-c", "exit 3").returncode == 3
    got = _observe()
    assert got.returncode == 2 and "give the command to run" in got.stderr
