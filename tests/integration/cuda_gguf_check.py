"""Run inside the CUDA runtime image by tests/integration/test_cuda_image.py (its text is passed to `python3 -c`;
the machine that builds the image has no GPU). It prints one JSON object:

- whether vllm-gguf-plugin is installed, registered where vLLM loads general plugins, and its compiled `_C_gguf`
  extension loads beside the image's torch (it links libcudart.so.13, libtorch_cuda.so);
- what the plugin's own weight-name mapping (weights_adapter.get_weights_adapter(...).build_name_map, the step
  its loader runs before reading any tensor) says about three architectures, built on torch's meta device:
  the tiny model's Llama, seed 004's GLM-5 (transformers' glm_moe_dsa: 78 layers, 256 routed experts, 8 active)
  and DeepSeek V3 (the MLA family the plugin names). Each answer is the plugin's, verbatim: a count of mapped
  tensors or its exception.
"""

import json
from importlib import metadata
from types import SimpleNamespace

out: dict[str, object] = {"plugin": metadata.version("vllm-gguf-plugin"), "gguf": metadata.version("gguf")}
out["entry_points"] = sorted(
    f"{e.name}={e.value}" for e in metadata.entry_points(group="vllm.general_plugins") if "gguf" in e.value
)
import vllm_gguf_plugin.ops as ops  # noqa: E402  (after the metadata: an import failure still prints the versions)
from transformers import AutoConfig  # noqa: E402
from vllm_gguf_plugin.weights_adapter import get_weights_adapter  # noqa: E402

out["c_extension"] = ops._C_gguf is not None


def _mapping(config: object) -> str:
    try:
        names = get_weights_adapter(config).build_name_map(SimpleNamespace(hf_config=config, trust_remote_code=False))
    except Exception as e:  # the plugin's answer, whatever it raises, is what is recorded
        return f"{type(e).__name__}: {e}"
    return f"mapped {len(names)} tensors"


llama = AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=512)  # fmt: skip
# transformers' defaults for glm_moe_dsa are GLM-5's shape; the three that identify it are stated anyway. DeepSeek
# V3 is the MLA family the plugin's code names (deepseek2): transformers 5 fuses its routed experts' weights.
glm5 = AutoConfig.for_model("glm_moe_dsa", num_hidden_layers=78, n_routed_experts=256, num_experts_per_tok=8)
dsv3 = AutoConfig.for_model("deepseek_v3", num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=8,
                            num_experts_per_tok=2, hidden_size=256, moe_intermediate_size=128,
                            vocab_size=512)  # fmt: skip
# By transformers' model_type, as the plan looks an answer up (serving/plan/servability.py).
out["model_types"] = {c.model_type: _mapping(c) for c in (llama, glm5, dsv3)}
print(json.dumps(out, sort_keys=True))
