"""Hosts in an Ansible inventory, read through ansible-inventory (so every inventory format works).

`make` checks HOST before every playbook. ansible-inventory takes about 0.45 s here (most of it importing
Ansible), on every target's path; a host named literally in a static YAML inventory file (as every inventory
this project ships names its hosts) is found by reading that file, and only another answer asks Ansible."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from serving.errors import InputError


class InventoryError(InputError):
    pass


def inventory_hosts(inventory: Path, ansible_inventory: str = "ansible-inventory") -> list[str]:
    if not inventory.exists():
        raise InventoryError(f"{inventory}: no such inventory (set INVENTORY=inventory/<name>)")
    try:
        proc = subprocess.run(
            [ansible_inventory, "-i", str(inventory), "--list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        raise InventoryError(f"{ansible_inventory}: not found (run make venv first)") from None
    if proc.returncode != 0:
        raise InventoryError(f"{inventory}: ansible-inventory failed: {proc.stderr.strip()}")
    data = json.loads(proc.stdout)
    return sorted(data.get("_meta", {}).get("hostvars", {}))


def _yaml_sources(inventory: Path) -> list[Path]:
    """The YAML files Ansible reads as inventory sources here: the file, or a directory's top-level ones."""
    if inventory.is_file():
        return [inventory] if inventory.suffix in (".yml", ".yaml") else []
    if inventory.is_dir():
        return sorted(p for p in inventory.iterdir() if p.is_file() and p.suffix in (".yml", ".yaml"))
    return []


def _names_host(group: object, host: str) -> bool:
    """A YAML inventory group (all: {hosts: {...}, children: {...}}) names host literally, at any depth."""
    if not isinstance(group, dict):
        return False
    hosts = group.get("hosts")
    if isinstance(hosts, dict) and host in hosts:
        return True
    children = group.get("children")
    return isinstance(children, dict) and any(_names_host(g, host) for g in children.values())


def named_in_static_yaml(host: str, inventory: Path) -> bool:
    """True when a static YAML inventory source names host under a group's hosts: (an inventory plugin's
    configuration, with its `plugin:` key, names none: Ansible answers for it)."""
    import yaml

    for source in _yaml_sources(inventory):
        try:
            data = yaml.safe_load(source.read_text())
        except (OSError, yaml.YAMLError):
            continue  # Ansible says what is wrong with it
        if isinstance(data, dict) and "plugin" not in data and any(_names_host(g, host) for g in data.values()):
            return True
    return False


def check_host(host: str, inventory: Path, ansible_inventory: str = "ansible-inventory") -> None:
    if named_in_static_yaml(host, inventory):
        return
    hosts = inventory_hosts(inventory, ansible_inventory)
    if host not in hosts:
        listed = ", ".join(hosts) if hosts else "(none)"
        raise InventoryError(
            f"unknown HOST '{host}': inventory {inventory} has: {listed} "
            "(pick one of these, or INVENTORY=... for another inventory)"
        )
