"""Seed 000 §8's experiment on the 3090 class's stand-in, run as an SRE runs it on a 3090 host: the named procedure
(docs/experiments/pp-receive.sh, docs/experiments/pp-receive.md) with HOST= the 3090 test host and copies of its
rtx3090-pp3 profile, A with the rank trace on and B with the deferred receive too (REFDEPLOY_PP_DEFER_RECV=1).

The 3090 test host is the SSH host of this package; its engine is the stand-in (serving/plan/standin.py): vLLM's
CPU build, the class's PP=3 as PP=2 on this machine's two CPUs, eager. Eager is also why there is no 2x2 here: the
second change of cpu-tiny-pp2's 2x2 is the compiled forward, which the stand-in does not carry, so the procedure
runs with C=none D=none and says the 2x2 was skipped. Everything else is the class's plan: its profile's
max_num_seqs, chunk and seed, its container spec, its NUMA and RAM checks, and the patched runtime's two patches.

What is asserted is the procedure, not the effect: with the trace on, A's second stage received first and B's
received inside its preparation (the patch did what it says, on this host's engine), the outputs stayed within
run-to-run variation, the benches ran the profiles' untraced copies, and the compares judged the two predictions
written first. Their verdicts are printed, whichever they are (on the CPU engine the effect was within
restart-to-restart noise: docs/experiments/pp-receive.md). What it keeps goes to a scratch KEEP=, not docs/.

Opt-in, not in make test: `make test-pp-receive`, about 17 minutes here (859 s on 2026-12-06 before the run mode
captured both A and B first: the hosts, a capture, validate's two deploys, four deploys and benches, a capture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import REPO
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import HOSTS, STAND_IN

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("REFDEPLOY_PP_RECEIVE") != "1", reason="make test-pp-receive runs it"),
]
# The stand-in's engines on the 3090 test host: A before; A and B traced; validate's A, B and A's restart; A, B, B, A
# untraced.
ENGINE_STARTS = 10

HOST = next(h for h, (_ip, group, _f, _p) in HOSTS.items() if group == "gpu_rtx3090")
# As on cpu-tiny-pp2: the preparation, ~1 ms of a ~10 ms step at c1; at c4 the overlap is a share of every step.
PREDICTIONS = ("PREDICT_C1=tpot_ms down >= 5% at c1", "PREDICT_C4=output_tok_s up >= 5% at c4")
RANK = re.compile(
    r"rank (\d+) \(PP (\d+), TP \d+, model runner (\S+)\): (\d+) steps with a forward pass; the receive came first "
    r"in (\d+) of \d+ steps, inside the preparation in (\d+)"
)


def _profiles(inv: Path, out: Path) -> tuple[Path, Path]:
    """A and B: the 3090 host's test profile (its container name, port and model path) with the rank trace on,
    and B with the deferred receive too. Nothing else differs, so make compare finds the one variable."""
    base = yaml.safe_load((inv.parent / "profiles" / "rtx3090-pp3.yaml").read_text())
    a = {**base, "name": "rtx3090-pp3-ranktrace", "probes": {**(base.get("probes") or {}), "rank_trace": True}}
    b = {**a, "name": "rtx3090-pp3-deferred", "env": {**(a.get("env") or {}), "REFDEPLOY_PP_DEFER_RECV": "1"}}
    paths = (out / "a.yaml", out / "b.yaml")
    for path, data in zip(paths, (a, b), strict=True):
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return paths


def _procedure(inv: Path, *args: str, timeout: int) -> tuple[str, Path]:
    """docs/experiments/pp-receive.sh ARGS with the stand-in switched on and the test hosts' inventory: its
    output and its log directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env.update(STAND_IN, INVENTORY=str(inv), ANSIBLE_NOCOLOR="1")
    r = subprocess.run(
        ["bash", "docs/experiments/pp-receive.sh", *args, f"HOST={HOST}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    m = re.search(r"every command's output in (\S+?)/?$", out, re.M)
    assert m, out[-3000:]
    return out, REPO / m.group(1)


def _second_stage(text: str) -> tuple[int, int, int]:
    """(steps, receive first, receive inside the preparation) of rank 1, the second stage, which ran vLLM's V1 model
    runner: the stand-in serves with the CPU build, which takes V1 (a real 3090 host runs V2)."""
    ranks = {int(m.group(1)): m for m in RANK.finditer(text)}
    assert 1 in ranks, f"no rank 1 in the rank trace's figures:\n{text[-3000:]}"
    assert ranks[1].group(3) == "V1", ranks[1].group(0)
    return int(ranks[1].group(4)), int(ranks[1].group(5)), int(ranks[1].group(6))


def test_the_pp_receive_experiment_runs_on_the_3090_class_as_documented(
    hosts: tuple[Path, Path], tmp_path: Path
) -> None:
    inv, _scratch = hosts
    a, b = _profiles(inv, tmp_path)
    _before, before_log = _procedure(inv, "before", f"A={a}", timeout=1200)
    steps, first, _inside = _second_stage((before_log / "trace-before.ranks.txt").read_text())
    assert steps > 100 and first >= 0.9 * steps, f"before: rank 1 received first in {first} of {steps} steps"

    keep = tmp_path / "kept"
    out, log = _procedure(inv, "run", *PREDICTIONS, f"A={a}", f"B={b}", "C=none", "D=none", f"KEEP={keep}",
                          timeout=3600)  # fmt: skip
    steps_a, first_a, _ = _second_stage((log / "trace-a.ranks.txt").read_text())
    assert steps_a > 100 and first_a >= 0.9 * steps_a, f"A: rank 1 received first in {first_a} of {steps_a} steps"
    steps_b, first_b, inside_b = _second_stage((log / "trace-b.ranks.txt").read_text())
    assert steps_b > 100 and inside_b >= 0.9 * steps_b and first_b == 0, (
        f"B: rank 1's receive inside its preparation in {inside_b} of {steps_b} steps"
    )
    validate = (keep / "validate.txt").read_text()
    assert re.search(r"^verdict: WITHIN RUN-TO-RUN VARIATION$", validate, re.M), validate[-3000:]
    for at in ("c1", "c4"):
        compare = (keep / f"compare-ab-{at}.txt").read_text()
        # The hypothesis written first, judged (hypothesis.render): its verdict, whichever it is, is the result.
        verdict = re.search(r"^\s*verdict: (CONFIRMED|REFUTED|INCONCLUSIVE)$", compare, re.M)
        assert verdict and "note: written after" not in compare, compare[-3000:]
        assert json.loads((keep / f"hypothesis-{at}.json").read_text())["prediction"]["point"] == at
    assert "the 2x2 is skipped" in (log / "compare-2x2.log").read_text()
    # The benches ran without the instrument: each bench's own manifest names the profile's untraced copy.
    ran = (keep / "ran.txt").read_text()
    assert "order: A B B A" in ran, ran
    benches = re.search(r"^benches: A=(\S+) B=(\S+) ", ran, re.M)
    assert benches, ran
    for side, name in zip(benches.groups(), ("rtx3090-pp3-ranktrace", "rtx3090-pp3-deferred"), strict=True):
        dirs = side.split(",")
        assert len(dirs) == 2, side
        for d in dirs:
            manifest = json.loads((Path(d) / "bench" / "manifest.json").read_text())
            assert manifest["profile"] == f"{name}-untraced", (d, manifest["profile"])
    print(f"\nbefore ({before_log}):\n{(before_log / 'trace-before.ranks.txt').read_text()}")
    print(f"\nthe procedure ({log}):\n{out[-6000:]}")
