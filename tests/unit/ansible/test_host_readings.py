"""The plan's read of a host (ansible/library/refdeploy_host_readings.py), run as Ansible runs it, on this
machine: for a GPU host through the test seam (the replayers of tests/replay, a recorded 3x RTX 3090 host's
sysfs and host-level readings), whose readings must plan that host exactly as the recorded ones do."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from serving.config.profile import load_profile
from serving.host import gpu_facts, host_tuning
from serving.plan import gpu_plan
from tests.helpers.ansible_run import load_library_module, load_module_utils, run_module
from tests.helpers.gpu_hosts import IMAGE
from tests.helpers.gpu_hosts import class_spec as _class
from tests.helpers.gpu_hosts import host_readings as _readings

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "gpu-hosts" / "rtx3090-3gpu"


def read_host(args: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    return run_module("refdeploy_host_readings", args, env=env)


def replay_env(stand_ins: Path = REPO / "tests" / "replay") -> dict[str, str]:
    """The one replay seam, as a GPU test host has it: the stand-ins first on PATH, the recordings' directory."""
    return {"PATH": f"{stand_ins}:{os.environ.get('PATH', '')}", "REFDEPLOY_REPLAY_DIR": str(FIXTURE)}


def test_a_cpu_host_gives_its_served_files_and_the_key_files_owner_and_mode_not_its_contents(tmp_path: Path) -> None:
    served = tmp_path / "models"
    (served / "sub").mkdir(parents=True)
    (served / "model.safetensors").write_bytes(b"x" * 1000)
    (served / "sub" / "config.json").write_text("{}")
    key = tmp_path / "api-key"
    key.write_text("s3cret-key")
    key.chmod(0o600)
    got = read_host({"mode": "cpu", "host": "h1", "served_dirs": [str(served)], "api_key_file": str(key)})
    r = got["readings"]
    assert r["hostname"] == "h1\n"
    files = sorted(r["served_files"].splitlines())
    assert files == [f"1000\t{served}/model.safetensors", f"2\t{served}/sub/config.json"]
    assert r["api_key_file"] == f"{os.getuid()} 600 10 regular file\n"
    # Its length and whether it keeps to the key's characters, judged on the host: never the key.
    assert r["api_key_shape"] == "10 ok\n"
    assert "s3cret-key" not in json.dumps(got)
    assert "sysfs" not in r and "missing" not in r
    gone = read_host({"mode": "cpu", "host": "h1", "served_dirs": [], "api_key_file": str(tmp_path / "none")})
    assert gone["readings"]["api_key_file"] == "missing\n" and gone["readings"]["served_files"] == ""


def test_its_host_facts_are_the_ones_gather_facts_gives_and_the_read_returns_them_while_they_hold(
    tmp_path: Path,
) -> None:
    """refdeploy_host_facts collects what the manifest records with the setup module's collectors, and keeps them; the
    plan's read (which never imports the collectors) returns the kept ones while what they are read from is
    unchanged, and none where the kept file is of another key (a reboot, a release upgrade, a rename)."""
    cache = tmp_path / "host-facts.json"
    got = run_module("refdeploy_host_facts", {"cache": str(cache)})["host_facts"]
    cp = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", "setup",
         "-a", "gather_subset=min,hardware", "-e", f"ansible_python_interpreter={sys.executable}", "-o"],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    setup = json.loads(cp.stdout.split(" => ", 1)[1])["ansible_facts"]
    names = ("hostname", "fqdn", "distribution", "distribution_version", "kernel", "architecture", "os_family",
             "processor_vcpus", "processor", "memtotal_mb")  # fmt: skip
    assert {n: got[f"ansible_{n}"] for n in names} == {n: setup[f"ansible_{n}"] for n in names}
    read = read_host({"mode": "cpu", "host": "h1", "facts_cache": str(cache)})
    assert read["host_facts_cached"] is True and read["host_facts"] == got
    kept = json.loads(cache.read_text())
    cache.write_text(json.dumps({**kept, "key": "sha256:" + "0" * 64}))
    stale = read_host({"mode": "cpu", "host": "h1", "facts_cache": str(cache)})
    assert stale["host_facts_cached"] is False and stale["host_facts"] == {}
    none = read_host({"mode": "cpu", "host": "h1"})
    assert none["host_facts_cached"] is False and none["host_facts"] == {}


def test_the_kept_facts_key_changes_with_each_thing_they_are_read_from(tmp_path: Path) -> None:
    facts_cache = load_module_utils("refdeploy_facts_cache")
    root = tmp_path / "root"
    for name in facts_cache.KEYED_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name} as it was\n")
    (root / "proc/meminfo").write_text("MemTotal:       24683776 kB\nMemFree:  1 kB\n")
    first = facts_cache.key(str(root))
    assert facts_cache.key(str(root)) == first
    (root / "proc/meminfo").write_text("MemTotal:       24683776 kB\nMemFree:  2 kB\n")
    assert facts_cache.key(str(root)) == first  # free memory moves; what the facts hold does not
    changed = {}
    for name in (*facts_cache.KEYED_FILES, "proc/meminfo"):
        before = (root / name).read_text()
        (root / name).write_text(before.replace("kB", "kB ") if name == "proc/meminfo" else before + "changed\n")
        changed[name] = facts_cache.key(str(root)) != first
        (root / name).write_text(before)
    assert all(changed.values()), changed
    (root / "etc/os-release").unlink()
    assert facts_cache.key(str(root)) != first


