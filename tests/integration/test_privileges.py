"""The live default deployment runs with least privilege, as Docker and the kernel report it: the serving container
drops every capability and cannot gain one, has its pids limit, sits alone on its own bridge network whose containers
cannot reach each other (a container put on that network cannot connect to the engine, the host can through the
published port), and serves a generated model that is root's and read-only to everyone else. Prints the listing.

Reuses the deployment (`deployed`): the first deploy after the spec gained these settings replaces the container once.
"""

from __future__ import annotations

import json
import stat
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import BASE_URL, CONTAINER, docker, inspect

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deployed")]
ENGINE_STARTS = 1  # the deploy that brings the settings replaces an older container; none where it runs already

NETWORK = f"{CONTAINER}-net"
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


def test_its_network_is_its_own_and_carries_no_inter_container_traffic() -> None:
    c = _container()
    net = json.loads(docker("network", "inspect", NETWORK))[0]
    attached = sorted(v["Name"] for v in (net.get("Containers") or {}).values())
    print(f"\n{NETWORK}: driver={net['Driver']} options={net['Options']} containers={attached}")
    assert c["HostConfig"]["NetworkMode"] == NETWORK
    assert net["Driver"] == "bridge" and net["Options"].get("com.docker.network.bridge.enable_icc") == "false"
    assert attached == [CONTAINER]
    # The published port answers from the host, as the bench client and make status reach it.
    with urllib.request.urlopen(f"{BASE_URL}/health", timeout=10) as r:
        assert r.status == 200
    ip = c["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
    port = 8000
    # A container on the same network cannot connect to the engine (inter-container traffic off: dropped).
    probe = (
        "import socket,sys\n"
        "s=socket.socket(); s.settimeout(5)\n"
        f"try:\n    s.connect(({ip!r}, {port})); print('connected')\n"
        "except OSError as e:\n    print(type(e).__name__)\n"
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--network", NETWORK, "--cap-drop", "ALL", "--entrypoint", "python3",
         c["Config"]["Image"], "-c", probe],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    print(f"a neighbour on {NETWORK} connecting to {ip}:{port}: {out.stdout.strip() or out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("TimeoutError", "timeout", "ConnectionRefusedError"), out.stdout


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
