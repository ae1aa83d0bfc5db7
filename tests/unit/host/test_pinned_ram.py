from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from serving.errors import InputError
from serving.host.limits import UNLIMITED
from serving.host.pinned_ram import (
    GIB,
    MIB,
    AllocPath,
    BudgetError,
    BudgetInputs,
    PinnedBuffer,
    budget_to_json,
    compute_budget,
    format_budget_table,
    gib_to_bytes,
    parse_alloc_conf,
    pinned_allocation_bytes,
    suggested_round_threshold_mb,
    what_if_allocator_option,
)

TORCH: AllocPath = "torch_caching_host_allocator"


def _reference(
    cgroup_memory_limit_gib: float | None = None,
    memlock_soft_gib: float | None = None,
    memlock_hard_gib: float | None = None,
) -> BudgetInputs:
    """The source documents' host: 12 layers x 4.239 GiB of host KV offload, ~125 GiB of RAM.

    /dev/shm, page cache and OS reserve are illustrative figures (1, 2.5, 8 GiB).
    """
    return BudgetInputs.from_gib(
        pinned_buffers=[PinnedBuffer.from_gib("kv_offload", 12, 4.239, TORCH)],
        mem_total_gib=125.7,
        shm_gib=1.0,
        page_cache_resident_gib=2.5,
        os_reserve_gib=8.0,
        cgroup_memory_limit_gib=cgroup_memory_limit_gib,
        memlock_soft_gib=memlock_soft_gib,
        memlock_hard_gib=memlock_hard_gib,
    )


# --- the reference case ---------------------------------------------------------------------------


def test_reference_case_rounds_each_layer_to_8_gib() -> None:
    budget = compute_budget(_reference())
    [row] = budget.rows
    request = gib_to_bytes(4.239)
    assert row.requested_each_bytes == request
    assert row.allocated_each_bytes == 2**33
    assert row.allocated_total_bytes == 96 * GIB
    assert row.note == "rounded up to 2^33"
    assert budget.pinned_requested_bytes == 12 * request
    assert budget.pinned_allocated_bytes == 96 * GIB
    assert budget.rounding_excess_bytes == 96 * GIB - 12 * request
    assert budget.rounding_excess_bytes / GIB == pytest.approx(96 - 12 * 4.239, abs=1e-6)
    assert round(budget.rounding_excess_bytes / GIB, 3) == 45.132
    assert budget.budget_bytes == (96 + 1 + 2.5 + 8) * GIB
    assert budget.fits
    assert budget.suggested_round_threshold_mb == 4096
    assert budget.hints == [
        "setting pinned_max_round_threshold_mb=4096 in PYTORCH_CUDA_ALLOC_CONF would save 45.13 GiB "
        "of pinned memory (96.00 GiB -> 50.87 GiB)"
    ]


def test_reference_case_with_the_allocator_option_has_no_excess_and_saves_it_all() -> None:
    configured, with_option, saved = what_if_allocator_option(_reference())
    excess = 96 * GIB - 12 * gib_to_bytes(4.239)
    assert configured.rounding_excess_bytes == excess
    assert with_option.rounding_excess_bytes == 0
    assert with_option.pinned_allocated_bytes == 12 * gib_to_bytes(4.239)
    assert with_option.alloc_conf == {"pinned_max_round_threshold_mb": "4096"}
    assert with_option.hints == []
    assert saved == excess == configured.rounding_option_saving_bytes
    assert configured.budget_bytes - with_option.budget_bytes == saved


def test_what_if_keeps_other_keys_and_replaces_a_threshold_that_is_too_high() -> None:
    inputs = _reference().model_copy(
        update={"pytorch_cuda_alloc_conf": "expandable_segments:True,pinned_max_round_threshold_mb:8192"}
    )
    configured, with_option, saved = what_if_allocator_option(inputs)
    # 4.239 GiB is below 8192 MiB, so it is still rounded as configured.
    assert configured.pinned_allocated_bytes == 96 * GIB
    assert with_option.inputs.pytorch_cuda_alloc_conf == "expandable_segments:True,pinned_max_round_threshold_mb:4096"
    assert saved == configured.rounding_excess_bytes


