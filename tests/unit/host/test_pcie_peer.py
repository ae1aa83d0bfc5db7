"""The GPUs' peer readings: the host-side reader (ansible/module_utils/refdeploy_pcie_peer.py) over the GPU test
hosts' replayed trees and stand-ins, the parsers on those outputs and on copies of real ones, and the judgement
(serving/host/pcie_peer.py) as the plan and the manifest carry it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from serving.host import pcie_peer
from serving.host.gpu_facts import QUERY_GPU_FIELDS, normalise_bus_id, parse_query_gpu
from serving.plan.describe import describe
from tests.helpers.gpu_hosts import FIX, gpu_serving_plan

REPO = Path(__file__).parents[3]


def _reader() -> ModuleType:
    path = REPO / "ansible" / "module_utils" / "refdeploy_pcie_peer.py"
    spec = importlib.util.spec_from_file_location("refdeploy_pcie_peer_t", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_peer_readings(fixture: str, replay_dir: Path | None = None) -> dict[str, str]:
    """What the plan's host read gives on a test host: the reader over the fixture's sys/ tree, its tools the
    stand-ins of tests/replay serving the fixture's recordings."""
    d = replay_dir or FIX / fixture
    env = {**os.environ, "REFDEPLOY_REPLAY_DIR": str(d)}

    def run(argv: list[str]) -> str:
        cp = subprocess.run([str(REPO / "tests/replay" / argv[0]), *argv[1:]], capture_output=True, text=True,
                            env=env, check=False, timeout=30)  # fmt: skip
        return cp.stdout

    mod = _reader()
    query = (FIX / fixture / "nvidia-smi-query-gpu.csv").read_text()
    return dict(mod.peer_readings(mod.bus_ids_of(query, QUERY_GPU_FIELDS), run, str(d / "sys")))


def _bdfs(fixture: str) -> dict[int, str]:
    return {g.index: g.pci_bus_id for g in parse_query_gpu((FIX / fixture / "nvidia-smi-query-gpu.csv").read_text())}


def test_the_reader_follows_each_gpu_to_its_root_port_and_reads_its_group() -> None:
    got = host_peer_readings("rtx3090-3gpu")
    assert got["pci_paths"].splitlines() == [
        "0000:01:00.0\t/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0",
        "0000:21:00.0\t/sys/devices/pci0000:00/0000:00:03.1/0000:21:00.0",
        "0000:4b:00.0\t/sys/devices/pci0000:40/0000:40:01.1/0000:4b:00.0",
    ]
    assert got["acs"].count("ACSCtl:") == 3 and got["acs"].startswith("0000:00:01.1 PCI bridge")
    assert "/sys/kernel/iommu_groups/27/devices\t0000:01:00.0 0000:01:00.1" in got["iommu"].splitlines()
    assert got["p2p_read"].splitlines()[1] == " GPU0\tX\tGNS\tGNS\t"
    assert _reader().sysfs_bdf("00000000:4B:00.0") == normalise_bus_id("00000000:4B:00.0") == "0000:4b:00.0"


def test_p2p_reads_the_tools_tabs_and_a_copy_in_spaces_and_refuses_an_unknown_code() -> None:
    matrix = pcie_peer.parse_p2p((FIX / "rtx3090-3gpu" / "nvidia-smi-topo-p2p-r.txt").read_text())
    assert matrix == {(a, b): "GNS" for a in range(3) for b in range(3) if a != b}
    # As tinygrad/open-gpu-kernel-modules#23 quotes its 8x RTX 4090 (`topo -p2p rw`), tabs turned into spaces.
    spaced = "        GPU0    GPU1\n GPU0   X       CNS\n GPU1   CNS     X\n"
    assert pcie_peer.parse_p2p(spaced) == {(0, 1): "CNS", (1, 0): "CNS"}
    with pytest.raises(pcie_peer.PeerReadingError, match=r"row GPU1, column GPU0 reads 'ZZ'.*legend"):
        pcie_peer.parse_p2p(" \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tZZ\tX\t\n")


def test_acs_reads_the_control_bits_of_each_block_and_not_the_aer_lines() -> None:
    text = (
        "0000:00:02.0 PCI bridge: Example switch port (prog-if 00 [Normal decode])\n"
        "\tCapabilities: [100 v1] Advanced Error Reporting\n"
        "\t\tUESta:\tDLP- SDES- TLP- FCP- CmpltTO- CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- UnsupReq- ACSViol-\n"
        "\tCapabilities: [148 v1] Access Control Services\n"
        "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
        # The control line as NVIDIA/nccl#629 quotes it from a host whose collectives failed.
        "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n\n"
        "0000:00:03.0 PCI bridge: Example root port without ACS\n\tCapabilities: [40] Power Management version 3\n"
    )
    got = pcie_peer.parse_acs(text)
    assert got["0000:00:02.0"].redirects == ["ReqRedir", "CmpltRedir"]
    assert got["0000:00:02.0"].acs_cap == dict.fromkeys(pcie_peer.ACS_BITS[:5], True) | {
        "EgressCtrl": False, "DirectTrans": False}  # fmt: skip
    assert got["0000:00:03.0"].acs_ctl is None and got["0000:00:03.0"].redirects == []
    with pytest.raises(pcie_peer.PeerReadingError, match="without -D"):
        pcie_peer.parse_acs("00:02.0 PCI bridge: x\n")