def test_a_deploys_read_of_an_engine_docker_cannot_reach_says_it_is_not_healthy_and_reads_nothing(
    tmp_path: Path,
) -> None:
    """A deploy's plan reads the serving container's engine too (`engine`); where there is no engine to read (no
    Docker Engine answering, or no docker CLI at all, as on a bare host before preflight installs it), the read still
    succeeds, and serve waits for and reads the engine itself after the launch."""
    engine = {"container": "refdeploy-test-absent", "socket": "/run/x.sock", "kept_dir": str(tmp_path)}
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/refdeploy-test.sock"}
    got = read_host({"mode": "cpu", "host": "h1", "engine": engine}, env=no_engine)["engine"]
    assert got == {"healthy": False, "health_state": "state gone, restarts 0, /health HTTP 000", "healthy_utc": None}
    bare = tmp_path / "bin"  # this machine's tools, but docker
    bare.mkdir()
    for tool in {t.name: t for d in reversed(os.environ["PATH"].split(":")) for t in Path(d).glob("*")}.values():
        if tool.name != "docker":
            (bare / tool.name).symlink_to(tool)
    got = read_host({"mode": "cpu", "host": "h1", "engine": engine}, env={"PATH": str(bare)})["engine"]
    assert got["healthy"] is False and "docker" in got["error"], got
    assert read_host({"mode": "cpu", "host": "h1"}, env=no_engine)["engine"] is None


def test_the_read_never_ships_the_fact_collectors() -> None:
    """Every playbook's read runs a module whose zip leaves Ansible's ~100 collector files out: the controller parses
    every module_utils file a module imports, and the host compiles it, on each run. Only refdeploy_host_facts
    carries them, run where the host keeps no facts that hold."""
    shipped = [REPO / "ansible" / "library" / "refdeploy_host_readings.py",
               *sorted((REPO / "ansible" / "module_utils").glob("*.py"))]  # fmt: skip
    importers = [p.name for p in shipped if "ansible.module_utils.facts" in p.read_text()]
    assert importers == []
    assert "ansible.module_utils.facts" in (REPO / "ansible" / "library" / "refdeploy_host_facts.py").read_text()


def test_a_replayed_3090_host_reads_as_recorded_and_plans_the_reviewed_spec(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "model-00001-of-00002.safetensors").write_bytes(b"w" * 4096)
    got = read_host(
        {
            "mode": "gpu",
            "host": "gpu3090-a",
            "served_dirs": [str(served)],
            "query_gpu_fields": list(gpu_facts.QUERY_GPU_FIELDS),
        },
        replay_env(),
    )
    r = got["readings"]
    assert r["nvidia_smi_L"] == (FIXTURE / "nvidia-smi-L.txt").read_text()
    assert r["query_gpu"] == (FIXTURE / "nvidia-smi-query-gpu.csv").read_text()
    assert r["topo"] == (FIXTURE / "nvidia-smi-topo-m.txt").read_text()
    assert r["sysfs"] == gpu_plan.listing_from_tree(FIXTURE / "sys")
    assert r["meminfo"] == (FIXTURE / "host" / "meminfo.txt").read_text()
    assert r["nvidia_version"] == (FIXTURE / "host" / "proc-driver-nvidia-version.txt").read_text()
    assert r["data_paths"] == f"{served}\n"
    assert json.loads(r[f"findmnt:{served}"]) == json.loads((FIXTURE / "findmnt.json").read_text())
    assert sorted(k for k in r if k.startswith("smart:")) == ["smart:nvme0n1", "smart:nvme1n1"]
    assert "missing" not in r and "timeout" not in r
    # Planned from these readings, the host gets what the recorded readings give it: the reviewed spec.
    from_module = gpu_plan.plan_gpu_host(load_profile("rtx3090-pp3"), _class("rtx3090-pp3"), r, IMAGE)
    recorded = gpu_plan.plan_gpu_host(
        load_profile("rtx3090-pp3"), _class("rtx3090-pp3"), _readings("rtx3090-pp3"), IMAGE
    )
    assert from_module.failures == recorded.failures == []
    assert from_module.container_spec == recorded.container_spec


def test_a_tool_that_does_not_answer_is_named_and_a_missing_one_listed(tmp_path: Path) -> None:
    slow = tmp_path / "bin"
    slow.mkdir()
    smi = slow / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 30\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = replay_env(stand_ins=slow)  # no nvme, lsblk, findmnt replayers: the host's own
    got = read_host({"mode": "gpu", "host": "h", "served_dirs": [], "timeout_s": 1}, env)
    r = got["readings"]
    assert "nvidia-smi -L (after 1 s)" in r["timeout"].splitlines()
    assert r["nvidia_smi_L"] == ""
    if not any((Path(p) / "nvme").exists() for p in os.environ.get("PATH", "").split(":")):
        assert "nvme" in r["missing"].split()


