"""Workloads (serving/workloads/<name>.yaml): the fixed conditions of a bench. The API path (completions, or
chat with the model's chat template), the dataset (random token prompts, groups sharing a prefix, a prompts file,
a request trace replayed on its own timestamps, or multi-turn conversations), input and output lengths, prompts
per run, the concurrency sweep (request rate inf, a concurrency cap) and the fixed arrival rates (no cap, Poisson
or bursty), the seed, warm-ups and measured runs, how the prefix cache is kept out of the figures (or, for a
shared prefix or conversations, let in), per-request SLOs, and the sizes a profile that cannot hold the workload's
lengths runs instead.

Seed 000 §4: random prompts on /v1/completions are a baseline, not production; "if production uses chat ...
save workloads using the same path and template". The datasets map onto `vllm bench serve`'s own (random,
prefix_repetition, custom, timed_trace), so the tool everyone compares with draws the prompts. vLLM 0.32 has no
multi-turn dataset: conversations are sent by the bench client itself (images/vllm/bench_client.py), with vLLM's
own chat request function and random dataset, so the timings and the user turns are vLLM's."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from serving.config.schema import StrictModel, YamlKind
from serving.errors import InputError

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"


class WorkloadError(InputError):
    """A workload that cannot be used: unknown name, unknown key, wrong type."""


# An SLO is a duration with its unit, as the operator writes it: "500ms", "0.5s". A bare number is refused
# rather than guessed (the seeds' figures are in ms, vLLM's histograms in s: a guess is wrong half the time).
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)")


def any_duration_ms(text: Any) -> float:
    """ "250ms" -> 250.0, "1.5s" -> 1500.0, "0ms" -> 0.0; ValueError (one clear sentence) otherwise."""
    if isinstance(text, bool | int | float):
        raise ValueError(f"{text!r} has no unit: write it as {text}ms or {text}s")
    m = _DURATION.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration in ms or s: write it as e.g. 500ms or 0.5s")
    return float(m.group(1)) * (1.0 if m.group(2) == "ms" else 1000.0)


def duration_ms(text: Any) -> float:
    """An SLO's duration: as any_duration_ms, and above zero (no request meets a zero objective)."""
    value = any_duration_ms(text)
    if value <= 0:
        raise ValueError(f"{text!r}: an SLO must be above zero")
    return value


class Slo(StrictModel):
    """Per-request service-level objectives: a request meets the SLO when its TTFT, TPOT and end-to-end latency
    are each at most the given duration (those given). Goodput: requests per second that met all of them."""

    ttft: str | None = None
    tpot: str | None = None
    e2e: str | None = None
    # A load "holds" the SLO when at least this share of its requests meet all of it (the knee search, the report).
    min_share: float = Field(default=0.9, gt=0, le=1)

    @field_validator("ttft", "tpot", "e2e", mode="before")
    @classmethod
    def _with_unit(cls, v: Any) -> Any:
        if v is None:
            return v
        duration_ms(v)
        return str(v).strip()

    def thresholds_ms(self) -> dict[str, float]:
        """{"ttft_ms": .., "tpot_ms": .., "e2e_ms": ..}, those given."""
        out = {"ttft_ms": self.ttft, "tpot_ms": self.tpot, "e2e_ms": self.e2e}
        return {k: duration_ms(v) for k, v in out.items() if v is not None}


class Size(StrictModel):
    """What a named profile runs instead of the workload's own sizes, and why (said in the report)."""

    input_len: int | None = Field(default=None, ge=1)
    output_len: int | None = Field(default=None, ge=2)
    prefix_len: int | None = Field(default=None, ge=1)
    num_prompts: int | None = Field(default=None, ge=1)
    turns: int | None = Field(default=None, ge=2)
    num_conversations: int | None = Field(default=None, ge=1)
    concurrency: list[int] | None = None
    arrival_rates: list[float] | None = None
    why: str


class SearchRange(StrictModel):
    """The loads a knee search may measure: from `start`, doubling, to at most `limit`; `resolution`, where given,
    is this kind's bisection resolution (the search's own otherwise for rate; adjacent integers for concurrency)."""

    start: float = Field(gt=0)
    limit: float = Field(gt=0)
    resolution: float | None = Field(default=None, gt=0)


