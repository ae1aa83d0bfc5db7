"""make validate against the real CPU deployment: float32 against bfloat16 is outside run-to-run variation (the tiny
model's prompt logprobs move by ~0.002 and half the greedy outputs change, where A against its own restart, a new
container, moved by 0). Bad input stops before any change.

The same profile twice ("within run-to-run variation") is not run here: it started three engines to show what this
module's A-against-restarted-A half already shows live; its verdict is tests/unit/record/test_validate.py's, on the
correctness readings recorded from such a run (tests/fixtures/validate/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import CONTAINER, REPO, inspect, make

pytestmark = pytest.mark.integration
ENGINE_STARTS = 2


def _verdict(output: str) -> dict[str, object]:
    line = next(x for x in output.splitlines() if x.startswith("written: ") and x.endswith("validate.txt"))
    data: dict[str, object] = json.loads((REPO / Path(line[len("written: ") :]).parent / "validate.json").read_text())
    return data


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("A=cpu-tiny",), "make validate: set A=<profile> and B=<profile>"),
        (("A=cpu-tiny", "B=no-such"), "make validate: B: no-such: no such profile (known: cpu-tiny"),
    ],
)
def test_bad_input_is_one_line_before_any_change(args: tuple[str, ...], says: str) -> None:
    before = (inspect(CONTAINER) or {}).get("Id")
    r = make("validate", *args)
    assert r.rc == 2 and says in r.output, r.output[-2000:]
    assert "PLAY" not in r.output
    assert (inspect(CONTAINER) or {}).get("Id") == before


def test_bfloat16_against_float32_is_outside_and_a_is_left_running(tmp_path: Path) -> None:
    profile = yaml.safe_load((REPO / "serving" / "profiles" / "cpu-tiny.yaml").read_text())
    profile["vllm"]["dtype"] = "bfloat16"
    bf16 = tmp_path / "cpu-tiny-bf16.yaml"
    bf16.write_text(yaml.safe_dump(profile))
    r = make("validate", "A=cpu-tiny", f"B={bf16}", timeout=900)
    assert r.rc != 0, r.output[-4000:]  # make exits 2 for any failed recipe
    v = _verdict(r.output)
    assert v["verdict"] == "outside run-to-run variation"
    # A ran twice, across a restart (a new container): its own variation is what B is judged against.
    containers = v["containers"]
    assert v["restarted"] is True and isinstance(containers, dict) and containers["a1"] != containers["a2"]
    ab, aa = v["a_vs_b"], v["a_vs_a"]
    assert isinstance(ab, dict) and isinstance(aa, dict)
    assert ab["prompt_mean_abs"] > 10 * max(aa["prompt_mean_abs"], 1e-5)
    assert "verdict: OUTSIDE RUN-TO-RUN VARIATION" in r.output
    # A, the default, is what runs afterwards.
    assert make("status").rc == 0
    running = inspect(CONTAINER)
    assert running is not None and "--dtype" in running["Config"]["Cmd"]
    assert running["Config"]["Cmd"][running["Config"]["Cmd"].index("--dtype") + 1] == "float32"
