"""Every wait in the roles has a bound: an `until:` loop its retries and delay, a wait_for its timeout, a watched
command (refdeploy_watch) its timeout_s, and every `docker version` (which a daemon that accepts on its socket and
never answers holds for ever) timeout(1) or the task's own timeout. Run with -s to see the waits listed."""

from __future__ import annotations

from typing import Any

from tests.helpers.role_tasks import Task, role_tasks


def _argv(task: Task) -> list[str]:
    mod = task.module()
    args: Any = mod[1] if mod else None
    if isinstance(args, dict) and isinstance(args.get("argv"), list):
        # An element may be a whole script (sh -c '...'): its words count.
        return [w for a in args["argv"] for w in str(a).split()]
    if isinstance(args, dict) and isinstance(args.get("cmd"), str):
        return args["cmd"].split()
    return str(args).split() if isinstance(args, str) else []


def _waits() -> list[tuple[Task, str, str]]:
    """(task, what kind of wait, its bound as written)."""
    out = []
    for t in role_tasks():
        mod = t.module()
        name = mod[0] if mod else ""
        args = mod[1] if mod and isinstance(mod[1], dict) else {}
        if "until" in t.body:
            out.append((t, "until", f"retries {t.body.get('retries')}, delay {t.body.get('delay')}"))
        if name == "ansible.builtin.wait_for":
            out.append((t, "wait_for", f"timeout {args.get('timeout')}"))
        if name == "refdeploy_watch":
            out.append((t, "refdeploy_watch", f"timeout_s {args.get('timeout_s')}"))
        argv = _argv(t)
        if "docker" in argv and "version" in argv:
            bound = " ".join(argv[: argv.index("docker")]) or f"task timeout {t.body.get('timeout')}"
            out.append((t, "docker version", bound))
    return out


def _problem(t: Task, kind: str) -> str | None:
    """Why a wait is unbounded, or None."""
    args: Any = (t.module() or ("", {}))[1]
    if kind == "until" and not ("retries" in t.body and "delay" in t.body):
        return "an until loop without retries and delay"
    if kind == "wait_for" and "timeout" not in args:
        return "wait_for without a timeout"
    if kind == "refdeploy_watch" and "timeout_s" not in args:
        return "refdeploy_watch without timeout_s"
    if kind == "docker version":
        argv = _argv(t)
        if "timeout" not in argv[: argv.index("docker")] and "timeout" not in t.body:
            return "`docker version` with no bound of its own (timeout(1) or the task's timeout)"
    return None


def test_every_wait_in_the_roles_has_a_bound() -> None:
    waits = _waits()
    print("\n" + "\n".join(f"{t.file:34} {kind:16} {bound:40} {t.name}" for t, kind, bound in waits))
    kinds = {kind for _t, kind, _b in waits}
    assert kinds == {"until", "wait_for", "refdeploy_watch", "docker version"}, "the walk no longer finds every kind"
    assert len([w for w in waits if w[1] == "docker version"]) == 5, "a docker version wait was lost or added"
    problems = [f"{t.file}: {t.name}: {why}" for t, kind, _b in waits if (why := _problem(t, kind))]
    assert problems == []


def test_an_unbounded_wait_is_named() -> None:
    cmd = {"ansible.builtin.command": {"argv": ["docker", "version"]}}
    assert _problem(Task("x", "X", {**cmd, "until": "r.rc == 0", "retries": 3}), "until") == (
        "an until loop without retries and delay"
    )
    assert _problem(Task("x", "X", cmd), "docker version") == (
        "`docker version` with no bound of its own (timeout(1) or the task's timeout)"
    )
    assert _problem(Task("x", "X", {**cmd, "timeout": 30}), "docker version") is None
    wait_for = Task("x", "X", {"ansible.builtin.wait_for": {"port": 1}})
    assert _problem(wait_for, "wait_for") == "wait_for without a timeout"
