"""The manifest holds the serving container to the spec's capabilities, no-new-privileges, pids limit and network,
as Docker reports them: a container started without them (as every deploy before them was) fails, naming each."""

from __future__ import annotations

from pathlib import Path

from serving.record.manifest import build_manifest, failed_checks
from tests.helpers.manifests import raw_readings as _raw


def test_a_container_with_dockers_defaults_fails_each_privilege_check(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    # What `docker inspect` of this machine's serving container of the day said: Docker's defaults.
    raw["container_inspect"]["HostConfig"].update(CapDrop=None, SecurityOpt=None, PidsLimit=None, NetworkMode="default")
    bad = failed_checks(build_manifest(raw))
    assert bad == [
        "capabilities dropped (docker): expected ['ALL'], found []",
        "security options (docker): expected ['no-new-privileges'], found []",
        "pids limit (docker): expected 4096, found None",
        "network (docker): expected 'none', found 'default'",
        # The limits' own check reads the same HostConfig (serving/host/cgroup_limits.py: null is none, 0).
        "limits at every cgroup level and in Docker are the plan's: expected [], found ['docker PidsLimit: 0 (the "
        "plan: 4096)']",
    ]


def test_a_capability_docker_holds_with_its_prefix_is_the_planned_one(vllm_cpu_fixtures: Path) -> None:
    raw = _raw(vllm_cpu_fixtures)
    raw["plan"]["launch"]["spec"]["capabilities"] = ["SYS_NICE"]
    raw["container_inspect"]["HostConfig"].update(CapAdd=["CAP_SYS_NICE"], SecurityOpt=["no-new-privileges:true"])
    assert failed_checks(build_manifest(raw)) == []
    raw["container_inspect"]["HostConfig"]["CapAdd"] = ["CAP_SYS_NICE", "CAP_SYS_ADMIN"]
    assert failed_checks(build_manifest(raw)) == [
        "capabilities added (docker): expected ['SYS_NICE'], found ['SYS_ADMIN', 'SYS_NICE']"
    ]
