"""Page-cache misses (seed 000 §11: "inspect page counts and waits as well as MB/s"; folio_wait_bit_common during
stalls identified waits for page I/O; "wchan alone does not identify the file or device; combine it with stacks,
/proc/<pid>/io, and device statistics").

Signs: the engine's threads waiting on page I/O in at least PAGE_WAIT_SHARE of their wchan samples; the host in
I/O wait (vmstat wa) at least IOWAIT_PCT in the median; a bench's served files less than RESIDENT_MIN resident
while the engine read from storage. Two signs or more are consistent with page-cache misses on the critical path,
as is the direct sign alone at twice its threshold (the engine's threads in page I/O in 10% of their samples); it
explains the page-I/O share of the engine's samples.
"""

from __future__ import annotations

import statistics

from serving.diagnose.evidence import Evidence, vm_values
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out
from serving.diagnose.rules.threads import wchan_class

SEED = "000 §11"
PAGE_WAIT_SHARE = 0.05
IOWAIT_PCT = 10.0
RESIDENT_MIN = 0.9


def run(ev: Evidence) -> list[Finding]:
    counts = (ev.wchan.value or {}).get("counts", {}) if ev.wchan else {}
    engine = {k: v for k, v in counts.items() if " worker/" in k or " engine_core/" in k}
    total = sum(sum(v.values()) for v in engine.values())
    page = sum(n for v in engine.values() for name, n in v.items() if wchan_class(name) == "page I/O")
    wa_values = vm_values(ev, "wa")
    wa = statistics.median(wa_values) if wa_values else None
    reads, resident = ev.page_cache.get("engine_read_bytes"), ev.page_cache.get("resident_before")
    if not total and wa is None and reads is None:
        raise CannotRun("no wchan samples, no vmstat and no engine read volume in the window")
    signs = []
    if total and page / total >= PAGE_WAIT_SHARE:
        signs.append(f"the engine's threads waited on page I/O in {page / total:.0%} of their wchan samples")
    if wa is not None and wa >= IOWAIT_PCT:
        signs.append(f"the host in I/O wait {wa:.0f}% (median)")
    if reads and reads.value and resident and resident.value is not None and float(resident.value) < RESIDENT_MIN:
        signs.append(f"the served files {float(resident.value):.0%} resident, the engine read {int(reads.value):,} "
                     "bytes from storage")  # fmt: skip
    figures = [fig("engine wchan samples in page I/O", ev.wchan, "", value=round(page / total, 3) if total else None),
               fig("host I/O wait, median", ev.vmstat, "%", value=wa),
               fig("served files resident before the runs", resident, "fraction"),
               fig("engine bytes read from storage", reads, "bytes")]  # fmt: skip
    if len(signs) >= 2 or (signs and page and total and page / total >= 2 * PAGE_WAIT_SHARE):
        return [Finding(
            rule="page_cache", seed=SEED, verdict="consistent with",
            title="page-cache misses: the engine waits for pages read from storage",
            symptom="; ".join(signs), explains=round(min(1.0, page / total if total else 0.0), 3), figures=figures,
            not_established="which file or device (wchan does not say: the stacks and /proc/<pid>/io do), and "
            "whether prefetching would hide it",
            next_steps=["make bench with WORKLOAD page_cache: warm, then cold, and make compare "
                        "VARIABLE=workload.page_cache; make probe-io for the drive's QD1/QD64 latency"],
        )]  # fmt: skip
    return [ruled_out(
        rule="page_cache", seed=SEED,
        title="no page-cache misses on the engine's path in the window",
        symptom="; ".join(signs) or "no page-I/O waits, no I/O wait, no storage reads by the engine",
        figures=figures, not_established="a cold start (the window began warm)"
    )]  # fmt: skip


RULE = Rule("page_cache", SEED, run)
