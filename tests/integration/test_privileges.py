"""The live default deployment runs with least privilege, as Docker and the kernel report it: the serving container
drops every capability and cannot gain one, has its pids limit, has no network address (vLLM on a unix socket only
root, the engine's user and the socket's group may reach), and serves a generated model that is root's and read-only
to everyone else. Prints the listing.

Reuses the deployment (`deployed`): the first deploy after the spec gained these settings replaces the container once.
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from serving.plan.render import API_GID, RUNTIME_UID
from tests.integration.conftest import BASE_URL, CONTAINER, SOCKET, docker, inspect, server_open

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deployed")]
ENGINE_STARTS = 1  # the deploy that brings the settings replaces an older container; none where it runs already

MODEL = Path("/var/lib/refdeploy/models/tiny-llama")


def _container() -> dict[str, Any]:
    c = inspect(CONTAINER)
    assert c is not None and c["State"]["Running"], f"{CONTAINER} is not running"
    return c


def _status(pid: int) -> dict[str, str]:
    rows = (Path(f"/proc/{pid}/status").read_text()).splitlines()
    return {k: v.strip() for k, _, v in (r.partition(":") for r in rows)}


def _pids_max(pid: int) -> str:
    """pids.max of the process's cgroup, on cgroup v1 or v2."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _n, controllers, path = line.split(":", 2)
        if controllers == "pids":
            return Path(f"/sys/fs/cgroup/pids{path}/pids.max").read_text().strip()
        if controllers == "" and Path(f"/sys/fs/cgroup{path}/pids.max").exists():
            return Path(f"/sys/fs/cgroup{path}/pids.max").read_text().strip()
    raise AssertionError(f"no pids cgroup for pid {pid}")


def test_the_serving_container_has_no_capability_and_cannot_gain_one() -> None:
    c = _container()
    hc = c["HostConfig"]
    pid = c["State"]["Pid"]
    st = _status(pid)
    print(f"\n{CONTAINER}: CapDrop={hc.get('CapDrop')} CapAdd={hc.get('CapAdd')} SecurityOpt={hc.get('SecurityOpt')} "
          f"PidsLimit={hc.get('PidsLimit')} NetworkMode={hc.get('NetworkMode')}")  # fmt: skip
    print(f"pid {pid} ({st['Name']}, uid {st['Uid'].split()[0]}): CapEff={st['CapEff']} CapBnd={st['CapBnd']} "
          f"NoNewPrivs={st['NoNewPrivs']} pids.max={_pids_max(pid)}")  # fmt: skip
    assert hc["CapDrop"] == ["ALL"] and not hc.get("CapAdd")
    assert "no-new-privileges" in [o.removesuffix(":true") for o in hc["SecurityOpt"]]
    assert (st["CapEff"], st["CapBnd"], st["NoNewPrivs"]) == ("0000000000000000", "0000000000000000", "1")
    assert hc["PidsLimit"] == 4096 and _pids_max(pid) == "4096"


# Every route vLLM answers without its key, and /v1 ones (issue 46's list).
ROUTES = ("/health", "/metrics", "/v1/models", "/v1/completions", "/tokenize", "/pause", "/abort_requests",
          "/start_profile", "/invocations", "/version", "/ping")  # fmt: skip
# Each try: GET http://<address>:8000<route> (vLLM's old port) with no proxy; what came back, a status or the error.
TRY = (
    "import json, sys, urllib.error, urllib.request\n"
    "out = {}\n"
    "opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
    "for host in sys.argv[1:]:\n"
    f"    for route in {ROUTES!r}:\n"
    "        url = 'http://' + host + ':8000' + route\n"
    "        try:\n"
    "            with opener.open(url, timeout=3) as r:\n"
    "                out[url] = r.status\n"
    "        except urllib.error.HTTPError as e:\n"
    "            out[url] = e.code\n"
    "        except OSError as e:\n"
    "            out[url] = type(getattr(e, 'reason', e)).__name__\n"
    "print(json.dumps(out))\n"
)


