"""Helpers for the integration tests: they drive the real `make` targets, Docker and vLLM on this machine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from probes.base import unix_http
from serving.plan.render import SOCKET_URL, api_socket
from tests import schedule

REPO = Path(__file__).resolve().parents[2]
CONTAINER = "refdeploy-vllm"
# vLLM has no address (serving/plan/render.py API_SOCKET_DIR): the tests, root on the host, reach it through its
# unix socket, as `make status` does. BASE_URL is what goes in the Host header.
SOCKET = api_socket(CONTAINER)
BASE_URL = SOCKET_URL


def server_open(req: urllib.request.Request | str, timeout: float = 30) -> Any:
    """urllib's urlopen, to the deployed server's socket."""
    return unix_http.opener(SOCKET).open(req, timeout=timeout)


RUNS = REPO / "runs" / "localhost"
# Where a capture or probe writes on the host while it runs (its scratch copy, fetched and removed after).
PROBE_RUNS = Path("/var/lib/refdeploy/probe-runs")
# The capture's window is open once its samplers write.
WINDOW_OPEN = "*-capture/bundle/samplers/vmstat.log"


@dataclass
class MakeResult:
    rc: int
    output: str
    seconds: float

    @property
    def recap_changed(self) -> int:
        m = re.search(r"^localhost\s+: ok=\d+\s+changed=(\d+)", self.output, re.M)
        assert m, f"no PLAY RECAP in output:\n{self.output[-3000:]}"
        return int(m.group(1))


# What each target may take here before its step counts as hung (seconds, measured under the schedule of
# tests/schedule.py with a neighbour lane loading the other CPU; a call that needs more says so with timeout=).
# The images are built before any integration test, so `make images` here only finds them.
MAKE_LIMIT_S = {
    "deploy": 600, "undeploy": 180, "status": 180, "plan": 180, "preflight": 300, "images": 600, "verify": 300,
    "bench": 900, "capture": 300, "probe": 300, "probe-io": 300, "profile": 900, "validate": 900,
    "compare": 180, "hypothesis": 60,
}  # fmt: skip


def _stop(proc: subprocess.Popen[str]) -> str:
    """End `proc` and everything it started (its own session: make, ansible-playbook, ssh, docker clients)."""
    return schedule.stop_session(proc, ((signal.SIGTERM, 15), (signal.SIGKILL, 15)))


def make(*args: str, timeout: int | None = None, env: dict[str, str] | None = None) -> MakeResult:
    """`make ARGS` in the repository, as an operator runs it; `env` adds to the environment.

    Bounded: past `timeout` (default: MAKE_LIMIT_S for the target) the whole process group is stopped and the
    test fails with the command and its last output. An interrupt of the test (pytest-timeout, Ctrl-C) stops
    it too, so that no make outlives its test."""
    target = next((a for a in args if "=" not in a and not a.startswith("-")), "")
    if target in CHANGES_THE_ENGINE and not any(a.startswith(("HOST=", "INVENTORY=")) for a in args):
        LOCAL_ENGINE_CHANGED.append(target)
    limit = timeout or MAKE_LIMIT_S.get(target, 600)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MAKE")}, **(env or {})}
    env["ANSIBLE_NOCOLOR"] = "1"
    start = time.monotonic()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        tail = _stop(proc)[-4000:]
        pytest.fail(f"`make {' '.join(args)}` still ran after {limit} s (hung?) and was stopped; last output:\n{tail}")
    except BaseException:
        _stop(proc)
        raise
    return MakeResult(proc.returncode, out, time.monotonic() - start)


# The one line of an operation refused because another holds the host (serving/bridge/hostlock.py refusal).
HELD = re.compile(r"is refused, nothing was changed: the host is held by")


def make_when_free(*args: str, wait_s: float = 1200) -> MakeResult:
    """`make ARGS` once the host's lock lets it run: for a module of another lane that needs this machine (the bare
    host's seam builds this machine's images) while the local lane's deploys and benches hold it. Bounded: past
    wait_s of refusals the test fails with the holder's line."""
    deadline = time.monotonic() + wait_s
    while True:
        r = make(*args)
        if r.rc == 0 or not HELD.search(" ".join(r.output.split())):
            return r
        if time.monotonic() > deadline:
            pytest.fail(f"`make {' '.join(args)}` was refused for {wait_s:g} s, the host held: {r.output[-1500:]}")
        time.sleep(2)


