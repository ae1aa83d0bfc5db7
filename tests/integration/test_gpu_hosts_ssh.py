"""The two GPU classes' hosts, reached over real SSH, and the whole chain on them: deploy, a second deploy,
status, bench, capture, probe-io, undeploy.

The hosts are containers running sshd (images/testhost, stage `gpu`), each its own filesystem, processes and
hostname, with the Docker CLI talking to this machine's engine; they share this machine's network namespace,
each sshd on its own port, so that the port a host's serving container publishes is on that host's loopback,
as on a real host. What a container cannot be is REPLAYED from tests/fixtures/gpu-hosts (nvidia-smi,
lsblk, findmnt and nvme through tests/replay/, the sysfs tree, and the host-level readings in <class>/host/,
see HOST-READINGS.md); systemctl is a stand-in that records its calls (no systemd in a container, and the
engine it would restart runs these tests). All of it goes through the one replay seam, the inventory's
refdeploy_replay_environment (tests/replay/README.md); no role has a test input.

What cannot exist here at all, the GPUs and the CUDA engine, is replaced at the one test seam, the stand-in
(serving/standin.py, switched on by REFDEPLOY_STAND_IN for these `make` runs only): the class is planned as
on a real host (class, NUMA plan, RAM budget, data drive, slice, container spec, the reviewed golden spec),
and the stand-in starts the CPU runtime image in its place with a CPU-feasible argv (the class's kind of
parallelism over 2 ranks: PP=2 for the 3090 class, TP=2 for the PRO 6000 class), the tiny model staged at the
class's model path, no device requests, this machine's CPUs; the probe containers get the replayed
nvidia-smi where the nvidia runtime would mount the driver's. Everything else (every playbook, role, check
and report) is the production path, and every artifact says a stand-in ran.

The Docker engine is this machine's, so paths that Docker mounts (the staged model, the probe and bench
scratch directories) are mounted into the test hosts at the same path as here.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.numa import format_cpulist
from tests.integration.conftest import REPO, MakeResult, docker, host_state, inspect
from tests.integration.conftest import make as make_here

pytestmark = pytest.mark.integration

IMAGE = "rdtest/gpu-host:latest"
# host: (its sshd's port on 127.0.0.1, inventory group, fixture, the port its serving container publishes)
HOSTS = {
    "rdtest-gpu3090": (2210, "gpu_rtx3090", "rtx3090-3gpu", 18010),
    "rdtest-gpupro": (2220, "gpu_rtxpro6000", "rtxpro6000-8gpu", 18020),
}
FIXTURES = REPO / "tests" / "fixtures" / "gpu-hosts"
# The PATH a root SSH session on a Debian test host gets (sshd's default for root).
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STAND_IN: dict[str, str] = {}


def make(*args: str, timeout: int = 1800) -> MakeResult:
    """make, with the test seam switched on (REFDEPLOY_STAND_IN names this module's stand-in file)."""
    assert STAND_IN, "the hosts fixture writes the stand-in file first"
    return make_here(*args, timeout=timeout, env=STAND_IN)


def _container(host: str) -> str:
    return f"refdeploy-vllm-{host.removeprefix('rdtest-')}"


def _runtime_image() -> str:
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "refdeploy"), "plan", "--profile", "cpu-tiny"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return str(json.loads(out.stdout)["images"]["runtime_tag"])


