"""The served model's facts (serving/plan/model_facts.py), each checked against a figure that was not made by the
code under test: the tiny model's weights against the size of the file its generator wrote, GLM-5's parameter counts
against the ones Z.ai publishes for it, and a GGUF's exact sizes against ggml's block sizes."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest

from serving.plan.model_facts import from_config, from_gguf, read_model
from tests.helpers.ansible_run import load_library_module
from tests.helpers.gguf_files import write_gguf

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "models"


def test_the_tiny_models_config_gives_its_weights_as_its_generator_wrote_them() -> None:
    """tests/fixtures/models/README.md: the config.json images/vllm/tinymodel.py wrote, and its model.safetensors
    of 17,839,216 bytes (float32 weights, plus the safetensors header and the norms the estimate leaves out)."""
    facts = from_config(json.loads((FIXTURES / "tiny-llama.config.json").read_text()))
    assert facts["layers"] == 4 and facts["attention"] == "gqa" and facts["routed_experts"] is None
    assert facts["weight_bytes"] == pytest.approx(17_839_216, rel=0.002)
    # A decode step reads every layer and the output head, not the embedding matrix (one row a token).
    layers = 4 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 512)
    assert facts["active_weight_bytes"] == (layers + 4096 * 256) * 4
    # K and V of 2 KV heads of 64, at 2 bytes, in 4 layers: split by tensor parallelism.
    assert facts["kv_bytes_per_token"] == 4 * 2 * 2 * 64 * 2 and facts["kv_sharded"] is True


def test_glm5s_config_gives_the_parameter_counts_its_makers_publish() -> None:
    """GLM-5 (tests/fixtures/models/README.md): 744B parameters, 40B active, as Z.ai publishes them; at bf16."""
    facts = from_config(json.loads((FIXTURES / "glm-5.config.json").read_text()))
    assert facts["model_type"] == "glm_moe_dsa" and facts["layers"] == 78
    assert facts["attention"] == "mla" and facts["sparse_attention"] is True
    assert (facts["routed_experts"], facts["active_experts"], facts["shared_experts"]) == (256, 8, 1)
    assert facts["weight_bytes"] / 2 == pytest.approx(744e9, rel=0.01)
    assert facts["active_weight_bytes"] / 2 == pytest.approx(40e9, rel=0.03)
    # MLA caches the 512-wide latent and the 64-wide rope key, the same on every rank; DSA's indexer its key.
    assert facts["kv_bytes_per_token"] == 78 * ((512 + 64) * 2 + 128 + 4) and facts["kv_sharded"] is False


def _gguf(path: Path, blocks: int, nextn: int) -> None:
    def fill(w: gguf.GGUFWriter) -> None:
        w.add_block_count(blocks + nextn)
        w.add_uint32("glm-dsa.nextn_predict_layers", nextn)
        w.add_expert_count(8)
        w.add_expert_used_count(2)
        w.add_uint32("glm-dsa.attention.indexer.head_count", 4)
        q4k = gguf.GGMLQuantizationType.Q4_K
        w.add_tensor("token_embd.weight", np.zeros((16, 256), dtype=np.float16))
        for b in range(blocks + nextn):
            w.add_tensor(f"blk.{b}.attn_q_a.weight", np.zeros((64, 144), dtype=np.uint8), raw_dtype=q4k)
            w.add_tensor(f"blk.{b}.ffn_gate_exps.weight", np.zeros((8, 32, 144), dtype=np.uint8), raw_dtype=q4k)
        w.add_tensor("output.weight", np.zeros((16, 210), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q6_K)

    write_gguf(path, "glm-dsa", fill)


def test_a_ggufs_sizes_are_exact_and_a_step_reads_its_active_experts_only(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _gguf(path, blocks=2, nextn=1)
    hr = load_library_module("refdeploy_host_readings")
    facts = from_gguf([hr.gguf_header(str(path))])
    q, exps, out, embd = 64 * 144, 8 * 32 * 144, 16 * 210, 16 * 256 * 2  # bytes: ggml's block sizes, by hand
    assert facts["weight_bytes"] == embd + 3 * (q + exps) + out
    # The multi-token-prediction block and the embedding are not read by a decode step; experts at 2 of 8.
    assert facts["active_weight_bytes"] == 2 * (q + exps * 2 // 8) + out
    assert facts["layers"] == 2 and facts["gguf_architecture"] == "glm-dsa" and facts["sparse_attention"] is True
    assert facts["quantization"].startswith("Q4_K ")


def test_a_gguf_and_its_config_are_one_model_and_a_bad_header_is_a_reason() -> None:
    header = {"metadata": {"general.architecture": "glm-dsa", "glm-dsa.block_count": 1}, "tensors": []}
    doc = json.dumps({"configs": {"/m/tok/config.json": json.dumps({"model_type": "glm_moe_dsa", "architectures":
                                                                   ["GlmMoeDsaForCausalLM"]})},
                      "gguf": {"/m/a-00001-of-00002.gguf": header, "/m/a-00002-of-00002.gguf": header}})  # fmt: skip
    facts, problems = read_model(doc, "/m/tok/config.json", ["/m/a-00001-of-00002.gguf", "/m/a-00002-of-00002.gguf"])
    assert problems == [] and facts is not None
    assert (facts.model_type, facts.gguf_architecture, facts.gguf) == (
        "glm_moe_dsa",
        "glm-dsa",
        "/m/a-00001-of-00002.gguf",
    )
    bad = json.dumps({"configs": {}, "gguf": {"/m/a.gguf": {"error": "not a GGUF file (no GGUF magic)"}}})
    facts, problems = read_model(bad, "/m/config.json", ["/m/a.gguf"])
    assert facts is None and problems == ["the GGUF header of /m/a.gguf: not a GGUF file (no GGUF magic)"]
    assert read_model("", "/m/config.json", []) == (None, [])
