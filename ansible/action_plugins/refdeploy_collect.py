"""Action plugin refdeploy_collect: after a probe container's window (or the bench client's run), collect what it
wrote and clean the host, in two shell round trips and a file transfer (no module run on the host):

  - name: Capture | Collect what the capture wrote, and look at the serving container after the window
    refdeploy_collect:
      out: /var/lib/refdeploy/probe-runs/<id>-capture    # the probe's output on the host: bundle/ or bundle.tar.gz
      top: bundle
      remove: [refdeploy-vllm-probe]                     # the probe containers, removed before anything is packed
      serving: refdeploy-vllm
      before: "{{ container }}"                          # docker inspect's object before the window
      log: {match: refdeploy-memory-phase, tail: 20000}  # lines of the engine's log to bring back (optional)
      dest: runs/<host>/<id>                             # unpacked there as dest/name, change recorded beside it
      name: capture
      merge: false                                       # true: dest/name may exist; the archive's files join it
    register: got   # got.change (serving/evidence/continuity.py), got.log, got.fetched, got.path, got.cleaned

1. On the host (serving/evidence/fetched.py after_window_script): the probe containers go (one that outlived its client
   would still be writing what is packed next); the serving container is read; a bundle the probe did not pack
   is packed; its SHA-1; the log lines. 2. The archive comes over the connection (fetch_file: a copy on a local
   host, sftp/scp over SSH) and is checked against that SHA-1, as the fetch module checks. 3. On the host,
   whatever happened: the probe's output is removed. 4. On the controller: unpacked, with serving-container.json.

Why not docker_container_info, archive, fetch and file tasks: each is a Python start on the host, 0.3-0.5 s idle and
seconds under load, after every capture window (the operator waits for them). Fails with one line where docker
cannot say whether the serving container exists, the archive arrives altered, or it cannot be unpacked; the
host is cleaned in every case (got.cleaned).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.hashing import secure_hash


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("out", "top", "remove", "serving", "before", "log", "dest", "name", "merge"))

    def _host(self, script: str) -> Any:
        from serving.bridge import hostshell

        got = dict(self._low_level_execute_command(hostshell.wrap(script, self._compute_environment_string())))
        reply = hostshell.parse(str(got.get("stdout", "")))
        if reply is None:
            said = str(got.get("stderr") or got.get("stdout") or "").strip()[-300:]
            raise AnsibleError(f"the host did not answer: {said or 'exit ' + str(got.get('rc'))}")
        return reply

    def _collect(
        self, out: str, top: str, serving: str, remove: list[str], log: dict[str, Any], archive: Path, pid: int
    ) -> Any:
        """Steps 1 and 2: what the host says after the window, and the archive fetched and checked."""
        from serving.evidence import fetched

        match, tail = str(log.get("match", "")), int(log.get("tail", 0))
        script = fetched.after_window_script(out, top, serving, remove, match, tail, pid)
        after = fetched.parse_after_window(self._host(script).stdout)
        if fetched.serving_unreadable(after):
            raise AnsibleError(f"could not read {serving} after the window: {after.serving_error}")
        if after.archive_sha1:
            # Private, as refdeploy_run_dir makes a run directory: it holds the host's readings.
            archive.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._connection.fetch_file(f"{out}/{top}.tar.gz", str(archive))
            if secure_hash(str(archive)) != after.archive_sha1:
                archive.unlink()
                raise AnsibleError(f"{out}/{top}.tar.gz changed on its way to {archive}")
        return after

    def _clean(self, out: str, remove: list[str], containers_too: bool) -> bool:
        """Step 3: the probe's output goes (and the probe containers, where step 1 did not run to its end)."""
        names = " ".join(shlex.quote(n) for n in remove)
        script = f"docker rm --force {names} >/dev/null 2>&1; " if containers_too and names else ""
        try:
            return self._host(f"{script}rm -rf -- {shlex.quote(out)}").rc == 0
        except AnsibleError:
            return False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.evidence import continuity, fetched

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        args = self._task.args
        out, top, name = str(args["out"]).rstrip("/"), str(args["top"]), str(args["name"])
        serving, dest = str(args["serving"]), Path(str(args["dest"]))
        remove = [str(n) for n in args.get("remove") or []]
        archive = dest / f"{name}.tar.gz"
        after, failure = None, ""
        try:
            before = dict(args.get("before") or {})
            # 0: do not wait for Docker to notice a death by the PID, where the host cannot see that PID (PidVisible
            # false: refdeploy_host_readings, on a host that shares another's engine); it would wait its whole bound.
            visible = before.get("PidVisible", True)
            before_pid = int((before.get("State") or {}).get("Pid") or 0) if visible else 0
            after = self._collect(out, top, serving, remove, dict(args.get("log") or {}), archive, before_pid)
        except (AnsibleError, OSError) as e:
            failure = f"collecting {out}: {e}"
        finally:
            cleaned = self._clean(out, remove, containers_too=after is None)
        if after is None:
            return {**result, "failed": True, "cleaned": cleaned, "msg": failure}
        change = continuity.serving_change(dict(args.get("before") or {}) or None, after.serving, serving)
        merge = boolean(args.get("merge", False))
        try:
            path = fetched.unpack(archive if after.archive_sha1 else None, dest, top, name,
                                  {"serving-container.json": change}, merge=merge)  # fmt: skip
        except (OSError, fetched.UnpackError) as e:
            return {**result, "failed": True, "cleaned": cleaned, "change": change, "msg": f"could not unpack: {e}"}
        return {
            **result,
            "changed": False,
            "cleaned": cleaned,
            # What changed (serving/evidence/continuity.py), not the container read after the window: its docker
            # inspect holds the environment, and a result is printed at -v.
            "change": change,
            "packed_here": after.packed,
            "fetched": after.archive_sha1 is not None,
            "log": after.log,
            "path": str(path),
        }
