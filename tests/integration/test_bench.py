"""make bench and make compare against the real CPU deployment on this machine.

One module-scoped sequence, because each step needs a server in a known state and deploys cost ~1 min:
two benches of the default deploy with four plain `vllm bench serve` runs between them (the plain runs land
within the benches' spread), a bench of the same profile with --max-num-seqs 1 (compared at concurrency 4: TTFT
up, aggregate throughput down; compared without declaring the variable: refused), then the default deploy again.
Whether identical deploys are called different no more often than the level allows is a statistical property
of the intervals, checked by Monte-Carlo on recorded benches (tests/unit/bench/test_compare_calibration.py), not here
by one live A/B/B/A draw (issue 27: that compare and its two benches cost about 100 s a run).
Apart from that sequence: an unknown workload, and the default server killed in the middle of a bench (the bench
fails within bounds, keeping what it had; the default is deployed again, as the other tests expect).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.bench.runs import BUFFERED_STREAM
from serving.plan.render import API_SOCKET, API_SOCKET_MOUNT
from tests.helpers.buffering_proxy import buffering_proxy
from tests.integration.conftest import (
    CONTAINER,
    REPO,
    RUNS,
    SOCKET,
    MakeResult,
    bench_dir,
    docker,
    inspect,
    make,
    ran_bench,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 3

BENCH_RUNS = Path("/var/lib/refdeploy/bench-runs")
WORKLOAD = "smoke"
MEASURED_RUNS = "3"
SEQS1_RUNS = "8"
# Run-to-run spread of decode tok/s on this machine (REFERENCE §1), for runs of one bench.
SPREAD = 0.12
# How far this shared VM's speed moved within one sequence's minutes, between runs of the same command (the plain
# runs of one sequence, CI-like run 2026-12-05 and stop 40's CI): TPOT 4.13 to 5.44 ms (-24%), output 154 to
# 215 tok/s (+40%), while runs of one bench stayed within about 12%. Both of those sequences failed a ±12% band with
# the plain runs *faster* than the benches on either side, so the band for runs minutes apart is this one. It still
# fails what it is for: a method measuring something else (a unit, a setting the client adds) moves a figure by a
# factor, not by a quarter.
DRIFT = 0.25


def summary(d: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((d / "summary.json").read_text())
    return data


def point(s: dict[str, Any], pid: str) -> dict[str, Any]:
    return next(p for p in s["points"] if p["point"] == pid)


def bench(*extra: str, runs: str = MEASURED_RUNS) -> MakeResult:
    return make("bench", f"WORKLOAD={WORKLOAD}", f"RUNS={runs}", *extra, timeout=900)


@dataclass
class DefaultSequence:
    benches: list[Path]
    plain: list[dict[str, Any]]  # each plain `vllm bench serve` run's result.json


@pytest.fixture(scope="module")
def default_sequence(tmp_path_factory: pytest.TempPathFactory) -> DefaultSequence:
    """Two benches of the default deploy with four plain `vllm bench serve` runs between them: B P P P P B.

    The plain runs sit between the benches so that a steady drift on this shared machine falls on both: run
    after all the benches, they once landed 7% beyond the slowest bench run while back-to-back benches drifted
    40%."""
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    out = tmp_path_factory.mktemp("plain")
    benches: list[Path] = []
    plain: list[dict[str, Any]] = []
    for i in range(2):
        b = bench()
        assert b.rc == 0, b.output[-4000:]
        benches.append(bench_dir(b))
        if i == 0:
            plain += [plain_run(benches[-1], k, out / f"plain{k}") for k in range(PLAIN_RUNS)]
    return DefaultSequence(benches, plain)


@pytest.fixture(scope="module")
def default_benches(default_sequence: DefaultSequence) -> list[Path]:
    return default_sequence.benches


@pytest.fixture(scope="module")
def seqs1_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    profile = yaml.safe_load((REPO / "serving" / "profiles" / "cpu-tiny.yaml").read_text())
    profile["vllm"]["max_num_seqs"] = 1
    path = tmp_path_factory.mktemp("profiles") / "cpu-tiny-seqs1.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


@pytest.fixture(scope="module")
def seqs1_bench(default_benches: list[Path], seqs1_profile: Path) -> Iterator[Path]:
    try:
        r = make("deploy", f"PROFILE={seqs1_profile}")
        assert r.rc == 0, r.output[-3000:]
        # Eight runs, not three: at c=4 behind max_num_seqs=1 about one run in four reaches the client in one burst
        # on these 2 cores (its bench flags it, compare leaves it out). A CI run once lost all three of three; a
        # CI-like run lost two of five, and with 3 runs against A's 3, Welch's t over the runs at the family's 99.5%
        # (about 2 degrees of freedom) put 0 inside a +1,340% TTFT and a -71% aggregate output. A run here is ~2 s.
        b = bench(f"PROFILE={seqs1_profile}", runs=SEQS1_RUNS)
        assert b.rc == 0, b.output[-4000:]
        yield bench_dir(b)
    finally:
        # Leave the default deploy running, as the other tests expect.
        make("deploy")


@pytest.mark.timing(
    margin=(
        "aggregate output c4/c1 2.87 against > 1.3; per-request decode c4/c1 0.777 against < 1.12 (one bench "
        "alone once 1.17, so two are pooled); c4 aggregate over one request's rate 3.33 against > 2 (CI-like "
        "run 2026-12-04)"
    )
)
def test_bench_completes_with_its_report_and_page(default_benches: list[Path]) -> None:
    d = default_benches[0]
    s = summary(d)
    assert s["status"] == "ok"
    assert (d / "report.html").read_text().count("<svg") >= 6
    text = (d / "report.txt").read_text()
    assert "TTFT = t1 - t0; TPOT = (tN - t1)/(N - 1)" in text
    assert "client CPUs 0-1 (server 0-1)" in text  # this host has no CPU outside the server's set
    # The server's own cgroup over the bench, read before and after in the probe image: the real container's,
    # with the CPU it used (its quota: none here; its memory limit: the profile's 8 GiB).
    serving = inspect("refdeploy-vllm")
    assert serving is not None
    cg = s["server_cgroup"]
    assert cg[0].startswith("cgroup /") and serving["Id"] in cg[0], cg
    assert "(memory limit 8,192 MiB)" in cg[0] and "CPU used " in cg[0], cg
    assert "the server's cgroups over the bench (cgroup-before.json, cgroup-after.json):" in text
    assert json.loads((d / "cgroup-before.json").read_text())["status"] == "successful"
    # The worker's memory while decoding, logged inside it during the bench (patch 0003, every 10 s of decode).
    kept = json.loads((d / "memory-phases.json").read_text())["at_decode"]["ranks"]["0"]
    assert kept["in_window"] and kept["phase"] == "decode", kept
    assert any(ln.startswith("  memory at decode, rank 0: rss ") and ln.endswith("(logged in the window)")
               for ln in text.splitlines()), text  # fmt: skip
    # Fixed conditions verified from the raw artifacts: no cache hits, every request as long as asked.
    assert s["prefix_cache"]["hits_in_measured_runs"] == 0
    assert s["output_length_mismatch"] == []
    measured = [r for r in s["runs"] if r["phase"] == "measured"]
    assert len(measured) == 2 * int(MEASURED_RUNS), [r["id"] for r in measured]
    # Every run valid, but for a stream that reached the client in one burst (2 shared cores): the bench flags
    # it against the server's TPOT (the report says so), and compare leaves it out.
    for r in measured:
        assert r["valid"] or all(f.startswith("buffered stream:") for f in r["flags"]), r["flags"]
    for r in measured:
        assert r["server"]["generation_tokens"] == r["output_tokens"] == 8 * 32
        assert (d / "runs" / r["id"] / "result.json").is_file()
        assert (d / "runs" / r["id"] / "metrics-before.txt").is_file()

    # The scaling experiment: aggregate throughput grows with concurrency, each request's decode rate does not.
    # Per request, c4 and c1 are close on this tiny model (a batch of 4 costs a step little more than 1; a CI
    # run measured 85.95 vs 85.26 tok/s), so "does not grow" means: no faster than the run-to-run spread allows.
    # The per-request rate is the server's (its TPOT histogram): the client's own is lost when a stream arrives in
    # one burst, which happens here on 2 shared cores at c1 and c4 alike (REFERENCE §11; one run measured a
    # client decode median of 436,366 tok/s at c4, TPOT 0.0018 ms, while the server's TPOT was 1.47 ms).
    # Over both default benches (the median of their medians), not the first alone: within one bench every
    # c1 run precedes every c4 run, so a slow minute falls on one point only. A CI run's first bench had a c1
    # server TPOT of 3.62 ms and c4 of 3.09 ms, where the next three had 2.53-2.95 (c1) and 3.37-4.37 (c4).
    def pooled(pid: str, figure: str) -> float:
        return float(statistics.median(point(summary(b), pid)[figure]["median"] for b in default_benches))

    c1_out, c4_out = pooled("c1", "output_tok_s"), pooled("c4", "output_tok_s")
    assert c4_out > 1.3 * c1_out
    server_c1, server_c4 = (1000 / pooled(pid, "server_tpot_mean_ms") for pid in ("c1", "c4"))
    assert server_c4 < (1 + SPREAD) * server_c1
    assert c4_out > 2 * server_c4  # aggregate is not a request's rate
    assert (d / "samplers" / "vmstat.log").stat().st_size > 0


def plain_vllm_bench_serve(argv: list[str], image: str, out: Path) -> dict[str, Any]:
    """`vllm bench serve` run by hand, the way REFERENCE §4 says, outside make bench. vLLM has no address: the run
    reaches its unix socket (the socket's directory mounted, as the engine's user) through the transport the bench
    client uses too (probes/base/unix_http.py route_aiohttp: aiohttp's UnixConnector for vLLM's TCPConnector)."""
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    docker(
        "run", "--rm", "--network", "none", "-v", f"{out}:/out",
        "-v", "/var/lib/refdeploy/models/tiny-llama:/models/tiny-llama:ro",
        "-v", f"{Path(SOCKET).parent}:{API_SOCKET_MOUNT}:ro",
        "-v", f"{REPO / 'probes' / 'base' / 'unix_http.py'}:/opt/unix_http/unix_http.py:ro",
        "--entrypoint", "python3", image, "-c",
        "import argparse, sys\nsys.path.insert(0, '/opt/unix_http')\nfrom unix_http import route_aiohttp\n"
        f"route_aiohttp({API_SOCKET!r})\n"
        "from vllm.benchmarks.serve import add_cli_args, main\n"
        "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))",
        *argv,
    )  # fmt: skip
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result


PLAIN_PROMPTS = 32
PLAIN_RUNS = 4


def plain_run(d: Path, i: int, out: Path) -> dict[str, Any]:
    """The c1 measured run of bench `d`, made by a plain `vllm bench serve` with its own seed and cache salt, and
    32 prompts instead of 8: a plain run has no warm-up and no repeats, and with 8 its TPOT varied ±18% here
    (1.24 to 1.79 ms over three runs), with 32 within ±6%."""
    manifest = json.loads((d / "manifest.json").read_text())
    run = next(r for r in json.loads((d / "plan.json").read_text())["runs"] if r["id"] == "c1-m1")
    argv = ["/out" if a.startswith("/bench/out/") else a for a in run["argv"]]
    argv[argv.index("--seed") + 1] = str(424242 + i)
    argv[argv.index("--num-prompts") + 1] = str(PLAIN_PROMPTS)
    if "--extra-body" in argv:  # a salt no bench used: the random prompts of this tiny vocabulary share prefixes
        argv[argv.index("--extra-body") + 1] = json.dumps({"cache_salt": f"plain-{i}-{time.time_ns()}"})
    return plain_vllm_bench_serve(argv, manifest["runtime_image"], out)


@pytest.mark.timing(
    margin=(
        "plain medians TPOT 4.695 ms against the ±25% band's 4.06 (bench runs 5.41-6.29 ms, CI-like run "
        "2026-12-05) and 202 tok/s against its 224 (bench runs 128-179, stop 40's CI); the ±12% band failed both"
    )
)
def test_bench_agrees_with_a_plain_vllm_bench_serve(
    default_sequence: DefaultSequence, record_property: Callable[[str, object], None]
) -> None:
    """The plain runs, between the two benches, against the c1 runs of both: the plain median
    lies within the bench runs' range (the method's run-to-run spread over the same minutes), widened by the
    machine's measured drift over a sequence's minutes (DRIFT). What this catches is a method that measures
    something else (a wrong unit, a setting the client adds); the definitions themselves are checked exactly
    against vLLM's captured results in tests/unit/bench/test_bench.py."""
    c1_runs = [
        r
        for b in default_sequence.benches
        for r in summary(b)["runs"]
        if r["point"] == "c1" and r["phase"] == "measured"
    ]
    assert len(default_sequence.plain) == PLAIN_RUNS and len(c1_runs) == 2 * int(MEASURED_RUNS)
    # Judged as the bench judges its own runs: a stream that reached the client in one burst measured the client,
    # not the server (its TPOT is under half the server's), in a bench run and a plain run alike.
    server_tpot = statistics.median(r["server"]["tpot"]["mean_ms"] for r in c1_runs)
    c1_runs = [r for r in c1_runs if r["valid"]]
    plain = [p for p in default_sequence.plain if p["median_tpot_ms"] >= 0.5 * server_tpot]
    assert len(c1_runs) >= 3 and len(plain) >= 2, (len(c1_runs), [p["median_tpot_ms"] for p in default_sequence.plain])
    for label, bench_values, plain_values in (
        ("TPOT ms", [r["tpot_ms"]["median"] for r in c1_runs], [p["median_tpot_ms"] for p in plain]),
        ("output tok/s", [r["output_tok_s"] for r in c1_runs], [p["output_throughput"] for p in plain]),
    ):
        low, high = min(bench_values) * (1 - DRIFT), max(bench_values) * (1 + DRIFT)
        # Its margin, in the junit XML of each run: the plain median and the band it must fall in.
        record_property(f"plain {label}", f"{statistics.median(plain_values):.3f} in [{low:.3f}, {high:.3f}]")
        assert low <= statistics.median(plain_values) <= high, (
            f"{label}: bench runs {bench_values}, plain runs {plain_values}"
        )
    assert all(statistics.median(p["output_lens"]) == 32 and p["completed"] == PLAIN_PROMPTS for p in plain)


