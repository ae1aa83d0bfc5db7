"""The GPU smoke test's controller side (serving/plan/gpu_smoke.py): the docker run it makes from the serving
container's spec, and its judgement of what the image side printed on a real H200 (tests/fixtures/recorded-h200,
RECORDED), of what it cannot have printed there (a constructed count or bus mismatch), and of the collectives
as the image's script printed them in the CPU image here (tests/fixtures/smoke-collectives, RECORDED: gloo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.plan import gpu_smoke

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "fixtures" / "gpu-hosts" / "rtx3090-3gpu" / "container-spec.golden.json"
H200 = REPO / "tests" / "fixtures" / "recorded-h200"
COLLECTIVES = REPO / "tests" / "fixtures" / "smoke-collectives"
PLANNED_H200 = [{"index": 0, "name": "NVIDIA H200", "pci_bus_id": "0000:00:06.0"}]


def _recorded(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((H200 / name).read_text())
    return result


def _flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_smoke_run_carries_the_launchs_gpus_runtime_and_options() -> None:
    spec = json.loads(GOLDEN.read_text())
    spec["runtime"] = "nvidia"
    argv = gpu_smoke.smoke_argv(spec)
    assert argv[:6] == ["docker", "run", "--rm", "--name", "refdeploy-vllm-gpu-smoke", "--network"]
    assert _flag_values(argv, "--gpus") == ['"device=0,1,2"']  # the plan's devices, in rank order
    assert _flag_values(argv, "--runtime") == ["nvidia"]
    assert _flag_values(argv, "--cgroup-parent") == ["refdeploy.slice"]
    assert (_flag_values(argv, "--cpuset-cpus"), _flag_values(argv, "--cpuset-mems")) == (["0-27"], ["0"])
    assert (_flag_values(argv, "--memory"), _flag_values(argv, "--shm-size")) == (["110g"], ["16g"])
    assert _flag_values(argv, "--ulimit") == ["memlock=-1:-1", "nofile=65536:65536"]
    # The launch's environment, the allocator setting among it: torch reads it at CUDA's first call.
    assert _flag_values(argv, "--env") == [f"{k}={v}" for k, v in sorted(spec["env"].items())]
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,pinned_max_round_threshold_mb:4096" in argv
    assert argv[-4:] == ["--entrypoint", "python3", spec["image"], gpu_smoke.SMOKE_IN_IMAGE]
    # No port, no model, no network, no restart: it touches nothing the serving container has.
    assert not {"--publish", "-p", "--volume", "-v", "--restart"} & set(argv)


def test_a_secret_in_the_environment_never_reaches_the_argv() -> None:
    spec = json.loads(GOLDEN.read_text())
    spec["env"] = {**spec["env"], "VLLM_API_KEY": "s3cret", "HF_TOKEN": "hf_x", "http_proxy_password": "p"}
    argv = gpu_smoke.smoke_argv(spec)
    assert not [a for a in argv if "s3cret" in a or "hf_x" in a or a.endswith("=p")]


def test_a_spec_with_no_gpu_is_an_error() -> None:
    spec = json.loads(GOLDEN.read_text())
    spec["device_requests"] = []
    with pytest.raises(gpu_smoke.GpuSmokeError, match="requests no NVIDIA GPUs"):
        gpu_smoke.smoke_argv(spec)


def test_the_recorded_h200_passes_as_planned() -> None:
    assert gpu_smoke.judge(_recorded("gpu-smoke.json"), "h200", PLANNED_H200, "H200", 0.92) == []


@pytest.mark.parametrize(
    ("recorded", "line"),
    [
        (
            "gpu-smoke-no-device.json",
            "GPU smoke test on h200 failed: CUDA did not initialise: No CUDA GPUs are available",
        ),
        (
            "gpu-smoke-alloc-conf.json",
            "GPU smoke test on h200 failed: CUDA did not initialise: Unrecognized key 'pinned_max_round_threshold_mb' "
            "in CUDA allocator config.",
        ),
    ],
)
def test_a_recorded_failure_is_refused_in_the_tools_own_words(recorded: str, line: str) -> None:
    assert gpu_smoke.judge(_recorded(recorded), "h200", PLANNED_H200, "H200", 0.92) == [line]


def test_memory_another_process_holds_is_named_with_the_figures() -> None:
    # The recorded H200 had 139.3 GiB free of 139.8 GiB (99.6%): a profile asking for 99.9% cannot start.
    assert gpu_smoke.judge(_recorded("gpu-smoke.json"), "h200", PLANNED_H200, "H200", 0.999) == [
        "GPU 0 on h200: 139.3 GiB free of 139.8 GiB, less than the 139.7 GiB the profile's gpu_memory_utilization "
        "0.999 asks for: another process holds it (nvidia-smi)"
    ]


def test_a_different_gpu_count_model_or_address_is_refused() -> None:
    result = _recorded("gpu-smoke.json")
    two = [*PLANNED_H200, {"index": 1, "name": "NVIDIA H200", "pci_bus_id": "0000:00:07.0"}]
    assert gpu_smoke.judge(result, "h", two, "H200", 0.9) == [
        "GPU smoke test on h: the container saw 1 GPU(s), the plan gives it 2: check the container toolkit "
        "(nvidia-ctk) and the device request"
    ]
    assert gpu_smoke.judge(result, "h", PLANNED_H200, "RTX 3090", 0.9) == [
        "GPU 0 on h: CUDA sees NVIDIA H200, expected RTX 3090"
    ]
    moved = [{**PLANNED_H200[0], "pci_bus_id": "0000:41:00.0"}]
    assert gpu_smoke.judge(result, "h", moved, "H200", 0.9) == [
        "GPU 0 on h: CUDA's device 0 is at 00000000:00:06.0, planned at 0000:41:00.0"
    ]


def test_docker_saying_something_else_is_quoted() -> None:
    # Docker's reply when no runtime can serve the GPU request (no NVIDIA container toolkit).
    out = 'docker: Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]].'
    with pytest.raises(gpu_smoke.GpuSmokeError, match=r"printed no result: docker: Error response .*\[\[gpu\]\]\."):
        gpu_smoke.parse(out)
    assert gpu_smoke.parse((H200 / "gpu-smoke.json").read_text())["devices"][0]["name"] == "NVIDIA H200"


def _smoke(**change: Any) -> gpu_smoke.GpuSmoke:
    base = gpu_smoke.GpuSmoke(
        argv=["docker", "run"], container="c-gpu-smoke", gpus=[gpu_smoke.PlannedGpu(**g) for g in PLANNED_H200],
        model_substring="H200", gpu_memory_utilization=0.999,
    )  # fmt: skip
    return base.model_copy(update=change)


def test_a_host_without_the_container_toolkit_gets_the_toolkit_line() -> None:
    # RECORDED on this project's machine (Docker Engine 20.10.24, no NVIDIA runtime): `docker run --gpus
    # '"device=0,1,2"' ...` exits 125 with this on stderr.
    stderr = (
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].\n\n'
        "Run 'docker run --help' for more information\n"
    )
    (line,) = gpu_smoke.outcome("", stderr, 125, _smoke(), "gpu3090-a", held_by_serving=False)
    assert line.startswith("Docker Engine on gpu3090-a cannot give a container the GPUs: the NVIDIA container toolkit")
    assert 'docker said: could not select device driver "" with capabilities: [[gpu]].' in line
    assert line.endswith("`nvidia-ctk runtime configure --runtime=docker`, then deploy again")


def test_a_smoke_run_past_its_bound_and_one_that_printed_nothing_are_named() -> None:
    (late,) = gpu_smoke.outcome("", "", 124, _smoke(), "h", held_by_serving=False)
    assert late.startswith("GPU smoke test on h did not finish within 300 s")
    (odd,) = gpu_smoke.outcome("", "exec format error", 1, _smoke(), "h", held_by_serving=False)
    assert odd == "GPU smoke test on h failed (exit 1): exec format error"


def test_free_memory_is_judged_only_when_no_serving_container_holds_the_gpus() -> None:
    out = (H200 / "gpu-smoke.json").read_text()
    assert gpu_smoke.outcome(out, "", 0, _smoke(), "h", held_by_serving=False)[0].startswith("GPU 0 on h: 139.3 GiB")
    assert gpu_smoke.outcome(out, "", 0, _smoke(), "h", held_by_serving=True) == []


def test_the_playbooks_filter_reads_a_command_tasks_result() -> None:
    from serving.bridge import playbooks
    from tests.helpers.gpu_hosts import gpu_serving_plan as _gpu

    plan = _gpu("rtx3090-pp3").model_dump(mode="json")
    run = {"rc": 1, "stdout": (H200 / "gpu-smoke-no-device.json").read_text(), "stderr": ""}
    assert playbooks.gpu_smoke(run, plan, "h", False) == {
        "problems": ["GPU smoke test on h failed: CUDA did not initialise: No CUDA GPUs are available"],
        "measured": "",
    }
    # Docker could not start it at all (no NVIDIA runtime: Docker 20.10's words, as this machine's engine says them):
    # nothing measured, and "" is what the role's `length` test reads (None failed the deploy's task in CI).
    refused = {"rc": 125, "stdout": "", "stderr": 'docker: Error response from daemon: could not select device '
               'driver "" with capabilities: [[gpu]].'}  # fmt: skip
    judged_refused = playbooks.gpu_smoke(refused, plan, "h", False)
    assert judged_refused["measured"] == "" and "the NVIDIA container toolkit" in judged_refused["problems"][0]
    # The PP=3 plan has collectives: the per-GPU phase alone (the fixture) is not a pass, with them it is.
    recorded = (REPO / "tests" / "fixtures" / "gpu-hosts" / "rtx3090-3gpu" / "gpu-smoke.json").read_text()
    assert playbooks.gpu_smoke({"rc": 0, "stdout": recorded}, plan, "h", False) == {
        "problems": ["GPU smoke test on h: the image ran no collectives: is it older than the plan's smoke test?"],
        "measured": "",
    }
    passed = (COLLECTIVES / "gloo-pp3.json").read_text()
    judged = playbooks.gpu_smoke({"rc": 0, "stdout": passed}, plan, "h", False)
    assert judged["problems"] == []
    assert judged["measured"].startswith("collectives (gloo, TP=1 x PP=3): send 0->1 0."), judged
    assert "all 3 ranks in " in judged["measured"] and judged["measured"].endswith("of a 120.0 s bound")


def _pp3(backend: str = "nccl") -> gpu_smoke.GpuSmoke:
    planned = [gpu_smoke.PlannedGpu(index=i, name="NVIDIA GeForce RTX 3090", pci_bus_id=b)
               for i, b in enumerate(("0000:01:00.0", "0000:21:00.0", "0000:4b:00.0"))]  # fmt: skip
    return gpu_smoke.GpuSmoke(
        argv=["docker"], container="c", gpus=planned, model_substring="RTX 3090", gpu_memory_utilization=0.92,
        collectives=gpu_smoke.Collectives(tp=1, pp=3, backend=backend),
    )  # fmt: skip


def test_collectives_that_passed_pass_and_their_seconds_are_the_images() -> None:
    out = (COLLECTIVES / "gloo-pp3.json").read_text()
    assert gpu_smoke.outcome(out, "", 0, _pp3("gloo"), "h", held_by_serving=False) == []
    ran = json.loads(out)["collectives"]
    assert [(op["from"], op["to"], op["exact"]) for op in ran["send_recv"]] == [(0, 1, True), (1, 2, True)]
    assert all(0 < op["s"] < ran["bound_s"] for op in ran["send_recv"])


@pytest.mark.parametrize(
    ("recording", "words"),
    [
        # gloo's own words for a peer that never came, from the ranks that waited for it.
        ("gloo-pp3-absent-rank-1.json", "rank 1 was never started (an induced fault: --absent-rank); rank(s) 0, 2: "),
        ("gloo-pp3-bound-1s.json", "not finished within the bound of 1 s: rank(s) 0, 1, 2 killed"),
    ],
)
def test_failed_collectives_stop_the_deploy_with_one_line_in_the_backends_words(recording: str, words: str) -> None:
    out = (COLLECTIVES / recording).read_text()
    (line,) = gpu_smoke.outcome(out, "", 1, _pp3("gloo"), "h", held_by_serving=False)
    assert line.startswith(f"GPU smoke test on h: the collectives of TP=1 x PP=3 (gloo) failed: {words}"), line
    error = json.loads(out)["collectives"]["error"]
    assert line.endswith(error)  # gloo's words as printed, no hint meant for NCCL
    # With NCCL the line says where to look.
    (nccl,) = gpu_smoke.outcome(out, "", 1, _pp3("nccl"), "h", held_by_serving=False)
    assert nccl.endswith("NCCL_P2P_DISABLE; /dev/shm, the container's shm_size)")


def test_the_collectives_argv_is_the_plans_ranks_and_bound() -> None:
    c = gpu_smoke.Collectives(tp=8, pp=1)
    assert c.args() == ["--tp", "8", "--pp", "1", "--backend", "nccl", "--bound-s", "120"]
    assert gpu_smoke.Collectives(tp=1, pp=3, absent_rank=2, bound_s=0.5).args()[-4:] == [
        "--bound-s", "0.5", "--absent-rank", "2"
    ]  # fmt: skip
    assert gpu_smoke.COLLECTIVES_BOUND_S < gpu_smoke.TIMEOUT_S
