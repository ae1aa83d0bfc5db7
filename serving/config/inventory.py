"""Hosts and groups in an Ansible inventory, read through ansible-inventory (so every inventory format works).

`make` checks HOST (a host, or a group: make deploy rolls through a group) before every playbook. ansible-inventory
takes about 0.45 s here (most of it importing Ansible), on every target's path; a host named literally in a static
YAML inventory file (as every inventory this project ships names its hosts) is found by reading that file, and only
another answer asks Ansible."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from serving.errors import InputError


class InventoryError(InputError):
    pass


def inventory_hosts(inventory: Path, ansible_inventory: str = "ansible-inventory") -> list[str]:
    return inventory_listing(inventory, ansible_inventory)[0]


def inventory_listing(inventory: Path, ansible_inventory: str = "ansible-inventory") -> tuple[list[str], list[str]]:
    """(hosts, groups) of an inventory, as ansible-inventory --list gives them."""
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
    groups = sorted(k for k in data if k != "_meta")
    # A host without variables is only in its group's "hosts" list, not in _meta.hostvars.
    hosts = set(data.get("_meta", {}).get("hostvars", {}))
    hosts.update(h for g in groups if isinstance(data[g], dict) for h in data[g].get("hosts", []))
    return sorted(hosts), groups


def _yaml_sources(inventory: Path) -> list[Path]:
    """The YAML files Ansible reads as inventory sources here: the file, or a directory's top-level ones."""
    if inventory.is_file():
        return [inventory] if inventory.suffix in (".yml", ".yaml") else []
    if inventory.is_dir():
        return sorted(p for p in inventory.iterdir() if p.is_file() and p.suffix in (".yml", ".yaml"))
    return []


def _names_host(group: object, host: str) -> bool:
    """A YAML inventory group (all: {hosts: {...}, children: {...}}) names host literally, or a group of that
    name, at any depth."""
    if not isinstance(group, dict):
        return False
    hosts = group.get("hosts")
    if isinstance(hosts, dict) and host in hosts:
        return True
    children = group.get("children")
    return isinstance(children, dict) and (host in children or any(_names_host(g, host) for g in children.values()))


def named_in_static_yaml(host: str, inventory: Path) -> bool:
    """True when a static YAML inventory source names host under a group's hosts: (an inventory plugin's
    configuration, with its `plugin:` key, names none: Ansible answers for it)."""
    import yaml

    for source in _yaml_sources(inventory):
        try:
            data = yaml.safe_load(source.read_text())
        except (OSError, yaml.YAMLError):
            continue  # Ansible says what is wrong with it
        named = isinstance(data, dict) and "plugin" not in data
        if named and (host in data or any(_names_host(g, host) for g in data.values())):
            return True
    return False


def check_host(host: str, inventory: Path, ansible_inventory: str = "ansible-inventory") -> None:
    if named_in_static_yaml(host, inventory):
        return
    hosts, groups = inventory_listing(inventory, ansible_inventory)
    if host not in hosts and host not in groups:
        listed = ", ".join(hosts) if hosts else "(none)"
        named = [g for g in groups if g not in ("all", "ungrouped")]
        raise InventoryError(
            f"unknown HOST '{host}': inventory {inventory} has: {listed}"
            + (f"; groups: {', '.join(named)}" if named else "")
            + " (pick one of these, or INVENTORY=... for another inventory)"
        )
