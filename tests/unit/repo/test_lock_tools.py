"""`make lock` runs uv on the controller: uv is installed by its wheels' sha256 (lock-tools.txt, --require-hashes),
never by a version alone, so a wheel changed on the index fails the install instead of running (issue 46 item 5)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _lock_recipe() -> str:
    text = (REPO / "Makefile").read_text()
    m = re.search(r"^lock:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, "no lock target in the Makefile"
    return m.group(1)


def test_make_lock_installs_uv_only_by_its_hashes() -> None:
    installs = [ln for ln in _lock_recipe().replace("\\\n", " ").splitlines() if 'pip" install' in ln]
    assert len(installs) == 1, installs
    words = installs[0].split()
    assert "--require-hashes" in words and "--only-binary" in words, installs[0]
    assert words[words.index("-r") + 1] == "lock-tools.txt"
    assert not re.search(r"\buv==", installs[0]), "a version alone on the command line: it is installed unhashed"


def test_lock_tools_pins_uv_with_a_sha256_for_each_wheel() -> None:
    text = (REPO / "lock-tools.txt").read_text()
    body = re.sub(r"^#.*\n", "", text, flags=re.M).replace("\\\n", " ")
    reqs = [ln.split() for ln in body.splitlines() if ln.strip()]
    assert [r[0] for r in reqs] == ["uv==0.13.9"]
    hashes = reqs[0][1:]
    assert len(hashes) >= 10 and all(re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", h) for h in hashes), hashes
    assert len(set(hashes)) == len(hashes)
