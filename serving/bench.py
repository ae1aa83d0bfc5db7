"""The benchmark protocol: workloads, the client's plan, what each request and run measured, and statistics.

`make bench` runs `vllm bench serve` from the runtime image in a client container on the serving host
(serving/bench_client.py drives it there); this module decides everything around it, and reads back what
came home:

- A workload (serving/workloads/<name>.yaml) fixes the conditions: dataset, input and output lengths, prompts
  per run, the concurrency sweep (request rate inf, a concurrency cap) and the fixed arrival rates (no cap),
  the seed, warm-ups and measured runs, and how the prefix cache is kept out of the figures.
- `plan_bench` turns a workload and the deployment's plan into the client's run list (each run's exact
  `vllm bench serve` argv, its own seed), the client container's `docker run` argv, where the client runs
  (`place_client`) and the bench manifest `make compare` checks conditions against.
- `parse_requests` reads a `--save-detailed` result into per-request observations, with the source's
  definitions (seed 000, §1): TTFT = t1 - t0; mean TPOT = (tN - t1)/(N - 1); decode rate = (N - 1)/(tN - t1),
  N the generated tokens from the server's usage count, t1 and tN the first and last streamed chunks. Chunk
  intervals are what the client observed; they are token intervals only when every chunk carried one token,
  and `grouped_streaming` says when they did not.
- `summarize_run` sets a run's client figures against the server's histogram and counter deltas
  (probes/metrics.py) and flags what makes a run untrustworthy: failed requests, fewer tokens than asked
  for, prefix-cache hits where none may be, a server restart, an arrival rate the client did not sustain.
- `describe` (median, min, max, n) and `bootstrap_diff` (a run-then-request resampling of the difference of
  medians) are the statistics the report and `make compare` print.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serving.errors import InputError
from serving.numa import format_cpulist, parse_cpulist
from serving.redact import redact

if TYPE_CHECKING:
    from serving.plan import Plan

SCHEMA_VERSION = 1
WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
# Where the client container sees its scratch directory, the model (for the tokenizer) and the sidecar logs.
CLIENT_DIR = "/bench"
CLIENT_SAMPLERS_DIR = "/samplers"
RESULT_FILE = "result.json"
# An achieved arrival rate below this share of the requested one means the client, not the server, set the pace.
MIN_ACHIEVED_RATE_RATIO = 0.98
# A client TPOT median below this share of the server's own TPOT (its histogram) means the tokens reached the
# client in bursts: its chunk times are not the server's token times (seed 000 §1: cross-check against the
# server's token metrics). Seen here on 2 shared cores: a client TPOT of 0.0018 ms beside the server's 1.47 ms.
MIN_CLIENT_OVER_SERVER_TPOT = 0.5
BUFFERED_STREAM = "buffered stream"
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"


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


# --- where the client runs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    client_cpus: str
    server_cpus: str
    host_cpus: str
    shares_server_cpus: bool
    note: str


def place_client(host_online: str, server_cpuset: str, override: str = "", reserved: str = "") -> Placement:
    """The client's CPUs: `override` if given, else those the NUMA plan keeps for it (`reserved`), else the
    host's CPUs outside the server's set.

    A host with no CPU outside the server's set (this 2-core machine, cpuset 0-1) runs the client on the
    server's CPUs: the bench still runs, and the placement, in the manifest and the report, says it shares.
    """
    host = parse_cpulist(host_online)
    if not host:
        raise InputError(f"cannot read the host's online CPUs from {host_online!r}")
    server = parse_cpulist(server_cpuset) if server_cpuset.strip() else host
    if override.strip():
        try:
            client = parse_cpulist(override)
        except ValueError:
            raise InputError(f"client CPUs {override!r}: expected a cpulist like 30-31") from None
        missing = sorted(set(client) - set(host))
        if missing:
            raise InputError(f"client CPUs {override!r}: CPUs {format_cpulist(missing)} are not online on the host")
        note = "client CPUs set by bench_client_cpus"
    elif reserved.strip():
        client = parse_cpulist(reserved)
        note = "client on the CPUs the NUMA plan keeps for it"
    else:
        client = sorted(set(host) - set(server))
        note = "client on the host's CPUs outside the server's set"
        if not client:
            client = host
            note = (
                f"the host has no CPU outside the server's set ({format_cpulist(server)}): the client shares "
                "the server's CPUs, so client overhead is inside the figures"
            )
    shares = bool(set(client) & set(server))
    if shares and override.strip():
        note += "; it overlaps the server's set"
    return Placement(format_cpulist(client), format_cpulist(server), format_cpulist(host), shares, note)


# --- the plan ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One operating point of the workload: a concurrency cap at rate inf, or a fixed arrival rate."""

    id: str
    max_concurrency: int | None
    request_rate: float  # math.inf for "as fast as the cap allows"


