"""Capacity at plan time (serving/plan/capacity.py): free space from the host's df reading, and the model's weights
per rank against the class's GPUs, on the recorded RTX PRO 6000 host (tests/fixtures/gpu-hosts) with GLM-5's
config (tests/fixtures/models) staged, before any change."""

from __future__ import annotations

import json
from pathlib import Path

from serving.config.profile import load_profile
from serving.plan.capacity import GIB, disk_needs, parse_df
from tests.helpers.gpu_hosts import gpu_serving_plan

MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"
DF = (
    "docker_root\t/var/lib/docker\ncache_dir\t/var/lib/refdeploy\nserved:/var/lib/refdeploy/models/tiny-llama\t"
    "/var/lib/refdeploy\n\n"
    "Mounted on            Avail    1B-blocks\n"
    "/var/lib/docker 72365662208 270553174016\n"
    "/               16777216 270553174016\n"
    "/               16777216 270553174016\n"
)


def test_df_is_read_place_by_place() -> None:
    assert parse_df(DF) == {
        "docker_root": ("/var/lib/docker", 72365662208),
        "cache_dir": ("/var/lib/refdeploy", 16777216),
        "served:/var/lib/refdeploy/models/tiny-llama": ("/var/lib/refdeploy", 16777216),
    }


def test_a_host_short_of_space_for_the_generated_model_or_the_caches_is_refused_with_both_figures() -> None:
    profile = load_profile("cpu-tiny")
    needs, failures = disk_needs(profile, DF, "generate", runtime_image_present=False)
    assert [n.place for n in needs] == ["served:/var/lib/refdeploy/models/tiny-llama", "docker_root", "cache_dir"]
    assert failures == [
        "/var/lib/refdeploy has 16.0 MiB free, and the tiny model the deploy generates needs 64.0 MiB: free space "
        "there (or point model.host_path elsewhere), then deploy again",
        "/var/lib/refdeploy has 16.0 MiB free, and the engine's compile caches needs 1.0 GiB: free space there (or "
        "point container.compile_cache_dir elsewhere), then deploy again",
    ]
    # The image is built only where the host lacks it: 2 x 4.29 GB fits the 72 GB there anyway.
    assert next(n for n in needs if n.place == "docker_root").needs_bytes == 2 * 4_290_000_000
    _needs, failures = disk_needs(profile, DF.replace(" 16777216 ", " 107374182400 "), "generated", True)
    assert failures == []


def _glm5(dtype: str | None = None, quant: dict[str, object] | None = None) -> str:
    cfg = json.loads((MODELS / "glm-5.config.json").read_text())
    if dtype:
        cfg["dtype"] = dtype
    if quant:
        cfg["quantization_config"] = quant
    model = load_profile("rtxpro6000-tp8").model.host_path
    return json.dumps({"configs": {f"{model}/config.json": json.dumps(cfg)}, "gguf": {}})


def test_glm5_in_bf16_does_not_fit_eight_rtx_pro_6000s_and_nvfp4_does() -> None:
    plan = gpu_serving_plan("rtxpro6000-tp8", model_headers=_glm5())
    [line] = [f for f in plan.failures if "weights" in f]
    # 743.9B parameters at 2 bytes over TP 8: 173.2 GiB a rank against 97,887 MiB x 0.92 (the recorded host's GPUs).
    assert line.startswith(
        "the model's weights (/srv/models/moe-gguf/config.json) take 173.2 GiB a rank (1.4 TiB over TP 8"
    )
    assert "more than the 87.9 GiB of each GPU vLLM may use (95.6 GiB x gpu_memory_utilization 0.92)" in line
    nvfp4 = gpu_serving_plan("rtxpro6000-tp8", model_headers=_glm5(quant={"quant_method": "modelopt",
                                                                           "quant_algo": "NVFP4"}))  # fmt: skip
    assert not [f for f in nvfp4.failures if "weights" in f or "KV" in f], nvfp4.failures
    room = nvfp4.capacity.gpu  # type: ignore[union-attr]
    assert room is not None and round(room.weights_per_rank_bytes / GIB, 1) == 48.7
    # MLA's latent is on every rank: 100,152 bytes a token; ~39 GiB left holds ~420k tokens, past max_model_len.
    assert room.kv_bytes_per_token_per_rank == 100_152 and room.kv_tokens is not None and room.kv_tokens > 400_000
