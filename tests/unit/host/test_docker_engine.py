from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serving.host.docker_engine import engine_plan, restart_plan, unreachable

SETTINGS = {
    "docker_host": "unix:///var/run/docker.sock",
    "pidfile": "/run/refdeploy-dockerd.pid",
    "log": "/var/log/refdeploy-dockerd.log",
    "timeout_s": 60,
}


def _bare(**changes: Any) -> dict[str, Any]:
    """A Debian 12 host with no Docker and no systemd, reached with its system Python."""
    readings = {
        "host": "h1",
        "os_family": "Debian",
        "answers": False,
        "dockerd": "",
        "systemd": False,
        "library": True,
        "interpreter": "/usr/bin/python3",
    }
    return {**readings, **changes}


def _settings(install: bool, ensure: bool) -> dict[str, Any]:
    return {"host": "h1", "docker_host": "unix:///var/run/docker.sock", "error": "Cannot connect", "install": install,
            "ensure": ensure}  # fmt: skip


def test_a_deploy_on_an_inventory_that_allows_it_sets_docker_up() -> None:
    assert unreachable(_settings(install=True, ensure=True)) == {"setup": True, "error": None}


def test_a_playbook_that_changes_nothing_stops_and_names_make_deploy() -> None:
    verdict = unreachable(_settings(install=True, ensure=False))
    assert verdict["setup"] is False
    assert verdict["error"] == (
        "Docker Engine is not reachable at unix:///var/run/docker.sock on h1 (Cannot connect): `make deploy` "
        "installs and starts it on this host (preflight_install_docker is true); this playbook changes nothing."
    )


@pytest.mark.parametrize("ensure", [True, False])
def test_other_inventories_stay_opt_in(ensure: bool) -> None:
    verdict = unreachable(_settings(install=False, ensure=ensure))
    assert verdict["setup"] is False
    assert "set preflight_install_docker=true to have the deploy install Debian's docker.io" in verdict["error"]
    assert verdict["error"].endswith("Nothing was changed.")


def test_flags_from_the_command_line_are_read_as_ansible_reads_them() -> None:
    assert unreachable({**_settings(install=True, ensure=True), "install": "false"})["setup"] is False
    assert unreachable({**_settings(install=False, ensure=True), "install": "True"})["setup"] is True


def test_a_bare_host_without_systemd_gets_docker_io_and_the_supervisor() -> None:
    plan = engine_plan(_bare(), SETTINGS)
    assert plan["error"] is None
    assert plan["packages"] == ["docker.io"]
    assert plan["start"] == "supervisor"
    assert plan["start_argv"] == [
        "start-stop-daemon", "--start", "--background", "--make-pidfile", "--pidfile", "/run/refdeploy-dockerd.pid",
        "--output", "/var/log/refdeploy-dockerd.log", "--exec", "/usr/sbin/dockerd",
    ]  # fmt: skip
    stop = ("start-stop-daemon --stop --pidfile /run/refdeploy-dockerd.pid --exec /usr/sbin/dockerd "
            "--retry TERM/30/KILL/5 --remove-pidfile")  # fmt: skip
    assert " ".join(plan["stop_argv"]) == stop
    assert plan["socket"] == "/var/run/docker.sock" and plan["timeout_s"] == 60
    # One line: what runs it, its pid file and log, and how to stop it.
    assert "under start-stop-daemon (PID 1 is not systemd" in plan["said"]
    assert "pid file /run/refdeploy-dockerd.pid, log /var/log/refdeploy-dockerd.log" in plan["said"]
    assert plan["said"].endswith("stop it with: " + stop)
    # Each wait's expiry names the command and the log.
    for key in ("start_error", "socket_timeout_error", "answer_timeout_error"):
        assert "`start-stop-daemon --start" in plan[key] and plan[key].endswith("see /var/log/refdeploy-dockerd.log")
    assert plan["socket_timeout_error"].startswith("dockerd did not create /var/run/docker.sock on h1 within 60 s")


