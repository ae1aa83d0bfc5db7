"""The front door on the embedded default: a keyed deploy of cpu-tiny with front_door {listen: 0.0.0.0}, then every
route vLLM has, three ways: on vLLM's own unix socket without the key (what answers there today), and through
the front door without and with the key. Then what cannot connect: vLLM from a container (outside the host's
network namespace), and /health through the front door from an address outside the monitoring networks, and from
the host's own bridge address. Then the door's hardening: a short key and a group-readable TLS key refused by
preflight; a keyless flood (1,200 idle connections, 48 threads) held to its rate while a keyed client is served;
each TLS 1.2 suite tried alone with openssl s_client (EC and RSA pairs). Then a bench straight to vLLM and one
through the front door (make bench VIA=front), compared with VARIABLE=via.

Two engine starts: the keyed one, and the default put back at the end (which also removes the front door); two
smoke benches of two measured runs each (about 50 s each here).
"""

from __future__ import annotations

import json
import resource
import secrets
import socket
import ssl
import statistics
import struct
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import (
    BASE_URL,
    CONTAINER,
    REPO,
    SOCKET,
    docker,
    inspect,
    make,
    manifest_of,
    ran_bench,
    server_open,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 2

STATE = Path("/var/lib/refdeploy")
FRONT = f"{CONTAINER}-front"
FRONT_URL = "https://127.0.0.1:8443"
SELF_SIGNED = STATE / "secrets" / f"{FRONT}-selfsigned" / "cert.pem"
# The routes a client needs (GET the list, POST a completion) and the monitoring ones the host may read.
SERVED_WITH_KEY = {("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
                   ("GET", "/health"), ("GET", "/metrics")}  # fmt: skip
BODIES = {
    "/v1/completions": {"model": "tiny-llama", "prompt": "x", "max_tokens": 2},
    "/v1/chat/completions": {"model": "tiny-llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
}


def _status(url: str, method: str = "GET", key: str | None = None, body: object = None, name: bool = True) -> int:
    """The answer's status; `name` False: the door's certificate checked, not the address it names (the
    self-signed one names 127.0.0.1 and the host's name, not its other addresses)."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        if url.startswith("https:"):
            ctx = ssl.create_default_context(cafile=str(SELF_SIGNED))
            ctx.check_hostname = name
            resp = urllib.request.urlopen(req, timeout=60, context=ctx)
        else:  # vLLM itself: its socket
            resp = server_open(req, timeout=60)
        with resp:
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


# TLS 1.2 suites the door must refuse: CBC ones its EC certificate could serve (nginx's default list, HIGH, offered
# them), RSA key exchange (no forward secrecy) and DHE; and the ECDHE AEAD ones it must accept. Tried against the
# live door (self-signed EC pair) and, with the same nginx.conf, against an RSA pair, where the RSA suites are
# possible at all. The client offers each alone, at OpenSSL security level 0 so that it can offer it.
REFUSED_SUITES = ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-ECDSA-AES128-SHA256",
                  "ECDHE-ECDSA-AES256-SHA384", "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "AES128-SHA",
                  "AES256-SHA256", "AES128-GCM-SHA256", "AES256-GCM-SHA384", "DHE-RSA-AES128-GCM-SHA256",
                  "DHE-RSA-AES256-SHA256")  # fmt: skip
ACCEPTED_SUITES = {"ec": ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                          "ECDHE-ECDSA-CHACHA20-POLY1305"),
                   "rsa": ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                           "ECDHE-RSA-CHACHA20-POLY1305")}  # fmt: skip
# s_client in the front door's image: each suite alone over TLS 1.2, then TLS 1.3, then TLS 1.2 with a session
# ticket asked for; "<suite> <0|1>" a line, 1 where the handshake completed.
_SUITE_LOOP = r"""
for c in "$@"; do
  if echo | openssl s_client -connect "$HOSTPORT" -tls1_2 -cipher "$c:@SECLEVEL=0" >/dev/null 2>&1; then
    echo "$c 1"; else echo "$c 0"; fi
done
echo | openssl s_client -connect "$HOSTPORT" -tls1_3 2>/dev/null | sed -n 's/^New, TLSv1.3, Cipher is /tls13 /p'
echo | openssl s_client -connect "$HOSTPORT" -tls1_2 2>/dev/null | grep -c "TLS session ticket:" | sed 's/^/tickets /'
"""


def _answers(out: str) -> dict[str, str]:
    """The loop's "<suite|tls13|tickets> <answer>" lines (the scratch door's access log shares its stdout)."""
    pairs = (line.split(" ", 1) for line in out.splitlines() if " " in line)
    known = {*REFUSED_SUITES, *ACCEPTED_SUITES["ec"], *ACCEPTED_SUITES["rsa"], "tls13", "tickets"}
    return {k: v for k, v in pairs if k in known}


def _suites(image: str, hostport: str, suites: tuple[str, ...], *docker_args: str) -> dict[str, str]:
    out = docker("run", "--rm", "--user", "0", "-e", f"HOSTPORT={hostport}", *docker_args, image, "sh", "-c",
                 _SUITE_LOOP, "suites", *suites)  # fmt: skip
    return _answers(out)


def _rsa_door(image: str, conf: str, tmp: Path) -> dict[str, str]:
    """The live door's nginx.conf with an RSA pair, on a port of its own in a network namespace of its own."""
    scratch = tmp / "rsa-door"
    scratch.mkdir()
    (scratch / "nginx.conf").write_text(
        conf.replace("listen 0.0.0.0:8443 ssl;", "listen 127.0.0.1:9443 ssl;").replace("/etc/refdeploy-front", "/d")
    )
    (scratch / "key-map.conf").write_text("")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=rsa",
                    "-keyout", str(scratch / "key.pem"), "-out", str(scratch / "cert.pem")],
                   capture_output=True, check=True, timeout=60)  # fmt: skip
    for f in scratch.iterdir():
        f.chmod(0o644)
    loop = "nginx -e stderr -c /d/nginx.conf && sleep 1 && " + _SUITE_LOOP
    suites = (*REFUSED_SUITES, *ACCEPTED_SUITES["rsa"])
    out = docker("run", "--rm", "--user", "0", "--network", "none", "-e", "HOSTPORT=127.0.0.1:9443",
                 "-v", f"{scratch}:/d:ro", image, "sh", "-c", loop, "suites", *suites)  # fmt: skip
    return _answers(out)


