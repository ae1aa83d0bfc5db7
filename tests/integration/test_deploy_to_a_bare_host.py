"""A bare Debian 12 host, with no Docker Engine and no systemd: `make deploy` installs Debian's docker.io,
starts dockerd under start-stop-daemon (pid file, log), and serves; a second deploy changes nothing and
leaves dockerd alone; make's own set-up (python3.11-venv) runs there with real apt.

The host is a container (images/testhost, stage `bare`: the project's debootstrap base with sshd, no
docker.io, no python3-venv) on a bridge network, reached over real SSH on a port published on this
machine's loopback; vLLM on it listens on its own unix socket. Why SSH rather than make run inside it: the
controller side is then the operator's (this checkout, its virtualenv, the Makefile), and the host side is
all real (apt, dockerd, start-stop-daemon, the vLLM container); make inside would first build a second
virtualenv from PyPI there, minutes of this test's 4. The inventory is inventory/local's group_vars (the
local inventory's settings: preflight_install_docker is true, profile cpu-tiny), only the connection made SSH.

The host runs with every capability but CAP_SYS_RESOURCE, unconfined, with all devices and this machine's
cgroup tree: what a nested dockerd needs. `--privileged` itself fails on this machine (its engine lacks
CAP_SYS_RESOURCE: "unable to apply caps", REFERENCE §1), and that missing capability is what breaks Debian's
init script on a bare machine, so the host has the same limits.

TEST SEAM, the seeded image store: before the deploy, the host's /var/lib/docker (a volume) is filled from
this machine's engine, `docker save <runtime> <probes> | docker load`, by a dockerd of the same Debian
package running on that volume in a separate container (images/testhost stage `seed`), which is then removed.
The bare host itself never had docker.io: the deploy installs it, and its images role finds the
content-addressed tags and builds nothing (the cold build, 7 minutes here, is tested in test_deploy.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from serving.plan.render import api_socket
from tests.integration.conftest import REPO, MakeResult, docker, images_here, local_build_files, make, manifest_of

pytestmark = pytest.mark.integration
ENGINE_STARTS = 1  # inside the bare host's own dockerd: not seen on this engine, so not counted

HOST = "rdtest-bare"
SEED = "rdtest-bare-seed"
VOLUME = "rdtest-bare-docker"
IMAGE, SEED_IMAGE = "rdtest/bare-host:latest", "rdtest/bare-seed:latest"
PIDFILE, LOG = "/run/refdeploy-dockerd.pid", "/var/log/refdeploy-dockerd.log"
STOP = f"start-stop-daemon --stop --pidfile {PIDFILE} --exec /usr/sbin/dockerd --retry TERM/30/KILL/5 --remove-pidfile"
# Privileged but for CAP_SYS_RESOURCE, which this machine's engine does not have to give.
NESTED = [
    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm",
    "--volume", "/sys/fs/cgroup:/sys/fs/cgroup", "--volume", f"{VOLUME}:/var/lib/docker",
]  # fmt: skip


def _on_host(*argv: str, user: str = "root", check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", "exec", "--user", user, HOST, *argv], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"{HOST}: {' '.join(argv)} (exit {proc.returncode}): {proc.stderr}{proc.stdout}")
    return proc


def _wait(what: str, probe: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while subprocess.run(probe, capture_output=True, timeout=30).returncode != 0:
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s: `{' '.join(probe)}` kept failing"
        time.sleep(0.5)


def _remove() -> None:
    # The nested engine first, so that it removes its containers' cgroups (they sit in this machine's tree).
    if (
        subprocess.run(["docker", "exec", HOST, "test", "-S", "/var/run/docker.sock"], capture_output=True).returncode
        == 0
    ):
        subprocess.run(["docker", "exec", HOST, "sh", "-c", "docker rm -f $(docker ps -aq) >/dev/null 2>&1; " + STOP],
                       capture_output=True, timeout=120)  # fmt: skip
    for name in (HOST, SEED):
        docker("rm", "-f", name, check=False)
    docker("volume", "rm", VOLUME, check=False)


def _seed_image_store(images: dict[str, str]) -> None:
    """TEST SEAM: fill the bare host's image store from this machine's engine (see the module docstring)."""
    docker("volume", "create", VOLUME)
    docker("run", "-d", "--name", SEED, *NESTED, SEED_IMAGE)
    _wait("the seed dockerd answered", ["docker", "exec", SEED, "docker", "version"], 60)
    tags = [images["runtime_tag"], images["probes_tag"]]
    save = subprocess.Popen(["docker", "save", *tags], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "exec", "-i", SEED, "docker", "load", "--quiet"], stdin=save.stdout,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert save.wait(timeout=60) == 0 and load.returncode == 0, load.stderr
    docker("stop", "--time", "30", SEED)
    docker("rm", SEED)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bare host, seeded, and an inventory of the local inventory's settings reaching it over SSH."""
    tmp = tmp_path_factory.mktemp("bare-host")
    images = images_here()  # this machine's images, cached by content: what the seam copies
    for target, tag in (("bare", IMAGE), ("seed", SEED_IMAGE)):
        build = subprocess.run(
            ["docker", "build", "--quiet", "--target", target, "--tag", tag,
             "--build-arg", f"BASE_IMAGE={images['base_tag']}", str(REPO / "images" / "testhost")],
            capture_output=True, text=True, timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )  # fmt: skip
        assert build.returncode == 0, build.stderr[-3000:]
    _remove()
    # Whatever set-up step is interrupted (Ctrl-C, a lane's limit), the seed and the host go with it.
    try:
        _seed_image_store(images)
        key = tmp / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        # TEST SEAM: the seeded images' tags hash what this machine built them from (the local inventory's
        # wheelhouse and CA file, serving/plan/images.py); the host has the same files where that inventory names
        # them, read-only, so its plan names the seeded tags.
        files = local_build_files()
        same_files = [a for path in files.values() if path for a in ("--volume", f"{path}:{path}:ro")]
        docker("run", "-d", "--name", HOST, "--hostname", HOST, "--network", "bridge", "--publish", "127.0.0.1::22",
               "--volume", f"{key}.pub:/root/.ssh/authorized_keys:ro", *same_files, *NESTED, IMAGE)  # fmt: skip
        port = int(docker("port", HOST, "22").split(":")[-1])
        inv = tmp / "inventory"
        shutil.copytree(REPO / "inventory" / "local" / "group_vars", inv / "group_vars")
        ssh_args = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"
        (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {
            "children": {"cpu_local": {"hosts": {HOST: {"ansible_host": "127.0.0.1", "ansible_port": port}}}},
            "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(key),
                     "ansible_ssh_common_args": ssh_args, "ansible_python_interpreter": "/usr/bin/python3"},
        }}))  # fmt: skip
        _wait(f"{HOST}'s sshd answered on port {port}",
              ["ssh", "-i", str(key), "-p", str(port), *ssh_args.split(), "root@127.0.0.1", "true"], 60)  # fmt: skip
        yield inv
    finally:
        _remove()


