"""serve's replace.yml: once the running container is set aside, every step up to the new one's verification is
inside the block whose rescue brings it back.

Seen in a full test run here: the previous container's stop failed (Docker 20.10: "PID ... is zombie and can not be
killed", vLLM's main process not yet reaped 2 s after its SIGKILL), and with the stop outside the block the deploy
ended with nothing serving and NAME-previous aside, so every later deploy refused. What the tasks do is run by
tests/integration/test_safety.py's replacements; this holds the order they run in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPLACE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "serve" / "tasks" / "replace.yml"


def _names(tasks: list[dict[str, Any]]) -> list[str]:
    return [str(t.get("name", "")) for t in tasks]


def test_after_the_set_aside_every_step_is_rolled_back_on_failure() -> None:
    tasks = yaml.safe_load(REPLACE.read_text())
    assert _names(tasks)[0] == "Serve | Set the running container aside as the previous one"
    rest = tasks[1:]
    assert len(rest) == 1 and "block" in rest[0], _names(rest)
    block, rescue = rest[0]["block"], rest[0]["rescue"]
    assert _names(block)[:2] == ["Serve | Stop the previous container", "Serve | Start the serving container"]
    assert any(t.get("ansible.builtin.include_tasks") == "rollback.yml" for t in rescue)


def test_the_stop_is_asked_again_before_it_counts_as_failed() -> None:
    stop = yaml.safe_load(REPLACE.read_text())[1]["block"][0]
    assert stop["until"] == "_serve_stopped is succeeded" and stop["register"] == "_serve_stopped"
    assert int(stop["retries"]) >= 2 and int(stop["delay"]) >= 3  # the zombie was reaped 2 s after Docker's error
