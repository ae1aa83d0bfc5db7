"""A workload file written for one test, and the plan of a shipped profile on localhost that the bench plans against."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from serving.config.profile import load_profile
from serving.plan.plan import Plan, plan_from_profile


def serving_plan(profile: str = "cpu-tiny") -> Plan:
    return plan_from_profile(load_profile(profile), "localhost", {"hostname": "localhost", "served_files": ""})


def write_workload(tmp_path: Path, **fields: Any) -> Path:
    base: dict[str, Any] = {"schema_version": 1, "name": "t", "num_prompts": 8, "concurrency": [1]}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({**base, **fields}))
    return path
