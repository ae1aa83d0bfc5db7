"""Secrets out of artifacts (serving/config/redact.py) and the API's rules in the plan (serving/plan/plan.py)."""

from __future__ import annotations

import json

import pytest

from serving.config.profile import PROFILES_DIR, FrontDoor, load_profile
from serving.config.redact import REDACTED, redact
from serving.plan.frontdoor import api_failures
from serving.plan.plan import plan_from_profile
from serving.plan.render import render_container_spec

SECRET = "hf_s3cr3t-value"


def test_secret_looking_env_values_are_redacted_in_mappings_env_lists_and_argv() -> None:
    doc = {
        "env": {"HF_TOKEN": SECRET, "VLLM_CPU_KVCACHE_SPACE": "1", "AWS_SECRET_ACCESS_KEY": SECRET},
        "Config": {"Env": [f"HF_TOKEN={SECRET}", "PATH=/usr/bin", f"MY_PASSWORD={SECRET}"]},
        "command": ["vllm", "serve", "/m", "--api-key", SECRET, f"--api-key={SECRET}"],
        "nested": [{"OPENAI_API_KEY": SECRET}],
    }
    out = redact(doc)
    assert SECRET not in json.dumps(out)
    assert out["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert out["env"]["HF_TOKEN"] == REDACTED
    assert "PATH=/usr/bin" in out["Config"]["Env"] and f"HF_TOKEN={REDACTED}" in out["Config"]["Env"]
    assert out["command"][:4] == ["vllm", "serve", "/m", "--api-key"]
    # What it must not touch: paths to key files, lower-case manifest keys, labels.
    kept = {"refdeploy_api_key_file": "/etc/refdeploy/api-key", "API_KEY_FILE": "/etc/k", "key": "v"}
    assert redact(kept) == kept


def test_a_front_door_needs_a_key_and_the_key_file_is_roots_only() -> None:
    profile = load_profile("cpu-tiny")
    assert api_failures(profile, None, None) == []
    fronted = profile.model_copy(update={"front_door": FrontDoor(listen="0.0.0.0")})
    [line] = api_failures(fronted, None, None)
    assert "has a front door on 0.0.0.0:8443 but no API key" in line and "refdeploy_api_key_file" in line
    assert api_failures(fronted, "/etc/refdeploy/api-key", "0 600 65 regular file\n") == []
    # vLLM has no port, so the door may have any.
    same_port = profile.model_copy(update={"front_door": FrontDoor(listen="0.0.0.0", port=8000)})
    assert api_failures(same_port, "/etc/k", "0 600 65 regular file\n") == []
    assert "is not on the host" in api_failures(profile, "/etc/k", "missing")[0]
    [line] = api_failures(profile, "/etc/k", "0 644 65 regular file")
    assert "readable by root only (it is uid 0, mode 644)" in line
    assert "uid 1000" in api_failures(profile, "/etc/k", "1000 600 65 regular file")[0]
    assert "is empty" in api_failures(profile, "/etc/k", "0 600 0 regular empty file")[0]
    assert "is a directory" in api_failures(profile, "/etc/k", "0 700 4096 directory")[0]


def test_a_key_reaches_the_container_by_a_mounted_file_and_never_the_spec() -> None:
    plan = plan_from_profile(
        load_profile("cpu-tiny"), "localhost", {"api_key_file": "0 600 65 regular file"},
        api_key_file="/etc/refdeploy/api-key",
    )  # fmt: skip
    assert plan.ok and plan.launch is not None and plan.bench is not None
    spec = plan.launch.spec
    assert "/var/lib/refdeploy/secrets/refdeploy-vllm.api-key:/run/refdeploy/api-key:ro" in spec["volumes"]
    assert spec["entrypoint"][:2] == ["/bin/sh", "-c"] and "VLLM_API_KEY" in spec["entrypoint"][2]
    assert spec["command"][:2] == ["vllm", "serve"] and "VLLM_API_KEY" not in spec["env"]
    assert (
        plan.bench.api_key
        and "/var/lib/refdeploy/secrets/refdeploy-vllm.api-key:/run/refdeploy/api-key:ro" in plan.bench.volumes
    )
    assert plan.api.key_file == "/etc/refdeploy/api-key"
    # A key changes the container: the digest differs from the keyless plan's.
    keyless = plan_from_profile(load_profile("cpu-tiny"), "localhost", {})
    assert keyless.launch is not None and keyless.launch.spec_digest != plan.launch.spec_digest
    assert "VLLM_API_KEY" not in keyless.launch.spec["entrypoint"][2]


SHIPPED = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def test_the_shipped_profiles_are_found() -> None:
    # The parametrized test below runs once per file in serving/profiles/: an empty glob would run it never.
    assert {"cpu-tiny", "rtx3090-pp3", "rtxpro6000-tp8"} <= set(SHIPPED) and len(SHIPPED) >= 11, SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_serves_on_the_socket_only(name: str) -> None:
    spec = render_container_spec(load_profile(name), "img")
    assert spec["network_mode"] == "none" and "published_ports" not in spec and "--uds" in spec["command"]


def test_the_key_copy_is_readable_by_the_runtime_images_user() -> None:
    from pathlib import Path

    from serving.plan.render import RUNTIME_GID, RUNTIME_UID

    dockerfile = (Path(__file__).resolve().parents[3] / "images/vllm/Dockerfile").read_text()
    assert f"USER {RUNTIME_UID}:{RUNTIME_GID}" in dockerfile
