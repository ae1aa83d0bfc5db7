"""serving/bridge/hostshell.py: a script through the connection, its exit status and outputs read back exactly. Run here
with the real sh, as the local connection runs it (the SSH connection is exercised by the GPU chain's tests)."""

from __future__ import annotations

import subprocess

from serving.bridge import hostshell


def _through_connection(command: str, noise: str = "") -> str:
    """What a connection's stdout holds: login noise first where a tty brings it, then the command's output."""
    got = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False, timeout=30)
    return noise + got.stdout


def test_outputs_and_status_come_back_exactly() -> None:
    script = "printf 'a b\\n\\nlast line without newline'; printf 'warn: x\\n' >&2; printf '\\033[1m%s' '€' >&2; exit 7"
    reply = hostshell.parse(_through_connection(hostshell.wrap(script)))
    assert reply == hostshell.Reply(7, "a b\n\nlast line without newline", "warn: x\n\x1b[1m€")


def test_the_tasks_environment_reaches_the_script() -> None:
    reply = hostshell.parse(_through_connection(hostshell.wrap('echo "$DOCKER_HOST"', "DOCKER_HOST=unix:///x.sock")))
    assert reply is not None and reply.stdout == "unix:///x.sock\n"


def test_login_noise_before_the_reply_is_not_part_of_it() -> None:
    noise = "Last login: Wed Dec  2 10:00:00 2026\r\nrefdeploy-sh-rc: 99\r\n"  # even noise that looks like a reply
    reply = hostshell.parse(_through_connection(hostshell.wrap("echo ok"), noise))
    assert reply == hostshell.Reply(0, "ok\n", "")


def test_a_reply_cut_off_is_none() -> None:
    assert hostshell.parse("") is None
    assert hostshell.parse("refdeploy-sh-rc: 0\n") is None  # the outputs never came


def test_the_script_reads_no_stdin() -> None:
    got = subprocess.run(
        ["sh", "-c", hostshell.wrap("cat; echo done")], input="secret\n", capture_output=True, text=True, timeout=30
    )
    reply = hostshell.parse(got.stdout)
    assert reply is not None and reply.stdout == "done\n"
