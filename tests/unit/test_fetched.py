"""A fetched archive unpacked on the controller (serving/fetched.py): renamed, records beside it, archive gone;
nothing fetched still gives the directory; an archive that reaches outside itself is refused."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from serving.fetched import UnpackError, unpack


def _archive(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("bundle/escape")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    return path


def test_the_bundle_is_unpacked_under_its_name_with_the_records_and_the_archive_goes(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "capture.tar.gz", {"bundle/summary.txt": b"ok\n", "bundle/metrics/a.prom": b"x"})
    got = unpack(archive, tmp_path, "bundle", "capture", {"serving-container.json": {"changed": False}})
    assert got == tmp_path / "capture"
    assert (got / "summary.txt").read_text() == "ok\n" and (got / "metrics" / "a.prom").read_bytes() == b"x"
    assert json.loads((got / "serving-container.json").read_text()) == {"changed": False}
    assert not archive.exists() and not list(tmp_path.glob(".*unpacking"))


def test_nothing_fetched_still_gives_the_directory_with_its_records(tmp_path: Path) -> None:
    got = unpack(tmp_path / "missing.tar.gz", tmp_path, "bundle", "capture", {"serving-container.json": [1]})
    assert sorted(p.name for p in got.iterdir()) == ["serving-container.json"]


def test_an_archive_that_reaches_outside_itself_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.tar.gz", {"bundle/x": b"1"}, link="/etc/passwd")
    with pytest.raises(UnpackError, match=r"a\.tar\.gz"):
        unpack(archive, tmp_path, "bundle", "capture", {})
    archive = _archive(tmp_path / "b.tar.gz", {"other/x": b"1"})
    with pytest.raises(UnpackError, match="no bundle/ in it"):
        unpack(archive, tmp_path, "bundle", "capture", {})
