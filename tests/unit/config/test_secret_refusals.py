"""Secrets a profile must not carry, refused in one line that says where each goes and quotes no credential
(serving/config/profile.py), and the Hugging Face token as a file: HF_TOKEN_PATH to a read-only copy, never an
environment value, its file checked before any change (serving/plan/{plan,render,secret_files}.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from serving.config.profile import PROFILES_DIR, ProfileError, load_profile, parse_profile
from serving.config.redact import REDACTED
from serving.plan.plan import plan_from_profile

S = "S3cr3t-v4lue-46"


def _cpu_tiny() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROFILES_DIR / "cpu-tiny.yaml").read_text())
    return data


def _refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    line = str(err.value)
    assert "\n" not in line and S not in line, line
    return line


@pytest.mark.parametrize(
    ("args", "flag", "where"),
    [
        ([f"--api-key {S}"], "--api-key", "refdeploy_api_key_file"),
        ([f"--api-key={S}"], "--api-key", "refdeploy_api_key_file"),
        (["--hf-token", S], "--hf-token", "refdeploy_hf_token_file"),
        ([f"--hf_token {S}"], "--hf_token", "refdeploy_hf_token_file"),
        ([f"--ssl-keyfile-password={S}"], "--ssl-keyfile-password", "in the profile's env"),
        (["--s3-secret-access-key", S], "--s3-secret-access-key", "in the profile's env"),
    ],
)
def test_a_secret_flag_is_refused_in_any_spelling_saying_where_its_secret_goes(
    args: list[str], flag: str, where: str
) -> None:
    data = _cpu_tiny()
    data["vllm"]["extra_args"] = args
    line = _refusal(data)
    assert line.startswith(f"p.yaml: vllm.extra_args: {flag} takes a secret") and where in line, line


def test_a_flag_with_its_value_in_one_element_is_refused_and_a_value_with_blanks_passes() -> None:
    data = _cpu_tiny()
    data["vllm"]["extra_args"] = ["--max-model-len 512"]
    line = _refusal(data)
    assert "'--max-model-len 512' has a blank inside" in line and "['--max-model-len', '512']" in line, line
    data["vllm"]["extra_args"] = ["--override-generation-config", '{"temperature": 0.5}']
    assert parse_profile(data, "p.yaml").vllm.extra_args[1] == '{"temperature": 0.5}'


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "hf_token"])
def test_a_hugging_face_token_in_env_is_refused_for_the_token_file(name: str) -> None:
    data = _cpu_tiny()
    data["env"][name] = S
    line = _refusal(data)
    assert line.startswith(f"p.yaml: env: {name} cannot be set in a profile") and "refdeploy_hf_token_file" in line


def test_a_refusal_quotes_no_credential_in_the_validators_words_nor_in_what_was_given() -> None:
    data = _cpu_tiny()
    data["model"]["host_path"] = f"https://ops:pa/{S}@mirror.invalid/models"
    line = _refusal(data)
    assert line.count(f"https://{REDACTED}@mirror.invalid/models") == 2, line


def test_the_hf_token_reaches_the_container_as_a_read_only_file_never_an_environment_value() -> None:
    profile = load_profile("cpu-tiny")
    plan = plan_from_profile(profile, "localhost", {"hf_token_file": "0 600 38 regular file"},
                             hf_token_file="/etc/refdeploy/hf-token")  # fmt: skip
    assert plan.ok and plan.launch is not None and plan.bench is not None
    spec = plan.launch.spec
    assert spec["env"]["HF_TOKEN_PATH"] == "/run/refdeploy/hf-token/token"
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(spec["env"])
    assert "/var/lib/refdeploy/secrets/refdeploy-vllm.hf-token:/run/refdeploy/hf-token:ro" in spec["volumes"]
    # The bench client mounts the server's volumes for the tokenizer, not the token: it downloads nothing.
    assert not [v for v in plan.bench.volumes if "hf-token" in v]
    assert (plan.api.hf_token_file, plan.api.hf_token_copy) == (
        "/etc/refdeploy/hf-token", "/var/lib/refdeploy/secrets/refdeploy-vllm.hf-token")  # fmt: skip
    keyless = plan_from_profile(profile, "localhost", {})
    assert keyless.launch is not None and keyless.launch.spec_digest != plan.launch.spec_digest
    assert "HF_TOKEN_PATH" not in keyless.launch.spec["env"]


@pytest.mark.parametrize(
    ("stat", "said"),
    [
        ("missing", "is not on the host: install -m 0600"),
        ("0 644 38 regular file", "must be root's and readable by root only (it is uid 0, mode 644)"),
        ("1000 600 38 regular file", "(it is uid 1000, mode 600)"),
        ("0 600 0 regular empty file", "is empty"),
        ("0 700 4096 directory", "is a directory, not a regular file"),
    ],
)
def test_a_token_file_that_is_not_roots_alone_or_is_empty_stops_the_plan_in_one_line(stat: str, said: str) -> None:
    plan = plan_from_profile(load_profile("cpu-tiny"), "localhost", {"hf_token_file": stat},
                             hf_token_file="/etc/refdeploy/hf-token")  # fmt: skip
    assert not plan.ok
    [line] = [f for f in plan.failures if "refdeploy_hf_token_file" in f or "Hugging Face token file" in f]
    assert line.startswith("the Hugging Face token file /etc/refdeploy/hf-token") and said in line, line


def test_a_workloads_refusal_quotes_no_credential_in_the_validators_words() -> None:
    from serving.config.workload import WorkloadError, parse_workload

    data = yaml.safe_load((PROFILES_DIR.parent / "workloads/chat.yaml").read_text())
    data["slo"]["ttft"] = f"https://ops:pa/{S}@slo.invalid"
    with pytest.raises(WorkloadError) as err:
        parse_workload(data, "w.yaml")
    assert f"'https://{REDACTED}@slo.invalid' is not a duration" in str(err.value) and S not in str(err.value)
