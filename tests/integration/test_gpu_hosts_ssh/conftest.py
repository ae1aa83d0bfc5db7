"""The test hosts, started once for this package (package scope: as once per module when these tests were
one module), and torn down after its last test."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.config.profile import Probes
from serving.host.numa import format_cpulist
from serving.plan.render import API_SOCKET_DIR, RANK_TRACE_DIR
from tests.integration.conftest import REPO, docker, images_here, local_build_files
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import (
    FIXTURES,
    HOSTS,
    IMAGE,
    STAND_IN,
    _container,
    _replay_environment,
)


def _stage_models(share: Path, image: str) -> None:
    """The tiny model (images/vllm/tinymodel.py, from the CPU runtime image) at each class's model path: what the
    stand-in engine serves, and what the fio gate and the probes read. The PRO 6000 class keeps its tokenizer
    beside the weights (--tokenizer /models/moe-gguf/tokenizer)."""
    for model in ("served", "moe-gguf"):
        d = share / "models" / model
        d.mkdir(parents=True)
        docker("run", "--rm", "--user", "0", "--network", "none", "-v", f"{d}:/out", image,
               "python3", "/opt/refdeploy/tinymodel.py", "/out")  # fmt: skip
    tok = share / "models" / "moe-gguf" / "tokenizer"
    tok.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(share / "models" / "moe-gguf" / f, tok / f)
    for sub in ("probe-runs", "bench-runs"):
        (share / sub).mkdir()


def _test_profiles(out: Path, share: Path) -> dict[str, Path]:
    """The classes' profiles with what the test hosts change: the model where they have it, and a container
    name and host port of each host's own (they share this machine's engine with each other and with the
    local deployment)."""
    out.mkdir()
    paths = {}
    for host, (_ip, group, _fixture, _port) in HOSTS.items():
        name = {"gpu_rtx3090": "rtx3090-pp3", "gpu_rtxpro6000": "rtxpro6000-tp8"}[group]
        data = yaml.safe_load((REPO / "serving" / "profiles" / f"{name}.yaml").read_text())
        data["model"]["host_path"] = str(share / "models" / Path(data["model"]["host_path"]).name)
        data["container"]["name"] = _container(host)
        # The hosts share this machine's engine, which resolves bind mounts here: the compile caches go where
        # the serve role on the test host and the engine see the same directory.
        data["container"]["compile_cache_dir"] = str(share / "cache")
        paths[host] = out / f"{name}.yaml"
        paths[host].write_text(yaml.safe_dump(data, sort_keys=False))
    return paths


def _remove() -> None:
    for name in HOSTS:
        for suffix in ("-samplers", "", "-previous", "-failed", "-bench"):
            docker("rm", "-f", _container(name) + suffix, check=False)
        docker("rm", "-f", name, check=False)


SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"


def _build_images() -> str:
    """The runtime image's tag, after building the images and the GPU test host's image on its base."""
    # The CPU runtime image (the stand-in's engine and the tiny model's generator), its base and the probe image.
    image = images_here()["runtime_tag"]
    base = json.loads(docker("image", "inspect", image))[0]["Config"]["Labels"]["org.opencontainers.image.base.name"]
    build = subprocess.run(
        ["docker", "build", "--quiet", "--target", "gpu", "--tag", IMAGE, "--build-arg", f"BASE_IMAGE={base}",
         str(REPO / "images" / "testhost")],
        capture_output=True, text=True, timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    return image


def _write_stand_in(stand_in: Path) -> None:
    stand_in.write_text(
        json.dumps(
            {
                "cpus": format_cpulist(os.sched_getaffinity(0)),
                "mems": "0",
                "ulimits_max": {
                    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
                    "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)[1],
                },
                # This machine's CPU images stand in: named by what they were built from here.
                "cpu_build_files": local_build_files(),
                "nvidia_smi": {
                    "replayer": str(REPO / "tests" / "replay" / "nvidia-smi"),
                    "recordings": {h: str(FIXTURES / f) for h, (_i, _g, f, _p) in HOSTS.items()},
                },
            }
        )
    )


SAMPLERS_DIR = Probes.model_fields["sidecar_host_dir"].default  # the profiles' (none of the hosts' sets another)


def start_ssh_host(name: str, ssh_port: int, key: Path, share: Path, *volumes: str) -> None:
    """One test host (IMAGE: sshd on 127.0.0.1:ssh_port in this machine's network namespace, the Docker CLI on this
    machine's engine), with the mounts every test host needs and `volumes` (more --volume arguments) beside them."""
    # TEST SEAM: the hosts build with this machine's engine, whose probe image is this machine's; its tag hashes the
    # extra CA file the build copies (production-example's images_extra_ca_file), so the hosts have this machine's.
    ca = local_build_files()["extra_ca_file"]
    docker(
        "run", "-d", "--name", name, "--hostname", name, "--network", "host",
        "--volume", "/var/run/docker.sock:/var/run/docker.sock",
        "--volume", f"{ca}:/etc/ssl/certs/ca-certificates.crt:ro",
        "--volume", f"{key}.pub:/root/.ssh/authorized_keys:ro",
        *volumes,
        "--volume", f"{share}:{share}",
        # The rank trace's host directory (a profile's probes.rank_trace): the serve role on the test host makes
        # it, and this machine's engine resolves the engine's and the capture's bind mounts of it.
        "--volume", f"{RANK_TRACE_DIR}:{RANK_TRACE_DIR}",
        # vLLM's socket directories (serving/plan/render.py API_SOCKET_DIR), likewise: the serve role makes a
        # container's, the engine mounts it, and the host's own tools (its make status) connect there.
        "--volume", f"{API_SOCKET_DIR}:{API_SOCKET_DIR}",
        # The samplers sidecar's log directories, likewise: the serve role makes a container's the probe user's
        # (it runs as 10003), and a directory this machine's engine made in its place would be root's.
        "--volume", f"{SAMPLERS_DIR}:{SAMPLERS_DIR}",
        IMAGE, "/usr/sbin/sshd", "-D", "-e", "-p", str(ssh_port), "-o", "ListenAddress=127.0.0.1",
    )  # fmt: skip


def _start_hosts(key: Path, scratch: Path, share: Path) -> None:
    for name, (ssh_port, _group, _fixture, _port) in HOSTS.items():
        start_ssh_host(
            name, ssh_port, key, share,
            "--volume", f"{FIXTURES}:/opt/replay/fixtures:ro",
            "--volume", f"{REPO / 'tests' / 'replay'}:/opt/replay/bin:ro",
            "--volume", f"{scratch}:/opt/replay/scratch:ro",
        )  # fmt: skip


def _write_inventory(inv: Path, key: Path, profiles: dict[str, Path], share: Path) -> None:
    shutil.copytree(REPO / "inventory" / "production-example" / "group_vars", inv / "group_vars")
    groups: dict[str, dict[str, Any]] = {}
    for name, (ssh_port, group, fixture, _port) in HOSTS.items():
        replay = f"/opt/replay/fixtures/{fixture}"
        groups.setdefault(group, {"hosts": {}})["hosts"][name] = {
            "ansible_host": "127.0.0.1",
            "ansible_port": ssh_port,
            "serving_profile": str(profiles[name]),
            "refdeploy_replay_environment": _replay_environment(replay),
            # The hosts share this machine's engine (live-restore off, the other tests' containers running),
            # which the stand-in systemctl never restarts: the restart is accepted here, and refused in
            # test_an_engine_restart_that_would_stop_containers_is_refused_before_any_change.
            "runtime_restart_stops_containers": True,
            "probes_host_dir": str(share / "probe-runs"),
            "bench_host_dir": str(share / "bench-runs"),
            "probe_io_runtime_s": 2,
            # The staged data sits on this machine's virtio disk, not a class NVMe drive: the gate is real,
            # with floors it clears with margin (measured while other tests ran: QD1 11k-24k IOPS, QD64
            # 37k-75k IOPS; p99.9 at QD64 26-34 ms, 90 ms under load, so no latency cap).
            "probe_io_thresholds": {1: {"min_iops": 1000}, 64: {"min_iops": 5000}},
        }
    # The 3090 host also has the deploy raise the engine's memlock (the drop-ins and a restart).
    groups["gpu_rtx3090"]["hosts"]["rdtest-gpu3090"]["pinned_ram_engine_memlock"] = "infinity"
    # Both hosts as one group, the 3090 host first (a roll's canary: test_fleet_roll.py).
    groups["fleet"] = {"children": {"gpu_rtx3090": {}, "gpu_rtxpro6000": {}}}
    write_ssh_inventory(inv, key, groups)


def write_ssh_inventory(inv: Path, key: Path, groups: dict[str, Any]) -> None:
    """inv/hosts.yml: `groups` under all, reached as root over SSH with `key` (the test hosts' sshd)."""
    (inv / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": groups,
                    "vars": {
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(key),
                        "ansible_ssh_common_args": SSH_ARGS,
                        "ansible_python_interpreter": "/usr/bin/python3",
                    },
                }
            }
        )
    )


