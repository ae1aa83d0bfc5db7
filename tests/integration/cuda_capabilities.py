"""Run inside the CUDA runtime image by tests/integration/test_cuda_image.py (its text is passed to `python3 -c`; the
machine that builds the image has no GPU, so nothing here initialises CUDA). It prints one JSON object, what the
pinned vLLM offers as the plan's servability check reads it (serving/plan/servability.py):

- `architectures`: vLLM's model registry (ModelRegistry.get_supported_archs());
- `quantization`: each quantization method's minimum compute capability (get_min_capability(), e.g. 75 for 7.5);
- `attention`: for each class's compute capability (8.6: RTX 3090; 12.0: RTX PRO 6000 Blackwell) and each MLA kind
  (plain MLA, DeepSeek sparse MLA), the backends vLLM's CUDA selector tries in order (vllm/platforms/cuda.py
  _get_backend_priorities, executed from its source text: importing that module loads vLLM's CUDA extension, which
  needs the driver's libcuda) and each one's own answer to validate_configuration for GLM-5's attention (MLA head
  size kv_lora_rank 512 + qk_rope_head_dim 64, bf16, 8 heads a rank at TP=8, index_topk 2048); `accepted` are
  those with no reason to refuse. Every answer is vLLM's, verbatim; a backend that cannot be asked records why.
"""

import __future__

import ast
import inspect
import json
import os
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

CAPABILITIES = {"8.6": (8, 6), "12.0": (12, 0)}
# GLM-5's attention as vLLM's sparse-MLA backends read it from hf_text_config (transformers' glm_moe_dsa defaults).
GLM5 = {
    "model_type": "glm_moe_dsa", "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "kv_lora_rank": 512,
    "v_head_dim": 256, "index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128, "num_attention_heads": 64,
}  # fmt: skip
HEAD_SIZE, HEADS_PER_RANK = 576, 8


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


def _priorities():  # type: ignore[no-untyped-def]
    import vllm.platforms as platforms
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    path = Path(platforms.__file__).parent / "cuda.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities")
    fn.decorator_list = []
    ns: dict[str, object] = {"AttentionBackendEnum": AttentionBackendEnum}
    flags = __future__.annotations.compiler_flag
    code = compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec", flags=flags, dont_inherit=True)
    exec(code, ns)  # vLLM's own function, from its own source
    return ns["_get_backend_priorities"]


def _validate(backend, capability, sparse):  # type: ignore[no-untyped-def]
    import torch
    import vllm.config.vllm as vcfg

    cls = backend.get_class()
    args = {"head_size": HEAD_SIZE, "dtype": torch.bfloat16, "kv_cache_dtype": "auto", "block_size": None,
            "use_mla": True, "has_sink": False, "use_sparse": sparse, "use_mm_prefix": False,
            "use_per_head_quant_scales": False, "device_capability": capability, "attn_type": "decoder"}  # fmt: skip
    params = inspect.signature(cls.validate_configuration).parameters
    text = SimpleNamespace(**GLM5)
    # The hooks read the current vLLM config's model and parallel settings: a stand-in with GLM-5's (a real
    # VllmConfig needs a device).
    old = vcfg._current_vllm_config
    vcfg._current_vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(hf_text_config=text, hf_config=text),
        parallel_config=SimpleNamespace(prefill_context_parallel_size=1, decode_context_parallel_size=1,
                                        tensor_parallel_size=8),
    )  # fmt: skip
    try:
        return list(cls.validate_configuration(**{k: v for k, v in args.items() if k in params}))
    finally:
        vcfg._current_vllm_config = old


def attention() -> dict[str, object]:
    from vllm.platforms.interface import DeviceCapability

    priorities = _priorities()
    out: dict[str, object] = {}
    for cc, (major, minor) in CAPABILITIES.items():
        cap = DeviceCapability(major, minor)
        kinds: dict[str, object] = {}
        for kind, sparse in (("mla", False), ("sparse_mla", True)):
            tried = priorities(use_mla=True, device_capability=cap, num_heads=HEADS_PER_RANK, kv_cache_dtype="auto",
                               head_size=HEAD_SIZE)  # fmt: skip
            reasons: dict[str, object] = {}
            for b in tried:
                try:
                    reasons[b.name] = _validate(b, cap, sparse)
                except Exception as e:  # the backend's own failure is its answer
                    reasons[b.name] = [_err(e)]
            kinds[kind] = {"tried": [b.name for b in tried], "reasons": reasons,
                           "accepted": [n for n, r in reasons.items() if r == []]}  # fmt: skip
        out[cc] = kinds
    return out


def quantization() -> dict[str, object]:
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config

    out: dict[str, object] = {}
    for m in QUANTIZATION_METHODS:
        try:
            out[m] = int(get_quantization_config(m).get_min_capability())
        except Exception as e:
            out[m] = _err(e)
    return out


def main() -> None:
    import vllm
    from vllm.model_executor.models.registry import ModelRegistry

    print(json.dumps({"vllm": vllm.__version__, "architectures": sorted(ModelRegistry.get_supported_archs()),
                      "quantization": quantization(), "attention": attention()}, sort_keys=True))  # fmt: skip


main()