def _stage_models(share: Path, image: str) -> None:
    """The tiny model (serving/tinymodel.py, from the CPU runtime image) at each class's model path: what the
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
    for host, (_ip, group, _fixture, port) in HOSTS.items():
        name = {"gpu_rtx3090": "rtx3090-pp3", "gpu_rtxpro6000": "rtxpro6000-tp8"}[group]
        data = yaml.safe_load((REPO / "serving" / "profiles" / f"{name}.yaml").read_text())
        data["model"]["host_path"] = str(share / "models" / Path(data["model"]["host_path"]).name)
        data["container"]["name"] = _container(host)
        data["ports"]["host_port"] = port
        paths[host] = out / f"{name}.yaml"
        paths[host].write_text(yaml.safe_dump(data, sort_keys=False))
    return paths


def _remove() -> None:
    for name in HOSTS:
        for suffix in ("-samplers", "", "-previous", "-failed", "-bench"):
            docker("rm", "-f", _container(name) + suffix, check=False)
        docker("rm", "-f", name, check=False)


def _replay_environment(recordings: str) -> dict[str, str]:
    """The one replay seam (tests/replay/README.md), as a test host's inventory sets it: the stand-ins of
    tests/replay (mounted at /opt/replay/bin) first on PATH, and the recordings they and the host readings serve."""
    return {"PATH": f"/opt/replay/bin:{HOST_PATH}", "REFDEPLOY_REPLAY_DIR": recordings}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(inventory dir, scratch dir mounted at /opt/replay/scratch in every test host)."""
    tmp = tmp_path_factory.mktemp("gpu-hosts")
    # The CPU runtime image (the stand-in's engine and the tiny model's generator), its base and the probe image.
    r = make_here("images")
    assert r.rc == 0, r.output[-3000:]
    image = _runtime_image()
    base = json.loads(docker("image", "inspect", image))[0]["Config"]["Labels"]["org.opencontainers.image.base.name"]
    build = subprocess.run(
        ["docker", "build", "--quiet", "--target", "gpu", "--tag", IMAGE, "--build-arg", f"BASE_IMAGE={base}",
         str(REPO / "images" / "testhost")],
        capture_output=True, text=True, timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    _remove()
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    scratch = tmp / "scratch"
    scratch.mkdir()
    share = tmp / "share"
    _stage_models(share, image)
    profiles = _test_profiles(tmp / "profiles", share)
    stand_in = tmp / "stand-in.json"
    stand_in.write_text(
        json.dumps(
            {
                "cpus": format_cpulist(os.sched_getaffinity(0)),
                "mems": "0",
                "ulimits_max": {
                    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
                    "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)[1],
                },
                "nvidia_smi": {
                    "replayer": str(REPO / "tests" / "replay" / "nvidia-smi"),
                    "recordings": {h: str(FIXTURES / f) for h, (_i, _g, f, _p) in HOSTS.items()},
                },
            }
        )
    )
    STAND_IN["REFDEPLOY_STAND_IN"] = str(stand_in)
    for name, (ssh_port, _group, _fixture, _port) in HOSTS.items():
        docker(
            "run", "-d", "--name", name, "--hostname", name, "--network", "host",
            "--volume", "/var/run/docker.sock:/var/run/docker.sock",
            "--volume", f"{key}.pub:/root/.ssh/authorized_keys:ro",
            "--volume", f"{FIXTURES}:/opt/replay/fixtures:ro",
            "--volume", f"{REPO / 'tests' / 'replay'}:/opt/replay/bin:ro",
            "--volume", f"{scratch}:/opt/replay/scratch:ro",
            "--volume", f"{share}:{share}",
            IMAGE, "/usr/sbin/sshd", "-D", "-e", "-p", str(ssh_port), "-o", "ListenAddress=127.0.0.1",
        )  # fmt: skip
    inv = tmp / "inventory"
    shutil.copytree(REPO / "inventory" / "production-example" / "group_vars", inv / "group_vars")
    ssh_args = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"
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
            "probes_io_runtime_s": 2,
            # The staged data sits on this machine's virtio disk, not a class NVMe drive: the gate is real,
            # with floors it clears with margin (measured while other tests ran: QD1 11k-24k IOPS, QD64
            # 37k-75k IOPS; p99.9 at QD64 26-34 ms, 90 ms under load, so no latency cap).
            "probes_io_thresholds": {1: {"min_iops": 1000}, 64: {"min_iops": 5000}},
        }
    # The 3090 host also has the deploy raise the engine's memlock (the drop-ins and a restart).
    groups["gpu_rtx3090"]["hosts"]["rdtest-gpu3090"]["pinned_ram_engine_memlock"] = "infinity"
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
    for name, (ssh_port, _g, _f, _p) in HOSTS.items():
        deadline = time.monotonic() + 60
        while True:
            probe = subprocess.run(
                ["ssh", "-i", str(key), "-p", str(ssh_port), *ssh_args.split(), "root@127.0.0.1", "hostname"],
                capture_output=True, text=True,
            )  # fmt: skip
            if probe.returncode == 0:
                assert probe.stdout.strip() == name
                break
            assert time.monotonic() < deadline, f"{name}: sshd did not answer on port {ssh_port}: {probe.stderr}"
            time.sleep(1)
    yield inv, scratch
    _remove()
    STAND_IN.clear()


