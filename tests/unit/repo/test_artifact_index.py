"""docs/artifacts.md against the code: every artifact file name the code spells is in the index, and every file
the index lists is one the code still writes (serving/record/artifacts.py reads the source; nothing runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

from serving.record import artifacts

REPO = Path(__file__).resolve().parents[3]
INDEX = REPO / "docs" / "artifacts.md"


def test_the_index_lists_every_artifact_the_code_writes_and_no_other() -> None:
    found = artifacts.check(REPO, INDEX)
    assert found.lines() == [], (
        "docs/artifacts.md and the code disagree (add or remove the index's row; a name that is no runs/ artifact "
        "goes into serving/record/artifacts.py EXCLUDED with why; `.venv/bin/python -m serving.record.artifacts` "
        "lists the names):\n" + "\n".join(found.lines())
    )


def test_the_code_is_read_where_it_writes() -> None:
    names = artifacts.code_names(REPO)
    # A constant, an f-string through a name assigned in its function, and a role's YAML, each with its writer.
    assert "probes/io/probe.py" in names["exit_code.txt"]
    assert names["dump-*-*-*.json"] == {"probes/readers/stacks.py"}
    assert "ansible/roles/bench/tasks/main.yml" in names["client-output.log"]
    assert len(artifacts.index_names(INDEX.read_text())) >= 80


def _tree(tmp_path: Path, extra_writer: str | None = None) -> Path:
    """A copy of the real tree's sources under tmp_path, with one writer changed."""
    for path in artifacts.sources(REPO):
        dest = tmp_path / path.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    if extra_writer is not None:
        target = tmp_path / "probes" / "capture" / "cutshort.py"
        target.write_text(target.read_text() + extra_writer)
    return tmp_path


def test_a_new_unlisted_artifact_is_named(tmp_path: Path) -> None:
    writer = '\n\ndef write_new(out: str) -> None:\n    (Path(out) / "brand_new_artifact.json").write_text("{}")\n'
    found = artifacts.check(_tree(tmp_path, writer), INDEX)
    assert found.unlisted == {"brand_new_artifact.json": {"probes/capture/cutshort.py"}}
    assert found.stale == {} and found.stale_exclusions == []
    assert found.lines() == ["written but not in the index: brand_new_artifact.json (in probes/capture/cutshort.py)"]


def test_a_new_artifact_in_an_f_string_is_named_with_its_pattern(tmp_path: Path) -> None:
    writer = (
        '\n\ndef write_new(out: str, n: int) -> None:\n    name = f"shard-{n}"\n'
        '    (Path(out) / f"{name}.csv").touch()\n'
    )
    found = artifacts.check(_tree(tmp_path, writer), INDEX)
    assert set(found.unlisted) == {"shard-*.csv"}


def test_an_index_row_the_code_no_longer_writes_is_named(tmp_path: Path) -> None:
    index = tmp_path / "artifacts.md"
    index.write_text(INDEX.read_text() + "\n| file | writer | schema | what |\n|---|---|---|---|\n"
                     "| `gone/old-report.csv` | nobody | — | a file no code writes |\n")  # fmt: skip
    found = artifacts.check(REPO, index)
    assert found.stale == {"old-report.csv": "gone/old-report.csv"}
    assert found.unlisted == {}


def test_a_row_removed_from_the_index_is_named(tmp_path: Path) -> None:
    index = tmp_path / "artifacts.md"
    index.write_text("\n".join(line for line in INDEX.read_text().splitlines() if "`kernel/wchan.txt`" not in line))
    found = artifacts.check(REPO, index)
    assert set(found.unlisted) == {"wchan.txt"}
    assert found.unlisted["wchan.txt"] >= {"probes/readers/kernel.py"}


def test_names_are_compared_by_their_last_part_with_one_wildcard() -> None:
    assert artifacts.normalize("stacks/dump-<nn>-<process>-<pid>.json") == "dump-*-*-*.json"
    assert artifacts.normalize("perf-{pid}.data") == artifacts.normalize("kernel/perf-<pid>.data") == "perf-*.data"
    assert artifacts.is_name("metrics/scrapes/<nnnn>.prom")
    assert not artifacts.is_name(".json")  # a suffix, as Path.with_suffix takes it
    assert not artifacts.is_name("host-state/<when>/raw/")  # a directory


def test_jinja_and_expressions_in_yaml_name_no_file() -> None:
    text = (
        "- name: T\n  ansible.builtin.copy:\n    dest: '{{ d }}/meta.json'\n"
        "  when: _x.log | length > 0\n- ansible.builtin.fetch:\n    dest: '{{ run.path }}.tar.gz'\n"
    )
    assert artifacts.yaml_names(text) == {"*/meta.json", "*.tar.gz"}


def test_every_name_the_index_may_list_without_code_is_one_a_tool_chooses() -> None:
    listed = artifacts.index_names(INDEX.read_text())
    code = artifacts.code_names(REPO)
    assert {k for k in listed if k not in code} == set(artifacts.NAMED_BY_TOOLS)
