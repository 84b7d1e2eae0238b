"""Load and validate PRD files (``.json``, ``.jsonc``, ``.yaml``/``.yml``).

The canonical JSON Schema ships in the package as ``prd.schema.json`` and is the
single definition of the format. Loading reports every problem at once, each with
the file, the JSON path and, where it can be known, the line and column.

This module does not import pytest: the loop controller and the Stop hook use it too.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .model import PRD, Criterion, Story

#: Default size limit of a PRD file, in bytes (20 MiB).
MAX_PRD_BYTES = 20 * 1024 * 1024

#: File suffix -> format name.
PRD_FORMATS = {".json": "json", ".jsonc": "jsonc", ".yaml": "yaml", ".yml": "yaml"}

#: File names collected by plain ``pytest`` and tried, in order, by PRD discovery.
PRD_FILE_NAMES = ("prd.json", "prd.jsonc", "prd.yaml", "prd.yml")

#: Folders (relative to the rootdir) searched, in order, by PRD discovery.
PRD_SEARCH_DIRS = (".", ".ralph", "scripts/ralph")

_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The YAML loader used for PRDs: PyYAML's C-accelerated safe loader when available.
YAML_LOADER = _YAML_LOADER


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a PRD file.

    Attributes:
        json_path: where, as a JSON path (``$.userStories[1].id``); ``$`` for the whole file.
        message: what was expected and what was found.
        line: 1-based line, when known.
        column: 1-based column, when known.
        hint: how to fix it, or ``""``.
    """

    json_path: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str = ""

    def format(self, path: Path | str) -> str:
        """``file:line:column: json_path: message`` (parts that are unknown are left out)."""
        where = str(path)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: {self.json_path}: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text


class PRDError(Exception):
    """A PRD file that cannot be used; carries every problem found.

    Attributes:
        path: the PRD file.
        problems: the problems, in file order where positions are known.
    """

    def __init__(self, path: Path | str, problems: list[Problem]) -> None:
        self.path = Path(path)
        self.problems = problems
        super().__init__(self.describe())

    def describe(self) -> str:
        """A multi-line message: a header naming the file, then one entry per problem."""
        n = len(self.problems)
        head = f"invalid PRD {self.path}: {n} problem{'s' if n != 1 else ''}"
        return "\n".join([head, *("  " + p.format(self.path) for p in self.problems)])


# ---------------------------------------------------------------------------------------------
# The schema


@functools.cache
def schema() -> dict[str, Any]:
    """The canonical PRD JSON Schema (draft 2020-12), loaded once from the package data."""
    text = resources.files("pytest_ralph").joinpath("prd.schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


# ---------------------------------------------------------------------------------------------
# Reading and parsing


def load_prd(path: Path | str, *, max_bytes: int = MAX_PRD_BYTES) -> PRD:
    """Read, parse and validate a PRD file.

    Args:
        path: a ``.json``, ``.jsonc``, ``.yaml`` or ``.yml`` file.
        max_bytes: files larger than this many bytes are refused.

    Returns:
        The PRD; ``stories`` may be empty (an empty ``userStories``), which callers
        report as "no criteria".

    Raises:
        PRDError: the file is missing, unreadable, too large, not UTF-8, not valid
            JSON/YAML, or does not match the schema. Every problem found is listed.
    """
    path = Path(path).absolute()
    fmt = PRD_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise PRDError(
            path,
            [Problem("$", f"unknown PRD file type {path.suffix!r}",
                     hint="use one of " + ", ".join(PRD_FORMATS))],
        )
    text = _read_text(path, max_bytes)
    data, duplicates = _parse(path, text, fmt)
    positions = _Positions(text, fmt)
    problems: list[Problem] = []
    if duplicates or fmt == "yaml":
        problems += [
            Problem(jp, f"duplicate key {key!r}", *positions.at(jp), hint="keep only one of them")
            for jp, key in positions.duplicate_keys()
        ]
        if not problems:  # positions unknown: still report what the JSON parser saw
            problems += [Problem("$", f"duplicate key {key!r} in an object",
                                 hint="keep only one of them") for key in duplicates]
    text_problems = _unicode_problems(data, positions)
    if text_problems:  # the schema's messages would have to print that text: stop here
        problems += text_problems
        problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
        raise PRDError(path, problems)
    problems += _schema_problems(data, positions)
    problems += _duplicate_id_problems(data, positions)
    if not problems:
        return _build(path, fmt, data, positions)
    problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
    raise PRDError(path, problems)


def _read_text(path: Path, max_bytes: int) -> str:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise PRDError(path, [Problem(
                "$", f"file is {size} bytes, over the limit of {max_bytes} bytes",
                hint="split the PRD, or raise the limit (ini ralph_max_prd_bytes)")])
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PRDError(path, [Problem("$", "file not found")]) from None
    except IsADirectoryError:
        raise PRDError(path, [Problem("$", "expected a file, found a directory")]) from None
    except OSError as exc:
        raise PRDError(path, [Problem("$", f"cannot read the file: {exc.strerror}")]) from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (
            len(raw) >= 2 and (raw[0] == 0) != (raw[1] == 0)):
        raise PRDError(path, [Problem("$", "file is UTF-16; expected UTF-8",
                                      hint="save the file as UTF-8")])
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[line_start:exc.start].decode("utf-8", "replace")) + 1
        raise PRDError(path, [Problem(
            "$", f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            line, column, hint="save the file as UTF-8")]) from None


