"""A GPU profile deployed to this machine: the GPU facts are REPLAYED from the recorded/constructed
fixtures of tests/fixtures/gpu-hosts/ (tests/replay/nvidia-smi, a sysfs tree), everything else is this
host's own (cgroup filesystem, MemTotal, dockerd's memlock limit, Docker's runtimes). The deploy must stop
in preflight, with one line per problem, before anything changes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from serving.host.pinned_ram import format_size
from tests.integration.conftest import REPO, host_state, make

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0

FIX = REPO / "tests" / "fixtures" / "gpu-hosts" / "rtx3090-3gpu"
CLASS = {
    "gpu_class": {
        "name": "rtx3090-pp3",
        "gpu_count": 3,
        "model_substring": "RTX 3090",
        "min_driver": "570.86",
        "min_memory_mib": 24000,
        "compute_capability": "8.6",
    }
}


def _dockerd_memlock_soft() -> int | None:
    """dockerd's soft RLIMIT_MEMLOCK in bytes (None: unlimited), from its /proc/<pid>/limits, as preflight reads it."""
    pid = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True, check=True).stdout.split()[0]
    line = next(ln for ln in Path(f"/proc/{pid}/limits").read_text().splitlines() if ln.startswith("Max locked memory"))
    soft = line.split()[3]
    return None if soft == "unlimited" else int(soft)


def _meminfo_kib(field: str) -> int:
    line = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith(f"{field}:"))
    return int(line.split()[1])


def _refusal(out: str) -> list[str]:
    """The preflight's reasons, in the order of its one line: "<host> cannot be deployed to; nothing was changed:
    a | b | ...", from the failed task's msg (a single-quoted YAML scalar, folded, '' for ')."""
    flat = re.sub(r"\s*\n\s*", " ", out)
    m = re.search(r"msg: '[^']*cannot be deployed to; nothing was changed: ((?:[^']|'')*)'", flat)
    assert m, out[-3000:]
    return m.group(1).replace("''", "'").split(" | ")


def _deploy(tmp_path: Path, replay_dir: Path, profile: str = "rtx3090-pp3") -> tuple[int, str]:
    """Deploy with the one replay seam (tests/replay/README.md): the stand-ins first on PATH, and the GPU
    recordings without their host/ readings, so this machine's own are read."""
    gpu_only = tmp_path / "gpu-only"
    shutil.copytree(replay_dir, gpu_only)
    shutil.rmtree(gpu_only / "host")
    replay = {"PATH": f"{REPO / 'tests' / 'replay'}:{os.environ['PATH']}", "REFDEPLOY_REPLAY_DIR": str(gpu_only)}
    vars_file = tmp_path / "class.json"
    vars_file.write_text(json.dumps({**CLASS, "refdeploy_replay_environment": replay}))
    r = make("deploy", f"PROFILE={profile}", f"ANSIBLE_ARGS=-e @{vars_file}")
    return r.rc, r.output


def test_this_machine_is_refused_as_a_3090_host_with_its_real_reasons(tmp_path: Path) -> None:
    before = host_state()
    rc, out = _deploy(tmp_path, FIX)
    assert rc != 0
    assert "localhost cannot be deployed to; nothing was changed" in out
    # The replayed GPUs match the class: no GPU complaint.
    assert "expected 3 GPUs" not in out and "older than the class minimum" not in out
    # This machine's own facts, read from the machine first, decide the refusal's reasons: exactly these, each one
    # line, whatever the machine (a Debian 12 host runs cgroup v2, may run dockerd with another memlock limit than
    # this one's 8 MiB, and may have the RAM the budget asks for). Each expected reason names its fact.
    cgroup_fs = subprocess.run(["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], capture_output=True, text=True,
                               check=True).stdout.strip()  # fmt: skip
    runtimes = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True,
                              timeout=60, check=True).stdout  # fmt: skip
    soft = _dockerd_memlock_soft()
    mem_total_gib = _meminfo_kib("MemTotal") / 2**20
    budget_gib = float(re.search(r"'  budget\s+([\d.]+)'", out).group(1))  # type: ignore[union-attr]
    expected = {
        "cgroup": f"localhost runs cgroup v1 ({cgroup_fs} at /sys/fs/cgroup)" if cgroup_fs != "cgroup2fs" else None,
        "runtime": "Docker on localhost has no nvidia runtime" if "nvidia" not in json.loads(runtimes) else None,
        "memlock": "pinned memory 50.87 GiB exceeds RLIMIT_MEMLOCK" if soft is not None else None,
        "memory": f"budget {budget_gib:.2f} GiB exceeds MemTotal" if mem_total_gib < budget_gib else None,
        # The profile's model directory does not exist here.
        "model": "cannot tell which drive holds /srv/models/served on localhost",
    }
    wanted = [lead for lead in expected.values() if lead is not None]
    reasons = _refusal(out)
    assert len(reasons) == len(wanted) and all(r.startswith(w) for r, w in zip(reasons, wanted, strict=True)), (
        reasons,
        expected,
    )
    if soft is not None:
        assert f"exceeds RLIMIT_MEMLOCK {format_size(soft)}" in out
    assert "Pinned host-RAM budget" in out and "pinned_max_round_threshold_mb=4096: not rounded" in out
    assert host_state() == before


def test_a_host_with_two_gpus_instead_of_three_is_refused(tmp_path: Path) -> None:
    replay = tmp_path / "two-gpus"
    shutil.copytree(FIX, replay)
    for name in ("nvidia-smi-L.txt", "nvidia-smi-query-gpu.csv"):
        lines = (replay / name).read_text().splitlines(keepends=True)
        (replay / name).write_text("".join(ln for ln in lines if not ln.startswith(("2,", "GPU 2:"))))
    before = host_state()
    rc, out = _deploy(tmp_path, replay)
    assert rc != 0
    assert (
        "expected 3 GPUs of model RTX 3090 on localhost, found 2 (nvidia-smi -L): check the inventory or the host"
        in out
    )
    assert host_state() == before


def test_a_model_the_class_cannot_serve_or_hold_is_refused_from_its_own_config_before_any_change(
    tmp_path: Path,
) -> None:
    """GLM-5's config.json (tests/fixtures/models) staged in the profile's model directory on this host: the plan
    reads it there, and refuses both what the runtime image recorded it cannot do on compute capability 8.6 (sparse
    MLA) and weights that do not fit the class's GPUs, each in one line, with the host as it was."""
    model = tmp_path / "models" / "glm-5"
    model.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "models" / "glm-5.config.json", model / "config.json")
    text = (REPO / "serving" / "profiles" / "rtx3090-pp3.yaml").read_text()
    profile = tmp_path / "glm5-on-3090.yaml"
    profile.write_text(text.replace("host_path: /srv/models/served", f"host_path: {model}"))
    before = host_state()
    rc, out = _deploy(tmp_path, FIX, str(profile))
    assert rc != 0
    assert (
        "vllm 0.32.0 has no sparse MLA (DeepSeek sparse attention) attention backend for compute capability 8.6 "
        "(rtx3090-pp3): its CUDA selector tries " in " ".join(out.split())
    )
    # 743.9B parameters at bf16 over PP 3: 461.9 GiB a stage, against 24 GiB GPUs.
    assert f"the model's weights ({model}/config.json) take 461.9 GiB a rank" in " ".join(out.split())
    assert host_state() == before
