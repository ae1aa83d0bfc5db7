#!/usr/bin/python
"""Ansible module refdeploy_host_readings: what a plan needs to know about the managed host, read only.

  - name: Read the host for the plan          (the refdeploy_plan action plugin runs it)
    refdeploy_host_readings:
      mode: gpu                               # cpu: the served files (and the API key file); gpu: everything
      host: gpu3090-a
      served_dirs: [/srv/models/llama]
      api_key_file: /etc/refdeploy/api-key    # its owner, mode, size and type; never its contents
      query_gpu_fields: [index, name, ...]    # serving.gpu_facts.QUERY_GPU_FIELDS
    register: got                             # got.readings: {name: text}, as serving/gpu_plan.py reads them

Readings (each the tool's own output, in its own format): hostname, served_files (`find -type f -printf
'%s\\t%p\\n'`), api_key_file (`stat -c '%u %a %s %F'`, or "missing"); for a GPU host also nvidia_smi_L,
query_gpu, topo, sysfs (node and PCI NUMA files as "/sys/<path>\\t<value>"), meminfo, cgroup_fs,
docker_runtimes, dockerd_limits, data_paths, lsblk, findmnt:<dir> and smart:<nvme disk>. `missing` lists the
tools the host lacks, `timeout` the commands that did not answer within timeout_s (a wedged driver, a dead
NFS mount, a dockerd that does not answer): the plan names each one. `host_facts` are the setup module's own
facts for the platform, the distribution, the CPUs and the memory (ansible_hostname, ansible_distribution_version,
ansible_processor_vcpus, ansible_memtotal_mb, ...), read by its own collectors in this same run: a playbook gets
them without gathering facts, whose hardware subset also scans mounts, devices and DMI.

The one replay seam (tests/replay/README.md; never set in production): where REFDEPLOY_REPLAY_DIR names a
directory of recorded readings, its sys/ stands for /sys and its host/ holds the host-level readings a test
container cannot have (meminfo.txt, cgroup-fs.txt, docker-runtimes.json, dockerd-limits.txt). The tools a
test host cannot have (nvidia-smi, lsblk, findmnt, nvme, systemctl) are stand-ins found first on its PATH,
which serve the same directory; this module runs tools by PATH like any other.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.hardware.linux import LinuxHardware
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.platform import PlatformFactCollector

# The NUMA topology: each node's CPUs, and each PCI device's node and local CPUs.
SYSFS = ("devices/system/node/node*/cpulist", "bus/pci/devices/*/numa_node", "bus/pci/devices/*/local_cpulist")
NVME_DISK = re.compile(r'"name": ?"(nvme[0-9]+n[0-9]+)"')


class Reader:
    def __init__(self, timeout_s: int) -> None:
        self.timeout_s = timeout_s
        self.missing: list[str] = []
        self.timeout: list[str] = []
        replay = os.environ.get("REFDEPLOY_REPLAY_DIR") or ""
        self.sys_root = f"{replay}/sys" if replay else "/sys"
        self.host_replay = f"{replay}/host" if replay else ""

    def which(self, tool: str) -> str | None:
        return shutil.which(tool)

    def run(self, argv: list[str], stderr: bool = False) -> str:
        """A command's stdout (and stderr, if asked), bounded; "" when it cannot run."""
        exe = self.which(argv[0])
        if exe is None:
            return ""
        try:
            cp = subprocess.run(
                [exe, *argv[1:]],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.timeout.append(f"{' '.join(argv)} (after {self.timeout_s} s)")
            return ""
        return cp.stdout.decode(errors="replace")

    def replayed(self, name: str) -> str | None:
        """A host-level reading a test host replays (REFDEPLOY_REPLAY_DIR/host), else None."""
        if not self.host_replay:
            return None
        f = Path(self.host_replay) / name
        return f.read_text() if f.is_file() else None


def _text(out: str) -> str:
    lines = out.splitlines()
    return "\n".join(lines) + "\n" if lines else ""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def readings(mode: str, host: str, dirs: list[str], key_file: str, fields: list[str], r: Reader) -> dict[str, str]:
    out: dict[str, str] = {"hostname": host + "\n"}
    out["served_files"] = r.run(["find", *dirs, "-type", "f", "-printf", "%s\\t%p\\n"]) if dirs else ""
    if key_file:
        out["api_key_file"] = r.run(["stat", "-c", "%u %a %s %F", "--", key_file]) or "missing\n"
    if mode != "gpu":
        return out
    if r.which("nvidia-smi"):
        out["nvidia_smi_L"] = r.run(["nvidia-smi", "-L"])
        out["query_gpu"] = r.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        out["topo"] = r.run(["nvidia-smi", "topo", "-m"])
    else:
        r.missing.append("nvidia-smi")
    sysfs = []
    for pattern in SYSFS:
        for f in sorted(str(x) for x in Path(r.sys_root).glob(pattern)):
            value = _read(f)
            if value is not None:
                sysfs.append(f"/sys{f[len(r.sys_root.rstrip('/')) :]}\t{value.rstrip(chr(10))}")
    out["sysfs"] = "\n".join(sysfs)
    out["meminfo"] = r.replayed("meminfo.txt") or _read("/proc/meminfo") or ""
    out["cgroup_fs"] = r.replayed("cgroup-fs.txt") or r.run(["stat", "-fc", "%T", "/sys/fs/cgroup"])
    runtimes = r.replayed("docker-runtimes.json")
    out["docker_runtimes"] = (
        runtimes if runtimes is not None else r.run(["docker", "info", "--format", "{{json .Runtimes}}"], stderr=True)
    )
    limits = r.replayed("dockerd-limits.txt")
    if limits is None:
        pids = r.run(["pidof", "dockerd"]).split()
        limits = (_read(f"/proc/{pids[0]}/limits") or "") if pids else ""
    out["dockerd_limits"] = limits
    out["data_paths"] = "".join(f"{d}\n" for d in dirs)
    blocks = r.run(["lsblk", "-J", "-o", "NAME,PKNAME,TYPE,TRAN,MODEL"])
    out["lsblk"] = blocks
    for d in dirs:
        out[f"findmnt:{d}"] = r.run(["findmnt", "-J", "-o", "SOURCE,TARGET", "--target", d])
    if r.which("nvme"):
        for disk in sorted(set(NVME_DISK.findall(blocks))):
            out[f"smart:{disk}"] = r.run(["nvme", "smart-log", "-o", "json", f"/dev/{disk}"])
    else:
        r.missing.append("nvme")
    return out


def host_facts(module: AnsibleModule) -> dict[str, object]:
    """The facts `gather_facts` would give for these subsets, named as it names them (ansible_ prefixed)."""
    facts: dict[str, object] = dict(PlatformFactCollector().collect(module=module))
    facts.update(DistributionFactCollector().collect(module=module, collected_facts=facts))
    hardware = LinuxHardware(module)
    facts.update(hardware.get_cpu_facts(collected_facts=facts))
    facts.update(hardware.get_memory_facts())
    return {f"ansible_{k}": v for k, v in facts.items()}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["cpu", "gpu"], "required": True},
            "host": {"type": "str", "required": True},
            "served_dirs": {"type": "list", "elements": "str", "default": []},
            "api_key_file": {"type": "str", "default": ""},
            "query_gpu_fields": {"type": "list", "elements": "str", "default": []},
            "timeout_s": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    r = Reader(p["timeout_s"])
    got = readings(p["mode"], p["host"], p["served_dirs"], p["api_key_file"], p["query_gpu_fields"], r)
    result = {k: _text(v) for k, v in got.items()}
    if r.missing:
        result["missing"] = _text("\n".join(r.missing))
    if r.timeout:
        result["timeout"] = _text("\n".join(r.timeout))
    module.exit_json(changed=False, readings=result, host_facts=host_facts(module))


if __name__ == "__main__":
    main()