@pytest.mark.timing(
    margin=(
        "TTFT +1,060% against > +100%; 3 of 3 figures called worse, 1 needed; B's c4 point 4 of 8 runs valid,"
        " 1 needed (CI-like run 2026-12-04)"
    )
)
def test_compare_max_num_seqs_1_vs_8_at_concurrency_4(default_benches: list[Path], seqs1_bench: Path) -> None:
    # A is the default bench that ran just before B, not both: with several, the interval resamples the benches,
    # and on these 2 shared cores one default bench's c4 runs once had a TTFT of 114-214 ms where the others had
    # 13-18 ms (valid runs, a stalled minute), which put 0 inside a +790% difference. Drift between identical
    # benches is what tests/unit/bench/test_compare_calibration.py is about.
    r = make("compare", f"A={default_benches[-1]}", f"B={seqs1_bench}", "VARIABLE=max_num_seqs")
    assert r.rc == 0, r.output
    assert "profile.vllm.max_num_seqs (A 8, B 1)" in r.output
    assert "\nc4:\n" in r.output, r.output  # a point with no valid run on a side is not compared
    c4 = r.output.split("\nc4:\n", 1)[1]
    lines = {ln.split("  A ")[0].strip(): ln for ln in c4.splitlines() if "  A " in ln}
    ttft, e2e, agg = lines["TTFT"], lines["e2e latency"], lines["aggregate output"]
    # Behind max_num_seqs=1 at c=4, TTFT and e2e rise and aggregate output per run falls; every point estimate must
    # say so, and far: TTFT more than doubles.
    rel = re.search(r"B-A \S+ \(\+([\d.]+)%\)", ttft)
    assert rel and float(rel.group(1)) > 100, ttft
    assert re.search(r"B-A \+", e2e) and re.search(r"B-A -", agg), r.output
    # Which of the three intervals excludes 0 varies run to run on these 2 shared cores, each for its own reason:
    # - TTFT is bimodal (the first request of a wave is served at once, the rest queue), so resampling 8 requests a
    #   run can put 0 inside the bootstrap interval (a CI run: +1361% [-32.7, +523.6]);
    # - aggregate output is one figure a run, and with 3 runs of A, Welch's t over the runs at the family's 99.5%
    #   has about 2 degrees of freedom (t = 14): a CI run's -58% had runs [-1308, +539.5].
    # So at least one must be called worse and none of the three better: a compare that misses a 10x TTFT on all
    # three fails. (TPOT and per-request decode rate may honestly come out better: one sequence at a time decodes
    # faster.)
    called = {f: ln.rsplit("  ", 1)[1] for f, ln in (("TTFT", ttft), ("e2e", e2e), ("aggregate output", agg))}
    assert any(v.endswith("(worse)") for v in called.values()), r.output
    assert not any(v.endswith("(better)") for v in called.values()), r.output


