"""A bench in the field's common result format: llm-d's Benchmark Report v0.2.1, one document per operating point,
bench/benchmark-report/<point>.yaml, so a `make bench` reads beside llm-d's and other tools' results.

Each document is built from the bench directory and its summary (bench_summary.build_summary) and nothing else:

- run: uid and eid from the bench directory (<host>/<ts>/bench) and the point, so re-exporting a bench gives the
  same ids; cid the host; start and end those of the pooled runs (their status.json).
- scenario.stack: the vLLM server as one inference_engine: the engine and its version from the runtime image the
  bench ran (the manifest's `tool`), the served model, its argv as native.args (and as it was, in native.config),
  tensor and pipeline parallelism from that argv. The CPU profile, and a stand-in engine, used no accelerator:
  the schema's count is "total utilized accelerator count", so 0 says so (serving/bench/br_stack.py).
- scenario.load: `vllm bench serve` at this point (a concurrency cap, or a fixed arrival rate), its fixed input and
  output lengths, and the arguments the pooled runs shared.
- results.request_performance.aggregate: per-request statistics pooled over the point's VALID measured runs only
  (summary runs with phase "measured" and valid true), computed from their raw result.json with this
  project's definitions (serving/bench/runs.py parse_requests, seed 000 §1: TTFT = t1 - t0, TPOT = (tN - t1)/(N -
  1) per request, N the server's usage count), never copied from vLLM's own aggregates (serving/bench/br_results.py).
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
No secret reaches a document: no environment variable is copied, and each argv goes through serving.config.redact.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from llmd_benchmark_report.base import WorkloadGenerator
from llmd_benchmark_report.schema_v0_2 import VERSION, BenchmarkReportV02
from pydantic import ValidationError

from serving.bench import br_energy
from serving.bench import protocol as bench
from serving.bench import runs as bench_runs
from serving.bench import trace_events as bench_trace
from serving.bench.br_results import DEFINITIONS, aggregate, grouped_requests
from serving.bench.br_stack import argv_mapping, digest, engine_component, vllm_release
from serving.bench.summary_schema import BenchSummary, PointSummary, RunSummary
from serving.config.redact import redact
from serving.record import memory_phases

BR_DIR = "benchmark-report"
# The Benchmark Report revision the documents declare (the library's).
BR_VERSION: str = VERSION
INDEX_FILE = "index.json"
# The bench report's own files (serving/bench/report.py SUMMARY_JSON, REPORT_TXT, REPORT_HTML;
# serving/bench/summary.py CGROUP_FILES), named here rather than imported: bench_report will call this module, and
# the import graph has no cycle (tests/unit/repo/test_architecture.py). tests/unit/bench/test_br_export.py checks
# the names agree.
SUMMARY_JSON = "summary.json"
REPORT_TXT = "report.txt"
REPORT_HTML = "report.html"
CGROUP_FILES = ("cgroup-before.json", "cgroup-after.json")
# What sends a `dataset: conversations` workload (serving/bench/protocol.py): vLLM 0.32's bench has no multi-turn
# dataset.
CONVERSATIONS_CLIENT = "images/vllm/bench_client.py run_conversations"


class ReportInvalid(ValueError):
    """A document the published validator refuses: a defect in this export, not in the bench."""


def point_label(point: PointSummary) -> str:
    if point.request_rate is not None:
        return f"rate {point.request_rate:g} req/s"
    return f"concurrency {point.max_concurrency}"


def _run_argv(bench_dir: Path, run_id: str) -> list[str]:
    """The run's `vllm bench serve` argv as the client ran it (status.json), redacted."""
    try:
        argv = json.loads((bench_dir / "runs" / run_id / "status.json").read_text()).get("argv")
    except (OSError, ValueError, AttributeError):
        argv = None
    return [str(a) for a in redact(list(argv))] if isinstance(argv, list) else []


def _run_args(bench_dir: Path, run_id: str) -> dict[str, Any]:
    """The run's arguments as the client ran it (status.json), redacted: its `vllm bench serve` argv as a mapping,
    or a conversations run's spec (serving/bench/protocol.py conversation_spec), which has no argv."""
    try:
        spec = json.loads((bench_dir / "runs" / run_id / "status.json").read_text()).get("conversations")
    except (OSError, ValueError, AttributeError):
        spec = None
    if isinstance(spec, dict):
        return dict(redact(spec))
    return argv_mapping(_run_argv(bench_dir, run_id))