def _parse(path: Path, text: str, fmt: str) -> tuple[Any, list[str]]:
    """Parse ``text``; return the data and the keys repeated in an object (JSON only)."""
    if fmt == "yaml":
        try:
            return yaml.load(text, Loader=_YAML_LOADER), []
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            column = mark.column + 1 if mark else None
            raise PRDError(path, [Problem(
                "$", f"invalid YAML: {exc.problem or exc.context}", line, column)]) from None
        except yaml.YAMLError as exc:
            raise PRDError(path, [Problem("$", f"invalid YAML: {exc}")]) from None
        except ValueError as exc:  # e.g. an integer of 5000 digits
            raise PRDError(path, [Problem("$", f"invalid YAML: {_value_error(exc)}")]) from None
        except RecursionError:
            raise PRDError(path, [Problem("$", "invalid YAML: nested too deeply")]) from None
    duplicates: list[str] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                duplicates.append(key)
            obj[key] = value
        return obj

    source = strip_jsonc(text) if fmt == "jsonc" else text
    try:
        return json.loads(source, object_pairs_hook=pairs_hook), duplicates
    except json.JSONDecodeError as exc:
        hint = ""
        before = source[: exc.pos].rstrip()
        if fmt == "json" and re.match(r"\s*(//|/\*)", source[exc.pos:]):
            hint = "comments are not allowed in .json: remove them, or rename the file to .jsonc"
        elif not source.strip():
            hint = "the file is empty; expected an object with a 'userStories' array"
        elif not source[exc.pos:].strip():
            hint = "the file ends too early: is it truncated?"
        elif before.endswith(",") and source[exc.pos] in "]}":
            hint = ("a trailing comma is not allowed in JSON: remove it"
                    + (", or rename the file to .jsonc" if fmt == "json" else ""))
        raise PRDError(path, [Problem("$", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno,
                                      hint)]) from None
    except ValueError as exc:  # e.g. an integer of 5000 digits
        raise PRDError(path, [Problem("$", f"invalid JSON: {_value_error(exc)}")]) from None
    except RecursionError:
        raise PRDError(path, [Problem("$", "invalid JSON: nested too deeply")]) from None


