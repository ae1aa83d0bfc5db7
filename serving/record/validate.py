"""`make validate A=<profile> B=<profile>`: does B compute what A computes, through the real endpoint? (seed 000
§13: the patch series kept prompt-logprob differences old-vs-new at 0.001995 against old-vs-old's 0.002010.)

ansible/validate.yml deploys A, reads the fixed requests (probes/senders/correctness.py), deploys B and reads them, then
deploys A again, which starts a new container (a restart), and reads them a third time. This module sets B against
A beside A against itself across that restart, request by request:

- the prompt ids must be the same (else the two did not tokenise alike, and nothing else is compared);
- prompt logprobs: |lp_x - lp_y| of each prompt position's own token, mean and max over every position;
- top-k logprobs of the generated positions, over the ids both list, up to the first generated token they differ in;
- greedy outputs: the requests whose generated ids are identical, and where the first that differs does.

Verdict: "within run-to-run variation" when A-vs-B's mean and max prompt-logprob differences are at most
TOLERANCE times A-vs-A's (or under ABS_FLOOR, float32's own noise here), and B changed no greedy output that A's
restart did not; otherwise "outside run-to-run variation", with the figures either way.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serving.errors import InputError

SCHEMA_VERSION = 1
# A vs B may differ from A vs A by this factor and still be run-to-run variation (seed 000: 0.001995 against
# 0.002010 was "within"). Differences under ABS_FLOOR are float32 rounding: A against its own restart on the
# CPU profile differed by 0 here, so a bare factor would call any rounding a change.
TOLERANCE = 1.5
ABS_FLOOR = 1e-5
LABELS = ("a1", "b", "a2")
READING = "correctness.json"


class ValidateError(InputError):
    pass


def load_reading(d: Path) -> dict[str, Any]:
    """One reading's correctness.json and its meta.json (the profile and the container it was read from)."""
    try:
        doc: dict[str, Any] = json.loads((d / READING).read_text())
        doc["meta"] = json.loads((d / "meta.json").read_text()) if (d / "meta.json").is_file() else {}
    except (OSError, ValueError) as e:
        raise ValidateError(f"{d}: no readable {READING} ({e}): run make validate again") from None
    return doc


def _prompt_diffs(x: Mapping[str, Any], y: Mapping[str, Any]) -> list[float]:
    return [
        abs(px["logprob"] - py["logprob"])
        for px, py in zip(x["prompt_logprobs"], y["prompt_logprobs"], strict=False)
        if px.get("logprob") is not None and py.get("logprob") is not None
    ]


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (p, q) in enumerate(zip(a, b, strict=False)):
        if p != q:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _top_diffs(x: Mapping[str, Any], y: Mapping[str, Any], upto: int) -> list[float]:
    out: list[float] = []
    for tx, ty in list(zip(x["output_top"], y["output_top"], strict=False))[:upto]:
        out += [abs(tx[k] - ty[k]) for k in tx.keys() & ty.keys()]
    return out


def diff(x: Mapping[str, Any], y: Mapping[str, Any]) -> dict[str, Any]:
    """Two readings set against each other, request by request, and over all requests."""
    per: dict[str, Any] = {}
    prompt_all: list[float] = []
    top_all: list[float] = []
    problems: list[str] = []
    for name, rx in x["requests"].items():
        ry = y["requests"].get(name)
        if ry is None or rx.get("error") or ry.get("error"):
            problems.append(f"{name}: not answered on both ({(rx or {}).get('error') or (ry or {}).get('error')})")
            continue
        if rx["prompt_token_ids"] != ry["prompt_token_ids"]:
            problems.append(f"{name}: the prompt's token ids differ (the two did not tokenise alike)")
            continue
        d = _prompt_diffs(rx, ry)
        div = _first_divergence(rx["output_token_ids"], ry["output_token_ids"])
        upto = len(rx["output_top"]) if div is None else div + 1
        t = _top_diffs(rx, ry, upto)
        prompt_all += d
        top_all += t
        per[name] = {
            "prompt_mean_abs": statistics.fmean(d) if d else None,
            "prompt_max_abs": max(d) if d else None,
            "outputs_identical": div is None,
            "first_divergence": div,
            "top_mean_abs": statistics.fmean(t) if t else None,
        }
    identical = sum(1 for r in per.values() if r["outputs_identical"])
    return {
        "requests": per,
        "problems": problems,
        "prompt_positions": len(prompt_all),
        "prompt_mean_abs": statistics.fmean(prompt_all) if prompt_all else None,
        "prompt_max_abs": max(prompt_all) if prompt_all else None,
        "top_mean_abs": statistics.fmean(top_all) if top_all else None,
        "outputs_identical": identical,
        "outputs_compared": len(per),
    }


def _within(ab: float | None, aa: float | None) -> bool:
    if ab is None or aa is None:
        return False
    return ab <= max(TOLERANCE * aa, ABS_FLOOR)


