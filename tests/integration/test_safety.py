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
import signal
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
# The keyed deploy and the default put back after it moved to test_secrets_leak.py; the killed deploy's new engine
# and the set-aside one put back after it.
ENGINE_STARTS = 5

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
        (("model", "host_path"), "/var/lib/../etc", "model.host_path: "),
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
        # Refused from the host's stat of it, before the probe image and the run directory: the fio container once
        # refused it, and left a run directory holding only serving-container.json (issue 46).
        (("probe-io", "ANSIBLE_ARGS=-e probe_io_target=/var/lib/refdeploy/models/tiny-llama/nonesuch.bin"),
         "probe_io_target /var/lib/refdeploy/models/tiny-llama/nonesuch.bin does not exist on localhost (or is a "
         "link to nothing): set probe_io_target to a model weight or data file the serving stack reads"),
    ],
)  # fmt: skip
def test_a_setting_that_cannot_be_used_is_one_line(args: tuple[str, ...], says: str) -> None:
    runs = sorted(RUNS.iterdir()) if RUNS.is_dir() else []
    out = _refused(host_state(), *args)
    assert says in out
    assert "Traceback" not in out and "Validation of arguments failed" not in out
    # A refused run leaves no run directory behind (issue 31: 17 empty ones after an afternoon).
    assert (sorted(RUNS.iterdir()) if RUNS.is_dir() else []) == runs


def test_a_capture_its_container_refuses_leaves_a_result_saying_what_was_refused() -> None:
    """The capture container refuses a data file that is not there (exit 2) after the run directory was made: the
    directory holds bundle.json and summary.txt saying so (issue 46), where it once held only serving-container.json.
    The host-state part alone, two seconds: about 5 s."""
    missing = "/var/lib/refdeploy/models/tiny-llama/nonesuch.bin"
    r = make("probe", "PROBE=hoststate", "SECONDS=2", f'ANSIBLE_ARGS=-e \'{{"capture_data_files": ["{missing}"]}}\'')
    assert r.rc != 0, r.output[-3000:]
    said = " ".join(r.output.split())
    assert f"ERROR: capture: --data-file {missing}: not a regular file" in said, r.output[-3000:]
    found = re.search(r"bundle: (\S+)/hoststate/", r.output)  # this run's, not the newest on disk
    assert found, r.output[-3000:]
    bundle = Path(found.group(1)) / "hoststate"
    idx = json.loads((bundle / "bundle.json").read_text())
    assert (idx["complete"], idx["cut_short"]["exit_code"]) == (False, 2)
    assert idx["cut_short"]["why"].startswith(f"the capture refused its input: capture: --data-file {missing}: ")
    assert (bundle / "summary.txt").read_text().startswith("CAPTURE CUT SHORT (probe container exit 2): ")
    assert (bundle / "serving-container.json").is_file()


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


def test_a_key_over_plain_http_is_refused_in_one_line_that_never_quotes_the_key() -> None:
    """VIA=host:port with a key in play would send every request's key over plain HTTP: refused by the bench's plan,
    before any change and before a run directory, naming VIA and what to give instead, and not quoting the key."""
    key = secrets.token_hex(24)
    key_file = STATE / "test-api-key-via"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    runs = sorted(RUNS.iterdir()) if RUNS.is_dir() else []
    try:
        out = _refused(host_state(), "bench", "WORKLOAD=smoke", "VIA=127.0.0.1:9",
                       f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}")  # fmt: skip
    finally:
        key_file.unlink()
    assert "bench_via=127.0.0.1:9: this deploy has an API key, which would go to 127.0.0.1:9 over plain HTTP" in out
    assert "use VIA=front" in out and key not in out and "Traceback" not in out
    assert (sorted(RUNS.iterdir()) if RUNS.is_dir() else []) == runs


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
    """A replacing deploy killed with SIGKILL (nothing runs after it: no `always:`, no cleanup of the wrapper) while
    its new engine starts, beside a container of its run (what a GPU smoke test or a bench would leave): the next
    deploy takes the lock over, removes both, puts the container it had set aside back, and the host is as before."""
    lock = STATE / "lock"
    before = docker("inspect", "-f", "{{.Id}}", CONTAINER).strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    argv = ["make", "--no-print-directory", "-C", str(REPO), "deploy", "ANSIBLE_ARGS=-e serve_force_replace=true"]
    dying = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while not (inspect(f"{CONTAINER}-previous") and (inspect(CONTAINER) or {}).get("Id", before) != before):
            assert dying.poll() is None and time.monotonic() < deadline, "the deploy never started its new container"
            time.sleep(0.2)
        dead = json.loads((lock / "holder.json").read_text())
        image = str((inspect(CONTAINER) or {})["Config"]["Image"])
        docker("run", "-d", "--name", f"{CONTAINER}-deadrun", "--label", f"{hostlock.RUN_LABEL}={dead['run_id']}",
               "--pids-limit", "16", "--entrypoint", "sleep", image, "600")  # fmt: skip
    finally:
        os.killpg(dying.pid, signal.SIGKILL)
        dying.wait(timeout=30)
    deadline = time.monotonic() + 30  # SIGKILL is delivered to each process of the group in its own time
    while hostlock.run_alive(int(dead["pid"]), str(dead["pid_start"])):
        assert time.monotonic() < deadline, f"the killed deploy's pid {dead['pid']} still runs"
        time.sleep(0.1)
    left = docker("ps", "-a", "--format", "{{.Names}} {{.Status}}").splitlines()
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    said = " ".join(r.output.split())
    # For the note (pytest -rP): what the dead run left, what the next deploy said, and the host after.
    print("left:", left, "\nsaid:", re.findall(r"\[WARNING\]: took .*", r.output), f"\nin {r.seconds:.0f} s")
    print("after:", docker("ps", "-a", "--format", "{{.Names}} {{.Status}}").splitlines())
    assert (
        f"taken over from a run of this controller that is gone: pid {dead['pid']}); removed what run "
        f"{dead['run_id']} left: {CONTAINER}-deadrun, {CONTAINER}; put back {CONTAINER}, which it had set aside"
    ) in said, said[-3000:]
    # A clean host: the container it had set aside serves again, and nothing of the dead run is left.
    assert docker("inspect", "-f", "{{.Id}}", CONTAINER).strip() == before
    assert inspect(f"{CONTAINER}-previous") is None and inspect(f"{CONTAINER}-deadrun") is None
    assert docker("ps", "-aq", "--filter", f"label={hostlock.RUN_LABEL}={dead['run_id']}").split() == []
    assert complete("Hello", 4)["choices"]
    assert not lock.exists()
    try:
        lock.mkdir(mode=0o700)
        (lock / "holder.json").write_text(json.dumps({**dead, "machine_id": "another", "controller": "elsewhere"}))
        out = _refused(host_state(), "deploy")
        assert f"held by make deploy (run {dead['run_id'][:24]}) from elsewhere" in out and f"rm -r {lock}" in out
    finally:
        subprocess.run(["rm", "-rf", str(lock)], check=True)
