"""Action plugin refdeploy_controller_files: files of the run written on the controller, in-process.

  - name: Record the manifest and the client's plan on the controller
    refdeploy_controller_files:
      dir: runs/<host>/<id>/bench           # created (0755) where missing
      json: {manifest.json: "{{ m }}"}       # each written as JSON, indented, keys sorted
      text: {client-output.log: "{{ t }}"}  # each written as it is
      mode: "0600"                          # the files' (default 0644): 0600 for what may name the host's secrets

Why not file and copy tasks delegated to localhost: each is a module run in a new Python process, about 0.5 s
idle and more under load, and `make bench` wrote five files that way (issue 27: the product's fixed cost).
Fails with one line where a name is not a plain file name or a file cannot be written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("dir", "json", "text", "mode"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars or {})
        args = self._task.args
        target = Path(str(args["dir"]))
        files = {
            name: json.dumps(data, indent=4, sort_keys=True) + "\n" for name, data in (args.get("json") or {}).items()
        }
        files.update({name: str(text) for name, text in (args.get("text") or {}).items()})
        bad = sorted(n for n in files if "/" in n or n.startswith(".") or not n)
        if bad:
            return {
                **result,
                "failed": True,
                "msg": f"refdeploy_controller_files: {', '.join(bad)}: a plain file name, please",
            }
        try:
            mode = int(str(args.get("mode") or "0644"), 8)
        except ValueError:
            return {**result, "failed": True, "msg": f"refdeploy_controller_files: mode {args.get('mode')!r}: octal"}
        try:
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            for name, content in files.items():
                (target / name).touch(mode=mode)
                (target / name).chmod(mode)  # before the content: a file that may name secrets is never wider
                (target / name).write_text(content)
        except OSError as e:
            return {**result, "failed": True, "msg": f"could not write the run's files in {target}: {e}"}
        return {**result, "changed": False, "written": sorted(files)}
