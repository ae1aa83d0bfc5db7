"""Role variables checked in one line before any role checks its own (serving/bridge/role_vars.py, role check_vars):
a wrong-typed `-e` value got Ansible's whole argument spec printed, some 80 lines (issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.bridge import role_vars
from tests.helpers.ansible_run import REPO


@pytest.mark.parametrize(
    ("values", "line"),
    [({"bench_runs": "abc"}, 'bench_runs="abc" is not a whole number (Measured runs per operating point'),
     ({"probe_io_depths": "[x]"}, 'probe_io_depths="[x]" is not a list of whole numbers'),
     ({"bench_search": "fast"}, 'bench_search="fast" is not one of "", rate, concurrency'),
     ({"preflight_ensure_docker": "maybe"}, 'preflight_ensure_docker="maybe" is not true or false'),
     ({"gpu_class": "h200"}, 'gpu_class="h200" is not a mapping')],
)  # fmt: skip
def test_a_wrong_typed_value_is_one_line_naming_it_and_its_form(values: dict[str, str], line: str) -> None:
    said = role_vars.check(values)
    assert said is not None and said.startswith(line) and "\n" not in said, said
    assert said.endswith(": set it in the inventory or with -e as docs/roles.md says")


def test_the_value_of_a_variable_named_like_a_secret_is_not_shown() -> None:
    # The specs' secret-named variables are strings, which take anything: a spec of this test's own shows it.
    options = {"probe_api_token": ("probe", {"type": "int", "description": "A token."})}
    said = role_vars.check({"probe_api_token": "tok-secret"}, options)
    assert said is not None and said.startswith("probe_api_token=<not shown> is not a whole number (A token)"), said
    assert "tok-secret" not in said


def test_a_credential_inside_a_shown_value_is_hidden() -> None:
    options = {"probe_mirror": ("probe", {"type": "int", "description": "A mirror."})}
    said = role_vars.check({"probe_mirror": "https://ci:pa/s3cret-46@mirror.invalid"}, options)
    assert said is not None and said.startswith('probe_mirror="https://<redacted>@mirror.invalid" is not'), said
    assert "s3cret-46" not in said


def test_values_ansible_converts_pass_and_unknown_or_unset_names_are_left_alone() -> None:
    assert role_vars.check({"bench_runs": "5", "probe_io_depths": [1, 64], "serve_force_replace": "yes"}) is None
    assert role_vars.check({"not_a_role_variable": object(), "bench_runs": None}) is None


def test_every_option_of_every_spec_is_checked_and_the_plan_facts_are_not() -> None:
    options = role_vars.role_options()
    assert {"bench_runs", "capture_seconds", "probe_io_depths", "serving_profile", "gpu_class"} <= options.keys()
    assert not options.keys() & role_vars.SET_BY_THE_PLAYBOOKS
    assert options["capture_seconds"][0] == "capture"


@pytest.mark.parametrize("runs", ["abc", "3"])
def test_plans_dependency_names_a_bad_value_before_plans_own_check_prints_its_spec(tmp_path: Path, runs: str) -> None:
    """Real ansible-playbook, the project's roles: plan's dependency check_vars runs before plan's own argument check.
    A good value passes it, and plan's own check then fails on what this play leaves out (serving_profile)."""
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: plan\n")
    # Whatever config the caller runs under (make exports the project's, whose results are YAML): Ansible's JSON.
    env = {
        **{k: v for k, v in os.environ.items() if k != "ANSIBLE_CONFIG"},
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_ROLES_PATH": str(REPO / "ansible" / "roles"),
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "ansible" / "action_plugins"),
        "PYTHONPATH": str(REPO),
        "ANSIBLE_NOCOLOR": "1",
    }
    cp = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"bench_runs={runs}", str(play)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    out = cp.stdout + cp.stderr
    assert cp.returncode == 2, out[-3000:]
    if runs == "abc":
        assert 'bench_runs=\\"abc\\" is not a whole number' in out, out[-3000:]
        assert "Validation of arguments failed" not in out and "argument_spec_data" not in out
    else:
        assert "is not a whole number" not in out
        assert "Validation of arguments failed" in out and "serving_profile" in out, out[-3000:]
