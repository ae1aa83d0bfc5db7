"""make status's lines on restarts and the samplers sidecar (serving/plan/status.py), from the plan's read of the
host in the shape refdeploy_host_readings keeps of `docker container inspect` (Id, Name, RestartCount, State,
Config.Image and Config.Labels). The sidecar's error is the one Docker Engine 20.10 recorded on this machine
when its restart policy restarted the sidecar of a vLLM killed with SIGKILL (2026-12-05)."""

from __future__ import annotations

from typing import Any

from serving.plan.plan import TARGET_ID_LABEL
from serving.plan.status import status_lines

PLAN = {"profile": {"container": {"name": "refdeploy-vllm"}}, "sidecar_spec": {"name": "refdeploy-vllm-samplers"}}
SERVING_ID = "a" * 64
RUNC = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container "
    "process: can't get final child's PID from pipe: EOF: unknown"
)


def _serving(restarts: int = 0) -> dict[str, Any]:
    return {"Id": SERVING_ID, "Name": "/refdeploy-vllm", "RestartCount": restarts,
            "State": {"Status": "running", "StartedAt": "2026-12-05T14:53:57.677221001Z"}}  # fmt: skip


def _sidecar(status: str = "running", watches: str = SERVING_ID, **state: Any) -> dict[str, Any]:
    return {"Id": "b" * 64, "Name": "/refdeploy-vllm-samplers", "RestartCount": 0,
            "State": {"Status": status, **state}, "Config": {"Labels": {TARGET_ID_LABEL: watches}}}  # fmt: skip


def test_a_healthy_stack_says_the_sidecar_runs_and_nothing_of_restarts() -> None:
    assert status_lines({"containers": [_serving(), _sidecar()]}, PLAN) == [
        "samplers sidecar refdeploy-vllm-samplers: running"
    ]


def test_a_restarted_engine_whose_sidecar_did_not_come_back() -> None:
    sidecar = _sidecar("exited", ExitCode=137, FinishedAt="2026-12-05T14:53:56.859778094Z", Error=RUNC)
    restarts, side = status_lines({"containers": [_serving(2), sidecar]}, PLAN)
    assert restarts.startswith("restarts: 2 by Docker's restart policy, the last at 2026-12-05T14:53:57.677221001Z")
    assert side.startswith(
        "samplers sidecar refdeploy-vllm-samplers: exited (exit 137) since 2026-12-05T14:53:56.859778094Z, "
        "nothing sampled since (failed to create shim task"
    )
    assert side.endswith("(make deploy starts it again)")


def test_a_sidecar_beside_a_replaced_container_and_an_absent_one() -> None:
    (line,) = status_lines({"containers": [_serving(), _sidecar(watches="c" * 64)]}, PLAN)
    assert line == (
        "samplers sidecar refdeploy-vllm-samplers: running, but beside a serving container that no longer runs "
        "(cccccccccccc; make deploy recreates it)"
    )
    (line,) = status_lines({"containers": [_serving()]}, PLAN)
    assert line == "samplers sidecar refdeploy-vllm-samplers: absent, nothing is sampled (make deploy starts it)"


def test_a_profile_without_a_sidecar_and_a_host_not_read_say_nothing_of_it() -> None:
    assert status_lines({"containers": [_serving()]}, {**PLAN, "sidecar_spec": None}) == []
    assert status_lines(None, {**PLAN, "sidecar_spec": None}) == []


def test_a_front_door_is_named_with_its_state() -> None:
    plan = {**PLAN, "sidecar_spec": None,
            "front_door": {"name": "refdeploy-vllm-front", "url": "https://127.0.0.1:8443"}}  # fmt: skip
    door = {"Id": "d" * 64, "Name": "/refdeploy-vllm-front", "State": {"Status": "running"}}
    assert status_lines({"containers": [_serving(), door]}, plan) == [
        "front door refdeploy-vllm-front: running, https://127.0.0.1:8443 (TLS, the API key on every route)"
    ]
    (line,) = status_lines({"containers": [_serving()]}, plan)
    assert line.startswith("front door refdeploy-vllm-front: absent, https://127.0.0.1:8443")
    assert line.endswith("clients beyond loopback cannot reach the API (make deploy starts it)")
