"""The knee search wired into `make bench SEARCH=...`: the plan the controller gives the client, the client's loop
(images/vllm/bench_client.py driving serving/standalone/knee.py), and the report's knee section and figure.

The client's loop is run here with one seam: `vllm bench serve` (bench_client.run_bench) is replaced by a function
that writes a result.json in vLLM 0.32's format (the fields of tests/fixtures/vllm-bench-serve-0.32.0) for a
simulated server whose TTFT grows past the SLO above 6 req/s; the real run is tests/integration/test_knee.py.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.bench import protocol as bench
from serving.bench import report as bench_report
from serving.bench import text as bench_text
from serving.config import workload
from serving.errors import InputError
from tests.helpers.image_scripts import image_script
from tests.helpers.workload_files import serving_plan, write_workload

client = image_script("bench_client")
REPO = Path(__file__).resolve().parents[3]
SERVING = REPO / "serving" / "standalone"  # knee.py and knee_runs.py, as the bench role copies them


def knee_workload(tmp_path: Path, **extra: Any) -> workload.Workload:
    fields = {"input_len": 8, "output_len": 4, "num_prompts": 12, "slo": {"ttft": "200ms"}, "runs": 3,
              "burstiness": float("inf"), **extra}  # fmt: skip
    return workload.load_workload(str(write_workload(tmp_path, **fields)))


def test_a_search_plans_one_warmup_and_leaves_the_loads_to_the_client(tmp_path: Path) -> None:
    w = knee_workload(tmp_path, search={"rate": {"start": 2.0, "limit": 32.0}, "max_runs": 12})
    p = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="rate", cache_salt="salt")
    runs = p["client_plan"]["runs"]
    assert [(r["id"], r["phase"], r["request_rate"]) for r in runs] == [("r2-w1", "warmup", 2.0)]
    s = p["client_plan"]["search"]
    assert (s["kind"], s["start"], s["limit"], s["max_runs"], s["confirm_runs"]) == ("rate", 2.0, 32.0, 12, 3)
    assert s["slo_ms"] == {"ttft_ms": 200.0} and s["min_share"] == 0.9
    for name in ("--request-rate", "--seed", "--result-dir", "--max-concurrency"):
        assert name not in s["argv"]
    assert p["manifest"]["search"]["kind"] == "rate" and "argv" not in p["manifest"]["search"]
    # The bound covers every run the search may make.
    assert p["timeout_s"] >= 12 * w.run_timeout_s


@pytest.mark.parametrize(
    ("kind", "extra", "said"),
    [
        ("rate", {"slo": None}, "SEARCH=rate: workload t has no slo, and the knee is the highest load that meets one"),
        ("sideways", {}, "SEARCH=sideways: give SEARCH=rate (arrival rate, no cap) or SEARCH=concurrency"),
        ("concurrency", {"search": {"concurrency": {"start": 1.5, "limit": 8}}},
         "workload t: search.concurrency start and limit are whole numbers of requests"),
        ("rate", {"search": {"rate": {"start": 8, "limit": 4}}},
         "workload t: search.rate start 8 is above its limit 4"),
    ],
)  # fmt: skip
def test_a_search_that_cannot_run_is_one_line(tmp_path: Path, kind: str, extra: dict[str, Any], said: str) -> None:
    w = knee_workload(tmp_path, **extra)
    with pytest.raises(InputError) as err:
        bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search=kind)
    assert str(err.value).startswith(said)


def test_each_kind_takes_its_ranges_resolution_and_concurrency_none_without_one(tmp_path: Path) -> None:
    """The search's resolution is a rate's; a concurrency range's own resolution (serving/workloads/knee.yaml
    gives 1.0) reaches knee.Search, and without one the client bisects to adjacent integers (None)."""
    ranges = {"rate": {"start": 2.0, "limit": 32.0}, "resolution": 0.3}
    for conc, want in (({"start": 1, "limit": 16}, None), ({"start": 1, "limit": 16, "resolution": 1.0}, 1.0)):
        w = knee_workload(tmp_path, search={**ranges, "concurrency": conc})
        plans = {k: bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search=k)["client_plan"]["search"]
                 for k in ("rate", "concurrency")}  # fmt: skip
        assert (plans["rate"]["resolution"], plans["concurrency"]["resolution"]) == (0.3, want)
    shipped = workload.load_workload("knee")
    assert shipped.search is not None and shipped.search.concurrency.resolution == 1.0


def test_a_searched_run_is_sized_by_time_and_fills_the_batch_many_times(tmp_path: Path) -> None:
    """cpu-tiny runs 8 sequences: a searched run sends at least 4 x 8 prompts whatever the workload's num_prompts,
    and the client sets --num-prompts per run from the rate and search.duration_s (the template has none)."""
    w = knee_workload(tmp_path, num_prompts=8, search={"duration_s": 6, "ramp_up_s": 1})
    s = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="rate")["client_plan"]["search"]
    assert s["min_prompts"] == 4 * 8 and "--num-prompts" not in s["argv"]
    assert (s["duration_s"], s["ramp_up_s"], s["min_completed"], s["check_duration_s"]) == (6, 1, 20, 30)


def simulated_server(knee_rate: float) -> Any:
    """A stand-in for `vllm bench serve`: writes result.json as vLLM 0.32 does, its --num-prompts requests sent
    evenly at the requested rate; TTFT 50 ms at or below `knee_rate`, 900 ms above (past a 200 ms SLO)."""

    def run_bench(argv: list[str], run_dir: Path, timeout_s: float) -> tuple[int | None, bool]:
        rate = float(argv[argv.index("--request-rate") + 1])
        ttft = 0.05 if rate <= knee_rate else 0.9
        n = int(argv[argv.index("--num-prompts") + 1])
        result = {
            "duration": n / rate + 0.2, "completed": n, "failed": 0, "request_goodput": None,
            "ttfts": [ttft] * n, "latencies": [ttft + 0.1] * n, "output_lens": [4] * n, "input_lens": [8] * n,
            "itls": [[0.033] * 3] * n, "errors": [""] * n, "start_times": [100 + i / rate for i in range(n)],
        }  # fmt: skip
        (Path(run_dir) / "result.json").write_text(json.dumps(result))
        return 0, False

    return run_bench


def test_the_client_searches_with_knee_py_and_records_every_run(tmp_path: Path, monkeypatch: Any) -> None:
    w = knee_workload(tmp_path, search={"rate": {"start": 1.0, "limit": 64.0}, "resolution": 0.25})
    plan = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="rate")["client_plan"]
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    monkeypatch.setattr(client, "run_bench", simulated_server(6.0))
    monkeypatch.setattr(client, "http", lambda method, url, timeout=10.0: (200, ""))
    monkeypatch.setattr(client, "engine_io", lambda pid=1: {"pids": {}, "unreadable": {}})
    monkeypatch.syspath_prepend(str(SERVING))  # where the role puts knee.py for the client: beside it
    record: dict[str, Any] = {"runs": []}
    runner = client.Runner({**plan, "out": str(out)}, out, "http://x", None, record)
    client.search_knee(plan["search"], runner, out)
    result = json.loads((out / "search.json").read_text())
    assert result["status"] == "found", result["summary"]
    lo, hi = result["bracket"]
    assert lo <= 6.0 < hi and hi / lo <= 1.25 + 1e-9 and result["knee"] == lo
    made = record["search_runs"]
    # The search's runs, then one steady check at the knee (holds) and one at the load above it (fails).
    assert len(made) == len(result["measurements"]) + 2 == len(record["runs"])
    assert [(c["load"], c["expect"], c["state"]) for c in result["checks"]] == [
        (lo, "holds", "holds"),
        (hi, "fails", "fails"),
    ]
    assert "confirmed by steady runs of 30 s: " in result["summary"], result["summary"]
    # Sized by time: a run at r req/s sends r x 15 s prompts (at least 4 x max_num_seqs 8), a check r x 30 s.
    for r in made:
        want = max(math.ceil(r["request_rate"] * r["duration_s"]), 32)
        assert r["prompts"] == want and r["duration_s"] == (30 if r["search_phase"] == "check" else 15), r
    # Each run has its own seed and directory; each bracketing load was measured confirm_runs times.
    assert len({r["seed"] for r in made}) == len(made)
    assert all((out / "runs" / r["id"] / "result.json").is_file() for r in made)
    for load in (lo, hi):
        assert sum(1 for r in made if r["request_rate"] == load and r["search_phase"] != "check") >= 3
    argv = json.loads((out / "runs" / made[0]["id"] / "argv.json").read_text())
    assert argv[argv.index("--request-rate") + 1] == "1.0" and "--max-concurrency" not in argv
    assert "knee" not in sys.modules or sys.modules["knee"].__file__ == str(SERVING / "knee.py")


def test_the_bench_role_gives_the_client_every_module_it_imports(tmp_path: Path) -> None:
    """The files the role copies into the client's directory (ansible/roles/bench/tasks/main.yml), alone there:
    the client and the modules it imports beside itself, eagerly and for a search, import and read the plan."""
    tasks = yaml.safe_load((REPO / "ansible" / "roles" / "bench" / "tasks" / "main.yml").read_text())
    write = next(t for t in tasks if t["name"].startswith("Bench | Give the client its driver"))
    files = write["refdeploy_write_file"]["files"]
    for name, value in files.items():
        m = re.fullmatch(r"\{\{ lookup\('ansible\.builtin\.file', _bench_src ~ '([^']+)', rstrip=false\) \}\}", value)
        if m:
            assert Path(m.group(1)).name == name, (name, value)
            shutil.copy(REPO / m.group(1), tmp_path / name)
    assert "plan.json" in files
    assert {p.name for p in tmp_path.glob("*.py")} >= {"bench_client.py", "knee.py", "knee_runs.py"}
    run = "import sys, bench_client, knee_runs; sys.exit(bench_client.main(['missing.json']))"
    out = subprocess.run([sys.executable, "-E", "-s", "-c", run], cwd=tmp_path, capture_output=True, text=True)
    said = "bench client: bad plan missing.json: [Errno 2] No such file or directory: 'missing.json'"
    assert (out.returncode, out.stderr.splitlines()[-1:]) == (2, [said]), out.stderr


def test_the_report_states_the_knee_and_draws_it(tmp_path: Path, monkeypatch: Any) -> None:
    w = knee_workload(tmp_path, search={"rate": {"start": 2.0, "limit": 16.0}})
    p = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="rate")
    bench_dir = tmp_path / "bench"
    out = bench_dir
    (out / "runs").mkdir(parents=True)
    monkeypatch.setattr(client, "run_bench", simulated_server(5.0))
    monkeypatch.setattr(client, "http", lambda method, url, timeout=10.0: (200, ""))
    monkeypatch.setattr(client, "engine_io", lambda pid=1: {"pids": {}, "unreadable": {}})
    monkeypatch.syspath_prepend(str(SERVING))
    record: dict[str, Any] = {"runs": [], "status": "ok"}
    client.search_knee(p["client_plan"]["search"], client.Runner(p["client_plan"], out, "http://x", None, record), out)
    (bench_dir / "manifest.json").write_text(json.dumps(p["manifest"]))
    (bench_dir / "client.json").write_text(json.dumps(record))
    s = bench_report.write_report(bench_dir)
    text = (bench_dir / "report.txt").read_text()
    result = json.loads((bench_dir / "search.json").read_text())
    assert f"knee search (SEARCH=rate): {result['summary']}" in text
    assert "bracket 4.76 req/s: holds (median share met 1.000 >= 0.9" in text and "bracket 5.66 req/s: fails" in text
    assert "figure: knee.svg" in text
    assert s["knee"]["runs"] and {r["load"] for r in s["knee"]["runs"]} >= set(result["bracket"])
    page = (bench_dir / "report.html").read_text()
    assert '<div id="knee">' in page and 'id="knee-line-' in page


def test_a_bracketing_load_is_named_as_its_point_is() -> None:
    # The search bisects in floats: a CI run printed "bracket 64.0 req/s" beside its point "rate 64 req/s".
    share = {"median": 1.0, "min": 1.0, "max": 1.0, "n": 3}
    loads = [{"load": x, "verdict": v, "reason": "r", "share_met": share, "goodput_req_s": share}
             for x, v in ((64.0, "holds"), (90.5, "fails"))]  # fmt: skip
    knee = {"kind": "rate", "unit": "req/s", "left_out_here": [],
            "result": {"summary": "knee 64 req/s", "bracket_loads": loads}}  # fmt: skip
    text = "\n".join(bench_text._knee_lines(knee))
    assert "bracket 64 req/s: holds (r)" in text and "bracket 90.5 req/s: fails (r)" in text, text


def test_a_search_run_the_cache_served_is_not_counted(tmp_path: Path, monkeypatch: Any) -> None:
    # The real metrics snapshots of a bench run, the second with 64 more tokens of prefix-cache hits: the client
    # judges the run as the report would (left out), and the search measures the load again.
    w = knee_workload(tmp_path, search={"rate": {"start": 2.0, "limit": 4.0}, "max_runs": 3, "confirm_runs": 2})
    plan = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="rate")["client_plan"]
    assert plan["search"]["hits_intended"] is False
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-bench-serve-0.32.0" / "c1-m1"
    before = (fixtures / "metrics-before.txt").read_text()
    line = next(ln for ln in before.splitlines() if ln.startswith("vllm:prefix_cache_hits_total"))
    hit = before.replace(line, f"{line.rsplit(' ', 1)[0]} {float(line.rsplit(' ', 1)[1]) + 64}")
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    served = {"n": 0}

    def http(method: str, url: str, timeout: float = 10.0) -> tuple[int, str]:
        if url.endswith("/metrics"):
            served["n"] += 1
            return 200, hit if served["n"] == 2 else before  # the first run's "after" snapshot shows hits
        return 200, ""

    monkeypatch.setattr(client, "run_bench", simulated_server(100.0))
    monkeypatch.setattr(client, "http", http)
    monkeypatch.setattr(client, "engine_io", lambda pid=1: {"pids": {}, "unreadable": {}})
    monkeypatch.syspath_prepend(str(SERVING))
    record: dict[str, Any] = {"runs": []}
    client.search_knee(plan["search"], client.Runner({**plan, "out": str(out)}, out, "http://x", None, record), out)
    result = json.loads((out / "search.json").read_text())
    first = result["measurements"][0]
    assert first["valid"] is False and "prefix-cache hits where none may be: 64 tokens" in first["note"]
    assert result["measurements"][1]["load"] == first["load"] and result["measurements"][1]["valid"] is True


def closed_loop_server(capacity_req_s: float, knee_concurrency: int) -> Any:
    """A stand-in for `vllm bench serve --max-concurrency C`: its --num-prompts requests in waves of C, each wave
    C / capacity s long (at least 0.2 s), TTFT 50 ms up to `knee_concurrency`, 900 ms above (past a 200 ms SLO)."""

    def run_bench(argv: list[str], run_dir: Path, timeout_s: float) -> tuple[int | None, bool]:
        c = int(argv[argv.index("--max-concurrency") + 1])
        n = int(argv[argv.index("--num-prompts") + 1])
        wave = max(0.2, c / capacity_req_s)
        ttft = 0.05 if c <= knee_concurrency else 0.9
        waves = math.ceil(n / c)
        result = {
            "duration": waves * wave, "completed": n, "failed": 0, "request_goodput": None,
            "request_throughput": n / (waves * wave), "ttfts": [ttft] * n, "latencies": [wave] * n,
            "output_lens": [4] * n, "input_lens": [8] * n, "itls": [[0.033] * 3] * n, "errors": [""] * n,
            "start_times": [100 + (i // c) * wave for i in range(n)],
        }  # fmt: skip
        (Path(run_dir) / "result.json").write_text(json.dumps(result))
        return 0, False

    return run_bench


def test_a_concurrency_search_sizes_each_run_from_the_last_throughput(tmp_path: Path, monkeypatch: Any) -> None:
    """The first run from the warm-up's throughput, each next from the last run's: every run holds its concurrency
    for the duration (10 s here), so none is too short, and the knee is found and checked."""
    w = knee_workload(tmp_path, search={"concurrency": {"start": 1, "limit": 16}, "duration_s": 10, "ramp_up_s": 2})
    plan = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="concurrency")["client_plan"]
    out = tmp_path / "out"
    warm = plan["runs"][-1]
    (out / "runs" / warm["id"]).mkdir(parents=True)
    (out / "runs" / warm["id"] / "result.json").write_text(json.dumps({"request_throughput": 5.0}))
    monkeypatch.setattr(client, "run_bench", closed_loop_server(capacity_req_s=20.0, knee_concurrency=4))
    monkeypatch.setattr(client, "http", lambda method, url, timeout=10.0: (200, ""))
    monkeypatch.setattr(client, "engine_io", lambda pid=1: {"pids": {}, "unreadable": {}})
    monkeypatch.syspath_prepend(str(SERVING))
    record: dict[str, Any] = {"runs": []}
    runner = client.Runner({**plan, "out": str(out)}, out, "http://x", None, record)
    assert client.warm_throughput(plan, out) == (1.0, 5.0)
    client.search_knee(plan["search"], runner, out, client.warm_throughput(plan, out))
    result = json.loads((out / "search.json").read_text())
    assert result["status"] == "found" and result["bracket"] == [4, 5], result["summary"]
    made = record["search_runs"]
    # Concurrency 1 after a warm-up of 5 req/s: 5 x 10 s = 50 prompts (above 4 waves and 4 x max_num_seqs 8).
    assert (made[0]["max_concurrency"], made[0]["prompts"]) == (1, 50)
    # Concurrency 2 from concurrency 1's 5 req/s, times sqrt(2): 71 prompts.
    assert (made[1]["max_concurrency"], made[1]["prompts"]) == (2, 71)
    assert all(m["valid"] for m in result["measurements"]), [m["note"] for m in result["measurements"]]
    assert [(c["load"], c["state"]) for c in result["checks"]] == [(4, "holds"), (5, "fails")]
