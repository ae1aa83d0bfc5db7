"""Workloads (serving/workloads/<name>.yaml): the fixed conditions of a bench. Dataset, input and output
lengths, prompts per run, the concurrency sweep (request rate inf, a concurrency cap) and the fixed arrival
rates (no cap), the seed, warm-ups and measured runs, and how the prefix cache is kept out of the figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serving.errors import InputError

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"


class WorkloadError(InputError):
    """A workload that cannot be used: unknown name, unknown key, wrong type."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Workload(_Strict):
    schema_version: Literal[1]
    name: str
    description: str = ""
    # vLLM's random dataset: token ids drawn from the seed, fixed lengths (--random-range-ratio 0).
    dataset: Literal["random"] = "random"
    input_len: int = Field(ge=1)
    # At least 2: TPOT and the decode rate need a second token.
    output_len: int = Field(ge=2)
    num_prompts: int = Field(ge=1)
    # The scaling sweep: request rate inf, at most this many requests in flight (the source's 004 experiment).
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4])
    # Fixed arrival rates in requests/s, no concurrency cap: achieved versus requested rate, outstanding requests.
    arrival_rates: list[float] = Field(default_factory=list)
    # Inter-arrival gamma shape at a fixed rate: 1 is Poisson, .inf evenly spaced.
    burstiness: float = Field(default=1.0, gt=0)
    seed: int = 7
    warmups: int = Field(default=1, ge=0)
    runs: int = Field(default=3, ge=1)
    # fresh: every run's requests carry their own cache_salt (no block cached by another run can serve them),
    # and the cache is also reset first where the server offers /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1);
    # "off": the server runs without prefix caching. Either way the metrics delta must show no hits.
    prefix_cache: Literal["fresh", "off"] = "fresh"
    # Seconds one run may take before it is stopped and marked failed.
    run_timeout_s: float = Field(default=600, gt=0)

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError(f"concurrency levels must be at least 1, got {v}")
        return v

    @field_validator("arrival_rates")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        if any(not (r > 0 and math.isfinite(r)) for r in v):
            raise ValueError(f"arrival rates must be finite and positive (req/s), got {v}")
        return v


def known_workloads() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml"))


def resolve_workload_path(name_or_path: str) -> Path:
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = Path(name_or_path)
        if not path.is_file():
            raise WorkloadError(f"workload file {name_or_path} does not exist")
        return path
    path = WORKLOADS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise WorkloadError(
            f"unknown workload {name_or_path!r}: known workloads are {', '.join(known_workloads())} "
            f"(serving/workloads/), or give a path to a workload YAML"
        )
    return path


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    if not isinstance(data, dict):
        raise WorkloadError(f"{source}: a workload is a mapping, got {type(data).__name__}")
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise WorkloadError(f"{source}: {problems}") from None
    if not workload.concurrency and not workload.arrival_rates:
        raise WorkloadError(f"{source}: give at least one concurrency level or one arrival rate")
    return workload


def load_workload(name_or_path: str) -> Workload:
    path = resolve_workload_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: not valid YAML: {exc}") from None
    return parse_workload(data, str(path))
