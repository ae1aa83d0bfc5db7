"""Servability at plan time (serving/plan/servability.py): what the host's model files say against what the CUDA
runtime image recorded of itself (images/vllm/verified-cuda.json `capabilities` and `gguf_plugin`, written by
make test-cuda-image from inside the image), on the recorded class hosts (tests/fixtures/gpu-hosts), before any
change. The record is the image's own answer; these tests hold the plan's reading of it, not the answer."""

from __future__ import annotations

import json
from pathlib import Path

from serving.config.profile import load_profile
from serving.plan.servability import RECORD, recorded_offer, refusals
from tests.helpers.gpu_hosts import class_data, gpu_serving_plan

MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"
OFFER = recorded_offer()


def _headers(profile: str, config: dict[str, object], gguf: dict[str, object] | None = None) -> str:
    p = load_profile(profile)
    root = p.model.host_path
    where = f"{root}/tokenizer/config.json" if p.model.file else f"{root}/config.json"
    shards = {f"{root}/{p.model.file}": gguf} if gguf is not None and p.model.file else {}
    return json.dumps({"configs": {where: json.dumps(config)}, "gguf": shards})


def _glm5(**extra: object) -> dict[str, object]:
    return {**json.loads((MODELS / "glm-5.config.json").read_text()), **extra}


NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}


def test_the_record_is_the_images_own_and_names_the_runtime_it_describes() -> None:
    record = json.loads(RECORD.read_text())
    assert OFFER is not None
    assert (OFFER["distribution"], OFFER["version"], OFFER["vllm"]) == ("vllm", "0.32.0", "0.32.0")
    assert OFFER["tag"] == record["tag"]
    assert "GlmMoeDsaForCausalLM" in OFFER["architectures"] and "LlamaForCausalLM" in OFFER["architectures"]
    assert set(OFFER["attention"]) == {"8.6", "12.0"}


def test_glm5_is_refused_on_the_3090_class_for_want_of_a_sparse_mla_backend_for_8_6() -> None:
    plan = gpu_serving_plan("rtx3090-pp3", model_headers=_headers("rtx3090-pp3", _glm5(quantization_config=NVFP4)))
    [line] = [f for f in plan.failures if "attention backend" in f]
    assert line.startswith("vllm 0.32.0 has no sparse MLA (DeepSeek sparse attention) attention backend for compute "
                           "capability 8.6 (rtx3090-pp3): its CUDA selector tries ")  # fmt: skip
    assert "FLASHMLA_SPARSE: compute capability not supported" in line and "46726" not in line


def test_the_source_gguf_is_refused_with_the_plugins_own_answer_before_anything_is_staged() -> None:
    header = {"version": 3, "metadata": {"general.architecture": "glm-dsa", "glm-dsa.block_count": 79,
                                         "glm-dsa.nextn_predict_layers": 1}, "tensors": []}  # fmt: skip
    plan = gpu_serving_plan("rtxpro6000-tp8-gguf", model_headers=_headers("rtxpro6000-tp8-gguf", _glm5(), header))
    [line] = [f for f in plan.failures if "vllm-gguf-plugin" in f]
    assert line.startswith("vllm-gguf-plugin 0.0.5 cannot map glm_moe_dsa (/srv/models/moe-q4k/tokenizer/config.json;"
                           " GGUF architecture glm-dsa): its own answer, recorded from the runtime image, is "
                           '"RuntimeError: Unknown gguf model_type: glm_moe_dsa"')  # fmt: skip


def test_an_architecture_the_registry_lacks_and_a_cpu_profile_or_an_unread_model_are_judged_as_such() -> None:
    profile = load_profile("rtxpro6000-tp8")
    from serving.plan.model_facts import ModelFacts, from_config

    facts = from_config(_glm5(architectures=["Glm5ForCausalLM"]))
    facts.update(config="/srv/m/config.json", gguf=None, gguf_architecture=None)
    model = ModelFacts(**facts)
    [line] = refusals(profile, model, class_data("rtxpro6000-tp8"), OFFER)[:1]
    assert line.startswith("Glm5ForCausalLM (/srv/m/config.json) is not in vllm 0.32.0's model registry")
    assert refusals(load_profile("cpu-tiny"), model, None, OFFER) == []
    assert refusals(profile, None, class_data("rtxpro6000-tp8"), OFFER) == []
    assert refusals(profile, model, class_data("rtxpro6000-tp8"), None) == []


def test_glm5_as_nvfp4_is_servable_on_the_pro_6000_class_and_the_plan_says_what_it_judged() -> None:
    """The record's answer for sparse MLA on 12.0 (FLASHINFER_MLA_SPARSE_SM120, once FlashInfer's JIT has nvcc and
    g++ in the image) and NVFP4's minimum capability (7.5): nothing refuses it; its weights fit (test_capacity.py)."""
    sel = OFFER["attention"]["12.0"]["sparse_mla"]  # type: ignore[index]
    assert sel["accepted"] == ["FLASHINFER_MLA_SPARSE_SM120"], sel
    headers = _headers("rtxpro6000-tp8", _glm5(quantization_config=NVFP4))
    plan = gpu_serving_plan("rtxpro6000-tp8", model_headers=headers)
    assert plan.failures == [], plan.failures
    from serving.plan.describe import describe

    said = "\n".join(describe(plan))
    assert "  model: GlmMoeDsaForCausalLM (glm_moe_dsa), 78 layers, weights 389.7 GiB" in said
    assert "  GPU room: weights 48.7 GiB a rank of 95.6 GiB x 0.92, 39.2 GiB left = " in said
