"""Safe by default, on the embedded default: every bad input is one line before any change, the generator never
writes over data, a check that fails after a replacement brings the previous container back, a key file others can
read is refused, and the effective-config check survives log rotation. The keyed deploy (the key reaches vLLM and
the bench client and no artifact) is test_secrets_leak.py's.

Tests run in file order and share one deployment of cpu-tiny, made by the first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.bridge import hostlock
from tests.integration.conftest import CONTAINER, REPO, RUNS, complete, docker, host_state, inspect, make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deployed")]
ENGINE_STARTS = 3  # the keyed deploy and the default put back after it moved to test_secrets_leak.py

STATE = Path("/var/lib/refdeploy")


def _profile(tmp_path: Path, name: str, edit: Any) -> Path:
    data = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _tree_sums(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _refused(before: dict[str, str], *args: str) -> str:
    """`make ARGS` fails, says why in its task's message, and leaves containers and images as they were."""
    r = make(*args)
    assert r.rc != 0, r.output[-3000:]
    assert host_state() == before
    return " ".join(r.output.split())


def test_the_generator_refuses_a_directory_holding_a_real_model(tmp_path: Path) -> None:
    real = tmp_path / "real-model"
    (real / "sub").mkdir(parents=True)
    (real / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    (real / "model.safetensors").write_bytes(os.urandom(4096))
    (real / "sub" / "notes.txt").write_text("keep\n")
    (real / "sub").chmod(0o700)
    sums = _tree_sums(real)

    def edit(d: dict[str, Any]) -> None:
        d["model"]["host_path"] = str(real)

    out = _refused(host_state(), "deploy", f"PROFILE={_profile(tmp_path, 'onto-real', edit)}")
    assert f"model.host_path {real} of profile cpu-tiny holds files the tiny-model generator did not make" in out
    assert "set model.generate: none to serve what is there" in out
    assert _tree_sums(real) == sums
    assert (real / "sub").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        (("model", "container_path"), "/models/$(touch /tmp/refdeploy-injected)", "model.container_path: "),
        (("ports", "host_ip"), "localhost", "ports.host_ip: "),
        (("container", "memory"), "0g", "container.memory: "),
    ],
)
def test_a_profile_value_that_cannot_be_used_is_one_line(tmp_path: Path, field: tuple[str, str], value: str,
                                                         says: str) -> None:  # fmt: skip
    def edit(d: dict[str, Any]) -> None:
        d[field[0]][field[1]] = value

    model = _tree_sums(STATE / "models" / "tiny-llama")
    out = _refused(host_state(), "deploy", f"PROFILE={_profile(tmp_path, 'bad', edit)}")
    assert says in out and repr(value) in out
    assert not Path("/tmp/refdeploy-injected").exists()
    assert _tree_sums(STATE / "models" / "tiny-llama") == model


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("bench", "RUNS=0"), "make bench: RUNS=0: give RUNS=n, measured runs per point, 1 or more"),
        # Refused after the run directory is made (the bench's plan names its host directory after the run id).
        (("bench", "WORKLOAD=/nonexistent/w.yaml"), "workload file /nonexistent/w.yaml does not exist"),
        (("bench", "SEARCH=sideways"), "make bench: SEARCH=sideways: give SEARCH=rate (arrival rate, no cap) or"),
        (("bench", "WORKLOAD=poisson", "SEARCH=rate"), "SEARCH=rate: workload poisson draws its arrivals"),
        # Refused against the probe_io role's argument spec by check_vars, in one line, before the role's own check
        # prints the whole spec.
        (("probe-io", "ANSIBLE_ARGS=-e probe_io_depths=sixty"), 'probe_io_depths="sixty" is not a list of whole'),
        (("probe-io", """ANSIBLE_ARGS=-e '{"probe_io_thresholds": {"64": {"min_iops": "fast"}}}'"""),
         "probe_io_thresholds.64.min_iops: expected a number of 0 or more, got 'fast'"),
        (("probe-io", """ANSIBLE_ARGS=-e '{"probe_io_thresholds": {"1": {"max_ms": -2}}}'"""),
         "probe_io_thresholds.1.max_ms: expected a number of 0 or more, got -2"),
        (("probe-io", "ANSIBLE_ARGS=-e probe_io_runtime_s=long"), 'probe_io_runtime_s="long" is not a whole number'),
    ],
)  # fmt: skip
def test_a_setting_that_cannot_be_used_is_one_line(args: tuple[str, ...], says: str) -> None:
    runs = sorted(RUNS.iterdir()) if RUNS.is_dir() else []
    out = _refused(host_state(), *args)
    assert says in out
    assert "Traceback" not in out and "Validation of arguments failed" not in out
    # A refused run leaves no run directory behind (issue 31: 17 empty ones after an afternoon).
    assert (sorted(RUNS.iterdir()) if RUNS.is_dir() else []) == runs


def test_a_depth_given_on_the_command_line_is_that_depth() -> None:
    # -e probe_io_depths=64 is the string "64": it once ran fio at QD6 and QD4.
    r = make("probe-io", "ANSIBLE_ARGS=-e probe_io_depths=64 -e probe_io_runtime_s=2")
    assert r.rc == 0, r.output[-3000:]
    fetched = re.search(r"fetched to: (\S+)/probe-io/", r.output)  # this run's, not the newest on disk
    assert fetched, r.output[-3000:]
    result = json.loads((Path(fetched.group(1)) / "probe-io" / "result.json").read_text())
    assert result["depths"] == [64] and len(result["runs"]) == 1