def test_compare_refuses_runs_whose_manifests_differ(default_benches: list[Path], seqs1_bench: Path) -> None:
    r = make("compare", f"A={default_benches[0]}", f"B={seqs1_bench}")
    assert r.rc == 2
    assert "refusing to compare" in r.output
    assert "profile.vllm.max_num_seqs: A=8 B=1" in r.output
    assert "B-A" not in r.output


@pytest.mark.timing(
    margin=(
        "each state's one run must be unflagged: 1 of 52 ordinary runs was flagged (buffered stream) in that "
        "run (CI-like run 2026-12-04)"
    )
)
def test_cold_and_warm_runs_record_their_page_cache_state(tmp_path: Path) -> None:
    """The served files evicted (cold) or read in (warm) before every run, their residency read by the client's
    reader (FOWNER: without it mincore says 100% of a file its reader does not own), and the state compared."""
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    smoke = yaml.safe_load((REPO / "serving" / "workloads" / "smoke.yaml").read_text())
    got: dict[str, dict[str, Any]] = {}
    for state in ("cold", "warm"):
        path = tmp_path / f"{state}.yaml"
        path.write_text(yaml.safe_dump({**smoke, "concurrency": [1], "num_prompts": 4, "warmups": 0,
                                        "runs": 1, "page_cache": state}))  # fmt: skip
        # Its one run ran (ran_bench: a stream two shared cores delivered in one burst is flagged and, being the only
        # run, leaves the bench with nothing valid, which it says); the page cache is read either way, and no other
        # flag may stand.
        d = ran_bench(make("bench", f"WORKLOAD={path}", timeout=600))
        (run,) = summary(d)["runs"]
        assert all(f.startswith(BUFFERED_STREAM) for f in run["flags"]), run["flags"]
        got[state] = run["page_cache"]
        report = (d / "report.txt").read_text()
        assert re.search(rf"page cache of the served files \(\d+ files, [\d.]+ MiB\): {state}, ", report), report
    assert got["cold"]["resident_before"] <= 0.05 and got["warm"]["resident_before"] == 1.0, got
    assert got["cold"]["engine_pids"] >= 3 and got["cold"]["engine_pids_unreadable"] == [], got["cold"]
    assert got["warm"]["engine_read_bytes"] is not None