def _value_error(exc: ValueError) -> str:
    if "digits" in str(exc):
        return "a number has thousands of digits; expected an ordinary number"
    return str(exc)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _unicode_problems(data: Any, positions: _Positions) -> list[Problem]:
    """Strings (keys included) holding unpaired UTF-16 surrogates (``"\\ud800"`` in JSON):
    they are not text and cannot be printed or written back."""
    problems: list[Problem] = []
    stack: list[tuple[Any, list[str | int]]] = [(data, [])]
    seen: set[int] = set()  # YAML aliases can share containers, or nest one in itself
    while stack:
        value, parts = stack.pop()
        if isinstance(value, (dict, list)):
            if id(value) in seen:
                continue
            seen.add(id(value))
        if isinstance(value, str):
            if _SURROGATE.search(value):
                jp = json_path(parts)
                problems.append(Problem(jp, "expected text; found a string with an unpaired "
                                        "surrogate escape such as \\ud800", *positions.at(jp),
                                        hint="remove the escape, or write the character itself"))
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    jp = json_path(parts)
                    problems.append(Problem(jp, "expected text; found a key with an unpaired "
                                            "surrogate escape such as \\ud800", *positions.at(jp)))
                stack.append((item, [*parts, key]))
        elif isinstance(value, list):
            stack.extend((item, [*parts, i]) for i, item in enumerate(value))
    return problems


def strip_jsonc(text: str) -> str:
    """Blank out ``//`` and ``/* */`` comments and trailing commas of JSONC text.

    Every removed character becomes a space (newlines are kept), so line and column
    numbers of the result match the original. Strings are left untouched.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma: int | None = None
    while i < n:
        ch = text[i]
        if ch == '"':
            last_comma = None
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for j in range(i, end):
                if out[j] != "\n":
                    out[j] = " "
            i = end
            continue
        if ch == ",":
            last_comma = i
        elif ch in "}]":
            if last_comma is not None:
                out[last_comma] = " "
            last_comma = None
        elif not ch.isspace():
            last_comma = None
        i += 1
    return "".join(out)


_YAML_UNSAFE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")

#: A ``\uD800``-``\uDFFF`` escape of a JSON string (half of a UTF-16 surrogate pair, or an
#: unpaired one): an odd number of backslashes before the ``u``. Group 1 is the even run of
#: escaped backslashes in front of it.
_SURROGATE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")

#: What replaces a surrogate escape for composing: an escape of the same length ("X").
_SURROGATE_PLACEHOLDER = r"\u0058"


class _Positions:
    """Maps JSON paths to (line, column), computed lazily from a YAML node tree.

    JSON is (for our purposes) a subset of YAML, so PyYAML's composer gives the
    positions of JSON and YAML files alike. When composing fails, positions are unknown.
    """

    def __init__(self, text: str, fmt: str) -> None:
        self._text = strip_jsonc(text) if fmt == "jsonc" else text
        #: The JSON text before the edits below, when they changed it: keys are read from it.
        self._json: str | None = None
        if fmt != "yaml":
            source = self._text
            # YAML breaks lines at NEL/LS/PS and refuses non-printables; JSON allows them in
            # strings. Blank them (same length) so lines match json's and composing works.
            self._text = _YAML_UNSAFE.sub(" ", self._text)
            # libyaml refuses surrogate escapes, even a valid pair such as "\ud83d\ude00"
            # (one emoji in JSON): write each as an escape of "X" of the same length.
            self._text = _SURROGATE_ESCAPE.sub(
                lambda m: m.group(1) + _SURROGATE_PLACEHOLDER, self._text)
            if self._text != source:
                self._json = source
        self._map: dict[str, tuple[int, int]] | None = None
        self._dups: list[tuple[str, str]] = []
        self._walked: set[int] = set()

    def _build(self) -> dict[str, tuple[int, int]]:
        if self._map is None:
            self._map = {}
            try:
                node = yaml.compose(self._text, Loader=_YAML_LOADER)
            except (yaml.YAMLError, RecursionError):
                node = None
            if node is not None:
                self._walk(node, "$")
        return self._map

    def _walk(self, node: yaml.Node, jp: str) -> None:
        assert self._map is not None
        self._map[jp] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.CollectionNode):
            if id(node) in self._walked:  # a YAML alias: may be recursive or exponential
                return
            self._walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                name = self._key_name(key)
                child = f"{jp}.{name}" if re.fullmatch(r"[A-Za-z_]\w*", name) else (
                    f"{jp}[{json.dumps(name)}]")
                if name in seen:
                    self._dups.append((child, name))
                    self._map.setdefault(child + "#dup", (key.start_mark.line + 1,
                                                          key.start_mark.column + 1))
                seen.add(name)
                self._walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, f"{jp}[{i}]")

    def _key_name(self, key: yaml.Node) -> str:
        """The name of a mapping key; a JSON key that the edits of ``__init__`` touched is
        decoded from the JSON text, so that its name is the one ``json.loads`` gives."""
        name = str(key.value)
        if self._json is not None and isinstance(key, yaml.ScalarNode) and key.style == '"':
            start, end = key.start_mark.index, key.end_mark.index
            if self._json[start:end] != self._text[start:end]:
                with contextlib.suppress(ValueError):
                    name = str(json.loads(self._json[start:end]))
        return name

    def at(self, jp: str) -> tuple[int | None, int | None]:
        """(line, column) of the value at ``jp``, or ``(None, None)``."""
        m = self._build()
        pos = m.get(jp + "#dup") or m.get(jp)
        return pos if pos else (None, None)

    def duplicate_keys(self) -> list[tuple[str, str]]:
        """(JSON path, key) of every repeated key in an object."""
        self._build()
        return list(self._dups)


#: Public name of the JSON-path -> (line, column) locator, for write-back.
Positions = _Positions


def json_path(parts: Iterable[str | int]) -> str:
    """Format path parts (keys and indices) as a JSON path: ``$.userStories[0].id``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_]\w*", part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


