"""Secrets out of artifacts: the one redaction every artifact the product writes goes through.

The API key never reaches an artifact at all: it stays in a root-only file on the managed host, which the
serving container and the bench client read at start (serving/plan/render.py `with_api_key`). Anything else that
looks like a secret, such as an `HF_TOKEN` in a profile's `env`, has to reach Docker as it is, so it is
redacted where it is written down instead: plans (`make plan`), rendered specs, manifests, raw readings (the
full `docker inspect`) and bench manifests.

What looks like a secret (is_secret_name, is_secret_flag):
- an environment variable name (upper case, as Docker's Config.Env and a profile's `env` write them) with KEY,
  TOKEN, SECRET, PASSW(OR)D, CREDENTIAL or AUTH anywhere in it: an environment is the operator's, and a value
  hidden by mistake costs nothing;
- any other name, in any case (`hf_token: x`, `hf_token=x`, `--hf-token x`), by its last word (split on `-`, `_`
  and `.`), the noun that says what the value is: key, token, secret, password, passwd, pwd, credential(s), auth...
  or a word ending in one (apikey, hftoken). The last word only, because the product's own fields and vLLM's
  tuning flags have these words in front of what is not a secret: `key_copy` (a path), `tokenizer`,
  `max_num_batched_tokens` and `--max-num-batched-tokens` (counts), `--long-prefill-token-threshold`. A one-word
  `key` is a generic identifier (a figure's key in a report), not a secret;
- in either, a name ending in FILE, PATH or DIR names where a secret is (`refdeploy_api_key_file`,
  `--ssl-keyfile`), not the secret, and is left as it is;
- vLLM 0.32's `--allow-credentials` is a CORS switch that takes no value, not a credential;
- the userinfo of a URL, anywhere in any string (`http_proxy=http://user:pass@proxy:3128` becomes
  `http://<redacted>@proxy:3128`): a proxy or a mirror carries its password there.
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
_WORD_SPLIT = re.compile(r"[-_.]+")
# The last word of a name that holds a secret, or its ending (apikey, hftoken, authtoken).
_SECRET_WORD = re.compile(r"(key|token|secret|password|passwd|pwd|credentials?)$|^auth")
_WHERE_WORDS = ("file", "path", "dir", "keyfile", "certfile")
# Names that match the rule and hold no secret: a generic identifier, vLLM's CORS switch, Docker's netns path.
_NOT_SECRET = ("key", "allow-credentials", "allow_credentials", "sandboxkey")
# vLLM parses its flags with argparse, which takes any unambiguous prefix of a flag: --api-k is --api-key.
_VLLM_SECRET_FLAGS = ("--api-key", "--hf-token")
# A URL's userinfo: scheme://user[:password]@
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def _words(name: str) -> list[str]:
    return [w for w in _WORD_SPLIT.split(name.lower()) if w]


def is_secret_name(name: str) -> bool:
    """A name (environment variable, mapping key) that says its value is a secret; see the module's rule."""
    words = _words(name)
    if not words or words[-1] in _WHERE_WORDS or name.lower() in _NOT_SECRET:
        return False
    if _ENV_NAME.match(name):
        return bool(_SECRET_NAME.search(name))
    return bool(_SECRET_WORD.search(words[-1]))


def is_secret_flag(arg: str) -> bool:
    """A command-line flag (`--hf-token`, `--api-key=...`, `--api-k`) whose value is a secret."""
    if not arg.startswith("-"):
        return False
    flag = arg.partition("=")[0].lower().replace("_", "-")
    if len(flag) > len("--a") and any(s.startswith(flag) for s in _VLLM_SECRET_FLAGS):
        return True
    return is_secret_name(flag.lstrip("-"))


def strip_url_credentials(text: str) -> str:
    """The text with the userinfo of every URL in it replaced by REDACTED."""
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def _redact_list(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = False
    for item in items:
        # The value after a secret flag; a flag next means the secret one was given none.
        if hide_next and isinstance(item, str) and not item.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if isinstance(item, str):
            m = _ENV_ITEM.match(item)
            if m and is_secret_name(m.group(1)) and m.group(2):
                out.append(f"{m.group(1)}={REDACTED}")
                continue
            if is_secret_flag(item):
                flag, eq, _value = item.partition("=")
                if eq:
                    out.append(f"{flag}={REDACTED}")
                    continue
                hide_next = True
                out.append(item)
                continue
        out.append(redact(item))
    return out


def redact(doc: Any) -> Any:
    """A copy of a JSON-like document with every secret-looking value replaced by REDACTED, and every URL's
    credentials stripped from the strings left."""
    if isinstance(doc, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v else redact(v))
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return _redact_list(doc)
    if isinstance(doc, tuple):
        return tuple(_redact_list(list(doc)))
    if isinstance(doc, str):
        return strip_url_credentials(doc)
    return doc


def secret_env_names(env: dict[str, str]) -> list[str]:
    """The names in a container's env whose values redact() hides or changes (a URL's credentials stripped): the
    plan lists them, never their values, and a task that hands the env to Docker hides its output when any is."""
    return sorted(k for k, v in env.items() if v and (is_secret_name(k) or strip_url_credentials(v) != v))
