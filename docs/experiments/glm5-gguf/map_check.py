#!/usr/bin/env python3
"""Run vllm-gguf-plugin 0.0.5's own name-mapping code against the tiny glm-dsa GGUF.

No vLLM here: the plugin modules that the mapping needs
(weights_adapter/default.py, weights_adapter/base.py, gguf_utils.py, weight_utils.py)
only import ``vllm.logger`` and ``vllm.transformers_utils.repo_utils`` from vLLM, so
those two are stubbed and the plugin package is loaded *without* running its
``__init__`` (which imports vLLM engine modules). Everything else is the real code:
the plugin's ``GGUFWeightsAdapter.build_name_map`` / ``get_weight_type_map`` /
``get_unquantized_modules`` / ``map_weights`` and ``weight_utils.gguf_quant_weights_iterator_multi``,
driven by transformers' real ``GlmMoeDsaForCausalLM`` built on the meta device
(exactly what default.py:162-167 does), with gguf 0.19.0's tensor_mapping.

Variants of default.py that are run:
  A  0.0.5 as shipped
  B  0.0.5 + one-line alias glm_moe_dsa -> "glm-dsa" (nothing else)
  C  0.0.5 + glm_moe_dsa added to the existing deepseek_v2/v3 branch (same special-casing, no more)
  C2 C + the transformers>=5 fused-expert sideload only (no attn_k_b/attn_v_b handling)
  D  0.0.5 + plugin-glm-dsa.diff (C + transformers>=5 fused-expert sideload + attn_k_b/attn_v_b -> kv_b_proj fusion)
and, for context, variant A on a tiny deepseek_v3 config (is the existing DeepSeek path ok under transformers 5?).
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import torch
from transformers import AutoConfig, DeepseekV3Config
from transformers import AutoModelForCausalLM

HERE = Path(__file__).resolve().parent
GGUF_PATH = HERE / "tiny-glm-dsa" / "tiny-glm-dsa-Q4_K_M.gguf"
ORIG = HERE / "src" / "plugin"
PATCHED = HERE / "src" / "plugin-patched"
VARIANTS = HERE / "src" / "variants"

logging.basicConfig(level=logging.ERROR)


# --------------------------------------------------------------------------- loading
def _stub_vllm() -> None:
    vllm = types.ModuleType("vllm")
    vllm.__path__ = []
    vlog = types.ModuleType("vllm.logger")
    vlog.init_logger = logging.getLogger
    tu = types.ModuleType("vllm.transformers_utils")
    tu.__path__ = []
    ru = types.ModuleType("vllm.transformers_utils.repo_utils")
    ru.list_filtered_repo_files = lambda *a, **k: []
    sys.modules.update(
        {
            "vllm": vllm,
            "vllm.logger": vlog,
            "vllm.transformers_utils": tu,
            "vllm.transformers_utils.repo_utils": ru,
        }
    )


def load_plugin(root: Path):
    """Import <root>/vllm_gguf_plugin/{weights_adapter/default,weight_utils}.py."""
    _stub_vllm()
    for name in [n for n in sys.modules if n == "vllm_gguf_plugin" or n.startswith("vllm_gguf_plugin.")]:
        del sys.modules[name]
    pkg = types.ModuleType("vllm_gguf_plugin")
    pkg.__path__ = [str(root / "vllm_gguf_plugin")]
    wa = types.ModuleType("vllm_gguf_plugin.weights_adapter")
    wa.__path__ = [str(root / "vllm_gguf_plugin" / "weights_adapter")]
    sys.modules["vllm_gguf_plugin"] = pkg
    sys.modules["vllm_gguf_plugin.weights_adapter"] = wa
    default = importlib.import_module("vllm_gguf_plugin.weights_adapter.default")
    weight_utils = importlib.import_module("vllm_gguf_plugin.weight_utils")
    return default, weight_utils


def make_variants() -> dict[str, Path]:
    src = (ORIG / "vllm_gguf_plugin" / "weights_adapter" / "default.py").read_text()
    variants = {}
    # B: alias only
    b = src.replace(
        '        if model_type == "gemma3_text":\n',
        '        if model_type == "glm_moe_dsa":\n            model_type = "glm-dsa"\n'
        '        if model_type == "gemma3_text":\n',
        1,
    )
    # C: join the deepseek branch (what deepseek_v2/v3 get today), nothing else
    c = src.replace(
        '        if model_type in ("deepseek_v3", "deepseek_v2"):\n            model_type = "deepseek2"\n',
        '        if model_type in ("deepseek_v3", "deepseek_v2", "glm_moe_dsa"):\n'
        '            model_type = "glm-dsa" if model_type == "glm_moe_dsa" else "deepseek2"\n',
        1,
    )
    # C2: C + the transformers>=5 fused-expert sideload, but no attn_k_b/attn_v_b handling
    patched = (PATCHED / "vllm_gguf_plugin" / "weights_adapter" / "default.py").read_text()
    kvb_block = """                # llama.cpp splits kv_b_proj per head into attn_k_b (k part,
                # transposed) and attn_v_b; map_weights() fuses them back.
                gguf_to_hf_name_map[f"blk.{idx}.attn_k_b.weight"] = (
                    f"model.layers.{idx}.self_attn.k_b_proj.weight"
                )
                gguf_to_hf_name_map[f"blk.{idx}.attn_v_b.weight"] = (
                    f"model.layers.{idx}.self_attn.v_b_proj.weight"
                )
