"""make probe-io's target judged from the host's stat of it, before the run makes anything (issue 46 item 6): a
target fio could not read is one line naming it and what to do, where before the fio container refused it after
the run directory was made, leaving it with only serving-container.json.

Each case is the real `stat -L -c '%F|%s'` the role runs (refdeploy_shell), on a real file of that kind here."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.evidence.probe_outcome import io_target_problem
from serving.plan.plan import plan_from_profile


def _stat(path: Path) -> dict[str, object]:
    """What the role's task registers: the same command, its rc, stdout and stderr."""
    r = subprocess.run(["stat", "-L", "-c", "%F|%s", "--", str(path)], capture_output=True, text=True, check=False)
    return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


def _problem(path: Path) -> str | None:
    s = _stat(path)
    return io_target_problem("gpu1", str(path), int(str(s["rc"])), str(s["stdout"]), str(s["stderr"]))


WHAT = "set probe_io_target to a model weight or data file the serving stack reads"
SMALL = "smaller than one 4 KiB read: give a larger file the serving stack reads"


def test_a_readable_file_of_a_block_or_more_passes(tmp_path: Path) -> None:
    f = tmp_path / "w.safetensors"
    f.write_bytes(b"\0" * 8192)
    assert _problem(f) is None
    link = tmp_path / "link"
    link.symlink_to(f)
    assert _problem(link) is None  # followed, as fio follows it


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: None, "does not exist on gpu1 (or is a link to nothing): " + WHAT),
        (lambda p: p.symlink_to(p.parent / "gone"), "does not exist on gpu1 (or is a link to nothing): " + WHAT),
        (lambda p: p.mkdir(), "on gpu1 is directory, not a regular file: " + WHAT),
        (lambda p: p.write_bytes(b""), "on gpu1 is 0 bytes, " + SMALL),
        (lambda p: p.write_bytes(b"x" * 4095), "on gpu1 is 4095 bytes, " + SMALL),
        (lambda p: os.mkfifo(p), "on gpu1 is fifo, not a regular file: " + WHAT),
    ],
    ids=["missing", "dangling link", "directory", "empty", "under a block", "fifo"],
)
def test_a_target_fio_could_not_read_is_one_line_naming_it(
    tmp_path: Path, make: Callable[[Path], object], says: str
) -> None:
    target = tmp_path / "target"
    make(target)
    assert _problem(target) == f"probe_io_target {target} {says}"


def test_a_device_is_not_a_regular_file() -> None:
    assert _problem(Path("/dev/null")) == (f"probe_io_target /dev/null on gpu1 is character special file, not a "
                                           f"regular file: {WHAT}")  # fmt: skip


def _plan(served: str) -> dict[str, object]:
    """cpu-tiny's plan on localhost, the host's served files as the plan's read lists them (size, path)."""
    reading = {"hostname": "localhost", "served_files": served}
    return plan_from_profile(load_profile("cpu-tiny"), "localhost", reading).model_dump(mode="json")


def test_the_filter_names_the_inventorys_target_else_the_plans(tmp_path: Path) -> None:
    plan = _plan("4096\t/var/lib/refdeploy/models/tiny-llama/config.json\n"
                 "90000\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n")  # fmt: skip
    data_file = "/var/lib/refdeploy/models/tiny-llama/model.safetensors"
    assert playbooks.probe_io_target(plan, {"target": ""}) == {"target": data_file}
    missing = tmp_path / "missing.bin"
    dirs = [str(tmp_path)]
    assert playbooks.probe_io_target(plan, {"target": str(missing), "data_dirs": dirs}) == {"target": str(missing)}
    judged = playbooks.probe_io_target(plan, {"target": str(missing), "data_dirs": dirs, "stat": _stat(missing)})
    assert judged == {
        "target": str(missing),
        "error": f"probe_io_target {missing} does not exist on localhost (or is a link to nothing): {WHAT}",
    }


def test_a_target_outside_the_data_directories_is_refused_before_the_host_is_asked(tmp_path: Path) -> None:
    """/etc/hostname is under 4 KiB too: the containment is judged first, without a stat, and named (CI once got
    the size's line for it)."""
    plan = _plan("90000\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n")
    out = playbooks.probe_io_target(plan, {"target": "/etc/hostname"})
    assert out["error"].startswith("target /etc/hostname is outside the data directories (/var/lib/refdeploy/models")
    # The inventory's directories, where it names some, not the plan's.
    inside = tmp_path / "w.bin"
    assert playbooks.probe_io_target(plan, {"target": str(inside), "data_dirs": [str(tmp_path)]}) == {
        "target": str(inside)
    }
    assert "outside the data directories" in playbooks.probe_io_target(plan, {"target": str(inside)})["error"]


def test_a_plan_with_nothing_staged_is_refused_without_a_stat() -> None:
    out = playbooks.probe_io_target(_plan(""), {"target": ""})
    assert out["target"] == "" and out["error"].startswith("nothing to read on localhost: no file under ")
