"""The front door on the embedded default: a keyed deploy of cpu-tiny with front_door {listen: 0.0.0.0}, then every
route vLLM has, three ways: on vLLM's own private address without the key (what answers there today), and through
the front door without and with the key. Then what cannot connect: vLLM from a container (outside the host's
network namespace), and /health through the front door from an address outside the monitoring networks. Then a
bench straight to vLLM and one through the front door (make bench VIA=front), compared with VARIABLE=via.

Two engine starts: the keyed one, and the default put back at the end (which also removes the front door); two
smoke benches of two measured runs each (about 50 s each here).
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import struct
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import BASE_URL, CONTAINER, REPO, bench_dir, docker, inspect, make, manifest_of

pytestmark = pytest.mark.integration
ENGINE_STARTS = 2

STATE = Path("/var/lib/refdeploy")
FRONT = f"{CONTAINER}-front"
FRONT_URL = "https://127.0.0.1:8443"
SELF_SIGNED = STATE / "secrets" / f"{FRONT}-selfsigned" / "cert.pem"
# vLLM behind the front door: its private network's second address (the profile's default private_subnet), no
# published port.
PRIVATE = "172.31.254.2"
PRIVATE_URL = f"http://{PRIVATE}:8000"
# The routes a client needs (GET the list, POST a completion) and the monitoring ones the host may read.
SERVED_WITH_KEY = {("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
                   ("GET", "/health"), ("GET", "/metrics")}  # fmt: skip
BODIES = {
    "/v1/completions": {"model": "tiny-llama", "prompt": "x", "max_tokens": 2},
    "/v1/chat/completions": {"model": "tiny-llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
}


def _status(url: str, method: str = "GET", key: str | None = None, body: object = None) -> int:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    ctx = ssl.create_default_context(cafile=str(SELF_SIGNED)) if url.startswith("https:") else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _from_a_container(image: str, *curl: str) -> subprocess.CompletedProcess[str]:
    """curl in a container on Docker's default bridge: another network namespace, an address of 172.17.0.0/16."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "bridge", "--user", "0", image, "curl", "-sk", "--max-time", "5",
         "-o", "/dev/null", "-w", "%{http_code}", *curl],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _bridge_gateway(image: str) -> str:
    """The host's address as a container on the default bridge reaches it: its default route's gateway, from the
    kernel's /proc/net/route (hex, in the host's byte order: little-endian here). Not `docker network inspect
    bridge`: its IPAM.Config names no Gateway on this machine's fresh Docker (20.10.24+dfsg1, 2026-12-06), and
    the test then curled http://:8000/health, which fails as a malformed URL (rc 3), not as a closed port."""
    out = docker("run", "--rm", "--network", "bridge", "--entrypoint", "cat", image, "/proc/net/route")
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    raise AssertionError(f"no default route in a container on the default bridge:\n{out}")


def _cannot_connect(got: subprocess.CompletedProcess[str]) -> bool:
    """curl's own exit status for no connection: 7 refused, 28 timed out (dropped). Anything else, a failed
    `docker run` included (125), is not evidence of a closed port."""
    return got.returncode in (7, 28) and got.stdout == "000"