def test_what_if_with_nothing_rounded_saves_nothing() -> None:
    inputs = BudgetInputs(
        pinned_buffers=[PinnedBuffer(name="kv", count=4, bytes_each=GIB, path=TORCH)],
        mem_total_bytes=64 * GIB,
    )
    configured, with_option, saved = what_if_allocator_option(inputs)
    assert saved == 0
    assert with_option.pinned_allocated_bytes == configured.pinned_allocated_bytes == 4 * GIB
    assert configured.hints == []
    assert configured.suggested_round_threshold_mb is None


# --- allocation paths and rounding ----------------------------------------------------------------


def test_registered_path_is_not_rounded_and_takes_the_observed_factor() -> None:
    request = gib_to_bytes(4.239)
    assert pinned_allocation_bytes(request, {}, "registered") == request
    budget = compute_budget(
        BudgetInputs(
            pinned_buffers=[
                PinnedBuffer(name="kv", count=12, bytes_each=request, path="registered", observed_overhead_factor=1.9)
            ],
            mem_total_bytes=256 * GIB,
        )
    )
    [row] = budget.rows
    assert row.rounded_each_bytes == request
    assert row.allocated_each_bytes == -(-request * 19 // 10)  # ceil(request x 1.9), exactly
    assert budget.pinned_allocated_bytes == 12 * row.allocated_each_bytes
    assert budget.rounding_excess_bytes == 0
    assert budget.overhead_excess_bytes == budget.pinned_allocated_bytes - 12 * request
    assert row.note == "registered in place: not rounded; x1.9 observed overhead"
    # Nothing is rounded, so there is nothing for the allocator option to save.
    assert budget.hints == []


def test_observed_factor_applies_after_rounding_on_the_torch_path() -> None:
    budget = compute_budget(
        BudgetInputs(
            pinned_buffers=[
                PinnedBuffer(name="kv", count=1, bytes_each=3 * GIB, path=TORCH, observed_overhead_factor=1.5)
            ],
            mem_total_bytes=256 * GIB,
        )
    )
    assert budget.pinned_allocated_bytes == 6 * GIB
    assert budget.rounding_excess_bytes == GIB
    assert budget.overhead_excess_bytes == 2 * GIB
    # With the option: 3 GiB x 1.5, so the saving is 1.5 GiB, not the 1 GiB of rounding.
    assert budget.rounding_option_saving_bytes == GIB + GIB // 2


def test_observed_factor_is_taken_as_written_not_as_a_binary_float() -> None:
    # 10 x 1.1 in floats is 11.000000000000002, whose ceiling would be 12.
    buf = PinnedBuffer(name="b", count=1, bytes_each=10, path="registered", observed_overhead_factor=1.1)
    assert compute_budget(BudgetInputs(pinned_buffers=[buf], mem_total_bytes=GIB)).rows[0].allocated_each_bytes == 11


@pytest.mark.parametrize("exp", [0, 12, 20, 33, 40])
def test_exact_powers_of_two_are_not_rounded_further(exp: int) -> None:
    assert pinned_allocation_bytes(2**exp, {}, TORCH) == 2**exp


@pytest.mark.parametrize("exp", [12, 20, 32, 33])
def test_one_byte_over_a_power_of_two_rounds_to_the_next(exp: int) -> None:
    assert pinned_allocation_bytes(2**exp + 1, {}, TORCH) == 2 ** (exp + 1)
    assert pinned_allocation_bytes(2**exp - 1, {}, TORCH) == 2**exp


def test_threshold_boundary_rounds_at_the_threshold_and_not_above() -> None:
    conf = {"pinned_max_round_threshold_mb": "4096"}
    edge = 4096 * MIB
    # torch rounds size <= threshold; at the threshold a power of two stays itself.
    assert pinned_allocation_bytes(edge, conf, TORCH) == edge
    assert pinned_allocation_bytes(edge - 1, conf, TORCH) == edge
    # One byte above: not rounded (without the option it would take 8 GiB).
    assert pinned_allocation_bytes(edge + 1, conf, TORCH) == edge + 1
    assert pinned_allocation_bytes(edge + 1, {}, TORCH) == 2 * edge
    # A threshold that is not a power of two: 3000 MiB + 1 byte is above it, 3000 MiB is not.
    conf = {"pinned_max_round_threshold_mb": "3000"}
    assert pinned_allocation_bytes(3000 * MIB + 1, conf, TORCH) == 3000 * MIB + 1
    assert pinned_allocation_bytes(3000 * MIB, conf, TORCH) == 4096 * MIB
    # The threshold does not touch the registered path.
    assert pinned_allocation_bytes(3000 * MIB, conf, "registered") == 3000 * MIB


def test_bad_threshold_value_is_a_budget_error() -> None:
    with pytest.raises(BudgetError, match="pinned_max_round_threshold_mb:4g is not a whole number of MB"):
        pinned_allocation_bytes(GIB + 1, {"pinned_max_round_threshold_mb": "4g"}, TORCH)


@pytest.mark.parametrize(
    ("request_bytes", "threshold_mb"),
    [
        (gib_to_bytes(4.239), 4096),
        (4096 * MIB + 1, 4096),  # just above a power of two: that power of two still works
        (4097 * MIB, 4096),
        (5000 * MIB, 4096),
        (MIB + 1, 1),
    ],
)
def test_suggested_threshold_is_the_largest_power_of_two_mib_below_the_request(
    request_bytes: int, threshold_mb: int
) -> None:
    budget = compute_budget(
        BudgetInputs(
            pinned_buffers=[PinnedBuffer(name="b", count=1, bytes_each=request_bytes, path=TORCH)],
            mem_total_bytes=1 << 40,
        )
    )
    assert suggested_round_threshold_mb(budget.rows) == threshold_mb
    # ...and it really stops the rounding.
    conf = {"pinned_max_round_threshold_mb": str(threshold_mb)}
    assert pinned_allocation_bytes(request_bytes, conf, TORCH) == request_bytes


def test_suggested_threshold_covers_the_smallest_rounded_buffer() -> None:
    budget = compute_budget(
        BudgetInputs(
            pinned_buffers=[
                PinnedBuffer(name="kv", count=12, bytes_each=gib_to_bytes(4.239), path=TORCH),
                PinnedBuffer(name="staging", count=2, bytes_each=300 * MIB, path=TORCH),
                PinnedBuffer(name="exact", count=1, bytes_each=128 * MIB, path=TORCH),
            ],
            mem_total_bytes=1 << 40,
        )
    )
    assert budget.suggested_round_threshold_mb == 256
    assert budget.rounding_option_saving_bytes == budget.rounding_excess_bytes
    assert [r.note for r in budget.rows][2] == "a power of two: not rounded"


# --- checks ---------------------------------------------------------------------------------------


def test_memlock_too_low_fails_with_its_line() -> None:
    budget = compute_budget(_reference(memlock_soft_gib=8 / 1024, memlock_hard_gib=8 / 1024))
    assert not budget.fits
    assert budget.failures == [
        "pinned memory 96.00 GiB exceeds RLIMIT_MEMLOCK 8.00 MiB (soft; hard 8.00 MiB): "
        "raise the engine's LimitMEMLOCK (inventory: pinned_ram_engine_memlock: infinity lets the deploy do it) "
        "and --ulimit memlock for the container"
    ]


def test_memlock_unlimited_does_not_fail() -> None:
    assert compute_budget(_reference()).failures == []
    # serving.host.limits reads 'unlimited' as UNLIMITED (-1): the same as None here.
    raw = BudgetInputs.model_validate(
        {**_reference().model_dump(), "memlock_soft_bytes": UNLIMITED, "memlock_hard_bytes": UNLIMITED}
    )
    assert raw.memlock_soft_bytes is None
    assert compute_budget(raw).fits


def test_memlock_large_enough_does_not_fail() -> None:
    budget = compute_budget(_reference(memlock_soft_gib=96.0, memlock_hard_gib=128.0))
    assert budget.fits


def test_memlock_soft_above_hard_is_rejected() -> None:
    with pytest.raises(ValidationError, match="memlock soft limit"):
        BudgetInputs(mem_total_bytes=GIB, memlock_soft_bytes=2 * MIB, memlock_hard_bytes=MIB)


def test_budget_above_mem_total_fails_with_its_line() -> None:
    inputs = _reference().model_copy(update={"mem_total_bytes": 100 * GIB})
    budget = compute_budget(inputs)
    assert budget.failures == [
        "budget 107.50 GiB exceeds MemTotal 100.00 GiB by 7.50 GiB "
        "(pinned 96.00 + /dev/shm 1.00 + page cache 2.50 + OS reserve 8.00 GiB): "
        "pinned memory cannot be reclaimed; shrink the pinned buffers (--kv-offloading-size) or the reserves"
    ]
    # The rounding option alone would bring it to 62.37 GiB, and the hint says so.
    assert budget.hints[0].endswith("(96.00 GiB -> 50.87 GiB), and the budget would then fit")


def test_budget_exactly_at_mem_total_fits() -> None:
    inputs = _reference().model_copy(update={"mem_total_bytes": 107 * GIB + GIB // 2})
    assert compute_budget(inputs).fits


def test_budget_above_cgroup_limit_fails_with_its_line() -> None:
    budget = compute_budget(_reference(cgroup_memory_limit_gib=64.0))
    assert budget.container_bytes == (96 + 1 + 2.5) * GIB
    assert budget.failures == [
        "container budget 99.50 GiB exceeds the cgroup memory limit 64.00 GiB by 35.50 GiB "
        "(pinned 96.00 + /dev/shm 1.00 + page cache 2.50 GiB; the OS reserve is outside the container): "
        "raise the container's memory limit (--memory) or shrink the pinned buffers"
    ]


def test_cgroup_limit_leaves_the_os_reserve_out() -> None:
    # 99.5 GiB is charged to the container; 107.5 GiB with the OS reserve would not fit 100 GiB.
    assert compute_budget(_reference(cgroup_memory_limit_gib=100.0)).fits


def test_all_fitting_has_no_failures() -> None:
    budget = compute_budget(
        _reference(cgroup_memory_limit_gib=110.0, memlock_soft_gib=None, memlock_hard_gib=None).model_copy(
            update={"pytorch_cuda_alloc_conf": "pinned_max_round_threshold_mb:1024"}
        )
    )
    assert budget.fits
    assert budget.failures == []
    assert budget.hints == []
    assert budget.rounding_excess_bytes == 0


def test_other_pinned_is_counted_unrounded() -> None:
    inputs = BudgetInputs(
        pinned_buffers=[PinnedBuffer(name="kv", count=1, bytes_each=GIB, path=TORCH)],
        other_pinned_bytes=3 * MIB,
        mem_total_bytes=8 * GIB,
        memlock_soft_bytes=GIB,
        memlock_hard_bytes=GIB,
    )
    budget = compute_budget(inputs)
    assert budget.pinned_allocated_bytes == GIB + 3 * MIB
    assert budget.rows[-1].item == "other pinned"
    assert budget.failures[0].startswith("pinned memory 1.00 GiB exceeds RLIMIT_MEMLOCK 1.00 GiB")


# --- PYTORCH_CUDA_ALLOC_CONF ----------------------------------------------------------------------


def test_parse_alloc_conf_good_inputs() -> None:
    assert parse_alloc_conf("") == {}
    assert parse_alloc_conf("  ") == {}
    assert parse_alloc_conf("expandable_segments:True,pinned_max_round_threshold_mb:1024") == {
        "expandable_segments": "True",
        "pinned_max_round_threshold_mb": "1024",
    }
    assert parse_alloc_conf(" pinned_use_cuda_host_register : True , pinned_num_register_threads:8") == {
        "pinned_use_cuda_host_register": "True",
        "pinned_num_register_threads": "8",
    }
    # A bracketed list is one value, commas and colons included.
    assert parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:128") == {
        "roundup_power2_divisions": "[256:1,512:2,>:8]",
        "max_split_size_mb": "128",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("expandable_segments", "'expandable_segments' is not key:value"),
        ("expandable_segments:True,pinned_max_round_threshold_mb", "'pinned_max_round_threshold_mb' is not key:value"),
        ("pinned_max_round_threshold_mb:", "'pinned_max_round_threshold_mb:' is not key:value"),
        (":1024", "':1024' has no valid key"),
        ("expandable_segments:True,", "empty item"),
        ("a:1,,b:2", "empty item"),
        ("max_split_size_mb:1,max_split_size_mb:2", "'max_split_size_mb' is given twice"),
        ("pinned_max_round_threshold:1024", "did you mean 'pinned_max_round_threshold_mb'"),
        ("roundup_power2_divisions:[256:1", "unbalanced '\\['"),
        ("a:1]", "unbalanced '\\]'"),
    ],
)
def test_parse_alloc_conf_bad_inputs_name_the_item(text: str, message: str) -> None:
    with pytest.raises(BudgetError, match=message) as exc:
        parse_alloc_conf(text)
    assert isinstance(exc.value, InputError)
    assert str(exc.value).startswith("PYTORCH_CUDA_ALLOC_CONF: ")


def test_compute_budget_reports_bad_alloc_conf() -> None:
    inputs = _reference().model_copy(update={"pytorch_cuda_alloc_conf": "pinned_max_round_threshold_mb=1024"})
    with pytest.raises(BudgetError, match="'pinned_max_round_threshold_mb=1024' is not key:value"):
        compute_budget(inputs)


# --- inputs ---------------------------------------------------------------------------------------


def test_gib_helpers() -> None:
    assert gib_to_bytes(8.0) == 2**33
    assert gib_to_bytes(8 / 1024) == 8 * MIB
    assert gib_to_bytes(4.239) == 4551591592
    with pytest.raises(BudgetError):
        gib_to_bytes(-1.0)


def test_inputs_reject_unknown_keys_and_bad_paths() -> None:
    with pytest.raises(ValidationError, match="extra"):
        BudgetInputs.model_validate({"mem_total_bytes": GIB, "swap_bytes": 0})
    with pytest.raises(ValidationError, match="path"):
        PinnedBuffer.model_validate({"name": "kv", "count": 1, "bytes_each": GIB, "path": "cuda_malloc_host"})
    with pytest.raises(ValidationError, match="observed_overhead_factor"):
        PinnedBuffer(name="kv", count=1, bytes_each=GIB, path=TORCH, observed_overhead_factor=0.5)


# --- output ---------------------------------------------------------------------------------------


def test_table_contains_rows_totals_limits_and_verdict() -> None:
    text = format_budget_table(compute_budget(_reference(memlock_soft_gib=8 / 1024, memlock_hard_gib=8 / 1024)))
    lines = text.splitlines()
    [row] = [line for line in lines if line.startswith("kv_offload")]
    assert row.split()[:7] == ["kv_offload", TORCH, "12", "4.239", "8.000", "50.868", "96.000"]
    assert row.endswith("rounded up to 2^33")
    totals = {" ".join(line.split()[:-1]): line.split()[-1] for line in lines if line.startswith("  ")}
    assert totals["pinned requested"] == "50.868"
    assert totals["rounding excess"] == "45.132"
    assert totals["pinned allocated"] == "96.000"
    assert totals["budget"] == "107.500"
    assert "  MemTotal                    125.700 GiB" in lines
    assert "  RLIMIT_MEMLOCK soft / hard  8.000 MiB / 8.000 MiB" in lines
    assert "verdict: DOES NOT FIT (1 failed check(s))" in lines
    assert "  FAIL: pinned memory 96.00 GiB exceeds RLIMIT_MEMLOCK 8.00 MiB" in text
    assert "  hint: setting pinned_max_round_threshold_mb=4096 in PYTORCH_CUDA_ALLOC_CONF would save 45.13 GiB" in text
    # Numeric columns line up on their right edge.
    header = lines[3]
    assert header.startswith("item")
    assert header.index("allocated total") + len("allocated total") == row.index("96.000") + len("96.000")


def test_table_verdict_when_it_fits() -> None:
    text = format_budget_table(compute_budget(_reference()))
    assert "verdict: FITS (18.200 GiB of MemTotal left over)" in text
    assert "FAIL" not in text


def test_json_for_the_manifest() -> None:
    doc = budget_to_json(compute_budget(_reference(cgroup_memory_limit_gib=64.0)))
    assert json.loads(json.dumps(doc)) == doc
    assert doc["schema_version"] == 1
    assert doc["rows"][0]["allocated_each_bytes"] == 2**33
    assert doc["rows"][0]["requested_each_bytes"] == gib_to_bytes(4.239)
    assert doc["totals"]["pinned_allocated"] == {"bytes": 96 * GIB, "gib": 96.0}
    assert doc["totals"]["rounding_excess"]["gib"] == 45.132
    assert doc["limits"] == {
        "mem_total_bytes": gib_to_bytes(125.7),
        "cgroup_memory_limit_bytes": 64 * GIB,
        "memlock_soft_bytes": None,
        "memlock_hard_bytes": None,
    }
    assert doc["fits"] is False
    assert doc["failures"][0].startswith("container budget 99.50 GiB exceeds the cgroup memory limit 64.00 GiB")
    assert doc["suggested_round_threshold_mb"] == 4096
