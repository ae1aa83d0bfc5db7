from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serving.config.profile import Profile, load_profile, parse_profile
from serving.record.effective import (
    EffectiveConfigError,
    describe_mismatches,
    effective_config,
    find_server_started,
    parse_config_line,
)


def _read(d: Path, name: str) -> str:
    return (d / name).read_text()


def test_config_line_scalars_parse_from_a_real_line(vllm_cpu_fixtures: Path) -> None:
    version, values = parse_config_line(_read(vllm_cpu_fixtures, "engine-config-line.txt"))
    assert version == "0.32.0"
    assert values["model"] == "/models/tiny-llama"
    assert values["dtype"] == "torch.float32"
    assert values["max_seq_len"] == "2048"
    assert values["enforce_eager"] == "True"
    assert values["served_model_name"] == "tiny-llama"
    assert values["enable_chunked_prefill"] == "True"
    # Nested reprs are not half-parsed into scalars.
    assert "compilation_config" not in values


def effective_of(profile: Profile, log: str, metrics: str) -> dict[str, Any]:
    """The check as the deploy makes it for a profile's own launch (its vLLM arguments, model, environment)."""
    return effective_config(profile.vllm, profile.model, profile.env, log, metrics)


def test_real_deployment_matches_its_profile(vllm_cpu_fixtures: Path) -> None:
    result = effective_of(
        load_profile("cpu-tiny"),
        _read(vllm_cpu_fixtures, "startup.log"),
        _read(vllm_cpu_fixtures, "metrics-after-1-request.txt"),
    )
    status = {c["setting"]: c["status"] for c in result["checks"]}
    assert result["mismatches"] == []
    assert status["block_size"] == "ok"
    assert status["max_model_len"] == "ok"
    assert status["enable_prefix_caching"] == "ok"
    assert status["env.VLLM_CPU_KVCACHE_SPACE"] == "ok"
    # vLLM reports max_num_seqs nowhere we read: listed, never passed silently.
    assert status["max_num_seqs"] == "unverified"
    assert result["server_started_log_ts"] == "11-29 08:51:03"


def test_a_setting_not_in_force_names_both_values(vllm_cpu_fixtures: Path) -> None:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["vllm"]["max_model_len"] = 4096
    data["vllm"]["block_size"] = 64
    result = effective_of(
        parse_profile(data),
        _read(vllm_cpu_fixtures, "startup.log"),
        _read(vllm_cpu_fixtures, "metrics-after-1-request.txt"),
    )
    assert sorted(result["mismatches"]) == ["block_size", "max_model_len"]
    msg = describe_mismatches(result)
    assert "requested max_model_len=4096 but the engine runs with 2048 (config_line:max_seq_len)" in msg
    assert "requested block_size=64 but the engine runs with 32 (cache_config_info:block_size)" in msg


def test_missing_config_line_and_missing_metric_are_errors(vllm_cpu_fixtures: Path) -> None:
    metrics = _read(vllm_cpu_fixtures, "metrics-after-1-request.txt")
    with pytest.raises(EffectiveConfigError, match="start-up config line"):
        effective_of(load_profile("cpu-tiny"), "no such line\n", metrics)
    with pytest.raises(EffectiveConfigError, match="vllm:cache_config_info is missing"):
        effective_of(load_profile("cpu-tiny"), _read(vllm_cpu_fixtures, "engine-config-line.txt"), "")


def test_server_started_takes_the_last_start() -> None:
    log = (
        "(APIServer pid=1) INFO 11-29 08:51:03 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000\n"
        "(APIServer pid=1) INFO 11-29 09:01:07 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000\n"
    )
    assert find_server_started(log) == "11-29 09:01:07"
    assert find_server_started("nothing") is None


def _with_compilation(vllm_cpu_fixtures: Path, compilation: dict[str, Any] | None) -> dict[str, Any]:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["vllm"]["compilation_config"] = compilation
    return effective_of(
        parse_profile(data),
        _read(vllm_cpu_fixtures, "startup.log"),
        _read(vllm_cpu_fixtures, "metrics-after-1-request.txt"),
    )


def test_the_compilation_and_cuda_graph_modes_are_recorded_from_the_real_line(vllm_cpu_fixtures: Path) -> None:
    # The recorded cpu-tiny engine (enforce_eager): no compilation, no CUDA graphs.
    result = _with_compilation(vllm_cpu_fixtures, None)
    assert result["compilation"] == {
        "mode": {"name": "NONE", "value": "0"},
        "cudagraph_mode": {"name": "NONE", "value": "0"},
    }
    assert not [c for c in result["checks"] if c["setting"].startswith("compilation_config.")]


def test_a_requested_compilation_mode_not_in_force_fails_by_name_or_number(vllm_cpu_fixtures: Path) -> None:
    result = _with_compilation(vllm_cpu_fixtures, {"mode": 3, "cudagraph_mode": "FULL_AND_PIECEWISE"})
    assert sorted(result["mismatches"]) == ["compilation_config.cudagraph_mode", "compilation_config.mode"]
    msg = describe_mismatches(result)
    assert "requested compilation_config.mode=3 but the engine runs with 'NONE'" in msg
    assert "requested compilation_config.cudagraph_mode='FULL_AND_PIECEWISE' but the engine runs with 'NONE'" in msg
    held = _with_compilation(vllm_cpu_fixtures, {"mode": 0, "cudagraph_mode": "none"})
    assert held["mismatches"] == [] and {
        c["setting"]: c["status"] for c in held["checks"] if c["setting"].startswith("compilation_config.")
    } == {"compilation_config.mode": "ok", "compilation_config.cudagraph_mode": "ok"}