"""
    c2 = patched.replace(kvb_block, "", 1)
    assert b != src and c != src and c2 != patched
    for tag, text in (("B", b), ("C", c), ("C2", c2)):
        root = VARIANTS / tag
        pkgdir = root / "vllm_gguf_plugin"
        (pkgdir / "weights_adapter").mkdir(parents=True, exist_ok=True)
        for f in ("gguf_utils.py", "weight_utils.py"):
            (pkgdir / f).write_text((ORIG / "vllm_gguf_plugin" / f).read_text())
        (pkgdir / "weights_adapter" / "base.py").write_text(
            (ORIG / "vllm_gguf_plugin" / "weights_adapter" / "base.py").read_text()
        )
        (pkgdir / "weights_adapter" / "default.py").write_text(text)
        variants[tag] = root
    return variants


# --------------------------------------------------------------------------- helpers
def hf_state_dict(config) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def vllm_side_names(sd: dict[str, tuple[int, ...]], n_experts: int) -> dict[str, tuple[int, ...]]:
    """HF names as vLLM's DeepseekV2 loader consumes them: fused experts -> per expert."""
    out = {}
    for name, shape in sd.items():
        if name.endswith(".mlp.experts.gate_up_proj"):
            e, two_f, h = shape
            base = name[: -len("gate_up_proj")]
            for i in range(e):
                out[f"{base}{i}.gate_proj.weight"] = (two_f // 2, h)
                out[f"{base}{i}.up_proj.weight"] = (two_f // 2, h)
        elif name.endswith(".mlp.experts.down_proj"):
            e, h, f = shape
            base = name[: -len("down_proj")]
            for i in range(e):
                out[f"{base}{i}.down_proj.weight"] = (h, f)
        else:
            out[name] = shape
    return out


def run_name_map(default_mod, config, label: str):
    adapter = default_mod.GGUFWeightsAdapter(config)
    mc = SimpleNamespace(hf_config=config, trust_remote_code=False)
    try:
        name_map = adapter.build_name_map(mc)
    except RuntimeError as e:
        msg = str(e)
        print(f"[{label}] build_name_map -> RuntimeError: {msg[:600]}{'...' if len(msg) > 600 else ''}")
        return adapter, None
    print(f"[{label}] build_name_map -> OK, {len(name_map)} entries")
    return adapter, name_map


def full_check(default_mod, weight_utils, config, label: str) -> dict:
    adapter, name_map = run_name_map(default_mod, config, label)
    if name_map is None:
        return {}
    reader = gguf.GGUFReader(str(GGUF_PATH))
    file_tensors = {t.name: t for t in reader.tensors}
    mapped = sorted(n for n in file_tensors if n in name_map)
    unmapped_gguf = sorted(n for n in file_tensors if n not in name_map)
    dangling = sorted(n for n in name_map if n not in file_tensors)

    sd = hf_state_dict(config)
    want = vllm_side_names(sd, config.n_routed_experts)

    weight_type_map = adapter.get_weight_type_map(str(GGUF_PATH), name_map)
    unquantized = adapter.get_unquantized_modules(weight_type_map)
    delivered: dict[str, tuple] = {}
    dup = []
    stream = adapter.map_weights(weight_utils.gguf_quant_weights_iterator_multi([str(GGUF_PATH)], name_map))
    qtypes: dict[str, int] = {}
    for name, w in stream:
        if name.endswith("qweight_type"):
            qtypes[name[: -len("qweight_type")]] = int(w.item())
            continue
        if name.endswith("qweight"):
            base = name[: -len("qweight")]
            qt = gguf.GGMLQuantizationType(qtypes.get(base, qtypes.get(base.replace(".experts." + base.split(".experts.")[-1].split(".")[0] + ".", ".experts.0."), 0)))
            logical = tuple(int(x) for x in gguf.quant_shape_from_byte_shape(tuple(w.shape), qt))
            key = (base + "weight").replace("qweights_proj", "weights_proj")
            val = (logical, qt.name)
        else:
            key = name
            val = (tuple(w.shape), str(w.dtype).replace("torch.", ""))
        if key in delivered:
            dup.append(key)
        delivered[key] = val

    missing = sorted(n for n in want if n not in delivered)
    extra = sorted(n for n in delivered if n not in want)
    shape_bad = sorted(
        f"{n}: delivered {delivered[n][0]} vs HF {want[n]}"
        for n in want
        if n in delivered and tuple(delivered[n][0]) != tuple(want[n])
    )
    print(f"[{label}] GGUF tensors in file            : {len(file_tensors)}")
    print(f"[{label}] GGUF tensors mapped             : {len(mapped)}")
    print(f"[{label}] GGUF tensors left unmapped      : {len(unmapped_gguf)} -> {unmapped_gguf}")
    print(f"[{label}] map entries with no GGUF tensor : {len(dangling)}")
    print(f"[{label}] HF/vLLM params expected          : {len(want)} (HF state_dict {len(sd)}, fused experts expanded)")
    print(f"[{label}] params delivered by the loader  : {len(delivered)}")
    print(f"[{label}] HF params with no GGUF tensor   : {len(missing)} -> {missing}")
    print(f"[{label}] delivered names not in HF model : {len(extra)} -> {extra}")
    print(f"[{label}] shape mismatches                : {len(shape_bad)} -> {shape_bad}")
    print(f"[{label}] duplicate deliveries            : {len(dup)} -> {dup}")
    return dict(
        name_map=name_map,
        mapped=mapped,
        unmapped_gguf=unmapped_gguf,
        dangling=dangling,
        missing=missing,
        extra=extra,
        delivered=delivered,
        unquantized=unquantized,
        weight_type_map=weight_type_map,
        want=want,
        sd=sd,
    )


def kv_b_roundtrip(default_mod) -> None:
    """llama.cpp split (conversion/deepseek.py) then the patched fusion must give kv_b back."""
    H, nope, v, L = 4, 96, 128, 64
    rng = np.random.default_rng(0)
    hf_kv_b = torch.from_numpy(rng.standard_normal((H * (nope + v), L)).astype(np.float32))
    kv_b = hf_kv_b.view(H, nope + v, L)
    k_b, v_b = torch.split(kv_b, [nope, v], dim=1)
    k_b = k_b.transpose(1, 2).contiguous()  # what llama.cpp writes as attn_k_b
    adapter = default_mod.GGUFWeightsAdapter(None)
    # F32 halves (iterator yields ".weight")
    out = list(adapter.map_weights(iter([
        ("model.layers.0.self_attn.k_b_proj.weight", k_b),
        ("model.layers.0.self_attn.v_b_proj.weight", v_b.contiguous()),
    ])))
    assert len(out) == 1 and out[0][0] == "model.layers.0.self_attn.kv_b_proj.weight"
    exact = torch.equal(out[0][1], hf_kv_b)
    # Q8_0 halves (iterator yields qweight_type then qweight, raw uint8)
    q8 = gguf.GGMLQuantizationType.Q8_0
    kq = torch.from_numpy(gguf.quants.quantize(k_b.numpy(), q8))
    vq = torch.from_numpy(gguf.quants.quantize(v_b.contiguous().numpy(), q8))
    out = list(adapter.map_weights(iter([
        ("model.layers.0.self_attn.k_b_proj.qweight_type", torch.tensor(int(q8))),
        ("model.layers.0.self_attn.k_b_proj.qweight", kq),
        ("model.layers.0.self_attn.v_b_proj.qweight_type", torch.tensor(int(q8))),
        ("model.layers.0.self_attn.v_b_proj.qweight", vq),
    ])))
    err = (out[0][1] - hf_kv_b).abs().max().item() / hf_kv_b.abs().max().item()
    print(f"[D] kv_b fusion: F32 halves exact inverse of llama.cpp split = {exact}; "
          f"Q8_0 halves rel. max error = {err:.4f} (shape {tuple(out[0][1].shape)})")
    # and the halves actually in the tiny file, re-split must equal them
    r = gguf.GGUFReader(str(GGUF_PATH))
    t = {x.name: x for x in r.tensors}
    kf = gguf.quants.dequantize(t["blk.1.attn_k_b.weight"].data, t["blk.1.attn_k_b.weight"].tensor_type)
    vf = gguf.quants.dequantize(t["blk.1.attn_v_b.weight"].data, t["blk.1.attn_v_b.weight"].tensor_type)
    out = list(adapter.map_weights(iter([
        ("p.self_attn.k_b_proj.qweight_type", torch.tensor(int(t["blk.1.attn_k_b.weight"].tensor_type))),
        ("p.self_attn.k_b_proj.qweight", torch.tensor(t["blk.1.attn_k_b.weight"].data)),
        ("p.self_attn.v_b_proj.qweight_type", torch.tensor(int(t["blk.1.attn_v_b.weight"].tensor_type))),
        ("p.self_attn.v_b_proj.qweight", torch.tensor(t["blk.1.attn_v_b.weight"].data)),
    ])))
    fused = out[0][1].view(H, nope + v, L)
    ok = torch.equal(fused[:, :nope, :].transpose(1, 2), torch.from_numpy(kf)) and torch.equal(fused[:, nope:, :], torch.from_numpy(vf))
    print(f"[D] kv_b fusion of the tiny file's blk.1 halves re-splits to the dequantized halves exactly = {ok}")


def main() -> int:
    config = AutoConfig.from_pretrained(HERE / "tiny-glm-dsa")
    print(f"config: {type(config).__name__} model_type={config.model_type} "
          f"layers={config.num_hidden_layers} mlp_layer_types={config.mlp_layer_types}")
    print(f"gguf arch for glm-dsa: {gguf.MODEL_ARCH.GLM_DSA!r} -> {gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GLM_DSA]!r}")
    variants = make_variants()

    print("\n=== A: vllm-gguf-plugin 0.0.5 as shipped ===")
    default_a, _ = load_plugin(ORIG)
    run_name_map(default_a, config, "A")

    print("\n=== A on a tiny deepseek_v3 config (transformers %s) ===" % __import__("transformers").__version__)
    ds = DeepseekV3Config(
        vocab_size=256, hidden_size=256, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64,
        kv_lora_rank=64, qk_nope_head_dim=96, qk_rope_head_dim=32, v_head_dim=128,
        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
        n_group=1, topk_group=1,
    )
    run_name_map(default_a, ds, "A/deepseek_v3")

    print("\n=== B: + alias glm_moe_dsa -> glm-dsa only ===")
    default_b, wu_b = load_plugin(variants["B"])
    run_name_map(default_b, config, "B")

    print("\n=== C: + glm_moe_dsa in the deepseek_v2/v3 branch (today's DeepSeek special-casing) ===")
    default_c, wu_c = load_plugin(variants["C"])
    run_name_map(default_c, config, "C")

    print("\n=== D: + plugin-glm-dsa.diff ===")
    default_d, wu_d = load_plugin(PATCHED)
    res = full_check(default_d, wu_d, config, "D")
    run_name_map(default_d, ds, "D/deepseek_v3")
    print(f"[D] unquantized modules (F32/F16/BF16 in GGUF, or fused kv_b): {len(res['unquantized'])}")
    for m in res["unquantized"]:
        if ".layers.1." in m or "layers" not in m:
            print(f"      {m}")
    kv_b_roundtrip(default_d)

    print("\n[D] GGUF -> HF name map, top level + layer 0 (dense) + layer 1 (MoE) (present in the file):")
    for g in res["mapped"]:
        if g.startswith(("blk.0.", "blk.1.")) or not g.startswith("blk."):
            print(f"      {g:36s} -> {res['name_map'][g]}")
    print("\n[D] map entries whose GGUF name is absent from the file (harmless, skipped by the iterator):")
    for g in res["dangling"]:
        print(f"      {g!r:40s} -> {res['name_map'][g]}")

    # what is left once only the expert sideload is fixed: the silent kv_b_proj gap
    print("\n=== C2: C + fused-expert sideload, without the attn_k_b/attn_v_b fusion ===")
    default_c2, wu_c2 = load_plugin(variants["C2"])
    full_check(default_c2, wu_c2, config, "C2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