@pytest.fixture(scope="module")
def share(hosts: tuple[Path, Path]) -> Path:
    return hosts[0].parent / "share"


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
        "old-driver",
        lambda d: _sub(d / "nvidia-smi-query-gpu.csv", "570.195.03", "535.104.05"),
        "",
        "driver 535.104.05 on rdtest-gpu3090 is older than the class minimum 570.86",
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
        """-e '{"probes_io_thresholds":{"1":{"min_iops":100000000},"64":{"min_iops":25000}}}'""",
        "is on a device that misses the I/O thresholds of class rtx3090-pp3: QD1:",
    ),
    (
        "cgroup-v1",
        _cgroup_v1,
        "",
        "rdtest-gpu3090 runs cgroup v1 (tmpfs at /sys/fs/cgroup)",
    ),
]

# What the host roles change on a test host: any difference after a refused deploy is a change.
HOST_FILES = (
    "/etc/docker/daemon.json",
    "/etc/systemd/system/refdeploy.slice",
    "/etc/systemd/system/docker.service.d/refdeploy-memlock.conf",
    "/var/lib/refdeploy/rendered/refdeploy-vllm.json",
    "/var/log/refdeploy-systemctl.log",
)


def _host_files(name: str) -> str:
    return docker(
        "exec", name, "bash", "-c", "for f in " + " ".join(HOST_FILES) + '; do echo "$f"; cat "$f" 2>&1; done; true'
    )


@pytest.mark.parametrize(("case", "change", "extra", "line"), BAD_HOSTS, ids=[b[0] for b in BAD_HOSTS])
def test_a_bad_3090_host_is_refused_with_one_line_before_any_change(
    hosts: tuple[Path, Path], case: str, change: Callable[[Path], None], extra: str, line: str
) -> None:
    inv, scratch = hosts
    replay = scratch / case
    shutil.copytree(FIXTURES / "rtx3090-3gpu", replay)
    change(replay)
    case_vars = scratch / f"{case}.json"
    case_vars.write_text(
        json.dumps({"refdeploy_replay_environment": _replay_environment(f"/opt/replay/scratch/{case}")})
    )
    before, files_before = host_state(), _host_files("rdtest-gpu3090")
    # The whole deploy, not preflight alone: it must stop before the roles that change the host.
    r = make("deploy", f"INVENTORY={inv}", "HOST=rdtest-gpu3090", f"ANSIBLE_ARGS=-e @{case_vars} {extra}")
    out = " ".join(r.output.split())
    assert r.rc != 0, out[-3000:]
    assert "rdtest-gpu3090 cannot be deployed to; nothing was changed" in out, out[-3000:]
    # The failure message lists each problem once, joined by " | ".
    message = out[out.index("[ERROR]: Task failed: Action failed: rdtest-gpu3090 cannot be deployed to") :]
    message = message[: message.index(" Origin: ")]
    assert message.count(line) == 1, message
    assert host_state() == before
    assert _host_files("rdtest-gpu3090") == files_before


def test_an_engine_restart_that_would_stop_containers_is_refused_before_any_change(
    hosts: tuple[Path, Path],
) -> None:
    """The engine these hosts reach runs with live-restore off and runs containers (this test host's own): a
    deploy that must restart it, without runtime_restart_stops_containers, stops before writing anything."""
    inv, _ = hosts
    before, files_before = host_state(), _host_files("rdtest-gpu3090")
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
    assert host_state() == before
    assert _host_files("rdtest-gpu3090") == files_before


