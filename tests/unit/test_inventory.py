from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.inventory import InventoryError, check_host, inventory_hosts

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_INVENTORY = shutil.which("ansible-inventory") or str(REPO / ".venv/bin/ansible-inventory")


def test_local_inventory_has_localhost() -> None:
    assert inventory_hosts(REPO / "inventory/local", ANSIBLE_INVENTORY) == ["localhost"]
    check_host("localhost", REPO / "inventory/local", ANSIBLE_INVENTORY)


def test_unknown_host_lists_the_known_ones() -> None:
    with pytest.raises(InventoryError) as err:
        check_host("gpu-3090-a", REPO / "inventory/local", ANSIBLE_INVENTORY)
    assert str(err.value).startswith(f"unknown HOST 'gpu-3090-a': inventory {REPO / 'inventory/local'} has: localhost")


def test_missing_inventory_says_how_to_pick_one(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no such inventory"):
        inventory_hosts(tmp_path / "nope", ANSIBLE_INVENTORY)