def test_talking_pairs_are_each_tp_group_and_each_rank_with_the_next_stage() -> None:
    assert pcie_peer.talking_pairs([4, 5, 6, 7], tp=2, pp=2) == [
        (4, 5, "TP group 0"), (6, 7, "TP group 1"), (4, 6, "PP stages 0-1"), (5, 7, "PP stages 0-1"),
    ]  # fmt: skip


def test_no_p2p_on_the_3090_host_is_a_note_and_its_acs_redirect_no_warning() -> None:
    section = pcie_peer.peer_section(host_peer_readings("rtx3090-3gpu"), _bdfs("rtx3090-3gpu"), [0, 1, 2], 1, 3, "h")
    assert section is not None and section["warnings"] == []
    assert [t["gpus"] for t in section["talking"]] == ["0-1", "1-2"]
    assert section["notes"] == [
        "no peer-to-peer access between GPUs 0-1 (PP stages 0-1), 1-2 (PP stages 1-2) on h (nvidia-smi topo -p2p r: "
        "GNS, GPU not supported): NCCL moves their data through host memory, slower than P2P but no hang; the smoke "
        "test's collectives check that it works before the deploy goes on"
    ]
    assert section["iommu"]["mode"] == "identity" and section["iommu"]["gpus"]["2"]["group"] == 12
    assert section["acs"]["0000:00:03.1"]["redirects"] == ["ReqRedir", "CmpltRedir"]


def test_acs_redirect_above_gpus_whose_p2p_reads_ok_is_one_warning_naming_each_bridge(tmp_path: Path) -> None:
    readings = host_peer_readings("rtxpro6000-8gpu")
    section = pcie_peer.peer_section(readings, _bdfs("rtxpro6000-8gpu"), list(range(8)), 8, 1, "h")
    assert section is not None and section["notes"] == [] and len(section["warnings"]) == 1
    line = section["warnings"][0]
    assert line.startswith("ACS redirects peer traffic to the root complex at 0000:15:01.0 (ReqRedir+ CmpltRedir+, "
                           "above GPU 0), 0000:26:01.0")  # fmt: skip
    assert "the IOMMU DMA-FQ" in line and "28 of the plan's 28 GPU pairs" in line and "ECAP_ACS+0x6.w=0000" in line
    # The same host with ACS cleared on its root ports (setpci ... =0000): nothing to say.
    cleared = readings["acs"].replace("ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+",
                                      "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-")  # fmt: skip
    quiet = pcie_peer.peer_section({**readings, "acs": cleared}, _bdfs("rtxpro6000-8gpu"), list(range(8)), 8, 1, "h")
    assert quiet is not None and quiet["warnings"] == [] and quiet["acs"]["0000:15:01.0"]["redirects"] == []


def test_what_was_not_read_is_said_and_an_old_host_read_has_no_section() -> None:
    readings = {**host_peer_readings("rtx3090-3gpu"), "p2p_read": "", "missing": "lspci\n"}
    section = pcie_peer.peer_section(readings, _bdfs("rtx3090-3gpu"), [0, 1, 2], 1, 3, "h")
    assert section is not None and section["p2p_read"] is None
    assert section["notes"] == [
        "nvidia-smi topo -p2p r printed nothing on h: the GPUs' peer access was not read",
        "lspci not found on h: the ACS of the GPUs' bridges was not read; install pciutils",
    ]
    bad = {**readings, "p2p_read": "garbage\n", "missing": ""}
    said = pcie_peer.peer_section(bad, _bdfs("rtx3090-3gpu"), [0, 1, 2], 1, 3, "h")
    assert said is not None and said["notes"][0].startswith("nvidia-smi topo -p2p r: expected a header of GPU0")
    assert pcie_peer.peer_section({"query_gpu": ""}, {}, [0], 1, 1, "h") is None


def test_the_plan_carries_the_section_and_make_plan_prints_its_warning() -> None:
    plan = gpu_serving_plan("rtxpro6000-tp8", **host_peer_readings("rtxpro6000-8gpu"))
    assert plan.gpu is not None and plan.gpu.peer is not None and plan.ok
    assert plan.gpu.peer["p2p_read"]["0-7"] == "OK"
    assert any(line.startswith("  warning: ACS redirects peer traffic") for line in describe(plan))
    assert gpu_serving_plan("rtxpro6000-tp8").gpu.peer is None  # type: ignore[union-attr]
