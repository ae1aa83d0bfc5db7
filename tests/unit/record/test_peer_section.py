"""The manifest keeps the plan's peer section (serving/host/pcie_peer.py), and make verify compares it: P2P, the ACS
bits, the IOMMU's mode and the talking pairs must match; where the bridges sit, group numbers and the lines are
informational."""

from __future__ import annotations

import copy

from serving.record.manifest import gpu_section
from serving.record.verify import INFORMATIONAL, MUST_MATCH, diff
from tests.helpers.gpu_hosts import gpu_serving_plan
from tests.unit.host.test_pcie_peer import host_peer_readings


def _gpu() -> dict:
    plan = gpu_serving_plan("rtxpro6000-tp8", **host_peer_readings("rtxpro6000-8gpu"))
    assert plan.gpu is not None
    return plan.model_dump(mode="json")["gpu"]


def test_the_manifest_keeps_the_section_and_verify_judges_its_fields() -> None:
    gpu = _gpu()
    reference = gpu_section(gpu, None)
    assert reference is not None and reference["peer"] == gpu["peer"] and reference["peer"]["p2p_read"]["3-4"] == "OK"
    now = copy.deepcopy(reference)
    now["peer"]["acs"]["0000:15:01.0"]["acs_ctl"]["ReqRedir"] = False  # ACS cleared on one root port
    now["peer"]["p2p_read"]["0-1"] = "CNS"  # a driver or BIOS change
    now["peer"]["paths"]["0"] = ["0000:16:01.0"]  # the bus renumbered
    now["peer"]["iommu"]["gpus"]["0"]["group"] = 36
    now["peer"]["warnings"] = []
    got = {d.path: d.kind for d in diff({"gpu": reference}, {"gpu": now})}
    assert got == {
        "gpu.peer.acs.0000:15:01.0.acs_ctl.ReqRedir": MUST_MATCH,
        "gpu.peer.p2p_read.0-1": MUST_MATCH,
        "gpu.peer.paths.0": INFORMATIONAL,
        "gpu.peer.iommu.gpus.0.group": INFORMATIONAL,
        "gpu.peer.warnings": INFORMATIONAL,
    }
    # A reference from before the section (manifest schema 3) differs only informationally.
    before = {k: v for k, v in reference.items() if k != "peer"}
    assert {d.path: d.kind for d in diff({"gpu": before}, {"gpu": reference}, True)} == {"gpu.peer": INFORMATIONAL}
    assert {d.path: d.kind for d in diff({"gpu": before}, {"gpu": reference})} == {"gpu.peer": MUST_MATCH}
