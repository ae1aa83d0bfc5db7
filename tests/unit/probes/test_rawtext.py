"""Raw texts kept beside the parsed readings (probes/base/rawtext.py): bounded in size, marked when cut."""

from __future__ import annotations

from probes.base.rawtext import RAW_LIMIT_BYTES, TRUNCATED_MARKER, bound_raw


def test_raw_text_over_one_mib_is_truncated_with_a_marker() -> None:
    text = bound_raw(b"x" * (RAW_LIMIT_BYTES + 10))
    assert text.endswith(TRUNCATED_MARKER)
    assert len(text) == RAW_LIMIT_BYTES + len(TRUNCATED_MARKER)
    assert bound_raw(b"small\n") == "small\n"
