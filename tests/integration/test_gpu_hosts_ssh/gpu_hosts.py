"""The two test hosts (their ports, groups and replayed fixtures) and what every module here uses to reach
them: `make` with the stand-in switched on, their containers' names, the replay seam, the files the host
roles change."""

from __future__ import annotations

from tests.integration.conftest import REPO, MakeResult, docker
from tests.integration.conftest import make as make_here

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


def make(*args: str, timeout: int | None = None) -> MakeResult:
    """make, with the test seam switched on (REFDEPLOY_STAND_IN names this module's stand-in file)."""
    assert STAND_IN, "the hosts fixture writes the stand-in file first"
    return make_here(*args, timeout=timeout, env=STAND_IN)


def _container(host: str) -> str:
    return f"refdeploy-vllm-{host.removeprefix('rdtest-')}"


def _replay_environment(recordings: str) -> dict[str, str]:
    """The one replay seam (tests/replay/README.md), as a test host's inventory sets it: the stand-ins of
    tests/replay (mounted at /opt/replay/bin) first on PATH, and the recordings they and the host readings serve."""
    return {"PATH": f"/opt/replay/bin:{HOST_PATH}", "REFDEPLOY_REPLAY_DIR": recordings}


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


def _flat(output: str) -> str:
    """Ansible folds long messages over lines: whitespace runs made single spaces."""
    return " ".join(output.split())