def points(w: Workload) -> list[Point]:
    out = [Point(f"c{c}", c, math.inf) for c in w.concurrency]
    out += [Point(f"r{r:g}", None, r) for r in w.arrival_rates]
    return out


def bench_argv(
    w: Workload, point: Point, seed: int, base_url: str, served_name: str, tokenizer: str, result_dir: str
) -> list[str]:
    """The `vllm bench serve` arguments of one run (REFERENCE §4, seed 000 §4)."""
    argv = [
        "--backend", "vllm",
        "--base-url", base_url,
        "--endpoint", "/v1/completions",
        "--model", served_name,
        "--tokenizer", tokenizer,
        "--dataset-name", w.dataset,
        "--random-input-len", str(w.input_len),
        "--random-output-len", str(w.output_len),
        "--random-range-ratio", "0",
        "--num-prompts", str(w.num_prompts),
        "--request-rate", "inf" if math.isinf(point.request_rate) else repr(point.request_rate),
        "--burstiness", "inf" if math.isinf(w.burstiness) else repr(w.burstiness),
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(seed),
        "--percentile-metrics", PERCENTILE_METRICS,
        "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed",
        "--result-dir", result_dir,
        "--result-filename", RESULT_FILE,
        "--disable-tqdm",
    ]  # fmt: skip
    if point.max_concurrency is not None:
        argv += ["--max-concurrency", str(point.max_concurrency)]
    return argv


def cache_salt_for(w: Workload, unix_s: float) -> str | None:
    """The bench's prefix-cache salt: None with prefix caching off, else one no earlier bench used.

    vLLM's KV cache outlives a bench, the default deploy offers no /reset_prefix_cache (it needs
    VLLM_SERVER_DEV_MODE), and vLLM's random dataset draws each prompt as consecutive token ids from a random
    start: with this tiny model's 4096-token vocabulary, prompts of later runs started where earlier ones had,
    and 2 to 7 of 16 prompts per run were partly served from the cache (64-224 tokens of hits). A request's
    `cache_salt` keeps it off blocks cached under another salt, so each run gets its own (the bench's salt and
    the run id), and the seeds stay fixed: two benches send the same prompts.
    """
    if w.prefix_cache == "off":
        return None
    return f"refdeploy-bench-{int(unix_s)}"


def client_runs(
    w: Workload,
    base_url: str,
    served_name: str,
    tokenizer: str,
    seed_offset: int = 0,
    cache_salt: str | None = None,
) -> list[dict[str, Any]]:
    """Every run the client makes, in order: per point, the warm-ups then the measured runs.

    Each run has its own seed (workload seed + offset + its position) and, with a salt, its own cache_salt, so
    no run is served from blocks another run cached.
    """
    runs: list[dict[str, Any]] = []
    k = seed_offset
    for p in points(w):
        for phase, count in (("warmup", w.warmups), ("measured", w.runs)):
            for i in range(count):
                run_id = f"{p.id}-{'w' if phase == 'warmup' else 'm'}{i + 1}"
                seed = w.seed + k
                k += 1
                argv = bench_argv(w, p, seed, base_url, served_name, tokenizer, f"{CLIENT_DIR}/out/runs/{run_id}")
                salt = f"{cache_salt}-{run_id}" if cache_salt else None
                if salt:
                    argv += ["--extra-body", json.dumps({"cache_salt": salt})]
                runs.append(
                    {
                        "id": run_id,
                        "point": p.id,
                        "phase": phase,
                        "seed": seed,
                        "cache_salt": salt,
                        "max_concurrency": p.max_concurrency,
                        "request_rate": None if math.isinf(p.request_rate) else p.request_rate,
                        "timeout_s": w.run_timeout_s,
                        "argv": argv,
                    }
                )
    return runs