# The manifest of the first (cold) deploy on the bare host, for the verify test after it.
_FIRST_MANIFEST: list[Path] = []


def _deploy(inv: Path) -> MakeResult:
    return make("deploy", f"INVENTORY={inv}", f"HOST={HOST}", timeout=600)


def _changed(output: str) -> dict[str, int]:
    m = re.search(rf"^{HOST}\s+: ok=\d+\s+changed=(\d+)", output, re.M)
    assert m, output[-3000:]
    return {"changed": int(m.group(1))}


def _dockerd() -> tuple[int, str]:
    """(pid from the supervisor's pid file, that process's start time in clock ticks since boot)."""
    pid = int(_on_host("cat", PIDFILE).stdout)
    stat = _on_host("cat", f"/proc/{pid}/stat").stdout
    return pid, stat.rsplit(")", 1)[1].split()[19]


def _complete(max_tokens: int) -> dict[str, object]:
    body = json.dumps({"model": "tiny-llama", "prompt": "def main(", "max_tokens": max_tokens, "ignore_eos": True})
    # vLLM's unix socket (it has no address), as root on the host reaches it.
    out = _on_host("curl", "-sf", "--max-time", "60", "--unix-socket", api_socket("refdeploy-vllm"),
                   "http://localhost/v1/completions", "-H", "Content-Type: application/json",
                   "-d", body).stdout  # fmt: skip
    result: dict[str, object] = json.loads(out)
    return result


def test_the_bare_host_is_bare(bare: Path) -> None:
    """What the deploy starts from: no docker.io, no dockerd, PID 1 not systemd."""
    assert _on_host("dpkg-query", "-W", "-f", "${Status}", "docker.io", check=False).stdout != "install ok installed"
    assert _on_host("sh", "-c", "command -v dockerd docker", check=False).returncode != 0
    assert _on_host("cat", "/proc/1/comm").stdout.strip() == "sshd"
    assert _on_host("test", "-e", "/run/systemd/system", check=False).returncode != 0


