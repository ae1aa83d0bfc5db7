"""A dockerd that does not come back after the deploy changed its settings gets its previous files back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import docker, inspect
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import _container, _flat, _host_files, make

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0


def test_a_dockerd_that_does_not_come_back_gets_its_previous_settings_back(hosts: tuple[Path, Path]) -> None:
    """The restart fails (the stand-in fails `restart docker.service` once, as a unit that does not start does):
    daemon.json and the memlock drop-ins are as before the deploy, the engine is restarted on them, and the
    deploy says so and starts no container. This host shares this machine's engine, so nothing stops here; a
    real dockerd that stops and does not come back is test_deploy_to_a_bare_host.py's last test."""
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
