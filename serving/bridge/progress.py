"""What a long-running host command is doing, read from the tail of its output (the action plugin
refdeploy_watch shows it every 10 s while the command runs).

Three ways to read it, named by the task:
  docker_build  the last `Step N/M : …` line of the legacy builder's stdout, with the step's latest line
                (`step 9/14 RUN pip install … | Collecting torch`);
  marked        the last line on stderr that starts with MARK, the product's own commands' progress lines
                (bench client, capture, fio probe); they are taken out of the stderr the task returns, so
                what the roles judge and show is what the command said besides;
  last_line     the last non-empty line of stdout or stderr (a command that says nothing of its own).
"""

from __future__ import annotations

import os
import re
import shlex

# The product's progress lines on stderr: probes/base/progress.py and images/vllm/bench_client.py write them
# (not imported: those run inside images; tests/unit/bridge/test_progress_lines.py keeps the three equal).
MARK = "refdeploy-progress: "
MODES = ("docker_build", "marked", "last_line")
MAX_CHARS = 110
DEFAULT_INTERVAL_S = 10.0

_STEP = re.compile(r"^Step (\d+/\d+) : (.*)$")


def _short(text: str, limit: int = MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lines(text: str) -> list[str]:
    return [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]


def status_line(mode: str, stdout_tail: str, stderr_tail: str) -> str | None:
    """What the command is doing now, in one short line; None when its output says nothing yet."""
    if mode not in MODES:
        raise ValueError(f"unknown progress mode {mode!r} (known: {', '.join(MODES)})")
    if mode == "marked":
        marked = [ln[len(MARK) :] for ln in _lines(stderr_tail) if ln.startswith(MARK)]
        return _short(marked[-1]) if marked else None
    out = _lines(stdout_tail)
    if mode == "docker_build":
        steps = [(i, m) for i, ln in enumerate(out) if (m := _STEP.match(ln))]
        if not steps:
            return None
        i, m = steps[-1]
        step = f"step {m.group(1)} {_short(m.group(2), 60)}"
        after = [ln for ln in out[i + 1 :] if not ln.startswith(" ---> ")]
        return _short(f"{step} | {after[-1]}") if after else step
    both = out or _lines(stderr_tail)
    return _short(both[-1]) if both else None


def tail_command(mode: str, path: str, tail_bytes: int) -> str:
    """The shell command that reads what status_line needs of a command's stdout file: its last tail_bytes and,
    for docker_build, first the last `Step N/M : ` line wherever it is (one pip install step prints tens of KB,
    so the step's own line is soon out of any tail)."""
    tail = f"tail -c {int(tail_bytes)} {shlex.quote(path)} 2>/dev/null"
    if mode != "docker_build":
        return tail
    return f"{{ grep -a -E '^Step [0-9]+/[0-9]+ : ' {shlex.quote(path)} | tail -n 1; {tail}; }} 2>/dev/null"


def without_marked(text: str) -> str:
    """text without the progress lines (MARK …): what the command said besides."""
    kept = [ln for ln in text.split("\n") if not ln.startswith(MARK)]
    return "\n".join(kept)


def ticker(task: str, status: str | None, elapsed_s: float, bound_s: float | None) -> str:
    """The line shown while a task runs: `      ... Task: run 3 of 8 (40 s so far, at most 860 s more)`, or
    without a status `      ... Task: 40 s so far (at most 860 s more)`."""
    left = f"at most {max(0.0, bound_s - elapsed_s):.0f} s more" if bound_s else ""
    so_far = f"{elapsed_s:.0f} s so far"
    if status:
        return f"      ... {task}: {status} ({so_far}{', ' + left if left else ''})"
    return f"      ... {task}: {so_far}{f' ({left})' if left else ''}"


def interval_s() -> float:
    """Seconds between progress lines: 10, or REFDEPLOY_PROGRESS_S (the tests set 1)."""
    return float(os.environ.get("REFDEPLOY_PROGRESS_S") or DEFAULT_INTERVAL_S)
