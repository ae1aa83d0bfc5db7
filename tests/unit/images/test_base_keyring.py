"""images/base/build.sh checks the suite's Release signature: the real debootstrap against the plan's mirror, with a
keyring that did not sign it. Needs root (debootstrap runs as root only) and the mirror (what a deploy needs too)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from serving.plan.images import BASE_MIRROR, BASE_SUITE

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "images/base/build.sh"

pytestmark = pytest.mark.skipif(shutil.which("debootstrap") is None, reason="debootstrap is not installed")


def _run(tmp_path: Path, keyring: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """build.sh with `keyring`, a docker on PATH that only records that it ran, and the log under tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "docker-was-called"
    (bin_dir / "docker").write_text(f'#!/bin/sh\necho "$@" >>"{called}"\n')
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "logs" / "base-debootstrap.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BASE_SUITE": BASE_SUITE,
        "BASE_MIRROR": BASE_MIRROR,
        "REFDEPLOY_BASE_KEYRING": str(keyring),
        "REFDEPLOY_BASE_LOG": str(log),
    }
    out = subprocess.run(
        ["bash", str(SCRIPT), "refdeploy/base:keyring-test"], env=env, capture_output=True, text=True, timeout=120
    )
    return out, log, called


@pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap runs as root only")
def test_a_release_that_does_not_verify_against_the_keyring_stops_the_build_in_one_line(tmp_path: Path) -> None:
    keyring = tmp_path / "other-keyring.gpg"
    keyring.write_bytes(b"")  # a keyring without Debian's key: the real Release cannot verify against it
    start = time.monotonic()
    out, log, docker_called = _run(tmp_path, keyring)
    elapsed = time.monotonic() - start
    assert out.returncode == 1, out.stderr
    [line] = out.stderr.splitlines()
    assert re.fullmatch(
        rf"build\.sh: the Release file of {re.escape(BASE_MIRROR)} {BASE_SUITE} did not verify against "
        rf"{re.escape(str(keyring))}: Release signed by unknown key \(key id [0-9A-F]+\) "
        rf"\(log: {re.escape(str(log))}\); set REFDEPLOY_BASE_KEYRING to the keyring that signs it "
        r"\(Debian's: apt-get install debian-archive-keyring\)\. No image was built\.",
        line,
    ), line
    # Stopped at the signature: no package fetched, docker never reached, and the log kept for the operator.
    assert elapsed < 60
    assert not docker_called.exists()
    text = log.read_text()
    assert "I: Checking Release signature" in text and "Retrieving Packages" not in text


def test_a_keyring_that_does_not_exist_is_named_before_anything_is_fetched(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-keyring.gpg"
    out, log, docker_called = _run(tmp_path, missing)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"build.sh: keyring {missing} does not exist: apt-get install debian-archive-keyring, "
        f"or set REFDEPLOY_BASE_KEYRING to the keyring that signs {BASE_MIRROR}"
    ]
    assert out.stdout == ""
    assert not log.exists() and not docker_called.exists()
