"""Kernel text as the probes keep it: read-only, bounded, with the reason when a read fails."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

# A raw text larger than this is cut here and the marker appended: a snapshot never fills the disk.
RAW_LIMIT_BYTES = 1 << 20
TRUNCATED_MARKER = f"\n[probes.readers.hoststate: truncated here; only the first {RAW_LIMIT_BYTES} bytes were kept]\n"


def bound_raw(data: bytes, limit: int = RAW_LIMIT_BYTES) -> str:
    """UTF-8 text of data (bad bytes replaced), cut at `limit` bytes with TRUNCATED_MARKER appended."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace")
    return data[:limit].decode("utf-8", errors="replace") + TRUNCATED_MARKER


def read_raw(path: Path) -> str:
    """A file's text, read-only, never more than RAW_LIMIT_BYTES (plus the marker)."""
    with path.open("rb") as f:
        return bound_raw(f.read(RAW_LIMIT_BYTES + 1))


def now_wall() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def why(e: OSError) -> str:
    return e.strerror or type(e).__name__
