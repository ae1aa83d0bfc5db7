from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from serving.standalone.prereqs import UNIT, Verdict, decide, missing, venv_package

REPO = Path(__file__).resolve().parents[3]


def test_venv_needs_the_venv_package_only_without_ensurepip() -> None:
    assert missing("venv", has_ensurepip=lambda: True, python="python3.11") == (
        [], "`python3.11 -m venv` (make's virtualenv)"
    )  # fmt: skip
    packages, _ = missing("venv", has_ensurepip=lambda: False)
    assert packages == [venv_package()]
    assert venv_package((3, 11)) == "python3.11-venv"


def test_test_names_each_missing_package_once_in_order() -> None:
    present = {"patch", "chromium", "vmstat"}
    packages, why = missing("test", which=lambda c: f"/usr/bin/{c}" if c in present else None)
    assert packages == [
        "openssl",
        "sysstat",
        "linux-perf",
        "debootstrap",
        "nodejs",
        "fio",
        "iproute2",
        "openssh-client",
    ]
    assert why == (
        "make test (it runs openssl, pidstat, perf, debootstrap, node, fio, ss, ssh, ssh-keygen, not found on PATH)"
    )
    assert missing("test", which=lambda c: c) == ([], "make test")
    assert missing("unit", which=lambda c: None if c == "pidstat" else c) == (
        ["sysstat"], "make test-unit (it runs pidstat, not found on PATH)"
    )  # fmt: skip


def test_a_unit_run_without_pidstat_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    """The real script as make runs it, on a PATH with every unit tool but pidstat, and no apt-get (so that it
    names what to install rather than installing it, root or not)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command, _package in UNIT:
        if command != "pidstat" and (found := shutil.which(command)):
            (bin_dir / command).symlink_to(found)
    out = subprocess.run([sys.executable, "-I", str(REPO / "serving" / "standalone" / "prereqs.py"), "unit"],
                         capture_output=True, text=True, timeout=30, env={"PATH": str(bin_dir)})  # fmt: skip
    assert (out.returncode, out.stdout) == (2, ""), out
    assert out.stderr == (
        "make: make test-unit (it runs pidstat, not found on PATH) needs sysstat (Debian package names): install "
        "them and rerun\n"
    )


def test_root_with_apt_installs() -> None:
    assert decide(["python3.11-venv"], "x", is_root=True, has_apt=True) == Verdict(("python3.11-venv",), "x")


def test_anyone_else_gets_one_line_naming_the_command() -> None:
    v = decide(["fio", "chromium"], "make test", is_root=False, has_apt=True)
    assert v.packages == ()
    assert v.line == "make: make test needs fio chromium: run `apt-get install fio chromium` as root, or make as root"
    assert "\n" not in v.line
    other = decide(["fio"], "make test", is_root=True, has_apt=False)
    assert other.line == "make: make test needs fio (Debian package names): install them and rerun"


def test_nothing_missing_is_silent() -> None:
    assert decide([], "make test", is_root=False, has_apt=True) == Verdict()


def test_it_runs_on_the_standard_library_alone() -> None:
    """`python3 -I` (no site packages, no project on the path): what the Makefile runs before .venv exists."""
    out = subprocess.run([sys.executable, "-I", str(REPO / "serving" / "standalone" / "prereqs.py"), "nonsense"],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert out.returncode == 2 and out.stderr.strip() == "usage: prereqs.py venv|unit|test"