def test_the_hosts_tuning_is_read_as_its_files_say_and_absent_where_there_is_none() -> None:
    t = read_host({"mode": "cpu", "host": "h1"})["tuning"]
    assert t["cmdline"] == Path("/proc/cmdline").read_text()
    assert t["swappiness"] == Path("/proc/sys/vm/swappiness").read_text()
    for name, path in (("thp_enabled", "enabled"), ("thp_defrag", "defrag"), ("numa_balancing", None)):
        f = (
            Path("/proc/sys/kernel/numa_balancing")
            if path is None
            else Path("/sys/kernel/mm/transparent_hugepage", path)
        )
        assert t[name] == (f.read_text() if f.exists() else None)
    governors = sorted(Path("/sys/devices/system/cpu").glob("cpu*/cpufreq/scaling_governor"))
    assert (t["cpu_governors"] is None) == (not governors)
    assert "gpu_settings" not in t and "replayed" not in t  # a CPU host: no nvidia-smi asked, nothing replayed
    tuned = host_tuning.host_tuning(t)
    assert tuned is not None and "unreadable" not in tuned


def test_a_replayed_gpu_hosts_tuning_comes_from_the_replay_and_says_so() -> None:
    args = {"mode": "gpu", "host": "gpu3090-a", "settings_fields": list(host_tuning.SETTINGS_FIELDS)}
    t = read_host(args, replay_env())["tuning"]
    recorded = (FIXTURE / "nvidia-smi-settings.csv").read_text()
    assert t["gpu_settings"] == recorded.split("\n", 1)[1]
    assert t["replayed"] == str(FIXTURE)
    assert t["cpu_governors"] == "".join(f"cpu{n}\tperformance\n" for n in range(32))
    tuned = host_tuning.host_tuning(t)
    assert tuned is not None
    assert tuned["source"] == f"replayed: {FIXTURE}"
    assert tuned["cpu_governor"] == "performance" and tuned["thp"] == {"enabled": "madvise", "defrag": "madvise"}
    assert [g["power_limit_w"] for g in tuned["gpus"]] == [350.0, 350.0, 300.0]


@pytest.fixture(autouse=True)
def _no_ansible_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)


def test_the_key_is_judged_on_the_host_by_length_and_characters_and_the_tls_key_by_owner_and_mode(
    tmp_path: Path,
) -> None:
    key, tls = tmp_path / "api-key", tmp_path / "key.pem"
    tls.write_text("-----BEGIN PRIVATE KEY-----\n")
    tls.chmod(0o640)
    for content, shape in (("0123456789abcdef" * 4 + "\n", "64 ok\n"), ("x", "1 ok\n"), ("has space\n", "9 other\n"),
                           ("k\u00e9y", "4 other\n"), ("two\nlines\n", "9 other\n")):  # fmt: skip
        key.write_text(content)
        r = read_host({"mode": "cpu", "host": "h1", "api_key_file": str(key), "tls_key_file": str(tls)})["readings"]
        assert r["api_key_shape"] == shape, content
        assert r["tls_key_file"] == f"{os.getuid()} 640 28 regular file\n"
        assert content.strip() not in json.dumps(r)
    key.chmod(0)
    if os.getuid() != 0:  # root reads a 0000 file
        assert read_host({"mode": "cpu", "host": "h1", "api_key_file": str(key)})["readings"]["api_key_shape"] == (
            "unreadable\n"
        )
    assert "tls_key_file" not in read_host({"mode": "cpu", "host": "h1"})["readings"]


FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 4
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
     |-- 172.17.0.1
        /32 host LOCAL
     |-- 172.17.255.255
        /32 link BROADCAST
     |-- 192.0.2.2
        /32 host LOCAL
Local:
     |-- 192.0.2.2
        /32 host LOCAL
"""
IF_INET6 = """fd000000000000000000000000000002 04 40 00 82     eth0
fe80000000000000004258fffecb6b44 41a 40 20 80 br-757a04103bc1
00000000000000000000000000000001 01 80 10 80       lo
"""


def test_the_hosts_own_addresses_are_its_local_routes_and_its_ipv6_addresses_but_link_local(tmp_path: Path) -> None:
    (tmp_path / "fib_trie").write_text(FIB_TRIE)
    (tmp_path / "if_inet6").write_text(IF_INET6)
    host_addresses = load_library_module("refdeploy_host_readings").host_addresses
    assert host_addresses(str(tmp_path)) == "127.0.0.1\n172.17.0.1\n192.0.2.2\nfd00::2\n::1\n"
    assert host_addresses(str(tmp_path / "absent")) == ""
    # This machine's, through the module: loopback at least.
    assert "127.0.0.1\n" in read_host({"mode": "cpu", "host": "h1"})["readings"]["host_addresses"]
