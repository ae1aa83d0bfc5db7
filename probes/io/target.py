"""The I/O probe's target, checked without reading it whole: its identity (device, inode, size, mtime, ctime
and a sha256 of a few fixed ranges read with O_DIRECT, so the page cache is left as it was) before and after."""

from __future__ import annotations

import hashlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from probes.io.fio import BLOCK_SIZE_BYTES

# The target's identity reads these many fixed ranges of this size: first, last and evenly between (O_DIRECT).
IDENTITY_RANGES = 8
IDENTITY_RANGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class TargetState:
    """Who the target is, without reading it whole: a change of content through the file system moves mtime and
    ctime (ctime cannot be set back), a replaced file has another inode, and the sampled hash catches the rest
    that falls in its ranges."""

    sampled_sha256: str
    size_bytes: int
    mtime_ns: int
    device_major_minor: str
    inode: int
    ctime_ns: int
    # [offset, length] of each range hashed, in order (identity_ranges).
    sampled_ranges: list[list[int]]


def identity_ranges(
    size_bytes: int, ranges: int = IDENTITY_RANGES, length: int = IDENTITY_RANGE_BYTES
) -> list[tuple[int, int]]:
    """The fixed ranges hashed for the target's identity: `ranges` starts spread evenly from 0 to the last
    `length` bytes, aligned down to 4 KiB (O_DIRECT), clipped to the file, overlaps merged. Fixed by the size alone,
    so before and after read the same bytes."""
    if size_bytes <= 0:
        return []
    last = max(0, size_bytes - length) // BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES
    starts = sorted({(last * i // max(1, ranges - 1)) // BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES for i in range(ranges)})
    out: list[tuple[int, int]] = []
    for start in starts:
        end = size_bytes if start == last else min(size_bytes, start + length)
        if out and start <= out[-1][0] + out[-1][1]:
            out[-1] = (out[-1][0], end - out[-1][0])
        else:
            out.append((start, end - start))
    return out


def _read_direct(fd: int, offset: int, length: int) -> bytes:
    """`length` bytes at `offset` with O_DIRECT: an aligned buffer, whole blocks, the tail past EOF cut off."""
    padded = -(-length // BLOCK_SIZE_BYTES) * BLOCK_SIZE_BYTES
    buf = mmap.mmap(-1, padded)  # page-aligned, as O_DIRECT needs
    try:
        got = 0
        while got < length:
            view = memoryview(buf)[got:]
            n = os.preadv(fd, [view], offset + got)
            view.release()
            if n == 0:
                break
            got += n
        return bytes(buf[: min(got, length)])
    finally:
        buf.close()


def target_state(path: Path) -> TargetState:
    """The target's identity from its metadata and IDENTITY_RANGES ranges read with O_DIRECT: the page cache is
    neither filled nor emptied (a whole-file hash pulled every byte of the served file through it, twice a run).
    O_DIRECT was checked before this is called (`_direct_io_problem`)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    try:
        st = os.fstat(fd)
        ranges = identity_ranges(st.st_size)
        digest = hashlib.sha256()
        for offset, length in ranges:
            digest.update(_read_direct(fd, offset, length))
    finally:
        os.close(fd)
    return TargetState(
        sampled_sha256=digest.hexdigest(),
        size_bytes=st.st_size,
        mtime_ns=st.st_mtime_ns,
        device_major_minor=f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
        inode=st.st_ino,
        ctime_ns=st.st_ctime_ns,
        sampled_ranges=[[o, n] for o, n in ranges],
    )


def describe_change(before: TargetState, after: TargetState) -> str:
    """What differs between two identities, by name (the summary line a FAIL carries)."""
    names = ("device_major_minor", "inode", "size_bytes", "mtime_ns", "ctime_ns", "sampled_sha256")
    changed = [
        f"{n} {getattr(before, n)} -> {getattr(after, n)}" for n in names if getattr(before, n) != getattr(after, n)
    ]
    return ", ".join(changed) or "no field differs"