def _get(url: str, key: str | None) -> tuple[int, float]:
    start = time.monotonic()
    return _status(url, "GET", key), time.monotonic() - start


def _flood(key: str, seconds: float = 6.0, threads: int = 48, idle: int = 1200) -> dict[str, Any]:
    """A keyless flood through the door while a keyed client keeps asking: `idle` TCP connections opened and left
    silent (more than the old door's 1,024 in all), and `threads` clients sending keyless requests as fast as
    they can for `seconds`. Returns the keyless answers by status and the keyed client's answers and latencies,
    before and during."""
    url = f"{FRONT_URL}/v1/models"
    before = [_get(url, key) for _ in range(20)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, idle + 1024)), hard))
    held = [socket.create_connection(("127.0.0.1", 8443), timeout=5) for _ in range(idle)]
    end = time.monotonic() + seconds

    def keyless() -> list[int]:
        got = []
        while time.monotonic() < end:
            got.append(_status(url))
        return got

    def keyed_client() -> list[tuple[int, float]]:
        got = []
        while time.monotonic() < end:
            got.append(_get(url, key))
        return got

    try:
        with ThreadPoolExecutor(threads + 1) as pool:
            floods = [pool.submit(keyless) for _ in range(threads)]
            keyed = pool.submit(keyed_client)
            codes = [c for f in floods for c in f.result()]
            during = keyed.result()
    finally:
        for s in held:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return {
        "keyless": {c: codes.count(c) for c in sorted(set(codes))},
        "keyless_per_s": round(len(codes) / seconds),
        "keyed_before": [c for c, _ in before],
        "keyed_during": [c for c, _ in during],
        "keyed_ms_before": round(statistics.median(t for _, t in before) * 1000, 1),
        "keyed_ms_during": round(statistics.median(t for _, t in during) * 1000, 1),
        "keyed_ms_during_max": round(max(t for _, t in during) * 1000, 1),
    }


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
    # A short key, and the operator's TLS key readable by its group: both refused by the plan, before any change,
    # each in a line of the one refusal; neither key shown.
    short_key, tls_key = STATE / "test-front-door-short-key", STATE / "test-front-door-tls-key.pem"
    short_key.write_text("0123456789abcdef\n")
    short_key.chmod(0o600)
    tls_key.write_text("-----BEGIN PRIVATE KEY-----\nnot-a-key\n-----END PRIVATE KEY-----\n")
    tls_key.chmod(0o640)
    loose = {**data, "front_door": {**data["front_door"], "tls_cert_file": str(tls_key), "tls_key_file": str(tls_key)}}
    (tmp_path / "loose.yaml").write_text(yaml.safe_dump(loose, sort_keys=False))
    try:
        short = make("preflight", f"PROFILE={tmp_path / 'loose.yaml'}",
                     f"ANSIBLE_ARGS=-e refdeploy_api_key_file={short_key}")  # fmt: skip
    finally:
        short_key.unlink(missing_ok=True)
        tls_key.unlink(missing_ok=True)
    said = " ".join(short.output.split())
    assert short.rc != 0 and "nothing was changed" in said, short.output[-3000:]
    assert f"the API key in {short_key} is 16 characters, shorter than the 32 required" in said
    assert (
        f"the front door's TLS key {tls_key} must be root's and readable by root only (it is uid 0, mode 640)" in said
    )
    assert "0123456789abcdef" not in short.output and "not-a-key" not in short.output
    print(f"\nshort key and loose TLS key refused: {[ln for ln in short.output.splitlines() if 'shorter' in ln][:1]}")
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
        # vLLM publishes nothing and has no network, which the manifest checked: the door reaches its socket.
        vllm = inspect(CONTAINER)
        assert vllm is not None and not vllm["HostConfig"]["PortBindings"], vllm["HostConfig"]["PortBindings"]
        assert vllm["HostConfig"]["NetworkMode"] == "none"
        checks = {c["check"]: c for c in manifest["verification"]}
        assert checks["published ports (docker)"]["ok"] and checks["published ports (docker)"]["actual"] == []
        assert checks["network (docker)"]["ok"] and checks["network (docker)"]["actual"] == "none"
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=10)  # nothing on the host's port 8000

        # Every route vLLM has (its OpenAPI document lists them), and the three answers.
        with server_open(f"{BASE_URL}/openapi.json", timeout=30) as resp:
            paths = json.loads(resp.read())["paths"]
        rows = []
        for path in sorted(paths):
            if "{" in path:
                continue  # a templated path (/v1/models/{id}-like): its concrete siblings are in the table
            method = "POST" if path in BODIES else "GET"
            body = BODIES.get(path) if method == "POST" else None
            # GET on a POST-only route: vLLM answers 405 where it checks no key (401 where it does), and nothing
            # is paused, aborted or reset by the table.
            today = _status(f"{BASE_URL}{path}", method, None, body)
            without = _status(f"{FRONT_URL}{path}", method, None, body)
            with_key = _status(f"{FRONT_URL}{path}", method, key, body)
            rows.append((method, path, today, without, with_key))
        table = "\n".join(f"{m:<5} {p:<40} {t:>5} {w:>8} {k:>9}" for m, p, t, w, k in rows)
        print(f"\nroute table ({len(rows)} routes): method path, vLLM without key, front door without, with\n{table}")
        answered_today = [r for r in rows if r[2] not in (401, 404)]
        assert len(answered_today) >= 10, table  # vLLM's own socket: most routes answer without a key
        for method, path, _today, without, with_key in rows:
            allowed = (method, path) in SERVED_WITH_KEY
            assert without == (401 if allowed else 404), f"{method} {path} without the key: {without}"
            assert with_key == (200 if allowed else 404), f"{method} {path} with the key: {with_key}"
        assert _status(f"{FRONT_URL}/v1/completions", "POST", "wrong", BODIES["/v1/completions"]) == 401

        # From another network namespace: vLLM does not answer at all on the host's port 8000 (it has no address:
        # the old private one, 172.31.254.2, is routed like any other address, to whatever this lab's own network
        # answers there); the front door does, and /health there is refused to an address outside the monitoring
        # networks, key or not.
        image = manifest["plan"]["images"]["frontdoor_tag"]
        gateway = _bridge_gateway(image)
        for target in (f"http://{gateway}:8000/health", f"http://{gateway}:8000/v1/models"):
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

        # The host on one of its own addresses beyond loopback (its docker0 bridge address) reads /health and
        # /metrics with the key; without it, 401.
        for route in ("/health", "/metrics"):
            assert _status(f"https://{gateway}:8443{route}", "GET", key, name=False) == 200, route
            assert _status(f"https://{gateway}:8443{route}", name=False) == 401, route

        # A keyless flood is held to its rate while a keyed client is served, and the door is not out of
        # connections with more idle ones open than the old door had in all.
        flood = _flood(key)
        print(f"\nflood through the door: {flood}")
        keyless = flood["keyless"]
        assert set(flood["keyed_before"]) == set(flood["keyed_during"]) == {200}, flood
        assert set(keyless) <= {401, 429} and keyless.get(429, 0) > 0, flood
        # 5 a second and a burst of 10, from one address, over the flood's seconds (and the rate's own rounding).
        assert keyless.get(401, 0) <= 10 + 5 * 6 + 5, flood

        # TLS: forward-secret AEAD suites only, on the live door (EC) and with its nginx.conf and an RSA pair.
        suites = _suites(image, "127.0.0.1:8443", REFUSED_SUITES + ACCEPTED_SUITES["ec"], "--network", "host")
        conf = docker("run", "--rm", "--user", "0", "-v", f"{STATE}/secrets/{FRONT}:/f:ro", image, "cat",
                      "/f/nginx.conf")  # fmt: skip
        rsa = _rsa_door(image, conf, tmp_path)
        print(f"\nTLS 1.2 suites, 1 accepted: EC door {suites}\nRSA door {rsa}")
        tls13 = ("TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256")
        for offered, accepted in ((suites, ACCEPTED_SUITES["ec"]), (rsa, ACCEPTED_SUITES["rsa"])):
            assert {c: offered[c] for c in REFUSED_SUITES} == dict.fromkeys(REFUSED_SUITES, "0"), offered
            assert {c: offered[c] for c in accepted} == dict.fromkeys(accepted, "1"), offered
            assert offered["tls13"] in tls13 and offered["tickets"] == "0", offered

        # The key is in no inspection or log of the front door; its access log has the requests.
        c = inspect(FRONT)
        assert c is not None and key not in json.dumps(c)
        assert c["HostConfig"]["CapDrop"] == ["ALL"] and c["HostConfig"]["ReadonlyRootfs"] is True
        logs = subprocess.run(["docker", "logs", FRONT], capture_output=True, text=True, timeout=60)
        assert key not in logs.stdout + logs.stderr and '"GET /v1/models HTTP/1.1" 200' in logs.stdout
        status = make("status", f"PROFILE={profile}", f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}")
        assert f"front door {FRONT}: running, https://127.0.0.1:8443" in " ".join(status.output.split())
        assert "health: 200" in status.output  # `make status` reads /health through the socket

        # The front door's cost, measured: the same smoke workload straight to vLLM and through the door.
        keyed = (f"PROFILE={profile}", f"ANSIBLE_ARGS=-e refdeploy_api_key_file={key_file}", "WORKLOAD=smoke", "RUNS=2")
        # Their runs ran (a stream two shared cores burst is flagged, and a bench of none valid says so: ran_bench).
        direct = make("bench", *keyed, timeout=900)
        through = make("bench", *keyed, "VIA=front", timeout=900)
        assert key not in direct.output + through.output
        direct_dir, through_dir = ran_bench(direct), ran_bench(through)
        m = json.loads((through_dir / "manifest.json").read_text())
        assert (m["via"], m["base_url"]) == ("front door https://127.0.0.1:8443", "https://127.0.0.1:8443")
        direct_manifest = json.loads((direct_dir / "manifest.json").read_text())
        assert (direct_manifest["base_url"], direct_manifest["api"]["socket"]) == (BASE_URL, SOCKET)
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
