"""The one way an operator's YAML becomes a model: a strict base, and a loader whose errors say what to fix.

Profiles, workloads and the pinned-RAM budget's inputs are typed by hand, so a misspelled key or a quoted number
must be refused, never ignored or coerced: every such model derives from `StrictModel`, and so does every other
model of serving/ (the plan, the bench's summary), so there is one set of rules to know. Profiles and workloads
are also files an operator names on the command line (a name in the shipped directory, or a path), and a bad one
must fail as one `InputError` line (the CLI prints it and exits 2; the Ansible plugins fail the task with it), not
a pydantic traceback. `YamlKind` holds that path once; each kind keeps its own error class and its own wording,
which tests and operators already rely on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from serving.config.redact import redact_text
from serving.errors import InputError


class StrictModel(BaseModel):
    """Unknown keys and wrong types are errors, and a loaded model cannot be changed behind the plan's back.

    The one base of serving/'s models; it sits in config, the lowest floor that may import pydantic (standalone is
    the standard library's alone). A model read back from JSON that holds dataclasses sets strict=False for itself
    and says why (serving/plan/launch.py Launch)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


M = TypeVar("M", bound=BaseModel)


def field_path(loc: tuple[int | str, ...], top: str = "(top)") -> str:
    """A pydantic error location as the operator writes it in YAML: vllm.max_num_seqs, concurrency.0."""
    return ".".join(str(p) for p in loc) or top


def one_line(source: str, exc: ValidationError) -> str:
    """Every problem on one line, each as field: pydantic's message (the default wording of `YamlKind`)."""
    problems = "; ".join(f"{field_path(tuple(e['loc']))}: {_said(e)}" for e in exc.errors(include_url=False))
    return f"{source}: {problems}"


def _said(error: Any) -> str:
    # pydantic's "Extra inputs are not permitted" says what is wrong, not what to do about it. A validator's own
    # words may quote the value given ("got '...'"): redacted, so that a refusal never prints a credential.
    return UNKNOWN_KEY if error["type"] == "extra_forbidden" else redact_text(str(error["msg"]))


UNKNOWN_KEY = "unknown key: remove it, or correct its spelling"


def _line_col(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line_start = text.rfind("\n", 0, position) + 1
    return text.count("\n", 0, position) + 1, position - line_start + 1


def yaml_syntax_error(source: str, exc: yaml.YAMLError, text: str) -> str:
    """PyYAML's error as one line that points at the spot to fix, as compilers do:
    `<source>:<line>:<col>: YAML syntax error: <problem> (<context> at line N)`.

    Built from the error's marks, not its str(), which spans lines (a caret under a copy of the line) and names
    "<unicode string>" rather than the file. Lines and columns are 1-based (the marks are 0-based).
    """
    where, problem, context = source, str(exc), ""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            where = f"{source}:{mark.line + 1}:{mark.column + 1}"
        problem = exc.problem or exc.context or "malformed YAML"
        if exc.problem and exc.context:
            at = f" at line {exc.context_mark.line + 1}" if exc.context_mark is not None else ""
            context = f" ({exc.context}{at})"
    elif isinstance(exc, yaml.reader.ReaderError):
        # A control character in the text (read as str, so never a byte it could not decode).
        line, col = _line_col(text, exc.position)
        where, problem = f"{source}:{line}:{col}", f"unacceptable character #x{exc.character:04x}: {exc.reason}"
    # Whatever PyYAML put in its own texts, the operator gets one line.
    return f"{where}: YAML syntax error: {' '.join(f'{problem}{context}'.split())}"


def read_yaml(path: Path, error: type[InputError] = InputError) -> Any:
    """A YAML file read with yaml.safe_load (no arbitrary tags); `error` with the one line when it is not YAML."""
    text = path.read_text()
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(yaml_syntax_error(str(path), exc, text)) from None


def slash_or_suffix(name_or_path: str) -> bool:
    """A path, not a name, when it has a '/' or a YAML suffix: a file in the working directory never shadows a name."""
    return "/" in name_or_path or name_or_path.endswith((".yaml", ".yml"))


@dataclass(frozen=True)
class YamlKind(Generic[M]):
    """One kind of operator YAML (profiles, workloads): where the names live, its model, its error and its words.

    The message templates are str.format strings; they get `name` (what the operator gave), `known` (the shipped
    names, comma-separated), `source` (the file) and `type` (the top level's Python type name) as they apply.
    """

    model: type[M]
    directory: Path
    error: type[InputError]
    # "{name}": a path that is not a file.
    no_such_file: str
    # "{name}", "{known}": a name with no <directory>/<name>.yaml.
    no_such_name: str
    # "{source}", "{type}": the YAML is not a mapping.
    not_a_mapping: str
    # The ValidationError as the caller words it: (source, exc) -> the message.
    describe: Callable[[str, ValidationError], str] = one_line
    # Whether what the operator gave is a path (else a name in `directory`).
    is_path: Callable[[str], bool] = slash_or_suffix
    # A rule across fields, run after validation: the problem in the caller's words (after "<source>: "), or None.
    check: Callable[[M], str | None] | None = None

    def known(self) -> list[str]:
        """The shipped names, sorted: what an unknown name is told to choose from."""
        return sorted(p.stem for p in self.directory.glob("*.yaml"))

    def resolve(self, name_or_path: str) -> Path:
        """The file a name (in `directory`) or a path stands for; the kind's error when there is none."""
        if self.is_path(name_or_path):
            path = Path(name_or_path)
            if not path.is_file():
                raise self.error(self.no_such_file.format(name=name_or_path))
            return path
        candidate = self.directory / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise self.error(self.no_such_name.format(name=name_or_path, known=", ".join(self.known())))
        return candidate

    def parse(self, data: Any, source: str) -> M:
        """Already-read data as the model; the kind's error, naming `source` and the fields, when it is not one."""
        if not isinstance(data, dict):
            # An empty file loads as None: say so, not "NoneType".
            kind = "nothing (the file is empty)" if data is None else type(data).__name__
            raise self.error(self.not_a_mapping.format(source=source, type=kind))
        try:
            value = self.model.model_validate(data)
        except ValidationError as exc:
            raise self.error(self.describe(source, exc)) from None
        problem = self.check(value) if self.check is not None else None
        if problem is not None:
            raise self.error(f"{source}: {problem}")
        return value

    def load(self, name_or_path: str) -> M:
        """Resolve, read with yaml.safe_load (no arbitrary tags), and parse: the model, or one error saying why."""
        path = self.resolve(name_or_path)
        return self.parse(read_yaml(path, self.error), str(path))
