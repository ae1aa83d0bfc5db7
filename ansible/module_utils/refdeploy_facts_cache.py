"""The host's facts as the setup module's collectors gave them, kept on the host for as long as what they are read
from has not changed.

A deploy records the host's platform, distribution, CPUs and memory in its manifest (ansible/library/
refdeploy_host_facts.py collects them with Ansible's own collectors). Collecting them costs ~0.4 s a deploy here:
importing any collector imports all ~100 of them, which the controller parses to build the module and the host
compiles to run it. Ansible's own fact cache (fact_caching) keeps facts for a time, not for as long as they hold: a
manifest written after a reboot into a new kernel, or after a point release, must not carry the old ones. So this
cache is keyed on what those facts are read from, all cheap to read: the boot (the kernel, the CPUs' and the
memory's identity until the next boot), the release files the distribution is read from, the names the host goes by,
the memory and CPU counts as the kernel gives them now (hotplug), and the Ansible that collected them. Any change of
any of them is a miss, and the facts are collected again.

  key(root="/") -> "sha256:<hex>"
  cached(path) -> the facts (ansible_ prefixed), or None where the file is missing, unreadable or of another key
  save(path, facts) -> writes {"key": key(), "facts": facts} atomically (root's, as its directory)
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from ansible.module_utils.ansible_release import __version__ as ANSIBLE_VERSION

# What the collectors read the distribution and the names from (DistributionFiles, PlatformFactCollector's
# socket.getfqdn, which reads /etc/hosts first), the boot, and the memory's and CPUs' counts.
KEYED_FILES = (
    "etc/os-release", "usr/lib/os-release", "etc/lsb-release", "etc/debian_version", "etc/redhat-release",
    "etc/system-release", "etc/hostname", "etc/hosts", "proc/sys/kernel/random/boot_id", "proc/sys/kernel/osrelease",
)  # fmt: skip


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b"<missing>"


def _memtotal(root: Path) -> bytes:
    for line in _read(root / "proc/meminfo").splitlines():
        if line.startswith(b"MemTotal:"):
            return line
    return b"<missing>"


def key(root: str = "/") -> str:
    base = Path(root)
    digest = hashlib.sha256()
    for name in KEYED_FILES:
        digest.update(f"{name}\0".encode())
        digest.update(_read(base / name))
        digest.update(b"\0")
    for part in (_memtotal(base), str(os.cpu_count()).encode(), platform.node().encode(), ANSIBLE_VERSION.encode()):
        digest.update(part + b"\0")
    return f"sha256:{digest.hexdigest()}"


def cached(path: str, root: str = "/") -> dict[str, Any] | None:
    try:
        kept = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != key(root) or not isinstance(kept.get("facts"), dict):
        return None
    return dict(kept["facts"])


def save(path: str, facts: dict[str, Any], root: str = "/") -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps({"key": key(root), "facts": facts}, sort_keys=True))
        tmp.replace(target)
    except OSError:
        pass  # a cache: the next deploy collects them again
