"""The run's plan (serving/plan/plan.py): one object per run that every playbook consumes, and the one decision of
whether a running container is the planned one. GPU hosts are planned from the recorded/constructed readings
of tests/fixtures/gpu-hosts, as the SSH test hosts replay them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from serving.bridge import playbooks
from serving.config.profile import load_profile, parse_profile
from serving.plan import servability
from serving.plan.describe import describe
from serving.plan.plan import Plan, PlanError, parse_plan, plan_from_profile, running_state
from serving.plan.render import RUNTIME_GID, SPEC_LABEL, render_vllm_argv
from serving.plan.standin import StandInError
from tests.helpers.gpu_hosts import class_data as _class
from tests.helpers.gpu_hosts import gpu_serving_plan as _gpu
from tests.helpers.gpu_hosts import host_readings as _readings
from tests.helpers.image_scripts import image_script

SERVED = (
    "90\t/var/lib/refdeploy/models/tiny-llama/.refdeploy-tinymodel\n"
    "400\t/var/lib/refdeploy/models/tiny-llama/SHA256SUMS\n"
    "4096\t/var/lib/refdeploy/models/tiny-llama/config.json\n"
    "17825792\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n"
)


def _cpu(profile: str = "cpu-tiny", served: str = SERVED) -> Plan:
    return plan_from_profile(load_profile(profile), "localhost", {"hostname": "localhost", "served_files": served})


STAND_IN = {
    "cpus": "0-1",
    "mems": "0",
    "ulimits_max": {"nofile": 20000, "memlock": 8388608},
    "nvidia_smi": {
        "replayer": "/repo/tests/replay/nvidia-smi",
        "recordings": {"gpu3090-a": "/repo/fx/3090", "gpupro-a": "/repo/fx/pro"},
    },
}


def _container(spec: dict[str, Any], status: str = "running") -> dict[str, Any]:
    """`docker container inspect` of a container started from `spec`."""
    return {"Id": "c0ffee", "State": {"Status": status}, "Config": {"Image": spec["image"], "Labels": spec["labels"]}}


# --- one plan ----------------------------------------------------------------------------------------------------


def test_a_cpu_plan_launches_its_container_and_targets_the_largest_served_file() -> None:
    plan = _cpu()
    assert plan.ok and plan.launch is not None and plan.bench is not None
    assert plan.launch.spec == plan.container_spec
    assert plan.launch.spec["labels"][SPEC_LABEL] == plan.spec_digest == plan.launch.spec_digest
    assert plan.argv == render_vllm_argv(plan.profile) == plan.launch.spec["command"]
    assert plan.launch.images == plan.images and plan.launch.stand_in is None
    assert plan.probes.data_file == "/var/lib/refdeploy/models/tiny-llama/model.safetensors"
    assert plan.probes.data_file_bytes == 17825792 and plan.probes.gpu_access is None
    assert plan.bench.tokenizer == "/models/tiny-llama" and plan.base_url == "http://localhost"
    # The client mounts the model, not the engine's compile caches, which the serve role provides.
    # The model (the tokenizer) and vLLM's socket: the client mounts the server's volumes but its compile caches.
    assert plan.bench.volumes == [
        "/var/lib/refdeploy/models/tiny-llama:/models/tiny-llama:ro",
        "/var/lib/refdeploy/api/refdeploy-vllm:/run/refdeploy/api:ro",
    ]
    assert (
        plan.compile_cache_dir
        == "/var/lib/refdeploy/cache/refdeploy-vllm/cpu-tiny/"
        + plan.images.runtime_tag.replace("refdeploy/vllm:", "vllm_")
    )
    # VLLM_CPU_OMP_THREADS_BIND=auto: vLLM picks the CPUs, inside the container's cpuset.
    assert [(r.rank, r.cpus) for r in plan.launch.ranks] == [(0, None)]


def test_the_plan_reads_back_from_its_json_form_unchanged() -> None:
    for plan in (_cpu(), _gpu("rtx3090-pp3"), _gpu("rtx3090-pp3", STAND_IN)):
        data = plan.model_dump(mode="json")
        assert parse_plan(json.loads(json.dumps(data))).model_dump(mode="json") == data
    with pytest.raises(PlanError, match="not a refdeploy plan"):
        parse_plan({"schema_version": 1})


def test_a_model_not_staged_yet_leaves_the_probes_without_a_file_and_says_why() -> None:
    plan = _cpu(served="")
    assert plan.ok and plan.probes.data_file is None
    assert (
        plan.probes.data_file_note
        == "no file under /var/lib/refdeploy/models/tiny-llama on the host (is the model staged?)"
    )
    error = playbooks.probe_io_argv(plan.model_dump(mode="json"), {"out": "/o"})["error"]
    assert error.startswith("nothing to read on localhost: no file under /var/lib/refdeploy/models/tiny-llama")
    argv = playbooks.capture_argv(plan.model_dump(mode="json"), {"out": "/o", "seconds": 5})["argv"]
    assert "--data-file" not in argv
    assert argv[argv.index("--data-file-note") + 1] == plan.probes.data_file_note


def test_the_tp2_profile_binds_each_rank_to_its_cpu() -> None:
    plan = _cpu("cpu-tiny-tp2")
    assert plan.ok and plan.launch is not None
    assert [(r.rank, r.cpus, r.mems) for r in plan.launch.ranks] == [(0, "0", None), (1, "1", None)]
    assert "--tensor-parallel-size" in plan.launch.spec["command"]


def test_the_pp2_profiles_run_two_stages_with_the_rank_trace_and_differ_only_in_the_deferred_receive() -> None:
    a, b = _cpu("cpu-tiny-pp2"), _cpu("cpu-tiny-pp2-deferred")
    assert a.ok and b.ok and a.launch is not None and b.launch is not None
    assert [(r.rank, r.cpus) for r in a.launch.ranks] == [(0, "0"), (1, "1")]
    cmd = a.launch.spec["command"]
    assert cmd[cmd.index("--pipeline-parallel-size") + 1] == "2" and "--tensor-parallel-size" not in cmd
    env = a.launch.spec["env"]
    assert (env["REFDEPLOY_RANK_TRACE_DIR"], env["REFDEPLOY_RANK_TRACE_MAX_BYTES"]) == (
        "/run/refdeploy/rank-trace", str(4 * 1024 * 1024),
    )  # fmt: skip
    assert "/var/lib/refdeploy/rank-trace/refdeploy-vllm:/run/refdeploy/rank-trace" in a.launch.spec["volumes"]
    assert a.rank_trace_dir == "/var/lib/refdeploy/rank-trace/refdeploy-vllm"
    assert "REFDEPLOY_PP_DEFER_RECV" not in env and b.launch.spec["env"]["REFDEPLOY_PP_DEFER_RECV"] == "1"
    assert {k: v for k, v in b.launch.spec["env"].items() if k != "REFDEPLOY_PP_DEFER_RECV"} == env
    assert b.launch.spec["command"] == cmd

    def volumes(p: Plan) -> list[str]:  # the compile cache is each profile's own
        assert p.launch is not None
        return [v.replace(p.profile.name, "<profile>") for v in p.launch.spec["volumes"]]

    assert volumes(a) == volumes(b)
    # Off by default: no variable, no mount, no directory.
    plain = _cpu("cpu-tiny")
    assert plain.launch is not None and plain.rank_trace_dir is None
    assert not any(k.startswith("REFDEPLOY_RANK_TRACE") for k in plain.launch.spec["env"])
    assert not any("rank-trace" in v for v in plain.launch.spec["volumes"])
    # The capture mounts the directory read-only and is told where.
    argv = playbooks.capture_argv(a.model_dump(mode="json"), {"out": "/x", "seconds": 5, "probe": "capture"})["argv"]
    assert "/var/lib/refdeploy/rank-trace/refdeploy-vllm:/run/refdeploy/rank-trace:ro" in argv
    assert argv[argv.index("--rank-trace-dir") + 1] == "/run/refdeploy/rank-trace"
    # The engine writes its files 0660 (umask 0007) and the capture's root has no DAC capability: it reads them as a
    # member of the runtime's group (CI's run on a clean host found the capture reading none).
    groups = [argv[i + 1] for i, a in enumerate(argv) if a == "--group-add"]
    assert str(RUNTIME_GID) in groups and not {"DAC_READ_SEARCH", "DAC_OVERRIDE"} & set(argv)
    plain_argv = playbooks.capture_argv(plain.model_dump(mode="json"), {"out": "/x", "seconds": 5})["argv"]
    assert "--rank-trace-dir" not in plain_argv
    assert str(RUNTIME_GID) not in [plain_argv[i + 1] for i, a in enumerate(plain_argv) if a == "--group-add"]


def test_the_v2_experiments_profiles_are_the_pp2_ones_with_the_v2_runner_and_triton_interpreted() -> None:
    """docs/experiments/v2-on-cpu/: vLLM's V2 model runner on the CPU build, Triton's interpreter standing in for the
    CPU backend this image lacks. They differ from the V1 pair in those variables alone, on the same image, so a
    validate of one against the other compares the runner."""
    exp = Path(__file__).resolve().parents[3] / "docs" / "experiments" / "v2-on-cpu"
    for v1, v2 in (("cpu-tiny-pp2", "cpu-tiny-pp2-v2"), ("cpu-tiny-pp2-deferred", "cpu-tiny-pp2-v2-deferred")):
        a, b = _cpu(v1), _cpu(str(exp / f"{v2}-interpret.yaml"))
        assert a.ok and b.ok and a.launch is not None and b.launch is not None
        env = b.launch.spec["env"]
        added = {k: env.pop(k) for k in ("VLLM_USE_V2_MODEL_RUNNER", "TRITON_INTERPRET", "PYTHONPATH")}
        assert added == {"VLLM_USE_V2_MODEL_RUNNER": "1", "TRITON_INTERPRET": "1",
                         "PYTHONPATH": "/run/refdeploy/rank-trace"}  # fmt: skip
        assert env == a.launch.spec["env"] and b.launch.spec["command"] == a.launch.spec["command"]
        assert b.images == a.images and b.rank_trace_dir == a.rank_trace_dir


def _with_env(profile: str, **env: str) -> Plan:
    data = load_profile(profile).model_dump(mode="json")
    data["env"].update(env)
    return plan_from_profile(parse_profile(data), "localhost", {"hostname": "localhost", "served_files": SERVED})


def test_the_v2_model_runner_on_the_cpu_image_is_refused_at_plan_time_not_after_the_health_bound() -> None:
    """vllm-cpu 0.32.0 refuses VLLM_USE_V2_MODEL_RUNNER=1 at config validation (its Triton has no CPU backend), which a
    deploy found only after its 300 s health wait and a rollback (docs/experiments/v2-on-cpu/README.md)."""
    refused = _with_env("cpu-tiny", VLLM_USE_V2_MODEL_RUNNER="1")
    assert not refused.ok and refused.launch is not None
    assert refused.failures == [
        "profile cpu-tiny: env VLLM_USE_V2_MODEL_RUNNER=1 asks for the V2 model runner, which vllm-cpu 0.32.0 refuses "
        'at start-up ("Model Runner V2 requires Triton.": the CPU image\'s Triton has no CPU backend); remove it (the '
        "CPU build runs V1), or run V2 as docs/experiments/v2-on-cpu/ does"
    ]
    # vLLM reads the variable as an integer: 0 is V1, which the CPU build runs; a word is a crash at start-up.
    assert _with_env("cpu-tiny", VLLM_USE_V2_MODEL_RUNNER="0").ok
    assert _with_env("cpu-tiny", VLLM_USE_V2_MODEL_RUNNER="true").failures == [
        "profile cpu-tiny: env VLLM_USE_V2_MODEL_RUNNER='true': vLLM reads it as an integer (0: the V1 model runner, "
        "1: V2); write 0 or 1, or leave it out for vLLM's own choice"
    ]
    # The experiment's interpreted Triton is the one way V2 starts on this image (its profiles plan, above).
    assert _with_env("cpu-tiny", VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1").ok


def test_the_v2_model_runner_on_a_gpu_profile_is_not_refused() -> None:
    """A CUDA host runs V2 wherever Triton imports; asking for it there is no reason to refuse."""
    data = load_profile("rtx3090-pp3").model_dump(mode="json")
    data["env"]["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    assert servability.runner_refusals(parse_profile(data)) == []


def test_make_plan_prints_the_gpu_hosts_notes_after_its_refusals() -> None:
    off = "".join(
        ln.replace("Enabled", "Disabled", 1) if ln.startswith("2,") else ln
        for ln in _readings("rtx3090-pp3")["query_gpu"].splitlines(keepends=True)
    )
    plan = _gpu("rtx3090-pp3", query_gpu=off)
    assert plan.ok and plan.gpu is not None
    assert [n.split(":")[0] for n in plan.gpu.notes] == ["GPU 2 on gpu3090-a has persistence mode off"]
    assert [ln for ln in describe(plan) if ln.startswith("  note: ")] == [f"  note: {plan.gpu.notes[0]}"]


def test_more_cpu_ranks_than_the_cpuset_has_cpus_or_a_rank_bound_outside_it_are_failure_lines() -> None:
    data = load_profile("cpu-tiny-tp2").model_dump(mode="json")
    del data["env"]["VLLM_CPU_OMP_THREADS_BIND"]  # vLLM's own binding: the plan cannot name each rank's CPUs
    data["vllm"]["tensor_parallel_size"] = 4
    plan = plan_from_profile(parse_profile(data), "localhost", {"hostname": "localhost", "served_files": SERVED})
    assert plan.failures == [
        "4 ranks (tensor x pipeline parallel size) on container.cpuset_cpus 0-1, 2 CPU(s): without "
        "VLLM_CPU_OMP_THREADS_BIND each CPU rank needs a CPU of its own; lower the parallelism, widen the cpuset, or "
        "bind each rank's CPUs (ranks may then share one)"
    ]
    data = load_profile("cpu-tiny-tp2").model_dump(mode="json")
    data["env"]["VLLM_CPU_OMP_THREADS_BIND"] = "0|2"
    plan = plan_from_profile(parse_profile(data), "localhost", {"hostname": "localhost", "served_files": SERVED})
    assert plan.failures == ["rank 1's CPUs 2 (VLLM_CPU_OMP_THREADS_BIND) are not all in container.cpuset_cpus 0-1"]


def test_the_pp3_profile_runs_a_middle_stage_on_two_cpus_with_two_ranks_sharing_one() -> None:
    plan = _cpu("cpu-tiny-pp3")
    assert plan.failures == []
    assert plan.launch is not None and plan.rank_trace_dir is not None
    # Three ranks, bound as the profile says: ranks 1 and 2 share CPU 1 (vLLM takes the lists as given).
    assert [(r.rank, r.cpus) for r in plan.launch.ranks] == [(0, "0"), (1, "1"), (2, "1")]
    assert "--pipeline-parallel-size" in plan.launch.spec["command"]
    assert plan.launch.spec["command"][plan.launch.spec["command"].index("--pipeline-parallel-size") + 1] == "3"


def test_a_cpu_bind_list_that_does_not_fit_the_ranks_is_a_failure_line() -> None:
    data = load_profile("cpu-tiny-tp2").model_dump(mode="json")
    data["env"]["VLLM_CPU_OMP_THREADS_BIND"] = "0-1"
    plan = plan_from_profile(parse_profile(data), "localhost", {"hostname": "localhost", "served_files": SERVED})
    assert plan.failures == [
        "VLLM_CPU_OMP_THREADS_BIND='0-1' names 1 CPU list(s) for 2 rank(s) (tensor x pipeline parallel size): "
        "give one per rank, separated by '|'"
    ]


def test_a_gpu_plan_is_the_class_hosts_container_ranks_and_reserved_cpus() -> None:
    plan = _gpu("rtx3090-pp3")
    assert plan.ok and plan.launch is not None and plan.bench is not None and plan.gpu is not None
    spec = plan.launch.spec
    assert spec == plan.container_spec and spec["device_requests"][0]["device_ids"] == ["0", "1", "2"]
    assert [(r.rank, r.gpu, r.cpus, r.mems) for r in plan.launch.ranks] == [
        (0, 0, "0-27", "0"),
        (1, 1, "0-27", "0"),
        (2, 2, "0-27", "0"),
    ]
    assert plan.bench.client_cpus == "30-31" and plan.probes.cpus == "28-29"
    assert plan.gpu.numa_plan is not None and plan.gpu.numa_plan["cpuset_cpus"] == "0-27"
    assert "container_spec" not in plan.gpu.model_dump()
    # The probe containers get the GPUs' driver (nvidia-smi), not the GPUs' compute.
    access = {"driver": "nvidia", "device_ids": ["0", "1", "2"], "capabilities": [["utility"]]}
    assert plan.probes.gpu_access is not None and plan.probes.gpu_access.device_requests == [access]
    assert plan.sidecar_spec is not None and plan.sidecar_spec["device_requests"] == [access]
    assert (
        plan.sidecar_spec["env"]["REFDEPLOY_GPU_ACCESS"] == "--gpus device=0,1,2,capabilities=utility (nvidia runtime)"
    )


def test_the_capture_container_of_a_gpu_plan_carries_the_gpus_and_the_probe_cpus() -> None:
    data = _gpu("rtx3090-pp3").model_dump(mode="json")
    argv = playbooks.capture_argv(data, {"out": "/o", "seconds": 5, "gpu_class": _class("rtx3090-pp3")})["argv"]
    assert argv[argv.index("--gpus") + 1] == '"device=0,1,2",capabilities=utility'
    assert argv[argv.index("--cpuset-cpus") + 1] == "28-29"
    assert argv[argv.index("--pcie-min-gen") + 1] == "4" and argv[argv.index("--pcie-min-width") + 1] == "16"
    assert "--volume" in argv and "/srv/models/served:/srv/models/served:ro" in argv
    assert argv[argv.index("--data-file") + 1] == "/srv/models/served/model.safetensors"
    io = playbooks.probe_io_argv(data, {"out": "/o"})
    assert io["target"] == "/srv/models/served/model.safetensors"
    assert io["argv"][io["argv"].index("--cpuset-cpus") + 1] == "28-29"


def test_the_probe_containers_come_with_their_name_and_bound() -> None:
    data = _gpu("rtx3090-pp3").model_dump(mode="json")
    capture = playbooks.capture_argv(data, {"out": "/o", "seconds": 20, "record_seconds": 5})
    # Named after the serving container (refdeploy-vllm): one engine may hold two serving stacks and their probes.
    assert capture["container"] == "refdeploy-vllm-probe" and capture["timeout_s"] == 20 + 5 + 300
    io = playbooks.probe_io_argv(data, {"out": "/o", "runtime_s": 10, "depths": [1, 64]})
    assert io["container"] == "refdeploy-vllm-probe-io" and io["timeout_s"] == 2 * (10 + 60) + 60


def test_the_tp8_bench_uses_the_tokenizer_beside_the_gguf_weights() -> None:
    plan = _gpu("rtxpro6000-tp8")
    assert plan.ok and plan.bench is not None
    assert plan.bench.tokenizer == "/models/moe-gguf/tokenizer"
    assert "/srv/models/moe-gguf:/models/moe-gguf:ro" in plan.bench.volumes


def test_a_tokenizer_outside_every_volume_is_a_failure_line() -> None:
    data = load_profile("rtxpro6000-tp8").model_dump(mode="json")
    data["vllm"]["extra_args"] = ["--tokenizer", "/opt/tokenizers/moe"]
    profile = parse_profile(data)
    readings = {**_readings("rtxpro6000-tp8"), "served_files": ""}
    plan = plan_from_profile(profile, "gpupro-a", readings, _class("rtxpro6000-tp8"))
    assert any(f.startswith("the tokenizer /opt/tokenizers/moe is not inside a volume") for f in plan.failures)


def test_a_gpu_profile_is_planned_from_the_host_and_its_class() -> None:
    plan = plan_from_profile(load_profile("rtx3090-pp3"), "gpu3090-a")
    assert not plan.ok and plan.launch is None and plan.container_spec is None
    assert plan.failures == ["gpu3090-a was not read: a GPU profile is planned from the host's readings"]
    assert plan.images.runtime_tag.startswith("refdeploy/vllm:0.32.0-cuda-")
    unclassed = plan_from_profile(load_profile("rtx3090-pp3"), "gpu3090-a", _readings("rtx3090-pp3"))
    assert unclassed.launch is None and unclassed.failures[0].startswith(
        "profile rtx3090-pp3 is a GPU profile, and gpu3090-a's inventory group sets no gpu_class"
    )


def test_a_host_that_misses_its_class_has_no_container_but_its_names() -> None:
    plan = _gpu("rtx3090-pp3", cgroup_fs="tmpfs\n")
    assert not plan.ok and plan.launch is None
    assert plan.profile.container.name == "refdeploy-vllm"  # status, capture and undeploy still know it


# --- running = planned ----------------------------------------------------------------------------------------


def test_the_running_container_is_planned_when_it_carries_the_launch_digest_and_runs() -> None:
    plan = _cpu()
    assert plan.launch is not None
    spec = plan.launch.spec
    assert running_state(_container(spec), spec) | {"id": ""} == {
        "exists": True, "status": "running", "running": True, "planned": True, "why": "", "id": "",
        "image": spec["image"], "profile": "cpu-tiny", "stand_in": "", "profiler": "", "restart_count": 0,
    }  # fmt: skip
    assert running_state(_container(spec, "exited"), spec)["why"] == "it is exited"
    assert running_state(None, spec)["why"] == "no container runs under this name"
    assert running_state(_container(spec), None)["why"] == "the plan has no container for this host"
    other = _cpu("cpu-tiny-tp2").launch
    assert other is not None
    assert running_state(_container(other.spec), spec)["why"] == "it runs profile cpu-tiny-tp2, not cpu-tiny"
    changed = {**spec, "labels": {**spec["labels"], SPEC_LABEL: "ab" * 32}}
    assert running_state(_container(changed), spec)["why"].startswith("it was started from another spec (digest abab")


def test_a_gpu_hosts_container_is_planned_though_its_argv_is_not_the_profiles() -> None:
    """The regression: bench compared the running argv with the profile's, which a GPU host never runs (its spec
    adds --numa-bind*), so `make bench` was refused on every GPU host. The digest of the launch spec decides."""
    plan = _gpu("rtx3090-pp3")
    assert plan.launch is not None
    spec = plan.launch.spec
    assert spec["command"] != render_vllm_argv(plan.profile) and "--numa-bind" in spec["command"]
    assert running_state(_container(spec), spec)["planned"] is True


def test_a_sidecar_is_planned_only_beside_the_serving_container_that_runs_now() -> None:
    side = _cpu().sidecar_spec
    assert side is not None
    c = _container({**side, "labels": {**side["labels"], "org.refdeploy.target-id": "abc"}})
    assert running_state(c, side, "abc")["planned"] is True
    assert running_state(c, side, "def")["why"] == "it watches a serving container that no longer runs"


# --- the stand-in (the one test seam) -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "kind"), [("rtx3090-pp3", "--pipeline-parallel-size"), ("rtxpro6000-tp8", "--tensor-parallel-size")]
)
def test_the_stand_in_replaces_only_what_cannot_exist_here(profile: str, kind: str) -> None:
    real, seam = _gpu(profile), _gpu(profile, STAND_IN)
    assert real.launch is not None and seam.launch is not None and seam.launch.stand_in is not None
    # The class's plan is untouched: the container spec, its digest, the NUMA plan, the budget.
    assert seam.container_spec == real.container_spec and seam.spec_digest == real.spec_digest
    assert seam.gpu == real.gpu and seam.failures == real.failures == []
    spec = seam.launch.spec
    assert spec["image"].startswith("refdeploy/vllm:0.32.0-cpu-") and seam.images.distribution == "vllm-cpu"
    assert "device_requests" not in spec and (spec["cpuset_cpus"], spec["cpuset_mems"]) == ("0-1", "0")
    assert spec["command"][spec["command"].index(kind) + 1] == "2" and "--numa-bind" not in spec["command"]
    assert spec["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert "memlock:8388608:8388608" in spec["ulimits"] and "nofile:20000:20000" in spec["ulimits"]
    assert spec["labels"]["org.refdeploy.stand-in"] == "serving/plan/standin.py"
    assert spec["labels"][SPEC_LABEL] == seam.launch.spec_digest != seam.spec_digest
    assert [(r.rank, r.cpus) for r in seam.launch.ranks] == [(0, "0"), (1, "1")]
    replaced = seam.launch.stand_in["replaced"]
    assert replaced["image"] == [real.container_spec["image"], spec["image"]]  # type: ignore[index]
    assert replaced["device_requests"][1] is None
    # The effective-config check expects what the stand-in's argv carries, not the class's 262,144 context.
    assert seam.launch.vllm.max_model_len == 2048
    # No CPUs kept back on a 2-CPU machine; the class's tokenizer path stays.
    assert seam.bench is not None and seam.bench.client_cpus == "" and seam.probes.cpus == ""
    assert seam.bench.image == spec["image"] and seam.bench.tokenizer == real.bench.tokenizer  # type: ignore[union-attr]


def test_the_stand_in_gives_the_probes_the_replayed_nvidia_smi() -> None:
    seam = _gpu("rtx3090-pp3", STAND_IN)
    access = seam.probes.gpu_access
    assert access is not None and access.device_requests == []
    assert access.volumes == [
        "/repo/tests/replay/nvidia-smi:/usr/local/bin/nvidia-smi:ro",
        "/repo/fx/3090:/opt/replay/nvidia-smi:ro",
    ]
    argv = playbooks.capture_argv(seam.model_dump(mode="json"), {"out": "/o", "seconds": 5})["argv"]
    assert "--gpus" not in argv and "/repo/fx/3090:/opt/replay/nvidia-smi:ro" in argv
    assert "REFDEPLOY_REPLAY_DIR=/opt/replay/nvidia-smi" in argv
    assert seam.sidecar_spec is not None and "device_requests" not in seam.sidecar_spec
    assert seam.sidecar_spec["env"]["REFDEPLOY_GPU_ACCESS"] == "a replayed nvidia-smi (test stand-in)"


def _flag(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_a_gpu_plan_carries_the_smoke_test_of_its_launch() -> None:
    plan = _gpu("rtx3090-pp3")
    smoke = plan.gpu_smoke
    assert smoke is not None and plan.launch is not None and smoke.seam is None
    assert smoke.container == "refdeploy-vllm-gpu-smoke" and smoke.model_substring == "RTX 3090"
    assert _flag(smoke.argv, "--gpus") == ['"device=0,1,2"']
    assert _flag(smoke.argv, "--cpuset-cpus") == [plan.launch.spec["cpuset_cpus"]]
    assert _flag(smoke.argv, "--cap-add") == ["SYS_NICE"]  # the launch's, for --numa-bind
    assert [(g.index, g.pci_bus_id) for g in smoke.gpus] == [
        (0, "0000:01:00.0"),
        (1, "0000:21:00.0"),
        (2, "0000:4b:00.0"),
    ]
    assert smoke.gpu_memory_utilization == 0.92
    # The collectives of the class's PP=3, with NCCL, through the image's script.
    assert smoke.argv[smoke.argv.index("--entrypoint") :] == [
        "--entrypoint", "python3", plan.launch.spec["image"], "/opt/refdeploy/gpu_smoke.py",
        "--tp", "1", "--pp", "3", "--backend", "nccl", "--bound-s", "120",
    ]  # fmt: skip
    assert smoke.collectives is not None and (smoke.collectives.tp, smoke.collectives.pp) == (1, 3)
    assert parse_plan(plan.model_dump(mode="json")).gpu_smoke == smoke
    assert _cpu().gpu_smoke is None


def test_the_stand_in_runs_the_smoke_container_and_replays_the_classs_result() -> None:
    seam = _gpu("rtx3090-pp3", STAND_IN)
    smoke = seam.gpu_smoke
    assert smoke is not None and seam.launch is not None and smoke.seam is not None
    # The image's own smoke test: the per-GPU result replayed, the plan's collectives (PP=3) run with gloo.
    assert "--gpus" not in smoke.argv and smoke.argv[smoke.argv.index("--entrypoint") :] == [
        "--entrypoint", "python3", seam.launch.spec["image"], "/opt/refdeploy/gpu_smoke.py",
        "--devices-recorded", "/opt/replay/gpu-smoke.json",
        "--tp", "1", "--pp", "3", "--backend", "gloo", "--bound-s", "120",
    ]  # fmt: skip
    assert "/repo/fx/3090/gpu-smoke.json:/opt/replay/gpu-smoke.json:ro" in smoke.argv
    assert _flag(smoke.argv, "--cpuset-cpus") == ["0-1"]  # the stand-in's options, not the class host's
    assert "replays /repo/fx/3090/gpu-smoke.json; the collectives of TP=1 x PP=3 run for real with gloo over 3" in (
        smoke.seam
    )
    assert smoke.collectives is not None and smoke.collectives.backend == "gloo"
    # The planned GPUs stay what the judgement reads the replayed result against.
    assert smoke.gpus == _gpu("rtx3090-pp3").gpu_smoke.gpus  # type: ignore[union-attr]
    kept = _gpu("rtx3090-pp3", {**STAND_IN, "gpu_smoke": {"gpu_request": True}}).gpu_smoke
    assert kept is not None and _flag(kept.argv, "--gpus") == ['"device=0,1,2"']
    assert "the planned GPU request kept" in str(kept.seam)


def test_the_stand_in_file_induces_collective_faults_and_refuses_bad_ones() -> None:
    faults = {**STAND_IN, "gpu_smoke": {"collectives": {"absent_rank": 1, "bound_s": 0.5}}}
    smoke = _gpu("rtx3090-pp3", faults).gpu_smoke
    assert smoke is not None and smoke.argv[-4:] == ["--bound-s", "0.5", "--absent-rank", "1"]
    # The TP=8 class: all eight ranks, one process each, on the stand-in's two CPUs.
    tp8 = _gpu("rtxpro6000-tp8", STAND_IN).gpu_smoke
    assert tp8 is not None and tp8.argv[-8:-2] == ["--tp", "8", "--pp", "1", "--backend", "gloo"]
    for bad, line in [
        ({"absent_rank": 3}, "gpu_smoke.collectives.absent_rank 3 is not a rank of 0..2"),
        ({"bound_s": 0}, "gpu_smoke.collectives.bound_s 0 is not a positive number of seconds"),
        ({"rank": 1}, "gpu_smoke.collectives must be an object of absent_rank and bound_s, not {'rank': 1}"),
    ]:
        with pytest.raises(StandInError, match=re.escape(line)):
            _gpu("rtx3090-pp3", {**STAND_IN, "gpu_smoke": {"collectives": bad}})


def test_the_generator_writes_only_into_a_new_empty_or_its_own_directory() -> None:
    tinymodel = image_script("tinymodel")
    from serving.plan.served import TINYMODEL_MARKER

    assert TINYMODEL_MARKER == tinymodel.MARKER
    assert _cpu(served="").model_action == "generate"
    assert _cpu().model_action == "generated" and _cpu().ok
    d = "/var/lib/refdeploy/models/tiny-llama"
    real = f"4096\t{d}/config.json\n9\t{d}/x.safetensors\n"
    plan = _cpu(served=real)
    assert plan.model_action == "refused" and not plan.ok
    [line] = plan.failures
    assert "holds files the tiny-model generator did not make (config.json, x.safetensors)" in line
    assert "set model.generate: none" in line
    # What the refusal protects is moved aside, never deleted (issue 31).
    assert f"mv {d} {d}.old" in line and "rm " not in line and "delete" not in line and "remove" not in line
    [line] = _cpu(served=f"4096\t{d}/config.json\n0\t{d}/{TINYMODEL_MARKER}\n").failures
    assert "holds an incomplete generated model" in line and f"mv {d} {d}.old" in line and "rm " not in line
    # A sibling directory's files are not the model's.
    assert _cpu(served="5\t/var/lib/refdeploy/models/tiny-llama-2/config.json\n").model_action == "generate"


def test_the_generator_itself_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    tinymodel = image_script("tinymodel")

    foreign = tmp_path / "real-model"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    assert tinymodel.main([str(foreign)]) == 3
    assert sorted(p.name for p in foreign.iterdir()) == ["config.json"]
    tinymodel.claim(tmp_path / "new")
    tinymodel.claim(tmp_path / "new")  # its own: accepted again
    assert (tmp_path / "new" / tinymodel.MARKER).is_file()


def test_a_host_command_that_timed_out_is_named_in_the_plan() -> None:
    # As refdeploy_host_readings gives them (tests/unit/ansible/test_host_readings.py runs it against a tool that
    # hangs).
    readings = {"hostname": "localhost\n", "served_files": SERVED, "timeout": "nvidia-smi -L (after 30 s)\n"}
    plan = plan_from_profile(load_profile("cpu-tiny"), "localhost", readings)
    assert plan.failures == [
        "reading localhost for the plan: nvidia-smi -L (after 30 s) did not answer; "
        "find out why on the host, then run again"
    ]


def test_a_staged_model_is_there_only_with_its_config_json() -> None:
    from serving.plan.served import model_state

    tiny = load_profile("cpu-tiny")
    staged = tiny.model_copy(update={"model": tiny.model.model_copy(update={"generate": "none"})})
    root = staged.model.host_path
    assert model_state(staged, [(10, f"{root}/config.json"), (99, f"{root}/model.safetensors")]) == ("staged", [])
    # Weights without config.json, or nothing: the serve role stops with what to do, before any launch.
    assert model_state(staged, [(99, f"{root}/model.safetensors")]) == ("absent", [])
    assert model_state(staged, []) == ("absent", [])