def test_the_systemctl_stand_in_restarts_a_bare_hosts_dockerd_as_the_role_started_it() -> None:
    """tests/replay/systemctl restarts the bare test host's real dockerd (test_deploy_to_a_bare_host.py): its
    start is the role's start_argv, its stop the role's stop_argv with --oknodo (the dockerd may have exited)."""
    plan = engine_plan(_bare(), SETTINGS)
    script = (Path(__file__).parents[2] / "replay" / "systemctl").read_text()
    names = {"$pidfile": SETTINGS["pidfile"], "$log": SETTINGS["log"], "$dockerd": "/usr/sbin/dockerd"}
    lines = []
    for line in script.splitlines():
        words = [names.get(w.strip('"'), w.strip('"')) for w in line.split()]
        if words[:1] == ["start-stop-daemon"]:
            lines.append(words)
    stop = [w for w in plan["stop_argv"]]
    stop.insert(stop.index("--stop") + 1, "--oknodo")
    assert lines == [stop, plan["start_argv"]]
    assert f"pidfile={SETTINGS['pidfile']} log={SETTINGS['log']} dockerd=/usr/sbin/dockerd" in script


def test_an_installed_dockerd_that_is_not_running_is_started_the_same_way() -> None:
    plan = engine_plan(_bare(dockerd="/usr/bin/dockerd"), SETTINGS)
    assert plan["packages"] == [] and plan["start"] == "supervisor"
    assert plan["start_argv"][plan["start_argv"].index("--exec") + 1] == "/usr/bin/dockerd"


def test_a_systemd_host_starts_docker_service() -> None:
    plan = engine_plan(_bare(systemd=True), SETTINGS)
    assert plan["packages"] == ["docker.io"] and plan["start"] == "systemd"
    assert "start_argv" not in plan
    assert plan["log"] == "journalctl -u docker"
    assert "as docker.service (PID 1 is systemd)" in plan["said"]
    assert plan["said"].endswith("stop it with: systemctl stop docker docker.socket")
    # docker.service has TimeoutStartSec=0 (no bound of its own): the role bounds the start, and says so.
    assert plan["start_error"] == "`systemctl start docker` did not succeed on h1 within 60 s: see journalctl -u docker"
    assert "`systemctl start docker`" in plan["answer_timeout_error"]
    assert plan["answer_timeout_error"].endswith("see journalctl -u docker")


def test_an_engine_that_answers_is_left_alone() -> None:
    plan = engine_plan(_bare(answers=True, dockerd="/usr/sbin/dockerd"), SETTINGS)
    assert plan == {"packages": [], "start": "none", "error": None}


def test_the_system_python_gets_the_library_the_docker_modules_need() -> None:
    plan = engine_plan(_bare(library=False), SETTINGS)
    assert plan["packages"] == ["docker.io", "python3-requests"]


def test_a_virtualenv_without_the_library_is_refused_with_what_to_run() -> None:
    plan = engine_plan(_bare(library=False, interpreter="/opt/venv/bin/python"), SETTINGS)
    assert plan["error"] == (
        "/opt/venv/bin/python on h1 cannot import requests, which the docker modules need: "
        "`/opt/venv/bin/python -m pip install requests`, or set ansible_python_interpreter to /usr/bin/python3."
    )


def test_a_non_debian_host_is_refused() -> None:
    plan = engine_plan(_bare(os_family="RedHat"), SETTINGS)
    assert plan["error"] is not None and plan["error"].startswith(
        "the deploy installs and starts Docker Engine only on Debian and Ubuntu; h1 is RedHat"
    )


def test_an_engine_elsewhere_is_not_started_here() -> None:
    """Only the default engine is set up: a deploy pointed at another endpoint that does not answer stops."""
    for endpoint in ("tcp://10.0.0.1:2375", "unix:///tmp/no-docker.sock"):
        plan = engine_plan(_bare(dockerd="/usr/sbin/dockerd"), {**SETTINGS, "docker_host": endpoint})
        assert plan["error"] == (
            f"Docker Engine is not reachable at {endpoint} on h1: the deploy installs and starts only the engine "
            f"at unix:///var/run/docker.sock; start the engine at {endpoint}, or set preflight_docker_host back."
        )


