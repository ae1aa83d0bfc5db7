"""What a probe wrote (serving/evidence/fetched.py): collected after its window (packed where the probe could not, its
SHA-1, the serving container and log lines read back), and unpacked on the controller: renamed, records beside
it, archive gone; nothing fetched still gives the directory; an archive that reaches outside itself is refused."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from serving.evidence.fetched import UnpackError, after_window_script, parse_after_window, serving_unreadable, unpack


def _archive(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("bundle/escape")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    return path


def test_the_bundle_is_unpacked_under_its_name_with_the_records_and_the_archive_goes(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "capture.tar.gz", {"bundle/summary.txt": b"ok\n", "bundle/metrics/a.prom": b"x"})
    got = unpack(archive, tmp_path, "bundle", "capture", {"serving-container.json": {"changed": False}})
    assert got == tmp_path / "capture"
    assert (got / "summary.txt").read_text() == "ok\n" and (got / "metrics" / "a.prom").read_bytes() == b"x"
    assert json.loads((got / "serving-container.json").read_text()) == {"changed": False}
    assert not archive.exists() and not list(tmp_path.glob(".*unpacking"))


def test_a_bench_output_joins_the_directory_its_manifest_is_in_and_a_name_both_have_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "manifest.json").write_text("{}\n")
    archive = _archive(tmp_path / "bench.tar.gz", {"out/client.json": b"{}", "out/runs/c1-m1/result.json": b"[]"})
    with pytest.raises(UnpackError, match="exists already"):
        unpack(archive, tmp_path, "out", "bench", {})
    got = unpack(archive, tmp_path, "out", "bench", {"serving-container.json": {}}, merge=True)
    assert sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file()) == [
        "client.json",
        "manifest.json",
        "runs/c1-m1/result.json",
        "serving-container.json",
    ]
    assert (got / "manifest.json").read_text() == "{}\n" and not archive.exists()
    again = _archive(tmp_path / "bench.tar.gz", {"out/manifest.json": b"other", "out/new.txt": b"x"})
    with pytest.raises(UnpackError, match=r"manifest\.json in .*bench already"):
        unpack(again, tmp_path, "out", "bench", {}, merge=True)
    assert (got / "manifest.json").read_text() == "{}\n" and not (got / "new.txt").exists()  # nothing moved
    assert not list(tmp_path.glob(".*unpacking"))


def test_nothing_fetched_still_gives_the_directory_with_its_records(tmp_path: Path) -> None:
    got = unpack(tmp_path / "missing.tar.gz", tmp_path, "bundle", "capture", {"serving-container.json": [1]})
    assert sorted(p.name for p in got.iterdir()) == ["serving-container.json"]


def test_an_archive_that_reaches_outside_itself_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.tar.gz", {"bundle/x": b"1"}, link="/etc/passwd")
    with pytest.raises(UnpackError, match=r"a\.tar\.gz"):
        unpack(archive, tmp_path, "bundle", "capture", {})
    archive = _archive(tmp_path / "b.tar.gz", {"other/x": b"1"})
    with pytest.raises(UnpackError, match="no bundle/ in it"):
        unpack(archive, tmp_path, "bundle", "capture", {})


# After the window (after_window_script, parse_after_window): the script run for real with sh, on a PATH where
# docker is missing (as on a host where it is gone): packing, the SHA-1 and the refusal are real; the serving
# container's object is the fixture a real `docker container inspect` printed.
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-cpu-0.32.0" / "container-inspect.json"


def _after(tmp_path: Path, out: Path) -> tuple[str, int]:
    script = after_window_script(str(out), "bundle", "refdeploy-vllm", ["refdeploy-probe"], "refdeploy-memory", 100)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("sh", "tar", "gzip", "sha1sum", "cut", "tr", "sed", "grep", "tail"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    got = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": str(bin_dir)}, check=False)
    return got.stdout, got.returncode


def test_a_bundle_the_probe_did_not_pack_is_packed_and_its_sha1_given(tmp_path: Path) -> None:
    out = tmp_path / "probe-out"
    (out / "bundle" / "samplers").mkdir(parents=True)
    (out / "bundle" / "samplers" / "vmstat.log").write_text("1 2 3\n")
    stdout, _ = _after(tmp_path, out)
    after = parse_after_window(stdout)
    assert after.packed
    archive = out / "bundle.tar.gz"
    assert after.archive_sha1 == hashlib.sha1(archive.read_bytes()).hexdigest()
    with tarfile.open(archive) as tar:
        assert "bundle/samplers/vmstat.log" in tar.getnames()
    # docker is not there: what it said comes back, and the collection refuses to judge the container.
    assert after.serving is None and "docker" in after.serving_error and serving_unreadable(after)


def test_a_bundle_the_probe_packed_is_left_as_it_is(tmp_path: Path) -> None:
    out = tmp_path / "probe-out"
    out.mkdir()
    archive = _archive(out / "bundle.tar.gz", {"bundle/summary.txt": b"ok\n"})
    before = archive.read_bytes()
    after = parse_after_window(_after(tmp_path, out)[0])
    assert not after.packed and archive.read_bytes() == before
    assert after.archive_sha1 == hashlib.sha1(before).hexdigest()


def test_nothing_written_gives_nothing_to_fetch(tmp_path: Path) -> None:
    assert parse_after_window(_after(tmp_path, tmp_path / "never-made")[0]).archive_sha1 is None


def test_the_reply_is_read_line_by_line() -> None:
    inspect = json.loads(FIXTURE.read_text())
    inspect = inspect[0] if isinstance(inspect, list) else inspect
    text = (
        f"serving {json.dumps(inspect)} \n"
        "archive 0123456789abcdef0123456789abcdef01234567\n"
        'log (Worker pid=163) INFO refdeploy-memory-phase {"phase": "decode"}\n'
        "log second line\n"
    )
    after = parse_after_window(text)
    assert after.serving is not None and after.serving["Id"] == inspect["Id"]
    assert not serving_unreadable(after) and not after.packed
    assert after.archive_sha1 == "0123456789abcdef0123456789abcdef01234567"
    assert after.log == ['(Worker pid=163) INFO refdeploy-memory-phase {"phase": "decode"}', "second line"]
    gone = parse_after_window("serving Error response from daemon: No such container: refdeploy-vllm \n")
    assert gone.serving is None and not serving_unreadable(gone)  # gone is an answer: the change says "absent"
    down = parse_after_window("serving Cannot connect to the Docker daemon at unix:///var/run/docker.sock. \n")
    assert serving_unreadable(down)


def _lagging_docker(tmp_path: Path, dead: int) -> tuple[Path, Path]:
    """A stand-in docker on PATH (the one seam: Docker's lag is what is tested): it reports the dead PID as running
    for its first three answers, as Docker did in CI right after the kernel killed vLLM, then the restarted one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "sleep", "tr", "sed", "cat", "expr"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    calls = tmp_path / "calls"
    calls.write_text("0")
    (bin_dir / "docker").write_text(
        "#!/bin/sh\n"
        f"n=$(cat {calls}); n=$(expr $n + 1); echo $n > {calls}\n"
        'case "$*" in *State.Pid*) if [ $n -le 3 ]; then echo ' + str(dead) + "; else echo 777; fi;;\n"
        ' *inspect*) echo \'{"Id": "abc", "State": {"Status": "running", "Pid": 777}, "RestartCount": 1}\';;\n'
        "esac\n"
    )
    (bin_dir / "docker").chmod(0o755)
    return bin_dir, calls


def test_the_collection_waits_for_docker_to_notice_that_vllm_died(tmp_path: Path) -> None:
    dead = 4194303  # above the kernel's pid_max on this machine's default: never in /proc
    assert not Path(f"/proc/{dead}").exists()
    bin_dir, calls = _lagging_docker(tmp_path, dead)
    script = after_window_script(str(tmp_path / "out"), "bundle", "refdeploy-vllm", ["p"], before_pid=dead)
    got = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": str(bin_dir)}, check=False)
    after = parse_after_window(got.stdout)
    assert after.serving is not None and after.serving["State"]["Pid"] == 777, got.stdout + got.stderr
    assert int(calls.read_text()) >= 5  # rm, three answers with the dead PID, the one that moved on, the inspect
    # A PID that still lives is not waited on: one question about it at most.
    calls.write_text("0")
    script = after_window_script(str(tmp_path / "out"), "bundle", "refdeploy-vllm", ["p"], before_pid=os.getpid())
    subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": str(bin_dir)}, check=False)
    assert int(calls.read_text()) == 2  # rm and the inspect


def test_the_collection_waits_while_vllm_is_a_zombie_not_yet_reaped(tmp_path: Path) -> None:
    # In CI the probe's docker run had returned 137 while vLLM's PID was still in /proc as a zombie (containerd's
    # shim had not reaped it; 0.35 s here after a SIGKILL) and Docker still said "running" with that PID. A real
    # zombie: a child of this test that has exited and is not waited for.
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{child.pid}/stat").read_text().rpartition(") ")[2].startswith("Z"):
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.02)
        bin_dir, calls = _lagging_docker(tmp_path, child.pid)
        script = after_window_script(str(tmp_path / "out"), "bundle", "refdeploy-vllm", ["p"], before_pid=child.pid)
        env = {"PATH": str(bin_dir)}
        got = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=False)
    finally:
        child.wait()
    after = parse_after_window(got.stdout)
    assert after.serving is not None and after.serving["State"]["Pid"] == 777, got.stdout + got.stderr
    assert int(calls.read_text()) >= 5  # rm, three answers with the zombie's PID, the one that moved on, the inspect