class SearchSettings(StrictModel):
    """How `make bench SEARCH=rate|concurrency` searches (serving/standalone/knee.py): the ranges, the runs per probe
    and per bracketing load, the bisection's resolution (rate: hi/lo <= 1 + resolution) and the runs it may spend; how
    long each run holds its load (serving/standalone/knee_runs.py: a rate sends rate x duration_s prompts), the first
    seconds of sends left out as ramp-up, the requests a run must complete after them to count, and how long the two
    steady runs that check the answer (at the knee, and at the load above it) hold theirs."""

    rate: SearchRange = Field(default_factory=lambda: SearchRange(start=1.0, limit=64.0))
    concurrency: SearchRange = Field(default_factory=lambda: SearchRange(start=1, limit=64))
    probe_runs: int = Field(default=1, ge=1)
    confirm_runs: int = Field(default=3, ge=2)
    resolution: float = Field(default=0.25, gt=0)
    max_runs: int = Field(default=30, ge=2)
    duration_s: float = Field(default=15.0, gt=0)
    ramp_up_s: float = Field(default=3.0, ge=0)
    min_completed: int = Field(default=20, ge=1)
    check_duration_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _ramp_inside(self) -> SearchSettings:
        if self.ramp_up_s >= self.duration_s:
            raise ValueError(
                f"search.ramp_up_s {self.ramp_up_s:g} leaves nothing of search.duration_s {self.duration_s:g} to "
                "measure: give a ramp-up shorter than the duration"
            )
        if self.ramp_up_s >= self.check_duration_s:
            raise ValueError(
                f"search.ramp_up_s {self.ramp_up_s:g} leaves nothing of search.check_duration_s "
                f"{self.check_duration_s:g} to measure"
            )
        return self


class Workload(StrictModel):
    schema_version: Literal[1]
    name: str
    description: str = ""
    # completions: /v1/completions; chat: /v1/chat/completions, the server applying the model's chat template.
    api: Literal["completions", "chat"] = "completions"
    # random: token ids drawn from the seed, fixed lengths (--random-range-ratio 0); shared_prefix: num_prefixes
    # groups of prompts that share their first prefix_len tokens (vLLM's prefix_repetition; the prefix cache is
    # meant to hit, and the report says so); prompts: the prompts of a JSONL file ({"prompt": ...} per line, the
    # file `prompts`), output_len tokens each; trace: the requests of a JSONL trace (`trace`: timestamp in s,
    # input_length, output_length per line) sent at their own times (vLLM's timed_trace); conversations:
    # num_conversations chats of `turns` turns, each turn input_len random user tokens (vLLM's random dataset)
    # and output_len answer tokens, every turn resending the conversation's history (user and assistant turns
    # alternating; the answers are what the server said), so later turns are meant to hit the prefix cache.
    dataset: Literal["random", "shared_prefix", "prompts", "trace", "conversations"] = "random"
    # Prompt tokens (shared_prefix: prefix and suffix together; conversations: the user's tokens per turn, as
    # vLLM's random dataset counts them); none for prompts and trace (the file says).
    input_len: int | None = Field(default=None, ge=1)
    # At least 2: TPOT and the decode rate need a second token. None for a trace (each line says).
    output_len: int | None = Field(default=None, ge=2)
    prefix_len: int | None = Field(default=None, ge=1)
    num_prefixes: int = Field(default=1, ge=1)
    # A file next to the workload YAML (or an absolute path).
    prompts: str | None = None
    trace: str | None = None
    # The trace's timestamps are multiplied by this (0.5 replays twice as fast).
    trace_time_scale: float = Field(default=1.0, gt=0)
    # Tokens per entry of a trace line's hash_ids (its prompt's blocks: lines that share an id share those
    # tokens). 16 for the Alibaba/Qwen traces, 512 for Moonshot's; lines without hash_ids get ids of their own.
    trace_block_tokens: int = Field(default=16, ge=1)
    # Prompts per run (a trace: at most this many of its lines; none, all of them). None for conversations: a run
    # sends turns x num_conversations requests.
    num_prompts: int | None = Field(default=None, ge=1)
    # Conversations: turns per conversation (at least 2: one turn is the random dataset), conversations per run,
    # and how long the user thinks between an answer's last token and the next turn (none: no wait).
    turns: int | None = Field(default=None, ge=2)
    num_conversations: int | None = Field(default=None, ge=1)
    think_time: str | None = None
    # The scaling sweep: request rate inf, at most this many requests in flight (the source's 004 experiment);
    # for conversations, at most this many conversations in flight.
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
    # Per-request SLOs: the report's goodput and the share meeting each; the knee search's criterion.
    slo: Slo | None = None
    # The knee search's ranges and effort (make bench SEARCH=rate|concurrency); it needs an slo.
    search: SearchSettings = Field(default_factory=SearchSettings)
    # Per profile name: the sizes it runs instead (a CPU profile cannot run the seeds' 37k-token prompts).
    sizes: dict[str, Size] = Field(default_factory=dict)

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

    @field_validator("think_time", mode="before")
    @classmethod
    def _think_time(cls, v: Any) -> Any:
        if v is None:
            return v
        any_duration_ms(v)
        return str(v).strip()

    def think_time_s(self) -> float:
        """The think time in seconds (0 when none is given)."""
        return any_duration_ms(self.think_time) / 1000.0 if self.think_time is not None else 0.0