def local_build_files() -> dict[str, str]:
    """What this machine's images are built from: inventory/local's images_wheelhouse_dir and images_extra_ca_file.
    Their hashes are in the tags (serving/plan/images.py), so whatever names this machine's images reads the same."""
    data = yaml.safe_load((REPO / "inventory" / "local" / "group_vars" / "all" / "images.yml").read_text())
    return {
        "wheelhouse_dir": str(data.get("images_wheelhouse_dir") or ""),
        "extra_ca_file": str(data.get("images_extra_ca_file") or ""),
    }


def plan_here(profile: str = "cpu-tiny", *args: str) -> dict[str, Any]:
    """`refdeploy plan --profile PROFILE ARGS` on this machine, with this machine's build files."""
    files = local_build_files()
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "refdeploy"), "plan", "--profile", profile,
         "--wheelhouse-dir", files["wheelhouse_dir"], "--extra-ca-file", files["extra_ca_file"], *args],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    plan: dict[str, Any] = json.loads(out.stdout)
    return plan


def images_here() -> dict[str, str]:
    """This machine's images for the default profile (the plan's images: base, runtime, probe tags), built if they
    are not: make test's first phase builds them, so a module of another lane does not take this machine's lock for
    them while the local lane deploys; a module run alone builds them between the local lane's runs."""
    images: dict[str, str] = plan_here()["images"]
    tags = (images["base_tag"], images["runtime_tag"], images["probes_tag"])
    if subprocess.run(["docker", "image", "inspect", *tags], capture_output=True, check=False).returncode != 0:
        built = make_when_free("images")
        assert built.rc == 0, built.output[-3000:]
    return images


def probe_runs() -> set[Path]:
    """The run directories under the host's probe-runs/ now: a test compares the set after its make with the set
    before, so a directory an earlier, interrupted run kept (the product keeps those) is not laid to its charge."""
    return set(PROBE_RUNS.iterdir()) if PROBE_RUNS.is_dir() else set()


class BackgroundMake:
    """`make ARGS` in a thread, so a test can act while it runs (send load, kill vLLM) and then read its result."""

    def __init__(self, *args: str) -> None:
        # What is on the host before this make starts is not its own: an earlier run's kept directory (an
        # interrupted capture keeps its bundle) must not look like this run's window opening.
        self._before = probe_runs()
        self._result: list[MakeResult] = []
        self._thread = threading.Thread(target=lambda: self._result.append(make(*args)), daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _own(self, pattern: str) -> list[Path]:
        return [
            p for p in PROBE_RUNS.glob(pattern) if PROBE_RUNS / p.relative_to(PROBE_RUNS).parts[0] not in self._before
        ]

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 300) -> None:
        """Until `count` files of this make's own run directories (those that were not there before it started)
        match PROBE_RUNS/pattern; fails with the make's output if it ended first."""
        deadline = time.monotonic() + timeout
        while len(self._own(pattern)) < count:
            assert self.running, self._result[0].output[-4000:] if self._result else "make ended without a result"
            assert time.monotonic() < deadline, f"no {count} x {PROBE_RUNS}/{pattern} after {timeout:g} s"
            time.sleep(0.2)

    def result(self, timeout: float = 600) -> MakeResult:
        self._thread.join(timeout)
        assert self._result, f"make still running after {timeout:g} s"
        return self._result[0]


