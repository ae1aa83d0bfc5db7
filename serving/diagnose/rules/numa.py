"""Memory placement (seed 000 §5: "on multisocket systems, also inspect nvidia-smi topo -m, numactl --hardware, and
numastat -p"; "if the CPU near the GPU and the NUMA node holding host buffers differ, transfers take an additional
path"; record both CPU and memory placement).

Read from the capture's host state at the window's end: each vLLM process's resident bytes per node (numa_maps)
against the nodes its container may allocate on (cpuset.mems). Consistent with misplaced memory where a process
holds at least MISPLACED_SHARE of its resident bytes outside them (memory placed before a binding, or by a
policy that ignores it). Where every byte is inside, the bundle cannot tell whether each rank's memory sits on
its own CPUs' node: it records the container's nodes, not each rank's.
"""

from __future__ import annotations

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
    misplaced = []
    for p in n["processes"]:
        total = sum(p["node_bytes"].values())
        off = sum(b for node, b in p["node_bytes"].items() if int(node.lstrip("N")) not in allowed)
        if total and off / total >= MISPLACED_SHARE:
            misplaced.append((p, off / total))
            figures.append(fig(f"{p['comm']} (pid {p['pid']}) resident outside the allowed nodes", src, "fraction",
                               value=round(off / total, 3)))  # fmt: skip
    if misplaced:
        p, share = max(misplaced, key=lambda m: m[1])
        return [Finding(
            rule="numa", seed=SEED, verdict="consistent with",
            title=f"misplaced memory: {p['comm']} (pid {p['pid']}) holds {share:.0%} of its resident memory outside "
            f"the nodes its container may use ({n['mems_allowed']})",
            symptom=", ".join(f"{q['comm']} {s:.0%}" for q, s in misplaced),
            explains=round(min(1.0, share), 3), figures=figures,
            not_established="that remote accesses slow the requests: that is the comparison's (the same workload "
            "with the memory bound where the CPUs are)",
            next_steps=["make deploy (the plan binds each rank's CPUs and memory), then make bench and "
                        "make compare against this run"],
        )]  # fmt: skip
    return [Finding(
        rule="numa", seed=SEED, verdict="cannot tell",
        title="memory placement: every process's memory is on the container's nodes; whether each rank's is on "
        "its own CPUs' node is not in the bundle",
        symptom=f"{len(n['processes'])} processes read, all inside nodes {n['mems_allowed']}",
        explains=0.0, figures=figures,
        not_established="each rank's node: numastat -p <pid> beside the rank's CPUs (numactl --hardware)",
        next_steps=["numastat -p <each worker pid> and taskset -cp <pid> on the host"],
    )]  # fmt: skip


RULE = Rule("numa", SEED, run)
