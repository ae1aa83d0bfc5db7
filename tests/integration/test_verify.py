"""make verify against the real CPU deployment: the manifest a deploy wrote matches what then runs; after one
profile field is changed and redeployed, the same reference fails, naming the field and both values; verify
itself changes nothing on the host. The default deploy is restored last."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, host_state, make, manifest_of

pytestmark = pytest.mark.integration

RENDERED = Path("/var/lib/refdeploy/rendered/refdeploy-vllm.json")


def _verify_json(output: str) -> dict[str, Any]:
    """The verify.json the run names in its verdict line (printed whole, before Ansible's folded copy)."""
    marker = "written to "
    line = next(ln for ln in output.splitlines() if ln.startswith("localhost ") and marker in ln)
    path = Path(line.split(marker, 1)[1].split()[0].rstrip("'"))
    assert path.is_file() and path.parent.parent == REPO / "runs" / "localhost", path
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_verify_passes_on_its_deploy_and_names_a_changed_profile_field(tmp_path: Path) -> None:
    # REF is checked before any host is read: one line saying what to give.
    bad = make("verify", f"REF={tmp_path / 'no-such-manifest.json'}")
    assert bad.rc != 0
    assert "no such manifest: give REF=runs/<host>/<timestamp>/manifest.json" in bad.output
    assert "PLAY [" not in bad.output

    r = make("deploy")  # the default; a no-op where it already runs, and either way a fresh manifest
    assert r.rc == 0, r.output[-4000:]
    ref_dir, ref = manifest_of(r)
    assert ref["kind"] == "deploy"
    # The host's tuning as this machine has it.
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    want = thp.read_text().split("[", 1)[1].split("]", 1)[0] if thp.exists() else "absent"
    assert ref["host_tuning"]["thp"]["enabled"] == want
    assert ref["host_tuning"]["kernel_cmdline"] == Path("/proc/cmdline").read_text().strip()
    assert ref["repo"]["commit"] and isinstance(ref["repo"]["dirty"], bool)

    before = host_state()
    rendered = RENDERED.stat().st_mtime_ns
    same = make("verify", f"REF={ref_dir / 'manifest.json'}")
    assert same.rc == 0, same.output[-4000:]
    assert "localhost matches the reference: 0 must-match" in same.output
    assert "MUST-MATCH" not in same.output
    doc = _verify_json(same.output)
    assert doc["verdict"] == "matches" and doc["must_match"] == 0
    # Read only: the containers (ids, state, restart counts), the images and the rendered spec as they were.
    assert host_state() == before and RENDERED.stat().st_mtime_ns == rendered

    data = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    assert data["vllm"]["max_num_seqs"] == 8
    data["vllm"]["max_num_seqs"] = 4
    profile = tmp_path / "seqs4.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        r = make("deploy", f"PROFILE={profile}")
        assert r.rc == 0, r.output[-4000:]
        # The run id alone names the reference too.
        changed = make("verify", f"REF={ref_dir.name}")
        assert changed.rc != 0, changed.output[-4000:]
        assert 'MUST-MATCH container.cmd.--max-num-seqs: reference "8", now "4"' in changed.output
        assert "localhost differs from the reference:" in changed.output
        doc = _verify_json(changed.output)
        paths = {d["path"]: d for d in doc["differences"]}
        assert paths["container.cmd.--max-num-seqs"]["kind"] == "must-match"
        assert paths["container.spec_sha256"]["kind"] == "must-match"
        assert paths["container.id"]["kind"] == "informational"
    finally:
        r = make("deploy")  # the default deploy, as the other tests expect
        assert r.rc == 0, r.output[-3000:]
