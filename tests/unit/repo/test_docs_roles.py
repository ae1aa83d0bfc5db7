"""docs/roles.md is the roles' argument specs rendered (serving/bridge/docs_roles.py): regenerated here and compared."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

from serving.bridge import docs_roles

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "roles.md"


def test_docs_roles_is_up_to_date_with_the_argument_specs() -> None:
    want, have = docs_roles.render(), PAGE.read_text()
    diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "docs/roles.md", "specs", n=1))
    assert have == want, f"docs/roles.md is out of date with the argument specs; run: {docs_roles.REGENERATE}\n{diff}"


def test_every_role_entry_point_and_option_is_on_the_page() -> None:
    page = PAGE.read_text()
    assert "## preflight" in page and "### capture (main)" in page and "### serve: rollback" in page
    assert "### plan: replan" in page and "### probes (main)" in page
    assert "- `probe_io_depths` (list of int, default `[1, 64]`): Queue depths to measure." in page
    assert "- `refdeploy_plan` (dict, required):" in page
    assert (
        "One of: `capture`, `samplers`, `metrics`, `stacks`, `wchan`, `perf`, `hoststate`, `record`."
        in page.replace("\n  ", " ")
    )


def test_a_changed_spec_changes_the_page(tmp_path: Path) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "ansible" / "roles" / "io_gate", roles / "io_gate")
    spec = roles / "io_gate" / "meta" / "argument_specs.yml"
    before = docs_roles.render(roles)
    knob = "options:\n      io_gate_new:\n        type: bool\n        default: false\n        description: A new knob."
    spec.write_text(spec.read_text().replace("options:", knob, 1))
    after = docs_roles.render(roles)
    assert before != after
    assert "- `io_gate_new` (bool, default `false`): A new knob." in after
    assert "## io_gate" in after and "## bench" not in after
