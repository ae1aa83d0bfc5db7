"""Secrets that cannot leak, on the embedded default: a keyed deploy, then bench, capture, plan, verify and profile,
every one at -vvv, and no artifact, log or line of output holds the API key, a planted HF token (upper and lower
case) or a planted URL credential.

The key reaches vLLM (401 without it, 200 with it) and the bench client through the root-only copy only. The one
keyed engine is started with the torch profiler configured (PROFILER=torch), so that `make profile KEEP=1` finds it
so and starts nothing: two engine starts in all, the keyed one and the default put back at the end, as the keyed
test of test_safety.py took before it moved here. Without redaction the same search finds the planted secrets
(tests/unit/config/test_secrets_grep.py switches it off over artifacts written the same way).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.secret_grep import found
from tests.integration.conftest import BASE_URL, CONTAINER, REPO, docker, inspect, make, manifest_of

pytestmark = pytest.mark.integration
ENGINE_STARTS = 2

STATE = Path("/var/lib/refdeploy")
KEY_COPY = STATE / "secrets" / f"{CONTAINER}.api-key"


def _post(body: dict[str, Any], key: str | None) -> int:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(f"{BASE_URL}/v1/completions", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _logs(name: str) -> str:
    """A container's log, both streams (vLLM writes to stderr); "" where it does not exist."""
    got = subprocess.run(["docker", "logs", name], capture_output=True, text=True, timeout=120)
    return got.stdout + got.stderr if got.returncode == 0 else ""


def _journal(since: str) -> dict[str, str]:
    """The host's journal since the test began (Ansible's modules log their arguments there), where it has one."""
    if shutil.which("journalctl") is None:
        return {}
    got = subprocess.run(["journalctl", "--no-pager", "--since", since], capture_output=True, text=True, timeout=120)
    return {"the journal": got.stdout} if got.returncode == 0 else {}


# Seven make runs at -vvv, two of them engine starts: under load they may need more than the 1200 s default.
@pytest.mark.timeout(1800)
def test_a_keyed_deploy_bench_capture_profile_and_verify_at_vvv_leak_no_secret(tmp_path: Path) -> None:
    started = time.time()
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    planted = {
        "the API key": secrets.token_hex(24),
        "the HF_TOKEN": "hf_" + secrets.token_hex(12),
        "the lower-case hf_token": "hf_" + secrets.token_hex(12),
        "the index password": "s3cretpass" + secrets.token_hex(6),
    }
    key_file = STATE / "test-api-key"
    key_file.write_text(planted["the API key"] + "\n")
    key_file.chmod(0o600)
    data = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    # A URL credential where nothing in the container reads it (a proxy variable would route the engine's own
    # /health checks through a proxy that does not exist).
    data["env"].update(
        HF_TOKEN=planted["the HF_TOKEN"],
        hf_token=planted["the lower-case hf_token"],
        PIP_INDEX_URL=f"https://ci:{planted['the index password']}@pypi.invalid/simple",
    )
    profile = tmp_path / "keyed.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    args = (f"PROFILE={profile}", "PROFILER=torch", f"ANSIBLE_ARGS=-vvv -e refdeploy_api_key_file={key_file}")
    outputs: dict[str, str] = {}
    try:
        deploy = make("deploy", *args)
        outputs["make deploy's output"] = deploy.output
        assert deploy.rc == 0, deploy.output[-4000:]
        _run_dir, manifest = manifest_of(deploy)
        ref = _run_dir / "manifest.json"
        body = {"model": "tiny-llama", "prompt": "x", "max_tokens": 2}
        assert _post(body, None) == 401
        assert _post(body, "wrong") == 401
        assert _post(body, planted["the API key"]) == 200
        c = inspect(CONTAINER)
        # Docker has them (they must reach the engine); nothing the product writes or prints does.
        assert c is not None and f"HF_TOKEN={planted['the HF_TOKEN']}" in c["Config"]["Env"]
        assert manifest["plan"]["api"]["key_file"] == str(key_file)

        for target, extra in (("bench", ("WORKLOAD=smoke", "RUNS=1")), ("capture", ("SECONDS=2",)), ("plan", ()),
                              ("verify", (f"REF={ref}",)), ("profile", ("REQUESTS=1", "KEEP=1"))):  # fmt: skip
            r = make(target, *extra, *args)
            outputs[f"make {target}'s output"] = r.output
            assert r.rc == 0, f"make {target}: {r.output[-4000:]}"
            # -vvv reached Ansible: the connection lines it prints only at -vvv.
            assert "ESTABLISH LOCAL CONNECTION" in r.output, f"make {target} did not run at -vvv"
        assert "localhost matches the reference" in outputs["make verify's output"]
        assert (inspect(CONTAINER) or {}).get("Id") == c["Id"]  # profile found the profiler configured: no start

        # The copy the engine reads: root:10001 0440 in a directory only root enters; the one other place it is.
        assert KEY_COPY.read_text().strip() == planted["the API key"]
        assert (KEY_COPY.stat().st_mode & 0o777, KEY_COPY.stat().st_gid, KEY_COPY.parent.stat().st_mode & 0o777) == (
            0o440,
            10001,
            0o700,
        )
        logs = {f"docker logs {name}": _logs(name) for name in (CONTAINER, f"{CONTAINER}-samplers")}
        logs["the processes' titles"] = docker("top", CONTAINER, "-eo", "pid,args")
        hits = found(
            planted,
            roots=[REPO / "runs", STATE],
            texts={**outputs, **logs, **_journal(since)},
            skip=[key_file, KEY_COPY.parent],
        )
        assert hits == [], "planted secrets found: " + "; ".join(hits)
        # What was searched holds this test's runs: the bench's manifest, the capture's bundle, the profile.
        made = [str(f) for f in (REPO / "runs").rglob("*") if f.is_file() and f.stat().st_mtime >= started]
        for what in ("/bench/manifest.json", "/capture/", "/profile/summary.json", "/manifest.json"):
            assert any(what in f for f in made), f"no {what} written under runs/ by this test"
    finally:
        key_file.unlink()
        assert make("deploy").rc == 0
    assert not KEY_COPY.exists() and not Path(f"{KEY_COPY}.previous").exists()
