"""serving/config/untraced.py: the copies pp-receive.sh benches, the rank trace off and nothing else changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.config.profile import load_profile
from serving.config.untraced import main, untraced
from serving.plan.plan import plan_from_profile


def _plan_env(name_or_path: str) -> dict[str, str]:
    plan = plan_from_profile(load_profile(name_or_path), "localhost", {"hostname": "localhost", "served_files": ""})
    assert plan.launch is not None
    return dict(plan.launch.spec["env"])


def test_a_copy_has_the_trace_off_and_everything_else_the_profiles(tmp_path: Path) -> None:
    path = untraced("cpu-tiny-pp2-deferred", tmp_path)
    original, copy = load_profile("cpu-tiny-pp2-deferred"), load_profile(str(path))
    assert (original.probes.rank_trace, copy.probes.rank_trace) == (True, False)
    assert copy.name == "cpu-tiny-pp2-deferred-untraced"
    same = {"name", "description", "probes"}
    assert copy.model_dump(exclude=same) == original.model_dump(exclude=same)
    assert copy.probes.model_dump(exclude={"rank_trace"}) == original.probes.model_dump(exclude={"rank_trace"})
    # The engine it launches: the trace's directory is no longer given to vLLM; the deferred receive still is.
    assert "REFDEPLOY_RANK_TRACE_DIR" in _plan_env("cpu-tiny-pp2-deferred")
    env = _plan_env(str(path))
    assert "REFDEPLOY_RANK_TRACE_DIR" not in env and env["REFDEPLOY_PP_DEFER_RECV"] == "1"


def test_the_cli_prints_each_copy_and_names_a_profile_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cpu-tiny-pp2", "cpu-tiny-pp2-deferred", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [
        str(tmp_path / "cpu-tiny-pp2-untraced.yaml"), str(tmp_path / "cpu-tiny-pp2-deferred-untraced.yaml"),
    ]  # fmt: skip
    assert main(["cpu-tiny-pp9", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("untraced: cpu-tiny-pp9: no such profile")
    assert not (tmp_path / "x").exists()
