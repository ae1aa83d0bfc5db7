"""The Hugging Face token's file on the managed host (the inventory's refdeploy_hf_token_file), checked before any
change as the API key's is (serving/plan/frontdoor.py api_failures): root's, readable by root only, not empty. The
serve role copies it for the runtime image's user (ansible/roles/serve/tasks/hf_token.yml) and the container reads
the copy by HF_TOKEN_PATH (serving/plan/render.py with_hf_token): the token is in no spec, plan or environment."""

from __future__ import annotations

from serving.config.profile import check_path
from serving.errors import InputError


def hf_token_path(value: str) -> str | None:
    """The inventory's refdeploy_hf_token_file as the plan takes it: None for "" (no token), else an absolute path."""
    if not value:
        return None
    try:
        return check_path(value)
    except ValueError as e:
        raise InputError(f"refdeploy_hf_token_file: {e}") from None


def hf_token_failures(token_file: str | None, token_stat: str | None) -> list[str]:
    """Why the token file cannot be used: missing, not a regular file, not root's alone, or empty. `token_stat` is
    the host's `stat -c '%u %a %s %F'` of it ("missing" when it is not there); [] where no file is set."""
    if token_file is None:
        return []
    what = f"the Hugging Face token file {token_file} (refdeploy_hf_token_file)"
    fix = f"install -m 0600 -o root -g root /dev/stdin {token_file} (the token on stdin)"
    parts = (token_stat or "missing").strip().split(maxsplit=3)
    if parts[0] == "missing" or len(parts) < 4:
        return [f"{what} is not on the host: {fix}"]
    uid, mode, size, kind = parts
    if kind not in ("regular file", "regular empty file"):
        return [f"{what} is a {kind}, not a regular file: {fix}"]
    if uid != "0" or int(mode, 8) & 0o077:
        return [f"{what} must be root's and readable by root only (it is uid {uid}, mode {mode}): "
                f"chown root:root {token_file}; chmod 0600 {token_file}"]  # fmt: skip
    if int(size) == 0:
        return [f"{what} is empty: {fix}"]
    return []
