"""The bench manifest (manifest.json, serving/bench/protocol.py plan_bench) is redacted whole, like every artifact."""

from __future__ import annotations

import json

from serving.bench import protocol as bench
from serving.config.profile import load_profile
from serving.config.redact import REDACTED
from serving.plan.plan import Plan, plan_from_profile
from tests.helpers.bench_dirs import SMOKE

TOKEN = "hf_planted-T0ken-31"
PROXY_PASSWORD = "s3cretpass-31"


def _secret_plan() -> Plan:
    profile = load_profile("cpu-tiny")
    env = {**profile.env, "hf_token": TOKEN, "http_proxy": f"http://user:{PROXY_PASSWORD}@proxy.invalid:3128"}
    plan = plan_from_profile(profile.model_copy(update={"env": env}), "localhost", {"hostname": "localhost"})
    assert plan.launch is not None
    # An argv a profile can no longer carry (extra_args refuses it), as a plan written before that rule had it.
    spec = {**plan.launch.spec, "command": [*plan.launch.spec["command"], "--hf-token", TOKEN]}
    return plan.model_copy(update={"launch": plan.launch.model_copy(update={"spec": spec})})


def test_the_bench_manifest_holds_no_token_no_url_credential_and_no_secret_flags_value() -> None:
    manifest = bench.plan_bench(SMOKE, _secret_plan(), "/o", "0-1", "0-1")["manifest"]
    text = json.dumps(manifest)
    assert TOKEN not in text and PROXY_PASSWORD not in text
    assert manifest["profile"]["env"]["hf_token"] == REDACTED
    assert manifest["profile"]["env"]["http_proxy"] == f"http://{REDACTED}@proxy.invalid:3128"
    assert manifest["server"]["argv"][-2:] == ["--hf-token", REDACTED]
    # What compare reads as conditions is still there.
    assert manifest["server"]["argv"][:2] == ["vllm", "serve"] and manifest["workload"]["name"] == SMOKE.name