def test_make_deploy_installs_docker_starts_it_without_systemd_and_serves(bare: Path) -> None:
    r = _deploy(bare)
    assert r.rc == 0, r.output[-6000:]
    out = " ".join(r.output.split())
    # One line: what runs dockerd, its pid file and log, and how to stop it.
    assert (
        f"dockerd started on {HOST} under start-stop-daemon (PID 1 is not systemd; not restarted after a crash or "
        f"reboot, the next deploy starts it again): pid file {PIDFILE}, log {LOG}; stop it with: {STOP}" in out
    ), out[-4000:]
    # docker.io from Debian, and the library the docker modules need on the system Python.
    # (An install past 10 s prints the progress callback's "... N s so far" lines before its result.)
    installed = (
        r"TASK \[docker_engine : Docker engine \| Install docker.io, python3-requests\][ *]*\n"
        r"(?: +\.\.\. [^\n]*\n)*changed:"
    )
    assert re.search(installed, r.output), r.output[-6000:]
    for package in ("docker.io", "python3-requests"):
        status = _on_host("dpkg-query", "-W", "-f", "${Status}", package).stdout
        assert status == "install ok installed", (package, status)
    # dockerd runs under the supervisor: the pid file's process is /usr/sbin/dockerd, detached (its parent is
    # PID 1, not the SSH session), writing to the log; Debian's init script was not used (its pid file).
    pid, _ = _dockerd()
    assert _on_host("readlink", f"/proc/{pid}/exe").stdout.strip() == "/usr/sbin/dockerd"
    status = _on_host("cat", f"/proc/{pid}/status").stdout
    assert re.search(r"^PPid:\s+1$", status, re.M), status
    log = _on_host("cat", LOG).stdout
    assert "API listen on /var/run/docker.sock" in log, log[-2000:]
    assert _on_host("test", "-e", "/var/run/docker-ssd.pid", check=False).returncode != 0
    # The deploy completed: nothing was built (the seeded tags), the manifest verified the container.
    assert "TASK [images : Images | Build the runtime image" not in r.output
    run_dir, manifest = manifest_of(r)  # what this deploy wrote and printed
    assert run_dir.parent == REPO / "runs" / HOST
    _FIRST_MANIFEST.append(run_dir / "manifest.json")
    assert manifest["kind"] == "deploy" and manifest["verified"] is True, manifest.get("verification")
    assert manifest["host_facts"]["hostname"] == HOST
    # The served model answers inside that host.
    result = _complete(16)
    assert result["model"] == "tiny-llama"
    assert result["usage"]["completion_tokens"] == 16  # type: ignore[index]


def test_a_second_deploy_changes_nothing_and_leaves_dockerd_alone(bare: Path) -> None:
    pid, started = _dockerd()
    container = _on_host("docker", "inspect", "--format", "{{.Id}}", "refdeploy-vllm").stdout.strip()
    r = _deploy(bare)
    assert r.rc == 0, r.output[-4000:]
    assert _changed(r.output)["changed"] == 0, r.output[-4000:]
    assert "included: docker_engine" not in r.output
    assert _dockerd() == (pid, started)
    assert _on_host("docker", "inspect", "--format", "{{.Id}}", "refdeploy-vllm").stdout.strip() == container


def test_verify_against_the_cold_deploys_manifest_finds_nothing_changed(bare: Path) -> None:
    """The first deploy planned before the model existed, then generated it: its manifest records the plan as
    deployed ("generated", the probes' target), so make verify against it, nothing changed since, matches."""
    assert _FIRST_MANIFEST, "the first deploy's test did not run or wrote no manifest"
    ref = json.loads(_FIRST_MANIFEST[0].read_text())
    assert ref["plan"]["model_action"] == "generated", ref["plan"]["model_action"]
    assert ref["plan"]["probes"]["data_file"], ref["plan"]["probes"]
    r = make("verify", f"INVENTORY={bare}", f"HOST={HOST}", f"REF={_FIRST_MANIFEST[0]}", timeout=300)
    assert r.rc == 0, r.output[-4000:]
    assert f"{HOST} matches the reference: 0 must-match" in r.output, r.output[-4000:]
    assert "MUST-MATCH" not in r.output


def test_make_sets_up_python3_venv_there_as_root_and_says_what_to_install_otherwise(bare: Path) -> None:
    """make's first step (serving/standalone/prereqs.py, before `python3.11 -m venv`) on the bare host's own Python."""
    docker("cp", str(REPO / "serving" / "standalone" / "prereqs.py"), f"{HOST}:/usr/local/lib/prereqs.py")
    venv = ["python3", "-m", "venv", "/tmp/venv-check"]
    assert _on_host(*venv, check=False).returncode != 0  # ensurepip is not there
    user = _on_host("python3", "-I", "/usr/local/lib/prereqs.py", "venv", user="nobody", check=False)
    assert user.returncode == 2
    assert user.stderr == (
        "make: `python3.11 -m venv` (make's virtualenv) needs python3.11-venv: run `apt-get install python3.11-venv` "
        "as root, or make as root\n"
    )
    root = _on_host("python3", "-I", "/usr/local/lib/prereqs.py", "venv", check=False)
    assert root.returncode == 0, root.stderr
    assert "make: installing python3.11-venv for `python3.11 -m venv` (make's virtualenv)" in root.stderr
    _on_host(*venv)
    assert _on_host("/tmp/venv-check/bin/python", "-m", "pip", "--version").stdout.startswith("pip ")
    # Set up, it is silent.
    again = _on_host("python3", "-I", "/usr/local/lib/prereqs.py", "venv", user="nobody", check=False)
    assert (again.returncode, again.stderr) == (0, "")


