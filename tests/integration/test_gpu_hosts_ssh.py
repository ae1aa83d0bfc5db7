"""The two GPU classes' hosts, reached over real SSH: containers running sshd at their own addresses
(images/testhost), with the Docker CLI talking to this machine's engine. What a container cannot be is
REPLAYED from tests/fixtures/gpu-hosts (nvidia-smi through tests/replay/nvidia-smi, the sysfs tree, and the
host-level readings in <class>/host/, see HOST-READINGS.md). `make preflight` runs the real playbook over
SSH against each; every bad host is refused with its one line, and nothing changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import REPO, docker, host_state, make

pytestmark = pytest.mark.integration

IMAGE = "rdtest/gpu-host:latest"
NET, SUBNET = "rdtest-net", "172.31.250.0/24"
HOSTS = {
    "rdtest-gpu3090": ("172.31.250.10", "gpu_rtx3090", "rtx3090-3gpu"),
    "rdtest-gpupro": ("172.31.250.20", "gpu_rtxpro6000", "rtxpro6000-8gpu"),
}
FIXTURES = REPO / "tests" / "fixtures" / "gpu-hosts"


def _remove() -> None:
    for name in HOSTS:
        docker("rm", "-f", name, check=False)
    docker("network", "rm", NET, check=False)


def _base_tag() -> str:
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "refdeploy"), "plan", "--profile", "cpu-tiny"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return str(json.loads(out.stdout)["images"]["base_tag"])


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(inventory dir, scratch dir mounted at /opt/replay/scratch in every test host)."""
    tmp = tmp_path_factory.mktemp("gpu-hosts")
    base = _base_tag()
    if not docker("images", "-q", base).strip():
        r = make("images")
        assert r.rc == 0, r.output[-3000:]
    build = subprocess.run(
        [
            "docker",
            "build",
            "--quiet",
            "--tag",
            IMAGE,
            "--build-arg",
            f"BASE_IMAGE={base}",
            str(REPO / "images" / "testhost"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    assert build.returncode == 0, build.stderr[-3000:]
    _remove()
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    scratch = tmp / "scratch"
    scratch.mkdir()
    docker("network", "create", "--subnet", SUBNET, NET)
    for name, (ip, _group, _fixture) in HOSTS.items():
        docker(
            "run",
            "-d",
            "--name",
            name,
            "--hostname",
            name,
            "--network",
            NET,
            "--ip",
            ip,
            "--volume",
            "/var/run/docker.sock:/var/run/docker.sock",
            "--volume",
            f"{key}.pub:/root/.ssh/authorized_keys:ro",
            "--volume",
            f"{FIXTURES}:/opt/replay/fixtures:ro",
            "--volume",
            f"{REPO / 'tests' / 'replay'}:/opt/replay/bin:ro",
            "--volume",
            f"{scratch}:/opt/replay/scratch:ro",
            IMAGE,
        )
    inv = tmp / "inventory"
    shutil.copytree(REPO / "inventory" / "production-example" / "group_vars", inv / "group_vars")
    ssh_args = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"
    groups: dict[str, dict[str, object]] = {}
    for name, (ip, group, fixture) in HOSTS.items():
        replay = f"/opt/replay/fixtures/{fixture}"
        groups.setdefault(group, {"hosts": {}})["hosts"][name] = {  # type: ignore[index]
            "ansible_host": ip,
            "gpu_facts_replay_path": "/opt/replay/bin",
            "gpu_facts_replay_dir": replay,
            "gpu_facts_sys_root": f"{replay}/sys",
            "gpu_facts_replay_host_dir": f"{replay}/host",
        }
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": groups,
                    "vars": {
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(key),
                        "ansible_ssh_common_args": ssh_args,
                        "ansible_python_interpreter": "/usr/bin/python3",
                    },
                }
            }
        )
    )
    for name, (ip, _g, _f) in HOSTS.items():
        deadline = time.monotonic() + 60
        while True:
            probe = subprocess.run(
                ["ssh", "-i", str(key), *ssh_args.split(), f"root@{ip}", "true"], capture_output=True, text=True
            )
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline, f"{name}: sshd did not answer at {ip}: {probe.stderr}"
            time.sleep(1)
    yield inv, scratch
    _remove()


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


def _lines_without(path: Path, prefixes: tuple[str, ...]) -> None:
    path.write_text("".join(ln for ln in path.read_text().splitlines(keepends=True) if not ln.startswith(prefixes)))


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _two_gpus(d: Path) -> None:
    for name in ("nvidia-smi-L.txt", "nvidia-smi-query-gpu.csv"):
        _lines_without(d / name, ("2,", "GPU 2:"))


def _cgroup_v1(d: Path) -> None:
    (d / "host" / "cgroup-fs.txt").write_text("tmpfs\n")


BAD_HOSTS: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "two-gpus",
        _two_gpus,
        "expected 3 GPUs of model RTX 3090 on rdtest-gpu3090, found 2 (nvidia-smi -L): check the inventory or the host",
    ),
    (
        "wrong-model",
        lambda d: _sub(d / "nvidia-smi-query-gpu.csv", "0, NVIDIA GeForce RTX 3090", "0, NVIDIA RTX A5000"),
        "GPU 0 is NVIDIA RTX A5000, expected RTX 3090",
    ),
    (
        "old-driver",
        lambda d: _sub(d / "nvidia-smi-query-gpu.csv", "570.195.03", "535.104.05"),
        "driver 535.104.05 on rdtest-gpu3090 is older than the class minimum 570.86",
    ),
    (
        "memlock",
        lambda d: _sub(
            d / "host" / "dockerd-limits.txt",
            "Max locked memory         unlimited            unlimited",
            "Max locked memory         8388608              8388608  ",
        ),
        "pinned memory 50.87 GiB exceeds RLIMIT_MEMLOCK 8.00 MiB",
    ),
    (
        "small-ram",
        lambda d: _sub(d / "host" / "meminfo.txt", "MemTotal:       131795364 kB", "MemTotal:       50331648 kB"),
        "exceeds MemTotal 48.00 GiB",
    ),
    (
        "cgroup-v1",
        _cgroup_v1,
        "rdtest-gpu3090 runs cgroup v1 (tmpfs at /sys/fs/cgroup)",
    ),
]


@pytest.mark.parametrize(("case", "change", "line"), BAD_HOSTS, ids=[b[0] for b in BAD_HOSTS])
def test_a_bad_3090_host_is_refused_with_one_line_before_any_change(
    hosts: tuple[Path, Path], case: str, change: Callable[[Path], None], line: str
) -> None:
    inv, scratch = hosts
    replay = scratch / case
    shutil.copytree(FIXTURES / "rtx3090-3gpu", replay)
    change(replay)
    inside = f"/opt/replay/scratch/{case}"
    before = host_state()
    rc, out = _preflight(
        inv,
        "rdtest-gpu3090",
        f"-e gpu_facts_replay_dir={inside} -e gpu_facts_sys_root={inside}/sys "
        f"-e gpu_facts_replay_host_dir={inside}/host",
    )
    assert rc != 0
    assert "rdtest-gpu3090 cannot be deployed to; nothing was changed" in out
    # The failure message lists each problem once, joined by " | ".
    message = out[out.index("[ERROR]: Task failed: Action failed: rdtest-gpu3090 cannot be deployed to") :]
    message = message[: message.index(" Origin: ")]
    assert message.count(line) == 1, message
    assert host_state() == before