# ---------------------------------------------------------------------------------------------
# Validation


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"string {json.dumps(shown, ensure_ascii=False)}"
    if isinstance(value, list):
        return f"an array of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:8])
        return f"an object with keys {keys}" if value else "an empty object"
    return type(value).__name__


_TYPE_NAMES = {"object": "an object", "array": "an array", "string": "a string",
               "integer": "an integer", "number": "a number", "boolean": "true or false",
               "null": "null"}

#: Check key -> (criterion kind, index of its branch in the schema's criterion ``anyOf``).
CHECK_KEYS: dict[str, tuple[str, int]] = {
    "run": ("run", 1), "testCommand": ("run", 1), "pytest": ("pytest", 2),
    "exists": ("exists", 3), "file": ("file", 4), "sql": ("sql", 5), "schema": ("schema", 6),
    "python": ("python", 7),
}
_CHECK_KEYS = tuple(CHECK_KEYS)


def _schema_problems(data: Any, positions: _Positions) -> list[Problem]:
    if not isinstance(data, dict):
        line, col = positions.at("$")
        return [Problem("$", f"expected an object with a 'userStories' array; found "
                        f"{_describe(data)}", line, col)]
    problems: list[Problem] = []
    for err in _validator().iter_errors(data):
        if err.validator == "anyOf" and "acceptanceCriteria" in err.absolute_path:
            problems += _criterion_problems(err, positions)
        else:
            problems.append(_problem(err, positions))
    return problems


def _problem(err: jsonschema.ValidationError, positions: _Positions) -> Problem:
    jp = json_path(err.absolute_path)
    line, col = positions.at(jp)
    inst = err.instance
    kind = err.validator
    value: Any = err.validator_value
    hint = ""
    if kind == "type":
        names = [value] if isinstance(value, str) else list(value)
        expected = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
        msg = f"expected {expected}; found {_describe(inst)}"
        if names == ["boolean"] and isinstance(inst, str) and inst.lower() in ("true", "false"):
            hint = f"write {inst.lower()} without quotes"
    elif kind == "required":
        m = re.match(r"^'(.*)' is a required property$", err.message)
        msg = f"missing required key {m.group(1)!r}" if m else err.message
    elif kind == "pattern" and list(err.absolute_path)[-1:] == ["python"]:
        msg = f"expected 'module:function'; found {_describe(inst)}"
        hint = 'e.g. "myapp.checks:login_works"'
    elif kind == "pattern":
        msg = (f"invalid id {json.dumps(inst, ensure_ascii=False)}: an id may not contain "
               "whitespace, control characters, '/', '[', ']' or '::' (it becomes part of a "
               "pytest node id)")
    elif kind == "minLength":
        msg = f"expected a non-empty string; found {_describe(inst)}"
    elif kind in ("minimum", "maximum", "exclusiveMinimum"):
        bound = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">"}[str(kind)]
        msg = f"expected a number {bound} {value}; found {inst!r}"
    elif kind == "anyOf" and list(err.absolute_path)[-1:] == ["pytest"]:
        msg = ("expected a node id or path (a non-empty string), or a non-empty list of them; "
               f"found {_describe(inst)}")
        hint = 'e.g. "tests/test_login.py::test_ok"'
    elif kind == "oneOf" and isinstance(inst, dict) and "run" in inst and "testCommand" in inst:
        msg = "a criterion has both 'run' and 'testCommand' (aliases); expected one of them"
        hint = "keep 'run'"
    else:
        msg = err.message
    return Problem(jp, msg, line, col, hint)


