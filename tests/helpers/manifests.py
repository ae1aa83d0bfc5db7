"""A manifest's raw readings as the manifest role collects them, from a recorded real container."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from serving.config.profile import load_profile
from serving.plan.images import PATCH_LABEL_PREFIX, Patch, plan_images
from serving.plan.plan import build_plan, verify_ranks
from serving.record.manifest import parse_sha256_list


def raw_readings(d: Path) -> dict[str, Any]:
    """Raw readings as the manifest role collects them, from a recorded real container, with its plan."""
    inside = json.loads((d / "inside-readings-cgroup-v1.json").read_text())
    applied = parse_sha256_list(inside["patches"])
    images = plan_images("vllm-cpu", "0.32.0")
    images = replace(images, patches=[Patch(n, h, n) for n, h in applied.items()])
    plan = build_plan(load_profile("cpu-tiny"), "localhost", images, {"hostname": "localhost", "served_files": ""})
    container = json.loads((d / "container-inspect.json").read_text())[0]
    # The fixture container ran the image of its day; the plan's tag is what a container of this plan shows, and
    # the labels (the spec's digest, the profile) are what the serve role starts it with.
    container["Config"]["Image"] = images.runtime_tag
    container["Config"]["Labels"] = {**container["Config"]["Labels"], **plan.launch.spec["labels"]}
    # Its HostConfig is that of a container of today's spec (recorded 2026-12-06, the README says how), as the
    # host's limits at every cgroup level are.
    container["HostConfig"] = json.loads((d / "container-hostconfig-2026-12-06.json").read_text())
    # What the spec starts since vLLM listens on its unix socket (issue 46), as a container of it showed it (recorded
    # 2026-12-06, the README says how): its argv, entrypoint, environment and health check.
    config = json.loads((d / "container-config-2026-12-06-socket.json").read_text())
    container["Config"].update({k: config[k] for k in ("Cmd", "Entrypoint", "Env", "Healthcheck")})
    image = {
        "Id": container["Image"],
        "Config": {"Labels": {PATCH_LABEL_PREFIX + n: f"sha256:{h}" for n, h in applied.items()}},
    }
    return {
        "host": "localhost",
        "run_id": "20261129T085000Z",
        "plan": plan.model_dump(mode="json"),
        "effective": {"vllm_version": "0.32.0", "server_started_log_ts": "11-29 08:51:03"},
        "image_inspect": image,
        "container_inspect": container,
        "inside": inside,
        "placement": verify_ranks(plan, inside["workers"]),
        "host_limits": json.loads((d / "host-limits-cgroup-v1.json").read_text()),
    }
