"""What a deploy must change on the host (serving/plan/converge.py serve_due): nothing on a host the plan's read
found as serve leaves it, and on a host that differs in any one thing serve would change, a line naming it.

The host is the cpu-tiny plan's, in the shape library/refdeploy_host_readings.py gives it (its host_state; the
containers cut as it cuts them, with the planned limits in HostConfig as Docker reports them): built from the plan
here, since it is what a deploy leaves; each case changes one thing a real host could show."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from serving.host.cgroup_limits import planned_docker
from serving.plan.converge import serve_due
from serving.plan.plan import TARGET_ID_LABEL
from serving.plan.render import API_GROUP, API_SOCKET_DIR
from tests.unit.plan.test_plan import _cpu

RENDERED = "/var/lib/refdeploy/rendered/refdeploy-vllm.json"
SIDE_DIR = "/var/lib/refdeploy/samplers/refdeploy-vllm"
FRONT_AUTH = "/var/lib/refdeploy/secrets/refdeploy-vllm-front.auth-header"
SHA = "ab" * 32


def _converged() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(plan, host, serve settings) of a host as a deploy of cpu-tiny left it."""
    plan = _cpu().model_dump(mode="json")
    spec, side, api = plan["launch"]["spec"], plan["sidecar_spec"], plan["api"]
    serving = {
        "Id": "c0ffee",
        "Name": f"/{spec['name']}",
        "RestartCount": 0,
        "State": {"Status": "running", "Running": True},
        "Config": {"Image": spec["image"], "Labels": spec["labels"]},
        "HostConfig": planned_docker(spec),
        "Limits": None,
        "LaunchAffinity": None,
    }
    sidecar = {
        "Id": "5ide",
        "Name": f"/{side['name']}",
        "State": {"Status": "running", "Running": True},
        "Config": {"Image": side["image"], "Labels": {**side["labels"], TARGET_ID_LABEL: "c0ffee"}},
    }
    key_dir = api["key_copy"].rsplit("/", 1)[0]
    host = {
        "containers": [serving, sidecar],
        "paths": {
            api["key_copy"]: "missing",
            api["hf_token_copy"]: "missing",
            side["host_dir"]: "directory",
            f"{key_dir}/refdeploy-vllm-front": "missing",
            f"{key_dir}/refdeploy-vllm-front.auth-header": "missing",
        },
        "files": {RENDERED: {"sha256": SHA, "mode": "0600", "uid": 0, "gid": 0}},
        "dirs": {
            API_SOCKET_DIR: {"mode": "00755", "uid": 0, "gid": 0},
            api["socket_dir"]: {"mode": "02750", "uid": plan["bench"]["runtime_uid"], "gid": api["socket_gid"]},
            plan["compile_cache_dir"]: {"mode": "00750", "uid": plan["bench"]["runtime_uid"], "gid": api["key_gid"]},
        },
        "groups": {API_GROUP: api["socket_gid"]},
        "trees": {plan["launch"]["model"]["host_path"]: []},
    }
    return plan, host, {"launch": True, "force_replace": False, "rendered_path": RENDERED, "rendered_sha256": SHA}


def test_a_host_as_a_deploy_left_it_has_nothing_due() -> None:
    plan, host, serve = _converged()
    assert plan["model_action"] == "generated" and plan["sidecar_spec"] is not None
    assert serve_due(plan, host, serve) == []