# What each dataset needs and refuses: (needs, refuses) field names.
_DATASET_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "random": (("input_len", "output_len", "num_prompts"), ("prefix_len", "prompts", "trace")),
    "shared_prefix": (("input_len", "output_len", "prefix_len", "num_prompts"), ("prompts", "trace")),
    "prompts": (("output_len", "prompts", "num_prompts"), ("input_len", "prefix_len", "trace")),
    "trace": (("trace",), ("input_len", "output_len", "prefix_len", "prompts")),
    "conversations": (("input_len", "output_len", "turns", "num_conversations"), ("prefix_len", "prompts", "trace")),
}
# The fields only conversations take.
_CONVERSATION_FIELDS = ("turns", "num_conversations", "think_time")


def _conversations(w: Workload) -> str | None:
    """Conversations' own rules: a chat, a number of conversations rather than of prompts, and loads that are
    conversations in flight (a conversation's next turn waits for its answer, so there is no arrival rate)."""
    if w.num_prompts is not None:
        return (
            f"dataset conversations sends turns x num_conversations requests ({w.turns} x {w.num_conversations}): "
            "give no num_prompts"
        )
    if w.api != "chat":
        return "dataset conversations resends each conversation's history as chat messages: api: chat"
    if w.arrival_rates:
        return (
            "conversations run at a concurrency of conversations; a turn waits for the answer before it, so there "
            "is no arrival rate: give no arrival_rates (concurrency: [1, 4])"
        )
    if w.burstiness != 1.0:
        return (
            "conversations run at a concurrency of conversations; burstiness shapes arrivals at a rate, which "
            "conversations do not have: give no burstiness"
        )
    if not w.concurrency:
        return "conversations run at a concurrency of conversations: give at least one level (concurrency: [1, 4])"
    return None


def _consistent(workload: Workload) -> str | None:
    """Rules across fields: the dataset's own fields, the points, a prefix shorter than the prompt."""
    w = workload
    needs, refuses = _DATASET_FIELDS[w.dataset]
    missing = [f for f in needs if getattr(w, f) is None]
    if missing:
        return f"dataset {w.dataset} needs {' and '.join(missing)}"
    extra = [f for f in refuses if getattr(w, f) is not None]
    if extra:
        why = (
            "a turn's prompt is its history and input_len user tokens"
            if w.dataset == "conversations"
            else "its prompts' lengths come from elsewhere"
        )
        return f"dataset {w.dataset} takes no {' or '.join(extra)} ({why})"
    if w.dataset == "conversations":
        return _conversations(w)
    given = [f for f in _CONVERSATION_FIELDS if getattr(w, f) is not None]
    if given:
        return f"dataset {w.dataset} takes no {' or '.join(given)} (those are dataset conversations' fields)"
    if w.dataset == "trace":
        if w.concurrency or w.arrival_rates:
            return "a trace is replayed on its own timestamps: give no concurrency or arrival_rates (concurrency: [])"
        if w.api != "completions":
            return "a trace replays token-id prompts, which only /v1/completions takes: api: completions"
        return None
    if w.dataset == "shared_prefix":
        assert w.prefix_len is not None and w.input_len is not None and w.num_prompts is not None
        if w.prefix_len >= w.input_len:
            return f"prefix_len {w.prefix_len} must be shorter than input_len {w.input_len} (each prompt adds its own)"
        if w.num_prompts < w.num_prefixes:
            return f"num_prompts {w.num_prompts} gives some of the {w.num_prefixes} prefixes no prompt"
        if w.prefix_cache == "off":
            return "a shared prefix measures the prefix cache: prefix_cache: fresh (each run its own salt)"
    if not w.concurrency and not w.arrival_rates:
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
    check=_consistent,
)


def known_workloads() -> list[str]:
    return _WORKLOADS.known()


def resolve_workload_path(name_or_path: str) -> Path:
    return _WORKLOADS.resolve(name_or_path)


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    return _WORKLOADS.parse(data, source)


def load_workload(name_or_path: str) -> Workload:
    """The workload, its data files' paths made absolute (relative ones are next to the workload's YAML)."""
    path = _WORKLOADS.resolve(name_or_path)
    w = _WORKLOADS.load(str(path))
    update = {}
    for key in ("prompts", "trace"):
        value = getattr(w, key)
        if value is not None and not Path(value).is_absolute():
            update[key] = str((path.parent / value).resolve())
    return w.model_copy(update=update) if update else w


def intends_prefix_hits(workload: Mapping[str, Any], data: Mapping[str, Any] | None = None) -> bool:
    """Whether the workload's prompts are meant to be served partly from the prefix cache (within a run): a shared
    prefix, conversations (each turn resends the history the turn before it sent), or a trace whose lines share
    blocks (hash_ids), as production traffic does."""
    return workload.get("dataset") in ("shared_prefix", "conversations") or bool((data or {}).get("shared_blocks"))