def test_a_bench_whose_prefix_cache_was_allowed_to_hit_is_left_out_by_name(tmp_path: Path) -> None:
    """The same salt twice (bench_cache_salt): the second bench's runs are served from the blocks the first cached.
    Its bench flags every run that hit, and compare leaves them out, naming each: with none left, it refuses.
    96-token prompts: with 32-token blocks, a 32-token prompt has no full block before its last token to hit."""
    smoke = yaml.safe_load((REPO / "serving" / "workloads" / "smoke.yaml").read_text())
    workload = tmp_path / "longer.yaml"
    workload.write_text(yaml.safe_dump({**smoke, "input_len": 96, "concurrency": [1]}))
    salt = f"refdeploy-test-reuse-{time.time_ns()}"
    args = (f"WORKLOAD={workload}", "RUNS=1", f"ANSIBLE_ARGS=-e bench_cache_salt={salt}")
    first = ran_bench(make("bench", *args, timeout=600))  # its runs ran; whether they were valid is not the point
    again = make("bench", *args, timeout=600)
    hit = bench_dir(again)
    measured = [r for r in summary(hit)["runs"] if r["phase"] == "measured"]
    assert measured and all(
        any(f.startswith("prefix-cache hits where none may be") for f in r["flags"]) for r in measured
    ), [r["flags"] for r in measured]
    # Every measured run left out: the bench measured nothing valid, says so and exits non-zero (issue 46).
    assert again.rc != 0 and summary(hit)["status"] == "invalid", again.output[-4000:]
    assert "measured NOTHING VALID: every measured run was left out (1)" in " ".join(again.output.split())
    r = make("compare", f"A={hit}", f"B={first}")
    assert r.rc != 0
    assert "A and B have no operating point with valid measured runs on both sides" in r.output
    assert f"A left out {hit} c1-m1: prefix-cache hits where none may be" in r.output, r.output[-2000:]


