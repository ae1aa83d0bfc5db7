"""Docker Engine on a managed host: may this run install or start it, and if so, how.

preflight asks `docker version`. When the engine does not answer, `unreachable` says whether this run may
set it up (the inventory allows it with preflight_install_docker, and the playbook changes hosts: deploy and
images do, status or bench never), or the one line to stop on. The docker_engine role then reads the host
(is dockerd installed, is PID 1 systemd, can the modules' Python import requests) and `engine_plan` says
what to install and how to start dockerd:

- where PID 1 is systemd: `docker.service`, started and enabled through systemd;
- elsewhere (a machine or container booted without systemd): Debian's init script cannot start it, since it
  raises the open-files limit, which needs CAP_SYS_RESOURCE (`/etc/init.d/docker: 86: ulimit: error setting
  limit (Operation not permitted)`), so dockerd runs under start-stop-daemon (dpkg's, on every Debian and
  Ubuntu) with a pid file and a log file of its own. It is not restarted after a crash or a reboot: the next
  deploy finds it not answering and starts it again.

Every wait the role does is bounded, and its expiry message names the command and the log to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
SUPERVISOR = "start-stop-daemon"
# The Python library the community.docker modules (4.x) need on the managed host, and its Debian package.
MODULES_LIBRARY = "requests"
MODULES_LIBRARY_PACKAGE = "python3-requests"


def _flag(value: Any) -> bool:
    """An Ansible boolean: `-e name=false` arrives as the string "false"."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def unreachable(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Docker did not answer: {"setup": True} when this run may install and start it, else {"error": line}.

    settings: host, docker_host, error (the last line `docker version` printed), install
    (preflight_install_docker), ensure (this playbook may change the host).
    """
    host, docker_host = str(settings["host"]), str(settings.get("docker_host") or DEFAULT_DOCKER_HOST)
    said = str(settings.get("error") or "").strip() or "no output"
    head = f"Docker Engine is not reachable at {docker_host} on {host} ({said})"
    install, ensure = _flag(settings.get("install")), _flag(settings.get("ensure"))
    if install and ensure:
        return {"setup": True, "error": None}
    if install:
        return {
            "setup": False,
            "error": f"{head}: `make deploy` installs and starts it on this host (preflight_install_docker is "
            "true); this playbook changes nothing.",
        }
    return {
        "setup": False,
        "error": f"{head}: start it (systemctl start docker, or dockerd), check preflight_docker_host, or set "
        "preflight_install_docker=true to have the deploy install Debian's docker.io and start it. "
        "Nothing was changed.",
    }


def engine_plan(readings: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the docker_engine role installs and how it starts dockerd, or {"error": line}.

    readings: host, os_family, answers (docker version answered), dockerd (its path, "" when not installed),
    dockerd_pids (the dockerd processes running), supervised_pid (the pid in the role's pid file, or None),
    systemd (/run/systemd/system exists: PID 1 is systemd), library (the modules' Python imports requests),
    interpreter (that Python's path).
    settings: docker_host, pidfile, log, timeout_s.
    """
    host = str(readings["host"])
    docker_host = str(settings.get("docker_host") or DEFAULT_DOCKER_HOST)
    plan: dict[str, Any] = {"packages": [], "start": "none", "error": None}
    family = str(readings.get("os_family") or "")
    if family != "Debian":
        return {
            **plan,
            "error": f"the deploy installs and starts Docker Engine only on Debian and Ubuntu; {host} is "
            f"{family or 'of an unknown family'}: install Docker Engine by hand and rerun.",
        }
    answers = bool(readings.get("answers"))
    if not answers and docker_host != DEFAULT_DOCKER_HOST:
        return {
            **plan,
            "error": f"Docker Engine is not reachable at {docker_host} on {host}: the deploy installs and starts "
            f"only the engine at {DEFAULT_DOCKER_HOST}; start the engine at {docker_host}, or set "
            "preflight_docker_host back.",
        }
    interpreter = str(readings.get("interpreter") or "")
    if not readings.get("library"):
        # apt can give only the system Python its library; a virtualenv (the local inventory's) has its own.
        if not interpreter.startswith("/usr/bin/python3"):
            return {
                **plan,
                "error": f"{interpreter or 'the Python Ansible uses'} on {host} cannot import {MODULES_LIBRARY}, "
                f"which the docker modules need: `{interpreter or 'python3'} -m pip install {MODULES_LIBRARY}`, "
                "or set ansible_python_interpreter to /usr/bin/python3.",
            }
        plan["packages"].append(MODULES_LIBRARY_PACKAGE)
    dockerd = str(readings.get("dockerd") or "")
    if not dockerd:
        plan["packages"].insert(0, "docker.io")
        dockerd = "/usr/sbin/dockerd"
    if answers:
        return plan
    # Never a second engine: a dockerd that runs but does not answer is someone else's to look at, unless it is
    # the one this role started (still starting: start-stop-daemon then leaves it be, and the role waits).
    supervised = readings.get("supervised_pid")
    foreign = sorted(int(p) for p in readings.get("dockerd_pids") or [] if supervised is None or int(p) != supervised)
    if foreign and not readings.get("systemd"):
        return {
            **plan,
            "error": f"dockerd runs on {host} (pid {', '.join(map(str, foreign))}) but does not answer at "
            f"{docker_host}: see its log, or stop it and rerun; the deploy does not start a second engine.",
        }
    return _start(plan, host, docker_host, dockerd, bool(readings.get("systemd")), settings)


