"""The patched runtime's per-step rank trace (images/vllm/patches/0004-*): each worker rank's engine steps, read from
a directory of rank<R>.steps.jsonl files (a capture's BUNDLE/ranks/, or the host's trace directory), as trace
events and as per-rank figures.

A step line (the patch's module docstring has the whole format): {"rank", "pp", "tp", "pid", "runner", "step",
"n_reqs", "reqs", "tokens", "t0", "t1", "spans": [[name, start, end], ...]}, times in CLOCK_MONOTONIC seconds.
`runner` is the model runner the worker built, "v1" or "v2": vLLM 0.32 runs V2 wherever Triton imports (every CUDA
host) and V1 on the CPU build unless VLLM_USE_V2_MODEL_RUNNER=1; both record the same spans (preprocess, forward,
postprocess, sample; V1 has more of its own). Lines the patch wrote before it recorded the runner read as
RUNNER_UNKNOWN. On a trace each rank's steps are one track inside its worker's process (the real pid, beside that
worker's kernel waits and stacks): a "step N" slice with the spans nested in it.

The figures are what seed 000 §8 reads from such a trace: on a non-first PP rank, how long a step waited to receive
the previous stage's metadata, whether the input preparation ran before that wait (the receive first, vLLM's
order) or around it (patch 0005's deferred receive), how long preparation itself took (preprocess less any
receive inside it), and the hand-off: from the previous stage's send to this stage's forward in the same step,
which a receive-first order lengthens by the preparation.

  python -m serving.evidence.rank_trace DIR [--start MONO --end MONO]   per-rank figures, as text
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.errors import InputError
from serving.standalone.knee import percentile  # the project's one percentile, vLLM's (interpolated)

STEPS_GLOB = "rank*.steps.jsonl*"
# The steps track of a rank, inside its worker's process: a tid no Linux thread gets (pid_max <= 2^22).
STEPS_TID = 1 << 22
RECEIVES = ("recv_metadata", "recv_tensors")
SOURCE = "the patched runtime's rank trace (images/vllm/patches/0004-rank-trace-per-step.patch)"
# A step line without "runner": written by the patch before it recorded one (either runner could have run it).
RUNNER_UNKNOWN = "not recorded"


@dataclass(frozen=True)
class Step:
    rank: int
    pp: int
    tp: int
    pid: int
    runner: str
    step: int
    n_reqs: int
    reqs: tuple[str, ...]
    tokens: int
    t0: float
    t1: float
    spans: tuple[tuple[str, float, float], ...]

    def total(self, name: str) -> float:
        """Seconds in spans called `name` (0.0 where there is none)."""
        return sum(b - a for n, a, b in self.spans if n == name)

    def first(self, name: str) -> tuple[float, float] | None:
        return next(((a, b) for n, a, b in self.spans if n == name), None)

    def receive_inside_preprocess(self) -> float:
        """Seconds of receive spans that lie inside this step's preprocess span: the tensors' wait (vLLM waits for them
        lazily, in _preprocess) and, with patch 0005, the metadata's."""
        pre = self.first("preprocess")
        if pre is None:
            return 0.0
        return sum(b - a for n, a, b in self.spans if n in RECEIVES and a >= pre[0] and b <= pre[1])