def test_the_stop_command_stops_it_and_a_run_that_may_change_the_host_starts_it_again(bare: Path) -> None:
    """The printed stop command works; a run that changes nothing then stops with one line naming `make
    deploy`; `make images` (which, like deploy, may set Docker up) starts the installed, stopped dockerd the same
    way, without the vLLM wait a whole deploy would add here."""
    pid, _ = _dockerd()
    _on_host(*STOP.split())
    assert _on_host("test", "-e", PIDFILE, check=False).returncode != 0
    assert _on_host("test", "-d", f"/proc/{pid}", check=False).returncode != 0
    assert _on_host("docker", "version", check=False).returncode != 0

    checked = make("preflight", f"INVENTORY={bare}", f"HOST={HOST}", timeout=300)
    out = " ".join(checked.output.split())
    assert checked.rc != 0
    assert f"Docker Engine is not reachable at unix:///var/run/docker.sock on {HOST} (" in out, out[-3000:]
    assert (
        "`make deploy` installs and starts it on this host (preflight_install_docker is true); this playbook "
        "changes nothing." in out
    )
    assert _on_host("test", "-e", PIDFILE, check=False).returncode != 0

    started = make("images", f"INVENTORY={bare}", f"HOST={HOST}", timeout=300)
    assert started.rc == 0, started.output[-4000:]
    assert f"dockerd started on {HOST} under start-stop-daemon" in " ".join(started.output.split())
    assert "Docker engine | Install docker.io" not in started.output  # installed: only started
    again, _ = _dockerd()
    assert again != pid
    assert _on_host("readlink", f"/proc/{again}/exe").stdout.strip() == "/usr/sbin/dockerd"
    assert _on_host("docker", "version", "--format", "{{.Server.Version}}").stdout.startswith("20.10")


def test_a_dockerd_that_does_not_come_back_gets_its_previous_settings_back_and_runs_again(bare: Path) -> None:
    """The runtime role's restart and its rescue (ansible/roles/runtime/tasks/restart.yml) against a real dockerd
    that does not come back: the settings ask for a storage driver this host's filesystem cannot carry, which
    dockerd 20.10 (no --validate) accepts as a file and refuses at start. systemctl is the stand-in
    tests/replay/systemctl (PID 1 is not systemd here): its restart stops and starts the host's own dockerd."""
    docker("cp", str(REPO / "tests" / "replay" / "systemctl"), f"{HOST}:/usr/local/sbin/systemctl")
    _on_host("rm", "-f", "/var/log/refdeploy-systemctl.log")
    before = _on_host("cat", "/etc/docker/daemon.json", check=False)
    pid, _ = _dockerd()
    settings = {"runtime_daemon_settings": {"storage-driver": "btrfs"}, "runtime_restart_stops_containers": True}
    play = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(bare / "hosts.yml"), "--limit", HOST,
         "-e", json.dumps(settings), str(REPO / "tests" / "integration" / "runtime_restart.yml")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"},
    )  # fmt: skip
    out = " ".join((play.stdout + play.stderr).split())
    assert play.returncode != 0, out[-3000:]
    assert (
        f"Docker Engine did not come back on {HOST} after its settings changed (/etc/docker/daemon.json): Job for "
        "docker.service failed because the control process exited with error code (stand-in: dockerd " in out
    ), out[-3000:]
    assert f"see {LOG}). The previous files are back, and dockerd answers again on them" in out, out[-3000:]
    # dockerd really stopped, really refused the new file, and really runs again on the previous one.
    log = _on_host("cat", LOG).stdout
    assert "error initializing graphdriver" in log or "prerequisites for driver not satisfied" in log, log[-2000:]
    again, _ = _dockerd()
    assert again != pid
    assert _on_host("readlink", f"/proc/{again}/exe").stdout.strip() == "/usr/sbin/dockerd"
    assert _on_host("docker", "info", "--format", "{{.Driver}}").stdout.strip() != "btrfs"
    after = _on_host("cat", "/etc/docker/daemon.json", check=False)
    assert (after.returncode, after.stdout) == (before.returncode, before.stdout)
    calls = _on_host("cat", "/var/log/refdeploy-systemctl.log").stdout.splitlines()
    assert calls == ["restart docker.service", "daemon-reload", "restart docker.service"]
