"""The make variables, each checked against a strict pattern before a target runs anything.

    python3.11 -I -S serving/config/make_vars.py TARGET      silent and exit 0, or one line and exit 2

The Makefile exports every variable it takes from the operator, and its recipes read them from the environment,
quoted ("$$HOST"), so that no value is ever parsed as shell. This is the second wall: a value that is not what its
variable takes (a host name, a path, a whole number, a word from a list) is refused here, in one line that names
the variable, shows the value (escaped, on one line) and says what to give instead, before any recipe line that
does something. The values that reach ansible-playbook go there as an extra-vars file that Ansible does not
template (serving/bridge/play.py), and ANSIBLE_ARGS is checked here for the mistakes that Ansible reports in 40
lines or silently (ansible_args_error, called by play.py, which knows the -e names the target sets itself).
unsafe_yaml writes extra vars Ansible never templates (play.py's, make verify's).

It runs on every target, before the virtualenv exists where make creates it: the standard library only, nothing
of serving/ imported, and `-S` (no site-packages), so that it costs about 20 ms.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass

PROBES = ("io", "samplers", "metrics", "stacks", "wchan", "perf", "hoststate", "record")
_PROBES_SAID = ", ".join(PROBES[:-1]) + " or " + PROBES[-1]

# A path as make takes it (an inventory, a profile or workload file, a run directory): plain characters only, so
# that it needs no quoting anywhere it goes; no '..' component, so that it cannot climb out of where it is
# resolved (runs/, serving/profiles/); no leading '-', so that no command reads it as an option.
_PATH = r"[A-Za-z0-9_.+@/][A-Za-z0-9_.+@/-]*"
_PATHS = rf"{_PATH}(,{_PATH})*"  # several, comma-separated (make compare's sides)
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # an inventory host or group
_WHOLE = r"[1-9][0-9]{0,8}"
_FREE = r"[^\x00-\x1f\x7f]*"  # printable: no newline, no control character (the value stays one line everywhere)


@dataclass(frozen=True)
class Var:
    pattern: str  # the whole value, "" included where the pattern allows it
    give: str  # what to give instead
    path: bool = False  # a path: no '..' component either
    secret: bool = False  # may hold a credential: the refusal does not show the value


# fmt: off
VARS: dict[str, Var] = {
    "HOST": Var(_NAME, "give HOST=<a host or group of the inventory> (letters, digits, . _ -)"),
    "INVENTORY": Var(_PATH, "give INVENTORY=<inventory directory> (letters, digits, . _ + @ - /, no '..')", True),
    "PROFILE": Var(f"|{_PATH}", "give PROFILE=<name in serving/profiles/> or a path (no '..', no shell characters)",
                   True),
    "SECONDS": Var(f"|{_WHOLE}", "give SECONDS=n, the window in whole seconds, 1 or more (default 20)"),
    "PROBE": Var("|" + "|".join(PROBES), f"choose {_PROBES_SAID}"),
    "WORKLOAD": Var(f"|{_PATH}", "give one workload name (serving/workloads/) or one path, without spaces", True),
    "RUNS": Var(f"|{_WHOLE}", "give RUNS=n, measured runs per point, 1 or more (unset: the workload's)"),
    "SEARCH": Var("|rate|concurrency", "give SEARCH=rate (arrival rate, no cap) or SEARCH=concurrency"),
    "VIA": Var(
        r"|front|(https://)?[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]{1,5}|(https://)?\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}",
        "give VIA=front (the front door) or VIA=host:port of a proxy (letters, digits, . -; https://host:port for "
        "one that takes TLS, which a keyed deploy requires), without spaces",
    ),
    "REQUESTS": Var(f"|{_WHOLE}", "give REQUESTS=n, requests under the profiler, 1 or more (default 4)"),
    "KEEP": Var("|1", "give KEEP=1 to leave the engine profiled, or leave KEEP unset"),
    "PROFILER": Var("|torch", "give PROFILER=torch (the profiled engine), or leave it unset"),
    "A": Var(f"|{_PATHS}", "give A=<run dir or ts, comma-separated> or A=<profile> (no '..', no shell characters)",
             True),
    "B": Var(f"|{_PATHS}", "give B=<run dir or ts, comma-separated> or B=<profile> (no '..', no shell characters)",
             True),
    "C": Var(f"|{_PATHS}", "give C=<run dir or ts, comma-separated> (no '..', no shell characters)", True),
    "D": Var(f"|{_PATHS}", "give D=<run dir or ts, comma-separated> (no '..', no shell characters)", True),
    "VARIABLE": Var(r"|[A-Za-z][A-Za-z0-9_.]*(,[A-Za-z][A-Za-z0-9_.]*)*",
                    "give VARIABLE=<condition> (e.g. max_num_seqs), or two comma-separated for a 2x2"),
    "DESIGN": Var("|restarts", "give DESIGN=restarts (each side's benches from their own deploys), or leave it unset"),
    "LEVEL": Var(r"|0?\.[0-9]{1,6}", "give LEVEL=0.95 or the like, the confidence of all intervals together"),
    "REF": Var(f"|{_PATH}", "give REF=runs/<host>/<ts>/manifest.json, its directory, or its run id", True),
    "RUN": Var(f"|{_PATH}", "give RUN=runs/<host>/<ts> (or its capture/ or bench/), or the <ts>", True),
    "HYPOTHESIS": Var(_FREE, "give HYPOTHESIS='<one line>' (no newline or control character)"),
    "PREDICT": Var(_FREE, "give PREDICT='<figure> up|down [>= n[%]] [at cN]' on one line"),
    "PYTEST_ARGS": Var(_FREE, "give PYTEST_ARGS='<pytest arguments>' on one line"),
    "LOCK_WHEELHOUSE": Var(f"|{_PATH}", "give LOCK_WHEELHOUSE=<directory of torch +cpu wheels> (no '..', no shell "
                           "characters), for make lock", True),
    "ANSIBLE_ARGS": Var(_FREE, "give ANSIBLE_ARGS='<ansible-playbook options>' on one line", secret=True),
}
# SECONDS is bash's own variable (seconds since the shell started): the recipes never read it; make exports its
# value as this instead, which the checker and play.py read.
ENV_NAME = {"SECONDS": "REFDEPLOY_SECONDS"}

# Given for the target, or it cannot run: (variable, the line's advice).
_WINDOW = "give SECONDS=n, the window in whole seconds, 1 or more (default 20)"
REQUIRED: dict[str, tuple[tuple[str, str], ...]] = {
    "probe": (("PROBE", f"set PROBE={_PROBES_SAID}"), ("SECONDS", _WINDOW)),
    "capture": (("SECONDS", _WINDOW),),
    "profile": (("REQUESTS", "give REQUESTS=n, requests under the profiler, 1 or more (default 4)"),),
    "compare": (("A", "set A=<run> and B=<run> (runs/<host>/<ts>, or the ts; several: comma-separated)"),
                ("B", "set A=<run> and B=<run> (runs/<host>/<ts>, or the ts; several: comma-separated)")),
    "validate": (("A", "set A=<profile> and B=<profile> (names in serving/profiles/ or paths); A is left deployed"),
                 ("B", "set A=<profile> and B=<profile> (names in serving/profiles/ or paths); A is left deployed")),
}
# fmt: on


def shown(name: str, value: str) -> str:
    """NAME=value as the operator would type it, on one line: quoted where it holds more than plain characters,
    control characters escaped (a newline in it must not make the refusal two lines)."""
    # A URL's user:password is never shown (a proxy given as VIA=http://user:pw@proxy:3128).
    value = re.sub(r"(?<=://)[^/@\s]*@", "***@", value)
    if re.fullmatch(r"[A-Za-z0-9_.,:/@+=%*-]*", value):
        return f"{name}={value}"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)
    return f"{name}='" + text.replace("'", "'\\''") + "'"


def var_error(name: str, value: str) -> str | None:
    """What is wrong with NAME=value, in the words after 'make TARGET: ' (None: nothing)."""
    var = VARS[name]
    said = f"{name}=<not shown: it may hold a credential>" if var.secret else shown(name, value)
    if not re.fullmatch(var.pattern, value):
        if name == "PROBE":
            return f"{said} is not a probe: {var.give}"
        return f"{said}: {var.give}"
    if var.path and ".." in re.split(r"[/,]", value):
        return f"{said}: a '..' in it climbs out of where it is looked up: {var.give}"
    return None


def check(target: str, env: Mapping[str, str]) -> str | None:
    """The one line refusing the first bad variable of `target` (None: all good)."""
    values = {name: env.get(ENV_NAME.get(name, name), "") for name in VARS}
    for name, value in values.items():
        if (why := var_error(name, value)) is not None:
            return f"make {target}: {why}"
    try:
        shlex.split(values["PYTEST_ARGS"])
    except ValueError as e:
        return f"make {target}: {shown('PYTEST_ARGS', values['PYTEST_ARGS'])}: {e}: close each quote"
    if (why := ansible_args_error(values["ANSIBLE_ARGS"], {}, target)) is not None:
        return why
    for name, advice in REQUIRED.get(target, ()):
        if name == "SECONDS" and values["PROBE"] == "io":
            continue  # the I/O probe has no window
        if not values[name]:
            return f"make {target}: {advice}" if name in ("PROBE", "A", "B") else f"make {target}: {name}=: {advice}"
    if target == "validate" and values["PROFILE"]:
        return "make validate: A and B name the profiles; leave PROFILE unset"
    return None


def _extra_vars(args: list[str]) -> list[str]:
    """Every -e / --extra-vars value in an ansible-playbook argument list."""
    out = []
    for i, a in enumerate(args):
        if a in ("-e", "--extra-vars") and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith("--extra-vars="):
            out.append(a.split("=", 1)[1])
        elif a.startswith("-e") and len(a) > 2 and not a.startswith("--"):
            out.append(a[2:])
    return out


def ansible_args_error(text: str, owned: Mapping[str, str], target: str) -> str | None:
    """What is wrong with ANSIBLE_ARGS for `target`, whose own -e names `owned` maps to the make variable that sets
    each (None: nothing). A name the Makefile sets is refused rather than let win or lose: Ansible takes the last
    -e silently, so one of the two values would be lost without a word, and the make variable's is the checked one.
    The value is never shown: an -e may carry a credential."""
    where = f"make {target}: ANSIBLE_ARGS"
    try:
        args = shlex.split(text)
    except ValueError as e:
        return f"{where}: {e} (an unclosed quote?): quote each -e value whole, e.g. ANSIBLE_ARGS='-e \"x=a b\"'"
    for value in _extra_vars(args):
        if value.startswith("@"):
            continue  # the operator's own file: Ansible reads it whole, and the Makefile's values come after it
        if re.search(r"\{[{%#]", value):
            # Ansible renders a template in an -e value wherever the variable is used: a {{ lookup('pipe', ...) }}
            # from CI or chat tooling would run on the controller.
            name = re.match(r"\s*\{?\s*\"?([A-Za-z_][A-Za-z0-9_]*)", value)
            return (
                f"{where}: -e {name.group(1) if name else '...'}: holds a template ({{{{, {{% or {{#), which Ansible "
                "would render: give the value itself, or put it in a vars file of yours (-e @file)"
            )
        if value.lstrip().startswith(("{", "[")):
            try:
                parsed = json.loads(value)
            except ValueError:
                name = re.match(r"\s*\{\s*\"?([A-Za-z_][A-Za-z0-9_]*)", value)
                about = f"-e {name.group(1)}" if name else "an -e value"
                return (
                    f"{where}: {about}: its JSON was split at a space or lost its quotes: quote it whole, e.g. "
                    f"ANSIBLE_ARGS='-e '\\''{{\"{name.group(1) if name else 'x'}\": [1, 2]}}'\\'''"
                )
            names = list(parsed) if isinstance(parsed, dict) else []
        else:
            pairs = [p.split("=", 1) for p in shlex.split(value) if "=" in p]
            for key, val in pairs:
                if val.startswith(("[", "{")):
                    return (
                        f"{where}: -e {key}={val[:1]}...: key=value gives a string, never a list or mapping: give "
                        f"it as JSON, quoted whole: ANSIBLE_ARGS='-e '\\''{{\"{key}\": [1, 64]}}'\\'''"
                    )
            names = [k for k, _ in pairs]
        for key in names:
            if key in owned:
                return (
                    f"{where}: -e {key}: the Makefile sets {key} from {owned[key]}: give {owned[key]}= instead "
                    "(two values for one name: Ansible would keep one of them without a word)"
                )
    return None


def unsafe_yaml(values: dict[str, str]) -> str:
    """Extra vars as YAML that Ansible reads as data: each value a double-quoted string tagged !unsafe. A JSON
    string with every non-ASCII character escaped is a valid YAML double-quoted scalar, so no YAML library is
    needed; a name is an Ansible variable name (the Makefile's --var, verify-ref's names)."""
    lines = []
    for name, value in values.items():
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not an Ansible variable name")
        lines.append(f"{name}: !unsafe {json.dumps(value, ensure_ascii=True)}\n")
    return "---\n" + "".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python3.11 -I -S serving/config/make_vars.py TARGET...", file=sys.stderr)
        return 2
    for target in argv:  # make's goals, in the order make runs them
        if (line := check(target, os.environ)) is not None:
            print(line, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