def canonical_trace(entries: list[dict[str, Any]], block_tokens: int) -> tuple[str, bool]:
    """The trace as vLLM's timed_trace reads it (JSONL: timestamp, input_length, output_length, hash_ids), and
    whether its lines share blocks. vLLM builds each prompt from the line's hash_ids, block_tokens tokens per id,
    and sends an EMPTY prompt for a line without them: such a line gets ids no other line has. A line whose ids
    cover fewer tokens than its input_length is refused (vLLM would send a shorter prompt than the trace says)."""
    lines: list[str] = []
    seen: set[int] = set()
    shared = False
    # Generated ids start above every id the trace has, so they never collide with one.
    next_id = 1 + max((i for e in entries for i in e.get("hash_ids") or []), default=0)
    for n, e in enumerate(entries, 1):
        need = -(-int(e["input_length"]) // block_tokens)
        ids = e.get("hash_ids")
        if ids is None:
            ids = list(range(next_id, next_id + need))
            next_id += need
        elif len(ids) < need:
            raise TraceError(
                f"trace line {n}: {len(ids)} hash_ids of {block_tokens} tokens cover {len(ids) * block_tokens} tokens, "
                f"input_length is {e['input_length']}: set trace_block_tokens to the trace's block size"
            )
        shared = shared or bool(seen.intersection(ids))
        seen.update(ids)
        line = {"timestamp": e["timestamp"], "input_length": e["input_length"], "output_length": e["output_length"]}
        lines.append(json.dumps({**line, "hash_ids": ids}))
    return "\n".join(lines) + "\n", shared


def sized_for(workload: Workload, profile_name: str) -> tuple[Workload, str | None]:
    """The workload as `profile_name` runs it: its `sizes` entry applied (and the reason, for the report), or the
    workload itself and None."""
    size = workload.sizes.get(profile_name)
    if size is None:
        return workload, None
    changes = {k: v for k, v in size.model_dump().items() if k != "why" and v is not None}
    said = ", ".join(f"{k} {getattr(workload, k)} -> {v}" for k, v in changes.items())
    data = {**workload.model_dump(), **changes}
    sized = parse_workload(data, f"{workload.name} sized for {profile_name}")
    return sized, f"sized for {profile_name}: {said} ({size.why})"


class TraceError(WorkloadError):
    """A request trace that cannot be replayed as it is."""


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """The trace's requests in order ({"timestamp", "input_length", "output_length"} and anything else a line
    holds), refused with one line naming the first bad line: not JSON, a field missing, a length that is not a
    whole number (output at least 2), a negative timestamp, or one before the line above it (vLLM replays the lines
    in file order, each at its timestamp: an unsorted trace would be replayed out of order, silently)."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"trace {p}: cannot be read: {exc.strerror or exc}") from None
    out: list[dict[str, Any]] = []
    last = 0.0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"trace {p} line {n}"
        try:
            entry = json.loads(line)
        except ValueError:
            raise TraceError(f"{where}: not a JSON object") from None
        if not isinstance(entry, dict):
            raise TraceError(f"{where}: not a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in entry:
                raise TraceError(f"{where}: no {key} (each line needs timestamp, input_length, output_length)")
        ts = entry["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise TraceError(f"{where}: timestamp {ts!r} is not a number of seconds")
        if ts < 0:
            raise TraceError(f"{where}: timestamp {ts} is negative; timestamps are seconds from the trace's start")
        if ts < last:
            raise TraceError(f"{where}: timestamp {ts} is before the line above ({last}); sort the trace by time")
        for key, least in (("input_length", 1), ("output_length", 2)):
            v = entry[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise TraceError(f"{where}: {key} {v!r} must be a whole number of tokens, at least {least}")
        ids = entry.get("hash_ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) for i in ids)):
            raise TraceError(f"{where}: hash_ids must be a list of whole numbers")
        last = float(ts)
        out.append(entry)
    if not out:
        raise TraceError(f"trace {p}: no requests in it")
    return out


def read_prompts(path: str | Path) -> list[str]:
    """The prompts of a prompts file (JSONL, {"prompt": "..."} per line), refused with one line when unusable."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise WorkloadError(f"prompts {p}: cannot be read: {exc.strerror or exc}") from None
    out: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise WorkloadError(f"prompts {p} line {n}: not a JSON object") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str) or not entry["prompt"].strip():
            raise WorkloadError(f'prompts {p} line {n}: each line is {{"prompt": "<text>"}}')
        out.append(entry["prompt"])
    if not out:
        raise WorkloadError(f"prompts {p}: no prompts in it")
    return out
