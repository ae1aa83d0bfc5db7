from __future__ import annotations

import copy
from pathlib import Path

from serving.record import manifest
from serving.record.manifest import SCHEMA_VERSION, build_manifest, engine_startup_s, failed_checks
from tests.helpers.gpu_hosts import gpu_serving_plan
from tests.helpers.manifests import raw_readings as _raw


def test_manifest_of_a_real_container_verifies(vllm_cpu_fixtures: Path) -> None:
    m = build_manifest(_raw(vllm_cpu_fixtures))
    assert failed_checks(m) == []
    assert m["verified"] is True
    assert m["limits_in_force"]["cpuset_cpus"] == "0-1"
    assert m["limits_in_force"]["memory_limit_bytes"] == 8 << 30
    assert m["limits_in_force"]["proc_limits"]["Max open files"] == [16384, 16384]
    assert m["image"]["removed_packages"] == ["torchvision", "torchaudio", "torchcodec"]
    assert m["container"]["engine_startup_s"] == 51.0
    names = {c["check"] for c in m["verification"]}
    assert {"memory limit (cgroup)", "ulimit nofile (/proc/1/limits of the engine)", "cpuset (cgroup)"} <= names
    assert "every worker rank runs where the plan binds it" in names
    assert m["placement"]["ranks"][0]["title"] == "VLLM::Worker" and m["placement"]["ranks"][0]["ok"] is True
    assert m["plan"]["launch"]["spec_digest"] == m["container_spec"]["labels"]["org.refdeploy.spec-sha256"]