def _criterion_problems(err: jsonschema.ValidationError, positions: _Positions) -> list[Problem]:
    jp = json_path(err.absolute_path)
    line, col = positions.at(jp)
    inst = err.instance
    known = ", ".join(repr(k) for k in _CHECK_KEYS)
    present = [k for k in _CHECK_KEYS if isinstance(inst, dict) and k in inst]
    if present:
        # A check object with bad fields: report every error of its kind's branch, each
        # at the field it is about.
        branch = CHECK_KEYS[present[0]][1]
        sub = [e for e in err.context or [] if e.relative_schema_path[0] == branch]
        if sub:
            return [_problem(e, positions) for e in sub]
    if isinstance(inst, dict):
        msg = (f"expected a criterion: a string, or an object with one check key ({known}); "
               f"found {_describe(inst)}")
        hint = "write the criterion as text, or add a check key such as 'run'"
    else:
        msg = (f"expected a criterion: a non-empty string, or an object with one check key "
               f"({known}); found {_describe(inst)}")
        hint = "quote it as text" if isinstance(inst, (int, float)) else ""
    return [Problem(jp, msg, line, col, hint)]


def _check_field_problems(c: dict[str, Any], cp: str, positions: _Positions) -> list[Problem]:
    """Problems the schema cannot see in one check object: several check kinds at once
    (``run`` and ``testCommand`` are one kind), a ``contains`` that is not a regex."""
    problems = []
    kinds = sorted({CHECK_KEYS[k][0] for k in c if k in CHECK_KEYS})
    if len(kinds) > 1:
        keys = ", ".join(repr(k) for k in c if k in CHECK_KEYS)
        problems.append(Problem(cp, f"a criterion has several check kinds ({keys}); expected "
                                "exactly one", *positions.at(cp),
                                hint="split it into one criterion per check"))
    pattern = c.get("contains")
    if "file" in c and isinstance(pattern, str):
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            problems.append(Problem(f"{cp}.contains", f"expected a regular expression; found "
                                    f"{json.dumps(pattern)}, which does not compile: {exc}",
                                    *positions.at(f"{cp}.contains"),
                                    hint="escape special characters with a backslash"))
    return problems


def _duplicate_id_problems(data: Any, positions: _Positions) -> list[Problem]:
    """Duplicate story ids, and duplicate criterion ids within a story, from the raw data
    (so that they are reported together with schema problems)."""
    problems: list[Problem] = []
    stories = data.get("userStories") if isinstance(data, dict) else None
    if not isinstance(stories, list):
        return problems
    first_story: dict[str, str] = {}
    for pos, story in enumerate(stories):
        if not isinstance(story, dict) or not isinstance(story.get("id"), str):
            continue
        sid: str = story["id"]
        sp = f"$.userStories[{pos}]"
        if sid in first_story:
            problems.append(Problem(
                sp + ".id", f"duplicate story id {sid!r} (first used at {first_story[sid]})",
                *positions.at(sp + ".id"), hint="give every story its own id"))
        else:
            first_story[sid] = sp
        criteria = story.get("acceptanceCriteria")
        if not isinstance(criteria, list):
            continue
        seen: dict[str, str] = {}
        for i, c in enumerate(criteria):
            if isinstance(c, dict):
                problems += _check_field_problems(c, f"{sp}.acceptanceCriteria[{i}]", positions)
            explicit = c.get("id") if isinstance(c, dict) else None
            cid = explicit if isinstance(explicit, str) and explicit else f"AC{i + 1}"
            cp = f"{sp}.acceptanceCriteria[{i}]"
            if cid in seen:
                problems.append(Problem(
                    cp, f"duplicate criterion id {cid!r} in story {sid!r} (also {seen[cid]})",
                    *positions.at(cp), hint="give the criterion its own 'id'"))
            seen.setdefault(cid, cp)
    return problems


