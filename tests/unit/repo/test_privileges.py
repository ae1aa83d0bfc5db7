"""Every container the product starts, with its capabilities, and every directory its roles create, with its mode.

Each container comes from the builder that makes its `docker run` argv or docker_container spec; a new `docker run`
or started docker_container anywhere in serving/ or the roles that is not listed here fails the census, so the list
cannot fall behind the code. Every container drops ALL capabilities and cannot gain privileges, and adds back only
what ALLOWED says why; no directory a role creates has the world-write bit. Run with -s to see the listing."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serving.bench import protocol
from serving.bench.placement import Placement
from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.evidence.probe_plan import IoThresholds, render_capture_argv, render_probe_io_argv
from serving.plan import frontdoor, gpu_smoke, wheelhouse
from serving.plan.plan import plan_from_profile
from serving.plan.render import (
    API_GID,
    PROBE_GID,
    PROBE_UID,
    PROBE_USER,
    RUNTIME_GID,
    RUNTIME_UID,
    render_container_spec,
    render_sidecar_spec,
)
from tests.helpers.gpu_hosts import gpu_serving_plan
from tests.helpers.role_tasks import ROLES, role_tasks

REPO = Path(__file__).resolve().parents[3]
SERVED = "17825792\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n"

# Capabilities a container adds back after dropping ALL, and why. Nothing else may be added.
ALLOWED: dict[str, dict[str, str]] = {
    # numactl --membind is set_mempolicy(2): Docker's seccomp profile allows it only to a container granted SYS_NICE
    # (serving/plan/gpu_plan.py); the engine's user holds no capability otherwise.
    "serving (GPU, --numa-bind)": {"SYS_NICE": "numactl's set_mempolicy under Docker's seccomp profile"},
    "GPU smoke test": {"SYS_NICE": "the serving spec's own, so the test runs as the engine will"},
    # py-spy, smaps_rollup and wchan of another process; fincore's honest residency; perf.
    "capture": {
        "SYS_PTRACE": "py-spy, /proc/<pid>/smaps_rollup and wchan of vLLM's processes",
        "FOWNER": "mincore(2) tells the truth only to a file's owner or FOWNER (the page-cache reading)",
        "PERFMON": "perf; SYS_ADMIN only where Docker refuses PERFMON as unknown (choose_perf_capability)",
    },
    "capture's PERFMON check": {"PERFMON": "the check itself: does Docker know PERFMON? (`true`, no network)"},
    # The client starts as root to start its residency reader, which keeps FOWNER, then drops to the runtime user.
    "bench client": {
        "FOWNER": "the residency reader's mincore(2) of files it does not own",
        "SETUID": "the drop from root to the runtime image's user",
        "SETGID": "the drop from root to the runtime image's group",
    },
}
# Containers that keep Docker's default capabilities, and why.
DEFAULT_CAPABILITIES = {
    "wheelhouse download": (
        "an image build's one-off `pip download` of torch in the base image, as root with the network; the image "
        "build's supply chain (issue 31 item 6) owns it, not a container of a deployment"
    ),
}


def _cpu_plan(profile: str = "cpu-tiny") -> dict[str, Any]:
    plan = plan_from_profile(load_profile(profile), "localhost", {"hostname": "localhost", "served_files": SERVED})
    return plan.model_dump(mode="json")


# (cap drop, cap add, security options, pids limit: "" where none)
Caps = tuple[list[str], list[str], list[str], str]


def _argv_caps(argv: list[str]) -> Caps:
    """(--cap-drop, --cap-add, --security-opt, --pids-limit) values of a `docker run` argv, up to its image."""
    got: dict[str, list[str]] = {"--cap-drop": [], "--cap-add": [], "--security-opt": [], "--pids-limit": []}
    for flag, value in itertools.pairwise(argv):
        if flag in got:
            got[flag].append(value)
    for arg in argv:  # --pids-limit=N, one word
        if arg.startswith("--pids-limit="):
            got["--pids-limit"].append(arg.partition("=")[2])
    return got["--cap-drop"], got["--cap-add"], got["--security-opt"], " ".join(got["--pids-limit"])


def _spec_caps(spec: dict[str, Any]) -> Caps:
    caps = list(spec.get("cap_drop") or []), list(spec.get("capabilities") or []), list(spec.get("security_opts") or [])
    return (*caps, str(spec.get("pids_limit") or ""))


def _perfmon_check_argv() -> list[str]:
    text = (ROLES / "capture" / "tasks" / "main.yml").read_text()
    line = re.search(r"docker run --rm --name .*?-perfmon-check\n\s*(.*?)\{\{", text, re.S)
    assert line, "the capture role's PERFMON check is not where this test reads it"
    return line.group(1).split()


def _generator_argv() -> list[str]:
    task = next(t for t in role_tasks() if t.name.startswith("Serve | Run the generator"))
    return [str(a) for a in task.body["ansible.builtin.command"]["argv"]]


def _front_door_runs() -> dict[str, tuple[str, Callable[[], Caps]]]:
    """The serve role's three `docker run`s of the front door's image: the self-signed pair, the fingerprint, the
    check through it."""
    where = "ansible/roles/serve/tasks/frontdoor.yml"
    tasks = [
        t
        for t in role_tasks()
        if t.file == "serve/tasks/frontdoor.yml"
        and (t.module() or ("",))[0] == "ansible.builtin.command"
        and t.body["ansible.builtin.command"]["argv"][:2] == ["docker", "run"]
    ]
    return {
        f"front door: {t.name.removeprefix('Serve | ')}": (
            where,
            lambda t=t: _argv_caps([str(a) for a in t.body["ansible.builtin.command"]["argv"]]),
        )
        for t in tasks
    }


def _containers() -> dict[str, tuple[str, Callable[[], Caps]]]:
    """name -> (where it is built, its (cap drop, cap add, security options))."""
    cpu = _cpu_plan()
    gpu = gpu_serving_plan("rtxpro6000-tp8").model_dump(mode="json")
    cpu_tiny = load_profile("cpu-tiny")
    spec = gpu["launch"]["spec"]
    capture = render_capture_argv(
        "p:1", "refdeploy-vllm", 8000, "/o", 5, ["perf", "hoststate"], ["/d/f"], ["/d"], "h", "PERFMON"
    )
    return {
        "serving (CPU)": ("serving/plan/render.py", lambda: _spec_caps(render_container_spec(cpu_tiny, "i"))),
        "serving (GPU, --numa-bind)": ("serving/plan/gpu_plan.py", lambda: _spec_caps(spec)),
        "samplers sidecar": ("serving/plan/render.py", lambda: _spec_caps(
            render_sidecar_spec(cpu_tiny, "p:1") or {})),
        "GPU smoke test": ("serving/plan/gpu_smoke.py", lambda: _argv_caps(gpu_smoke.smoke_argv(spec))),
        "capture": ("serving/evidence/probe_plan.py", lambda: _argv_caps(capture)),
        "capture's PERFMON check": ("ansible/roles/capture/tasks/main.yml", lambda: _argv_caps(_perfmon_check_argv())),
        "probe-io": ("serving/evidence/probe_plan.py", lambda: _argv_caps(
            render_probe_io_argv("p:1", "/d/f", ["/d"], "/o", 5, [1], {1: IoThresholds()}))),
        "make profile's requests": ("serving/bridge/playbooks.py", lambda: _argv_caps(
            playbooks._requests_container(playbooks.parse_plan(cpu), "x-profile", "/o"))),
        "make validate's requests": ("serving/bridge/playbooks.py", lambda: _argv_caps(
            playbooks.correctness_argv(cpu, {"out": "/o"})["argv"])),
        "bench client": ("serving/bench/protocol.py", lambda: _argv_caps(_bench_client_argv())),
        "bench cgroup reader": ("serving/bench/protocol.py", lambda: _argv_caps(protocol.cgroup_argv("p:1", "c"))),
        "tiny-model generator": ("ansible/roles/serve/tasks/generate.yml", lambda: _argv_caps(_generator_argv())),
        "wheelhouse download": ("serving/plan/wheelhouse.py", lambda: _argv_caps(
            wheelhouse.download_argv("b:1", "torch==1", "https://i", "/ctx"))),
        "front door": ("serving/plan/frontdoor.py", lambda: _spec_caps(
            frontdoor.render_spec(cpu_tiny, "f:1"))),
        **_front_door_runs(),
    }  # fmt: skip


def _bench_client_argv() -> list[str]:
    placement = Placement(client_cpus="1", server_cpus="0", host_cpus="0-1", shares_server_cpus=False, note="")
    return protocol._client_docker_argv("c", placement, "/o", ["/m:/models:ro"], "", "i:1")


def test_every_container_drops_all_capabilities_and_adds_back_only_what_is_allowed() -> None:
    rows = []
    for name, (where, caps) in _containers().items():
        drop, add, opts, _pids = caps()
        rows.append(f"{name:28} {where:42} drop={','.join(drop) or '-':4} add={','.join(add) or '-':26} {opts}")
        if name in DEFAULT_CAPABILITIES:
            assert drop == [], f"{name} drops capabilities now: take it off DEFAULT_CAPABILITIES"
            continue
        assert drop == ["ALL"], f"{name} ({where}) does not drop ALL capabilities"
        assert "no-new-privileges" in opts, f"{name} ({where}) may gain privileges"
        unexplained = set(add) - set(ALLOWED.get(name, {}))
        assert not unexplained, f"{name} adds {sorted(unexplained)} with no reason in ALLOWED"
    print("\ncontainer                    built in                                   capabilities")
    print("\n".join(rows))


def test_every_container_has_a_pids_limit() -> None:
    """A fork bomb, or a leak of threads, in any container stops at its own limit, not at the host's: every container
    the product starts, the one-off ones included, sets one (a positive number; -1 or 0 is none)."""
    rows, missing = [], []
    for name, (where, caps) in _containers().items():
        pids = caps()[3]
        rows.append(f"{name:40} {where:42} pids-limit={pids or '-'}")
        if not (pids.isdigit() and int(pids) > 0):
            missing.append(f"{name} ({where})")
    print("\n".join(rows))
    assert not missing, f"no pids limit: {', '.join(missing)}"


# Where containers are started, and how many: a `docker run` argv in Python, a started docker_container task (its
# parameters from a spec the test above checks) and a `docker run` in a role's command. Each is one row above.
ARGV_BUILDERS = {
    "serving/plan/wheelhouse.py": 1,  # wheelhouse download
    "serving/plan/gpu_smoke.py": 1,  # GPU smoke test
    "serving/bridge/playbooks.py": 1,  # make profile's and make validate's requests (one builder)
    "serving/evidence/probe_plan.py": 2,  # probe-io, capture
    "serving/bench/protocol.py": 2,  # bench client, bench cgroup reader
    # Not a builder: it adds the run's label (refdeploy.run) to the argv the builders above make.
    "ansible/action_plugins/refdeploy_watch.py": 1,
}
STARTED_IN_ROLES = {
    "serve/tasks/replace.yml": ["Serve | Start the serving container"],
    "serve/tasks/sidecar.yml": ["Serve | Start the samplers sidecar beside the serving container"],
    "serve/tasks/frontdoor.yml": ["Serve | Start the front door"],
}
DOCKER_RUN_IN_ROLES = {"capture/tasks/main.yml": 1, "serve/tasks/generate.yml": 1, "serve/tasks/frontdoor.yml": 3}


def test_the_listing_holds_every_place_a_container_is_started() -> None:
    found: dict[str, int] = {}
    for path in [*(REPO / "serving").rglob("*.py"), *(REPO / "ansible").rglob("*.py")]:
        n = len(re.findall(r'"docker",\s*"run"', path.read_text()))
        if n:
            found[str(path.relative_to(REPO))] = n
    assert found == ARGV_BUILDERS
    started: dict[str, list[str]] = {}
    for t in role_tasks():
        mod = t.module()
        if mod and mod[0] == "community.docker.docker_container" and "image" in (mod[1] or {}):
            started.setdefault(t.file, []).append(t.name)
    assert started == STARTED_IN_ROLES
    runs: dict[str, int] = {}
    for path in ROLES.glob("*/tasks/*.yml"):
        text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
        n = len(re.findall(r"docker run |-\s+docker\n\s+-\s+run\n", text))
        if n:
            runs[str(path.relative_to(ROLES))] = n
    assert runs == DOCKER_RUN_IN_ROLES


@pytest.mark.parametrize(
    ("task", "spec"),
    [
        ("Serve | Start the serving container", lambda: gpu_serving_plan("rtxpro6000-tp8").launch.spec),
        ("Serve | Start the samplers sidecar beside the serving container",
         lambda: render_sidecar_spec(load_profile("cpu-tiny"), "p:1")),
        ("Serve | Start the front door", lambda: frontdoor.render_spec(load_profile("cpu-tiny"), "f:1")),
    ],
)  # fmt: skip
def test_the_role_passes_every_setting_of_the_spec_to_docker(task: str, spec: Callable[[], Any]) -> None:
    body = next(t for t in role_tasks() if t.name == task).body["community.docker.docker_container"]
    keys = set(spec()) - {"host_dir", "host_dir_access"}  # the sidecar's log directory on the host, made by the role
    missing = sorted(k for k in keys if k not in body)
    assert not missing, f"{task} does not pass {missing} of its spec"


def test_the_probe_user_is_the_probe_images_own_and_no_one_elses() -> None:
    """The image makes the user the non-root probe containers name, and sets no USER: the capture starts as root, the
    one user Docker 20.10 gives added capabilities to. Its number is neither root's, the engine's nor the API
    group's: as any of them it would read the engine's files or reach its socket."""
    dockerfile = (REPO / "images" / "probes" / "Dockerfile").read_text()
    assert f"groupadd --gid {PROBE_GID} refdeploy-probes" in dockerfile
    assert f"useradd --uid {PROBE_UID} --gid {PROBE_GID} " in dockerfile
    assert not re.search(r"^USER\b", dockerfile, re.M), "the capture needs root: it names no --user"
    assert f"{PROBE_UID}:{PROBE_GID}" == PROBE_USER
    assert PROBE_UID not in (0, RUNTIME_UID, API_GID) and PROBE_GID not in (0, RUNTIME_GID, API_GID)


def test_fio_and_the_samplers_run_as_the_probe_user_with_no_capability() -> None:
    """probe-io's fio, the samplers sidecar and the bench's cgroup reader need no privilege (unprivileged O_DIRECT
    reads; world-readable /proc and cgroup files): not root, and no capability added, where the census above only
    limits what is added."""
    io = render_probe_io_argv("p:1", "/d/f", ["/d"], "/o", 5, [1], {1: IoThresholds()})
    side = render_sidecar_spec(load_profile("cpu-tiny"), "p:1") or {}
    cgroup = protocol.cgroup_argv("p:1", "c")
    assert io[io.index("--user") + 1] == PROBE_USER and _argv_caps(io)[:2] == (["ALL"], [])
    assert cgroup[cgroup.index("--user") + 1] == PROBE_USER and _argv_caps(cgroup)[:2] == (["ALL"], [])
    assert side["user"] == PROBE_USER and _spec_caps(side)[:2] == (["ALL"], [])
    task = next(t for t in role_tasks() if t.name == "Serve | Start the samplers sidecar beside the serving container")
    assert task.body["community.docker.docker_container"]["user"] == "{{ _serve_sidecar_spec.user }}"


def test_the_roles_make_the_probe_users_directories_its_own_and_closed_to_others() -> None:
    """The directories fio and the samplers write on the host are the probe user's (or the container could not
    write them), 0700 and 0750 (the sidecar's logs are read by the bench client, as the runtime's group), and the
    owner the role gives each is the user its container runs as."""
    tasks = {t.name: t.body["ansible.builtin.file"] for t in role_tasks() if "ansible.builtin.file" in t.body}
    # probe-io's: made with `install -d` in one round trip through the connection (refdeploy_shell).
    shells = {t.name: t.body["refdeploy_shell"]["cmd"] for t in role_tasks() if "refdeploy_shell" in t.body}
    io_dir = " ".join(shells[
        "Probe I/O | Remove a fio container a stopped probe left behind, and create the probe output directory"
    ].split())  # fmt: skip
    assert (
        "install -d -o {{ _probe_io_plan.out_owner.owner | string | quote }} "
        "-g {{ _probe_io_plan.out_owner.group | string | quote }} -m 0700 -- "
    ) in io_dir, io_dir
    planned = playbooks.probe_io_argv(_cpu_plan(), {"out": "/o"})
    assert f"{planned['out_owner']['owner']}:{planned['out_owner']['group']}" == PROBE_USER
    assert planned["argv"][planned["argv"].index("--user") + 1] == PROBE_USER
    side_dir = tasks["Serve | Create the sidecar's log directory, the probe user's"]
    assert (side_dir["owner"], side_dir["group"], side_dir["mode"], side_dir["recurse"]) == (
        "{{ _serve_sidecar_spec.host_dir_access.owner }}",
        "{{ _serve_sidecar_spec.host_dir_access.group }}",
        "u=rwX,g=rX,o=",
        True,
    )
    access = (render_sidecar_spec(load_profile("cpu-tiny"), "p:1") or {})["host_dir_access"]
    assert (access["owner"], access["group"]) == (PROBE_UID, RUNTIME_GID)


_WORLD_WRITABLE_SYMBOLIC = re.compile(r"(^|,)[ugo]*[ao][ugo]*[+=][rwxXst]*w|(^|,)[+=][rwxXst]*w")


def _world_writable(mode: str) -> bool:
    """Whether a mode as a role writes it (0755, u=rwX,go=rX) gives others write."""
    if re.fullmatch(r"0?[0-7]{3,4}", mode):
        return bool(int(mode, 8) & 0o002)
    return bool(_WORLD_WRITABLE_SYMBOLIC.search(mode))


def _dir_modes() -> list[tuple[str, str, str]]:
    """(file, task, mode) of every directory a role creates: ansible.builtin.file with state: directory (each
    loop item's mode where the loop gives it), and refdeploy_write_file's dir_mode."""
    out = []
    for t in role_tasks():
        mod = t.module()
        if not mod or not isinstance(mod[1], dict):
            continue
        name, args = mod
        if name == "ansible.builtin.file" and "directory" in str(args.get("state")):
            mode = str(args.get("mode", "(none)"))
            if "item" in mode and isinstance(t.body.get("loop"), list):
                out += [(t.file, t.name, str(i["mode"])) for i in t.body["loop"] if isinstance(i, dict)]
            else:
                out.append((t.file, t.name, mode))
        elif name == "refdeploy_write_file":
            out.append((t.file, t.name, str(args.get("dir_mode", "(none)"))))
    return out


def test_no_directory_a_role_creates_is_world_writable() -> None:
    rows = _dir_modes()
    print("\nrole file                                  mode          task")
    print("\n".join(f"{f:42} {m[:12]:13} {n}" for f, n, m in rows))
    assert len(rows) >= 10, "the walk found too few directories: is it still reading the roles?"
    for f, n, mode in rows:
        # A templated mode is held by every literal mode in it.
        literals = re.findall(r"'(0[0-7]{3}|[ugoa=+,rwxX-]+)'", mode) if "{{" in mode else [mode]
        assert literals, f"{f}: {n}: mode {mode!r} has no literal mode to check"
        assert not any(_world_writable(m) for m in literals), f"{f}: {n}: mode {mode} lets anyone write"


@pytest.mark.parametrize(
    ("mode", "writable"),
    [("0755", False), ("0777", True), ("0770", False), ("1777", True), ("0002", True), ("u=rwX,go=rX", False),
     ("a+w", True), ("o=rwx", True), ("go+w", True), ("u+w", False), ("ug=rwx,o=", False)],
)  # fmt: skip
def test_the_world_write_reading_of_a_mode(mode: str, writable: bool) -> None:
    assert _world_writable(mode) is writable