def _step(row: Any) -> Step | None:
    try:
        spans = tuple((str(n), float(a), float(b)) for n, a, b in row["spans"] if float(b) >= float(a))
        return Step(
            rank=int(row["rank"]), pp=int(row["pp"]), tp=int(row["tp"]), pid=int(row["pid"]),
            runner=str(row.get("runner") or RUNNER_UNKNOWN), step=int(row["step"]), n_reqs=int(row["n_reqs"]),
            reqs=tuple(str(r) for r in row.get("reqs") or ()),
            tokens=int(row["tokens"]), t0=float(row["t0"]), t1=float(row["t1"]),
            spans=tuple(sorted(spans, key=lambda s: (s[1], -s[2]))),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def read_steps(directory: Path, start: float | None = None, end: float | None = None) -> tuple[list[Step], int]:
    """The steps in `directory`'s rank files that overlap [start, end] (either open), ordered by rank and time;
    and how many lines did not read as a step."""
    steps: list[Step] = []
    bad = 0
    for path in sorted(directory.glob(STEPS_GLOB)):
        for line in path.read_text(errors="replace").splitlines():
            try:
                s = _step(json.loads(line))
            except ValueError:
                s = None
            if s is None:
                bad += 1
            elif (start is None or s.t1 >= start) and (end is None or s.t0 <= end):
                steps.append(s)
    steps.sort(key=lambda s: (s.rank, s.t0))
    return steps, bad


def _us(t: float) -> int:
    return round(t * 1e6)


def runner_name(runners: Iterable[str]) -> str:
    """The model runner(s) a rank's steps name, as a reader says it: "V2", "V1", "not recorded", or "V1 and V2"
    where one rank's steps disagree (two engines' lines in one file)."""
    names = sorted({r.upper() if r in ("v1", "v2") else r for r in runners})
    return " and ".join(names) if names else RUNNER_UNKNOWN


def rank_events(steps: Iterable[Step]) -> list[dict[str, Any]]:
    """Each step a slice on its rank's track in its worker's process, its spans nested in it."""
    out: list[dict[str, Any]] = []
    tracks: dict[tuple[int, int], Step] = {}
    for s in steps:
        tracks.setdefault((s.pid, s.rank), s)
        base = {"pid": s.pid, "tid": STEPS_TID + s.rank, "ph": "X", "cat": "rank step"}
        args = {"step": s.step, "rank": s.rank, "pp": s.pp, "tp": s.tp, "runner": s.runner, "tokens": s.tokens,
                "n_reqs": s.n_reqs, "reqs": list(s.reqs)}  # fmt: skip
        a = _us(s.t0)
        out.append({**base, "name": f"step {s.step}", "ts": a, "dur": max(0, _us(s.t1) - a), "args": args})
        for name, x, y in s.spans:
            b = _us(x)
            out.append({**base, "name": name, "ts": b, "dur": max(0, _us(y) - b), "args": {"step": s.step}})
    for (pid, rank), s in sorted(tracks.items()):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": STEPS_TID + rank,
                    "args": {"name": f"rank {rank} steps (PP {s.pp}, TP {s.tp}, model runner "
                             f"{runner_name([s.runner])}; patch 0004)"}})  # fmt: skip
    return out


