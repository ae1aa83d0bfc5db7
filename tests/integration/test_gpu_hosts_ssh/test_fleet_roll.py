"""The two SSH test hosts as one group (`fleet`, the 3090 host first): a roll that succeeds, one batch at a time;
then a roll whose second host fails its checks (its data drive misses the I/O thresholds it is given here)
stops there, with the first host serving its new container and the second still serving the one it had; then
`make verify` over the group prints its table. Both hosts are undeployed after, as the other tests expect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import REPO, inspect
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import _container, _flat, make

pytestmark = pytest.mark.integration

CANARY, SECOND = "rdtest-gpu3090", "rdtest-gpupro"


def _running_id(host: str) -> str:
    c = inspect(_container(host))
    assert c is not None and c["State"]["Status"] == "running", host
    return str(c["Id"])


def test_a_group_rolls_a_batch_at_a_time_and_stops_at_its_first_failure(hosts: tuple[Path, Path]) -> None:
    inv, _ = hosts
    slow = inv / "host_vars" / f"{SECOND}.yml"
    try:
        first = make("deploy", f"INVENTORY={inv}", "HOST=fleet")
        out = _flat(first.output)
        assert first.rc == 0, out[-5000:]
        assert "roll of fleet: all 2 hosts deployed and verified, one batch at a time" in out
        assert f"done (serving the new deploy): {CANARY}, {SECOND}" in out
        # Two batches: the play starts once per batch, the canary's recap line before the second's tasks.
        assert first.output.count("PLAY [Deploy the vLLM serving stack]") == 2
        assert first.output.index(f"ok: [{CANARY}]") < first.output.index(f"ok: [{SECOND}]")
        before = {h: _running_id(h) for h in (CANARY, SECOND)}

        # The second host now fails its checks before any change; every host is asked to restart its container.
        slow.parent.mkdir(exist_ok=True)
        slow.write_text(yaml.safe_dump({"probes_io_thresholds": {1: {"min_iops": 100_000_000}}}))
        second = make("deploy", f"INVENTORY={inv}", "HOST=fleet", "ANSIBLE_ARGS=-e serve_force_replace=true")
        out = _flat(second.output)
        assert second.rc != 0, out[-5000:]
        assert "roll of fleet STOPPED at the first failure: 1 done, 1 failed, 0 untouched" in out, out[-3000:]
        assert f"done (serving the new deploy): {CANARY}" in out
        assert re.search(rf"failed: {SECOND}: .*misses the I/O thresholds", out), out[-3000:]
        assert _running_id(CANARY) != before[CANARY]  # replaced: the canary serves its new container
        assert _running_id(SECOND) == before[SECOND]  # untouched by the failed deploy: still serving

        # make verify over the group, against the canary's newest manifest: a table of both hosts.
        ref = sorted((REPO / "runs" / CANARY).glob("*/manifest.json"))[-1]
        assert json.loads(ref.read_text())["container"]["id"] == _running_id(CANARY)
        verify = make("verify", f"INVENTORY={inv}", "HOST=fleet", f"REF={ref}")
        lines = verify.output.splitlines()
        assert verify.rc != 0  # the other class's host differs from the canary's reference
        head = lines.index("verify of fleet: hosts by must-match differences from the reference")
        rows = [ln.split() for ln in lines[head + 2 : head + 4]]
        # The other class's host: the canary's profile cannot even be planned there, and the table says why.
        assert [(r[0], r[1]) for r in rows] == [(SECOND, "NOT"), (CANARY, "matches")], lines[head : head + 4]
        assert f"the reference's profile rtx3090-pp3 cannot be planned on {SECOND}" in lines[head + 2]
        assert rows[1][2] == "0"
    finally:
        slow.unlink(missing_ok=True)
        gone = make("undeploy", f"INVENTORY={inv}", "HOST=fleet")
        assert gone.rc == 0, gone.output[-3000:]
