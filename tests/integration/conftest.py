"""Helpers for the integration tests: they drive the real `make` targets, Docker and vLLM on this machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE_URL = "http://127.0.0.1:8000"
CONTAINER = "refdeploy-vllm"
RUNS = REPO / "runs" / "localhost"
# Where a capture or probe writes on the host while it runs (its scratch copy, fetched and removed after).
PROBE_RUNS = Path("/var/lib/refdeploy/probe-runs")
# The capture's window is open once its samplers write.
WINDOW_OPEN = "*-capture/bundle/samplers/vmstat.log"


@dataclass
class MakeResult:
    rc: int
    output: str
    seconds: float

    @property
    def recap_changed(self) -> int:
        m = re.search(r"^localhost\s+: ok=\d+\s+changed=(\d+)", self.output, re.M)
        assert m, f"no PLAY RECAP in output:\n{self.output[-3000:]}"
        return int(m.group(1))


def make(*args: str, timeout: int = 1800, env: dict[str, str] | None = None) -> MakeResult:
    """`make ARGS` in the repository, as an operator runs it; `env` adds to the environment."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MAKE")}, **(env or {})}
    env["ANSIBLE_NOCOLOR"] = "1"
    start = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=env,
    )
    return MakeResult(proc.returncode, proc.stdout, time.monotonic() - start)


class BackgroundMake:
    """`make ARGS` in a thread, so a test can act while it runs (send load, kill vLLM) and then read its result."""

    def __init__(self, *args: str) -> None:
        self._result: list[MakeResult] = []
        self._thread = threading.Thread(target=lambda: self._result.append(make(*args)), daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 300) -> None:
        """Until `count` files match PROBE_RUNS/pattern; fails with the make's output if it ended first."""
        deadline = time.monotonic() + timeout
        while len(list(PROBE_RUNS.glob(pattern))) < count:
            assert self.running, self._result[0].output[-4000:] if self._result else "make ended without a result"
            assert time.monotonic() < deadline, f"no {count} x {PROBE_RUNS}/{pattern} after {timeout:g} s"
            time.sleep(0.2)

    def result(self, timeout: float = 600) -> MakeResult:
        self._thread.join(timeout)
        assert self._result, f"make still running after {timeout:g} s"
        return self._result[0]


def complete(prompt: str, max_tokens: int, timeout: int = 120) -> dict[str, Any]:
    """One completion from the deployed server, ignore_eos so it is exactly max_tokens long."""
    body = json.dumps({"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True})
    req = urllib.request.Request(
        f"{BASE_URL}/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def inspect(name: str) -> dict[str, Any] | None:
    out = subprocess.run(["docker", "container", "inspect", name], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)[0] if out.returncode == 0 else None


def host_state() -> dict[str, str]:
    """What a failed deploy must leave untouched: containers (with IDs and state) and tagged images."""
    ids = docker("ps", "-aq", "--no-trunc").split()
    containers = (
        docker(
            "inspect", "--format", "{{.Id}} {{.Name}} {{.State.Status}} {{.State.StartedAt}} {{.RestartCount}}", *ids
        )
        if ids
        else ""
    )
    return {
        "containers": containers,
        "images": docker("images", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"),
    }


def latest_manifest() -> tuple[Path, dict[str, Any]]:
    runs = sorted(p for p in RUNS.iterdir() if (p / "manifest.json").is_file())
    assert runs, f"no manifest under {RUNS}"
    return runs[-1], json.loads((runs[-1] / "manifest.json").read_text())


@pytest.fixture(scope="session", autouse=True)
def docker_engine() -> None:
    proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(
            "the integration tests need a running Docker Engine (`make deploy` installs and starts it on this "
            f"machine), or run `make test-unit` for the fast set: {proc.stderr.strip()}"
        )
