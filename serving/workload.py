"""Workloads (serving/workloads/<name>.yaml): the fixed conditions of a bench. Dataset, input and output
lengths, prompts per run, the concurrency sweep (request rate inf, a concurrency cap) and the fixed arrival
rates (no cap), the seed, warm-ups and measured runs, and how the prefix cache is kept out of the figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from serving.errors import InputError
from serving.schema import StrictModel, YamlKind

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"


class WorkloadError(InputError):
    """A workload that cannot be used: unknown name, unknown key, wrong type."""


class Workload(StrictModel):
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
    # The OS page cache of the served files (the model, a GPU profile's data), made before every run, warm-ups
    # included (images/vllm/bench_client.py): "as-found" leaves it; "cold" evicts the served files' pages with
    # posix_fadvise(DONTNEED), file by file, never a host-wide drop (seed 000 §11: that changes unrelated
    # workloads); "warm" reads them in first. Either way each run records their residency (fincore) before and
    # after, and the engine processes' read volume.
    page_cache: Literal["as-found", "cold", "warm"] = "as-found"
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


def _needs_a_point(workload: Workload) -> str | None:
    """A bench with neither a concurrency level nor an arrival rate would measure nothing."""
    if not workload.concurrency and not workload.arrival_rates:
        return "give at least one concurrency level or one arrival rate"
    return None


_WORKLOADS = YamlKind(
    model=Workload,
    directory=WORKLOADS_DIR,
    error=WorkloadError,
    no_such_file="workload file {name} does not exist",
    no_such_name=(
        "unknown workload {name!r}: known workloads are {known} (serving/workloads/), or give a path to a workload YAML"
    ),
    not_a_mapping="{source}: a workload is a mapping, got {type}",
    check=_needs_a_point,
)


def known_workloads() -> list[str]:
    return _WORKLOADS.known()


def resolve_workload_path(name_or_path: str) -> Path:
    return _WORKLOADS.resolve(name_or_path)


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    return _WORKLOADS.parse(data, source)


def load_workload(name_or_path: str) -> Workload:
    return _WORKLOADS.load(name_or_path)