def test_a_failed_manifest_write_after_a_replacement_brings_the_previous_container_back(tmp_path: Path) -> None:
    good = inspect(CONTAINER)
    assert good is not None
    not_a_dir = tmp_path / "runs-is-a-file"
    not_a_dir.write_text("")
    path = _profile(tmp_path, "seqs4", lambda d: d["vllm"].update(max_num_seqs=4))
    r = make("deploy", f"PROFILE={path}", f"ANSIBLE_ARGS=-e manifest_runs_dir={not_a_dir}")
    out = " ".join(r.output.split())
    assert r.rc != 0
    assert "a check after the launch failed on localhost" in out
    assert f"The previous container (image {good['Config']['Image']}) was restarted as {CONTAINER}" in out
    back = inspect(CONTAINER)
    assert back is not None and back["Id"] == good["Id"] and back["State"]["Status"] == "running"
    assert inspect(f"{CONTAINER}-previous") is None
    failed = inspect(f"{CONTAINER}-failed")
    assert failed is not None and failed["State"]["Status"] == "exited"
    assert "--max-num-seqs" in failed["Config"]["Cmd"] and "4" in failed["Config"]["Cmd"]
    assert complete("x", 4)["usage"]["completion_tokens"] == 4
    docker("rm", f"{CONTAINER}-failed")


def test_the_effective_config_check_survives_log_rotation() -> None:
    log = docker("inspect", "--format", "{{.LogPath}}", CONTAINER).strip()
    os.truncate(log, 0)  # what json-file rotation does to the start-up lines of a long-running engine
    assert "Starting vLLM server" not in docker("logs", CONTAINER)
    # And the engine goes on logging: the workers' memory rows of the patched runtime come after the rotation (a
    # deploy once took them for the start's lines and failed to find its config).
    deadline = time.monotonic() + 60
    while "refdeploy-memory-phase" not in docker("logs", CONTAINER):
        assert time.monotonic() < deadline, "the engine logged no memory row within 60 s of serving"
        complete("Hello", 4)
        time.sleep(1)
    before = host_state()
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    assert r.recap_changed == 0
    assert host_state() == before


def test_a_key_file_others_can_read_is_refused_before_any_change() -> None:
    key_file = STATE / "test-api-key-open"
    key_file.write_text(secrets.token_hex(8))
    key_file.chmod(0o644)
    try:
        out = _refused(host_state(), "deploy", f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}")
        assert f"the API key file {key_file} must be root's and readable by root only" in out
        assert "(it is uid 0, mode 644)" in out
    finally:
        key_file.unlink()


def test_a_second_operation_while_one_runs_is_refused_naming_the_holder() -> None:
    """The holder is a bench (about a minute of the smoke workload): it holds the host as a deploy does
    (refdeploy_lock), without an engine start, which is most of a replacing deploy's time here."""
    lock = STATE / "lock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    first = subprocess.Popen(["make", "--no-print-directory", "-C", str(REPO), "bench", "WORKLOAD=smoke"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    try:
        for _ in range(120):
            if (lock / "holder.json").is_file():
                break
            time.sleep(0.5)
        held = json.loads((lock / "holder.json").read_text())
        assert held["operation"] == "bench"
        # Every target that changes the host, undeploy and images included.
        for op in ("deploy", "bench", "undeploy", "images"):
            r = make(op)
            out = " ".join(r.output.split())
            assert r.rc != 0
            assert (
                f"make {op} on localhost is refused, nothing was changed: the host is held by make bench "
                f"(run {held['run_id']}) from {socket.gethostname()} (pid {held['pid']}), since {held['started_utc']}"
            ) in out
    finally:
        rest, _ = first.communicate(timeout=600)
    assert first.returncode == 0, rest[-3000:]
    assert not lock.exists()  # released by the run that held it


def test_a_lock_left_by_a_dead_run_of_this_controller_is_taken_over_and_another_is_refused() -> None:
    lock = STATE / "lock"
    lock.mkdir(mode=0o700)
    try:
        dead = {"operation": "capture", "machine_id": hostlock.machine_id(), "run_id": "0123456789abcdef",
                "controller": socket.gethostname(), "pid": 2**22 + 17, "pid_start": "1",
                "started_utc": "2026-12-01T00:00:00Z"}  # fmt: skip
        (lock / "holder.json").write_text(json.dumps(dead))
        r = make("status")  # status takes no lock: it reads only
        assert r.rc == 0
        r = make("deploy")
        assert r.rc == 0, r.output[-3000:]
        assert f"taken over from a run of this controller that is gone: pid {dead['pid']}" in r.output
        assert not lock.exists()
        lock.mkdir(mode=0o700)
        (lock / "holder.json").write_text(json.dumps({**dead, "machine_id": "another", "controller": "elsewhere"}))
        out = _refused(host_state(), "deploy")
        assert "held by make capture (run 0123456789abcdef) from elsewhere" in out and f"rm -r {lock}" in out
    finally:
        subprocess.run(["rm", "-rf", str(lock)], check=True)
