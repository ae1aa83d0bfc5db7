#!/usr/bin/python
"""Ansible module refdeploy_cgroup_write: give cgroup limit files the values the plan decided, in place.

  - name: Restore the limits that drifted
    refdeploy_cgroup_write:
      writes:                                  # serving/host/cgroup_limits.py limit_drift(...)["writes"]
        - path: /sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us
          values: ["-1"]                       # written in order (a throttle file takes one device per write)
          line: "/docker cpu.cfs_quota_us: 50000 (the plan: -1)"
    register: restored                         # .restored: the lines restored; changed when there were any

A cgroup file is a kernel interface, not a file to replace: each value is one write(2) into the open file (a copy
to a temporary file and a rename, as the copy module does, cannot work there). Only files under /sys/fs/cgroup are
accepted; the path is checked before anything is written. In check mode nothing is written and the module reports
what it would restore as changed. A write the kernel refuses fails the module with the path, the value and the
kernel's reason, after the writes before it (each is a restored value, nothing half-written).
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from ansible.module_utils.basic import AnsibleModule

ROOT = PurePosixPath("/sys/fs/cgroup")


def checked(path: str) -> str:
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts or ROOT not in p.parents:
        raise ValueError(f"{path}: not a cgroup file under {ROOT}: nothing was written")
    return str(p)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"writes": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    writes = module.params["writes"]
    try:
        todo = [
            (checked(str(w["path"])), [str(v) for v in w.get("values") or []], str(w.get("line", ""))) for w in writes
        ]
    except (ValueError, KeyError) as e:
        module.fail_json(msg=str(e))
    restored: list[str] = []
    if not module.check_mode:
        for path, values, line in todo:
            for value in values:
                try:
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.write(fd, value.encode())
                    finally:
                        os.close(fd)
                except OSError as e:
                    module.fail_json(msg=f"{path}: writing {value!r} failed: {e.strerror or e}; restored before it: "
                                     f"{restored or 'nothing'}", restored=restored)  # fmt: skip
            restored.append(line or path)
    else:
        restored = [line or path for path, _, line in todo]
    module.exit_json(changed=bool(todo), restored=restored)


if __name__ == "__main__":
    main()