def complete(prompt: str, max_tokens: int, timeout: int = 120) -> dict[str, Any]:
    """One completion from the deployed server, ignore_eos so it is exactly max_tokens long."""
    body = json.dumps({"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True})
    req = urllib.request.Request(
        f"{BASE_URL}/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with server_open(req, timeout=timeout) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def inspect(name: str) -> dict[str, Any] | None:
    out = subprocess.run(["docker", "container", "inspect", name], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)[0] if out.returncode == 0 else None


# The SSH test hosts and the bare host share this machine's engine and run beside the local modules
# (tests/schedule.py): their containers are rdtest-* and the serving stacks named after them
# (refdeploy-vllm-gpu3090, refdeploy-vllm-gpupro and their -samplers, -probe, ...).
TEST_HOST_CONTAINERS = re.compile(r"^(rdtest-|refdeploy-vllm-gpu)")


def host_state(scope: str = "local") -> dict[str, str]:
    """What a failed deploy must leave untouched: the project's containers (with IDs and state) and tagged images.

    `scope` is whose containers: "local" (this machine's deployment: refdeploy-*, not a test host's) or
    "test-hosts" (the SSH test hosts'); each lane of the schedule sees only its own, since the other lane
    starts and removes its containers meanwhile. Images are the project's (refdeploy/*), which both use.
    """
    assert scope in ("local", "test-hosts"), scope
    names = docker("ps", "-a", "--format", "{{.Names}}").split()
    if scope == "test-hosts":
        ours = [n for n in names if TEST_HOST_CONTAINERS.match(n)]
    else:
        ours = [n for n in names if n.startswith("refdeploy-") and not TEST_HOST_CONTAINERS.match(n)]
    containers = (
        docker(
            "inspect", "--format", "{{.Id}} {{.Name}} {{.State.Status}} {{.State.StartedAt}} {{.RestartCount}}", *ours
        )
        if ours
        else ""
    )
    return {
        "containers": containers,
        "images": docker(
            "images", "--no-trunc", "--filter", "reference=refdeploy/*", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"
        ),
    }


def manifest_of(result: MakeResult) -> tuple[Path, dict[str, Any]]:
    """The run directory and manifest that this `make deploy` wrote and printed ("manifest: <path>"), never the
    newest on disk: a deploy that wrote none fails here."""
    m = re.search(r"manifest(?: \(rendered only, nothing started\))?: (\S+/manifest\.json)", result.output)
    assert m, f"the deploy printed no manifest path: {result.output[-3000:]}"
    path = Path(m.group(1))
    return path.parent, json.loads(path.read_text())


def ran_bench(result: MakeResult) -> Path:
    """The bench directory of a `make bench` whose runs all ran, for a test that judges each run's flags itself:
    exit 0 with status ok, or, where every measured run was flagged and left out (a stream two shared cores
    delivered in one burst, a stepped clock), the exit that says it measured nothing valid (issue 46) with status
    invalid. The exit agrees with the summary either way; a bench that failed fails here."""
    d = bench_dir(result)
    s = json.loads((d / "summary.json").read_text())
    if s["status"] == "invalid":
        assert result.rc != 0 and "measured NOTHING VALID" in result.output, result.output[-4000:]
    else:
        assert (result.rc, s["status"]) == (0, "ok"), result.output[-4000:]
    return d


def bench_dir(result: MakeResult) -> Path:
    """The bench directory this `make bench` printed ("report: <dir>/report.txt"; Ansible may fold a long line),
    never the newest on disk: a bench that wrote nothing fails here."""
    m = re.search(r"report: (\S+)/report\.txt", result.output) or re.search(
        r"report:(\S+?)/report\.txt", re.sub(r"\s+", "", result.output)
    )
    assert m and Path(m.group(1)).is_dir(), f"the bench printed no report path: {result.output[-3000:]}"
    return Path(m.group(1))


def bundle_dir(result: MakeResult, host: str = "localhost") -> Path:
    """The capture bundle this `make capture` printed ("bundle: <dir>"), under runs/<host>/, never the newest on
    disk: a capture that wrote none fails here."""
    m = re.search(r"bundle: (\S+?)/?['\"]?$", result.output, re.M)
    assert m, f"no 'bundle:' line in:\n{result.output[-3000:]}"
    path = Path(m.group(1))
    assert path.is_relative_to(REPO / "runs" / host) and path.is_dir(), path
    return path


def probe_io_dir(result: MakeResult, host: str = "localhost") -> Path:
    """The directory this `make probe-io` fetched its results to ("fetched to: <dir>"), under runs/<host>/."""
    found = [line for line in result.output.splitlines() if "fetched to: " in line]
    assert len(found) == 1, f"not one 'fetched to:' line in:\n{result.output[-3000:]}"
    path = Path(found[0].split("fetched to: ", 1)[1].strip().strip("'\""))
    assert path.is_relative_to(REPO / "runs" / host) and path.is_dir(), path
    return path


@pytest.fixture(scope="module")
def deployed() -> None:
    """The default deploy (`make deploy`: cpu-tiny on this machine), once per module that asks for it; a no-op
    where it already runs. A module whose every test needs it says so: pytest.mark.usefixtures("deployed")."""
    r = make("deploy")
    assert r.rc == 0, r.output[-4000:]


# The targets that may leave another profile (or spec) serving on this machine, and this session's runs of them
# (make() notes each): the session ends with the default profile serving where one of them ran (below).
CHANGES_THE_ENGINE = ("deploy", "validate", "profile")
LOCAL_ENGINE_CHANGED: list[str] = []
DEFAULT_PROFILE = "cpu-tiny"  # inventory/local's serving_profile


@pytest.fixture(scope="session", autouse=True)
def default_profile_at_the_end() -> Iterator[None]:
    """The default profile serving when the session ends, where this session deployed another on this machine and
    left it running. Modules do not put the default back themselves (one engine start each): the next module
    deploys what it needs (conftest's `deployed`, or its own profile). Never in a session that deployed nothing
    here: the test hosts' lane must not deploy to the machine beside the local lane."""
    yield
    if not LOCAL_ENGINE_CHANGED:
        return
    c = inspect(CONTAINER)
    if c is None or not c["State"]["Running"]:
        return  # undeployed (test_deploy ends so): the next run starts from what runs, as it always may
    labels = c["Config"]["Labels"]
    if labels.get("org.refdeploy.profile") == DEFAULT_PROFILE and "org.refdeploy.profiler" not in labels:
        return
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]


@pytest.fixture(scope="session", autouse=True)
def docker_engine() -> None:
    proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(
            "the integration tests need a running Docker Engine (`make deploy` installs and starts it on this "
            f"machine), or run `make test-unit` for the fast set: {proc.stderr.strip()}"
        )


# Engine starts are most of make test's time (about 40 s each here), so each integration module declares how many
# vLLM engines it may start, ENGINE_STARTS, and a new one is added knowingly: a module without the declaration
# fails collection, and one that starts more fails at its end. Counted from Docker's own events on this machine's
# engine (a nested dockerd's, the bare host's, are not seen): starts of serving containers (serving/plan/render.py's
# profile label; not their sidecars), a `docker restart` included, of the module's own lane (local or test hosts).
ENGINE_LABEL = "org.refdeploy.profile"
TEST_HOSTS_LANE = schedule.TEST_HOSTS
ENGINE_STARTS_SEEN: dict[str, tuple[int, int]] = {}  # module: (seen, declared), printed at the end


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    undeclared = sorted(
        {
            item.module.__name__
            for item in items
            if isinstance(item, pytest.Function)
            and item.get_closest_marker("integration")
            and not isinstance(getattr(item.module, "ENGINE_STARTS", None), int)
        }
    )
    if undeclared:
        raise pytest.UsageError(
            f"{', '.join(undeclared)}: declare ENGINE_STARTS = <the vLLM engines the module starts, at most> "
            "(tests/integration/conftest.py says why)"
        )


def _engine_events() -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["docker", "events", "--filter", "type=container", "--filter", "event=start",
         "--filter", f"label={ENGINE_LABEL}", "--format", "{{json .}}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def engine_starts(request: pytest.FixtureRequest) -> Any:
    declared = getattr(request.module, "ENGINE_STARTS", None)
    if not isinstance(declared, int):
        yield
        return
    # The lane decides whose starts count (tests/schedule.py): the test hosts' lane counts the test hosts' engines
    # only (the bare host's run inside its own dockerd: none of this engine's), the others this machine's.
    module_path = Path(str(request.module.__file__)).relative_to(REPO).as_posix()
    test_hosts = any(module_path.startswith(p) for p in TEST_HOSTS_LANE)
    events = _engine_events()
    yield
    time.sleep(1)  # Docker delivers events asynchronously: the last start's may still be on its way
    events.terminate()
    out, _ = events.communicate(timeout=30)
    names = [json.loads(line)["Actor"]["Attributes"].get("name", "") for line in out.splitlines() if line.strip()]
    seen = [n for n in names if bool(TEST_HOST_CONTAINERS.match(n)) == test_hosts]
    ENGINE_STARTS_SEEN[request.module.__name__] = (len(seen), declared)
    if len(seen) > declared:
        pytest.fail(
            f"{request.module.__name__} started {len(seen)} vLLM engines ({', '.join(seen)}) and declares "
            f"ENGINE_STARTS = {declared}: fold the new start into an existing one, or raise the declaration knowingly"
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ENGINE_STARTS_SEEN:
        terminalreporter.write_line("engine starts by module (seen / declared):")
        for module, (seen, declared) in sorted(ENGINE_STARTS_SEEN.items()):
            terminalreporter.write_line(f"  {seen:3d} / {declared:3d}  {module}")
        terminalreporter.write_line(f"  {sum(s for s, _d in ENGINE_STARTS_SEEN.values()):3d} in all")
