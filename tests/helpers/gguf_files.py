"""A GGUF file written with the gguf package (llama.cpp's own Python writer), for the tests of what reads one: the
host's header reader (ansible/library/refdeploy_host_readings.py) and the model's facts
(serving/plan/model_facts.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf


def write_gguf(path: Path, arch: str, fill: Callable[[gguf.GGUFWriter], None]) -> None:
    """`fill` adds the metadata and tensors; the header, metadata and tensors are then written in the format's order."""
    w = gguf.GGUFWriter(str(path), arch)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