def _serving(host: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = host["containers"][0]
    return c


def _set(*keys: str, to: Any) -> Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]:
    """A change of one value: _set("host", "dirs", path, to=None) sets host["dirs"][path]."""

    def change(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
        node: Any = {"plan": plan, "host": host, "serve": serve}[keys[0]]
        for k in keys[1:-1]:
            node = node[k]
        node[keys[-1]] = to

    return change


def _drop_sidecar(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    host["containers"] = host["containers"][:1]


def _sidecar_of_old(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    host["containers"][1]["Config"]["Labels"][TARGET_ID_LABEL] = "0ld"


def _previous(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    host["containers"].append({"Id": "0ld", "Name": "/refdeploy-vllm-previous", "State": {"Status": "exited"}})


def _front(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    host["containers"].append({"Id": "f", "Name": "/refdeploy-vllm-front", "State": {"Status": "running"}})


def _memory(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    _serving(host)["HostConfig"]["Memory"] = int(_serving(host)["HostConfig"]["Memory"]) // 2  # a live docker update


def _stopped(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    _serving(host)["State"] = {"Status": "exited", "Running": False}


def _other_spec(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    _serving(host)["Config"]["Labels"] = {**_serving(host)["Config"]["Labels"], "org.refdeploy.spec-sha256": "0" * 64}


def _no_engine(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    host["containers"] = []  # Docker Engine did not answer, or nothing runs


def _key(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    plan["api"]["key_file"] = "/etc/refdeploy/api-key"


def _no_key_left(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    host["paths"][plan["api"]["key_copy"]] = "file"  # a copy an earlier keyed deploy left


def _dir(which: str, **changed: Any) -> Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]:
    def change(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
        key = {"parent": API_SOCKET_DIR, "socket": plan["api"]["socket_dir"], "cache": plan["compile_cache_dir"]}[which]
        host["dirs"][key] = None if changed.get("gone") else {**host["dirs"][key], **changed}

    return change


def _tree(plan: dict[str, Any], host: dict[str, Any], serve: dict[str, Any]) -> None:
    model = plan["launch"]["model"]["host_path"]
    host["trees"][model] = [f"{model}/config.json"]  # left 0600 by the generator's user


CASES = [
    ("rendered only", _set("serve", "launch", to=False), "serve_launch is false"),
    ("model to generate", _set("plan", "model_action", to="generate"), "is generate"),
    ("model absent", _set("plan", "model_action", to="absent"), "is absent"),
    ("model tree not root's", _tree, "is not all root's and read-only"),
    ("serving container stopped", _stopped, "refdeploy-vllm: it is exited"),
    ("another spec runs", _other_spec, "it was started from another spec"),
    ("nothing runs", _no_engine, "no container runs under this name"),
    ("a container set aside", _previous, "refdeploy-vllm-previous exists"),
    ("forced replacement", _set("serve", "force_replace", to=True), "serve_force_replace"),
    ("a limit drifted", _memory, "Memory"),
    ("rendered spec differs", _set("serve", "rendered_sha256", to="cd" * 32), "is not as this deploy writes it"),
    ("a key in the plan", _key, "the API key's copy"),
    ("a key copy left", _no_key_left, "the API key's copy"),
    ("a token in the plan", _set("plan", "api", "hf_token_file", to="/etc/refdeploy/hf-token"), "Hugging Face token"),
    ("the profiler", _set("plan", "profiler", to={"name": "torch"}), "profiler's trace directory"),
    ("the rank trace", _set("plan", "rank_trace_dir", to="/var/lib/refdeploy/rank-trace/x"), "rank trace"),
    ("the socket group missing", _set("host", "groups", API_GROUP, to=None), f"the group {API_GROUP}"),
    ("the socket parent's mode", _dir("parent", mode="00777"), f"{API_SOCKET_DIR} is not root's"),
    ("the socket directory's owner", _dir("socket", uid=0), "socket directory"),
    ("the compile caches' directory missing", _dir("cache", gone=True), "compile caches' directory"),
    ("no sidecar", _drop_sidecar, "refdeploy-vllm-samplers: no container runs"),
    ("a sidecar of an older container", _sidecar_of_old, "watches a serving container that no longer runs"),
    ("the sidecar's directory missing", _set("host", "paths", SIDE_DIR, to="missing"),
     "sidecar's directory"),
    ("a sidecar the plan no longer has", _set("plan", "sidecar_spec", to=None), "runs and the plan has none"),
    ("a front door in the plan", _set("plan", "front_door", to={"name": "x-front"}), "front door is checked"),
    ("a front door left running", _front, "refdeploy-vllm-front runs"),
    ("a front door's files left",
     _set("host", "paths", FRONT_AUTH, to="file"),
     "front door's files are left"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_any_one_thing_serve_would_change_is_due_and_named(
    change: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None], said: str
) -> None:
    plan, host, serve = copy.deepcopy(_converged())
    change(plan, host, serve)
    due = serve_due(plan, host, serve)
    assert due and any(said in line for line in due), due


def test_the_modes_judged_are_the_modes_serve_sets() -> None:
    """converge.py judges the socket's and the compile caches' directories by the modes serve's tasks give them
    (ansible/roles/serve/tasks/converge.yml): one changed without the other would make every deploy run its changes,
    or skip one it needs."""
    import yaml

    from serving.plan import converge
    from tests.helpers.ansible_run import REPO

    tasks = {t["name"]: t for t in yaml.safe_load((REPO / "ansible/roles/serve/tasks/converge.yml").read_text())}
    sockets = tasks["Serve | Provide vLLM's socket directory"]
    assert [int(i["mode"], 8) for i in sockets["loop"]] == [
        int(converge.SOCKET_PARENT_MODE, 8),
        int(converge.SOCKET_DIR_MODE, 8),
    ]
    assert [i["found_as"]["mode"] for i in sockets["loop"]] == [converge.SOCKET_PARENT_MODE, converge.SOCKET_DIR_MODE]
    cache = tasks["Serve | Provide the compile caches' directory"]["ansible.builtin.file"]
    assert int(cache["mode"], 8) == int(converge.CACHE_DIR_MODE, 8)
    assert f"'mode': '{converge.CACHE_DIR_MODE}'" in tasks["Serve | Provide the compile caches' directory"]["when"]
