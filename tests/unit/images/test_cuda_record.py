"""images/vllm/verified-cuda.json is the record of the last CUDA image built and imported (make test-cuda-image):
its tag must be the one the current inputs make, since that tag is their content hash. A change under images/
that moves it fails here in a second, where building the image to find out would take 15 minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving import cli

REPO = Path(__file__).resolve().parents[3]
RECORD = REPO / "images" / "vllm" / "verified-cuda.json"


def _planned_tag(capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["plan", "--profile", "rtx3090-pp3", "--compact"]) == 0
    return str(json.loads(capsys.readouterr().out)["images"]["runtime_tag"])


def test_the_cuda_image_record_is_for_the_current_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    record = json.loads(RECORD.read_text())
    tag = _planned_tag(capsys)
    assert record["tag"] == tag, (
        f"images/vllm/verified-cuda.json records {record['tag']}, the inputs under images/ now make {tag}: "
        "run `make test-cuda-image` (builds and imports it, ~15 min) and commit the record it rewrites"
    )
    vllm_version, torch_version, cuda, _triton, mark, wrapped = record["import_output"].split()
    assert (vllm_version, mark, wrapped) == ("0.32.0", "refdeploy-memory-phase", "instrumented")
    assert torch_version.startswith("2.13.0") and "+cpu" not in torch_version and cuda != "None"
    assert record["image_id"].startswith("sha256:")
