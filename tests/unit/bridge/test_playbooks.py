"""Settings the playbooks pass to the serving package are checked before anything runs (serving/bridge/playbooks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.plan.plan import plan_from_profile

PLAN = plan_from_profile(
    load_profile("cpu-tiny"), "localhost",
    {"served_files": "17825792\t/var/lib/refdeploy/models/tiny-llama/model.safetensors\n"},
).model_dump(mode="json")  # fmt: skip
IO = {"out": "/tmp/x", "runtime_s": 10}


def _depths(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--depth"]


@pytest.mark.parametrize(("given", "depths"), [("64", ["64"]), ("1,64", ["1", "64"]), ([1, 64], ["1", "64"]),
                                               (None, ["1", "64"]), (8, ["8"])])  # fmt: skip
def test_queue_depths_from_the_command_line_are_depths_not_digits(given: Any, depths: list[str]) -> None:
    out = playbooks.probe_io_argv(PLAN, {**IO, "depths": given})
    assert _depths(out["argv"]) == depths


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"depths": "sixty"}, "probe_io_depths: expected queue depths like [1, 64]"),
        ({"depths": "0"}, "probe_io_depths must be positive queue depths"),
        (
            {"thresholds": {64: {"min_iops": "fast"}}},
            "probe_io_thresholds.64.min_iops: expected a number of 0 or more",
        ),
        ({"thresholds": {1: {"max_ms": -3}}}, "probe_io_thresholds.1.max_ms: expected a number of 0 or more"),
    ],
)
def test_io_settings_that_cannot_be_used_are_one_line(settings: dict[str, Any], says: str) -> None:
    out = playbooks.probe_io_argv(PLAN, {**IO, **settings})
    assert says in out["error"] and "\n" not in out["error"]


@pytest.mark.parametrize("runs", ["0", 0, "-1", "two"])
def test_runs_below_one_are_refused_not_replaced_by_the_default(runs: Any) -> None:
    out = playbooks.bench_plan(PLAN, {"workload": "smoke", "runs": runs, "host_out": "/b", "host_cpus": "0-1"})
    assert out == {"error": f"RUNS={runs}: expected a whole number of measured runs, 1 or more"}