def wait_for_sshd(key: Path, name: str, ssh_port: int, timeout_s: float = 60) -> None:
    """Until the test host `name` answers over SSH on ssh_port, as itself; TimeoutError past timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        probe = subprocess.run(
            ["ssh", "-i", str(key), "-p", str(ssh_port), *SSH_ARGS.split(), "root@127.0.0.1", "hostname"],
            capture_output=True, text=True,
        )  # fmt: skip
        if probe.returncode == 0:
            assert probe.stdout.strip() == name, f"port {ssh_port} answered as {probe.stdout.strip()}, not {name}"
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{name}: sshd did not answer on port {ssh_port} in {timeout_s:g} s: {probe.stderr}")
        time.sleep(1)


@pytest.fixture(scope="package")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(inventory dir, scratch dir mounted at /opt/replay/scratch in every test host)."""
    tmp = tmp_path_factory.mktemp("gpu-hosts")
    image = _build_images()
    _remove()
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    scratch = tmp / "scratch"
    scratch.mkdir()
    share = tmp / "share"
    _stage_models(share, image)
    profiles = _test_profiles(tmp / "profiles", share)
    stand_in = tmp / "stand-in.json"
    _write_stand_in(stand_in)
    STAND_IN["REFDEPLOY_STAND_IN"] = str(stand_in)
    _start_hosts(key, scratch, share)
    inv = tmp / "inventory"
    _write_inventory(inv, key, profiles, share)
    for name, (ssh_port, _g, _f, _p) in HOSTS.items():
        wait_for_sshd(key, name, ssh_port)
    yield inv, scratch
    _remove()
    STAND_IN.clear()


@pytest.fixture(scope="package")
def share(hosts: tuple[Path, Path]) -> Path:
    return hosts[0].parent / "share"
