#!/usr/bin/python
"""Ansible module refdeploy_lock_dir: the host side of the operation lock (action plugin refdeploy_lock), one
round trip per take or release.

  - refdeploy_lock_dir:
      path: /var/lib/refdeploy/lock
      state: acquired
      record: '{"operation": "deploy", ...}'   # holder.json's text, written once the directory is made
      replace: '{...}'                         # optional: a stale holder's text, removed first if it still reads so
  - refdeploy_lock_dir:
      path: /var/lib/refdeploy/lock
      state: released
      controller: ctl-1                        # removed only if holder.json names this controller and pid
      pid: 4242

Acquired: `mkdir` of the lock directory (atomic), then holder.json; returns `took`, and when the lock was
already there, `exists` and `holder` (holder.json's text, null when absent or unreadable). Released: returns
`removed`. Who holds the lock and whether that run is gone are decided on the controller (serving/hostlock.py);
this module only reads, makes and removes. Check mode reads and changes nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def _holder(path: Path) -> str | None:
    try:
        return (path / "holder.json").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _acquire(module: AnsibleModule, path: Path) -> dict[str, object]:
    if module.check_mode:
        return {"took": False, "exists": path.exists() or path.is_symlink(), "holder": _holder(path)}
    replace = module.params["replace"]
    if replace is not None and _holder(path) == replace:
        shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:  # held, or another run took it first
        return {"took": False, "exists": True, "holder": _holder(path)}
    (path / "holder.json").write_text(module.params["record"] + "\n", encoding="utf-8")
    return {"took": True, "exists": True, "holder": None}


def _release(module: AnsibleModule, path: Path) -> dict[str, object]:
    try:
        held = json.loads(_holder(path) or "null")
    except ValueError:
        held = None
    # The same test as serving/hostlock.is_ours, on the host: this module imports nothing of the project.
    ours = (
        isinstance(held, dict)
        and held.get("controller") == module.params["controller"]
        and held.get("pid") == module.params["pid"]
    )
    if ours and not module.check_mode:
        shutil.rmtree(path)
    return {"removed": bool(ours) and not module.check_mode}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["acquired", "released"], "default": "acquired"},
            "record": {"type": "str"},
            "replace": {"type": "str"},
            "controller": {"type": "str"},
            "pid": {"type": "int"},
        },
        required_if=[("state", "acquired", ["record"]), ("state", "released", ["controller", "pid"])],
        supports_check_mode=True,
    )
    path = Path(module.params["path"].rstrip("/") or "/")
    got = _acquire(module, path) if module.params["state"] == "acquired" else _release(module, path)
    # The lock is the run's own bookkeeping, not a change to the host's configuration.
    module.exit_json(changed=False, **got)


if __name__ == "__main__":
    main()