@pytest.mark.timeout(1800)
def test_beyond_loopback_clients_reach_only_the_front_door_and_it_asks_every_route_for_the_key(tmp_path: Path) -> None:
    key = secrets.token_hex(24)
    key_file = STATE / "test-front-door-key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    data = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    data["front_door"] = {"listen": "0.0.0.0", "port": 8443}
    profile = tmp_path / "fronted.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    # The operator's pair, named but absent: refused before any change, in a line that names the file.
    named = {**data, "front_door": {**data["front_door"], "tls_cert_file": "/etc/refdeploy/absent-cert.pem",
                                    "tls_key_file": "/etc/refdeploy/absent-key.pem"}}  # fmt: skip
    (tmp_path / "named.yaml").write_text(yaml.safe_dump(named, sort_keys=False))
    refused = make(
        "preflight", f"PROFILE={tmp_path / 'named.yaml'}", f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}"
    )
    assert refused.rc != 0
    assert (
        "/etc/refdeploy/absent-cert.pem (the profile's front_door.tls_cert_file or tls_key_file) is not a file on "
        in (" ".join(refused.output.split()))
    )
    try:
        deploy = make("deploy", f"PROFILE={profile}", f"ANSIBLE_ARGS=-v -e refdeploy_api_key_file={key_file}")
        assert deploy.rc == 0, deploy.output[-4000:]
        assert key not in deploy.output
        _run_dir, manifest = manifest_of(deploy)
        front = manifest["front_door"]
        fingerprint = docker("run", "--rm", "--network=none", "-v", f"{SELF_SIGNED}:/c.pem:ro", "--user", "0",
                             manifest["plan"]["images"]["frontdoor_tag"], "openssl", "x509", "-noout",
                             "-fingerprint", "-sha256", "-in", "/c.pem")  # fmt: skip
        assert front["certificate_sha256_fingerprint"] == fingerprint.strip().split("=", 1)[1]
        assert front["checked"] == "/v1/models with the key 200, without 401"
        # vLLM publishes nothing: it is on its private network, at its fixed address, which the manifest checked.
        vllm = inspect(CONTAINER)
        assert vllm is not None and not vllm["HostConfig"]["PortBindings"], vllm["HostConfig"]["PortBindings"]
        assert vllm["HostConfig"]["NetworkMode"] == f"{CONTAINER}-private"
        assert vllm["NetworkSettings"]["Networks"][f"{CONTAINER}-private"]["IPAddress"] == PRIVATE
        checks = {c["check"]: c for c in manifest["verification"]}
        assert checks["published ports (docker)"]["ok"] and checks["published ports (docker)"]["actual"] == []
        assert checks[f"address on {CONTAINER}-private (docker)"]["actual"] == PRIVATE
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{BASE_URL}/health", timeout=10)  # nothing on the host's loopback port 8000

        # Every route vLLM has (its OpenAPI document lists them), and the three answers.
        with urllib.request.urlopen(f"{PRIVATE_URL}/openapi.json", timeout=30) as resp:
            paths = json.loads(resp.read())["paths"]
        rows = []
        for path in sorted(paths):
            if "{" in path:
                continue  # a templated path (/v1/models/{id}-like): its concrete siblings are in the table
            method = "POST" if path in BODIES else "GET"
            body = BODIES.get(path) if method == "POST" else None
            # GET on a POST-only route: vLLM answers 405 where it checks no key (401 where it does), and nothing
            # is paused, aborted or reset by the table.
            today = _status(f"{PRIVATE_URL}{path}", method, None, body)
            without = _status(f"{FRONT_URL}{path}", method, None, body)
            with_key = _status(f"{FRONT_URL}{path}", method, key, body)
            rows.append((method, path, today, without, with_key))
        table = "\n".join(f"{m:<5} {p:<40} {t:>5} {w:>8} {k:>9}" for m, p, t, w, k in rows)
        print(f"\nroute table ({len(rows)} routes): method path, vLLM without key, front door without, with\n{table}")
        answered_today = [r for r in rows if r[2] not in (401, 404)]
        assert len(answered_today) >= 10, table  # vLLM's own port: most routes answer without a key
        for method, path, _today, without, with_key in rows:
            allowed = (method, path) in SERVED_WITH_KEY
            assert without == (401 if allowed else 404), f"{method} {path} without the key: {without}"
            assert with_key == (200 if allowed else 404), f"{method} {path} with the key: {with_key}"
        assert _status(f"{FRONT_URL}/v1/completions", "POST", "wrong", BODIES["/v1/completions"]) == 401

        # From another network namespace: vLLM does not answer at all, on its private address or on the host's
        # port 8000; the front door does, and /health there is refused to an address outside the monitoring
        # networks, key or not.
        image = manifest["plan"]["images"]["frontdoor_tag"]
        gateway = _bridge_gateway(image)
        for target in (f"http://{gateway}:8000/health", f"{PRIVATE_URL}/health", f"{PRIVATE_URL}/v1/models"):
            got = _from_a_container(image, target)
            assert _cannot_connect(got), f"{target} from the default bridge: rc {got.returncode}, {got.stdout!r}"
        assert (
            _from_a_container(image, "-H", f"Authorization: Bearer {key}", f"https://{gateway}:8443/v1/models").stdout
            == "200"
        )
        assert (
            _from_a_container(image, "-H", f"Authorization: Bearer {key}", f"https://{gateway}:8443/health").stdout
            == "403"
        )

        # The key is in no inspection or log of the front door; its access log has the requests.
        c = inspect(FRONT)
        assert c is not None and key not in json.dumps(c)
        assert c["HostConfig"]["CapDrop"] == ["ALL"] and c["HostConfig"]["ReadonlyRootfs"] is True
        logs = subprocess.run(["docker", "logs", FRONT], capture_output=True, text=True, timeout=60)
        assert key not in logs.stdout + logs.stderr and '"GET /v1/models HTTP/1.1" 200' in logs.stdout
        status = make("status", f"PROFILE={profile}", f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}")
        assert f"front door {FRONT}: running, https://127.0.0.1:8443" in " ".join(status.output.split())
        assert "health: 200" in status.output  # `make status` reads /health on the private address

        # The front door's cost, measured: the same smoke workload straight to vLLM and through the door.
        keyed = (f"PROFILE={profile}", f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}", "WORKLOAD=smoke", "RUNS=2")
        direct = make("bench", *keyed, timeout=900)
        assert direct.rc == 0, direct.output[-4000:]
        through = make("bench", *keyed, "VIA=front", timeout=900)
        assert through.rc == 0, through.output[-4000:]
        assert key not in direct.output + through.output
        direct_dir, through_dir = bench_dir(direct), bench_dir(through)
        m = json.loads((through_dir / "manifest.json").read_text())
        assert (m["via"], m["base_url"]) == ("front door https://127.0.0.1:8443", "https://127.0.0.1:8443")
        assert json.loads((direct_dir / "manifest.json").read_text())["base_url"] == PRIVATE_URL
        summary = json.loads((through_dir / "summary.json").read_text())
        runs = [r for r in summary["runs"] if r["phase"] == "measured"]
        assert len(runs) == 4 and all(r["status"] == "ok" for r in runs), runs
        compared = make("compare", f"A={direct_dir}", f"B={through_dir}", "VARIABLE=via")
        print(compared.output[-3000:])
        assert compared.rc == 0, compared.output[-3000:]
        assert "via (A None, B 'front door https://127.0.0.1:8443')" in " ".join(compared.output.split())
        # Its requests are in the door's access log, with the client's TLS checked (no -k in vLLM's client).
        logs = subprocess.run(["docker", "logs", FRONT], capture_output=True, text=True, timeout=60)
        assert logs.stdout.count('"POST /v1/completions HTTP/1.1" 200') >= 4 * 8, logs.stdout[-2000:]
    finally:
        back = make("deploy")
        key_file.unlink(missing_ok=True)
    assert back.rc == 0, back.output[-4000:]
    assert inspect(FRONT) is None
    assert not (STATE / "secrets" / FRONT).exists()
