"""perf's capability for a capture: SYS_ADMIN only where Docker refused PERFMON as an unknown capability; any other
failure of the check skips perf with its reason. The refusals are Docker's own words (docker/cli#3960,
moby/moby#41562); the other failures are what the docker CLI and timeout(1) print for them."""

from __future__ import annotations

import pytest

from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.evidence.probe_plan import ProbePlanError, choose_perf_capability
from serving.plan.plan import plan_from_profile

# The daemon's refusal (Docker 20.10.22, docker/cli#3960), exit 125.
DAEMON_REFUSAL = 'docker: Error response from daemon: invalid CapAdd: unknown capability: "CAP_PERFMON".\n' + (
    "See 'docker run --help'."
)
# The runtime's refusal on a daemon that knows PERFMON and a runc that does not (moby/moby#41562), exit 125.
RUNC_REFUSAL = (
    "docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting container "
    'process caused: unknown capability "CAP_PERFMON": unknown.'
)


def test_the_container_ran_gives_perfmon_and_is_kept() -> None:
    choice = choose_perf_capability("auto", "checked 0\n")
    assert (choice.capability, choice.skip, choice.keep) == ("PERFMON", "", True)


@pytest.mark.parametrize("said", [DAEMON_REFUSAL, RUNC_REFUSAL])
def test_dockers_unknown_capability_refusal_gives_sys_admin(said: str) -> None:
    choice = choose_perf_capability("auto", f"checked 125\n{said}\n")
    assert (choice.capability, choice.skip, choice.keep) == ("SYS_ADMIN", "", True)


@pytest.mark.parametrize(
    ("check", "why"),
    [
        # timeout(1) stopped the docker client: no answer about PERFMON.
        ("checked 124\n", "(it ran past its bound (timeout): no output)"),
        ("checked 137\n", "(it was killed past its bound: no output)"),
        (
            "checked 125\nUnable to find image 'refdeploy/probes:0123456789ab' locally\ndocker: Error response from "
            "daemon: pull access denied for refdeploy/probes, repository does not exist or may require 'docker "
            "login': denied: requested access to the resource is denied.",
            "pull access denied",
        ),
        (
            "checked 1\nCannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
            "running?",
            "(exit 1: Cannot connect to the Docker daemon",
        ),
        # A capability refusal, but not of PERFMON: not the one the fallback is for.
        (
            'checked 125\ndocker: Error response from daemon: invalid CapAdd: unknown capability: "CAP_FOO".',
            'unknown capability: "CAP_FOO"',
        ),
        # The refusal's words, but not from docker run's own failure (the command ran and printed them).
        ('checked 1\nunknown capability: "CAP_PERFMON"', "(exit 1: unknown capability"),
        ("", "the PERFMON check printed no result (nothing)"),
        ("cached\nALL\n", "the PERFMON check printed no result (cached ALL)"),
    ],
)
def test_any_other_failure_skips_perf_with_its_reason(check: str, why: str) -> None:
    choice = choose_perf_capability("auto", check)
    assert choice.capability == "" and not choice.keep
    assert why in choice.skip
    assert "SYS_ADMIN is not tried" in choice.skip or "printed no result" in choice.skip


def test_a_kept_answer_and_an_operators_choice_are_used_as_they_are() -> None:
    assert choose_perf_capability("auto", "cached\nSYS_ADMIN\n").capability == "SYS_ADMIN"
    assert choose_perf_capability("auto", "cached\nPERFMON\n").keep is False  # already kept
    assert choose_perf_capability("SYS_ADMIN", "").capability == "SYS_ADMIN"
    with pytest.raises(ProbePlanError, match="capture_perf_capability='ALL': auto, PERFMON or SYS_ADMIN"):
        choose_perf_capability("ALL", "")


def _plan_json() -> dict[str, object]:
    served = "17825792\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n"
    plan = plan_from_profile(load_profile("cpu-tiny"), "localhost", {"hostname": "localhost", "served_files": served})
    return plan.model_dump(mode="json")


def test_a_skipped_perf_gets_no_capability_and_the_bundle_is_told_why() -> None:
    settings = {"out": "/o", "seconds": 5, "probe": "perf", "perf_capability": "auto", "perf_check": "checked 124\n"}
    got = playbooks.capture_argv(_plan_json(), settings)
    argv = got["argv"]
    assert "PERFMON" not in argv and "SYS_ADMIN" not in argv
    assert argv[argv.index("--perf-skip-note") + 1] == got["perf_skip"]
    assert got["perf_skip"].startswith("no perf capability: a container with --cap-add PERFMON did not start")
    assert got["perf_keep"] == ""


def test_a_refused_perfmon_runs_perf_with_sys_admin_and_is_kept() -> None:
    check = f"checked 125\n{DAEMON_REFUSAL}\n"
    got = playbooks.capture_argv(
        _plan_json(), {"out": "/o", "seconds": 5, "probe": "perf", "perf_capability": "auto", "perf_check": check}
    )
    argv = got["argv"]
    assert argv[argv.index("SYS_ADMIN") - 1] == "--cap-add"
    assert "--perf-skip-note" not in argv and got["perf_skip"] == ""
    assert got["perf_keep"] == "SYS_ADMIN"


def test_a_capture_without_perf_neither_keeps_nor_skips() -> None:
    got = playbooks.capture_argv(
        _plan_json(), {"out": "/o", "seconds": 5, "probe": "stacks", "perf_capability": "auto", "perf_check": ""}
    )
    assert (got["perf_keep"], got["perf_skip"]) == ("", "")
    assert "--perf-skip-note" not in got["argv"]
