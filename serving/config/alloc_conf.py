"""PYTORCH_CUDA_ALLOC_CONF as the pinned-RAM budget reads it: its items, the pinned allocator's rounding
threshold, and what one pinned buffer costs once PyTorch's power-of-two rounding applies."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Literal

from serving.errors import InputError

MIB = 1 << 20

AllocPath = Literal["torch_caching_host_allocator", "registered"]
TORCH_PATH: AllocPath = "torch_caching_host_allocator"
REGISTERED_PATH: AllocPath = "registered"

ROUND_THRESHOLD_KEY = "pinned_max_round_threshold_mb"
# The pinned-memory keys of PYTORCH_CUDA_ALLOC_CONF (torch 2.13).  A misspelt one
# would be rejected by torch at start-up and ignored by this model, so it is an error here.
PINNED_KEYS = (
    ROUND_THRESHOLD_KEY,
    "pinned_max_cached_size_mb",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
)
_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class BudgetError(InputError):
    """Budget input that cannot be used; the message names the bad item."""


def _split_items(text: str) -> list[str]:
    """Split on commas outside brackets: roundup_power2_divisions:[256:1,512:2] is one item."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: unbalanced '[' in {text!r}")
    items.append("".join(current))
    return items


def parse_alloc_conf(text: str) -> dict[str, str]:
    """PYTORCH_CUDA_ALLOC_CONF ('key:value,key:value') to {key: value}, in the order given.

    Empty (or blank) text is {}.  An item without a colon, with an empty key or
    value, a key given twice, or an unknown `pinned_*` key is a BudgetError that
    quotes the item.
    """
    conf: dict[str, str] = {}
    if not text.strip():
        return conf
    for raw in _split_items(text):
        item = raw.strip()
        if not item:
            raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: empty item in {text!r} (a stray comma?)")
        key, sep, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: {item!r} is not key:value")
        if not _KEY_RE.fullmatch(key):
            raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: {item!r} has no valid key before the ':'")
        if key in conf:
            raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: {key!r} is given twice ({conf[key]!r} and {value!r})")
        if key.startswith("pinned_") and key not in PINNED_KEYS:
            close = difflib.get_close_matches(key, PINNED_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(PINNED_KEYS)})"
            raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: unknown key in {item!r}{hint}")
        conf[key] = value
    return conf


def format_alloc_conf(conf: Mapping[str, str]) -> str:
    """{key: value} back to PYTORCH_CUDA_ALLOC_CONF text."""
    return ",".join(f"{k}:{v}" for k, v in conf.items())


def round_threshold_bytes(alloc_conf: Mapping[str, str]) -> int | None:
    """pinned_max_round_threshold_mb in bytes, or None when it is not set (everything is rounded)."""
    value = alloc_conf.get(ROUND_THRESHOLD_KEY)
    if value is None:
        return None
    if not value.isdigit():
        raise BudgetError(f"PYTORCH_CUDA_ALLOC_CONF: {ROUND_THRESHOLD_KEY}:{value} is not a whole number of MB")
    return int(value) * MIB


def next_power_of_two(n: int) -> int:
    """The smallest power of two >= n (0 stays 0, as in torch's PowerOf2Ceil)."""
    if n < 0:
        raise BudgetError(f"expected a size of 0 bytes or more, got {n}")
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def pinned_allocation_bytes(request_bytes: int, alloc_conf: Mapping[str, str], path: AllocPath) -> int:
    """Bytes of pinned RAM that one request of request_bytes takes on the given path.

    torch path: the next power of two, unless pinned_max_round_threshold_mb is
    set and the request is larger than threshold_mb * 2**20 (torch rounds when
    size <= threshold).  registered path: the request itself.
    """
    if request_bytes < 0:
        raise BudgetError(f"expected a request of 0 bytes or more, got {request_bytes}")
    if path == REGISTERED_PATH:
        return request_bytes
    if path != TORCH_PATH:
        raise BudgetError(f"unknown pinned allocation path {path!r} (known: {TORCH_PATH}, {REGISTERED_PATH})")
    threshold = round_threshold_bytes(alloc_conf)
    if threshold is not None and request_bytes > threshold:
        return request_bytes
    return next_power_of_two(request_bytes)
