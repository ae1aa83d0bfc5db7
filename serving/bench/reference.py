"""The class's reference figures beside a bench's measured ones (inventory gpu_class.reference), each compared with
the measured figure of the same definition only, and the class's weight-read bound on decode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
