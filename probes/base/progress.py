"""Progress lines on stderr, for the operator watching a probe run through Ansible (refdeploy_watch shows the
latest every 10 s and keeps them out of the stderr the roles judge). Not imported from serving: the probes run
inside the probe image; tests/unit/bridge/test_progress_lines.py keeps MARK equal to serving/bridge/progress.py's."""

from __future__ import annotations

import sys

MARK = "refdeploy-progress: "


def say(text: str) -> None:
    print(MARK + text, file=sys.stderr, flush=True)
