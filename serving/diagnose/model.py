"""diagnosis.json's schema: the findings of `make diagnose`, as pydantic models (serving/diagnose/engine.py writes the
file through `Diagnosis`, so a field the schema does not name fails the diagnosis rather than landing unseen).

A finding is a rule's reading of the evidence, worded as the seed words it: "consistent with" (the figures fit the
cause, and do not prove it), "rules out" (the figures exclude it), "cannot tell" (what is missing to decide). Every
figure names the artifact it was read from, relative to the run directory.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serving.config.schema import StrictModel

SCHEMA_VERSION = 1
Verdict = Literal["consistent with", "rules out", "cannot tell"]


class Figure(StrictModel):
    """One figure a finding rests on, and where it was read."""

    name: str
    value: bool | int | float | str | None
    unit: str = ""
    artifact: str  # relative to the run directory: "metrics/delta.json", "samplers/pidstat.log"


class Finding(StrictModel):
    rule: str  # the rule's module name: "cgroup", "threads"
    seed: str  # the seed section the rule follows: "000 §5"
    verdict: Verdict
    title: str  # one line: what the evidence is consistent with, rules out, or cannot tell
    symptom: str  # what was seen
    # How much of a request's time it can account for, 0..1 (the slow interval's finding: that interval's share):
    # the ranking key after the slow interval's own finding, which comes first as the frame. A finding that rules
    # something out, or cannot tell, accounts for nothing (0).
    explains: float = Field(ge=0.0, le=1.0)
    figures: list[Figure]
    not_established: str  # what this does not yet show
    next_steps: list[str]  # ready commands: make hypothesis ..., then the compare or capture that tests it


class RuleRun(StrictModel):
    rule: str
    seed: str
    status: Literal["ran", "could not run"]
    why: str = ""  # why it could not run: a skipped sampler, no GPU, no workload in the window


class Diagnosis(StrictModel):
    schema_version: Literal[1] = 1
    run_dir: str
    kind: Literal["capture", "bench"]
    window_s: float | None
    slow_interval: str  # the interval the findings are ranked against: "decode", "TTFT", "queueing", ...
    findings: list[Finding]  # ranked: most of the slow interval explained first
    rules: list[RuleRun]  # every rule, in the seed's order, whether it ran
    notes: list[str]  # what the evidence lacked, in the run's own words


def json_schema() -> dict[str, object]:
    """diagnosis.json's JSON Schema (docs/diagnosis.schema.json: python -m serving.diagnose.model > that file)."""
    schema = Diagnosis.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "refdeploy diagnosis.json"
    return schema


if __name__ == "__main__":
    import json

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
