"""The pinned host-RAM budget, computed before launch (REFERENCE §5).

On GPU hosts vLLM keeps host KV offload (`--kv-offloading-size`) in pinned,
page-locked host memory, which the kernel can neither reclaim nor swap.  How
much RAM a pinned request really takes depends on the path that allocates it:

- `torch_caching_host_allocator`: PyTorch's caching host allocator rounds each
  request up to the next power of two (a 4.239 GiB buffer takes 8 GiB), unless
  `pinned_max_round_threshold_mb` in PYTORCH_CUDA_ALLOC_CONF is set and the
  request is larger than that many MiB (torch rounds `size <= threshold`).
- `registered`: the buffer is mapped and registered in place (vLLM's native KV
  offload), so nothing is rounded.

Users nonetheless report ~1.9x host RAM for the registered path (vLLM issues
53042, 56410), so each buffer may carry an observed overhead factor, applied
after rounding.  The budget adds /dev/shm, the page cache that must stay
resident for mmap'd data and an OS reserve, then checks it against MemTotal,
the container's cgroup memory limit and RLIMIT_MEMLOCK.

Sizes are bytes throughout; `gib_to_bytes` and the `from_gib` constructors take
GiB (2**30 bytes) for people typing figures in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pydantic import Field, field_validator, model_validator

# The budget's callers get its input types, its error and the allocator's rounding from here, as before the split.
from serving.config.alloc_conf import (
    REGISTERED_PATH,
    ROUND_THRESHOLD_KEY,
    TORCH_PATH,
    format_alloc_conf,
    next_power_of_two,
)
from serving.config.alloc_conf import AllocPath as AllocPath
from serving.config.alloc_conf import BudgetError as BudgetError
from serving.config.alloc_conf import parse_alloc_conf as parse_alloc_conf
from serving.config.alloc_conf import pinned_allocation_bytes as pinned_allocation_bytes
from serving.config.schema import StrictModel
from serving.host.limits import UNLIMITED

SCHEMA_VERSION = 1
GIB = 1 << 30
MIB = 1 << 20


def gib_to_bytes(gib: float) -> int:
    """GiB (2**30 bytes) to whole bytes, rounded to the nearest byte."""
    if gib < 0 or not math.isfinite(gib):
        raise BudgetError(f"expected a size of 0 GiB or more, got {gib!r}")
    return round(gib * GIB)


def bytes_to_gib(n: int) -> float:
    return n / GIB


def format_size(n: int, decimals: int = 2) -> str:
    """Bytes in the largest binary unit that keeps the figure at 1 or more: '96.00 GiB', '8.00 MiB'."""
    for unit, size in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.{decimals}f} {unit}"
    return f"{n} B"


# --- inputs ---------------------------------------------------------------------------------------


class PinnedBuffer(StrictModel):
    """`count` pinned buffers of `bytes_each`, e.g. one KV offload buffer per layer."""

    name: str = Field(min_length=1)
    count: int = Field(ge=1)
    bytes_each: int = Field(ge=1)
    path: AllocPath
    # Measured host RAM / modelled allocation (1.9 for the reports in vLLM issues 53042 and 56410).
    observed_overhead_factor: float = Field(default=1.0, ge=1.0, allow_inf_nan=False)

    @classmethod
    def from_gib(
        cls,
        name: str,
        count: int,
        gib_each: float,
        path: AllocPath = TORCH_PATH,
        observed_overhead_factor: float = 1.0,
    ) -> PinnedBuffer:
        return cls(
            name=name,
            count=count,
            bytes_each=gib_to_bytes(gib_each),
            path=path,
            observed_overhead_factor=observed_overhead_factor,
        )


class BudgetInputs(StrictModel):
    """What the host must hold, and the limits it runs under.  Limits: None is unlimited.

    serving.host.limits.UNLIMITED (-1) is also read as None, so /proc/<pid>/limits
    and cgroup readings can be passed through as they are.
    """

    pinned_buffers: list[PinnedBuffer] = Field(default_factory=list)
    # Pinned memory outside the modelled buffers (NCCL, staging), taken as allocated: not rounded.
    other_pinned_bytes: int = Field(default=0, ge=0)
    # The PYTORCH_CUDA_ALLOC_CONF the engine will run with ("" when unset).
    pytorch_cuda_alloc_conf: str = ""
    shm_bytes: int = Field(default=0, ge=0)
    # Page cache that must stay resident for mmap'd data (weights, tables).
    page_cache_resident_bytes: int = Field(default=0, ge=0)
    # Left to the OS and everything else on the host; outside the container's cgroup.
    os_reserve_bytes: int = Field(default=0, ge=0)
    mem_total_bytes: int = Field(ge=1)
    cgroup_memory_limit_bytes: int | None = Field(default=None, ge=0)
    memlock_soft_bytes: int | None = Field(default=None, ge=0)
    memlock_hard_bytes: int | None = Field(default=None, ge=0)

    @field_validator("cgroup_memory_limit_bytes", "memlock_soft_bytes", "memlock_hard_bytes", mode="before")
    @classmethod
    def _unlimited_is_none(cls, v: Any) -> Any:
        return None if v == UNLIMITED and type(v) is int else v

    @model_validator(mode="after")
    def _soft_within_hard(self) -> BudgetInputs:
        soft, hard = self.memlock_soft_bytes, self.memlock_hard_bytes
        if hard is not None and (soft is None or soft > hard):
            raise ValueError(
                f"memlock soft limit ({soft if soft is not None else 'unlimited'}) is above the hard limit ({hard})"
            )
        return self

    @classmethod
    def from_gib(
        cls,
        *,
        pinned_buffers: list[PinnedBuffer],
        mem_total_gib: float,
        other_pinned_gib: float = 0.0,
        pytorch_cuda_alloc_conf: str = "",
        shm_gib: float = 0.0,
        page_cache_resident_gib: float = 0.0,
        os_reserve_gib: float = 0.0,
        cgroup_memory_limit_gib: float | None = None,
        memlock_soft_gib: float | None = None,
        memlock_hard_gib: float | None = None,
    ) -> BudgetInputs:
        def opt(gib: float | None) -> int | None:
            return None if gib is None else gib_to_bytes(gib)

        return cls(
            pinned_buffers=pinned_buffers,
            other_pinned_bytes=gib_to_bytes(other_pinned_gib),
            pytorch_cuda_alloc_conf=pytorch_cuda_alloc_conf,
            shm_bytes=gib_to_bytes(shm_gib),
            page_cache_resident_bytes=gib_to_bytes(page_cache_resident_gib),
            os_reserve_bytes=gib_to_bytes(os_reserve_gib),
            mem_total_bytes=gib_to_bytes(mem_total_gib),
            cgroup_memory_limit_bytes=opt(cgroup_memory_limit_gib),
            memlock_soft_bytes=opt(memlock_soft_gib),
            memlock_hard_bytes=opt(memlock_hard_gib),
        )


# --- the budget -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetRow:
    item: str
    # AllocPath, or "other" for other_pinned_bytes.
    path: str
    count: int
    observed_overhead_factor: float
    requested_each_bytes: int
    # After the allocator's rounding, before the observed overhead factor.
    rounded_each_bytes: int
    allocated_each_bytes: int
    requested_total_bytes: int
    allocated_total_bytes: int
    note: str


@dataclass(frozen=True)
class Budget:
    inputs: BudgetInputs
    alloc_conf: dict[str, str]
    rows: list[BudgetRow]
    pinned_requested_bytes: int
    # Added by power-of-two rounding / by the observed overhead factors.
    rounding_excess_bytes: int
    overhead_excess_bytes: int
    pinned_allocated_bytes: int
    # pinned allocated + /dev/shm + page cache + OS reserve: compared with MemTotal.
    budget_bytes: int
    # The same less the OS reserve: what the container's cgroup is charged.
    container_bytes: int
    failures: list[str]
    hints: list[str]
    # The pinned_max_round_threshold_mb that would stop the rounding, and what it would save.
    suggested_round_threshold_mb: int | None
    rounding_option_saving_bytes: int

    @property
    def fits(self) -> bool:
        return not self.failures


def _overhead(n: int, factor: float) -> int:
    # The factor as written (1.9 is 19/10), so the result does not depend on binary float error.
    return math.ceil(n * Fraction(repr(factor)))


def _row(buf: PinnedBuffer, alloc_conf: Mapping[str, str]) -> BudgetRow:
    rounded = pinned_allocation_bytes(buf.bytes_each, alloc_conf, buf.path)
    allocated = _overhead(rounded, buf.observed_overhead_factor)
    notes: list[str] = []
    if buf.path == REGISTERED_PATH:
        notes.append("registered in place: not rounded")
    elif rounded > buf.bytes_each:
        notes.append(f"rounded up to 2^{rounded.bit_length() - 1}")
    elif rounded == buf.bytes_each and next_power_of_two(buf.bytes_each) != buf.bytes_each:
        notes.append(f"above {ROUND_THRESHOLD_KEY}={alloc_conf[ROUND_THRESHOLD_KEY]}: not rounded")
    else:
        notes.append("a power of two: not rounded")
    if buf.observed_overhead_factor != 1.0:
        notes.append(f"x{buf.observed_overhead_factor:g} observed overhead")
    return BudgetRow(
        item=buf.name,
        path=buf.path,
        count=buf.count,
        observed_overhead_factor=buf.observed_overhead_factor,
        requested_each_bytes=buf.bytes_each,
        rounded_each_bytes=rounded,
        allocated_each_bytes=allocated,
        requested_total_bytes=buf.count * buf.bytes_each,
        allocated_total_bytes=buf.count * allocated,
        note="; ".join(notes),
    )


def suggested_round_threshold_mb(rows: list[BudgetRow]) -> int | None:
    """The pinned_max_round_threshold_mb that stops every rounding in rows, or None if nothing is rounded.

    It is the largest power of two (in MiB) strictly below the smallest rounded
    request: every rounded request is then above it (torch rounds size <=
    threshold), while smaller allocations elsewhere in the engine keep the
    allocator's rounding and caching as far as possible.  A power of two also
    stays valid when a buffer grows a little.  Requests of 1 MiB or less cannot
    be covered by a whole-MiB threshold (their excess is under 1 MiB each) and
    are left out.
    """
    rounded = [r.requested_each_bytes for r in rows if r.rounded_each_bytes > r.requested_each_bytes]
    coverable = [n for n in rounded if n > MIB]
    if not coverable:
        return None
    smallest_mib = -(-min(coverable) // MIB)  # ceil: threshold * MIB must stay below the request
    return 1 << ((smallest_mib - 1).bit_length() - 1)


def _totals(rows: list[BudgetRow]) -> tuple[int, int, int, int]:
    requested = sum(r.requested_total_bytes for r in rows)
    rounding = sum(r.count * (r.rounded_each_bytes - r.requested_each_bytes) for r in rows)
    overhead = sum(r.count * (r.allocated_each_bytes - r.rounded_each_bytes) for r in rows)
    allocated = sum(r.allocated_total_bytes for r in rows)
    return requested, rounding, overhead, allocated


def _rows(inputs: BudgetInputs, alloc_conf: Mapping[str, str]) -> list[BudgetRow]:
    rows = [_row(buf, alloc_conf) for buf in inputs.pinned_buffers]
    if inputs.other_pinned_bytes:
        n = inputs.other_pinned_bytes
        rows.append(BudgetRow("other pinned", "other", 1, 1.0, n, n, n, n, n, "taken as allocated"))
    return rows


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _failures(inputs: BudgetInputs, pinned: int) -> list[str]:
    """One line per failed check, each saying what to do."""
    shm, cache, reserve = inputs.shm_bytes, inputs.page_cache_resident_bytes, inputs.os_reserve_bytes
    budget = pinned + shm + cache + reserve
    container = budget - reserve
    parts = f"pinned {_gib(pinned)} + /dev/shm {_gib(shm)} + page cache {_gib(cache)}"
    failures: list[str] = []
    soft, hard = inputs.memlock_soft_bytes, inputs.memlock_hard_bytes
    if soft is not None and pinned > soft:
        hard_text = "unlimited" if hard is None else format_size(hard)
        failures.append(
            f"pinned memory {format_size(pinned)} exceeds RLIMIT_MEMLOCK {format_size(soft)} "
            f"(soft; hard {hard_text}): raise the engine's LimitMEMLOCK (inventory: pinned_ram_engine_memlock: "
            "infinity lets the deploy do it) and --ulimit memlock for the container"
        )
    if budget > inputs.mem_total_bytes:
        failures.append(
            f"budget {format_size(budget)} exceeds MemTotal {format_size(inputs.mem_total_bytes)} "
            f"by {format_size(budget - inputs.mem_total_bytes)} ({parts} + OS reserve {_gib(reserve)} GiB): "
            "pinned memory cannot be reclaimed; shrink the pinned buffers (--kv-offloading-size) or the reserves"
        )
    cgroup = inputs.cgroup_memory_limit_bytes
    if cgroup is not None and container > cgroup:
        failures.append(
            f"container budget {format_size(container)} exceeds the cgroup memory limit {format_size(cgroup)} "
            f"by {format_size(container - cgroup)} ({parts} GiB; the OS reserve is outside the container): "
            "raise the container's memory limit (--memory) or shrink the pinned buffers"
        )
    return failures


def compute_budget(inputs: BudgetInputs) -> Budget:
    """Rows, totals, checks (one line per failure) and the rounding hint, from the inputs alone."""
    alloc_conf = parse_alloc_conf(inputs.pytorch_cuda_alloc_conf)
    rows = _rows(inputs, alloc_conf)
    requested, rounding, overhead, pinned = _totals(rows)
    budget = pinned + inputs.shm_bytes + inputs.page_cache_resident_bytes + inputs.os_reserve_bytes
    failures = _failures(inputs, pinned)

    threshold_mb = suggested_round_threshold_mb(rows)
    saving = 0
    hints: list[str] = []
    if threshold_mb is not None:
        option_pinned = _totals(_rows(inputs, {**alloc_conf, ROUND_THRESHOLD_KEY: str(threshold_mb)}))[3]
        saving = pinned - option_pinned
        then = ", and the budget would then fit" if failures and not _failures(inputs, option_pinned) else ""
        hints.append(
            f"setting {ROUND_THRESHOLD_KEY}={threshold_mb} in PYTORCH_CUDA_ALLOC_CONF would save {format_size(saving)} "
            f"of pinned memory ({format_size(pinned)} -> {format_size(option_pinned)}){then}"
        )

    return Budget(
        inputs=inputs,
        alloc_conf=alloc_conf,
        rows=rows,
        pinned_requested_bytes=requested,
        rounding_excess_bytes=rounding,
        overhead_excess_bytes=overhead,
        pinned_allocated_bytes=pinned,
        budget_bytes=budget,
        container_bytes=budget - inputs.os_reserve_bytes,
        failures=failures,
        hints=hints,
        suggested_round_threshold_mb=threshold_mb,
        rounding_option_saving_bytes=saving,
    )


def what_if_allocator_option(inputs: BudgetInputs) -> tuple[Budget, Budget, int]:
    """(the budget as configured, the budget with the suggested threshold set, bytes saved).

    The threshold replaces any pinned_max_round_threshold_mb already set; the
    other keys are kept.  With nothing rounded the two budgets are the same and
    the saving is 0.
    """
    configured = compute_budget(inputs)
    threshold_mb = configured.suggested_round_threshold_mb
    if threshold_mb is None:
        return configured, configured, 0
    conf = {**configured.alloc_conf, ROUND_THRESHOLD_KEY: str(threshold_mb)}
    with_option = compute_budget(inputs.model_copy(update={"pytorch_cuda_alloc_conf": format_alloc_conf(conf)}))
    return configured, with_option, configured.budget_bytes - with_option.budget_bytes


# --- output ---------------------------------------------------------------------------------------


def _limit(n: int | None) -> str:
    return "unlimited" if n is None else format_size(n, 3)


def format_budget_table(budget: Budget) -> str:
    """Plain text for an incident: the rows, the totals, the limits and the verdict (sizes in GiB)."""
    inputs = budget.inputs
    conf = inputs.pytorch_cuda_alloc_conf or "(unset)"
    header = ("item", "path", "count", "requested each", "allocated each", "requested total", "allocated total", "note")
    table = [header]
    for r in budget.rows:
        table.append(
            (
                r.item,
                r.path,
                str(r.count),
                f"{r.requested_each_bytes / GIB:.3f}",
                f"{r.allocated_each_bytes / GIB:.3f}",
                f"{r.requested_total_bytes / GIB:.3f}",
                f"{r.allocated_total_bytes / GIB:.3f}",
                r.note,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    numeric = range(2, 7)
    lines = [
        "Pinned host-RAM budget (GiB = 2^30 bytes)",
        f"PYTORCH_CUDA_ALLOC_CONF: {conf}",
        "",
    ]
    for row in table:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        lines.append("  ".join([*cells, row[-1]]).rstrip())

    totals = [
        ("pinned requested", budget.pinned_requested_bytes),
        ("rounding excess", budget.rounding_excess_bytes),
        ("observed overhead", budget.overhead_excess_bytes),
        ("pinned allocated", budget.pinned_allocated_bytes),
        ("/dev/shm", inputs.shm_bytes),
        ("page cache kept resident", inputs.page_cache_resident_bytes),
        ("OS reserve", inputs.os_reserve_bytes),
        ("budget", budget.budget_bytes),
    ]
    label_w = max(len(label) for label, _ in totals)
    value_w = max(len(f"{n / GIB:.3f}") for _, n in totals)
    lines += ["", "totals (GiB)"]
    lines += [f"  {label.ljust(label_w)}  {n / GIB:{value_w}.3f}" for label, n in totals]

    limits = [
        ("MemTotal", _limit(inputs.mem_total_bytes)),
        ("cgroup memory limit", _limit(inputs.cgroup_memory_limit_bytes)),
        ("RLIMIT_MEMLOCK soft / hard", f"{_limit(inputs.memlock_soft_bytes)} / {_limit(inputs.memlock_hard_bytes)}"),
    ]
    limit_w = max(len(label) for label, _ in limits)
    lines += ["", "limits"]
    lines += [f"  {label.ljust(limit_w)}  {value}" for label, value in limits]

    lines.append("")
    if budget.fits:
        headroom = inputs.mem_total_bytes - budget.budget_bytes
        lines.append(f"verdict: FITS ({format_size(headroom, 3)} of MemTotal left over)")
    else:
        lines.append(f"verdict: DOES NOT FIT ({len(budget.failures)} failed check(s))")
    lines += [f"  FAIL: {line}" for line in budget.failures]
    lines += [f"  hint: {line}" for line in budget.hints]
    return "\n".join(lines) + "\n"


def _both(n: int) -> dict[str, float | int]:
    return {"bytes": n, "gib": round(n / GIB, 3)}


def budget_to_json(budget: Budget) -> dict[str, Any]:
    """The budget for the manifest: every figure in bytes (and GiB, rounded, for people)."""
    inputs = budget.inputs
    return {
        "schema_version": SCHEMA_VERSION,
        "pytorch_cuda_alloc_conf": inputs.pytorch_cuda_alloc_conf,
        "alloc_conf": dict(budget.alloc_conf),
        "rows": [
            {
                "item": r.item,
                "path": r.path,
                "count": r.count,
                "observed_overhead_factor": r.observed_overhead_factor,
                "requested_each_bytes": r.requested_each_bytes,
                "rounded_each_bytes": r.rounded_each_bytes,
                "allocated_each_bytes": r.allocated_each_bytes,
                "requested_total_bytes": r.requested_total_bytes,
                "allocated_total_bytes": r.allocated_total_bytes,
                "note": r.note,
            }
            for r in budget.rows
        ],
        "totals": {
            "pinned_requested": _both(budget.pinned_requested_bytes),
            "rounding_excess": _both(budget.rounding_excess_bytes),
            "overhead_excess": _both(budget.overhead_excess_bytes),
            "pinned_allocated": _both(budget.pinned_allocated_bytes),
            "shm": _both(inputs.shm_bytes),
            "page_cache_resident": _both(inputs.page_cache_resident_bytes),
            "os_reserve": _both(inputs.os_reserve_bytes),
            "budget": _both(budget.budget_bytes),
            "container": _both(budget.container_bytes),
        },
        "limits": {
            "mem_total_bytes": inputs.mem_total_bytes,
            "cgroup_memory_limit_bytes": inputs.cgroup_memory_limit_bytes,
            "memlock_soft_bytes": inputs.memlock_soft_bytes,
            "memlock_hard_bytes": inputs.memlock_hard_bytes,
        },
        "fits": budget.fits,
        "failures": list(budget.failures),
        "hints": list(budget.hints),
        "suggested_round_threshold_mb": budget.suggested_round_threshold_mb,
        "rounding_option_saving_bytes": budget.rounding_option_saving_bytes,
    }