@pytest.mark.timing(margin="12 of 12 direct runs unflagged against more than half (CI-like run 2026-12-04)")
def test_a_stream_a_proxy_buffered_is_flagged_and_a_direct_one_is_not(default_benches: list[Path]) -> None:
    """The same workload through a buffering proxy: the client's chunk times are the proxy's, every measured run is
    flagged against the server's own TPOT and left out of a compare; the direct benches' runs are mostly not."""
    with buffering_proxy(SOCKET) as port:
        b = bench(f"VIA=127.0.0.1:{port}", runs="2")
    proxied = bench_dir(b)
    measured = [r for r in summary(proxied)["runs"] if r["phase"] == "measured"]
    assert measured and all(
        any(f.startswith("buffered stream: the client's TPOT median") for f in r["flags"]) for r in measured
    ), [r["flags"] for r in measured]
    # Nothing valid measured: said, and a non-zero exit (issue 46).
    assert b.rc != 0 and summary(proxied)["status"] == "invalid", b.output[-4000:]
    assert "their chunk intervals are not token intervals" in (proxied / "report.txt").read_text()
    direct = [r for d in default_benches for r in summary(d)["runs"] if r["phase"] == "measured"]
    assert sum(1 for r in direct if not r["flags"]) > len(direct) / 2, [r["flags"] for r in direct]
    r = make("compare", f"A={default_benches[0]}", f"B={proxied}", "VARIABLE=via")
    assert r.rc != 0 and "B left out" in r.output and "buffered stream" in r.output, r.output[-2000:]


