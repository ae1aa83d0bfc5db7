"""make undeploy leaves no copy of the operator's API key on the host (issue 46 item 5), and keeps the self-signed
pair generated for the host, so that a redeploy serves the certificate whose fingerprint clients pinned.

The serve role's own tasks that write the key's copies (api_key.yml: the engine's copy and the one a replacement
sets aside; frontdoor.yml: the key map and the check's auth header) run here for real through ansible-playbook, into
a temporary directory laid out as the host's secrets directory; then undeploy.yml's removal task, for real. The
docker tasks around them are not run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from serving.plan.frontdoor import KEY_MIN_CHARS, front_dir, selfsigned_dir
from serving.plan.render import SECRETS_DIR, api_key_copy
from tests.helpers.ansible_run import run_playbook
from tests.unit.ansible.test_api_key_copy import _ROLE_VARS, SERVE, _tasks

UNDEPLOY = Path(__file__).resolve().parents[3] / "ansible" / "undeploy.yml"
NAME = "refdeploy-vllm"
KEY = "k3y-that-must-not-stay-0123456789abcdef"


def _undeploy_task() -> list[dict[str, Any]]:
    block = yaml.safe_load(UNDEPLOY.read_text())[0]["tasks"][1]["block"]
    found = [
        t for t in block if t.get("name") == "Undeploy | Remove every copy of the API key and the front door's files"
    ]
    assert len(found) == 1, [t.get("name") for t in block]
    return found


def _run(tmp_path: Path, tasks: list[dict[str, Any]], replace: bool) -> None:
    secrets = tmp_path / "secrets"
    copy = secrets / Path(api_key_copy(NAME)).name
    front = secrets / Path(front_dir(NAME)).name
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "vars": {
            **_ROLE_VARS,
            "refdeploy_plan": {
                "api": {"key_file": str(tmp_path / "api-key"), "key_copy": str(copy), "key_gid": os.getgid(),
                        "hf_token_copy": str(secrets / f"{NAME}.hf-token")},
                "profile": {"container": {"name": NAME}},
            },
            "refdeploy_host": {"paths": {str(copy): "file" if copy.is_file() else "missing"}},
            "_serve_replace": replace,
            "_serve_front": {"dir": str(front), "gid": os.getgid(), "key_min_chars": KEY_MIN_CHARS},
            "_serve_front_auth": f"{front}.auth-header",
        },
        "tasks": tasks,
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    cp = run_playbook(tmp_path / "play.yml", {**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]


def _holding_the_key(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and KEY in p.read_text())


def test_undeploy_removes_every_copy_of_the_key_and_keeps_the_generated_certificate(tmp_path: Path) -> None:
    # The layout the role names from the container's name: one secrets directory, as on the host.
    assert {Path(p).parent for p in (api_key_copy(NAME), front_dir(NAME), selfsigned_dir(NAME))} == {Path(SECRETS_DIR)}
    (tmp_path / "api-key").write_text(KEY + "\n")
    (tmp_path / "api-key").chmod(0o600)
    # A deploy with a key behind a front door, then a replacement not yet committed (the copy set aside).
    keymap = _tasks(SERVE / "tasks/frontdoor.yml", ("Serve | Write the front door's key map from the API key file",))
    (tmp_path / "secrets" / f"{NAME}-front").mkdir(mode=0o750, parents=True)
    _run(tmp_path, [*_tasks(SERVE / "tasks/api_key.yml"), *keymap], replace=False)
    _run(tmp_path, _tasks(SERVE / "tasks/api_key.yml"), replace=True)
    # The pair the front door serves, and the one generated for the host that it was copied from.
    front, kept = tmp_path / "secrets" / f"{NAME}-front", tmp_path / "secrets" / f"{NAME}-front-selfsigned"
    kept.mkdir(mode=0o700)
    for d in (front, kept):
        (d / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
        (d / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    # The Hugging Face token's copy, as hf_token.yml leaves it (a directory holding the token file).
    (tmp_path / "secrets" / f"{NAME}.hf-token").mkdir(mode=0o750)
    (tmp_path / "secrets" / f"{NAME}.hf-token" / "token").write_text(KEY)
    held = _holding_the_key(tmp_path / "secrets")
    assert held == [f"{NAME}-front.auth-header", f"{NAME}-front/key-map.conf", f"{NAME}.api-key",
                    f"{NAME}.api-key.previous", f"{NAME}.hf-token/token"]  # fmt: skip
    _run(tmp_path, _undeploy_task(), replace=False)
    assert _holding_the_key(tmp_path / "secrets") == []
    assert not front.exists()  # its key.pem with it
    left = sorted(str(p.relative_to(tmp_path / "secrets")) for p in (tmp_path / "secrets").rglob("*"))
    assert left == [f"{NAME}-front-selfsigned", f"{NAME}-front-selfsigned/cert.pem", f"{NAME}-front-selfsigned/key.pem"]
