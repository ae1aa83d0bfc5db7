"""What a long command is doing, read from its output (serving/bridge/progress.py), and the progress lines the
product's own commands write (probes/base/progress.py, images/vllm/bench_client.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from probes.base import progress as probe_progress
from serving.bridge import progress
from tests.helpers.image_scripts import image_script

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# The legacy builder's output (DOCKER_BUILDKIT=0), as `docker build` printed it for the probe image.
BUILD_OUT = """Sending build context to Docker daemon  90.11kB\r\r
Step 1/9 : ARG BASE_IMAGE
Step 2/9 : FROM ${BASE_IMAGE}
 ---> 1f6c1b8f4f0c
Step 3/9 : RUN apt-get update -q && apt-get install -y -q --no-install-recommends fio sysstat procps linux-perf
 ---> Running in 0c2a6ad8e1d9
Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]
Reading package lists...
"""


def test_a_docker_build_names_its_step_and_the_steps_latest_line() -> None:
    line = progress.status_line("docker_build", BUILD_OUT, "")
    assert line is not None and line.startswith("step 3/9 RUN apt-get update -q && apt-get install")
    assert line.endswith("| Reading package lists...")
    assert len(line) <= progress.MAX_CHARS
    # Between steps: the step alone (the layer id line says nothing).
    assert progress.status_line("docker_build", "Step 2/9 : FROM x\n ---> 1f6c1b8f4f0c\n", "") == "step 2/9 FROM x"
    assert progress.status_line("docker_build", "Sending build context to Docker daemon\n", "") is None


def test_a_long_build_step_is_named_though_its_line_is_far_outside_the_tail(tmp_path: Path) -> None:
    # A real cold build's stdout while pip installed vLLM: step 15's line lies ~40 KB before the end.
    log = FIXTURES / "docker-20.10-legacy-build" / "runtime-pip-step.stdout.txt"
    tail_bytes = 4096
    assert b"\nStep " not in log.read_bytes()[-tail_bytes:]

    def read(mode: str) -> str:
        cmd = progress.tail_command(mode, str(log), tail_bytes)
        return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, errors="replace", check=True).stdout

    line = progress.status_line("docker_build", read("docker_build"), "")
    assert line is not None and line.startswith("step 15/33 RUN case")
    assert line.endswith("| Attempting uninstall: setuptools")
    # The tail alone (every other mode) holds no step line at all.
    assert progress.status_line("docker_build", read("last_line"), "") is None
    # A step line inside the tail is the later one, and is the one named.
    later = tmp_path / "out.txt"
    later.write_text(log.read_text() + "Step 16/33 : COPY apply-patches.sh /usr/local/bin/apply-patches.sh\n")
    cmd = progress.tail_command("docker_build", str(later), tail_bytes)
    got = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, errors="replace", check=True).stdout
    assert (
        progress.status_line("docker_build", got, "")
        == "step 16/33 COPY apply-patches.sh /usr/local/bin/apply-patches.sh"
    )


def test_marked_lines_are_read_from_stderr_and_kept_out_of_what_the_roles_judge() -> None:
    err = f"{progress.MARK}run 1 of 8: c1-w1 (warmup)\nsome warning\n{progress.MARK}run 2 of 8: c1-r1 (measure)\n"
    assert progress.status_line("marked", "run 2 of 8 on stdout is not a progress line\n", err) == (
        "run 2 of 8: c1-r1 (measure)"
    )
    assert progress.status_line("marked", "", "some warning\n") is None
    assert progress.without_marked(err) == "some warning\n"


def test_last_line_and_an_unknown_mode() -> None:
    assert (
        progress.status_line("last_line", "build.sh: debootstrap bookworm\n\n", "") == "build.sh: debootstrap bookworm"
    )
    assert progress.status_line("last_line", "", "only stderr\n") == "only stderr"
    with pytest.raises(ValueError, match="unknown progress mode 'steps'"):
        progress.status_line("steps", "", "")


def test_the_ticker_line_with_and_without_a_status_and_bound() -> None:
    assert progress.ticker("Bench | Run", "run 2 of 8", 40.4, 900) == (
        "      ... Bench | Run: run 2 of 8 (40 s so far, at most 860 s more)"
    )
    assert progress.ticker("Serve | Wait", None, 30, 600) == "      ... Serve | Wait: 30 s so far (at most 570 s more)"
    assert progress.ticker("Images | Build", None, 12, None) == "      ... Images | Build: 12 s so far"


def test_the_products_commands_write_the_mark_the_plugin_reads(capsys: pytest.CaptureFixture[str]) -> None:
    bench_client = image_script("bench_client")
    assert probe_progress.MARK == progress.MARK == bench_client.PROGRESS_MARK
    probe_progress.say("fio QD1 random reads: depth 1 of 2, 10 s")
    bench_client.say("run 1 of 8: c1-w1 (warmup)")
    err = capsys.readouterr().err
    assert progress.status_line("marked", "", err) == "run 1 of 8: c1-w1 (warmup)"
    assert progress.without_marked(err) == ""
