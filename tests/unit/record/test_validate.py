"""serving/record/validate.py: B against A beside A against A across a restart, on a real reading of the fixed requests
(tests/fixtures/validate/correctness-cpu-tiny.json: probes/senders/correctness.py --long 64 --max-tokens 8 --top-k 3
against cpu-tiny on this machine), perturbed to make the differences known. The probe's own request set and
response reduction are tested beside it."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from probes.senders import correctness
from serving.record import validate

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "validate" / "correctness-cpu-tiny.json"


def reading(container: str = "c1", shift: float = 0.0, profile: str = "cpu-tiny") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    for r in doc["requests"].values():
        for pos in r["prompt_logprobs"]:
            pos["logprob"] += shift
            pos["top"] = {k: v + shift for k, v in pos["top"].items()}
        r["output_top"] = [{k: v + shift for k, v in t.items()} for t in r["output_top"]]
    doc["meta"] = {"profile": profile, "container_id": container}
    return doc


def test_the_real_reading_has_every_request_and_its_logprobs() -> None:
    doc = json.loads(FIXTURE.read_text())
    assert doc["failed"] == [] and len(doc["requests"]) == 8
    r = doc["requests"]["sequential-len64-0"]
    assert len(r["prompt_token_ids"]) == 64 and len(r["prompt_logprobs"]) == 63
    assert all(p["logprob"] is not None and str(p["id"]) in p["top"] for p in r["prompt_logprobs"])
    assert len(r["output_token_ids"]) == 8 and len(r["output_top"]) == 8
    # The same prompts alone and in a batch gave the same answers on the CPU build.
    assert doc["requests"]["concurrent-len64-0"]["output_token_ids"] == r["output_token_ids"]


def test_the_same_answers_are_within_run_to_run_variation() -> None:
    r = validate.judge(reading("c1"), reading("c2"), reading("c3"))
    assert r["within"] and r["verdict"] == "within run-to-run variation"
    assert r["a_vs_b"]["prompt_mean_abs"] == 0 and r["a_vs_b"]["outputs_identical"] == 8
    assert r["restarted"]
    text = validate.render(r)
    assert (
        "verdict: WITHIN RUN-TO-RUN VARIATION" in text
        and "A again after a restart, in a new container; containers a1 c1, b c2, a2 c3" in text
    )


def test_a_shift_in_b_beyond_a_against_itself_is_outside() -> None:
    r = validate.judge(reading("c1"), reading("c2", shift=0.01), reading("c3"))
    assert not r["within"]
    assert r["a_vs_b"]["prompt_mean_abs"] == pytest.approx(0.01)
    assert r["reasons"][0].startswith("prompt logprob mean |A-B| 0.01 over 1.5x A's own 0 (floor 1e-05)")
    assert "OUTSIDE RUN-TO-RUN VARIATION" in validate.render(r)


def test_the_seeds_case_a_change_as_large_as_a_restart_is_within() -> None:
    """Seed 000 §13: old-vs-new 0.001995 against old-vs-old 0.002010."""
    r = validate.judge(reading("c1"), reading("c2", shift=0.001995), reading("c3", shift=0.002010))
    assert r["within"], r["reasons"]
    r = validate.judge(reading("c1"), reading("c2", shift=0.004), reading("c3", shift=0.002010))
    assert not r["within"]


def test_a_changed_greedy_output_is_outside_even_with_equal_logprobs() -> None:
    b = reading("c2")
    b["requests"]["sequential-len32-1"]["output_token_ids"][3] += 1
    r = validate.judge(reading("c1"), b, reading("c3"))
    assert r["reasons"] == ["greedy outputs changed: sequential-len32-1 (from token 3)"]
    assert r["a_vs_b"]["requests"]["sequential-len32-1"]["first_divergence"] == 3


def test_other_tokenisation_and_a_failed_request_are_named() -> None:
    b = reading("c2")
    b["requests"]["sequential-len32-0"]["prompt_token_ids"][0] += 1
    b["requests"]["concurrent-len64-1"] = {"phase": "concurrent", "status": 500, "error": "HTTP 500"}
    r = validate.judge(reading("c1"), b, reading("c3"))
    assert not r["within"]
    assert "sequential-len32-0: the prompt's token ids differ (the two did not tokenise alike)" in r["reasons"]
    assert "concurrent-len64-1: not answered on both (HTTP 500)" in r["reasons"]


def test_one_container_for_both_readings_of_a_is_said() -> None:
    r = validate.judge(reading("c1"), reading("c1"), reading("c1"))
    assert not r["restarted"]
    assert "A again with no restart: one container for both" in validate.render(r)


def test_report_writes_the_verdict_beside_the_readings(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "localhost" / "X-validate" / "validate"
    for label, doc in zip(validate.LABELS, (reading("c1"), reading("c2", shift=0.05), reading("c3")), strict=True):
        (d / label).mkdir(parents=True)
        meta = doc.pop("meta")
        (d / label / "correctness.json").write_text(json.dumps(doc))
        (d / label / "meta.json").write_text(json.dumps(meta))
    rc = validate.cmd_report(argparse.Namespace(id="X-validate", runs_dir=str(tmp_path / "runs")))
    assert rc == 1
    assert json.loads((d / "validate.json").read_text())["verdict"] == "outside run-to-run variation"
    assert (d / "validate.txt").read_text().startswith("validate: A = cpu-tiny, B = cpu-tiny")
    with pytest.raises(validate.ValidateError, match="no readings of validate Y under"):
        validate.cmd_report(argparse.Namespace(id="Y", runs_dir=str(tmp_path / "runs")))


def test_an_unknown_profile_is_one_line_before_any_change() -> None:
    with pytest.raises(validate.ValidateError, match=r"^make validate: B: no-such: no such profile \(known: cpu-tiny"):
        validate.cmd_check(argparse.Namespace(a="cpu-tiny", b="no-such"))


# --- the probe's side ----------------------------------------------------------------------------------------


def test_the_request_set_is_fixed_two_lengths_alone_then_together() -> None:
    plan = correctness.requests_plan(32, 512, 16)
    assert [r["name"] for r in plan][:4] == [
        "sequential-len32-0", "sequential-len32-1", "sequential-len512-0", "sequential-len512-1",
    ]  # fmt: skip
    assert {r["phase"] for r in plan[4:]} == {"concurrent"}
    assert plan == correctness.requests_plan(32, 512, 16)  # the same prompts every time
    assert [len(r["prompt"]) for r in plan[4:]] == [32, 32, 512, 512]
    assert plan[0]["prompt"] == plan[4]["prompt"]  # a batch set against the lone request


def test_a_choice_is_reduced_to_ids_and_logprobs() -> None:
    req = {"prompt": [5, 6, 7]}
    choice = copy.deepcopy(
        {
            "prompt_token_ids": [5, 6, 7],
            "prompt_logprobs": [None, {"6": {"logprob": -1.5, "rank": 2}, "9": {"logprob": -1.0, "rank": 1}},
                                {"7": {"logprob": -0.5, "rank": 1}}],
            "token_ids": [11, 12],
            "logprobs": {"token_logprobs": [-0.1, -0.2], "top_logprobs": [{"a": -0.1}, {"b": -0.2}]},
            "text": "ab",
        }
    )  # fmt: skip
    got = correctness.reduce_choice(req, choice)
    assert got["prompt_logprobs"] == [
        {"id": 6, "logprob": -1.5, "top": {"6": -1.5, "9": -1.0}},
        {"id": 7, "logprob": -0.5, "top": {"7": -0.5}},
    ]
    assert got["output_token_ids"] == [11, 12] and got["output_top"] == [{"a": -0.1}, {"b": -0.2}]
