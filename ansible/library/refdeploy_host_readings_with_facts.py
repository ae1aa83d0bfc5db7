#!/usr/bin/python
"""Ansible module refdeploy_host_readings_with_facts: refdeploy_host_readings (its options, what it reads and returns:
ansible/library/refdeploy_host_readings.py), and in `host_facts` the setup module's own facts for the platform, the
distribution, the CPUs and the memory, named as `gather_facts` names them (ansible_ prefixed), read by the setup
module's collectors in this same run. The refdeploy_plan action plugin runs it where a playbook records the facts
(the manifest of a deploy, an image build's platform); every other read runs refdeploy_host_readings, whose zip
does not carry the collectors.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.refdeploy_host_read import run


def host_facts(module: AnsibleModule) -> dict[str, object]:
    """The facts `gather_facts` would give for these subsets, named as it names them (ansible_ prefixed).

    Importing any of Ansible's fact collectors runs ansible.module_utils.facts' __init__, which imports them all,
    each compiled from the module's zip on every run (zipimport keeps no bytecode): ~0.25 s of the read's ~0.5 s of
    CPU. Only the subsets the manifest records are collected: the hardware subset's mounts, devices and DMI are not.
    """
    from ansible.module_utils.facts.hardware.linux import LinuxHardware
    from ansible.module_utils.facts.system.distribution import DistributionFactCollector
    from ansible.module_utils.facts.system.platform import PlatformFactCollector

    facts: dict[str, object] = dict(PlatformFactCollector().collect(module=module))
    facts.update(DistributionFactCollector().collect(module=module, collected_facts=facts))
    hardware = LinuxHardware(module)
    facts.update(hardware.get_cpu_facts(collected_facts=facts))
    facts.update(hardware.get_memory_facts())
    return {f"ansible_{k}": v for k, v in facts.items()}


def main() -> None:
    run(host_facts=host_facts)


if __name__ == "__main__":
    main()