def test_a_limit_not_in_force_fails_naming_both_values(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    raw["plan"]["launch"]["spec"]["memory"] = "4g"
    bad = failed_checks(build_manifest(raw))
    assert "memory limit (docker): expected 4294967296, found 8589934592" in bad
    assert "memory limit (cgroup): expected 4294967296, found 8589934592" in bad


def test_a_patch_missing_from_the_image_fails(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    extra = {"name": "0002-extra.patch", "sha256": "ab" * 32, "path": "x"}
    raw["plan"]["launch"]["images"]["patches"] = [*copy.deepcopy(raw["plan"]["launch"]["images"]["patches"]), extra]
    bad = failed_checks(build_manifest(raw))
    assert any(b.startswith("patches applied in the image are the planned ones") for b in bad)
    assert any(b.startswith("image labels carry the planned patch hashes") for b in bad)


def test_deploy_timing_separates_our_overhead_from_the_engines_start_up(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    raw["replaced"] = True
    # The fixture container started 08:50:12.13 and logged "Starting vLLM server" at 08:51:03.
    raw["timing"] = {
        "deploy_started_utc": "2026-11-29T08:50:00.000000Z",
        "healthy_observed_utc": "2026-11-29T08:51:05.500000Z",
    }
    t = build_manifest(raw)["deploy_timing"]
    assert t["time_to_healthy_s"] == 65.5
    assert t["engine_startup_s"] == 51.0
    assert t["overhead_to_healthy_s"] == 14.5
    raw["replaced"] = False
    raw["timing"] = {"deploy_started_utc": "2026-11-29T09:00:00.000000Z", "healthy_observed_utc": None}
    assert build_manifest(raw)["deploy_timing"]["overhead_to_healthy_s"] is None


def test_engine_startup_uses_dockers_year_and_clock() -> None:
    assert engine_startup_s("2026-11-29T08:57:29.096613671Z", "11-29 08:58:15") == 46.0
    assert engine_startup_s(None, "11-29 08:58:15") is None


def test_the_slice_limits_read_back_keep_the_slices_and_its_roots_apart() -> None:
    d, root = "/sys/fs/cgroup/refdeploy.slice", "/sys/fs/cgroup"
    readings = {
        "slice_dir": d,
        "root": root,
        "files": {
            d: {"kind": "directory", "content": None},
            f"{d}/cpuset.cpus.effective": {"kind": "file", "content": "0-27\n"},
            f"{d}/cpu.max": {"kind": "file", "content": "2800000 100000\n"},
            f"{d}/pids.max": {"kind": "absent", "content": None},
            f"{root}/memory.max": {"kind": "unreadable", "content": None, "reason": "Permission denied"},
            f"{root}/cpu.max": {"kind": "file", "content": "max 100000\n"},
        },
    }
    assert manifest.slice_limits(readings) == (
        {"cpuset.cpus.effective": "0-27", "cpu.max": "2800000 100000", "root:cpu.max": "max 100000"},
        None,
    )
    readings["files"][d] = {"kind": "absent", "content": None}
    assert manifest.slice_limits(readings) == (
        None,
        "/sys/fs/cgroup/refdeploy.slice does not exist yet (systemd creates it with its first unit)",
    )
    assert manifest.slice_limits(None) == (None, None)


def test_a_recorded_deploy_is_written_private_and_redacted_and_says_what_differs(
    vllm_cpu_fixtures: Path, tmp_path: Path
) -> None:
    raw = _raw(vllm_cpu_fixtures)
    raw["container_inspect"]["Config"]["Env"].append("HF_TOKEN=hf_secretvalue123")
    ok = manifest.record_deploy(copy.deepcopy(raw), tmp_path / "runs")
    assert ok["error"] is None and Path(ok["path"]).name == "manifest.json"
    run = Path(ok["path"]).parent
    assert run.parent == (tmp_path / "runs" / "localhost").resolve() and (run.stat().st_mode & 0o777) == 0o700
    written = (run / "raw-readings.json").read_text() + (run / "manifest.json").read_text()
    assert "hf_secretvalue123" not in written and "HF_TOKEN" in written
    raw["plan"]["launch"]["spec"]["memory"] = "4g"
    bad = manifest.record_deploy(raw, tmp_path / "runs")
    assert bad["error"] is not None and bad["error"].startswith(f"manifest {bad['path']}: the running container")
    assert "memory limit (docker): expected 4294967296, found 8589934592" in bad["error"]
    assert Path(bad["path"]).is_file() and bad["run_id"] != ok["run_id"]


def test_a_container_started_from_another_spec_fails_naming_its_argv(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    config = raw["container_inspect"]["Config"]
    cmd = list(config["Cmd"])
    cmd[cmd.index("--max-num-seqs") + 1] = "4"
    config["Cmd"] = cmd
    config["Labels"]["org.refdeploy.spec-sha256"] = "ab" * 32
    m = build_manifest(raw)
    bad = failed_checks(m)
    assert any(b.startswith("container runs the planned vLLM argv: expected [") and "'4'" in b for b in bad)
    assert (
        f"container was started from the planned spec: expected {m['plan']['launch']['spec_digest']!r}, "
        f"found {'ab' * 32!r}" in bad
    )
    # What runs is recorded beside what was planned.
    assert m["container"]["cmd"] == cmd and m["vllm_argv"] != cmd
    assert m["container"]["spec_sha256"] == "ab" * 32 and m["container"]["profile"] == "cpu-tiny"
    assert m["verified"] is False


def test_the_manifest_records_the_hosts_tuning_and_the_repos_commit(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    raw["host_tuning"] = {"cmdline": "ro quiet\n", "thp_enabled": "[always] madvise never\n", "swappiness": "10\n"}
    raw["repo"] = {"commit": "c0ffee" * 6 + "0123", "dirty": False, "changed": [], "changed_count": 0}
    m = build_manifest(raw)
    assert m["schema_version"] == SCHEMA_VERSION == 4
    assert m["host_tuning"]["kernel_cmdline"] == "ro quiet" and m["host_tuning"]["thp"]["enabled"] == "always"
    assert m["host_tuning"]["swappiness"] == 10 and m["host_tuning"]["numa_balancing"] == "absent"
    assert m["repo"] == raw["repo"]


def test_the_repos_commit_and_whether_its_tree_is_dirty(tmp_path: Path) -> None:
    import subprocess

    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *argv], capture_output=True, text=True, check=True).stdout

    assert manifest.repo_state(tmp_path)["commit"] is None  # not a checkout: said, not raised
    assert "not a git repository" in manifest.repo_state(tmp_path)["error"]
    git("init", "-q")
    (tmp_path / "a.txt").write_text("a\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "a")
    clean = manifest.repo_state(tmp_path)
    assert clean == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False, "changed": [], "changed_count": 0}
    (tmp_path / "a.txt").write_text("b\n")
    (tmp_path / "new.txt").write_text("n\n")
    dirty = manifest.repo_state(tmp_path)
    assert dirty["commit"] == clean["commit"] and dirty["dirty"] is True
    assert dirty["changed"] == [" M a.txt", "?? new.txt"] and dirty["changed_count"] == 2


def test_every_limit_at_every_level_is_recorded_and_a_drifted_one_fails(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    m = build_manifest(raw)
    limits = m["limits_in_force"]
    assert set(limits["cgroup"]) == {"container", "/docker", "/"}
    assert limits["cgroup"]["container"]["cpu.cfs_quota_us"] == -1 and limits["cgroup"]["/docker"]["pids.max"] == "max"
    assert limits["docker"]["NanoCpus"] == 0 and limits["docker"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert limits["affinity"]["VLLM::Worker"]["VLLM::Worker"] == ["0"]
    # A quota written on the parent cgroup by hand (the kernel's file as it then reads).
    raw["host_limits"]["files"]["/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us"] = "50000\n"
    m = build_manifest(raw)
    assert m["limits_in_force"]["cgroup"]["/docker"]["cpu.cfs_quota_us"] == 50000
    assert failed_checks(m) == ["limits at every cgroup level and in Docker are the plan's: expected [], found "
                                "['/docker cpu.cfs_quota_us: 50000 (the plan: -1)']"]  # fmt: skip


def test_the_manifest_keeps_each_gpus_persistence_and_mig_modes_as_planned() -> None:
    """The plan's GPU facts are the manifest's: per GPU its persistence mode and MIG modes (current, pending), so
    `make verify` sees one change between two deploys."""
    plan = gpu_serving_plan("rtxpro6000-tp8").model_dump(mode="json")
    section = manifest.gpu_section(plan["gpu"], None)
    assert section is not None
    assert [
        (g["index"], g["persistence_mode"], g["mig_mode_current"], g["mig_mode_pending"]) for g in section["gpus"]
    ] == [(i, True, False, False) for i in range(8)]
    assert section["kernel_module"] == {"flavour": "open", "version": "580.95.05", "arch": "x86_64"}
