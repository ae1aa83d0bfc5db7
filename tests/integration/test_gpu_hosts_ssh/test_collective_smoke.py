"""The smoke test's collectives on the 3090 host (issue 45): the plan's PP=3 ranks run for real at the stand-in's
seam (gloo over three CPU processes in the CPU image, the per-GPU part replayed), a deploy passes them and says
what they measured, and a replacement whose collectives fail (a rank that never joins, a bound exceeded) stops
with one line in gloo's own words, the serving container running as before and no smoke container left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import inspect
from tests.integration.conftest import make as make_here
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import STAND_IN, _container, _flat, _host_files, make

pytestmark = pytest.mark.integration
ENGINE_STARTS = 1
HOST = "rdtest-gpu3090"

# (case, the stand-in file's gpu_smoke.collectives, the words the deploy must stop with)
FAULTS = [
    (
        "absent-rank",
        {"absent_rank": 1, "bound_s": 20},
        "the collectives of TP=1 x PP=3 (gloo) failed: rank 1 was never started (an induced fault: --absent-rank); "
        "rank(s) 0, 2: ",
    ),
    (
        "bound",
        {"bound_s": 1},
        "the collectives of TP=1 x PP=3 (gloo) failed: not finished within the bound of 1 s: rank(s) 0, 1, 2 killed",
    ),
]


def test_the_collectives_pass_then_a_failing_group_stops_a_replacement_untouched(hosts: tuple[Path, Path]) -> None:
    inv = hosts[0]
    name = _container(HOST)
    first = make("deploy", f"INVENTORY={inv}", f"HOST={HOST}")
    out = _flat(first.output)
    assert first.rc == 0, first.output[-6000:]
    assert "a container of the CPU image (no GPUs) replays" in out and (
        "the collectives of TP=1 x PP=3 run for real with gloo over 3 CPU processes" in out
    ), out[-6000:]
    measured = out[out.index("GPU smoke test: collectives (gloo, TP=1 x PP=3): ") :].split('"')[0]
    print(measured)  # the seconds, for the record (pytest -s)
    assert "send 0->1 " in measured and "send 1->2 " in measured and "all 3 ranks in " in measured
    running = inspect(name)
    assert running is not None and running["State"]["Status"] == "running"
    try:
        for case, collectives, words in FAULTS:
            variant = Path(STAND_IN["REFDEPLOY_STAND_IN"]).with_name(f"stand-in-collectives-{case}.json")
            base = json.loads(Path(STAND_IN["REFDEPLOY_STAND_IN"]).read_text())
            variant.write_text(json.dumps({**base, "gpu_smoke": {"collectives": collectives}}))
            files = _host_files(HOST)
            r = make_here(
                "deploy", f"INVENTORY={inv}", f"HOST={HOST}", "ANSIBLE_ARGS=-e serve_force_replace=true",
                env={"REFDEPLOY_STAND_IN": str(variant)},
            )  # fmt: skip
            said = _flat(r.output)
            assert r.rc != 0, said[-4000:]
            assert f"GPU smoke test on {HOST}: {words}" in said, (case, said[-4000:])
            assert f"The serving container was not touched: {name} on {HOST} runs as before" in said, said[-4000:]
            now = inspect(name)
            assert now is not None and now["Id"] == running["Id"] and now["State"]["Status"] == "running"
            assert inspect(f"{name}-gpu-smoke") is None
            assert _host_files(HOST) == files
    finally:
        gone = make("undeploy", f"INVENTORY={inv}", f"HOST={HOST}")
        assert gone.rc == 0, gone.output[-3000:]
