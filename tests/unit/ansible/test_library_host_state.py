"""What the plan's read says is on the host now (refdeploy_host_readings' host_state, the fact refdeploy_host),
and the engine wait of refdeploy_engine_readings, run as Ansible runs them. Docker Engine here is one that
does not answer (DOCKER_HOST names a socket nothing listens on): the unit tests run without one. The answering
engine is the integration tests' (every deploy plans through it)."""

from __future__ import annotations

import hashlib
import http.server
import os
import socketserver
import sys
import threading
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


def _host_state() -> ModuleType:
    """ansible/module_utils/refdeploy_host_state.py, as the module imports it (host_state's functions)."""
    _library("refdeploy_host_readings")
    module: ModuleType = sys.modules["ansible.module_utils.refdeploy_host_state"]
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
    lib = _host_state()
    cut = lib.decided_on(inspected)
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
    decided_on = _host_state().decided_on
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


def test_directories_groups_and_trees_are_read_as_a_deploy_would_set_them(tmp_path: Path) -> None:
    """What lets a converged deploy skip its file and group tasks (serve's socket, compile-cache and model
    directories): each directory's mode (setgid included), owner and group; a group's gid by name; the entries of
    a tree that `file: recurse, owner: root, group: root, mode: u=rwX,go=rX` would change."""
    socket_dir = tmp_path / "api"
    socket_dir.mkdir()
    socket_dir.chmod(0o2750)
    (tmp_path / "plain").write_text("x")
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    for f, mode in (("config.json", 0o644), ("sub/run.sh", 0o755)):
        (model / f).write_text("{}")
        (model / f).chmod(mode)
    model.chmod(0o755)
    (model / "sub").chmod(0o755)
    for p in (model, model / "sub", model / "config.json", model / "sub" / "run.sh"):
        os.chown(p, 0, 0)  # root's, as a deploy leaves it (the tests run as root: make test, .ci/run)
    dirs = [str(socket_dir), str(tmp_path / "plain"), str(tmp_path / "gone")]
    state = _state({"dirs": dirs, "groups": ["root", "refdeploy-no-such-group"], "trees": [str(model)]})
    st = socket_dir.stat()
    assert state["dirs"] == {dirs[0]: {"mode": "02750", "uid": st.st_uid, "gid": st.st_gid}, dirs[1]: None,
                             dirs[2]: None}  # fmt: skip
    assert state["groups"] == {"root": 0, "refdeploy-no-such-group": None}
    assert state["trees"] == {str(model): []}
    # A file the generator left 0600, and one its user still owns: each named (the first five of them).
    (model / "config.json").chmod(0o600)
    os.chown(model / "sub" / "run.sh", 65534, 65534)
    drift = _state({"trees": [str(model)]})["trees"][str(model)]
    assert sorted(drift) == [str(model / "config.json"), str(model / "sub" / "run.sh")]
    assert _state({"trees": [str(tmp_path / "gone")]})["trees"] == {str(tmp_path / "gone"): None}


def test_the_engines_health_is_asked_over_its_unix_socket(tmp_path: Path) -> None:
    """make status's health line comes with the plan's read: GET /health on the engine's socket, its HTTP status;
    no socket, no status and the reason."""
    sock = str(tmp_path / "vllm.sock")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:  # a unix socket's client has no address to log
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    with Server(sock, Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            assert _state({"health_socket": sock})["health"] == {"status": 200, "error": ""}
        finally:
            server.shutdown()
    gone = _state({"health_socket": str(tmp_path / "none.sock")})["health"]
    assert gone["status"] is None and "FileNotFoundError" in gone["error"]
    assert _state({})["health"] is None  # not asked, not read