# ---------------------------------------------------------------------------------------------
# Building the model


def _build(path: Path, fmt: str, data: dict[str, Any], positions: _Positions) -> PRD:
    stories = tuple(_build_stories(data.get("userStories", []), positions))
    return PRD(
        path=path,
        format=fmt,
        project=str(data.get("project") or ""),
        branch_name=str(data.get("branchName") or ""),
        description=str(data.get("description") or ""),
        stories=stories,
    )


def _default_text(kind: str, c: dict[str, Any]) -> str:
    """The headline of a check object that has no ``text``."""
    if kind == "run":
        return str(c.get("run", c.get("testCommand")))
    if kind == "pytest":
        targets = c["pytest"] if isinstance(c["pytest"], list) else [c["pytest"]]
        return "pytest " + " ".join(targets)
    if kind == "exists":
        return f"{c['exists']} exists"
    if kind == "sql":
        return f"{c['sql']} on {c['db']} gives {json.dumps(c['expect'])}"
    if kind == "schema":
        return f"{c['instance']} matches the schema {c['schema']}"
    if kind == "python":
        return f"{c['python']}() passes"
    return f"{c['file']} contains /{c['contains']}/" if "contains" in c else f"{c['file']} exists"


def _build_stories(raw: list[dict[str, Any]], positions: _Positions) -> Iterator[Story]:
    for pos, s in enumerate(raw):
        sp = f"$.userStories[{pos}]"
        sid = s["id"]
        criteria: list[Criterion] = []
        for i, c in enumerate(s.get("acceptanceCriteria") or [], start=1):
            cp = f"{sp}.acceptanceCriteria[{i - 1}]"
            line = positions.at(cp)[0]
            if isinstance(c, str):
                criteria.append(Criterion(sid, i, f"AC{i}", c, "text", json_path=cp, line=line))
                continue
            key = next(k for k in _CHECK_KEYS if k in c)
            kind = CHECK_KEYS[key][0]
            timeout = c.get("timeout")
            command = c.get("run", c.get("testCommand"))
            criteria.append(Criterion(
                sid, i, c.get("id") or f"AC{i}", c.get("text") or _default_text(kind, c), kind,
                command=command, timeout=float(timeout) if timeout is not None else None,
                cwd=c.get("cwd"), json_path=cp, line=line,
                spec={k: v for k, v in c.items() if k not in ("id", "text")}))
        if not criteria:
            criteria.append(Criterion(sid, 1, "AC1", s["title"], "text", json_path=f"{sp}.title",
                                      line=positions.at(f"{sp}.title")[0], synthesized=True))
        yield Story(
            id=sid,
            title=s["title"],
            description=s.get("description") or "",
            criteria=tuple(criteria),
            priority=s.get("priority"),
            passes=s.get("passes") is True,
            notes=s.get("notes") or "",
            position=pos,
            json_path=sp,
            line=positions.at(sp)[0],
        )


# ---------------------------------------------------------------------------------------------
# Discovery


def discover_prd(rootdir: Path) -> Path | None:
    """The first of ``prd.json``, ``prd.jsonc``, ``prd.yaml``, ``prd.yml`` in ``rootdir``,
    then in ``rootdir/.ralph``, then in ``rootdir/scripts/ralph``; ``None`` if there is none."""
    for folder in PRD_SEARCH_DIRS:
        for name in PRD_FILE_NAMES:
            candidate = rootdir / folder / name
            if candidate.is_file():
                return candidate.resolve()
    return None