def _start(
    plan: dict[str, Any], host: str, docker_host: str, dockerd: str, systemd: bool, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """How dockerd is started (systemd, or start-stop-daemon where PID 1 is not systemd), how it is stopped,
    and the line for each bounded wait that runs out."""
    socket = DEFAULT_DOCKER_HOST.removeprefix("unix://")
    timeout_s = int(settings.get("timeout_s") or 60)
    plan["socket"] = socket
    plan["timeout_s"] = timeout_s
    if systemd:
        start = ["systemctl", "start", "docker"]
        log = "journalctl -u docker"
        plan.update(
            start="systemd",
            log=log,
            stop_argv=["systemctl", "stop", "docker", "docker.socket"],
            said=f"Docker Engine started on {host} as docker.service (PID 1 is systemd), enabled at boot; "
            f"log: {log}; stop it with: systemctl stop docker docker.socket",
        )
    else:
        pidfile, log = str(settings["pidfile"]), str(settings["log"])
        start = [
            SUPERVISOR, "--start", "--background", "--make-pidfile", "--pidfile", pidfile, "--output", log,
            "--exec", dockerd,
        ]  # fmt: skip
        stop = [SUPERVISOR, "--stop", "--pidfile", pidfile, "--exec", dockerd, "--retry", "TERM/30/KILL/5",
                "--remove-pidfile"]  # fmt: skip
        plan.update(
            start="supervisor",
            start_argv=start,
            stop_argv=stop,
            pidfile=pidfile,
            log=log,
            said=f"dockerd started on {host} under {SUPERVISOR} (PID 1 is not systemd; not restarted after a "
            f"crash or reboot, the next deploy starts it again): pid file {pidfile}, log {log}; stop it with: "
            + " ".join(stop),
        )
    command = " ".join(start)
    plan["start_error"] = f"`{command}` did not succeed on {host} within {timeout_s} s: see {plan['log']}"
    plan["socket_timeout_error"] = (
        f"dockerd did not create {socket} on {host} within {timeout_s} s of `{command}`: see {plan['log']}"
    )
    plan["answer_timeout_error"] = (
        f"`docker version` did not answer at {docker_host} on {host} within {timeout_s} s of `{command}`: "
        f"see {plan['log']}"
    )
    return plan


# --- restarting the engine on new settings (the runtime role) ----------------------------------------------

# What dockerd before Docker Engine 23 says to `--validate`: it cannot check a daemon.json without starting.
NO_VALIDATE = "unknown flag: --validate"


def _names(containers: Any) -> list[str]:
    out = []
    for c in containers or []:
        names = c.get("Names") or [c.get("Id", "?")[:12]]
        out.append(str(names[0]).lstrip("/"))
    return sorted(out)


def restart_plan(readings: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the runtime role restarts dockerd to apply its settings, and whether it may: {"error": line}
    before anything is written when dockerd refuses the new daemon.json, or when the restart would stop running
    containers the inventory did not say may stop.

    readings: host; changed (the files whose new content differs: daemon.json, the memlock drop-ins);
    live_restore (the running engine's LiveRestoreEnabled: it decides what its own shutdown does, whatever the
    new file says); running (docker_host_info's containers: the running ones); validate (rc and stderr of
    `dockerd --validate --config-file <the new daemon.json>`, None when daemon.json does not change).
    settings: allow_stop (runtime_restart_stops_containers).
    """
    host = str(readings["host"])
    changed = [str(p) for p in readings.get("changed") or []]
    plan: dict[str, Any] = {"restart": bool(changed), "changed": changed, "stops": [], "error": None}
    validate = readings.get("validate")
    if validate is None:
        plan["validated"] = "daemon.json unchanged"
    elif int(validate.get("rc", 1)) == 0:
        plan["validated"] = "dockerd --validate: the new daemon.json is valid"
    elif NO_VALIDATE in str(validate.get("stderr") or ""):
        plan["validated"] = (
            "not validated by dockerd: this one has no --validate (Docker Engine 23 added it); the file is JSON "
            "and keeps the keys dockerd runs with, and the previous one is restored if dockerd does not come back"
        )
    else:
        said = (str(validate.get("stderr") or "").strip().splitlines() or ["no reason given"])[-1]
        plan["error"] = (
            f"dockerd --validate refuses the daemon.json this deploy would write on {host} ({said}): fix "
            "runtime_daemon_settings or the host's daemon.json and deploy again. Nothing was changed."
        )
        return plan
    if not changed:
        plan["said"] = f"Docker Engine settings on {host} are as planned: no restart"
        return plan
    running = _names(readings.get("running"))
    what = ", ".join(changed)
    if readings.get("live_restore"):
        plan["said"] = (
            f"Docker Engine on {host} restarts to apply {what}; live-restore is on, so its {len(running)} running "
            "container(s) keep running"
        )
        return plan
    plan["stops"] = running
    if running and not _flag(settings.get("allow_stop")):
        shown = ", ".join(running[:8]) + (f" and {len(running) - 8} more" if len(running) > 8 else "")
        plan["error"] = (
            f"restarting Docker Engine on {host} to apply {what} would stop its {len(running)} running "
            f"container(s) ({shown}): live-restore is off in the running engine. Stop them, or enable "
            "live-restore first (`systemctl reload docker` takes it from daemon.json), or accept it with "
            "runtime_restart_stops_containers=true, and deploy again. Nothing was changed."
        )
        return plan
    plan["said"] = f"Docker Engine on {host} restarts to apply {what}" + (
        f"; it stops its {len(running)} running container(s) ({', '.join(running)}): "
        "runtime_restart_stops_containers is true"
        if running
        else "; no container runs"
    )
    return plan
