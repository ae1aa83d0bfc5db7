"""Secrets that cannot leak, on the embedded default: a keyed deploy, then bench, capture, plan, verify and profile,
every one at -vvv, and no artifact, log, process title or line of output holds the API key, the Hugging Face token or
a secret planted in the profile's env in each form that once leaked (issue 46): lower-case names with a suffix
(api_key_1, hf_token_b64, password2), DB_PASS, passphrase, cookie, a bearer header in free text, a JSON document in a
string with a number in it, and a URL whose password holds a `/`. `docker inspect` holds neither the key nor the
token: the token reaches the engine as a file (HF_TOKEN_PATH), which huggingface_hub in the container reads.

The key reaches vLLM (401 without it, 200 with it) and the bench client through the root-only copy only. The one
keyed engine is started with the torch profiler configured (PROFILER=torch), so that `make profile KEEP=1` finds it
so and starts nothing: two engine starts in all, the keyed one and the default put back at the end, as the keyed
test of test_safety.py took before it moved here. Without redaction the same search finds the planted secrets
(tests/unit/config/test_secrets_grep.py switches it off over artifacts written the same way).
"""

from __future__ import annotations

import hashlib
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
from tests.integration.conftest import BASE_URL, CONTAINER, REPO, docker, inspect, make, manifest_of, server_open

pytestmark = pytest.mark.integration
ENGINE_STARTS = 2

STATE = Path("/var/lib/refdeploy")
KEY_COPY = STATE / "secrets" / f"{CONTAINER}.api-key"
HF_TOKEN_COPY = STATE / "secrets" / f"{CONTAINER}.hf-token"
# What huggingface_hub in the serving container reads as its token, as a digest: the token on no command line.
HUB_TOKEN_DIGEST = (
    "import hashlib, huggingface_hub; print(hashlib.sha256(huggingface_hub.get_token().encode()).hexdigest())"
)


def _post(body: dict[str, Any], key: str | None) -> int:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(f"{BASE_URL}/v1/completions", json.dumps(body).encode(), headers)
    try:
        with server_open(req, timeout=60) as resp:
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
        "the HF token": "hf_" + secrets.token_hex(12),
        "api_key_1": secrets.token_hex(10),
        "hf_token_b64": secrets.token_urlsafe(12),
        "password2": "pw" + secrets.token_hex(8),
        "DB_PASS": "db" + secrets.token_hex(8),
        "passphrase": "pp" + secrets.token_hex(8),
        "cookie": "ck" + secrets.token_hex(8),
        "the bearer token in free text": "bt" + secrets.token_hex(10),
        "the token in a JSON string": "js" + secrets.token_hex(8),
        "the number in a JSON string": str(secrets.randbelow(10**17) + 10**17),
        "the index password": "s3cretpass" + secrets.token_hex(6),
    }
    key_file = STATE / "test-api-key"
    token_file = STATE / "test-hf-token"
    for path, value in ((key_file, planted["the API key"]), (token_file, planted["the HF token"])):
        path.write_text(value + "\n")
        path.chmod(0o600)
    data = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    # Where nothing in the container reads them (a proxy variable would route the engine's own /health checks
    # through a proxy that does not exist).
    data["env"].update(
        api_key_1=planted["api_key_1"],
        hf_token_b64=planted["hf_token_b64"],
        password2=planted["password2"],
        DB_PASS=planted["DB_PASS"],
        passphrase=planted["passphrase"],
        cookie=f"session={planted['cookie']}",
        REFDEPLOY_NOTE=f"curl -H 'Authorization: Bearer {planted['the bearer token in free text']}' http://x.invalid",
        REFDEPLOY_CLIENT=json.dumps({"auth": {"token": planted["the token in a JSON string"]},
                                     "client": {"api_key": int(planted["the number in a JSON string"])}}),
        PIP_INDEX_URL=f"https://ci:pa/{planted['the index password']}@pypi.invalid/simple",
    )  # fmt: skip
    profile = tmp_path / "keyed.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    ansible_args = f"-vvv -e refdeploy_api_key_file={key_file} -e refdeploy_hf_token_file={token_file}"
    args = (f"PROFILE={profile}", "PROFILER=torch", f"ANSIBLE_ARGS={ansible_args}")
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
        # The token is a file the engine reads, never an environment value: docker inspect has its path only.
        assert c is not None and "HF_TOKEN_PATH=/run/refdeploy/hf-token/token" in c["Config"]["Env"]
        assert not [e for e in c["Config"]["Env"] if e.startswith(("HF_TOKEN=", "HUGGING_FACE_HUB_TOKEN="))]
        want = hashlib.sha256(planted["the HF token"].encode()).hexdigest()
        assert docker("exec", CONTAINER, "python3", "-c", HUB_TOKEN_DIGEST).strip() == want
        assert manifest["plan"]["api"]["key_file"] == str(key_file)
        assert manifest["plan"]["api"]["hf_token_file"] == str(token_file)

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
        # The token's copy: root:10001 0440, in a directory of its own (root:10001 0750) the container mounts.
        token_copy = HF_TOKEN_COPY / "token"
        assert token_copy.read_text().strip() == planted["the HF token"]
        assert (token_copy.stat().st_mode & 0o777, token_copy.stat().st_gid) == (0o440, 10001)
        assert (HF_TOKEN_COPY.stat().st_mode & 0o777, HF_TOKEN_COPY.stat().st_gid) == (0o750, 10001)
        logs = {f"docker logs {name}": _logs(name) for name in (CONTAINER, f"{CONTAINER}-samplers")}
        logs["the processes' titles"] = docker("top", CONTAINER, "-eo", "pid,args")
        logs["the host's processes"] = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        hits = found(
            planted,
            roots=[REPO / "runs", STATE],
            texts={**outputs, **logs, **_journal(since)},
            skip=[key_file, token_file, KEY_COPY.parent],
        )
        # The env's secrets must reach Docker (the engine's environment); the key and the token must not.
        files_only = {k: planted[k] for k in ("the API key", "the HF token")}
        hits += found(files_only, texts={"docker inspect": json.dumps(inspect(CONTAINER))})
        assert hits == [], "planted secrets found: " + "; ".join(hits)
        # What was searched holds this test's runs: the bench's manifest, the capture's bundle, the profile.
        made = [str(f) for f in (REPO / "runs").rglob("*") if f.is_file() and f.stat().st_mtime >= started]
        for what in ("/bench/manifest.json", "/capture/", "/profile/summary.json", "/manifest.json"):
            assert any(what in f for f in made), f"no {what} written under runs/ by this test"
    finally:
        key_file.unlink()
        token_file.unlink()
        assert make("deploy").rc == 0
    assert not KEY_COPY.exists() and not Path(f"{KEY_COPY}.previous").exists() and not HF_TOKEN_COPY.exists()