def test_a_dockerd_that_does_not_come_back_gets_its_previous_settings_back(hosts: tuple[Path, Path]) -> None:
    """The restart fails (the stand-in fails `restart docker.service` once, as a unit that does not start does):
    daemon.json and the memlock drop-ins are as before the deploy, the engine is restarted on them, and the
    deploy says so and starts no container."""
    inv, _ = hosts
    host = "rdtest-gpu3090"
    docker("exec", host, "rm", "-f", "/var/log/refdeploy-systemctl.log")
    docker("exec", host, "bash", "-c", "echo 'restart docker.service' >/var/log/refdeploy-systemctl.fail")
    files_before = _host_files(host)
    assert "No such file" in files_before.split("/etc/docker/daemon.json", 1)[1].split("\n", 2)[1]
    r = make("deploy", f"INVENTORY={inv}", f"HOST={host}")
    out = _flat(r.output)
    assert r.rc != 0, out[-3000:]
    assert f"Docker Engine did not come back on {host} after its settings changed (/etc/docker/daemon.json, " in out
    assert "The previous files are back, and dockerd answers again on them" in out, out[-3000:]
    assert inspect(_container(host)) is None
    calls = docker("exec", host, "cat", "/var/log/refdeploy-systemctl.log").splitlines()
    assert calls == [
        "daemon-reload",
        "restart containerd.service",
        "restart docker.service",  # failed
        "daemon-reload",
        "restart docker.service",
    ]
    after = _host_files(host)
    for path in ("/etc/docker/daemon.json", "/etc/systemd/system/docker.service.d/refdeploy-memlock.conf"):
        assert after.split(path, 1)[1].split("\n/", 1)[0] == files_before.split(path, 1)[1].split("\n/", 1)[0]