def plan_bench(
    workload: Workload,
    plan: Plan,
    host_out: str,
    host_online_cpus: str,
    server_cpuset: str,
    client_cpus: str = "",
    gpu_class: Mapping[str, Any] | None = None,
    seed_offset: int = 0,
    cache_salt: str | None = None,
) -> dict[str, Any]:
    """The client's plan, its container's argv and the bench manifest, from the deployment's plan.

    `plan` is the run's plan (serving/plan.py; the serving container must be its launch, which the bench role
    checks first); `host_out` the host directory the client container writes into (mounted at /bench);
    `server_cpuset` what the running serving container is pinned to (docker inspect), "" for unpinned;
    `client_cpus` pins the client (bench_client_cpus), else the CPUs the NUMA plan keeps for it, else the host's
    outside the server's set.
    """
    if plan.launch is None or plan.bench is None:
        raise InputError(f"the plan has no serving container on {plan.host}: " + "; ".join(plan.failures))
    targets = plan.bench
    profile = plan.profile
    container = plan.launch.spec["name"]
    placement = place_client(host_online_cpus, server_cpuset, client_cpus, targets.client_cpus)
    runs = client_runs(workload, plan.base_url, targets.served_name, targets.tokenizer, seed_offset, cache_salt)
    samplers_dir = f"{profile.probes.sidecar_host_dir}/{container}" if profile.probes.sidecar_samplers else ""
    image = targets.image
    client_plan = {
        "schema_version": SCHEMA_VERSION,
        "base_url": plan.base_url,
        "out": f"{CLIENT_DIR}/out",
        "samplers_dir": CLIENT_SAMPLERS_DIR if samplers_dir else None,
        "prefix_cache": workload.prefix_cache,
        # The client reads the key from the key file among the volumes below (serving/bench_client.py).
        "api_key": targets.api_key,
        "runs": runs,
    }
    argv = [
        "docker", "run", "--rm", "--name", f"{container}-bench",
        "--network", "host",
        "--cpuset-cpus", placement.client_cpus,
        "--label", "refdeploy.role=bench-client",
        "-v", f"{host_out}:{CLIENT_DIR}",
    ]  # fmt: skip
    # The serving container's volumes, read-only: the tokenizer resolves as it does in the server.
    for v in targets.volumes:
        argv += ["-v", v]
    if samplers_dir:
        argv += ["-v", f"{samplers_dir}:{CLIENT_SAMPLERS_DIR}:ro"]
    argv += ["--entrypoint", "python3", image, f"{CLIENT_DIR}/bench_client.py", f"{CLIENT_DIR}/plan.json"]
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "kind": "bench",
        "host": plan.host,
        "workload": workload.model_dump(mode="json"),
        "profile": redact(profile.model_dump(mode="json")),
        "runtime_image": image,
        "server": {
            "container": container,
            "argv": plan.launch.spec["command"],
            "cpuset": placement.server_cpus,
            "spec_digest": plan.launch.spec_digest,
        },
        "stand_in": plan.launch.stand_in,
        "client": asdict(placement),
        "tool": f"vllm bench serve ({plan.launch.images.distribution} {plan.launch.images.version}, the runtime image)",
        "tokenizer": targets.tokenizer,
        "base_url": plan.base_url,
        "seed_offset": seed_offset,
        "cache_salt": cache_salt,
        "runs": [
            {k: r[k] for k in ("id", "point", "phase", "seed", "cache_salt", "max_concurrency", "request_rate")}
            for r in runs
        ],
        "gpu_class": dict(gpu_class) if gpu_class else None,
        "api": {"key": bool(targets.api_key), "loopback": plan.api.loopback},
    }
    # Per run: the timeout, the client's start-up and a margin for metrics snapshots.
    timeout_s = int(sum(r["timeout_s"] + 30 for r in runs) + 120)
    return {"client_plan": client_plan, "docker_argv": argv, "manifest": manifest, "timeout_s": timeout_s}


