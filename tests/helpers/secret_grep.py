"""Where planted secrets turn up: every file under some directories (gzip'd files read through), and named texts
(a command's output, a container's log). The integration test of a keyed deploy (tests/integration/
test_secrets_leak.py) and its unit companion, which switches redaction off to show the search finds what leaks
(tests/unit/config/test_secrets_grep.py), search the same way."""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping
from pathlib import Path


def _content(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError):
            return data
    return data


def found(
    secrets: Mapping[str, str],
    roots: Iterable[Path] = (),
    texts: Mapping[str, str] | None = None,
    skip: Iterable[Path] = (),
) -> list[str]:
    """'<secret's name> in <where>' for each secret found in a regular file below `roots` (not below `skip`) or in
    one of `texts` (name: text); never the secret itself, so that a failing test does not print it either."""
    skipped = [p.resolve() for p in skip]
    hits: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if not path.is_file() or path.is_symlink():
                continue
            if any(path.resolve().is_relative_to(s) for s in skipped):
                continue
            try:
                data = _content(path)
            except OSError:
                continue
            hits += [f"{name} in {path}" for name, value in secrets.items() if value.encode() in data]
    for where, text in (texts or {}).items():
        hits += [f"{name} in {where}" for name, value in secrets.items() if value in text]
    return hits