def _ms(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p90": None}
    return {"median": round(statistics.median(values) * 1000, 3), "p90": round(percentile(values, 90) * 1000, 3)}


def handoffs(steps: Sequence[Step], later: Sequence[Step]) -> list[float]:
    """Seconds from the previous stage's send to this stage's forward, for each step both ran (the same step
    number and the same requests: seed 000 §6 aligns a step across ranks by its step, not by when a receive
    began). What a receive-first order adds to it is this stage's preparation."""
    sends = {(s.step, s.reqs): s.first("send") for s in steps}
    out = []
    for s in later:
        send, forward = sends.get((s.step, s.reqs)), s.first("forward")
        if send is not None and forward is not None:
            out.append(forward[0] - send[0])
    return out


def rank_figures(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """Per rank, over its steps that ran a forward pass: how many, each span's median and p90 (ms), the
    preparation proper (preprocess less a receive inside it), the receive's place in the step, and for a later
    stage the hand-off from the previous stage's send to its own forward."""
    out: list[dict[str, Any]] = []
    for rank in sorted({s.rank for s in steps}):
        mine = [s for s in steps if s.rank == rank and s.first("forward") is not None]
        if not mine:
            continue
        pp, tp = mine[0].pp, mine[0].tp
        previous = [s for s in steps if s.pp == pp - 1 and s.tp == tp]
        names = sorted({n for s in mine for n, _, _ in s.spans})
        before = sum(
            1 for s in mine if (m := s.first("recv_metadata")) and (p := s.first("preprocess")) and m[1] <= p[0]
        )
        inside = sum(
            1
            for s in mine
            if (m := s.first("recv_metadata")) and (p := s.first("preprocess")) and p[0] <= m[0] and m[1] <= p[1]
        )
        out.append({
            "rank": rank, "pp": pp, "tp": tp, "runner": runner_name(s.runner for s in mine), "steps": len(mine),
            "spans_ms": {n: _ms([s.total(n) for s in mine if s.first(n) is not None]) for n in names},
            "preparation_ms": _ms([s.total("preprocess") - s.receive_inside_preprocess() for s in mine]),
            "step_ms": _ms([s.t1 - s.t0 for s in mine]),
            "receive_before_preparation": before,
            "receive_inside_preparation": inside,
            "handoff_ms": _ms(handoffs(previous, mine)) if pp > 0 else None,
        })  # fmt: skip
    return out


def figures_text(figures: Sequence[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for f in figures:
        order = (
            f"the receive came first in {f['receive_before_preparation']} of {f['steps']} steps, inside the "
            f"preparation in {f['receive_inside_preparation']}"
        )
        lines.append(
            f"rank {f['rank']} (PP {f['pp']}, TP {f['tp']}, model runner {f['runner']}): {f['steps']} steps with a "
            f"forward pass; {order}"
        )
        rows = {**f["spans_ms"], "preparation (preprocess less receive)": f["preparation_ms"], "step": f["step_ms"]}
        if f["handoff_ms"] is not None:
            rows["previous stage's send to this forward"] = f["handoff_ms"]
        for name, v in rows.items():
            lines.append(f"  {name:40s} median {v['median']:>9} ms   p90 {v['p90']:>9} ms")
    return lines


def summary_lines(directory: Path) -> list[str]:
    """What `make capture` prints of a bundle's rank trace (ranks/), a line per rank: its model runner, its steps
    and the median preprocess, forward and metadata receive, and where the receive ran. None where there is none."""
    if not directory.is_dir():
        return []
    lines = []
    for f in rank_figures(read_steps(directory)[0]):
        spans = f["spans_ms"]
        medians = ", ".join(
            f"{label} {spans[n]['median']} ms" for n, label in
            (("preprocess", "preprocess"), ("forward", "forward"), ("recv_metadata", "metadata receive")) if n in spans
        )  # fmt: skip
        where = ""
        if "recv_metadata" in spans:
            where = (f"; the receive first in {f['receive_before_preparation']}, inside preprocess in "
                     f"{f['receive_inside_preparation']}")  # fmt: skip
        lines.append(
            f"rank trace: rank {f['rank']} (PP {f['pp']}, TP {f['tp']}), model runner {f['runner']}: {f['steps']} "
            f"steps with a forward pass, median {medians}{where}"
        )
    return lines


# What every rank records in a step with a forward pass, on either model runner (patch 0004), and what a stage
# adds by its place in the pipeline: a later stage receives, an earlier one sends.
EVERY_RANK = ("preprocess", "forward")
LATER_STAGE = ("recv_metadata", "recv_tensors")
EARLIER_STAGE = ("send",)


def missing_spans(figures: Sequence[dict[str, Any]]) -> list[str]:
    """Why these ranks' figures cannot be read as seed 000 §8 reads them, one line each; [] when they can: every
    stage recorded, the runner named, and each rank's spans for its place in the pipeline."""
    if not figures:
        return ["no rank recorded a step with a forward pass"]
    stages = {f["pp"] for f in figures}
    last = max(stages)
    gaps = sorted(set(range(last + 1)) - stages)
    problems = [f"PP stage(s) {', '.join(map(str, gaps))} recorded no step with a forward pass"] if gaps else []
    for f in figures:
        want = EVERY_RANK + (LATER_STAGE if f["pp"] > 0 else ()) + (EARLIER_STAGE if f["pp"] < last else ())
        missing = [n for n in want if n not in f["spans_ms"]]
        label = f"rank {f['rank']} (PP {f['pp']}, model runner {f['runner']})"
        if missing:
            problems.append(f"{label}: no {', '.join(missing)} span in {f['steps']} steps")
        if f["runner"] not in ("V1", "V2"):
            problems.append(f"{label}: the steps do not name their model runner (an image before patch 0004 named it)")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m serving.evidence.rank_trace", description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, help="a directory of rank<R>.steps.jsonl files (a bundle's ranks/)")
    ap.add_argument("--start", type=float, help="CLOCK_MONOTONIC seconds: only steps ending after this")
    ap.add_argument("--end", type=float, help="CLOCK_MONOTONIC seconds: only steps starting before this")
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    ap.add_argument("--require-spans", action="store_true",
                    help="exit 1, naming what is missing, unless each stage recorded its spans and runner")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        if not args.directory.is_dir():
            raise InputError(f"{args.directory}: no such directory of rank trace files")
        steps, bad = read_steps(args.directory, args.start, args.end)
        if not steps:
            raise InputError(f"{args.directory}: no rank step in {STEPS_GLOB} (is the profile's probes.rank_trace on?)")
    except InputError as e:
        print(f"rank trace: {e}", file=sys.stderr)
        return 2
    figures = rank_figures(steps)
    if args.json:
        print(json.dumps({"source": SOURCE, "unreadable_lines": bad, "ranks": figures}, indent=2))
    else:
        print("\n".join(figures_text(figures)))
        if bad:
            print(f"({bad} line(s) did not read as a step)")
    if args.require_spans and (problems := missing_spans(figures)):
        print("\n".join(f"rank trace: {p}" for p in problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