# --- conditions: what must match between two runs that are compared --------------------------------------------

# Fields that name or describe a run without changing its conditions.
# Not conditions: names and descriptions, and the number of measured runs (the sample's size, which the
# comparison's intervals account for; five runs against three compare the same workload).
_NOT_CONDITIONS = (
    "profile.name",
    "profile.description",
    "workload.description",
    "workload.name",
    "workload.runs",
    "gpu_class",
)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = data
    return out


def conditions(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The fixed conditions of a bench: the workload, the profile, the image, where the client ran, the host.

    The server's argv and cpuset are rendered from the profile, so they are not compared twice.
    """
    wanted = {
        "host": manifest.get("host"),
        "runtime_image": manifest.get("runtime_image"),
        "stand_in": bool(manifest.get("stand_in")),
        "workload": manifest.get("workload"),
        "profile": manifest.get("profile"),
        "client": {k: (manifest.get("client") or {}).get(k) for k in ("client_cpus", "shares_server_cpus")},
    }
    flat = flatten(wanted)
    return {k: v for k, v in flat.items() if not any(k == n or k.startswith(n + ".") for n in _NOT_CONDITIONS)}


# --- per-request observations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestObs:
    index: int
    success: bool
    start_s: float | None  # client send time, seconds after the run's first send
    input_tokens: int | None
    output_tokens: int | None  # N, the server's usage count
    chunks: int  # streamed chunks that carried choices: 1 + the chunk intervals
    ttft_s: float | None  # t1 - t0
    e2el_s: float | None  # tN - t0
    tpot_s: float | None  # (tN - t1) / (N - 1)
    decode_tok_s: float | None  # (N - 1) / (tN - t1)
    chunk_intervals_s: tuple[float, ...]
    error: str

    @property
    def e2e_tok_s(self) -> float | None:
        """N / (tN - t0): tokens over the request's wall time, prefill included (another denominator than the
        decode rate; the source's 57.6 tok/s is this)."""
        if not self.success or not self.output_tokens or not self.e2el_s:
            return None
        return self.output_tokens / self.e2el_s


def _float(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else None


def _at(data: Mapping[str, Any], key: str, i: int) -> Any:
    seq = data.get(key)
    return seq[i] if isinstance(seq, list) and i < len(seq) else None


def parse_requests(result: Mapping[str, Any]) -> list[RequestObs]:
    """Per-request observations from a `vllm bench serve --save-detailed` result."""
    lists = [result.get(k) for k in ("ttfts", "latencies", "errors")]
    n = max((len(v) for v in lists if isinstance(v, list)), default=0)
    starts = [_float(s) for s in result.get("start_times") or []]
    t_first = min((s for s in starts if s is not None), default=None)
    out: list[RequestObs] = []
    for i in range(n):
        error = str(_at(result, "errors", i) or "")
        ttft = _float(_at(result, "ttfts", i))
        e2el = _float(_at(result, "latencies", i))
        n_out = _at(result, "output_lens", i)
        n_out = int(n_out) if isinstance(n_out, int | float) else None
        itls = _at(result, "itls", i)
        intervals = tuple(float(x) for x in itls) if isinstance(itls, list) else ()
        success = not error and ttft is not None and e2el is not None
        tpot = rate = None
        if success and n_out is not None and n_out > 1 and ttft is not None and e2el is not None and e2el > ttft:
            tpot = (e2el - ttft) / (n_out - 1)
            rate = (n_out - 1) / (e2el - ttft)
        start = starts[i] if i < len(starts) else None
        n_in = _at(result, "input_lens", i)
        out.append(
            RequestObs(
                index=i,
                success=success,
                start_s=(start - t_first) if start is not None and t_first is not None else None,
                input_tokens=int(n_in) if isinstance(n_in, int | float) else None,
                output_tokens=n_out,
                chunks=(len(intervals) + 1) if success else 0,
                ttft_s=ttft,
                e2el_s=e2el,
                tpot_s=tpot,
                decode_tok_s=rate,
                chunk_intervals_s=intervals,
                error=error.strip().splitlines()[-1][:300] if error.strip() else "",
            )
        )
    return out


# --- statistics ----------------------------------------------------------------------------------------------


def describe(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """median, min, max and n of the finite values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def bootstrap_diff(
    a_runs: Sequence[Sequence[float]],
    b_runs: Sequence[Sequence[float]],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    iterations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """stat(B) - stat(A) and its bootstrap confidence interval, for one bench per side (runs of requests).

    Two-level resampling: runs with replacement, then observations within each chosen run. Requests of one
    run share its conditions, so resampling requests alone would ignore the run-to-run spread (REFERENCE §1:
    about ±12% here) and call noise a difference.
    """
    return bootstrap_diff_benches([a_runs], [b_runs], stat, iterations, level, seed)


def bootstrap_diff_benches(
    a: Sequence[Sequence[Sequence[float]]],
    b: Sequence[Sequence[Sequence[float]]],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    iterations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """stat(B) - stat(A) with its bootstrap interval when each side is several benches (of runs of requests).

    Three levels: benches, then runs within a bench, then requests within a run. Runs of one bench are not
    independent either: on this shared machine, back-to-back benches of one deploy differed by ~20% while the
    runs inside each agreed, so with several benches per side the bench is the unit that is resampled. With
    one bench per side that level is fixed, and drift between the two benches is inside the effect.
    """
    side_a = [x for x in ([list(r) for r in bench if r] for bench in a) if x]
    side_b = [x for x in ([list(r) for r in bench if r] for bench in b) if x]
    if not side_a or not side_b:
        raise ValueError("both sides need at least one run with observations")
    rng = random.Random(seed)

    def resample(benches: list[list[list[float]]]) -> list[float]:
        pooled: list[float] = []
        for _ in benches:
            bench = benches[rng.randrange(len(benches))] if len(benches) > 1 else benches[0]
            for _ in bench:
                run = bench[rng.randrange(len(bench))]
                pooled.extend(run[rng.randrange(len(run))] for _ in run)
        return pooled

    def flat(benches: list[list[list[float]]]) -> list[float]:
        return [x for bench in benches for r in bench for x in r]

    est = stat(flat(side_b)) - stat(flat(side_a))
    diffs = sorted(stat(resample(side_b)) - stat(resample(side_a)) for _ in range(iterations))
    lo_i = math.floor((1 - level) / 2 * iterations)
    hi_i = min(iterations - 1, math.ceil((1 + level) / 2 * iterations) - 1)
    return est, diffs[lo_i], diffs[hi_i]


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df degrees of freedom (df >= 1, 0.5 <= p < 1; Welch's df is
    fractional): scipy's, imported here because only a comparison with several benches a side needs it."""
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df >= 1, got p={p}, df={df}")
    from scipy import stats

    return float(stats.t.ppf(p, df))


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """mean(b) - mean(a) and its Welch t interval, over per-bench figures; None with fewer than 2 a side.

    The bootstrap cannot say how far two or three benches a side may drift apart by chance (it underestimates
    spread at such small n); Student's t with Welch's degrees of freedom can, and is wide when it should be.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.mean(b) - statistics.mean(a)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    t = t_quantile(1 - (1 - level) / 2, max(1.0, df))
    return diff, diff - t * se, diff + t * se


# --- one run, read back ---------------------------------------------------------------------------------------


def outstanding(obs: Sequence[RequestObs]) -> dict[str, float | None]:
    """Requests in flight as the client saw them: the maximum and the time-weighted mean over the run."""
    events: list[tuple[float, int]] = []
    for o in obs:
        if o.start_s is None:
            continue
        end = o.start_s + (o.e2el_s if o.e2el_s is not None else 0.0)
        events += [(o.start_s, 1), (end, -1)]
    if not events:
        return {"max": None, "mean": None}
    events.sort(key=lambda e: (e[0], e[1]))
    level = peak = 0
    area = 0.0
    last = events[0][0]
    for t, step in events:
        area += level * (t - last)
        last = t
        level += step
        peak = max(peak, level)
    span = events[-1][0] - events[0][0]
    return {"max": float(peak), "mean": area / span if span > 0 else float(peak)}


def achieved_rate(obs: Sequence[RequestObs]) -> float | None:
    """Requests sent per second between the first and the last send: (n - 1) / (t_last - t_first)."""
    starts = sorted(o.start_s for o in obs if o.start_s is not None)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return None
    return (len(starts) - 1) / (starts[-1] - starts[0])


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0


def server_figures(before_text: str, after_text: str) -> dict[str, Any]:
    """The server's side of a run: histogram and counter deltas between the two /metrics snapshots."""
    from probes import metrics as m

    d = m.delta(m.snapshot_from_text(before_text, 0.0, 0.0), m.snapshot_from_text(after_text, 0.0, 0.0))

    def hist(name: str) -> dict[str, float | None]:
        hs = m.find_histograms(d, name)
        count = sum(h.count for h in hs)
        total = sum(h.sum_s for h in hs)
        p50 = hs[0].p50_s if len(hs) == 1 else None
        return {"count": count, "mean_ms": _ms(total / count) if count else None, "p50_ms": _ms(p50)}

    success = m.counter_by_label(d, m.REQUEST_SUCCESS, "finished_reason")
    return {
        "restarted": d.reset_detected,
        "requests_finished": sum(success.values()),
        "finished_reason": success,
        "prompt_tokens": m.counter_sum(d, m.PROMPT_TOKENS),
        "generation_tokens": m.counter_sum(d, m.GENERATION_TOKENS),
        "prefix_cache_queries": m.counter_sum(d, m.PREFIX_CACHE_QUERIES),
        "prefix_cache_hits": m.counter_sum(d, m.PREFIX_CACHE_HITS),
        "preemptions": m.counter_sum(d, m.PREEMPTIONS),
        "ttft": hist("vllm:time_to_first_token_seconds"),
        "itl": hist("vllm:inter_token_latency_seconds"),
        "tpot": hist("vllm:request_time_per_output_token_seconds"),
        "e2e": hist("vllm:e2e_request_latency_seconds"),
        "queue": hist("vllm:request_queue_time_seconds"),
        "prefill": hist("vllm:request_prefill_time_seconds"),
        "decode": hist("vllm:request_decode_time_seconds"),
    }


def summarize_run(
    run: Mapping[str, Any],
    status: Mapping[str, Any],
    result: Mapping[str, Any] | None,
    metrics_before: str | None,
    metrics_after: str | None,
    workload: Mapping[str, Any],
) -> dict[str, Any]:
    """One run's figures and flags, from its raw artifacts (status.json, result.json, the two snapshots)."""
    flags: list[str] = []
    state = str(status.get("status", "not run"))
    if state != "ok":
        flags.append(f"run {state}: {status.get('reason', 'no reason recorded')}")
    obs = parse_requests(result) if result else []
    ok = [o for o in obs if o.success]
    failed = len(obs) - len(ok)
    if result is not None and failed:
        errs = sorted({o.error for o in obs if not o.success and o.error})[:3]
        flags.append(f"{failed} of {len(obs)} requests failed" + (f" ({'; '.join(errs)})" if errs else ""))
    if result is not None and len(obs) != int(workload["num_prompts"]):
        flags.append(f"{len(obs)} requests recorded, {workload['num_prompts']} requested")
    asked = int(workload["output_len"])
    short = [o for o in ok if o.output_tokens != asked]
    if short:
        got = sorted({o.output_tokens for o in short}, key=lambda x: -1 if x is None else x)
        flags.append(
            f"output length mismatch: {len(short)} of {len(ok)} requests returned {got} tokens, {asked} requested "
            "(the denominators differ)"
        )
    grouped_requests = sum(1 for o in ok if o.output_tokens is not None and o.chunks < o.output_tokens)
    grouped = grouped_requests > 0
    tokens_per_chunk = describe([o.output_tokens / o.chunks for o in ok if o.output_tokens and o.chunks])
    server: dict[str, Any] | None = None
    if metrics_before and metrics_after:
        try:
            server = server_figures(metrics_before, metrics_after)
        except ValueError as exc:
            flags.append(f"metrics snapshots unreadable: {exc}")
    elif state != "not run":
        flags.append("no metrics snapshot pair: the server's side of this run is unknown")
    if server is not None:
        if server["restarted"]:
            flags.append("the server restarted during the run")
        hits = server["prefix_cache_hits"]
        if hits:
            flags.append(f"prefix-cache hits where none may be: {hits:g} tokens (the cache served part of the prefill)")
        client_tpot = describe([_ms(o.tpot_s) for o in ok])["median"]
        server_tpot = server["tpot"]["mean_ms"]
        if client_tpot is not None and server_tpot and client_tpot < MIN_CLIENT_OVER_SERVER_TPOT * server_tpot:
            flags.append(
                f"{BUFFERED_STREAM}: the client's TPOT median {client_tpot:.3g} ms is under "
                f"{MIN_CLIENT_OVER_SERVER_TPOT:.0%} of the server's {server_tpot:.3g} ms "
                "(vllm:request_time_per_output_token_seconds): the tokens reached the client in bursts, so its chunk "
                "intervals, TPOT and decode rate are not the server's"
            )
        client_tokens = sum(o.output_tokens or 0 for o in obs)
        gen = server["generation_tokens"]
        if result is not None and gen is not None and gen != client_tokens:
            flags.append(
                f"the server generated {gen:g} tokens in the window, the client counted {client_tokens}: "
                "other traffic reached the server, or requests were cut off"
            )
    rate = achieved_rate(obs)
    requested = run.get("request_rate")
    rate_ratio = rate / requested if rate is not None and requested else None
    if rate_ratio is not None and rate_ratio < MIN_ACHIEVED_RATE_RATIO:
        flags.append(
            f"achieved arrival rate {rate:.3g} req/s is {rate_ratio:.1%} of the requested {requested:g}: "
            "the client did not sustain it"
        )
    duration = _float((result or {}).get("duration"))
    out_tokens = sum(o.output_tokens or 0 for o in ok)
    intervals = [x for o in ok for x in o.chunk_intervals_s]
    return {
        "id": run["id"],
        "point": run["point"],
        "phase": run["phase"],
        "seed": run.get("seed"),
        "max_concurrency": run.get("max_concurrency"),
        "request_rate": requested,
        "status": state,
        "valid": state == "ok" and not flags,
        "flags": flags,
        "started_unix_s": status.get("started_unix_s"),
        "ended_unix_s": status.get("ended_unix_s"),
        "requests": len(obs),
        "requests_ok": len(ok),
        "requests_failed": failed,
        "duration_s": duration,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / duration if duration else None,
        "request_s": len(ok) / duration if duration else None,
        "ttft_ms": describe([_ms(o.ttft_s) for o in ok]),
        "tpot_ms": describe([_ms(o.tpot_s) for o in ok]),
        "decode_tok_s": describe([o.decode_tok_s for o in ok]),
        "e2el_ms": describe([_ms(o.e2el_s) for o in ok]),
        "chunk_interval_ms": describe([x * 1000 for x in intervals]),
        "grouped_streaming": grouped,
        "grouped_requests": grouped_requests,
        "tokens_per_chunk": tokens_per_chunk,
        "achieved_rate_req_s": rate,
        "achieved_over_requested": rate_ratio,
        "outstanding": outstanding(obs),
        "vllm_reported": {
            k: (result or {}).get(k)
            for k in ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "median_e2el_ms", "output_throughput")
        },
        "server": server,
    }


def pool_point(
    point_id: str, runs: Sequence[Mapping[str, Any]], obs: Mapping[str, Sequence[RequestObs]]
) -> dict[str, Any]:
    """A point's measured runs pooled: per-request figures over all their requests, per-run rates across runs."""
    measured = [r for r in runs if r["point"] == point_id and r["phase"] == "measured"]
    usable = [r for r in measured if r["status"] == "ok"]
    reqs = [o for r in usable for o in obs.get(r["id"], []) if o.success]
    first = measured[0] if measured else {}
    return {
        "point": point_id,
        "max_concurrency": first.get("max_concurrency"),
        "request_rate": first.get("request_rate"),
        "runs": len(measured),
        "runs_ok": len(usable),
        "runs_valid": sum(1 for r in measured if r["valid"]),
        "ttft_ms": describe([_ms(o.ttft_s) for o in reqs]),
        "tpot_ms": describe([_ms(o.tpot_s) for o in reqs]),
        "decode_tok_s": describe([o.decode_tok_s for o in reqs]),
        "e2e_tok_s": describe([o.e2e_tok_s for o in reqs]),
        "e2el_ms": describe([_ms(o.e2el_s) for o in reqs]),
        "chunk_interval_ms": describe([x * 1000 for o in reqs for x in o.chunk_intervals_s]),
        "output_tok_s": describe([r["output_tok_s"] for r in usable]),
        "request_s": describe([r["request_s"] for r in usable]),
        "achieved_over_requested": describe([r["achieved_over_requested"] for r in usable]),
        "outstanding_max": describe([r["outstanding"]["max"] for r in usable]),
        "grouped_streaming": any(r["grouped_streaming"] for r in usable),
        "grouped_requests": sum(r["grouped_requests"] for r in usable),
        "requests_ok": len(reqs),
        "server_ttft_mean_ms": describe([(r["server"] or {}).get("ttft", {}).get("mean_ms") for r in usable]),
        "server_tpot_mean_ms": describe([(r["server"] or {}).get("tpot", {}).get("mean_ms") for r in usable]),
        "server_queue_mean_ms": describe([(r["server"] or {}).get("queue", {}).get("mean_ms") for r in usable]),
    }


# Reference figures that name an operating point, <definition>_concurrency_<n> (inventory gpu_class.reference),
# and the measured figure with the same definition: (pooled field, what it is).
REFERENCE_DEFINITIONS = {
    "decode_tok_s": ("decode_tok_s", "per-request decode rate (N-1)/(tN-t1), tok/s (median)"),
    "e2e_tok_s": ("e2e_tok_s", "per-request tokens over wall time N/(tN-t0), prefill included, tok/s (median)"),
    "aggregate_tok_s": ("output_tok_s", "aggregate output tokens / run duration, tok/s (median over runs)"),
    "scaling": ("scaling", "aggregate output at this concurrency over that at concurrency 1 (medians)"),
}


def _scaling(pooled: Sequence[Mapping[str, Any]], n: int) -> float | None:
    """Aggregate output at concurrency n over concurrency 1 (seed 004: 97.4/57.6 = 1.7x at 2, 2.5x at 4)."""

    def agg(c: int) -> float | None:
        p = next((p for p in pooled if p.get("max_concurrency") == c and p.get("request_rate") is None), None)
        return p["output_tok_s"]["median"] if p else None

    one, at = agg(1), agg(n)
    return at / one if one and at is not None else None


def reference_beside_measured(
    reference: Mapping[str, Any] | None, pooled: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The class's reference figures that name a concurrency, each beside the measured figure of the same
    definition at that point (a figure of another definition is not compared: the source's 57.6 tok/s is
    tokens over wall time, prefill included, not (N-1)/(tN-t1)). The seed 004 scaling ratios are
    references too: scaling_concurrency_<n>, set beside the measured aggregate(n)/aggregate(1)."""
    out: list[dict[str, Any]] = []
    for key, value in sorted((reference or {}).items()):
        head, sep, n = key.rpartition("_concurrency_")
        if not sep or head not in REFERENCE_DEFINITIONS or not n.isdigit():
            continue
        figure, what = REFERENCE_DEFINITIONS[head]
        c = int(n)
        if figure == "scaling":
            measured = _scaling(pooled, c)
        else:
            point = next((p for p in pooled if p.get("max_concurrency") == c and p.get("request_rate") is None), None)
            measured = point[figure]["median"] if point else None
        out.append({"key": key, "what": what, "concurrency": c, "reference": value, "measured": measured})
    return out


def weight_read_bound(gpu_class: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The class's weight-read bound on decode: bytes read per token / memory bandwidth (seed 000, §9)."""
    ref = (gpu_class or {}).get("reference") or {}
    gb = ref.get("weight_bytes_per_token_gb")
    bw = ref.get("memory_bandwidth_gb_s")
    if not isinstance(gb, int | float) or not isinstance(bw, int | float) or bw <= 0:
        return None
    ms = gb / bw * 1000.0
    return {"weight_bytes_per_token_gb": float(gb), "memory_bandwidth_gb_s": float(bw), "ms_per_token": ms,
            "tok_s": 1000.0 / ms}  # fmt: skip
