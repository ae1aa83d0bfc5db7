"""Hosts in an Ansible inventory, read through ansible-inventory (so every inventory format works)."""

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


def check_host(host: str, inventory: Path, ansible_inventory: str = "ansible-inventory") -> None:
    hosts = inventory_hosts(inventory, ansible_inventory)
    if host not in hosts:
        listed = ", ".join(hosts) if hosts else "(none)"
        raise InventoryError(
            f"unknown HOST '{host}': inventory {inventory} has: {listed} "
            "(pick one of these, or INVENTORY=... for another inventory)"
        )