def judge(a1: Mapping[str, Any], b: Mapping[str, Any], a2: Mapping[str, Any]) -> dict[str, Any]:
    """B against A (the first reading) beside A against A across the restart, and the verdict."""
    aa, ab = diff(a1, a2), diff(a1, b)
    reasons: list[str] = []
    if aa["problems"] or ab["problems"]:
        reasons += aa["problems"] + ab["problems"]
    for what in ("prompt_mean_abs", "prompt_max_abs"):
        if not _within(ab[what], aa[what]):
            reasons.append(
                f"prompt logprob {what.split('_')[1]} |A-B| {_g(ab[what])} over {TOLERANCE:g}x A's own "
                f"{_g(aa[what])} (floor {ABS_FLOOR:g})"
            )
    changed = [n for n, r in ab["requests"].items() if not r["outputs_identical"]]
    own = {n for n, r in aa["requests"].items() if not r["outputs_identical"]}
    if [n for n in changed if n not in own]:
        reasons.append(
            "greedy outputs changed: "
            + ", ".join(f"{n} (from token {ab['requests'][n]['first_divergence']})" for n in changed if n not in own)
        )
    restarted = (a1.get("meta") or {}).get("container_id") != (a2.get("meta") or {}).get("container_id")
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "validate",
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "a": (a1.get("meta") or {}).get("profile"),
        "b": (b.get("meta") or {}).get("profile"),
        "restarted": restarted,
        "containers": {k: (r.get("meta") or {}).get("container_id") for k, r in zip(LABELS, (a1, b, a2), strict=True)},
        "a_vs_a": aa,
        "a_vs_b": ab,
        "tolerance": TOLERANCE,
        "abs_floor": ABS_FLOOR,
        "within": not reasons,
        "verdict": "within run-to-run variation" if not reasons else "outside run-to-run variation",
        "reasons": reasons,
    }


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def render(r: Mapping[str, Any]) -> str:
    aa, ab = r["a_vs_a"], r["a_vs_b"]
    restart = "after a restart, in a new container" if r["restarted"] else "with no restart: one container for both"
    lines = [
        f"validate: A = {r['a']}, B = {r['b']}",
        f"readings: A, B, A again {restart}; containers "
        + ", ".join(f"{k} {str(v)[:12]}" for k, v in r["containers"].items()),
        "prompt logprobs: |lp(x) - lp(y)| of each prompt position's own token; top-k: generated positions, common ids",
        "",
        f"  {'':10} {'prompt mean':>12} {'prompt max':>12} {'top-k mean':>12} {'identical outputs':>18} positions",
    ]
    for name, d in (("A vs A", aa), ("A vs B", ab)):
        lines.append(
            f"  {name:10} {_g(d['prompt_mean_abs']):>12} {_g(d['prompt_max_abs']):>12} {_g(d['top_mean_abs']):>12} "
            f"{d['outputs_identical']:>10} of {d['outputs_compared']:<5} {d['prompt_positions']}"
        )
    lines += ["", "per request (A vs B): prompt mean / max |diff|, first generated token that differs"]
    for n, q in ab["requests"].items():
        div = "none" if q["first_divergence"] is None else str(q["first_divergence"])
        lines.append(f"  {n:24} {_g(q['prompt_mean_abs']):>12} {_g(q['prompt_max_abs']):>12}  {div}")
    lines += ["", f"verdict: {r['verdict'].upper()}"]
    lines += [f"  {x}" for x in r["reasons"]]
    if r["within"]:
        lines.append(
            f"  A vs B at most {r['tolerance']:g}x A vs A (or under {r['abs_floor']:g}), no greedy output changed"
        )
    return "\n".join(lines) + "\n"


def report(validate_dir: Path) -> tuple[dict[str, Any], str]:
    """Judge a validate directory (a1/, b/, a2/ readings): write validate.json and validate.txt into it."""
    a1, b, a2 = (load_reading(validate_dir / label) for label in LABELS)
    r = judge(a1, b, a2)
    r["dir"] = str(validate_dir)
    text = render(r)
    (validate_dir / "validate.json").write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    (validate_dir / "validate.txt").write_text(text)
    return r, text


# --- refdeploy validate-check / validate-report (registered by serving/cli.py) ----------------------------------


def cmd_check(a: Any) -> int:
    """Both profiles load (a name in serving/profiles/ or a path), before any deploy."""
    from serving.config.profile import load_profile

    for side, ref in (("A", a.a), ("B", a.b)):
        try:
            load_profile(ref)
        except InputError as e:
            raise ValidateError(f"make validate: {side}: {e}") from None
    return 0


def cmd_report(a: Any) -> int:
    """Judge every host's readings of one validate: 0 within run-to-run variation, 1 outside, 2 none found."""
    dirs = sorted(Path(a.runs_dir).glob(f"*/{a.id}/validate"))
    if not dirs:
        raise ValidateError(f"no readings of validate {a.id} under {a.runs_dir}/<host>/: did the playbook run?")
    outside = 0
    for d in dirs:
        r, text = report(d)
        print(text + f"written: {d}/validate.txt")
        outside += not r["within"]
    return 1 if outside else 0


def register(sub: Any) -> None:
    p = sub.add_parser("validate-check", help="make validate's profiles A and B load, before any change")
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("validate-report", help="the verdict of a validate's readings (A, B, A again)")
    p.add_argument("--id", required=True, help="the validate's id: runs/<host>/<id>/validate/")
    p.add_argument("--runs-dir", default="runs")
    p.set_defaults(func=cmd_report)