# Each run's own by construction (serving/bench/protocol.py client_runs): its seed, its result directory, its cache salt
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
    point: PointSummary,
    args: Mapping[str, Any],
    evidence: Mapping[str, Any],
    requests: Sequence[bench_runs.RequestObs] = (),
) -> dict[str, Any]:
    w = manifest.get("workload") or {}
    _, version = vllm_release(manifest)
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
    if point.point == "trace":
        # A trace replayed on its own timestamps: neither a fixed rate nor a cap.
        pass
    elif point.request_rate is not None:
        standardized["rate_qps"] = float(point.request_rate)
        standardized["concurrency"] = math.inf  # no cap: the schema's .inf
    else:
        # Neither the trace nor a rate: a concurrency point, which pool_point (serving/bench/runs.py) gives its cap.
        assert point.max_concurrency is not None, point.point
        standardized["concurrency"] = int(point.max_concurrency)
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
        "metadata": {"cfg_id": digest(args), "description": description},
        "standardized": standardized,
        "native": {"args": dict(args), "config": dict(evidence)},
    }


def _iso(unix_s: Any) -> str | None:
    if not isinstance(unix_s, int | float) or isinstance(unix_s, bool):
        return None
    return datetime.fromtimestamp(float(unix_s), tz=UTC).isoformat().replace("+00:00", "Z")


# --- evidence --------------------------------------------------------------------------------------------------


