#!/usr/bin/env python3
"""Write a tiny GGUF of llama.cpp architecture ``glm-dsa`` (GLM-5) plus a matching
HF ``glm_moe_dsa`` config.json, then read the file back with gguf's GGUFReader.

Everything here imitates what llama.cpp's converter writes for GLM-5
(conversion/glm.py ``GlmMoeDsaModel(DeepseekV2Model)`` + conversion/deepseek.py
``DeepseekV2Model`` + conversion/base.py ``TextModel.set_gguf_parameters``):

* tensor names: gguf 0.19.0 ``TENSOR_NAMES`` for ``MODEL_TENSORS[GLM_DSA]``;
* tensor shapes: numpy (== torch) order as handed to GGUFWriter, so GGUF ``ne``
  is the reverse (llama.cpp's dims order);
* ``kv_b_proj`` is NOT written; like llama.cpp (DeepseekV2Model.modify_tensors) it
  is split per head into ``attn_k_b`` (H, kv_lora, nope) [k transposed] and
  ``attn_v_b`` (H, v, kv_lora);
* routed experts are merged 3-D tensors ``ffn_{gate,up,down}_exps`` (E, out, in);
* the NextN/MTP block is appended as ``blk.{num_hidden_layers}`` with the full
  decoder-layer tensors plus ``nextn.*`` (llama.cpp GlmMoeDsaModel keeps MTP;
  block_count = num_hidden_layers + num_nextn_predict_layers).

Scaled-down GLM-5 (real values in comments). Q4_K needs rows % 256 == 0, so the
hidden size is 256 (not 64) to let every hidden-sized row be Q4_K.

gguf 0.19.0 cannot quantize Q4_K in Python (gguf.quants.Q4_K has only
dequantize_blocks; quantize() raises NotImplementedError), so this file carries
its own small Q4_K encoder (simple min/max per 32-value sub-block, 6-bit scales),
checked here against gguf.quants.dequantize. It is NOT llama.cpp's
make_qkx2_quants search: block layout is identical, rounding choices differ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

OUT_DIR = Path(__file__).resolve().parent / "tiny-glm-dsa"
GGUF_PATH = OUT_DIR / "tiny-glm-dsa-Q4_K_M.gguf"
CONFIG_PATH = OUT_DIR / "config.json"

SEED = 1234

# ---- scaled GLM-5 hyper-parameters (real GLM-5 value in the comment) --------
CFG = dict(
    vocab_size=256,            # 154880
    hidden_size=256,           # 6144
    intermediate_size=768,     # 12288 (dense MLP of the first_k_dense_replace layers)
    moe_intermediate_size=512, # 2048 (512 != hidden so a transposed expert tensor would show in shape checks)
    num_hidden_layers=3,       # 78
    num_attention_heads=4,     # 64
    num_key_value_heads=4,     # 64
    q_lora_rank=64,            # 2048
    kv_lora_rank=64,           # 512
    qk_nope_head_dim=96,       # 192
    qk_rope_head_dim=32,       # 64
    v_head_dim=128,            # 256
    n_routed_experts=8,        # 256
    n_shared_experts=1,        # 1
    num_experts_per_tok=2,     # 8
    first_k_dense_replace=1,   # 3
    index_n_heads=4,           # 32
    index_head_dim=64,         # 128
    index_topk=16,             # 2048
    num_nextn_predict_layers=1,# 1
    routed_scaling_factor=2.5, # 2.5
    rms_norm_eps=1e-5,         # 1e-5
    rope_theta=1000000.0,      # 1000000 (from tiny derivatives of the zai-org config; see findings.md)
    max_position_embeddings=202752,  # 202752
)


def hf_config() -> dict:
    c = CFG
    L = c["num_hidden_layers"]
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": [252, 255],
        "pad_token_id": 252,
        "dtype": "bfloat16",
        "ep_size": 1,
        "first_k_dense_replace": c["first_k_dense_replace"],
        "head_dim": c["qk_rope_head_dim"],
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "index_head_dim": c["index_head_dim"],
        "index_n_heads": c["index_n_heads"],
        "index_topk": c["index_topk"],
        "indexer_rope_interleave": True,
        "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"],
        "kv_lora_rank": c["kv_lora_rank"],
        "max_position_embeddings": c["max_position_embeddings"],
        "mlp_layer_types": ["dense"] * c["first_k_dense_replace"]
        + ["sparse"] * (L - c["first_k_dense_replace"]),
        "moe_intermediate_size": c["moe_intermediate_size"],
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": c["n_shared_experts"],
        "norm_topk_prob": True,
        "num_attention_heads": c["num_attention_heads"],
        "num_experts_per_tok": c["num_experts_per_tok"],
        "num_hidden_layers": L,
        "num_key_value_heads": c["num_key_value_heads"],
        "num_nextn_predict_layers": c["num_nextn_predict_layers"],
        "pretraining_tp": 1,
        "q_lora_rank": c["q_lora_rank"],
        "qk_head_dim": c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": c["rope_theta"], "rope_type": "default"},
        "routed_scaling_factor": c["routed_scaling_factor"],
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "use_cache": True,
        "v_head_dim": c["v_head_dim"],
        "vocab_size": c["vocab_size"],
    }


# ---- a small Q4_K encoder ----------------------------------------------------
QK_K = 256


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Encode float32 ``x`` (last dim % 256 == 0) as Q4_K blocks (144 bytes / 256 values).

    Layout (ggml block_q4_K): f16 d, f16 dmin, u8 scales[12], u8 qs[128];
    value = d*sc[j]*q - dmin*m[j] for sub-block j (32 values), q in 0..15.
    Packing mirrors gguf.quants.Q4_K.get_scale_min / dequantize_blocks.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % QK_K:
        raise ValueError(f"Q4_K needs last dim % 256 == 0, got {x.shape}")
    out_shape = (*x.shape[:-1], x.shape[-1] // QK_K * 144)
    blocks = x.reshape(-1, 8, 32)                           # (nb, 8 sub-blocks, 32)
    nb = blocks.shape[0]
    mn = np.minimum(blocks.min(axis=-1), 0.0)               # (nb, 8) <= 0
    mx = blocks.max(axis=-1)
    scale = (mx - mn) / 15.0                                 # (nb, 8) >= 0
    d = scale.max(axis=-1) / 63.0                            # (nb,)
    dmin = (-mn).max(axis=-1) / 63.0
    d16 = d.astype(np.float16)
    dmin16 = dmin.astype(np.float16)
    d_f = d16.astype(np.float32)
    dmin_f = dmin16.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d_f[:, None] > 0, np.rint(scale / d_f[:, None]), 0)
        m = np.where(dmin_f[:, None] > 0, np.rint(-mn / dmin_f[:, None]), 0)
    sc = np.clip(sc, 0, 63).astype(np.uint8)
    m = np.clip(m, 0, 63).astype(np.uint8)
    eff_scale = (d_f[:, None] * sc)[..., None]               # (nb, 8, 1)
    eff_min = (dmin_f[:, None] * m)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(eff_scale > 0, np.rint((blocks + eff_min) / eff_scale), 0)
    q = np.clip(q, 0, 15).astype(np.uint8)                   # (nb, 8, 32)

    scales = np.zeros((nb, 12), dtype=np.uint8)
    for j in range(4):
        scales[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] & 0x30) << 2)
        scales[:, 4 + j] = (m[:, j] & 63) | ((m[:, j + 4] & 0x30) << 2)
        scales[:, 8 + j] = (sc[:, j + 4] & 0x0F) | ((m[:, j + 4] & 0x0F) << 4)
    qs = np.zeros((nb, 4, 32), dtype=np.uint8)
    for c in range(4):
        qs[:, c, :] = q[:, 2 * c, :] | (q[:, 2 * c + 1, :] << 4)

    raw = np.concatenate(
        [
            d16.reshape(nb, 1).view(np.uint8),
            dmin16.reshape(nb, 1).view(np.uint8),
            scales,
            qs.reshape(nb, 128),
        ],
        axis=1,
    )
    assert raw.shape[1] == 144
    return raw.reshape(out_shape)


def encode(data: np.ndarray, qtype: QT) -> np.ndarray:
    if qtype == QT.F32:
        return data.astype(np.float32)
    if qtype == QT.F16:
        return data.astype(np.float16)
    if qtype == QT.Q4_K:
        return quantize_q4_k(data)
    return gguf.quants.quantize(data.astype(np.float32), qtype)


# ---- tensor plan (names = gguf TENSOR_NAMES, shapes = numpy/torch order) -----
def tensor_plan() -> list[tuple[str, tuple[int, ...], QT]]:
    c = CFG
    H = c["hidden_size"]
    nh = c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    plan: list[tuple[str, tuple[int, ...], QT]] = [
        ("token_embd.weight", (c["vocab_size"], H), QT.Q4_K),
        ("output_norm.weight", (H,), QT.F32),
        ("output.weight", (c["vocab_size"], H), QT.Q8_0),   # llama.cpp Q4_K_M uses Q6_K here; no Python Q6_K encoder
    ]
    n_blocks = c["num_hidden_layers"] + c["num_nextn_predict_layers"]
    for i in range(n_blocks):
        b = f"blk.{i}"
        plan += [
            (f"{b}.attn_norm.weight", (H,), QT.F32),
            (f"{b}.attn_q_a.weight", (c["q_lora_rank"], H), QT.Q4_K),
            (f"{b}.attn_q_a_norm.weight", (c["q_lora_rank"],), QT.F32),
            (f"{b}.attn_q_b.weight", (nh * qk, c["q_lora_rank"]), QT.Q8_0),
            (f"{b}.attn_kv_a_mqa.weight", (c["kv_lora_rank"] + c["qk_rope_head_dim"], H), QT.Q4_K),
            (f"{b}.attn_kv_a_norm.weight", (c["kv_lora_rank"],), QT.F32),
            # kv_b_proj split the llama.cpp way: k_b transposed per head
            (f"{b}.attn_k_b.weight", (nh, c["kv_lora_rank"], c["qk_nope_head_dim"]), QT.Q8_0),
            (f"{b}.attn_v_b.weight", (nh, c["v_head_dim"], c["kv_lora_rank"]), QT.Q8_0),
            (f"{b}.attn_output.weight", (H, nh * c["v_head_dim"]), QT.Q4_K),
            # DSA lightning indexer
            (f"{b}.indexer.attn_q_b.weight", (c["index_n_heads"] * c["index_head_dim"], c["q_lora_rank"]), QT.Q8_0),
            (f"{b}.indexer.attn_k.weight", (c["index_head_dim"], H), QT.Q4_K),
            (f"{b}.indexer.k_norm.weight", (c["index_head_dim"],), QT.F32),
            (f"{b}.indexer.k_norm.bias", (c["index_head_dim"],), QT.F32),
            (f"{b}.indexer.proj.weight", (c["index_n_heads"], H), QT.F16),
            (f"{b}.ffn_norm.weight", (H,), QT.F32),
        ]
        if i < c["first_k_dense_replace"]:
            I = c["intermediate_size"]
            plan += [
                (f"{b}.ffn_gate.weight", (I, H), QT.Q4_K),
                (f"{b}.ffn_up.weight", (I, H), QT.Q4_K),
                (f"{b}.ffn_down.weight", (H, I), QT.Q4_K),
            ]
        else:
            E, F = c["n_routed_experts"], c["moe_intermediate_size"]
            S = F * c["n_shared_experts"]
            plan += [
                (f"{b}.ffn_gate_inp.weight", (E, H), QT.F32),
                (f"{b}.exp_probs_b.bias", (E,), QT.F32),
                (f"{b}.ffn_gate_exps.weight", (E, F, H), QT.Q4_K),
                (f"{b}.ffn_up_exps.weight", (E, F, H), QT.Q4_K),
                (f"{b}.ffn_down_exps.weight", (E, H, F), QT.Q4_K),
                (f"{b}.ffn_gate_shexp.weight", (S, H), QT.Q4_K),
                (f"{b}.ffn_up_shexp.weight", (S, H), QT.Q4_K),
                (f"{b}.ffn_down_shexp.weight", (H, S), QT.Q4_K),
            ]
        if i >= c["num_hidden_layers"]:  # NextN / MTP block
            plan += [
                (f"{b}.nextn.eh_proj.weight", (H, 2 * H), QT.F16),
                (f"{b}.nextn.enorm.weight", (H,), QT.F32),
                (f"{b}.nextn.hnorm.weight", (H,), QT.F32),
                (f"{b}.nextn.shared_head_norm.weight", (H,), QT.F32),
            ]
    return plan


def write_metadata(w: gguf.GGUFWriter) -> None:
    c = CFG
    w.add_name("tiny-glm-dsa")
    # TextModel.set_gguf_parameters
    w.add_block_count(c["num_hidden_layers"] + c["num_nextn_predict_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(1)  # DeepseekV2Model forces num_key_value_heads = 1 (MLA -> MQA)
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(c["n_routed_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_group_count(1)
    w.add_expert_group_used_count(1)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    # DeepseekV2Model.set_gguf_parameters (config's head_dim key/value lengths are overwritten here)
    w.add_leading_dense_block_count(c["first_k_dense_replace"])
    w.add_vocab_size(c["vocab_size"])
    w.add_q_lora_rank(c["q_lora_rank"])
    w.add_kv_lora_rank(c["kv_lora_rank"])
    w.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
    w.add_value_length(c["kv_lora_rank"])
    w.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
    w.add_value_length_mla(c["v_head_dim"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_count(c["n_shared_experts"])
    w.add_expert_weights_scale(c["routed_scaling_factor"])
    w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(c["qk_rope_head_dim"])  # GlmMoeDsaModel: qk_rope_head_dim * partial_rotary_factor(1.0)
    # GlmMoeDsaModel.set_gguf_parameters
    w.add_nextn_predict_layers(c["num_nextn_predict_layers"])
    w.add_indexer_head_count(c["index_n_heads"])
    w.add_indexer_key_length(c["index_head_dim"])
    w.add_indexer_top_k(c["index_topk"])
    # vocab (GLM style: gpt2 BPE, pre-tokenizer "glm4"); tiny byte-level stand-in
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_tokens = [chr(ch) for _, ch in sorted(zip(bs, cs))]
    specials = ["<|endoftext|>", "[gMASK]", "<sop>", "<|user|>"]
    tokens = byte_tokens[:252] + specials
    toktypes = [gguf.TokenType.NORMAL] * 252 + [gguf.TokenType.CONTROL] * 4
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_merges([f"{byte_tokens[ord('a')]} {byte_tokens[ord('b')]}"])
    w.add_eos_token_id(252)
    w.add_pad_token_id(252)
    w.add_bos_token_id(252)
    w.add_unk_token_id(252)
    w.add_eot_token_id(255)


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(str(GGUF_PATH), arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GLM_DSA])
    write_metadata(w)

    q4k_err = []
    for name, shape, qtype in tensor_plan():
        if name.endswith("norm.weight") or name.endswith("enorm.weight") or name.endswith("hnorm.weight"):
            data = (1.0 + 0.02 * rng.standard_normal(shape)).astype(np.float32)
        elif name.endswith(".bias"):
            data = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        else:
            data = (0.05 * rng.standard_normal(shape)).astype(np.float32)
        enc = encode(data, qtype)
        if qtype == QT.Q4_K:
            back = gguf.quants.dequantize(enc, QT.Q4_K).reshape(data.shape)
            q4k_err.append(float(np.abs(back - data).max() / np.abs(data).max()))
        if qtype in (QT.F32, QT.F16):
            w.add_tensor(name, enc)
        else:
            w.add_tensor(name, enc, raw_dtype=qtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    CONFIG_PATH.write_text(json.dumps(hf_config(), indent=2) + "\n")
    print(f"wrote {GGUF_PATH} ({GGUF_PATH.stat().st_size} bytes) and {CONFIG_PATH}")
    print(f"Q4_K self-check via gguf.quants.dequantize: {len(q4k_err)} tensors, "
          f"max relative abs error {max(q4k_err):.4f}")

    # ---- read back -------------------------------------------------------
    r = gguf.GGUFReader(str(GGUF_PATH))
    arch = bytes(r.get_field("general.architecture").parts[-1]).decode()
    print(f"\ngeneral.architecture = {arch!r}")
    print("metadata (non-tokenizer):")
    for key, field in r.fields.items():
        if key.startswith(("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "GGUF.")):
            continue
        val = field.contents()
        print(f"  {key} = {val!r}")
    print(f"  tokenizer.ggml.tokens: {len(r.get_field('tokenizer.ggml.tokens').contents())} entries")
    counts: dict[str, int] = {}
    print(f"\n{len(r.tensors)} tensors (name | GGUF ne | numpy shape of the payload | type):")
    for t in r.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        print(f"  {t.name:40s} ne={list(map(int, t.shape))!s:18s} data={tuple(t.data.shape)!s:16s} {t.tensor_type.name}")
    print(f"\ntypes: {counts}")
    # dequantize round-trip on one Q4_K and one Q8_0 tensor through the reader
    for t in r.tensors:
        if t.name in ("blk.1.ffn_gate_exps.weight", "blk.0.attn_k_b.weight"):
            deq = gguf.quants.dequantize(t.data, t.tensor_type)
            print(f"reader dequant {t.name}: {t.tensor_type.name} -> float shape {deq.shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
