#!/usr/bin/python
"""Ansible module refdeploy_host_facts: the host's facts for the platform, the distribution, the CPUs and the memory,
as the setup module's own collectors give them, named as `gather_facts` names them (ansible_ prefixed), and kept on
the host for the next deploy (module_utils/refdeploy_facts_cache.py).

  - name: Read the host's facts             (the refdeploy_plan action plugin runs it)
    refdeploy_host_facts:
      cache: /var/lib/refdeploy/host-facts.json   # "" keeps nothing; never written in check mode
    register: got                                 # got.host_facts: {ansible_hostname: ..., ...}

The plan's read of the host (refdeploy_host_readings) returns the facts kept there while what they are read from is
unchanged: this module runs only where it found none (the first deploy after a boot, a release upgrade, a rename).
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.refdeploy_facts_cache import save


def host_facts(module: AnsibleModule) -> dict[str, object]:
    """The facts `gather_facts` would give for these subsets, named as it names them (ansible_ prefixed).

    Only the subsets the manifest records are collected: the hardware subset's mounts, devices and DMI are not.
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
    module = AnsibleModule(argument_spec={"cache": {"type": "str", "default": ""}}, supports_check_mode=True)
    facts = host_facts(module)
    if module.params["cache"] and not module.check_mode:
        save(module.params["cache"], facts)
    module.exit_json(changed=False, host_facts=facts)


if __name__ == "__main__":
    main()
