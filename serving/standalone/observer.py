"""Run the controller of a capture at an observer's CPU weight: `python -m serving.standalone.observer ansible-playbook
...` (the Makefile's $(OBSERVE), before `make capture`'s and `make probe`'s steps).

Why: where the controller shares the host with the engine it watches (the embedded default), a busy engine
starves it. Measured on this 2-core machine, `make capture SECONDS=15` with 4 streams of requests flowing:
80-88 s beyond its window at the normal weight, 5.4 s in a CPU cgroup of ten times Docker's weight. The work
that waited was the controller's before and after the window (planning, collecting, drawing the page); in the
window it only polls once a second, so the weight does not perturb what is measured. The probe container has
its own CPU weight (serving/evidence/probe_plan.py).

How: this process moves itself into the CPU cgroup `refdeploy-observer` (created where missing, with cpu.shares
10240 on cgroup v1, cpu.weight 1000 on v2: ten times the default) and becomes the command (exec), so the
command and every process it starts are weighed there. A nice value would not do: with the kernel's autogroup
scheduling a nice value weighs only inside its session, and Ansible starts each task's worker in a session of its
own (setsid), at the normal weight again. Tried here: the session's autogroup at nice -10 brought 88 s to 21-37 s.

Only where no one manages the cgroup tree: the process sits in the root CPU cgroup, as on a host without systemd.
Under systemd (the process is in a slice already) the tree is systemd's, and the command runs as it is, at the
weight its slice gives it. Without the rights to do it, one line says so and the command runs as it is. The
cgroup stays, empty, between captures (`rmdir /sys/fs/cgroup/cpu/refdeploy-observer` removes it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

NAME = "refdeploy-observer"
SHARES_V1 = 10240  # cpu.shares: Docker's containers and the root's tasks have 1024
WEIGHT_V2 = 1000  # cpu.weight: the default is 100
PROC = Path("/proc")


def cpu_hierarchy(proc: Path = PROC) -> tuple[Path, int] | None:
    """(mount point, cgroup version) of the CPU controller, where this process sits at its root; None where it
    sits lower (systemd's slices, a container's cgroup) or there is no CPU controller."""
    try:
        mounts = (proc / "self/mountinfo").read_text().splitlines()
        member = (proc / "self/cgroup").read_text().splitlines()
    except OSError:
        return None
    paths = {}
    for line in member:
        _, controllers, path = line.split(":", 2)
        paths[controllers] = path.strip()
    for line in mounts:
        fields = line.split()
        if " - " not in line:
            continue
        fstype, _, options = line.split(" - ", 1)[1].split(" ")[:3]
        if fstype == "cgroup" and "cpu" in options.split(","):
            here = next((p for c, p in paths.items() if "cpu" in c.split(",")), None)
            return (Path(fields[4]), 1) if here == "/" else None
    for line in mounts:
        if " - cgroup2 " in line:
            unified = Path(line.split()[4])
            if paths.get("") != "/":
                return None
            try:
                enabled = (unified / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            return (unified, 2) if "cpu" in enabled else None
    return None


def enter(proc: Path = PROC) -> str:
    """Move this process into the observer's cgroup. Returns "" when it did or when the tree is someone else's,
    or the one line that says why it could not."""
    found = cpu_hierarchy(proc)
    if found is None:
        return ""
    root, version = found
    group = root / NAME
    try:
        group.mkdir(exist_ok=True)
        if version == 1:
            (group / "cpu.shares").write_text(f"{SHARES_V1}\n")
        else:
            (group / "cpu.weight").write_text(f"{WEIGHT_V2}\n")
        (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    except PermissionError:
        return f"note: the capture's controller runs at the normal CPU weight (creating {group} needs root)"
    except OSError as e:
        return f"note: the capture's controller runs at the normal CPU weight ({group}: {e.strerror or e})"
    return ""


def run(argv: Sequence[str]) -> int:
    """Become argv in the observer's cgroup (exec: signals and the exit status are the command's own)."""
    if not argv:
        print("python -m serving.standalone.observer: give the command to run", file=sys.stderr)
        return 2
    note = enter()
    if note:
        print(note, file=sys.stderr)
    os.execvp(argv[0], list(argv))


# Started before each step of a capture, at the normal weight: it imports only what it needs (a Python start
# here, 0.02 s idle with -S, up to 1 s under load) and moves before anything else.
if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
