"""Deploys refused before any change: a 3090 host that is not its class's (each problem one line), and an
engine restart that would stop running containers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, host_state
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import (
    FIXTURES,
    HOST_PATH,
    _flat,
    _host_files,
    _replay_environment,
    make,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0


def _lines_without(path: Path, prefixes: tuple[str, ...]) -> None:
    path.write_text("".join(ln for ln in path.read_text().splitlines(keepends=True) if not ln.startswith(prefixes)))


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _without_toolkit(d: Path) -> None:
    """The host's PATH without the NVIDIA container toolkit's runtime: every other stand-in, through links to
    where the host mounts them (the test sets PATH to d/bin when it exists)."""
    (d / "bin").mkdir()
    for tool in sorted((REPO / "tests" / "replay").iterdir()):
        if tool.name not in ("README.md", "nvidia-container-runtime"):
            (d / "bin" / tool.name).symlink_to(f"/opt/replay/bin/{tool.name}")


def _two_gpus(d: Path) -> None:
    for name in ("nvidia-smi-L.txt", "nvidia-smi-query-gpu.csv"):
        _lines_without(d / name, ("2,", "GPU 2:"))


def _cgroup_v1(d: Path) -> None:
    (d / "host" / "cgroup-fs.txt").write_text("tmpfs\n")


# (case, change to the replayed readings, extra Ansible arguments, the one line expected)
BAD_HOSTS: list[tuple[str, Callable[[Path], None], str, str]] = [
    (
        "two-gpus",
        _two_gpus,
        "",
        "expected 3 GPUs of model RTX 3090 on rdtest-gpu3090, found 2 (nvidia-smi -L): check the inventory or the host",
    ),
    (
        "wrong-model",
        lambda d: _sub(d / "nvidia-smi-query-gpu.csv", "0, NVIDIA GeForce RTX 3090", "0, NVIDIA RTX A5000"),
        "",
        "GPU 0 is NVIDIA RTX A5000, expected RTX 3090",
    ),
    (
        # An R570 driver passes the class's own floor (570.86) but not the image's CUDA 13.0 runtime (R580).
        "old-driver",
        lambda d: _sub(d / "nvidia-smi-query-gpu.csv", "580.95.05", "570.195.03"),
        "",
        "driver 570.195.03 on rdtest-gpu3090 is older than 580, the oldest driver the image's CUDA 13.0 runtime "
        "runs on",
    ),
    (
        # Docker still lists the nvidia runtime (daemon.json names it), but its binary is gone.
        "no-container-toolkit",
        _without_toolkit,
        "",
        "nvidia-container-runtime not found on rdtest-gpu3090: the NVIDIA container toolkit is not installed",
    ),
    (
        # dockerd's limit as read, with the inventory not asking the deploy to raise it.
        "memlock",
        lambda d: _sub(
            d / "host" / "dockerd-limits.txt",
            "Max locked memory         unlimited            unlimited",
            "Max locked memory         8388608              8388608  ",
        ),
        "-e pinned_ram_engine_memlock=",
        "pinned memory 50.87 GiB exceeds RLIMIT_MEMLOCK 8.00 MiB",
    ),
    (
        "small-ram",
        lambda d: _sub(d / "host" / "meminfo.txt", "MemTotal:       131795364 kB", "MemTotal:       50331648 kB"),
        "",
        "exceeds MemTotal 48.00 GiB",
    ),
    (
        # The readings are the healthy host's; the real fio run on the staged data misses the thresholds
        # (this machine's disk does ~20k IOPS at QD1; the class is given a QD1 minimum of 100 million).
        "slow-data-drive",
        lambda d: None,
        """-e '{"probe_io_thresholds":{"1":{"min_iops":100000000},"64":{"min_iops":25000}}}'""",
        "is on a device that misses the I/O thresholds of class rtx3090-pp3: QD1:",
    ),
    (
        "cgroup-v1",
        _cgroup_v1,
        "",
        "rdtest-gpu3090 runs cgroup v1 (tmpfs at /sys/fs/cgroup)",
    ),
]


@pytest.mark.parametrize(("case", "change", "extra", "line"), BAD_HOSTS, ids=[b[0] for b in BAD_HOSTS])
def test_a_bad_3090_host_is_refused_with_one_line_before_any_change(
    hosts: tuple[Path, Path], case: str, change: Callable[[Path], None], extra: str, line: str
) -> None:
    inv, scratch = hosts
    replay = scratch / case
    shutil.copytree(FIXTURES / "rtx3090-3gpu", replay)
    change(replay)
    case_vars = scratch / f"{case}.json"
    environment = _replay_environment(f"/opt/replay/scratch/{case}")
    if (replay / "bin").is_dir():
        environment["PATH"] = f"/opt/replay/scratch/{case}/bin:{HOST_PATH}"
    case_vars.write_text(json.dumps({"refdeploy_replay_environment": environment}))
    before, files_before = host_state("test-hosts"), _host_files("rdtest-gpu3090")
    # The whole deploy, not preflight alone: it must stop before the roles that change the host.
    r = make("deploy", f"INVENTORY={inv}", "HOST=rdtest-gpu3090", f"ANSIBLE_ARGS=-e @{case_vars} {extra}")
    out = " ".join(r.output.split())
    assert r.rc != 0, out[-3000:]
    assert "rdtest-gpu3090 cannot be deployed to; nothing was changed" in out, out[-3000:]
    # The failure message lists each problem once, joined by " | ".
    message = out[out.index("[ERROR]: Task failed: Action failed: rdtest-gpu3090 cannot be deployed to") :]
    message = message[: message.index(" Origin: ")]
    assert message.count(line) == 1, message
    assert host_state("test-hosts") == before
    assert _host_files("rdtest-gpu3090") == files_before


def test_an_engine_restart_that_would_stop_containers_is_refused_before_any_change(
    hosts: tuple[Path, Path],
) -> None:
    """The engine these hosts reach runs with live-restore off and runs containers (this test host's own): a
    deploy that must restart it, without runtime_restart_stops_containers, stops before writing anything."""
    inv, _ = hosts
    before, files_before = host_state("test-hosts"), _host_files("rdtest-gpu3090")
    r = make(
        "deploy", f"INVENTORY={inv}", "HOST=rdtest-gpu3090", "ANSIBLE_ARGS=-e runtime_restart_stops_containers=false"
    )
    out = _flat(r.output)
    assert r.rc != 0, out[-3000:]
    assert (
        "restarting Docker Engine on rdtest-gpu3090 to apply /etc/docker/daemon.json, "
        "/etc/systemd/system/docker.service.d/refdeploy-memlock.conf, "
        "/etc/systemd/system/containerd.service.d/refdeploy-memlock.conf would stop its "
    ) in out, out[-3000:]
    assert "running container(s) (" in out and "rdtest-gpu3090" in out.split("running container(s) (", 1)[1]
    assert "runtime_restart_stops_containers=true, and deploy again. Nothing was changed." in out
    assert host_state("test-hosts") == before
    assert _host_files("rdtest-gpu3090") == files_before
