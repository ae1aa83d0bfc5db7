"""Callback plugin refdeploy_progress: never a silent minute. While a task runs longer than the interval (10 s;
REFDEPLOY_PROGRESS_S sets it), a line every interval says which task is still running and for how long, and
for a task with a known bound (its `timeout` keyword) how long it may still take:

      ... Serve | Wait for the new container to report healthy: 30 s so far (at most 570 s more)

Ansible's own output shows a task only when it ends. The long commands (image builds, the I/O gate, benches,
captures) run under refdeploy_watch, which says what they are doing instead (step, run n of m, the window);
this callback leaves those tasks to it. The lines go through Ansible's display, beside the default stdout
callback (ansible.cfg callbacks_enabled); nothing else changes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

from serving.bridge import progress

DOCUMENTATION = """
name: refdeploy_progress
type: aggregate
short_description: a line every 10 s while a task runs
description: While a task runs longer than the interval, print which task is still running and for how long.
requirements: []
"""

# Tasks whose action shows its own progress (ansible/action_plugins/refdeploy_watch.py).
WATCHED = frozenset(("refdeploy_watch",))


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "refdeploy_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._display: Display = Display()
        self._interval = progress.interval_s()
        self._stop: threading.Event | None = None

    def _begin(self, name: str, bound_s: float | None) -> None:
        self._end()
        stop = threading.Event()
        started = time.monotonic()

        def tick() -> None:
            while not stop.wait(self._interval):
                self._display.display(progress.ticker(name, None, time.monotonic() - started, bound_s))

        self._stop = stop
        threading.Thread(target=tick, name="refdeploy-progress", daemon=True).start()

    def _end(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        if task.action in WATCHED:  # it says what it is doing itself
            self._end()
            return
        bound = getattr(task, "timeout", None)
        try:
            bound_s = float(bound) if bound else None
        except (TypeError, ValueError):  # a template not yet rendered
            bound_s = None
        self._begin(task.get_name().strip(), bound_s)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self.v2_playbook_on_task_start(task, False)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._end()

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._end()

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._end()

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._end()

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._end()
