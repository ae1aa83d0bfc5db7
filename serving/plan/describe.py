"""The plan in a few lines an operator reads first (make plan, make preflight): serving/plan/plan.py builds it."""

from __future__ import annotations

from serving.plan import capacity
from serving.plan.plan import Plan


def describe(plan: Plan) -> list[str]:
    """A few lines an operator reads first (make plan, make preflight)."""
    lines = [f"plan of profile {plan.profile.name} on {plan.host}: " + ("OK" if plan.ok else "CANNOT DEPLOY")]
    lines += [f"  cannot deploy: {f}" for f in plan.failures]
    lines += [f"  note: {n}" for n in (plan.gpu.notes if plan.gpu is not None else [])]
    if plan.launch is not None:
        lines.append(f"  container {plan.launch.spec['name']} from {plan.launch.images.runtime_tag}")
        lines.append(f"  argv: {' '.join(plan.launch.spec['command'])}")
        for r in plan.launch.ranks:
            where = r.cpus or "vLLM's choice within the cpuset"
            lines.append(
                f"  rank {r.rank}" + (f" GPU {r.gpu} node {r.node}" if r.gpu is not None else "") + f": CPUs {where}"
            )
        if plan.launch.stand_in:
            lines.append(f"  STAND-IN (test seam): {plan.launch.stand_in['what']}")
    api = plan.api
    lines.append(
        f"  API on the unix socket {api.socket} (no port; root, the engine's user and gid {api.socket_gid} "
        + (f"only; API key from {api.key_file})" if api.key_file else "only; no API key)")
    )
    if plan.front_door is not None:
        front = plan.front_door
        lines.append(f"  front door {front['name']} on {front['url']} (TLS, the API key on every route)")
    lines.append(f"  probes read: {plan.probes.data_file or '-'} ({plan.probes.data_file_note})")
    peer = (plan.gpu.peer if plan.gpu is not None else None) or {}
    lines += [f"  warning: {w}" for w in peer.get("warnings", [])] + [f"  note: {n}" for n in peer.get("notes", [])]
    return lines + capacity.describe(plan.model, plan.capacity)
