"""The companion of tests/integration/test_secrets_leak.py: the same search over artifacts written the way the product
writes them finds nothing with redaction on, and finds every planted secret with redaction switched off. So the
integration test's clean result is redaction's doing, not a search that cannot see."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import serving.config.redact
from serving.bench import protocol as bench
from serving.bridge import playbooks
from serving.config.profile import load_profile
from serving.plan.plan import plan_from_profile
from tests.helpers.bench_dirs import SMOKE
from tests.helpers.secret_grep import found

PLANTED = {
    "the HF token": "hf_companion-T0ken-5e2b",
    "the lower-case hf_token": "hf_lower-T0ken-5e2b",
    "the index password": "s3cretpass-5e2b",
    # The forms issue 46 found leaking, as tests/integration/test_secrets_leak.py plants them.
    "api_key_1": "ak1-5e2b-a9",
    "password2": "pw2-5e2b-a9",
    "DB_PASS": "dbp-5e2b-a9",
    "passphrase": "pph-5e2b-a9",
    "cookie": "ck-5e2b-a9",
    "the bearer token in free text": "bt-5e2b-a9",
    "the token in a JSON string": "js-5e2b-a9",
    "the number in a JSON string": "271828182845904523",
}


def _write_artifacts(out: Path) -> list[Path]:
    """What `make plan` prints (plan.yml's refdeploy_redact), the spec serve renders to the host (refdeploy_redact),
    and a bench's manifest.json (serving/bench/protocol.py), from a profile with the secrets in its env."""
    profile = load_profile("cpu-tiny")
    env = {
        **profile.env,
        "HF_TOKEN": PLANTED["the HF token"],
        "hf_token": PLANTED["the lower-case hf_token"],
        "PIP_INDEX_URL": f"https://ci:pa/{PLANTED['the index password']}@pypi.invalid/simple",
        "api_key_1": PLANTED["api_key_1"],
        "password2": PLANTED["password2"],
        "DB_PASS": PLANTED["DB_PASS"],
        "passphrase": PLANTED["passphrase"],
        "cookie": f"session={PLANTED['cookie']}",
        "REFDEPLOY_NOTE": f"curl -H 'Authorization: Bearer {PLANTED['the bearer token in free text']}' http://x.invalid",
        "REFDEPLOY_CLIENT": json.dumps({"auth": {"token": PLANTED["the token in a JSON string"]},
                                        "client": {"api_key": int(PLANTED["the number in a JSON string"])}}),
    }  # fmt: skip
    plan = plan_from_profile(profile.model_copy(update={"env": env}), "localhost", {"hostname": "localhost"})
    assert plan.launch is not None
    docs: dict[str, Any] = {
        "plan.json": playbooks.redact(plan.model_dump(mode="json")),
        "refdeploy-vllm.json": playbooks.redact(plan.launch.spec),
        "bench/manifest.json": bench.plan_bench(SMOKE, plan, "/o", "0-1", "0-1")["manifest"],
    }
    for name, doc in docs.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(doc, indent=2))
    return [out / name for name in docs]


def test_with_redaction_the_search_finds_nothing(tmp_path: Path) -> None:
    _write_artifacts(tmp_path)
    assert found(PLANTED, [tmp_path]) == []


def test_with_redaction_switched_off_the_search_finds_every_secret_in_every_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = serving.config.redact.redact
    # Everywhere the name is bound: serving.config.redact itself and every module that imported it.
    for module in list(sys.modules.values()):
        if getattr(module, "redact", None) is original:
            monkeypatch.setattr(module, "redact", lambda doc: doc)
    files = _write_artifacts(tmp_path)
    hits = found(PLANTED, [tmp_path])
    assert hits == [f"{name} in {f}" for f in sorted(files) for name in PLANTED], hits
