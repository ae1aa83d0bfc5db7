"""The fleet paths' seconds at 1, 4 and 8 hosts (issue 47, item 5): a group deploy that converges, `make verify` of
a group, and the canary roll.

    .venv/bin/python -m tests.benchmarks.fleet_seconds [--sizes 1,4,8] [--runs 3] [--roll] [--forks 5,10]
                                                       [--out FILE] [--keep]

Its last output is kept beside it: tests/benchmarks/fleet_seconds.last.txt (--out).

A benchmark, not a test: it judges nothing and exits 0 once every command ran. The hosts are the integration
tests' GPU test host image (images/testhost, --target gpu: Debian with sshd and the Docker CLI, reached over real
SSH on 127.0.0.1 at a port of its own), each serving the CPU profile cpu-tiny with a container name and model
directory of its own: a real vLLM CPU engine per host, not the GPU stand-in (this machine's 24 GiB hold eight
cpu-tiny engines, ~1.4 GiB each with a KV cache of 128 blocks, not eight PP=2 stand-ins). What differs from a real
fleet, and what it does to the figures:

- the hosts share this machine's 2 CPUs and its one Docker Engine (through its socket): the controller's forks,
  eight sshd and eight engines' idle loops compete for the same CPUs, so the figures are an upper bound on what a
  fleet of separate machines costs the controller;
- `make verify` plans with the reference's own profile, whose container name is the first host's: on these hosts,
  which share one engine, every host's read finds that one container (so all match). The reads are the ones a real
  host gets, the same number and kind; only whose container answers differs.

For each group size (groups fleet1, fleet4, fleet8 of the hosts rdfleet-01..08), in this order:

  floor     an SSH round trip to each host of the group: ansible-playbook of one ansible.builtin.ping with no facts
  converge  `make deploy HOST=fleetN`, nothing changed (the roll's batches: refdeploy_roll_batches, [1, '25%'])
  verify    `make verify HOST=fleetN REF=<the first host's manifest, as its deploy printed it>`
  roll      (--roll, one sample) `make deploy HOST=fleetN ANSIBLE_ARGS='-e serve_force_replace=true'`: every host's
            container replaced, the canary first

floor, converge and verify alternate run by run (floor converge verify, floor converge verify, ...), so a drift of
the machine's speed falls on all three. `--forks 5,10` also times verify at the largest size under each
ANSIBLE_FORKS (ansible/ansible.cfg's forks is the default), and with ANSIBLE_STRATEGY=free: the figures behind the
choice of forks and strategy. Times are wall-clock seconds of the whole `make` process. The hosts, their engines
and its scratch directory go at the end (--keep leaves them, and prints their inventory); the deploys' manifests
and verify records stay in runs/rdfleet-NN/, as any deploy's do.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.benchmarks.product_seconds import REPO, _printed_dir, _run, make, print_table
from tests.integration.conftest import docker, local_build_files
from tests.integration.test_gpu_hosts_ssh.conftest import (
    _build_images,
    start_ssh_host,
    wait_for_sshd,
    write_ssh_inventory,
)

PORT0 = 2300  # rdfleet-NN's sshd listens on 127.0.0.1:(PORT0 + NN)
KV_BLOCKS = 128
# Measured on this machine (docker stats of such a cpu-tiny engine, idle: 1.29 GiB): the
# engine's three processes' RSS, rounded up; the benchmark refuses to start unless MemAvailable holds that per host.
ENGINE_GIB = 1.4
FLOOR_PLAY = "- name: The floor\n  hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"


def host(i: int) -> str:
    return f"rdfleet-{i:02d}"


def container(i: int) -> str:
    return f"refdeploy-vllm-fleet{i:02d}"


def _profile(out: Path, share: Path, i: int) -> Path:
    data = yaml.safe_load((REPO / "serving" / "profiles" / "cpu-tiny.yaml").read_text())
    data["container"]["name"] = container(i)
    data["model"]["host_path"] = str(share / "models" / host(i) / "tiny-llama")
    # The KV cache: 128 blocks of 32 tokens (twice max_model_len), not the profile's 1 GiB, so that eight engines fit
    # this machine (VLLM_CPU_KVCACHE_SPACE takes whole GiB only: vllm/envs.py int()).
    data["vllm"]["extra_args"] = ["--num-gpu-blocks-override", str(KV_BLOCKS)]
    # The engine resolves bind mounts on this machine: the compile caches go where the serve role on the host and
    # the engine see the same directory (as the GPU test hosts' profiles do).
    data["container"]["compile_cache_dir"] = str(share / "cache" / host(i))
    path = out / f"{host(i)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _inventory(inv: Path, key: Path, profiles: dict[int, Path], share: Path, sizes: list[int]) -> None:
    shutil.copytree(REPO / "inventory" / "local" / "group_vars" / "all", inv / "group_vars" / "all")
    hosts: dict[str, Any] = {
        host(i): {
            "ansible_host": "127.0.0.1",
            "ansible_port": PORT0 + i,
            "serving_profile": str(profiles[i]),
            "probes_host_dir": str(share / "probe-runs"),
            "bench_host_dir": str(share / "bench-runs"),
        }
        for i in profiles
    }
    groups = {f"fleet{n}": {"hosts": {host(i): hosts[host(i)] for i in range(1, n + 1)}} for n in sizes}
    write_ssh_inventory(inv, key, groups)


def _start(i: int, key: Path, share: Path) -> None:
    # This machine's wheelhouse (inventory/local's images_wheelhouse_dir), which the images' tags hash: the hosts
    # find the images this machine built and build nothing.
    # Should a host build all the same, its build context is this machine's directory: the engine resolves the build's
    # bind mounts here, and the role's removal of its scratch context must reach what the engine created (a build
    # that failed on a host left empty directories under this machine's /var/lib/refdeploy/build, which
    # test_deploy.py's patch test then found).
    wheels, build = local_build_files()["wheelhouse_dir"], "/var/lib/refdeploy/build"
    start_ssh_host(host(i), PORT0 + i, key, share, "--volume", f"{wheels}:{wheels}:ro", "--volume", f"{build}:{build}")


def _remove(count: int) -> None:
    for i in range(1, count + 1):
        for suffix in ("-samplers", "", "-previous", "-failed"):
            docker("rm", "-f", container(i) + suffix, check=False)
        docker("rm", "-f", host(i), check=False)


def _mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


@dataclass
class Sample:
    wall_s: float
    controller_cpu_s: float  # the command's own process tree (getrusage of waited-for children)
    machine_cpu_s: float  # every CPU of this machine, busy (/proc/stat): the controller, the hosts, the engines


def _busy_s() -> float:
    """This machine's busy CPU seconds since boot, all CPUs: /proc/stat's cpu line less idle and iowait (proc(5))."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[Sample, str]:
    cpu, busy = _children_cpu_s(), _busy_s()
    wall, out = _run(argv, env={**os.environ, **(env or {})})
    return Sample(wall, _children_cpu_s() - cpu, _busy_s() - busy), out


