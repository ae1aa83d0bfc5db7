"""images/vllm/apply-patches.sh against a real tree with the real `patch` tool."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "images/vllm/apply-patches.sh"

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")

HEADER = "What: x\nWhy: y\nUpstream: none\n\n"


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/a.py").write_text("one\ntwo\nthree\n")
    (root / "pkg/b.py").write_text("alpha\nbeta\n")
    return root


def _patch(old: str, new: str) -> str:
    """A patch of the middle line of pkg/a.py."""
    return (
        HEADER
        + "diff -ru a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n"
        + f"@@ -1,3 +1,3 @@\n one\n-{old}\n+{new}\n three\n"
    )


B_PATCH = (
    HEADER + "diff -ru a/pkg/b.py b/pkg/b.py\n--- a/pkg/b.py\n+++ b/pkg/b.py\n@@ -1,2 +1,2 @@\n-alpha\n+ALPHA\n beta\n"
)


def _run(site: Path, patches: Path, record: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), str(site), str(patches), str(record)], capture_output=True, text=True)


def test_series_applies_in_name_order_and_is_recorded(tmp_path: Path) -> None:
    site = _tree(tmp_path / "site")
    patches = tmp_path / "patches"
    patches.mkdir()
    # 0002 only applies after 0001: order matters.
    (patches / "0002-second.patch").write_text(_patch("TWO", "2"))
    (patches / "0001-first.patch").write_text(_patch("two", "TWO"))
    proc = _run(site, patches, tmp_path / "record")
    assert proc.returncode == 0, proc.stderr
    assert (site / "pkg/a.py").read_text() == "one\n2\nthree\n"
    lines = (tmp_path / "record").read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["0001-first.patch", "0002-second.patch"]
    digest = hashlib.sha256((patches / "0001-first.patch").read_bytes()).hexdigest()
    assert lines[0].split()[0] == digest


def test_first_patch_that_does_not_apply_is_named_and_stops_the_series(tmp_path: Path) -> None:
    site = _tree(tmp_path / "site")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-good.patch").write_text(_patch("two", "TWO"))
    (patches / "0002-stale.patch").write_text(_patch("no-such-line", "x"))
    (patches / "0003-later.patch").write_text(B_PATCH)
    proc = _run(site, patches, tmp_path / "record")
    assert proc.returncode == 1
    assert "apply-patches: patch 0002-stale.patch does not apply" in proc.stderr
    # 0002's dry run failed, so nothing of it (or of 0003) touched the tree.
    assert (site / "pkg/a.py").read_text() == "one\nTWO\nthree\n"
    assert (site / "pkg/b.py").read_text() == "alpha\nbeta\n"


def test_empty_series_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "patches").mkdir()
    proc = _run(_tree(tmp_path / "site"), tmp_path / "patches", tmp_path / "record")
    assert proc.returncode == 1
    assert "no *.patch files" in proc.stderr