def test_a_dockerd_that_runs_but_does_not_answer_is_not_doubled() -> None:
    plan = engine_plan(_bare(dockerd="/usr/sbin/dockerd", dockerd_pids=[4242]), SETTINGS)
    assert plan["error"] == (
        "dockerd runs on h1 (pid 4242) but does not answer at unix:///var/run/docker.sock: see its log, or stop "
        "it and rerun; the deploy does not start a second engine."
    )


def test_the_supervised_dockerd_still_starting_is_waited_for() -> None:
    plan = engine_plan(_bare(dockerd="/usr/sbin/dockerd", dockerd_pids=[4242], supervised_pid=4242), SETTINGS)
    assert plan["error"] is None and plan["start"] == "supervisor"


# --- restarting dockerd on the runtime role's settings -------------------------------------------------------

DAEMON = "/etc/docker/daemon.json"
RUNNING = [{"Id": "a" * 64, "Names": ["/refdeploy-vllm"]}, {"Id": "b" * 64, "Names": ["/grafana"]}]


def _restart(**readings: Any) -> dict[str, Any]:
    allow = readings.pop("allow_stop", False)
    return restart_plan({"host": "gpu1", **readings}, {"allow_stop": allow})


def test_unchanged_settings_need_no_restart() -> None:
    plan = _restart(changed=[], live_restore=False, running=RUNNING, validate=None)
    assert plan["restart"] is False and plan["error"] is None and "no restart" in plan["said"]


def test_a_restart_that_would_stop_containers_is_refused_naming_them() -> None:
    plan = _restart(changed=[DAEMON], live_restore=False, running=RUNNING, validate={"rc": 0, "stderr": ""})
    assert plan["error"] == (
        "restarting Docker Engine on gpu1 to apply /etc/docker/daemon.json would stop its 2 running container(s) "
        "(grafana, refdeploy-vllm): live-restore is off in the running engine. Stop them, or enable live-restore "
        "first (`systemctl reload docker` takes it from daemon.json), or accept it with "
        "runtime_restart_stops_containers=true, and deploy again. Nothing was changed."
    )


def test_live_restore_in_the_running_engine_keeps_them_and_an_operator_may_accept_the_stop() -> None:
    kept = _restart(changed=[DAEMON], live_restore=True, running=RUNNING, validate={"rc": 0, "stderr": ""})
    assert kept["error"] is None and kept["restart"] and kept["stops"] == []
    assert "live-restore is on, so its 2 running container(s) keep running" in kept["said"]
    accepted = _restart(changed=[DAEMON], live_restore=False, running=RUNNING, validate=None, allow_stop="true")
    assert accepted["error"] is None and accepted["stops"] == ["grafana", "refdeploy-vllm"]
    assert "runtime_restart_stops_containers is true" in accepted["said"]
    empty = _restart(changed=[DAEMON], live_restore=False, running=[], validate=None)
    assert empty["error"] is None and empty["said"].endswith("no container runs")


def test_dockerds_own_validation_decides_where_it_has_one() -> None:
    bad = _restart(
        changed=[DAEMON],
        live_restore=True,
        running=[],
        validate={"rc": 1, "stderr": "unable to configure the Docker daemon with file x: invalid log-opts\n"},
    )
    assert bad["error"] == (
        "dockerd --validate refuses the daemon.json this deploy would write on gpu1 (unable to configure the "
        "Docker daemon with file x: invalid log-opts): fix runtime_daemon_settings or the host's daemon.json and "
        "deploy again. Nothing was changed."
    )
    # Debian 12's dockerd (20.10) has no --validate: not an error, and the plan says it was not validated.
    old = _restart(
        changed=[DAEMON],
        live_restore=True,
        running=[],
        validate={"rc": 125, "stderr": "unknown flag: --validate\nSee 'dockerd --help'.\n"},
    )
    assert old["error"] is None and old["validated"].startswith("not validated by dockerd")
