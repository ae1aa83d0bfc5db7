"""A test marked `timing` must say by how much it passed (tests/conftest.py): the collection check."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.conftest import pytest_collection_modifyitems


@dataclass
class _Item:
    nodeid: str
    mark: pytest.Mark | None

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.mark if name == "timing" else None


def test_a_timing_mark_without_a_margin_stops_collection_naming_the_test() -> None:
    items = [
        _Item("tests/x.py::test_with", pytest.mark.timing(margin="3.3 against > 2").mark),
        _Item("tests/x.py::test_without", pytest.mark.timing.mark),
        _Item("tests/x.py::test_unmarked", None),
    ]
    with pytest.raises(pytest.UsageError, match=r"^tests/x\.py::test_without: @pytest\.mark\.timing needs margin="):
        pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    pytest_collection_modifyitems(None, [items[0], items[2]])  # type: ignore[arg-type, list-item]