def _evidence(
    bench_dir: Path,
    summary: BenchSummary,
    point: PointSummary,
    pooled: Sequence[RunSummary],
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
    measured = [r for r in summary.runs if r.point == point.point and r.phase == "measured"]
    warmups = [r for r in summary.runs if r.point == point.point and r.phase == "warmup"]

    def run_dir(rid: str) -> str | None:
        return f"runs/{rid}/" if (bench_dir / "runs" / rid).is_dir() else None

    def without_none(d: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    return {
        "about": "refdeploy's evidence for this document (serving/bench/br_export.py): every path is relative to the "
        "bench directory, bench_dir, itself relative to this document",
        "bench_dir": "..",
        "definitions": DEFINITIONS,
        "files": {k: v for k, v in files.items() if (bench_dir / v).exists()},
        "absent": sorted(v for v in files.values() if not (bench_dir / v).exists()),
        "runs_pooled": [
            without_none(
                {
                    "id": r.id,
                    "dir": run_dir(r.id),
                    "result": f"runs/{r.id}/{bench.RESULT_FILE}",
                    "seed": r.seed,
                    "started": _iso(r.started_unix_s),
                    "ended": _iso(r.ended_unix_s),
                    "requests": r.requests,
                    "args": dict(own_args.get(r.id) or {}) or None,  # the run's own: its seed, its result dir
                }
            )
            for r in pooled
        ],
        "runs_left_out": [
            without_none({"id": r.id, "dir": run_dir(r.id), "status": r.status, "flags": list(r.flags)})
            for r in measured
            if not r.valid
        ],
        "warmup_runs": [without_none({"id": r.id, "dir": run_dir(r.id)}) for r in warmups],
        "notes": list(notes),
    }


def _notes(summary: BenchSummary, point: PointSummary, pooled: Sequence[RunSummary], grouped: int,
           requests_ok: int) -> list[str]:  # fmt: skip
    """The conditions a reader of the figures must know, in the report's words."""
    m = summary.manifest
    notes: list[str] = []
    if summary.status != "ok":
        notes.append(f"the bench FAILED: {summary.reason or 'no reason recorded'}; this point's valid runs "
                     "completed, and the figures stand on them alone")  # fmt: skip
    client = m.get("client") or {}
    if client.get("note"):
        notes.append(f"client placement: {client['note']}")
    if summary.prefix_cache.note:
        notes.append(f"prefix cache: {summary.prefix_cache.note}")
    page_cache = summary.page_cache
    if page_cache is not None and page_cache.state:
        notes.append(f"page cache of the served files: {page_cache.state}, {page_cache.how}")
    if (m.get("stand_in") or {}).get("what"):
        notes.append(f"a STAND-IN engine ran, not the profile's: {m['stand_in']['what']}")
    if m.get("via"):
        notes.append(f"the client sent through {m['via']}, not to the server itself")
    if grouped:
        notes.append(f"inter_token_latency left out: {grouped} of {requests_ok} requests had chunks that carried "
                     "several tokens (grouped streaming), so chunk intervals are not inter-token latency")  # fmt: skip
    return notes


# --- documents -------------------------------------------------------------------------------------------------


def bench_id(bench_dir: Path) -> str:
    """The bench as runs/ names it, <host>/<ts>/bench: the same wherever the directory is copied to."""
    return "/".join(bench_dir.resolve().parts[-3:])


def point_document(bench_dir: Path, summary: BenchSummary, point: PointSummary) -> tuple[dict[str, Any] | None, str]:
    """(the point's document, not yet validated; "") or (None, why there is none)."""
    manifest = summary.manifest
    pid = point.point
    if manifest.get("profiler"):
        return None, (
            f"a profiled bench: the engine ran with the {manifest['profiler']} profiler configured (make profile), "
            "so its figures carry the profiler's overhead and are not results (seed 000 §6)"
        )
    measured = [r for r in summary.runs if r.point == pid and r.phase == "measured"]
    pooled = [r for r in measured if r.valid]
    if not pooled:
        why = "; ".join(f"{r.id}: {r.flags[0] if r.flags else r.status}" for r in measured)
        return None, f"no valid measured run at {point_label(point)}" + (f" ({why})" if why else "")
    runs: dict[str, list[bench_runs.RequestObs]] = {}
    durations: dict[str, float | None] = {}
    argvs: dict[str, dict[str, Any]] = {}
    for r in pooled:
        try:
            result = json.loads((bench_dir / "runs" / r.id / bench.RESULT_FILE).read_text())
        except (OSError, ValueError) as e:
            # summarize_run judged the run valid from this very file: gone now, the bench directory changed since.
            raise ReportInvalid(f"point {pid}: the valid run {r.id}'s {bench.RESULT_FILE} is unreadable: {e}") from e
        runs[r.id] = bench_runs.parse_requests(result)
        d = result.get("duration")
        durations[r.id] = float(d) if isinstance(d, int | float) and math.isfinite(d) else None
        argvs[r.id] = _run_args(bench_dir, r.id)
    common, own = _split_args(argvs)
    ok = [o for obs in runs.values() for o in obs if o.success]
    notes = _notes(summary, point, pooled, grouped_requests(ok), len(ok))
    stack = [engine_component(manifest)]
    energy = br_energy.point_energy(summary, pid, [r.id for r in pooled], stack[0]["metadata"]["label"])
    evidence = _evidence(bench_dir, summary, point, pooled, own, notes + energy["notes"])
    evidence["energy"] = energy["evidence"]  # J per output token, which the schema has no field for (br_energy.py)
    eid = f"refdeploy:{bench_id(bench_dir)}"
    left_out = [r.id for r in measured if not r.valid]
    description = (
        f"refdeploy bench {bench_id(bench_dir)} at {point_label(point)}: pooled over its valid measured runs, "
        f"{len(pooled)} of {len(measured)} ({', '.join(r.id for r in pooled)})"
        + (f"; left out: {', '.join(left_out)}" if left_out else "")
    )
    # Start and end of the pooled runs. No duration: a run left out between two pooled ones is inside the span.
    time = {
        "start": _iso(min((r.started_unix_s for r in pooled if r.started_unix_s is not None), default=None)),
        "end": _iso(max((r.ended_unix_s for r in pooled if r.ended_unix_s is not None), default=None)),
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
        "results": {"request_performance": {"aggregate": aggregate(runs, durations)}, **energy["results"]},
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


def _yaml(point: PointSummary, data: Mapping[str, Any]) -> str:
    head = (
        f"# llm-d Benchmark Report v{VERSION}: bench point {point.point} ({point_label(point)}), written by\n"
        "# serving/bench/br_export.py from the bench directory (..): figures from the point's valid measured runs'\n"
        "# result.json with refdeploy's definitions; what they stand on: scenario.load.native.config.\n"
    )
    return head + yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=120)


def export_bench(bench_dir: Path, summary: BenchSummary) -> list[Path]:
    """Write bench_dir/benchmark-report/<point id>.yaml for each operating point with a valid measured run, and
    index.json: per point its document and runs, or why it has none. Returns the documents written.

    `summary` is the bench's summary as the schema reads it (the one write_report wrote, or summary.json read back
    with read_summary). Every document is validated
    before any is written: a ReportInvalid leaves the directory as it was. Documents of an earlier export are
    replaced, so a point that lost its valid runs loses its document. Call it once summary.json and report.html
    are written, so that the documents reference them."""
    out_dir = bench_dir / BR_DIR
    ready: list[tuple[Path, str]] = []
    index: list[dict[str, Any]] = []
    for point in summary.points:
        pid = str(point.point)
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