def _recap(output: str, host: str) -> dict[str, int]:
    m = re.search(rf"^{re.escape(host)}\s+: (ok=\d+.*)$", output, re.M)
    assert m, output[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def _changed_tasks(output: str) -> list[str]:
    tasks, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[6 : line.index("]")]
        elif line.startswith("changed: "):
            tasks.append(task)
    return tasks


def _newest(host: str, pattern: str) -> Path:
    found = sorted((REPO / "runs" / host).glob(pattern))
    assert found, f"no {pattern} under runs/{host}"
    return found[-1]


def _flat(output: str) -> str:
    """Ansible folds long messages over lines: whitespace runs made single spaces."""
    return " ".join(output.split())


# host, fixture, model dir, the plan's cpuset and memory nodes, the stand-in's kind of parallelism
CHAIN = [
    ("rdtest-gpu3090", "rtx3090-3gpu", "served", "0-27", "0", "pipeline_parallel_size"),
    ("rdtest-gpupro", "rtxpro6000-8gpu", "moe-gguf", None, "0-1", "tensor_parallel_size"),
]


@pytest.mark.parametrize(("host", "fixture", "model", "cpus", "mems", "parallel"), CHAIN, ids=[c[0] for c in CHAIN])
def test_a_gpu_host_runs_the_whole_chain_over_ssh(
    hosts: tuple[Path, Path], share: Path, host: str, fixture: str, model: str, cpus: str | None, mems: str,
    parallel: str,
) -> None:  # fmt: skip
    """deploy (the container started: the stand-in plays the class's), a second deploy that changes nothing,
    status, bench, capture, probe-io and undeploy, all against the class's plan. Before this, no GPU chain ran
    past the container start, and bench was refused on every GPU host (it compared the running argv with a
    plan that had no --numa-bind*)."""
    inv = hosts[0]
    name = _container(host)
    docker("exec", host, "rm", "-f", "/var/log/refdeploy-systemctl.log")
    first = make("deploy", f"INVENTORY={inv}", f"HOST={host}")
    assert first.rc == 0, first.output[-6000:]
    manifest = json.loads(_newest(host, "*/manifest.json").read_text())
    running = inspect(name)
    assert running is not None and running["State"]["Status"] == "running"

    second = make("deploy", f"INVENTORY={inv}", f"HOST={host}")
    assert second.rc == 0, second.output[-5000:]
    assert _recap(second.output, host)["changed"] == 0, _changed_tasks(second.output)
    assert inspect(name)["Id"] == running["Id"]  # type: ignore[index]

    # The manifest: the launched (stand-in) container verified, the class's plan beside it.
    assert manifest["kind"] == "deploy" and manifest["verified"] is True, manifest["verification"]
    plan = manifest["plan"]
    stand_in = manifest["stand_in"]
    assert stand_in and stand_in["module"] == "serving/standin.py"
    assert running["Config"]["Labels"]["org.refdeploy.stand-in"] == "serving/standin.py"
    assert plan["container_spec"]["image"].startswith("refdeploy/vllm:0.32.0-cuda-")
    assert manifest["container_spec"]["image"] == running["Config"]["Image"] == plan["images"]["runtime_tag"]
    assert "device_requests" in plan["container_spec"] and "device_requests" not in manifest["container_spec"]
    assert stand_in["replaced"]["image"] == [plan["container_spec"]["image"], running["Config"]["Image"]]
    # Two ranks of the class's kind, each on its own CPU, verified rank by rank.
    argv = running["Config"]["Cmd"]
    assert argv[argv.index("--" + parallel.replace("_", "-")) + 1] == "2"
    ranks = manifest["placement"]["ranks"]
    assert [(r["rank"], r["cpus_allowed"], r["ok"]) for r in ranks] == [(0, "0", True), (1, "1", True)]
    titles = {r["title"] for r in ranks}
    assert titles == ({"VLLM::Worker_PP0", "VLLM::Worker_PP1"} if "pipeline" in parallel
                      else {"VLLM::Worker_TP0", "VLLM::Worker_TP1"})  # fmt: skip
    # The class's plan: facts, NUMA plan, budget table, the data's drive, the slice.
    gpu = manifest["gpu"]
    assert len(gpu["gpus"]) == len(plan["container_spec"]["device_requests"][0]["device_ids"])
    assert gpu["numa_plan"]["cpuset_mems"] == mems
    if cpus:
        assert gpu["numa_plan"]["cpuset_cpus"] == cpus
    assert any("verdict: FITS" in ln for ln in gpu["ram_budget_table"]), gpu["ram_budget_table"]
    assert [(d["path"], d["disk"], d["transport"]) for d in gpu["data"]] == [
        (f"{share}/models/{model}", "nvme1n1", "nvme")
    ]
    assert gpu["data"][0]["smart"]["media_errors"] == 0
    assert gpu["slice"]["name"] == "refdeploy.slice" and gpu["slice"]["allowed_memory_nodes"] == mems
    # Read back from the cgroup tree, or why not (a test host's /sys/fs/cgroup has no refdeploy.slice).
    assert (gpu["slice"]["limits_read_back"] is None) != (gpu["slice"]["absent"] is None), gpu["slice"]
    assert manifest["host_facts"]["hostname"] == host
    assert manifest["effective_config"]["mismatches"] == []

    # What the host roles wrote, and what they asked systemd to do (once, on the first run).
    daemon = json.loads(docker("exec", host, "cat", "/etc/docker/daemon.json"))
    assert daemon["log-opts"] == {"max-size": "100m", "max-file": "5"} and daemon["live-restore"] is True
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    unit = docker("exec", host, "cat", "/etc/systemd/system/refdeploy.slice")
    assert unit == gpu["slice"]["unit"] and f"AllowedMemoryNodes={mems}\n" in unit
    calls = docker("exec", host, "cat", "/var/log/refdeploy-systemctl.log").splitlines()
    memlock = docker(
        "exec",
        host,
        "bash",
        "-c",
        "cat /etc/systemd/system/docker.service.d/refdeploy-memlock.conf 2>/dev/null || true",
    )
    # Only the 3090 host's inventory asks the deploy to raise the engine's memlock.
    assert ("LimitMEMLOCK=infinity" in memlock) == (host == "rdtest-gpu3090"), memlock
    restarts = ["restart containerd.service"] if memlock else []
    assert calls == ["daemon-reload", *restarts, "restart docker.service"]

    # The class's container spec is the reviewed golden one, but for what the test host changes: the model's
    # path, the container's name and port, and the image tag (the golden uses a placeholder).
    planned = plan["container_spec"]
    golden = json.loads((FIXTURES / fixture / "container-spec.golden.json").read_text())
    planned["image"] = golden["image"]
    planned["volumes"] = [v.replace(f"{share}/models/", "/srv/models/") for v in planned["volumes"]]
    port = str(HOSTS[host][3])
    assert planned["name"] == name and planned["published_ports"] == [f"127.0.0.1:{port}:8000"]
    planned["name"], planned["published_ports"] = golden["name"], golden["published_ports"]
    for spec in (planned, golden):
        spec["labels"].pop("org.refdeploy.spec-sha256")
        spec["labels"]["org.refdeploy.profile"] = golden["labels"]["org.refdeploy.profile"]
    assert planned == golden

    # status: the running container is the plan's (its digest), and the stand-in is named.
    status = make("status", f"INVENTORY={inv}", f"HOST={host}")
    assert status.rc == 0, status.output[-3000:]
    out = _flat(status.output)
    assert f"container {name}: running" in out and "health: 200" in out and "spec: matches the plan" in out
    assert "STAND-IN: the CPU engine" in out

    # bench: runs against the class's plan (refused before: the running argv carries --numa-bind*).
    bench = make("bench", f"INVENTORY={inv}", f"HOST={host}", "WORKLOAD=smoke", "RUNS=1", timeout=900)
    assert bench.rc == 0, bench.output[-5000:]
    bench_dir = _newest(host, "*/bench/summary.json").parent
    summary = json.loads((bench_dir / "summary.json").read_text())
    # Valid by the bench's own rules, except a stream that reached the client in bursts (a CPU client on 2 cores,
    # seen in about 1 run in 8; the bench flags it, issue 14 is its cause): that is the bench working.
    measured = [r for r in summary["runs"] if r["phase"] == "measured"]
    assert summary["status"] == "ok" and measured, summary["runs"]
    assert all(r["valid"] or all(f.startswith("buffered stream:") for f in r["flags"]) for r in measured), [
        r["flags"] for r in summary["runs"]
    ]
    bm = summary["manifest"]
    assert bm["stand_in"] and bm["server"]["spec_digest"] == running["Config"]["Labels"]["org.refdeploy.spec-sha256"]
    # The tokenizer the server uses: the PRO 6000 class's lies beside its weights, not in the model directory.
    assert bm["tokenizer"] == ("/models/moe-gguf/tokenizer" if model == "moe-gguf" else "/models/served")
    report = _flat((bench_dir / "report.txt").read_text())
    assert "STAND-IN engine ran here" in report
    # The sidecar's replayed nvidia-smi over the bench: GPU 1 of the 3090 host runs at Gen 1 x8 while busy.
    assert ("FLAG GPU 1: PCIe link at Gen 1 x8" in report) == (host == "rdtest-gpu3090"), report[-3000:]

    # capture: every rank's stacks and perf, the replayed nvidia-smi through the sidecar and the capture
    # container, the largest served file's page cache.
    capture = make("capture", f"INVENTORY={inv}", f"HOST={host}", "SECONDS=6", timeout=900)
    assert capture.rc == 0, capture.output[-5000:]
    bundle = _newest(host, "*/capture/bundle.json").parent
    index = json.loads((bundle / "bundle.json").read_text())
    workers = sorted(p["pid"] for p in index["processes"] if p["role"] == "worker")
    assert len(workers) == 2
    dumped = {d["pid"] for d in json.loads((bundle / "stacks" / "result.json").read_text())["dumps"]
              if d["status"] == "successful"}  # fmt: skip
    assert set(workers) <= dumped
    perf = [json.loads(f.read_text()) for f in sorted((bundle / "kernel").glob("perf-*.result.json"))]
    assert sorted(r["pid"] for r in perf) == workers, perf
    assert index["parts"]["samplers"]["status"] == "successful", index["parts"]["samplers"]
    gpu_samples = (bundle / "samplers" / "nvidia-smi.log").read_text().splitlines()
    assert len(gpu_samples) >= len(gpu["gpus"]), "the replayed nvidia-smi stream did not reach the capture"
    links = index["gpu_links"]
    assert links["judged"] is True
    if host == "rdtest-gpu3090":
        # GPU 1's link is replayed at Gen 1 x8 while busy: below the class's Gen 4 x16.
        assert [f.split(":")[0] for f in links["flags"]] == ["GPU 1"], links
        assert "PCIe link at Gen 1 x8" in (bundle / "summary.txt").read_text()
    else:
        assert links["flags"] == [], links
    state = json.loads((bundle / "host-state" / "after" / "host-state.json").read_text())
    assert state["page_cache"]["status"] == "successful", state["page_cache"]
    assert [f["path"] for f in state["page_cache"]["files"]] == [f"{share}/models/{model}/model.safetensors"]

    # probe-io on the largest served file (the tiny model's weights), not a model.safetensors it may lack.
    io = make("probe-io", f"INVENTORY={inv}", f"HOST={host}", timeout=600)
    assert io.rc == 0, io.output[-4000:]
    result = json.loads(_newest(host, "*/probe-io/result.json").read_text())
    assert result["target"] == f"{share}/models/{model}/model.safetensors" and result["verdict"] == "PASS"

    # undeploy: the class's containers go, the host's files stay.
    gone = make("undeploy", f"INVENTORY={inv}", f"HOST={host}")
    assert gone.rc == 0, gone.output[-3000:]
    assert inspect(name) is None and inspect(f"{name}-samplers") is None
