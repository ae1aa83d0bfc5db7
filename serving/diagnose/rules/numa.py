"""Memory placement (seed 000 §5: "on multisocket systems, also inspect nvidia-smi topo -m, numactl --hardware, and
numastat -p"; "if the CPU near the GPU and the NUMA node holding host buffers differ, transfers take an additional
path"; record both CPU and memory placement).

Read from the capture's host state at the window's end: each vLLM process's resident bytes per node (numa_maps)
against the nodes it should allocate on: those of its own CPUs (its main thread's Cpus_allowed_list, against the
host's node CPU lists from sysfs) that its container may use (cpuset.mems); where the bundle has no CPU list for
it, the container's nodes alone. Consistent with misplaced memory where a process holds at least MISPLACED_SHARE
of its resident bytes elsewhere (memory placed before a binding, by a policy that ignores it, or a rank bound to
CPUs on one node and memory on another). Where every process's CPUs are known and its bytes are where they
should be, it rules misplacement out; where some process's CPUs are not in the bundle (a capture before this
reading), it cannot tell whether that rank's memory is on its own CPUs' node.
"""

from __future__ import annotations

from typing import Any

from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out
from serving.host.numa import parse_cpulist  # the kernel's list format, nodes as CPUs

SEED = "000 §5"
MISPLACED_SHARE = 0.1


def run(ev: Evidence) -> list[Finding]:
    if ev.numa is None:
        raise CannotRun("no per-process NUMA reading (host-state/after/host-state.json: a capture's hoststate part)")
    src, n = ev.numa, ev.numa.value
    host, allowed = set(parse_cpulist(n["host_mems"])), set(parse_cpulist(n["mems_allowed"]))
    figures = [fig("the host's NUMA nodes", src, value=n["host_mems"]),
               fig("nodes the container may allocate on", src, value=n["mems_allowed"])]  # fmt: skip
    if len(host) <= 1:
        return [ruled_out(
            rule="numa", seed=SEED,
            title=f"memory placement: the host has one NUMA node ({n['host_mems']}), nothing to misplace",
            symptom="every byte is on node " + n["host_mems"], figures=figures,
            not_established="-"
        )]  # fmt: skip
    node_cpus = {int(k.lstrip("N")): set(parse_cpulist(v)) for k, v in (n.get("node_cpus") or {}).items()}
    misplaced, unknown = [], []
    for p in n["processes"]:
        home, where = _home(p, allowed, node_cpus)
        if home is None:
            unknown.append(p)
            home = allowed
        total = sum(p["node_bytes"].values())
        off = sum(b for node, b in p["node_bytes"].items() if int(node.lstrip("N")) not in home)
        if total and off / total >= MISPLACED_SHARE:
            misplaced.append((p, off / total, where))
            figures.append(fig(f"{p['comm']} (pid {p['pid']}) resident outside {where}", src, "fraction",
                               value=round(off / total, 3)))  # fmt: skip
    if misplaced:
        p, share, where = max(misplaced, key=lambda m: m[1])
        return [Finding(
            rule="numa", seed=SEED, verdict="consistent with",
            title=f"misplaced memory: {p['comm']} (pid {p['pid']}) holds {share:.0%} of its resident memory outside "
            f"{where}",
            symptom=", ".join(f"{q['comm']} {s:.0%}" for q, s, _ in misplaced),
            explains=round(min(1.0, share), 3), figures=figures,
            not_established="that remote accesses slow the requests: that is the comparison's (the same workload "
            "with the memory bound where the CPUs are)",
            next_steps=["make deploy (the plan binds each rank's CPUs and memory), then make bench and "
                        "make compare against this run"],
        )]  # fmt: skip
    if not unknown:
        return [ruled_out(
            rule="numa", seed=SEED,
            title="memory placement: every process's memory is on its own CPUs' nodes",
            symptom=f"{len(n['processes'])} processes read against their CPUs ("
            + ", ".join(f"{p['comm']} {p['cpus_allowed']}" for p in n["processes"][:4]) + ")",
            figures=figures, not_established="-",
        )]  # fmt: skip
    return [Finding(
        rule="numa", seed=SEED, verdict="cannot tell",
        title="memory placement: every process's memory is on the container's nodes; whether each rank's is on "
        "its own CPUs' node is not in the bundle",
        symptom=f"{len(n['processes'])} processes read, all inside nodes {n['mems_allowed']}; no CPU list for "
        + ", ".join(f"{p['comm']} (pid {p['pid']})" for p in unknown[:4]),
        explains=0.0, figures=figures,
        not_established="each rank's node: numastat -p <pid> beside the rank's CPUs (numactl --hardware)",
        next_steps=["numastat -p <each worker pid> and taskset -cp <pid> on the host"],
    )]  # fmt: skip


def _home(p: dict[str, Any], allowed: set[int], node_cpus: dict[int, set[int]]) -> tuple[set[int] | None, str]:
    """The nodes a process should allocate on, and their words: its CPUs' nodes that its container may use;
    None where the bundle has no CPU list for it (or no node CPU lists)."""
    if not p.get("cpus_allowed") or not node_cpus:
        return None, f"the nodes its container may use ({','.join(map(str, sorted(allowed)))})"
    cpus = set(parse_cpulist(str(p["cpus_allowed"])))
    home = {node for node, on in node_cpus.items() if cpus & on} & allowed
    return (
        home,
        f"its CPUs' node{'s' if len(home) != 1 else ''} ({','.join(map(str, sorted(home))) or 'none'}; "
        f"CPUs {p['cpus_allowed']})",
    )


RULE = Rule("numa", SEED, run)