def test_unknown_workload_is_refused_before_anything_runs() -> None:
    benches = sorted(RUNS.glob("*/bench"))
    r = make("bench", "WORKLOAD=no-such-workload")
    assert r.rc != 0
    assert "unknown workload 'no-such-workload': known workloads are" in r.output
    assert "default" in r.output and "smoke" in r.output
    assert "Run vllm bench serve in the client container" not in r.output
    assert sorted(RUNS.glob("*/bench")) == benches  # nothing recorded, nothing to mistake for a result


@pytest.mark.timing(margin="the kill landed 0.87 s into a run that lasts 1.63 s: 1.87 (CI-like run 2026-12-04)")
def test_server_dying_mid_run_fails_the_bench_and_keeps_partial_data() -> None:
    """The default deploy's server is killed mid-bench, then deployed again."""
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    # Only this bench's own scratch directory counts: one an earlier run kept may hold a c1-m2 already.
    marker = "*-bench/out/runs/c1-m2"
    kept = set(BENCH_RUNS.glob(marker))
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(REPO), "bench", f"WORKLOAD={WORKLOAD}", f"RUNS={MEASURED_RUNS}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    started = time.monotonic()
    try:
        # Kill the server once the client is past its first measured run's start.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            found = set(BENCH_RUNS.glob(marker)) - kept
            if found:
                break
            assert proc.poll() is None, "the bench ended before the server could be killed"
            time.sleep(0.2)
        else:
            pytest.fail("the bench never reached its second measured run")
        killed = inspect(CONTAINER)
        docker("kill", CONTAINER)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        redeploy = make("deploy")
    assert redeploy.rc == 0, redeploy.output[-3000:]
    elapsed = time.monotonic() - started
    assert proc.returncode != 0
    flat = re.sub(r"\s+", " ", output)  # Ansible folds long messages
    assert "FAILED" in flat and "partial data kept" in flat, output[-3000:]
    # The failure names where the partial data is: that directory, not the newest on disk, is judged.
    named = re.search(re.escape(str(RUNS)) + r"/[^/\s\"']+/bench", re.sub(r"\s+", "", output))
    assert named, output[-3000:]
    d = Path(named.group(0))
    s = summary(d)
    assert s["status"] == "failed"
    by_id = {r["id"]: r for r in s["runs"]}
    assert by_id["c1-m1"]["status"] == "ok"  # what finished before the kill is kept, figures and all
    assert (d / "runs" / "c1-m1" / "result.json").is_file()
    assert by_id["c1-m2"]["status"] == "failed"
    assert by_id["c4-m3"]["status"] == "not run"  # nothing waited on the dead server
    assert "FAILED" in (d / "report.txt").read_text()
    # The bench states the death: the serving container before and after, by ID, restart count and state.
    assert killed is not None
    assert "refdeploy-vllm died or was replaced in the window" in flat and killed["Id"][:12] in flat
    change = json.loads((d / "serving-container.json").read_text())
    assert change["changed"] is True and change["before"]["id"] == killed["Id"]
    assert change["before"]["restart_count"] == killed["RestartCount"]
    assert change["after"]["status"] != "running" or change["after"]["pid"] != killed["State"]["Pid"]
    assert elapsed < 400
