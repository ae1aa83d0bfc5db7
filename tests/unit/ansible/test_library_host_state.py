"""What the plan's read says is on the host now (refdeploy_host_readings' host_state, the fact refdeploy_host),
and the engine wait of refdeploy_engine_readings, run as Ansible runs them. Docker Engine here is one that
does not answer (DOCKER_HOST names a socket nothing listens on): the unit tests run without one. The answering
engine is the integration tests' (every deploy plans through it)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from serving.plan.render import RENDERED_DIR
from tests.helpers.ansible_run import LIBRARY, load_library_module, run_module

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/refdeploy-test.sock"}


def _library(name: str) -> ModuleType:
    module: ModuleType = load_library_module(name)
    return module


def _state(args: dict[str, Any]) -> dict[str, Any]:
    got = run_module("refdeploy_host_readings", {"mode": "cpu", "host": "h1", **args}, env=NO_ENGINE)
    state: dict[str, Any] = got["host_state"]
    return state


def test_paths_are_reported_as_directory_file_or_missing(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    paths = [str(tmp_path), str(tmp_path / "f"), str(tmp_path / "gone")]
    state = _state({"paths": paths})
    assert state["paths"] == {paths[0]: "directory", paths[1]: "file", paths[2]: "missing"}
    assert state["docker"] is None  # no read_docker: the engine is not asked


def test_an_engine_that_does_not_answer_is_its_exit_status_and_last_line_and_nothing_else() -> None:
    state = _state(
        {"read_docker": True, "docker_port": 8443, "images": ["refdeploy/vllm"], "containers": ["refdeploy-vllm"]}
    )
    docker = state["docker"]
    assert docker["rc"] != 0 and docker["version"] == ""
    # The docker CLI's own words (or, where it is not installed, that it is not).
    assert "nonexistent/refdeploy-test.sock" in docker["error"] or docker["error"] == "docker: command not found"
    assert docker["port_owners"] == [] and state["images_present"] == [] and state["containers"] == []


def test_the_containers_are_cut_to_what_a_deploy_decides_on_never_their_environment() -> None:
    inspected = {
        "Id": "c0ffee",
        "Name": "/refdeploy-vllm",
        "RestartCount": 2,
        "State": {"Status": "running"},
        "Config": {
            "Image": "refdeploy/vllm:x",
            "Labels": {"org.refdeploy.spec-sha256": "ab"},
            "Env": ["HF_TOKEN=hf_s"],
        },
        "HostConfig": {"Binds": ["/var/lib/refdeploy/secrets/k:/run/k:ro"], "PidsLimit": 4096, "NanoCpus": 0},
    }
    lib = _library("refdeploy_host_readings")
    cut = lib._decided_on(inspected)
    # HostConfig cut to its limits (no binds, no mounts, no devices): what make status and deploy judge for drift.
    limits = {k: None for k in lib.HOSTCONFIG_FIELDS} | {"PidsLimit": 4096, "NanoCpus": 0}
    assert cut == {
        "Id": "c0ffee",
        "Name": "/refdeploy-vllm",
        "RestartCount": 2,
        "State": {"Status": "running"},
        "Config": {"Image": "refdeploy/vllm:x", "Labels": {"org.refdeploy.spec-sha256": "ab"}},
        "PidVisible": False,  # no PID in its State
        "HostConfig": limits,
        # No PID in this host's /proc, no record of a launch: nothing read of the kernel.
        "Limits": None,
        "LaunchAffinity": None,
    }


def test_a_containers_pid_is_visible_only_where_this_hosts_proc_has_it_as_the_containers() -> None:
    """A GPU test host shares this machine's engine: the PID Docker reports is in the engine's PID namespace, not
    the host's. There it is either absent or, by chance, an unrelated process: neither is the container's, and a
    collection must not wait for that PID to come back (refdeploy_collect), nor its limits be read as the
    container's. (A PID whose cgroup names the container: test_cgroup_limits, with a recorded /proc/<pid>/cgroup.)"""
    decided_on = _library("refdeploy_host_readings")._decided_on
    # This process exists here, but its cgroup is not container c0ffee's.
    mine = decided_on({"Id": "c0ffee", "State": {"Status": "running", "Running": True, "Pid": os.getpid()}})
    assert (mine["PidVisible"], mine["Limits"]) == (False, None)
    free = max(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()) + 100_000
    assert decided_on({"Id": "c0ffee", "State": {"Status": "running", "Pid": free}})["PidVisible"] is False


def test_the_engine_wait_gives_up_at_once_on_a_container_that_is_gone(tmp_path: Path) -> None:
    started = time.monotonic()
    got = run_module(
        "refdeploy_engine_readings",
        {
            "container": "refdeploy-none",
            "socket": "/run/refdeploy/api/vllm.sock",
            "kept_dir": str(tmp_path),
            "health_timeout_s": 60,
        },
        env=NO_ENGINE,
    )
    assert time.monotonic() - started < 30  # not the 60 s it was given
    assert got["healthy"] is False and got["healthy_utc"] is None
    assert got["health_state"] == "state gone, restarts 0, /health HTTP 000"
    assert "log" not in got and "metrics" not in got  # nothing read from an engine that did not answer


def test_files_are_their_sum_mode_and_owner_and_the_rendered_dir_is_the_serve_roles(tmp_path: Path) -> None:
    spec = tmp_path / "refdeploy-vllm.json"
    spec.write_text('{"name": "refdeploy-vllm"}\n')
    spec.chmod(0o600)
    state = _state({"files": [str(spec), str(tmp_path), str(tmp_path / "gone")]})
    # A directory and a missing path are not files: a role writes them.
    assert state["files"] == {
        str(spec): {
            "sha256": hashlib.sha256(spec.read_bytes()).hexdigest(),
            "mode": "0600",
            "uid": os.getuid(),
            "gid": os.getgid(),
        }
    }
    defaults = yaml.safe_load((LIBRARY.parent / "roles/serve/defaults/main.yml").read_text())
    assert defaults["serve_rendered_dir"] == RENDERED_DIR  # the file the plan's read reports is the one serve writes
