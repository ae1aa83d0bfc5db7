"""A capture told that perf has no capability (the capture role's check found none to give it) runs no perf and
records the part as skipped with that reason in the bundle, where every skipped part says why."""

from __future__ import annotations

import json
from pathlib import Path

from probes.capture import bundle as capture


def test_perf_without_a_capability_is_skipped_with_the_reason(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cmdline").write_bytes(b"/opt/vllm/bin/vllm\x00serve\x00/models/m\x00")
    why = "no perf capability: a container with --cap-add PERFMON did not start (exit 1: daemon down)"
    cfg = capture.CaptureConfig(out=tmp_path / "bundle", seconds=1.0, parts=("perf",), proc_root=proc,
                                perf_skip_note=why)  # fmt: skip
    result = capture.run_capture(cfg)
    assert result["parts"]["perf"] == {"status": "skipped", "reason": why, "files": []}
    assert not (tmp_path / "bundle" / "kernel").exists() or not any((tmp_path / "bundle" / "kernel").iterdir())
    index = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert index["parts"]["perf"]["reason"] == why