def _row(title: str, samples: list[Sample], base: float | None) -> str:
    walls = [s.wall_s for s in samples]
    med = statistics.median(walls)
    spread = f"{med:.2f} ({min(walls):.2f}-{max(walls):.2f})"
    ratio = f"{med / base:.2f}" if base else "-"
    controller = statistics.median(s.controller_cpu_s for s in samples)
    machine = statistics.median(s.machine_cpu_s for s in samples)
    return f"{title:48} {len(walls):>2} {spread:>23} {ratio:>6} {controller:>9.2f} {machine:>8.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4,8")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--roll", action="store_true", help="also time one canary roll per size (every engine restarts)")
    ap.add_argument("--forks", default="", help="comma-separated ANSIBLE_FORKS to time verify at the largest size")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", action="store_true", help="leave the hosts and their engines running")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    count = sizes[-1]
    need, free = count * ENGINE_GIB, _mem_available_gib()
    if free < need:
        sys.exit(
            f"fleet_seconds: --sizes up to {count} hosts needs ~{need:.0f} GiB free; MemAvailable is {free:.1f} GiB"
        )
    tmp = Path(tempfile.mkdtemp(prefix="fleet-seconds-"))
    key, share, inv = tmp / "id_ed25519", tmp / "share", tmp / "inventory"
    for d in (share / "probe-runs", share / "bench-runs", tmp / "profiles"):
        d.mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    _build_images()
    _remove(count)
    profiles = {i: _profile(tmp / "profiles", share, i) for i in range(1, count + 1)}
    _inventory(inv, key, profiles, share, sizes)
    floor_play = tmp / "floor.yml"
    floor_play.write_text(FLOOR_PLAY)
    lines: list[str] = []
    try:
        for i in profiles:
            _start(i, key, share)
        for i in profiles:
            wait_for_sshd(key, host(i), PORT0 + i)
        at = f"INVENTORY={inv}"
        # The first deploy of the whole group: every engine starts (not timed as a fleet path; printed).
        first, out = _timed(make("deploy", at, f"HOST=fleet{count}"))
        ref = _printed_dir(out, r"manifest: (\S+)/manifest\.json") / "manifest.json"
        print(f"# first deploy of fleet{count}: {first.wall_s:.1f} s; reference {ref}", file=sys.stderr)
        floor_argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inv)]
        rows: dict[str, list[Sample]] = {}
        for n in sizes:
            group = f"fleet{n}"
            for _ in range(args.runs):
                rows.setdefault(f"floor {n}", []).append(_timed([*floor_argv, "--limit", group, str(floor_play)])[0])
                rows.setdefault(f"converge {n}", []).append(_timed(make("deploy", at, f"HOST={group}"))[0])
                rows.setdefault(f"verify {n}", []).append(_timed(make("verify", at, f"HOST={group}", f"REF={ref}"))[0])
            print(f"# fleet{n}: {args.runs} runs", file=sys.stderr)
        if args.roll:
            for n in sizes:
                force = "ANSIBLE_ARGS=-e serve_force_replace=true"
                rows[f"roll {n}"] = [_timed(make("deploy", at, f"HOST=fleet{n}", force))[0]]
                print(f"# roll of fleet{n}: {rows[f'roll {n}'][0].wall_s:.1f} s", file=sys.stderr)
        extra: list[str] = []
        for forks in [f for f in args.forks.split(",") if f]:
            for strategy in ("linear", "free"):
                env = {"ANSIBLE_FORKS": forks, "ANSIBLE_STRATEGY": strategy}
                samples = [
                    _timed(make("verify", at, f"HOST=fleet{count}", f"REF={ref}"), env)[0] for _ in range(args.runs)
                ]
                extra.append(_row(f"verify {count} hosts, forks {forks}, strategy {strategy}", samples, None))
        git = _run(["git", "rev-parse", "--short", "HEAD"])[1].strip()
        lines = [
            f"fleet_seconds.py, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
            f"git {git}; hosts: {count} SSH test hosts on this machine, each a cpu-tiny vLLM engine",
            "wall: median (min-max) seconds of the whole command; ratio: its median against the same path at the",
            "smallest size; controller CPU: the command's own processes (make, ansible-playbook, its forks, ssh);",
            f"machine CPU: every process of this machine ({os.cpu_count()} CPUs: the controller, the hosts' sshd and",
            "modules, Docker Engine, the idle engines), busy seconds over the command (medians)",
            f"{'path':48} {'n':>2} {'wall s':>23} {'ratio':>6} {'ctrl CPU':>9} {'mach CPU':>8}",
        ]
        for what, title in (("floor", "SSH floor (one ping)"), ("converge", "make deploy, converged"),
                            ("verify", "make verify"), ("roll", "canary roll (every container replaced)")):  # fmt: skip
            first_size = rows.get(f"{what} {sizes[0]}")
            base = statistics.median(s.wall_s for s in first_size) if first_size else None
            for n in sizes:
                if f"{what} {n}" in rows:
                    lines.append(_row(f"{title}, {n} host{'s' if n > 1 else ''}", rows[f"{what} {n}"], base))
        if extra:
            lines += ["", "verify at the largest size by Ansible forks and strategy:", *extra]
    finally:
        if args.keep:
            print(f"# kept: the hosts rdfleet-01..{count:02d}, their inventory {inv}", file=sys.stderr)
        else:
            _timed(make("undeploy", f"INVENTORY={inv}", f"HOST=fleet{count}"))
            _remove(count)
            shutil.rmtree(tmp, ignore_errors=True)
    print_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
