"""Secrets out of artifacts: the one redaction every artifact the product writes goes through.

The API key never reaches an artifact at all: it stays in a root-only file on the managed host, which the
serving container and the bench client read at start (serving/plan/render.py `with_api_key`). Anything else that
looks like a secret, such as an `HF_TOKEN` in a profile's `env`, has to reach Docker as it is, so it is
redacted where it is written down instead: plans (`make plan`), rendered specs, manifests, raw readings (the
full `docker inspect`) and bench manifests.

What looks like a secret: an environment variable whose name has KEY, TOKEN, SECRET, PASSW(OR)D, CREDENTIAL
or AUTH in it, as a mapping entry whose key is written like an environment variable (upper case), or as a
`NAME=value` string (Docker's Config.Env); and the value after `--api-key` in an argv.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
# Where the container and the bench client find the key (mounted read-only from refdeploy_api_key_file).
API_KEY_MOUNT = "/run/refdeploy/api-key"

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWO?R?D|CREDENTIAL|AUTH", re.I)
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ENV_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_ARGV_SECRETS = ("--api-key", "--hf-token")


def is_secret_name(name: str) -> bool:
    """An environment variable name that says it holds a secret (a *_FILE or *_PATH names where one is)."""
    return bool(_SECRET_NAME.search(name)) and not name.upper().endswith(("_FILE", "_PATH", "_DIR"))


def _redact_list(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = False
    for item in items:
        if hide_next and isinstance(item, str):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if isinstance(item, str):
            m = _ENV_ITEM.match(item)
            if m and is_secret_name(m.group(1)) and m.group(2):
                out.append(f"{m.group(1)}={REDACTED}")
                continue
            flag, eq, _value = item.partition("=")
            if flag in _ARGV_SECRETS:
                if eq:
                    out.append(f"{flag}={REDACTED}")
                    continue
                hide_next = True
            out.append(item)
        else:
            out.append(redact(item))
    return out


def redact(doc: Any) -> Any:
    """A copy of a JSON-like document with every secret-looking value replaced by REDACTED."""
    if isinstance(doc, dict):
        return {
            k: (
                REDACTED
                if isinstance(k, str) and _ENV_NAME.match(k) and is_secret_name(k) and isinstance(v, str) and v
                else redact(v)
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return _redact_list(doc)
    if isinstance(doc, tuple):
        return tuple(_redact_list(list(doc)))
    return doc


def secret_env_names(env: dict[str, str]) -> list[str]:
    """The names in a container's env whose values redact() hides (the plan lists them, never their values)."""
    return sorted(k for k, v in env.items() if is_secret_name(k) and v)
