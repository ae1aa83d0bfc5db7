#!/usr/bin/python
"""Ansible module refdeploy_write_file: a file's content, mode and owner, and its directory's, in one run.

  - name: Write the rendered container spec
    refdeploy_write_file:
      dest: /var/lib/refdeploy/rendered/refdeploy-vllm.json
      content: "{...}\\n"
      mode: "0600"                 # the file's; owner and group likewise (names or ids)
      owner: root
      group: root
      dir_mode: "0755"             # its directory's, made if missing, with the same owner and group
      backup: true                 # keep the file it replaces (as copy's backup does: <dest>.<pid>.<time>~)
    register: written              # written.dest, written.backup_file (only when one was kept)

  - name: Give the bench client its driver and plan
    refdeploy_write_file:
      dest: /var/lib/refdeploy/bench/20261207T030000Z-bench   # with files: the directory
      files: {bench_client.py: "...", plan.json: "{...}"}    # each name a file in it (no "/")
      mode: "0644"
      owner: root
      group: "10001"
      dir_mode: "0770"

What `file: state=directory` then `copy: content=` do, in one module run instead of three (with `files`, a
directory and each of its files in one run instead of one copy per file: a bench's seven cost 2 s) (copy's stat, then
copy or file, beside the directory's file task): on a no-op deploy each run costs a Python start on the host.
The new content is written to a private temporary file beside the old one, given its mode and owner, then
renamed over it, so no reader sees it half written or with looser permissions. Check and diff modes work as
copy's do.
"""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def _ids(owner: str, group: str) -> tuple[int, int]:
    uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
    gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    return uid, gid


def _settle(path: Path, mode: int, uid: int, gid: int, check: bool) -> bool:
    """Give an existing path its mode and owner; True when they were different."""
    st = path.stat()
    if (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, gid):
        return False
    if not check:
        os.chown(path, uid, gid)
        path.chmod(mode)
    return True


def _write(dest: Path, data: bytes, mode: int, uid: int, gid: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)  # mode 0600 from the start
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _one(module: AnsibleModule, dest: Path, content: str, mode: int, uid: int, gid: int) -> dict[str, object]:
    """Write one file whose directory exists (or, in check mode, would); its result, with `changed`."""
    p, check = module.params, module.check_mode
    data = content.encode()
    before = dest.read_bytes() if dest.is_file() else None
    result: dict[str, object] = {"dest": str(dest), "changed": False}
    if before != data:
        result["changed"] = True
        if p["backup"] and before is not None and not check:
            result["backup_file"] = module.backup_local(str(dest))
        if not check:
            _write(dest, data, mode, uid, gid)
    elif dest.exists():
        result["changed"] = _settle(dest, mode, uid, gid, check)
    if module._diff and before != data:
        result["diff"] = {
            "before": (before or b"").decode(errors="replace"),
            "after": content,
            "before_header": str(dest),
            "after_header": str(dest),
        }
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "content": {"type": "str"},
            "files": {"type": "dict"},
            "mode": {"type": "str", "default": "0644"},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "dir_mode": {"type": "str", "default": "0755"},
            "backup": {"type": "bool", "default": False},
        },
        required_one_of=[("content", "files")],
        mutually_exclusive=[("content", "files")],
        supports_check_mode=True,
    )
    p, check = module.params, module.check_mode
    files = p["files"]
    if files is not None:
        bad = [str(n) for n in files if not str(n) or "/" in str(n) or str(n) in (".", "..")]
        if bad:
            module.fail_json(msg=f"files: each name must be a file's name in dest, with no '/': {', '.join(bad)}")
    directory = Path(p["dest"]) if files is not None else Path(p["dest"]).parent
    uid, gid = _ids(p["owner"], p["group"])
    mode, dir_mode = int(p["mode"], 8), int(p["dir_mode"], 8)
    changed = False
    if not directory.is_dir():
        changed = True
        if not check:
            directory.mkdir(parents=True, exist_ok=True)
    if directory.is_dir():
        changed |= _settle(directory, dir_mode, uid, gid, check)
    if files is None:
        result = _one(module, Path(p["dest"]), p["content"], mode, uid, gid)
        changed |= bool(result.pop("changed"))
        module.exit_json(changed=changed, **result)
    written = [_one(module, directory / str(name), str(text), mode, uid, gid) for name, text in files.items()]
    changed |= any(w["changed"] for w in written)
    module.exit_json(changed=changed, dest=str(directory), files=[w["dest"] for w in written if w["changed"]])


if __name__ == "__main__":
    main()
