#!/usr/bin/python
"""Ansible module refdeploy_read_files: several small files read on the managed host in one round trip.

  - name: Read the slice's limits
    refdeploy_read_files:
      paths: [/sys/fs/cgroup/refdeploy.slice, /sys/fs/cgroup/refdeploy.slice/cpu.max]
    register: got          # got.files["/sys/fs/cgroup/refdeploy.slice/cpu.max"] = {"kind": "file", "content": "..."}

Each path reports its kind (file, directory, absent, unreadable) and, for a readable file, its text (at most
max_bytes of it). Like slurp, for many files at once and as text; it changes nothing and runs in check mode.
"""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def read(path: Path, max_bytes: int) -> dict[str, object]:
    if path.is_dir():
        return {"kind": "directory", "content": None}
    if not path.exists():
        return {"kind": "absent", "content": None}
    try:
        with path.open("rb") as f:
            return {"kind": "file", "content": f.read(max_bytes).decode(errors="replace")}
    except OSError as e:
        return {"kind": "unreadable", "content": None, "reason": e.strerror or str(e)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "max_bytes": {"type": "int", "default": 65536},
        },
        supports_check_mode=True,
    )
    files = {p: read(Path(p), module.params["max_bytes"]) for p in module.params["paths"]}
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
