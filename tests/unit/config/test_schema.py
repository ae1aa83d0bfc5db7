"""serving.config.schema: the strict base and the YAML loader that profiles and workloads share.

Each refusal is one line an operator can act on (the file, the field, what is wrong), raised as the kind's own
error so callers that catch ProfileError or WorkloadError, or InputError, still do.
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from serving.config.schema import StrictModel, YamlKind
from serving.errors import InputError


class ThingError(InputError):
    pass


class Limits(StrictModel):
    port: int = 8000


class Thing(StrictModel):
    name: str
    limits: Limits = Limits()


def _kind(directory: Path) -> YamlKind[Thing]:
    return YamlKind(
        model=Thing,
        directory=directory,
        error=ThingError,
        no_such_file="thing file {name} does not exist",
        no_such_name="unknown thing {name!r}: known things are {known}",
        not_a_mapping="{source}: a thing is a mapping, got {type}",
    )


def _refusal(kind: YamlKind[Thing], name_or_path: str) -> str:
    with pytest.raises(ThingError) as err:
        kind.load(name_or_path)
    message = str(err.value)
    assert "\n" not in message, message
    return message


def test_a_shipped_name_and_a_path_both_load(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text("name: one\nlimits: {port: 9000}\n")
    kind = _kind(tmp_path)
    assert kind.load("one") == kind.load(str(tmp_path / "one.yaml")) == Thing(name="one", limits=Limits(port=9000))
    assert kind.known() == ["one"]


def test_a_bad_key_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nlimits: {prot: 9000}\n")
    said = _refusal(_kind(tmp_path), str(path))
    assert said == f"{path}: limits.prot: unknown key: remove it, or correct its spelling"


def test_a_wrong_type_is_refused_not_coerced(tmp_path: Path) -> None:
    path = tmp_path / "quoted.yaml"
    path.write_text("name: x\nlimits: {port: '9000'}\n")
    assert _refusal(_kind(tmp_path), str(path)) == f"{path}: limits.port: Input should be a valid integer"


def test_a_missing_file_or_name_says_what_exists(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text("name: one\n")
    (tmp_path / "two.yaml").write_text("name: two\n")
    kind = _kind(tmp_path)
    assert _refusal(kind, str(tmp_path / "nope.yaml")) == f"thing file {tmp_path / 'nope.yaml'} does not exist"
    assert _refusal(kind, "three") == "unknown thing 'three': known things are one, two"


def test_yaml_that_is_not_a_mapping_or_not_yaml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text("- name: x\n")
    (tmp_path / "broken.yaml").write_text("name: [x\n")
    kind = _kind(tmp_path)
    assert _refusal(kind, "list") == f"{tmp_path / 'list.yaml'}: a thing is a mapping, got list"
    (tmp_path / "empty.yaml").write_text("")
    assert (
        _refusal(kind, "empty") == f"{tmp_path / 'empty.yaml'}: a thing is a mapping, got nothing (the file is empty)"
    )
    assert _refusal(kind, "broken") == (
        f"{tmp_path / 'broken.yaml'}:2:1: YAML syntax error: expected ',' or ']', but got '<stream end>'"
        " (while parsing a flow sequence at line 1)"
    )


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        # Where the parser gave up, and the construct it was in (and where that began).
        (
            "name: x\nlimits: {port: 1\nother: 2\n",
            "3:6",
            "expected ',' or '}', but got ':' (while parsing a flow mapping at line 2)",
        ),
        ('name: "x\n', "2:1", "found unexpected end of stream (while scanning a quoted scalar at line 1)"),
        # No context: the problem alone.
        ("name: x\nlimits:\n  port: 1\n   other: 2\n", "4:9", "mapping values are not allowed here"),
        # A context without a mark of its own.
        (
            "name: x\n\tlimits: {}\n",
            "2:1",
            "found character '\\t' that cannot start any token (while scanning for the next token)",
        ),
        # PyYAML's reader refuses control characters by offset (no mark): the line and column are counted.
        (
            "name: x\nlimits: {port: \x07}\n",
            "2:16",
            "unacceptable character #x0007: special characters are not allowed",
        ),
    ],
    ids=["unclosed-flow", "unclosed-quote", "bad-indent", "tab", "control-character"],
)
def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(
    tmp_path: Path, text: str, where: str, says: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert _refusal(_kind(tmp_path), str(path)) == f"{path}:{where}: YAML syntax error: {says}"


def test_the_callers_wording_and_cross_field_rule_are_its_own(tmp_path: Path) -> None:
    kind = YamlKind(
        model=Thing,
        directory=tmp_path,
        error=ThingError,
        no_such_file="{name}: no such file",
        no_such_name="{name}: no such thing",
        not_a_mapping="{source}: not a mapping",
        describe=lambda source, exc: f"{source}: {len(exc.errors())} problem(s)",
        check=lambda thing: "the name 'x' is reserved" if thing.name == "x" else None,
    )
    with pytest.raises(ThingError, match=r"^t: 2 problem\(s\)$"):
        kind.parse({"name": 1, "extra": 2}, "t")
    with pytest.raises(ThingError, match=r"^t: the name 'x' is reserved$"):
        kind.parse({"name": "x"}, "t")


def test_a_loaded_model_cannot_be_changed() -> None:
    thing = Thing(name="a")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        thing.name = "b"  # type: ignore[misc]
