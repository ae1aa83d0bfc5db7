"""What a bare Debian or Ubuntu machine lacks for the README's commands, and installing it when run as root.

It runs on the system Python before the project's virtualenv exists, so it uses the standard library only:

  python3.11 serving/standalone/prereqs.py venv   before make creates .venv: `python3.11 -m venv` needs ensurepip, which
                                       Debian and Ubuntu ship apart from Python, in python3.11-venv
  python3.11 serving/standalone/prereqs.py unit   before `make test-unit`: the tools the unit tests run for real (UNIT)
  python3.11 serving/standalone/prereqs.py test   before `make test` runs pytest: the tools the tests run on this
  machine

With nothing missing it is silent. As root, where apt-get exists, it installs what is missing and says so in
one line; otherwise it prints one line naming what to install and exits 2. Docker Engine is not here: the
deploy installs and starts it (ansible/roles/docker_engine), and so does .ci/run for CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# (command the tests run, Debian package that provides it), in the order the line names them. The unit tests' list
# is what they run for real: found by running them with each tool hidden from PATH (2026-12-07), where they failed
# or skipped for each of these.
# openssl: the front door's cipher list expanded as OpenSSL reads it (tests/unit/plan/test_frontdoor.py), and the
# RSA pair its integration test tries the door's suites with.
UNIT = [
    ("patch", "patch"),  # the patch series applied for real (tests/unit/images/test_apply_patches.py)
    ("openssl", "openssl"),
    ("vmstat", "procps"),  # the samplers on the monotonic clock (tests/unit/probes/test_samplers.py)
    ("pidstat", "sysstat"),  # the sidecar's pidstat following vLLM's processes (the same)
    ("perf", "linux-perf"),  # perf record against a real process (tests/unit/probes/test_kernel.py)
    ("debootstrap", "debootstrap"),  # the base image's keyring pin (tests/unit/images/test_base_keyring.py)
    ("node", "nodejs"),  # Perfetto's trace processor (WebAssembly) reading our traces (tests/unit/evidence)
    ("fio", "fio"),  # the I/O probe's fio runs on this machine (tests/unit/probes/test_io_probe.py)
]
TEST = [
    *UNIT,
    ("ss", "iproute2"),  # the port checks
    ("chromium", "chromium"),  # the timeline report's screenshot test
    ("ssh", "openssh-client"),  # the SSH test hosts
    ("ssh-keygen", "openssh-client"),
]
TARGETS = ("venv", "unit", "test")
APT_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Verdict:
    """What to do: nothing, install `packages` (as root), or stop with `line`."""

    packages: tuple[str, ...] = ()
    why: str = ""
    line: str = ""


def venv_package(version: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)) -> str:
    return f"python{version[0]}.{version[1]}-venv"


def missing(
    target: str,
    which: Callable[[str], str | None] = shutil.which,
    has_ensurepip: Callable[[], bool] = lambda: importlib.util.find_spec("ensurepip") is not None,
    python: str = f"python{sys.version_info.major}.{sys.version_info.minor}",
) -> tuple[list[str], str]:
    """(the packages `target` lacks, in order and once each, what needs them)."""
    if target == "venv":
        return ([] if has_ensurepip() else [venv_package()]), f"`{python} -m venv` (make's virtualenv)"
    needs = {"unit": UNIT, "test": TEST}[target]
    packages: list[str] = []
    commands: list[str] = []
    for command, package in needs:
        if which(command) is None:
            commands.append(command)
            if package not in packages:
                packages.append(package)
    what = f"make {'test-unit' if target == 'unit' else 'test'}"
    return packages, f"{what} (it runs {', '.join(commands)}, not found on PATH)" if commands else what


def decide(packages: Sequence[str], why: str, is_root: bool, has_apt: bool) -> Verdict:
    if not packages:
        return Verdict()
    listed = " ".join(packages)
    if is_root and has_apt:
        return Verdict(tuple(packages), why)
    if has_apt:
        return Verdict(line=f"make: {why} needs {listed}: run `apt-get install {listed}` as root, or make as root")
    return Verdict(line=f"make: {why} needs {listed} (Debian package names): install them and rerun")


def install(packages: Sequence[str], why: str, timeout_s: int = APT_TIMEOUT_S) -> int:
    """apt-get update and install, each bounded; one line on failure."""
    listed = " ".join(packages)
    print(f"make: installing {listed} for {why}", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        try:
            done = subprocess.run(argv, env=env, timeout=timeout_s, stdout=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"make: `{' '.join(argv)}` did not finish within {timeout_s} s: see /var/log/apt/term.log",
                  file=sys.stderr)  # fmt: skip
            return 1
        if done.returncode != 0:
            print(f"make: `{' '.join(argv)}` failed (exit {done.returncode}): see its output above", file=sys.stderr)
            return 1
    return 0


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in TARGETS:
        print(f"usage: prereqs.py {'|'.join(TARGETS)}", file=sys.stderr)
        return 2
    packages, why = missing(argv[0])
    verdict = decide(packages, why, os.geteuid() == 0, shutil.which("apt-get") is not None)
    if verdict.line:
        print(verdict.line, file=sys.stderr)
        return 2
    return install(verdict.packages, verdict.why) if verdict.packages else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
