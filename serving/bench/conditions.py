"""The conditions of a bench: what must match between two benches that `make compare` compares (the workload and its
prompts' seeds, the profile, the image, where the client ran, the host), read from each bench's manifest
(serving/bench/protocol.py writes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.config.workload import Workload

# Fields that name or describe a run without changing its conditions.
# Not conditions: names and descriptions, and the number of measured runs (the sample's size, which the
# comparison's intervals account for; five runs against three compare the same workload).
_NOT_CONDITIONS = (
    "profile.name",
    "profile.description",
    "workload.description",
    "workload.name",
    "workload.runs",
    # The data file's place on the controller: its content (workload_data.sha256) is the condition.
    "workload.prompts",
    "workload.trace",
    # Sizes other profiles would run: the sizes this bench ran are in the workload's own fields.
    "workload.sizes",
    # The SLO judges the figures; it does not change what was sent (two benches with other SLOs compare).
    "workload.slo",
    # How a knee search would search: a plain bench sends nothing by it (a search's loads are in its runs).
    "workload.search",
    "gpu_class",
)


def workload_defaults() -> dict[str, Any]:
    """Every optional workload field's default, as a manifest records it (JSON)."""
    return {
        name: (f.get_default(call_default_factory=True) if not f.is_required() else None)
        for name, f in Workload.model_fields.items()
        if not f.is_required()
    }


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = data
    return out


def conditions(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The fixed conditions of a bench: the workload and its prompts' seeds, the profile, the image, where the client
    ran, the host.

    The server's argv and cpuset are rendered from the profile, so they are not compared twice.
    """
    wanted = {
        "host": manifest.get("host"),
        "runtime_image": manifest.get("runtime_image"),
        "stand_in": bool(manifest.get("stand_in")),
        "profiler": manifest.get("profiler"),
        "workload": manifest.get("workload"),
        "profile": manifest.get("profile"),
        "client": {k: (manifest.get("client") or {}).get(k) for k in ("client_cpus", "shares_server_cpus")},
        # The prompts: each run's seed is the workload's + this offset + its position, so another offset sends
        # other prompts (a manifest from before it was recorded had 0).
        "seed_offset": manifest.get("seed_offset", 0),
        # The client sent through a proxy (bench_via) or to the server itself (None; before it was recorded).
        "via": manifest.get("via"),
    }
    # Fields the workload gained after benches were recorded take their defaults, which is what those benches
    # ran (page_cache "as-found", api "completions", ...).
    if isinstance(wanted["workload"], Mapping):
        wanted["workload"] = {**workload_defaults(), **wanted["workload"]}
    # The data file by content: another file at the same path sends other requests.
    wanted["workload_data"] = {"sha256": (manifest.get("workload_data") or {}).get("sha256")}
    flat = flatten(wanted)
    return {k: v for k, v in flat.items() if not any(k == n or k.startswith(n + ".") for n in _NOT_CONDITIONS)}