def _host_addresses() -> list[str]:
    """Every IPv4 address of this host's interfaces (Docker's bridges included), from `ip`."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()})


def _answered(results: dict[str, Any]) -> dict[str, Any]:
    """The tries that reached an HTTP server (a status code), not a refused, unreachable or timed-out connect."""
    return {k: v for k, v in results.items() if isinstance(v, int)}


def test_vllm_has_no_address_and_its_socket_admits_only_root_the_engine_and_its_group() -> None:
    """Issue 46: vLLM reachable only through the door. It has no network (a loopback interface only) and no
    published port; its unix socket's directory admits root, the engine's user and the socket's group. From a
    neighbour's network namespace that routes Docker's subnets through this host (the neighbour of moby issue
    48724), and as a non-root local user: no vLLM route answers, on any of the host's addresses; root through the
    socket: /health 200."""
    c = _container()
    hc = c["HostConfig"]
    print(f"\n{CONTAINER}: NetworkMode={hc['NetworkMode']} PortBindings={hc.get('PortBindings')} "
          f"Networks={sorted(c['NetworkSettings']['Networks'])}")  # fmt: skip
    assert hc["NetworkMode"] == "none" and not hc.get("PortBindings")
    assert all(not n.get("IPAddress") for n in c["NetworkSettings"]["Networks"].values())
    # Inside it: the loopback interface only (the kernel's list of the container's network namespace).
    devs = [ln.split(":")[0].strip() for ln in Path(f"/proc/{c['State']['Pid']}/net/dev").read_text().splitlines()[2:]]
    assert devs == ["lo"], devs
    # The socket and its directory: the engine's user's and the socket group's, nobody else's.
    sock, d = Path(SOCKET), Path(SOCKET).parent
    for p, want in ((d, "drwxr-s---"), (sock, "srwxrwx---")):
        st = p.lstat()
        print(f"{stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid} {p}")
        assert (stat.filemode(st.st_mode), st.st_uid, st.st_gid) == (want, RUNTIME_UID, API_GID)
    with server_open(f"{BASE_URL}/health", timeout=10) as r:
        assert r.status == 200
    addresses = _host_addresses()
    # A non-root local user: the socket's directory refuses it; no TCP address answers.
    as_nobody = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c",
         "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
         f"try:\n    s.connect({SOCKET!r}); print('connected')\nexcept OSError as e:\n    print(type(e).__name__)"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    print(f"nobody connecting to {SOCKET}: {as_nobody.stdout.strip() or as_nobody.stderr.strip()}")
    assert as_nobody.stdout.strip() == "PermissionError", as_nobody.stderr
    local = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c", TRY, *addresses],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    tried = json.loads(local.stdout)
    print(f"nobody, {len(tried)} tries on {len(addresses)} addresses: answered {_answered(tried)}")
    assert "127.0.0.1" in addresses and len(tried) == len(ROUTES) * len(addresses) and _answered(tried) == {}
    # The neighbour: a container on a network of its own, which routes Docker's default bridge through its gateway
    # (this host), as a neighbour on the host's segment would, and tries the host's every address. Not an address
    # off the host (vLLM's old private one): routed on by the host, whatever this lab's network has there answers.
    net, name = "rdtest-neighbour", "rdtest-neighbour"
    docker("rm", "-f", name, check=False)
    docker("network", "rm", net, check=False)
    docker("network", "create", net)
    try:
        gw = json.loads(docker("network", "inspect", net))[0]["IPAM"]["Config"][0]["Gateway"]
        docker("run", "-d", "--name", name, "--network", net, "--cap-drop", "ALL", "--pids-limit", "64",
               "--entrypoint", "sleep", c["Config"]["Image"], "600")  # fmt: skip
        pid = docker("inspect", "-f", "{{.State.Pid}}", name).strip()
        # The route, set in the neighbour's namespace with the host's own ip(8) (the image has none): Docker's
        # default bridge through this host, as a neighbour on its L2 segment would route a container subnet.
        in_ns = ["nsenter", "-t", pid, "-n", "ip", "route"]
        subprocess.run([*in_ns, "replace", "172.17.0.0/16", "via", gw], check=True, timeout=30)
        routes = subprocess.run([*in_ns, "show"], capture_output=True, text=True, check=True, timeout=30).stdout
        assert f"172.17.0.0/16 via {gw}" in routes, routes
        out = subprocess.run(["docker", "exec", name, "python3", "-c", TRY, *addresses],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        tried = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"the neighbour on {net} (routes: {' | '.join(routes.splitlines())}), {len(tried)} tries on "
              f"{len(addresses)} addresses: answered {_answered(tried)}")  # fmt: skip
        assert len(tried) == len(ROUTES) * len(addresses) and _answered(tried) == {}
    finally:
        docker("rm", "-f", name, check=False)
        docker("network", "rm", net, check=False)


def test_the_generated_model_is_roots_and_read_only_to_everyone_else() -> None:
    rows = []
    for p in [MODEL, *sorted(MODEL.rglob("*"))]:
        st = p.lstat()
        rows.append((str(p), st.st_uid, st.st_gid, stat.filemode(st.st_mode)))
    print("\n" + "\n".join(f"{m} {u}:{g} {p}" for p, u, g, m in rows))
    assert len(rows) > 3, f"{MODEL} holds no generated model"
    for p, uid, gid, mode in rows:
        assert (uid, gid) == (0, 0), f"{p} is {uid}:{gid}, not root's"
        assert mode[5] != "w" and mode[8] != "w", f"{p} is {mode}: its group or others may write"
