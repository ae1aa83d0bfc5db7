"""The plan's read of the served model's own files (ansible/library/refdeploy_host_readings.py model_headers), run as
Ansible runs it: a GGUF written by the gguf package (llama.cpp's own Python writer) is read back by the module's
standard-library header reader exactly as the gguf package's reader reads it, and never past its header."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

from tests.helpers.ansible_run import run_module
from tests.helpers.gguf_files import write_gguf


def _fill(w: gguf.GGUFWriter) -> None:
    w.add_block_count(2)
    w.add_embedding_length(256)
    w.add_expert_count(8)
    w.add_expert_used_count(2)
    w.add_string("general.name", "tiny")
    w.add_array("glm-dsa.some_per_layer_list", [4, 4])
    w.add_token_list([f"t{i}" for i in range(1000)])  # a long string array: kept as its length only
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((64, 256), dtype=np.float32))
    # Q4_K: 144 bytes per 256 weights (ggml's block_q4_K), written raw as llama.cpp's quantizer would leave them.
    # (The array is the bytes; the writer derives the 256-weight rows from them.)
    w.add_tensor("blk.0.ffn_up_exps.weight", rng.integers(0, 255, (8, 128, 144), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_K)  # fmt: skip
    w.add_tensor("output_norm.weight", np.ones(256, dtype=np.float16))


def test_a_gguf_header_is_read_as_the_gguf_package_reads_it(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    write_gguf(model / "m.gguf", "glm-dsa", _fill)
    (model / "tok").mkdir()
    (model / "tok" / "config.json").write_text('{"model_type": "glm_moe_dsa"}')
    (model / "not-a.gguf").write_bytes(b"GGML" + b"\0" * 60)
    got = run_module("refdeploy_host_readings", {"mode": "cpu", "host": "h1", "served_dirs": [str(model)]})
    doc = json.loads(got["readings"]["model_headers"])
    assert doc["configs"] == {f"{model}/tok/config.json": '{"model_type": "glm_moe_dsa"}'}
    assert doc["gguf"][f"{model}/not-a.gguf"] == {"error": "not a GGUF file (no GGUF magic)"}
    header = doc["gguf"][f"{model}/m.gguf"]
    reader = gguf.GGUFReader(str(model / "m.gguf"))
    assert [t[0] for t in header["tensors"]] == [t.name for t in reader.tensors]
    assert [t[1] for t in header["tensors"]] == [[int(d) for d in t.shape] for t in reader.tensors]
    assert [t[2] for t in header["tensors"]] == [int(t.tensor_type) for t in reader.tensors]
    assert header["tensors"][1] == ["blk.0.ffn_up_exps.weight", [256, 128, 8], gguf.GGMLQuantizationType.Q4_K]
    meta = header["metadata"]
    assert meta["general.architecture"] == "glm-dsa" and meta["glm-dsa.block_count"] == 2
    assert meta["glm-dsa.expert_count"] == 8 and meta["general.name"] == "tiny"
    assert meta["glm-dsa.some_per_layer_list"] == [4, 4]
    assert meta["tokenizer.ggml.tokens"] == {"array_of": 8, "length": 1000}
    assert set(meta) == {f.name for f in reader.fields.values()} - {"GGUF.version", "GGUF.tensor_count",
                                                                     "GGUF.kv_count"}  # fmt: skip


def test_free_space_is_read_for_the_served_data_dockers_images_and_the_caches(tmp_path: Path) -> None:
    got = run_module(
        "refdeploy_host_readings",
        {"mode": "cpu", "host": "h1", "served_dirs": [str(tmp_path)], "cache_dir": str(tmp_path / "no" / "cache")},
    )
    head, _, table = got["readings"]["df"].partition("\n\n")
    roles = dict(line.split("\t") for line in head.splitlines())
    # A directory that does not exist yet is read where it would be created: its nearest existing parent. Docker's
    # data root is daemon.json's data-root where it sets one, else /var/lib/docker.
    try:
        root = Path(json.loads(Path("/etc/docker/daemon.json").read_text()).get("data-root") or "/var/lib/docker")
    except (OSError, ValueError):
        root = Path("/var/lib/docker")
    while not root.exists():
        root = root.parent
    assert roles == {"docker_root": str(root), "cache_dir": str(tmp_path), f"served:{tmp_path}": str(tmp_path)}
    rows = table.splitlines()
    assert rows[0].split() == ["Mounted", "on", "Avail", "1B-blocks"] and len(rows) == 4
    assert all(int(r.split()[-2]) >= 0 and int(r.split()[-1]) > 0 for r in rows[1:])
