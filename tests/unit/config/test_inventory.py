from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.config.inventory import InventoryError, check_host, inventory_hosts

REPO = Path(__file__).resolve().parents[3]
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


def test_a_host_named_in_a_static_yaml_inventory_is_found_without_ansible(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  children:\n    gpus:\n      children:\n        a:\n          hosts:\n"
                                   "            gpu3090-a: {ansible_host: 192.0.2.10}\n")  # fmt: skip
    # A group_vars file naming the host is not an inventory source; a plugin's configuration names no host.
    (inv / "group_vars" / "all" / "x.yml").write_text("all:\n  hosts:\n    stray: {}\n")
    (inv / "cloud.yml").write_text("plugin: amazon.aws.aws_ec2\nall:\n  hosts:\n    fake: {}\n")
    # No ansible-inventory: the host is found in hosts.yml alone.
    check_host("gpu3090-a", inv, "/nonexistent/ansible-inventory")
    for group in ("gpus", "a", "all"):  # a group: make deploy rolls through it
        check_host(group, inv, "/nonexistent/ansible-inventory")
    for other in ("stray", "fake"):
        with pytest.raises(InventoryError, match="not found"):  # asks Ansible, which is not there
            check_host(other, inv, "/nonexistent/ansible-inventory")
    # Ansible's answer stands where the file does not name the host: the unknown host is refused by it.
    with pytest.raises(InventoryError, match="unknown HOST 'stray'"):
        check_host("stray", inv, ANSIBLE_INVENTORY)
    check_host("gpu3090-a", REPO / "inventory/production-example", "/nonexistent/ansible-inventory")


def test_a_group_is_a_host_to_ansible_and_an_unknown_name_lists_the_groups(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"  # not YAML: only Ansible can answer
    inv.write_text("[fleet]\ngpu-a\ngpu-b\n")
    check_host("fleet", inv, ANSIBLE_INVENTORY)
    check_host("gpu-b", inv, ANSIBLE_INVENTORY)
    with pytest.raises(InventoryError, match=r"unknown HOST 'flet': .* has: gpu-a, gpu-b; groups: fleet \(pick"):
        check_host("flet", inv, ANSIBLE_INVENTORY)
