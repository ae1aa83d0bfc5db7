"""Every form a secret was found to leak in (issue 46), redacted (serving/config/redact.py): names in any case and with
the words that were missing, values of any type, JSON inside a string, header lines and free text, a URL whose
password holds a `/`; and the GPU smoke test's command line, which leaves out what the plan redacts
(serving/plan/gpu_smoke.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.config.redact import REDACTED, is_secret_name, redact, redact_text
from serving.plan import gpu_smoke

S = "S3cr3t-v4lue-46"
GOLDEN = Path(__file__).resolve().parents[2] / "fixtures/gpu-hosts/rtx3090-3gpu/container-spec.golden.json"


@pytest.mark.parametrize(
    "name",
    ["api_key_1", "hf_token_b64", "password2", "DB_PASS", "db_pass", "PASSPHRASE", "passphrase", "bearer", "BEARER",
     "cookie", "Set-Cookie", "session_cookie", "credential", "AUTH", "x-auth", "authorization", "apiKey",
     "clientSecret", "dbpassword", "MY_PASSWD", "aws_access_key_id", "kv_cache_key"],
)  # fmt: skip
def test_a_secret_name_is_redacted_in_any_case_wherever_its_secret_word_is(name: str) -> None:
    assert is_secret_name(name)
    assert redact({name: S}) == {name: REDACTED}
    assert redact([f"{name}={S}"]) == [f"{name}={REDACTED}"]


@pytest.mark.parametrize(
    "name",
    ["key", "pwd", "PWD", "tokenizer", "max_num_batched_tokens", "long_prefill_token_threshold", "key_gid", "key_copy",
     "secret_env", "hf_token_path", "HF_TOKEN_PATH", "refdeploy_api_key_file", "SandboxKey", "allow_credentials",
     "bypass", "return_tokens_as_token_ids"],
)  # fmt: skip
def test_a_name_about_a_secret_or_with_none_in_it_is_kept(name: str) -> None:
    assert not is_secret_name(name)
    assert redact({name: "v"}) == {name: "v"}


def test_values_are_redacted_whatever_their_type_and_booleans_say_only_whether_there_is_one() -> None:
    doc = {"api_key": 314159265, "password": [S], "token": {"value": S}, "secret": 2.5, "hf_token": True, "pass": None}
    assert redact(doc) == {"api_key": REDACTED, "password": REDACTED, "token": REDACTED, "secret": REDACTED,
                           "hf_token": True, "pass": None}  # fmt: skip
    assert redact(["--api-key", 314159265]) == ["--api-key", REDACTED]


def test_a_json_document_in_a_string_is_redacted_inside_and_one_without_secrets_is_kept_as_it_was() -> None:
    text = json.dumps({"model": "m", "auth": {"token": S}, "headers": [f"Authorization: Bearer {S}"]})
    out = redact({"HF_OVERRIDES": text, "argv": ["--model-loader-extra-config", text]})
    assert S not in json.dumps(out)
    want = {"model": "m", "auth": REDACTED, "headers": [f"Authorization: {REDACTED}"]}
    assert json.loads(out["HF_OVERRIDES"]) == want
    plain = '{"level": 3,  "cudagraph_mode": "FULL"}'
    assert redact({"compilation_config": plain}) == {"compilation_config": plain}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (f"Authorization: Bearer {S}", f"Authorization: {REDACTED}"),
        (f'curl -H "Authorization: Bearer {S}" http://h/v1', f'curl -H "Authorization: {REDACTED}" http://h/v1'),
        (f"Cookie: session={S}; theme=dark", f"Cookie: {REDACTED}"),
        (f"export VLLM_API_KEY={S} && vllm serve", f"export VLLM_API_KEY={REDACTED} && vllm serve"),
        (f"vllm serve /m --api-key {S} --seed 0", f"vllm serve /m --api-key {REDACTED} --seed 0"),
        (f"vllm serve /m --enforce-eager --api-key={S}", f"vllm serve /m --enforce-eager --api-key={REDACTED}"),
        (f"env DB_PASS={S} PASSPHRASE={S} cmd", f"env DB_PASS={REDACTED} PASSPHRASE={REDACTED} cmd"),
        (f"passphrase: correct horse {S}", f"passphrase: {REDACTED}"),
        (f"note: password: {S}", f"note: password: {REDACTED}"),
        (f"-H 'bearer {S}'", f"-H 'bearer {REDACTED}'"),
        (f"{{'token': '{S}', 'n': 1}}", f"{{'token': '{REDACTED}', 'n': 1}}"),
        ("key: ttft_ms, max_num_batched_tokens=512 --seed 0", "key: ttft_ms, max_num_batched_tokens=512 --seed 0"),
    ],
)
def test_free_text_and_header_lines_hide_what_follows_a_secret_name_or_flag(text: str, want: str) -> None:
    assert redact_text(text) == want
    assert redact([text]) == [want]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (f"https://user:pa/{S}@host.invalid/simple", f"https://{REDACTED}@host.invalid/simple"),
        (f"https_proxy=http://u:{S}/x?y@proxy.invalid:3128", f"https_proxy=http://{REDACTED}@proxy.invalid:3128"),
        (f"git clone https://ci:{S}@git.invalid/r.git", f"git clone https://{REDACTED}@git.invalid/r.git"),
        # Not credentials: a port before a path with an @ in it, an @ in a path.
        ("http://host.invalid:8443/a@b", "http://host.invalid:8443/a@b"),
        ("https://host.invalid/pa@th", "https://host.invalid/pa@th"),
    ],
)
def test_a_urls_credentials_are_found_by_the_url_parser_a_slash_in_the_password_too(text: str, want: str) -> None:
    assert redact_text(text) == want


def test_a_flag_and_its_value_in_one_argument_are_redacted_together() -> None:
    assert redact(["vllm", "serve", f"--api-key {S}", f"--hf_token={S}"]) == [
        "vllm", "serve", f"--api-key {REDACTED}", f"--hf_token={REDACTED}"]  # fmt: skip


def test_the_gpu_smoke_tests_command_line_leaves_out_what_the_plan_redacts() -> None:
    spec = json.loads(GOLDEN.read_text())
    spec["env"] = {**spec["env"], "https_proxy": f"http://u:{S}@proxy.invalid:3128", "db_pass": S,
                   "NOTE": f"Authorization: Bearer {S}"}  # fmt: skip
    argv = gpu_smoke.smoke_argv(spec)
    assert not [a for a in argv if S in a]
    # The rest of the environment is the launch's: an allocator setting torch reads at CUDA's first call.
    given = [argv[i + 1].partition("=")[0] for i, a in enumerate(argv) if a == "--env"]
    assert given == sorted(set(spec["env"]) - {"https_proxy", "db_pass", "NOTE"}) and "PYTORCH_CUDA_ALLOC_CONF" in given
