"""What the served model is, read from its own files on the host before any change: its config.json (transformers'
model_type, architectures and sizes) and, for a GGUF model, each file's header (llama.cpp's architecture name, its
metadata and the tensor table with each tensor's ggml type). The host module reads the bytes
(ansible/library/refdeploy_host_readings.py model_headers); this module interprets them.

Three consumers: the plan's servability decision (serving/plan/servability.py: the architecture against what the
runtime image offers), its capacity check (serving/plan/capacity.py: weights per rank, KV bytes per token), and the
diagnosis's `scaling` rule (serving/diagnose/rules/scaling.py: the layer count, and the weight bytes one decode step
reads, for the per-layer budget and the decode floor). The bench manifest carries the facts as the plan made them.

The weight bytes a decode step reads (`active_weight_bytes`) follow seed 000 §9's bound (bytes read per token /
memory bandwidth): every weight a token passes through, read once; for an MoE, the routed experts' tensors count at
active/routed of their size (each token uses `num_experts_per_tok` of them); the token embedding counts nothing (one
row is gathered, not the matrix); multi-token-prediction layers (`num_nextn_predict_layers`) count nothing (read
only when speculative decoding is on). From a GGUF the sizes are exact (each tensor's elements at its ggml type's
block size, the gguf package's GGML_QUANT_SIZES); from a config.json they are estimated from its dimensions at its
dtype or quantization's bytes per weight (BYTES_PER_WEIGHT), and say so in `how`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from serving.config.profile import Profile
from serving.config.schema import StrictModel
from serving.plan.served import gguf_shards, tokenizer_path

# Bytes per weight by config.json dtype, and by quantization method (quantization_config.quant_method). NVFP4: 4-bit
# values with one FP8 scale per 16 (NVIDIA's NVFP4 format) = 4.5 bits; FP8: 1 byte (block scales ignored).
BYTES_PER_WEIGHT = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "mxfp4": 0.53125}
# The KV cache's element size when the profile does not set --kv-cache-dtype: the model's dtype (bf16 for the
# classes' models); fp8 caches are 1.
DEFAULT_KV_BYTES = 2


class ModelFacts(StrictModel):
    schema_version: Literal[1] = 1
    config: str | None  # the config.json read, a host path
    gguf: str | None  # the GGUF file (its first shard) read, a host path
    model_type: str | None  # transformers' name (config.json)
    architectures: list[str]
    gguf_architecture: str | None  # llama.cpp's name (general.architecture)
    layers: int | None  # decoder layers a token passes (multi-token-prediction layers not counted)
    hidden_size: int | None
    routed_experts: int | None
    active_experts: int | None
    shared_experts: int | None
    attention: Literal["mla", "gqa", "mha"] | None
    sparse_attention: bool  # DeepSeek sparse attention (DSA): an indexer picks the keys each query reads
    dtype: str | None
    quantization: str | None  # quantization_config's method, or the GGUF's weight types ("Q4_K 71%, Q6_K 20%, ...")
    weight_bytes: int | None
    active_weight_bytes: int | None  # the weights one decode step reads, all ranks together
    kv_bytes_per_token: int | None  # the KV cache one token takes, all layers, all ranks together
    kv_sharded: bool  # whether tensor parallelism splits that KV (GQA/MHA heads) or each rank holds it all (MLA)
    how: list[str]  # how each figure was had: exact from the GGUF, or estimated from config.json


def _int(cfg: Mapping[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config keeps the language model's sizes in text_config."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, Mapping) and "num_hidden_layers" in inner else cfg


def _quant(cfg: Mapping[str, Any]) -> str | None:
    q = cfg.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    method = str(q.get("quant_method") or "")
    algo = str(q.get("quant_algo") or "").lower()  # modelopt: NVFP4 / FP8
    if algo:
        return f"{method}:{algo}"
    groups = q.get("config_groups")  # compressed-tensors: the weights' num_bits and type
    if isinstance(groups, Mapping):
        for g in groups.values():
            w = (g or {}).get("weights") or {}
            if w.get("num_bits") == 4 and w.get("type") == "float":
                return f"{method}:nvfp4"
            if w.get("num_bits") == 8 and w.get("type") == "float":
                return f"{method}:fp8"
    return method or None


def _bytes_per_weight(dtype: str | None, quant: str | None) -> tuple[float, str]:
    if quant:
        for key in ("nvfp4", "mxfp4", "fp8"):
            if key in quant.lower():
                return BYTES_PER_WEIGHT[key], f"{key}, {BYTES_PER_WEIGHT[key]:g} bytes a weight"
        return math.nan, f"quantization {quant}: bytes a weight unknown here"
    b = BYTES_PER_WEIGHT.get(str(dtype))
    return (b, f"{dtype}, {b:g} bytes a weight") if b else (math.nan, f"dtype {dtype}: bytes a weight unknown here")


def _attention_params(c: Mapping[str, Any], hidden: int) -> tuple[int, str]:
    """One layer's attention weights: MLA (DeepSeek V2/V3, GLM-5) or GQA/MHA."""
    heads = _int(c, "num_attention_heads") or 0
    if _int(c, "kv_lora_rank"):
        q_lora = _int(c, "q_lora_rank") or 0
        nope, rope = _int(c, "qk_nope_head_dim") or 0, _int(c, "qk_rope_head_dim") or 0
        v_dim, kv_lora = _int(c, "v_head_dim") or 0, _int(c, "kv_lora_rank") or 0
        q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        kv = hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim)
        out = heads * v_dim * hidden
        indexer = 0
        if _int(c, "index_topk"):  # DSA's indexer: its query up-projection, key projection and head weights
            ih, idim = _int(c, "index_n_heads") or 0, _int(c, "index_head_dim") or 0
            indexer = (q_lora or hidden) * ih * idim + hidden * idim + hidden * ih
        return q + kv + out + indexer, "mla"
    kv_heads = _int(c, "num_key_value_heads") or heads
    head_dim = _int(c, "head_dim") or (hidden // heads if heads else 0)
    return hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden, (
        "gqa" if kv_heads < heads else "mha"
    )


def _kv_per_token(c: Mapping[str, Any], layers: int, attention: str) -> tuple[int, bool, str]:
    """The KV cache a token takes at DEFAULT_KV_BYTES, all layers: MLA caches the compressed latent and the rope
    key (kv_lora_rank + qk_rope_head_dim), the same on every tensor-parallel rank; DSA's indexer adds its own key
    cache (index_head_dim at fp8 and a 4-byte scale, vLLM's DeepSeek V3.2 indexer); GQA/MHA cache K and V per KV
    head, split across tensor-parallel ranks."""
    if attention == "mla":
        latent = (_int(c, "kv_lora_rank") or 0) + (_int(c, "qk_rope_head_dim") or 0)
        per_layer = latent * DEFAULT_KV_BYTES
        said = f"MLA latent {latent} x {DEFAULT_KV_BYTES} B"
        if _int(c, "index_topk"):
            per_layer += (_int(c, "index_head_dim") or 0) + 4
            said += " + DSA indexer key (fp8 + scale)"
        return layers * per_layer, False, f"{said} x {layers} layers, on every rank"
    heads = _int(c, "num_attention_heads") or 0
    kv_heads = _int(c, "num_key_value_heads") or heads
    head_dim = _int(c, "head_dim") or ((_int(c, "hidden_size") or 0) // heads if heads else 0)
    return (
        layers * 2 * kv_heads * head_dim * DEFAULT_KV_BYTES,
        True,
        f"K and V: {kv_heads} KV heads x {head_dim} x {DEFAULT_KV_BYTES} B x {layers} layers, split by TP",
    )


def from_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The facts a config.json gives, sizes estimated from its dimensions."""
    c = _text_config(cfg)
    layers = _int(c, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(c, "hidden_size", "n_embd", "d_model")
    routed = _int(c, "n_routed_experts", "num_local_experts", "num_experts")
    active = _int(c, "num_experts_per_tok", "num_experts_per_token", "moe_topk")
    shared = _int(c, "n_shared_experts", "num_shared_experts") or 0
    dtype = c.get("torch_dtype") or c.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype")
    quant = _quant(cfg)
    facts: dict[str, Any] = {
        "model_type": cfg.get("model_type"),
        "architectures": [str(a) for a in cfg.get("architectures") or []],
        "layers": layers,
        "hidden_size": hidden,
        "routed_experts": routed,
        "active_experts": active if routed else None,
        "shared_experts": shared if routed else None,
        "sparse_attention": bool(_int(c, "index_topk")),
        "dtype": str(dtype) if dtype else None,
        "quantization": quant,
        "attention": None,
        "weight_bytes": None,
        "active_weight_bytes": None,
        "kv_bytes_per_token": None,
        "kv_sharded": True,
        "how": [],
    }
    if not layers or not hidden:
        facts["how"].append("config.json gives no num_hidden_layers or hidden_size: no sizes")
        return facts
    attn, attention = _attention_params(c, hidden)
    facts["attention"] = attention
    inter = _int(c, "intermediate_size") or 0
    moe_inter = _int(c, "moe_intermediate_size") or inter
    dense_layers = min(layers, _int(c, "first_k_dense_replace") or 0) if routed else layers
    moe_layers = layers - dense_layers
    vocab = _int(c, "vocab_size") or 0
    head = hidden * vocab  # lm_head (the embedding gathers one row a token: not counted)
    dense = dense_layers * (attn + 3 * hidden * inter)
    expert = 3 * hidden * moe_inter
    moe_all = moe_layers * (attn + hidden * (routed or 0) + (routed or 0) * expert + shared * expert)
    moe_active = moe_layers * (attn + hidden * (routed or 0) + ((active or 0) + shared) * expert)
    per_weight, said = _bytes_per_weight(facts["dtype"], quant)
    if not math.isnan(per_weight):
        tied = bool(cfg.get("tie_word_embeddings"))
        total = dense + moe_all + head + (0 if tied else hidden * vocab)
        facts["weight_bytes"] = int(total * per_weight)
        facts["active_weight_bytes"] = int((dense + moe_active + head) * per_weight)
        facts["how"].append(
            f"weights estimated from config.json's dimensions: {said}"
            + (f"; experts at {active}/{routed} routed + {shared} shared" if routed else "")
        )
    else:
        facts["how"].append(f"weights not estimated: {said}")
    kv, sharded, kv_said = _kv_per_token(c, layers, attention)
    facts["kv_bytes_per_token"], facts["kv_sharded"] = kv, sharded
    facts["how"].append(f"KV a token: {kv_said}")
    return facts


def _gguf_scalar(meta: Mapping[str, Any], arch: str, key: str) -> int | None:
    v = meta.get(key.format(arch=arch))
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def from_gguf(headers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The facts the GGUF files' headers give (the first shard's metadata, every shard's tensors): exact sizes."""
    import gguf  # the gguf package's own tables: its key names and ggml's block sizes (GGML_QUANT_SIZES)

    meta = headers[0].get("metadata") or {}
    arch = str(meta.get(gguf.Keys.General.ARCHITECTURE) or "")
    k = gguf.Keys.LLM
    blocks = _gguf_scalar(meta, arch, k.BLOCK_COUNT)
    nextn = _gguf_scalar(meta, arch, k.NEXTN_PREDICT_LAYERS) or 0
    routed = _gguf_scalar(meta, arch, k.EXPERT_COUNT)
    active = _gguf_scalar(meta, arch, k.EXPERT_USED_COUNT)
    layers = blocks - nextn if blocks is not None else None
    by_type: dict[str, int] = {}
    total = read = 0
    for h in headers:
        for name, dims, type_id in h.get("tensors") or []:
            try:
                qtype = gguf.GGMLQuantizationType(int(type_id))
            except ValueError:
                return {"gguf_architecture": arch, "layers": layers, "how": [f"{name}: ggml type {type_id} unknown"]}
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            nbytes = math.prod(int(d) for d in dims) // block * size
            total += nbytes
            by_type[qtype.name] = by_type.get(qtype.name, 0) + nbytes
            bid = name.split(".")[1] if name.startswith("blk.") else ""
            if name.startswith("token_embd.") or (bid.isdigit() and layers is not None and int(bid) >= layers):
                continue  # one embedding row a token; multi-token-prediction layers unused without speculation
            read += nbytes * active // routed if "_exps." in name and routed and active else nbytes
    mix = ", ".join(
        f"{t} {b / total:.0%}" for t, b in sorted(by_type.items(), key=lambda kv: -kv[1]) if b / total >= 0.01
    )
    return {
        "gguf_architecture": arch or None,
        "layers": layers,
        "routed_experts": routed,
        "active_experts": active if routed else None,
        "shared_experts": _gguf_scalar(meta, arch, k.EXPERT_SHARED_COUNT) if routed else None,
        "sparse_attention": (gguf.Keys.Attention.Indexer.HEAD_COUNT.format(arch=arch) in meta),
        "quantization": mix or None,
        "weight_bytes": total,
        "active_weight_bytes": read,
        "how": [
            f"weights exact from the GGUF tensor table ({sum(len(h.get('tensors') or []) for h in headers)} tensors"
            f" in {len(headers)} file(s)): {mix}"
            + (f"; routed experts at {active}/{routed}" if routed else "")
            + (f"; {nextn} multi-token-prediction layer(s) not counted" if nextn else "")
        ],
    }


def read_model(
    headers_json: str, config_path: str | None, gguf_paths: Sequence[str]
) -> tuple[ModelFacts | None, list[str]]:
    """The model's facts from the host's model_headers reading: the config.json at `config_path` (the model's, or
    the tokenizer directory's beside a GGUF) and the GGUF files (the first shard first). None, with the reason,
    where the model is not on the host yet or its files do not parse."""
    try:
        doc = json.loads(headers_json) if headers_json.strip() else {}
    except ValueError as e:
        return None, [f"the host's model headers do not parse: {e}"]
    configs, ggufs = doc.get("configs") or {}, doc.get("gguf") or {}
    facts: dict[str, Any] = {k: None for k in ModelFacts.model_fields if k != "schema_version"}
    facts.update(architectures=[], sparse_attention=False, kv_sharded=True, how=[])
    problems: list[str] = []
    if config_path and config_path in configs:
        try:
            cfg = json.loads(configs[config_path])
        except ValueError as e:
            problems.append(f"{config_path} is not JSON ({e}): the model's config.json must be transformers' own")
        else:
            if isinstance(cfg, dict):
                facts.update(from_config(cfg), config=config_path)
    headers = [ggufs[p] for p in gguf_paths if p in ggufs]
    bad = [f"{p}: {ggufs[p]['error']}" for p in gguf_paths if p in ggufs and "error" in ggufs[p]]
    if bad:
        problems += [f"the GGUF header of {b}" for b in bad]
    elif headers:
        from_file = from_gguf(headers)
        how = facts["how"] + from_file.pop("how")
        # The file's exact sizes and types win over the config's estimate; the config's names stay.
        facts.update({k: v for k, v in from_file.items() if v is not None}, gguf=gguf_paths[0], how=how)
        facts["sparse_attention"] = facts["sparse_attention"] or from_file.get("sparse_attention", False)
    if facts["config"] is None and facts["gguf"] is None:
        return None, problems
    return ModelFacts(**facts), problems


def served_model(profile: Profile, headers_json: str | None) -> tuple[ModelFacts | None, list[str]]:
    """The profile's model as the host holds it: the config.json vLLM reads (the model directory's; for a GGUF file
    the --tokenizer directory's, where vLLM's GGUF plugin reads it) and the GGUF's shards. (None, []) where the host
    was not read or the model is not there yet (generated at the deploy, or not staged: the plan says so elsewhere)."""
    if headers_json is None:
        return None, []
    model = profile.model
    tokenizer = tokenizer_path(profile.vllm.extra_args, model)
    config_dir = model.host_path
    if model.file and tokenizer.startswith(model.container_path + "/"):
        config_dir = f"{model.host_path}/{tokenizer[len(model.container_path) + 1 :].rstrip('/')}"
    ggufs = [f"{model.host_path}/{n}" for n in gguf_shards(model.file)] if model.file else []
    return read_model(headers_json, f"{config_dir}/config.json", ggufs)
