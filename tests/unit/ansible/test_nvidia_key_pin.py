"""NVIDIA's repository key is trusted only where gpg reads the pinned fingerprint in it (issue 46 item 5): the
nvidia_toolkit role's fetch and check run here for real (ansible-playbook, gpg), against keys made for the test
and served from a file:// URL; the apt tasks around them are not run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.ansible_run import run_playbook

ROLE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "nvidia_toolkit"
CHECK = (
    "NVIDIA toolkit | Fetch the repository's signing key, not yet trusted",
    "NVIDIA toolkit | Trust the key only where gpg reads the pinned fingerprint",
    "NVIDIA toolkit | Stop where the key is not the pinned one",
)


def _check_tasks() -> list[dict[str, Any]]:
    block = yaml.safe_load((ROLE / "tasks/main.yml").read_text())[0]["block"]
    return [t for t in block if t.get("name") in CHECK]


def _key(tmp_path: Path, name: str) -> tuple[Path, str]:
    """An armored public key made for the test, and its fingerprint."""
    home = tmp_path / f"gpg-{name}"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    try:
        subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.org>", "ed25519",
                        "sign", "never"], check=True, capture_output=True)  # fmt: skip
        out = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
        fpr = next(ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:"))
        path = tmp_path / f"{name}.asc"
        path.write_bytes(subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout)
    finally:
        # Making the key started a gpg-agent for this home, which outlives gpg: the test leaves nothing running.
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, timeout=30)
    return path, fpr


def _run(tmp_path: Path, key: Path, pinned: str) -> subprocess.CompletedProcess[str]:
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "vars": {
            "nvidia_toolkit_key_url": f"file://{key}",
            "nvidia_toolkit_keyring": str(tmp_path / "keyring.asc"),
            "nvidia_toolkit_key_fingerprint": pinned,
        },
        "tasks": _check_tasks(),
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    return run_playbook(tmp_path / "play.yml", {**os.environ, "ANSIBLE_NOCOLOR": "1"})


def test_only_the_key_with_the_pinned_fingerprint_is_trusted(tmp_path: Path) -> None:
    assert len(_check_tasks()) == len(CHECK)
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert defaults["nvidia_toolkit_key_fingerprint"] == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    good, good_fpr = _key(tmp_path, "nvidia")
    other, other_fpr = _key(tmp_path, "mallory")
    keyring = tmp_path / "keyring.asc"
    # Another key at the URL: refused in one line naming both fingerprints, and nothing trusted.
    r = _run(tmp_path, other, good_fpr)
    assert r.returncode != 0
    said = " ".join((r.stdout + r.stderr).split())
    assert f"has the fingerprint {other_fpr}, not the pinned {good_fpr} (nvidia_toolkit_key_fingerprint)" in said
    assert not keyring.exists() and not Path(f"{keyring}.fetched").exists()
    # Both keys in one file: not the one key pinned either.
    both = tmp_path / "both.asc"
    both.write_bytes(good.read_bytes() + other.read_bytes())
    r = _run(tmp_path, both, good_fpr)
    assert r.returncode != 0 and not keyring.exists()
    # The pinned key: trusted, then found the same.
    r = _run(tmp_path, good, good_fpr.lower())
    assert r.returncode == 0, r.stdout[-2000:]
    assert keyring.read_bytes() == good.read_bytes() and oct(keyring.stat().st_mode & 0o777) == "0o644"
    r = _run(tmp_path, good, good_fpr)
    assert r.returncode == 0 and "changed=0" in r.stdout
