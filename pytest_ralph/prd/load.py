"""Load and validate PRD files (``.json``, ``.jsonc``, ``.yaml``/``.yml``).

The canonical JSON Schema ships in the package as ``prd.schema.json`` and is the
single definition of the format. Loading reports every problem at once, each with
the file, the JSON path and, where it can be known, the line and column.

This module does not import pytest: the loop controller and the Stop hook use it too.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..util.files import FileTooLarge, NotRegularFile, read_bytes
from .dialects import (
    CRITERIA_KEYS,
    STORY_CONTAINERS,
    DialectError,
    Normalized,
    Origin,
    describe,
    json_path,
    normalize,
    source_path,
)
from .fastpath import (
    CHECK_FIELDS,
    NO_NUL_PATTERN,
    STORY_VOCABULARY,
    TOP_VOCABULARY,
    FastRules,
    fast_normalize,
    misspelt,
    regex_problem,
)
from .lines import JSONLines
from .model import PRD, Criterion, DeferredLine, Story

if TYPE_CHECKING:
    import jsonschema
    import yaml

#: Default size limit of a PRD file, in bytes (20 MiB).
MAX_PRD_BYTES = 20 * 1024 * 1024

#: File suffix -> format name.
PRD_FORMATS = {".json": "json", ".jsonc": "jsonc", ".yaml": "yaml", ".yml": "yaml"}

#: File names collected by plain ``pytest`` and tried, in order, by PRD discovery.
PRD_FILE_NAMES = ("prd.json", "prd.jsonc", "prd.yaml", "prd.yml")

#: Folders (relative to the rootdir) searched, in order, by PRD discovery.
PRD_SEARCH_DIRS = (".", ".ralph", "scripts/ralph")


#: Most values (strings, numbers, lists, mappings...) a PRD may hold; a PRD of 20,000
#: criteria holds about 100,000. At this many, loading takes seconds and hundreds of MB
#: (placing items and problems in the file); far beyond it, minutes and gigabytes.
MAX_VALUES = 500_000

#: Most problems one PRDError lists (the schema stops looking after this many).
MAX_PROBLEMS = 50

#: Deepest nesting of arrays and objects accepted in a PRD (a canonical PRD needs 5).
MAX_DEPTH = 64

#: YAML aliases may repeat values; more than this many values after expansion, and more
#: than :data:`ALIAS_EXPANSION` times the values written, is refused ("billion laughs").
MAX_EXPANDED_VALUES = 100_000

#: See :data:`MAX_EXPANDED_VALUES`.
ALIAS_EXPANSION = 10


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
        if n > MAX_PROBLEMS:  # the last entry says the list was cut
            head = (f"invalid PRD {self.path}: more than {MAX_PROBLEMS} problems, the first "
                    "shown")
        return "\n".join([head, *("  " + p.format(self.path) for p in self.problems)])


# ---------------------------------------------------------------------------------------------
# The schema


@functools.cache
def schema() -> dict[str, Any]:
    """The canonical PRD JSON Schema (draft 2020-12), loaded once from the package data."""
    text = resources.files("pytest_ralph.prd").joinpath("schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema  # only files the fast path cannot judge need it

    return jsonschema.Draft202012Validator(schema())


@functools.cache
def _fast_rules() -> FastRules:
    return FastRules.from_schema(schema())


#: A ``\uD800``-``\uDFFF`` escape (JSON, or YAML's ``\u``/``\U0000``): the text may hold
#: an unpaired surrogate, which only the full path reports.
_SURROGATE_TEXT = re.compile(r"\\(?:u|U0000)[dD][89a-fA-F]")


def _fast_path_applies(text: str, fmt: str) -> bool:
    """Whether the parsed data of ``text`` may go to :func:`fast_normalize`: no surrogate
    escape in the text and, for JSON, surely fewer than :data:`MAX_VALUES` values (a value
    after each ``,``, ``[`` and ``{`` at most). YAML over that size was counted by
    :func:`_parse` already."""
    if _SURROGATE_TEXT.search(text):
        return False
    return fmt == "yaml" or text.count(",") + text.count("[") + text.count("{") < MAX_VALUES


# ---------------------------------------------------------------------------------------------
# Reading and parsing


def load_prd(path: Path | str, *, max_bytes: int = MAX_PRD_BYTES) -> PRD:
    """Read, parse, normalize and validate a PRD file. The file is only read.

    The steps, each of which stops at the problems it finds:

    1. read: the size limit, UTF-16, NUL bytes, UTF-8 (a BOM is skipped), git
       merge-conflict markers;
    2. parse: JSON (``NaN``/``Infinity`` refused), JSONC (comments and trailing commas
       allowed) or YAML (safe loader, no object tags, dates kept as text, keys as text);
    3. shape: at most :data:`MAX_DEPTH` levels, YAML aliases that neither recurse nor
       expand past :data:`MAX_EXPANDED_VALUES`, JSON types only, duplicate keys, unpaired
       surrogates;
    4. normalize the dialect (:func:`pytest_ralph.prd.dialects.normalize`);
    5. validate the normalized data against the schema, plus duplicate ids and check
       objects; each problem is placed where it is in the file as written.

    Args:
        path: a ``.json``, ``.jsonc``, ``.yaml`` or ``.yml`` file.
        max_bytes: files larger than this many bytes are refused.

    Returns:
        The PRD in the canonical shape, with :attr:`PRD.dialect`,
        :attr:`PRD.dialect_notes` and :attr:`PRD.stories_path` saying what normalizing
        did; ``stories`` is empty for an empty story container, which callers report as
        "no user stories".

    Raises:
        PRDError: the file is missing or unreadable, or any step above found a problem.
            Every problem of the failing step is listed, with its JSON path in the file
            and, where known, line and column.
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
    conflicts = _conflict_problems(text)
    if conflicts:
        raise PRDError(path, conflicts)
    data, duplicates = _parse(path, text, fmt)
    positions = _Positions(text, fmt)
    if not duplicates and _fast_path_applies(text, fmt):
        fast = fast_normalize(data, _fast_rules())
        if fast is not None:
            lines = None if fmt == "yaml" else JSONLines(
                strip_jsonc(text) if fmt == "jsonc" else text, lambda jp: positions.at(jp)[0])
            return _build(path, fmt, fast, _Locator(positions, fast.origins, data, lines))
    shape = _shape_problems(data, positions, fmt)
    if shape:
        raise PRDError(path, shape)
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
        raise PRDError(path, _sorted(problems))
    try:
        normalized = normalize(data)
    except DialectError as exc:
        problems += [Problem(jp, message, *positions.at(jp), hint=_dialect_hint(message, data))
                     for jp, message in exc.problems]
        raise PRDError(path, _sorted(problems)) from None
    where = _Locator(positions, normalized.origins, data)
    problems += _schema_problems(normalized.data, where)
    problems += _duplicate_id_problems(normalized.data, where)
    problems += _misspelt_key_problems(data, normalized.data, where)
    if not problems:
        return _build(path, fmt, normalized, where)
    raise PRDError(path, _sorted(problems))


def _sorted(problems: list[Problem]) -> list[Problem]:
    """Problems in file order, those without a position last; at most
    :data:`MAX_PROBLEMS`, and then one more entry saying that the list was cut."""
    out = sorted(problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0))
    if len(out) <= MAX_PROBLEMS:
        return out
    return [*out[:MAX_PROBLEMS], Problem("$", f"more problems than the {MAX_PROBLEMS} listed; "
                                         "fix these and load the file again")]


def _dialect_hint(message: str, data: object = None) -> str:
    """The hint for a dialect error; for a file without stories, the misspelt key that
    ``data`` holds them under (``"user_stories"``: did you mean ``'userStories'``?)."""
    if message.startswith("expected an object with stories") and message.endswith("found null"):
        return "the file is empty (or holds only comments)"
    if message.startswith("no stories found"):
        near = [k for k in data if isinstance(k, str)
                and misspelt(k, TOP_VOCABULARY) == "userStories"] if isinstance(data, dict) else []
        if near:
            return f"did you mean 'userStories' instead of {near[0]!r}?"
        return ('a PRD is {"userStories": [{"id": "US-1", "title": "...", '
                '"acceptanceCriteria": ["..."]}]}')
    return ""


class _Locator:
    """Where a path of the normalized data is in the file: its JSON path as written (see
    :func:`pytest_ralph.prd.dialects.source_path`) and its (line, column)."""

    def __init__(self, positions: _Positions, origins: tuple[Origin, ...], raw: Any,
                 lines: Callable[[str], int | None] | None = None) -> None:
        self.positions = positions
        self.origins = origins
        self._raw = raw
        self._lines = lines

    def path(self, parts: Iterable[str | int]) -> str:
        """The JSON path in the file of the normalized ``parts``."""
        return json_path(source_path(tuple(parts), self.origins))

    def line(self, jp: str) -> int | None:
        """The line of the JSON path ``jp`` (in the file as written), or ``None``."""
        if self._lines is not None:
            return self._lines(jp)
        return self.positions.at(jp)[0]

    def at(self, parts: Iterable[str | int]) -> tuple[str, int | None, int | None]:
        """(JSON path in the file, line, column) of the normalized ``parts``."""
        jp = self.path(parts)
        return (jp, *self.positions.at(jp))

    def raw(self, parts: Iterable[str | int]) -> Any:
        """The value in the file (before normalization) at the normalized ``parts``, or
        ``None`` when there is none."""
        value = self._raw
        for part in source_path(tuple(parts), self.origins):
            try:
                value = value[part]
            except (LookupError, TypeError):
                return None
        return value


_CONFLICT_MARKER = re.compile(r"^(<{7}|={7}|>{7}|\|{7})(?: .*)?$", re.MULTILINE)


def _conflict_problems(text: str) -> list[Problem]:
    """Git merge-conflict markers (``<<<<<<<``, ``=======``, ``>>>>>>>`` at the start of a
    line): one problem per ``<<<<<<<`` marker, or at the first marker when a conflict's
    start was cut off. No problem unless a ``<<<<<<<`` or ``>>>>>>>`` marker is there."""
    if "<<<<<<<" not in text and ">>>>>>>" not in text:
        return []
    markers = [(m.start(), m.group(0)) for m in _CONFLICT_MARKER.finditer(text)]
    if not any(mark.startswith(("<<<<<<<", ">>>>>>>")) for _, mark in markers):
        return []
    starts = [(pos, mark) for pos, mark in markers if mark.startswith("<<<<<<<")] or markers[:1]
    return [Problem("$", f"unresolved git merge conflict (marker {mark.rstrip()[:40]!r}); "
                    "expected a file without conflict markers",
                    text.count("\n", 0, pos) + 1, 1,
                    hint="keep one side of the conflict and delete the <<<<<<<, ======= and "
                         ">>>>>>> lines")
            for pos, mark in starts]


def _read_text(path: Path, max_bytes: int) -> str:
    """The PRD's text, read without ever blocking (a FIFO) or reading without end
    (``/dev/zero``): a regular file of at most ``max_bytes`` bytes (:mod:`pytest_ralph.util.files`).

    Raises:
        PRDError: missing, not a regular file, over the limit, unreadable, or not UTF-8 text.
    """
    try:
        raw = read_bytes(path, max_bytes)
    except FileTooLarge as exc:
        raise PRDError(path, [Problem(
            "$", f"file is {exc.size} bytes, over the limit of {max_bytes} bytes",
            hint="split the PRD, or raise the limit (ini ralph_max_prd_bytes)")]) from None
    except FileNotFoundError:
        raise PRDError(path, [Problem("$", "file not found")]) from None
    except NotRegularFile as exc:
        if exc.kind == "a folder":
            raise PRDError(path, [Problem("$", "expected a file, found a directory")]) from None
        raise PRDError(path, [Problem(
            "$", f"expected a regular file, found {exc.kind}",
            hint="name the PRD's own JSON or YAML file (nothing is read from a FIFO or a "
                 "device)")]) from None
    except IsADirectoryError:
        raise PRDError(path, [Problem("$", "expected a file, found a directory")]) from None
    except OSError as exc:
        raise PRDError(path, [Problem("$", f"cannot read the file: {exc.strerror}")]) from None
    except ValueError:  # os.open: "embedded null byte"
        raise PRDError(path, [Problem("$", "the path holds a NUL character; expected a file "
                                           "path")]) from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or _looks_utf16(raw):
        raise PRDError(path, [Problem("$", "file is UTF-16; expected UTF-8",
                                      hint="save the file as UTF-8")])
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        column = len(raw[raw.rfind(b"\n", 0, nul) + 1:nul].decode("utf-8", "replace")) + 1
        raise PRDError(path, [Problem(
            "$", f"expected UTF-8 text; found a NUL byte at offset {nul}", line, column,
            hint="is it a binary file? a PRD is a JSON or YAML text file")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[line_start:exc.start].decode("utf-8", "replace")) + 1
        raise PRDError(path, [Problem(
            "$", f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            line, column, hint="save the file as UTF-8")]) from None


def _too_many_values() -> Problem:
    return Problem("$", f"the file holds more than {MAX_VALUES:,} values; expected a PRD "
                   "under that", hint="split the PRD into several files")


def _yaml_values_over_limit(text: str) -> bool:
    """Whether YAML ``text`` holds more than :data:`MAX_VALUES` values (keys not counted),
    counted from parser events so that the values are never built: loading millions of
    them would take minutes and gigabytes. Raises what the parser raises."""
    n = 0
    maps: list[list[bool]] = []  # per open collection: [is a mapping, next scalar is a key]
    import yaml

    from .yamlload import YAML_LOADER

    for event in yaml.parse(text, Loader=YAML_LOADER):
        if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            top = maps[-1] if maps else None
            if top is not None and top[0]:
                is_key, top[1] = top[1], not top[1]
            else:
                is_key = False
            if not is_key:
                n += 1
                if n > MAX_VALUES:
                    return True
            if isinstance(event, yaml.CollectionStartEvent):
                maps.append([isinstance(event, yaml.MappingStartEvent), True])
        elif isinstance(event, yaml.CollectionEndEvent):
            maps.pop()
    return False


def _looks_utf16(raw: bytes) -> bool:
    """UTF-16 text without a byte order mark: every other byte of the start is NUL and the
    start decodes to printable text."""
    head = raw[:256]
    if len(head) < 2 or (head[0] == 0) == (head[1] == 0):
        return False
    codec = "utf-16-be" if head[0] == 0 else "utf-16-le"
    text = head[: len(head) // 2 * 2].decode(codec, "replace")
    return all(ch.isprintable() or ch in "\t\r\n" for ch in text[:-1])


def _parse(path: Path, text: str, fmt: str) -> tuple[Any, list[str]]:
    """Parse ``text``; return the data and the keys repeated in an object (for YAML, the
    first one only)."""
    if fmt == "yaml":
        import yaml

        from .yamlload import PRDLoader

        try:
            if len(text) > 2 * MAX_VALUES and _yaml_values_over_limit(text):
                raise PRDError(path, [_too_many_values()])
            loader = PRDLoader(text)
            try:
                data = loader.get_single_data()
                repeated = loader.repeated_key
            finally:
                loader.dispose()
            return data, [] if repeated is None else [repeated]
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            column = mark.column + 1 if mark else None
            what = str(exc.problem or exc.context)
            hint = ""
            tag = re.search(r"constructor for the tag '([^']*)'", what)
            if tag:
                what = (f"the tag {_short_tag(tag.group(1))} would construct an object; expected "
                        "plain values (text, numbers, true/false, null, lists, mappings)")
                hint = "remove the tag"
            elif "end of stream" in what:
                hint = "the file ends too early: is it truncated?"
            raise PRDError(path, [Problem("$", f"invalid YAML: {what}", line, column,
                                          hint)]) from None
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
        return json.loads(source, object_pairs_hook=pairs_hook,
                          parse_constant=_no_constant), duplicates
    except _NotJSON as exc:
        m = re.search(r"(?<![\w.\"])" + re.escape(exc.word) + r"(?![\w.])", source)
        line = source.count("\n", 0, m.start()) + 1 if m else None
        column = m.start() - source.rfind("\n", 0, m.start()) if m else None
        raise PRDError(path, [Problem("$", f"invalid JSON: {exc.word} is not a JSON number; "
                                      "expected a finite number", line, column,
                                      hint="write a number, or quote it as text")]) from None
    except json.JSONDecodeError as exc:
        hint = ""
        before = source[: exc.pos].rstrip()
        if fmt == "json" and re.match(r"\s*(//|/\*)", source[exc.pos:]):
            hint = "comments are not allowed in .json: remove them, or rename the file to .jsonc"
        elif fmt == "jsonc" and re.match(r"\s*/\*", source[exc.pos:]):
            hint = "a /* comment that never ends (no */): is the file truncated?"
        elif not source.strip():
            hint = "the file is empty; expected an object with a 'userStories' array"
        elif not source[exc.pos:].strip() or (exc.msg.startswith("Unterminated string")
                                               and '"' not in source[exc.pos + 1:]):
            hint = "the file ends too early: is it truncated?"
        elif before.endswith(",") and source[exc.pos] in "]}":
            comma = len(before) - 1  # report the comma itself, not the bracket after it
            line = source.count("\n", 0, comma) + 1
            column = comma - source.rfind("\n", 0, comma)
            raise PRDError(path, [Problem(
                "$", f"invalid JSON: a trailing comma before '{source[exc.pos]}'; expected "
                "another value after a comma", line, column,
                "remove the comma" + (", or rename the file to .jsonc (which allows it)"
                                      if fmt == "json" else ""))]) from None
        raise PRDError(path, [Problem("$", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno,
                                      hint)]) from None
    except ValueError as exc:  # e.g. an integer of 5000 digits
        raise PRDError(path, [Problem("$", f"invalid JSON: {_value_error(exc)}")]) from None
    except RecursionError:
        raise PRDError(path, [Problem("$", "invalid JSON: nested too deeply")]) from None


def _priority_text(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"number {_number(value)}"
    return _describe(value)


def _number(value: object) -> str:
    """A number as found in the file, shortened when it has many digits."""
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= 24 else text[:10] + f"...({len(text)} characters)"


def _short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:python/object:os.system`` -> ``!!python/object:os.system``."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix):] if tag.startswith(prefix) else tag


_JSON_SCALARS = (str, int, float, bool, type(None))


def _shape_problems(data: Any, positions: _Positions, fmt: str) -> list[Problem]:
    """What makes parsed data not a JSON value of a sane size: nesting deeper than
    :data:`MAX_DEPTH`, YAML aliases that refer to themselves or expand past
    :data:`MAX_EXPANDED_VALUES`, and YAML values JSON has no type for (binary, sets,
    non-text keys). At most 20 problems. The walk never recurses and holds one frame per
    level of nesting; a list or mapping that aliases share is walked once.
    """
    problems: list[Problem] = []
    if not isinstance(data, (dict, list)):
        return _scalar_problems(data, (), positions)
    done: dict[int, tuple[int, int]] = {}  # id -> (values once expanded, depth)
    written = 1  # values as written (a shared list or mapping once)
    active = {id(data)}
    # frames: [container, parts, iterator of (key, child), values, depth]
    stack: list[list[Any]] = [[data, (), _children(data), 1, 1]]
    while stack and len(problems) < 20:
        frame = stack[-1]
        parts: tuple[str | int, ...] = frame[1]
        pushed = False
        for key, child in frame[2]:
            if written > MAX_VALUES:
                return [_too_many_values()]
            if not isinstance(key, (str, int)):
                problems.append(_at(positions, parts, f"expected text keys; found the key "
                                    f"{json.dumps(key, default=str)} ({_yaml_type(key)})"))
                continue
            if not isinstance(child, (dict, list)):
                written += 1
                frame[3] += 1
                if not isinstance(child, _JSON_SCALARS) or (
                        isinstance(child, float) and not math.isfinite(child)):
                    problems += _scalar_problems(child, (*parts, key), positions)
                continue
            cid = id(child)
            if cid in active:
                problems.append(_at(positions, (*parts, key), "expected values that end; found "
                                    "a YAML alias inside the value it refers to (it repeats "
                                    "forever)", "replace the alias (*name) with the value "
                                    "it stands for"))
                continue
            if cid in done:
                size, depth = done[cid]
                frame[3] += size
                frame[4] = max(frame[4], depth + 1)
                continue
            if len(parts) + 1 >= MAX_DEPTH:
                shown = json_path((*parts, key))
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                return [Problem(shown, f"expected at most {MAX_DEPTH} levels of nested lists "
                                "and mappings; found more", *positions.at("$"))]
            written += 1
            active.add(cid)
            stack.append([child, (*parts, key), _children(child), 1, 1])
            pushed = True
            break
        if pushed:
            continue
        stack.pop()
        active.discard(id(frame[0]))
        done[id(frame[0])] = (frame[3], frame[4])
        if stack:
            stack[-1][3] += frame[3]
            stack[-1][4] = max(stack[-1][4], frame[4] + 1)
    if problems or fmt != "yaml":
        return problems
    total = done[id(data)][0]
    if total > MAX_EXPANDED_VALUES and total > ALIAS_EXPANSION * written:
        problems.append(Problem("$", f"YAML aliases expand {written} written values to "
                                f"{total} values; expected at most {MAX_EXPANDED_VALUES} "
                                "(is it an alias bomb?)",
                                hint="write the values out instead of repeating aliases"))
    return problems


def _children(value: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _scalar_problems(value: Any, parts: tuple[str | int, ...],
                     positions: _Positions) -> list[Problem]:
    """A value JSON has no type for, or a number that is not finite."""
    if not isinstance(value, _JSON_SCALARS):
        return [_at(positions, parts, "expected a JSON value (text, number, true/false, null, "
                    f"list, mapping); found {_yaml_type(value)}", "quote it as text")]
    if isinstance(value, float) and not math.isfinite(value):
        return [_at(positions, parts, f"expected a finite number; found {value}",
                    "write a number, or quote it as text")]
    return []


def _at(positions: _Positions, parts: tuple[str | int, ...], message: str,
        hint: str = "") -> Problem:
    jp = json_path(parts)
    return Problem(jp, message, *positions.at(jp), hint=hint)


def _yaml_type(value: object) -> str:
    names = {bytes: "YAML binary data (!!binary)", set: "a YAML set (!!set)",
             bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return f"a YAML {type(value).__name__} (a tagged value)"


class _NotJSON(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity``: Python's json accepts them, JSON does not."""

    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


def _no_constant(word: str) -> Any:
    raise _NotJSON(word)


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
    numbers of the result match the original. Strings are left untouched. A comma is a
    trailing one when a value comes before it (``[1,]``, not ``[,]`` or ``[1,,]``, which stay
    errors); an unterminated ``/*`` is left as it is, so that parsing fails there.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma: int | None = None
    after_value = False  # the last significant character ends a value
    while i < n:
        ch = text[i]
        if ch == '"':
            last_comma = None
            after_value = True
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] not in "\r\n":
                out[i] = " "
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:  # unterminated: keep it, the parser reports it
                break
            for j in range(i, end + 2):
                if out[j] != "\n":
                    out[j] = " "
            i = end + 2
            continue
        if ch == ",":
            last_comma = i if after_value else None
            after_value = False
        elif ch in "}]":
            if last_comma is not None:
                out[last_comma] = " "
            last_comma = None
            after_value = True
        elif ch in "[{:":
            last_comma = None
            after_value = False
        elif not ch.isspace():
            last_comma = None
            after_value = True
        i += 1
    return "".join(out)


_YAML_UNSAFE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")

#: A ``\uD800``-``\uDFFF`` escape of a JSON string (half of a UTF-16 surrogate pair, or an
#: unpaired one): an odd number of backslashes before the ``u``. Group 1 is the even run of
#: escaped backslashes in front of it.
_LONE_CR = re.compile(r"\r(?!\n)")

_SURROGATE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")

#: What replaces a surrogate escape for composing: an escape of the same length ("X").
_SURROGATE_PLACEHOLDER = r"\u0058"


class _Positions:
    """Maps JSON paths to (line, column), computed lazily from a YAML node tree.

    JSON is (for our purposes) a subset of YAML, so PyYAML's composer gives the
    positions of JSON and YAML files alike. When composing fails, positions are unknown.
    """

    def __init__(self, text: str, fmt: str) -> None:
        self._source = text
        self._fmt = fmt
        self._text = ""
        #: The JSON text before the edits of :meth:`_prepare`, when they changed it: keys are
        #: read from it.
        self._json: str | None = None
        #: JSON path -> (line, column, index in the text)
        self._map: dict[str, tuple[int, int, int]] | None = None
        self._dups: list[tuple[str, str]] = []
        self._walked: set[int] = set()

    def _prepare(self) -> None:
        """The text to compose: JSONC comments blanked, and JSON made YAML's."""
        self._text = strip_jsonc(self._source) if self._fmt == "jsonc" else self._source
        if self._fmt != "yaml":
            source = self._text
            # YAML breaks lines at NEL/LS/PS and refuses non-printables; JSON allows them in
            # strings. Blank them (same length) so lines match json's and composing works.
            self._text = _YAML_UNSAFE.sub(" ", self._text)
            # json counts lines at "\n" only; YAML also breaks at a lone "\r" (whitespace
            # in JSON: a raw CR cannot be inside a JSON string).
            self._text = _LONE_CR.sub(" ", self._text)
            # libyaml refuses surrogate escapes, even a valid pair such as "\ud83d\ude00"
            # (one emoji in JSON): write each as an escape of "X" of the same length.
            self._text = _SURROGATE_ESCAPE.sub(
                lambda m: m.group(1) + _SURROGATE_PLACEHOLDER, self._text)
            if self._text != source:
                self._json = source

    def _build(self) -> dict[str, tuple[int, int, int]]:
        if self._map is None:
            import yaml

            from .yamlload import YAML_LOADER

            self._prepare()
            self._map = {}
            try:
                node = yaml.compose(self._text, Loader=YAML_LOADER)
            except (yaml.YAMLError, RecursionError):
                node = None
            if node is not None:
                self._walk(node, "$")
        return self._map

    def _walk(self, node: yaml.Node, jp: str) -> None:
        import yaml

        assert self._map is not None
        self._map[jp] = (node.start_mark.line + 1, node.start_mark.column + 1,
                         node.start_mark.index)
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
                                                          key.start_mark.column + 1,
                                                          key.start_mark.index))
                seen.add(name)
                self._walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, f"{jp}[{i}]")

    def _key_name(self, key: yaml.Node) -> str:
        import yaml

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
        return (pos[0], pos[1]) if pos else (None, None)

    def offset(self, jp: str) -> int | None:
        """The index in the text (in characters) where the value at ``jp`` starts, or
        ``None``. Unlike (line, column), it does not depend on which characters count as
        line breaks (YAML also breaks at a lone CR, NEL, LS and PS)."""
        pos = self._build().get(jp)
        return pos[2] if pos else None

    def duplicate_keys(self) -> list[tuple[str, str]]:
        """(JSON path, key) of every repeated key in an object."""
        self._build()
        return list(self._dups)


#: Public name of the JSON-path -> (line, column) locator, for write-back.
Positions = _Positions




# ---------------------------------------------------------------------------------------------
# Validation


_describe = describe

_TYPE_NAMES = {"object": "an object", "array": "an array", "string": "a string",
               "integer": "an integer", "number": "a number", "boolean": "true or false",
               "null": "null"}

#: The branch of a check object of a kind a plugin provides (``{"kind": ...}``) in the
#: schema's criterion ``anyOf``.
CUSTOM_BRANCH = 8

#: Check key -> (criterion kind, index of its branch in the schema's criterion ``anyOf``).
CHECK_KEYS: dict[str, tuple[str, int]] = {
    "run": ("run", 1), "testCommand": ("run", 1), "pytest": ("pytest", 2),
    "exists": ("exists", 3), "file": ("file", 4), "sql": ("sql", 5), "schema": ("schema", 6),
    "python": ("python", 7),
}
_CHECK_KEYS = tuple(CHECK_KEYS)

#: Every key a built-in check object may hold: not a misspelling of a check key.
_FIELD_KEYS = frozenset(["id", "text", "kind", *(f for fs in CHECK_FIELDS.values() for f in fs)])


def _schema_problems(data: dict[str, Any], where: _Locator) -> list[Problem]:
    """Schema problems of the normalized ``data``, each placed where it is in the file."""
    problems: list[Problem] = []
    for err in itertools.islice(_validator().iter_errors(data), MAX_PROBLEMS + 1):
        if err.validator == "anyOf" and "acceptanceCriteria" in err.absolute_path:
            problems += _criterion_problems(err, where)
        else:
            problems.append(_problem(err, where))
    return list(dict.fromkeys(problems))  # e.g. -0.5: not an integer and below 0: one message


def _problem(err: jsonschema.ValidationError, where: _Locator) -> Problem:
    jp, line, col = where.at(err.absolute_path)
    inst = err.instance
    kind = err.validator
    value: Any = err.validator_value
    hint = ""
    if list(err.absolute_path)[-1:] == ["priority"] and kind in ("type", "minimum", "maximum"):
        msg = ("expected a priority: an integer 0..1000000, a number >= 0, high/medium/low or "
               f"P0..P9; found {_priority_text(where.raw(err.absolute_path))}")
    elif kind == "type":
        names = [value] if isinstance(value, str) else list(value)
        expected = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
        msg = f"expected {expected}; found {_describe(inst)}"
        if names == ["boolean"] and isinstance(inst, str) and inst.lower() in ("true", "false"):
            hint = f"write {inst.lower()} without quotes"
    elif kind == "required":
        m = re.match(r"^'(.*)' is a required property$", err.message)
        msg = f"missing required key {m.group(1)!r}" if m else err.message
    elif (kind == "pattern" and value == NO_NUL_PATTERN) or (
            kind == "anyOf" and list(err.absolute_path)[-1:] == ["pytest"] and _has_nul(inst)):
        field = next((p for p in reversed(err.absolute_path) if isinstance(p, str)), "")
        bad = next((v for v in inst if _has_nul(v)), inst) if isinstance(inst, list) else inst
        among = " in the list" if bad is not inst else ""
        msg = (f"expected {_NUL_WHAT.get(field, 'text')} without a NUL character (\\u0000); "
               f"found {_describe(bad)}{among}: the NUL would cut it short where it is used")
        hint = "remove the escaped NUL from it (\\u0000 in JSON, \\0 in YAML)"
    elif kind == "pattern" and list(err.absolute_path)[-1:] == ["python"]:
        msg = f"expected 'module:function'; found {_describe(inst)}"
        hint = 'e.g. "myapp.checks:login_works"'
    elif list(err.absolute_path)[-1:] == ["kind"] and kind in ("pattern", "maxLength", "not"):
        if kind == "not":
            msg = (f"kind {json.dumps(inst)} is a built-in check kind; 'kind' names a check "
                   "kind that a plugin or conftest.py provides")
            hint = f'write the built-in check without \'kind\', e.g. {{"{inst}": ...}}'
        else:
            msg = (f"expected a check kind name (a letter, then letters, digits, '_', '.' or "
                   f"'-', at most 100 characters); found {_describe(inst)}")
    elif kind == "pattern" and list(err.absolute_path)[-1:] == ["title"]:
        msg = f"expected a title with text; found {_describe(inst)}"
    elif kind == "pattern":
        msg = (f"invalid id {json.dumps(inst, ensure_ascii=False)}: an id may not contain "
               "whitespace, control characters, '/', '[', ']' or '::' (it becomes part of a "
               "pytest node id)")
    elif kind == "minLength":
        msg = f"expected a non-empty string; found {_describe(inst)}"
    elif kind in ("minimum", "maximum", "exclusiveMinimum"):
        bound = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">"}[str(kind)]
        msg = f"expected a number {bound} {value}; found {_number(where.raw(err.absolute_path))}"
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


#: What each field that may not hold a NUL is, for the message.
_NUL_WHAT = {"run": "a shell command", "testCommand": "a shell command",
             "cwd": "a folder path", "pytest": "node ids or paths", "exists": "a path",
             "file": "a path", "db": "a path", "schema": "a path", "instance": "a path"}


def _has_nul(value: Any) -> bool:
    """Whether ``value`` is a string holding a NUL, or a list holding one."""
    if isinstance(value, str):
        return "\0" in value
    return isinstance(value, list) and any(isinstance(v, str) and "\0" in v for v in value)


def _criterion_problems(err: jsonschema.ValidationError, where: _Locator) -> list[Problem]:
    jp, line, col = where.at(err.absolute_path)
    inst = err.instance
    known = ", ".join(repr(k) for k in _CHECK_KEYS)
    present = [k for k in _CHECK_KEYS if isinstance(inst, dict) and k in inst]
    if isinstance(inst, dict) and "kind" in inst:  # a plugin's kind: its fields are its own
        sub = [e for e in err.context or [] if e.relative_schema_path[0] == CUSTOM_BRANCH]
        if sub:
            return [_problem(e, where) for e in sub]
    if present:
        # A check object with bad fields: report every error of its kind's branch, each
        # at the field it is about.
        branch = CHECK_KEYS[present[0]][1]
        sub = [e for e in err.context or [] if e.relative_schema_path[0] == branch]
        if sub:
            return [_problem(e, where) for e in sub]
    if isinstance(inst, dict):
        msg = (f"expected a criterion: a string, or an object with one check key ({known}) or "
               f"with the 'kind' of a plugin's check; found {_describe(inst)}")
        near = next(((k, n) for k in inst if isinstance(k, str) and k not in _FIELD_KEYS
                     for n in [misspelt(k, _CHECK_KEYS, 0.7)] if n), None)
        hint = (f"did you mean {near[1]!r} instead of {near[0]!r}?" if near else
                "write the criterion as text, or add a check key such as 'run'")
    else:
        msg = (f"expected a criterion: a non-empty string, or an object with one check key "
               f"({known}); found {_describe(inst)}")
        hint = "quote it as text" if isinstance(inst, (int, float)) else ""
    return [Problem(jp, msg, line, col, hint)]


def _check_field_problems(c: dict[str, Any], parts: tuple[str | int, ...],
                          where: _Locator) -> list[Problem]:
    """Problems the schema cannot see in one check object: several check kinds at once
    (``run`` and ``testCommand`` are one kind), a ``contains`` that is not a regex, a key of
    another kind (``timeout`` on an ``exists`` check) and a misspelt key (``contians``), which
    would otherwise be ignored. Other keys of their own (``"note"``) are allowed."""
    problems: list[Problem] = []
    if "kind" in c:  # a plugin's kind: its fields are its own
        return problems
    kinds = sorted({CHECK_KEYS[k][0] for k in c if k in CHECK_KEYS})
    if len(kinds) > 1:
        cp, line, col = where.at(parts)
        keys = ", ".join(repr(k) for k in c if k in CHECK_KEYS)
        problems.append(Problem(cp, f"a criterion has several check kinds ({keys}); expected "
                                "exactly one", line, col,
                                hint="split it into one criterion per check"))
    elif kinds:
        key = next(k for k in c if k in CHECK_KEYS)
        own = CHECK_FIELDS[key] | {"id", "text"}
        expected = ", ".join(repr(k) for k in ("id", "text", *sorted(CHECK_FIELDS[key])))
        for field in c:
            if field in own:
                continue
            takers = sorted({CHECK_KEYS[k][0] for k, f in CHECK_FIELDS.items() if field in f})
            near = misspelt(field)
            if takers:
                quoted = [repr(k) for k in takers]
                names = quoted[0] if len(quoted) == 1 else \
                    f"{', '.join(quoted[:-1])} and {quoted[-1]}"
                wrong = (f"{field!r} does not apply to {kinds[0]!r} criteria (only {names} "
                         "criteria take it)")
                hint = "remove it"
            elif near is not None and near not in c:
                wrong = f"unknown key {field!r} for {kinds[0]!r} criteria"
                hint = f"did you mean {near!r}?"
            else:
                continue
            jp, line, col = where.at((*parts, field))
            problems.append(Problem(jp, f"{wrong}; expected the keys {expected}", line, col,
                                    hint=hint))
    pattern = c.get("contains")
    why = regex_problem(pattern) if "file" in c and isinstance(pattern, str) else None
    if why is not None:
        jp, line, col = where.at((*parts, "contains"))
        shown = json.dumps(pattern)
        shown = shown if len(shown) <= 120 else shown[:100] + f"...({len(shown)} characters)"
        problems.append(Problem(jp, f"expected a regular expression; found {shown}, which "
                                f"does not compile: {why}", line, col,
                                hint="escape special characters with a backslash"))
    return problems


def _invisible(text: str) -> bool:
    """Whether ``text`` holds a character one cannot see that the id pattern of the schema
    lets through: a format character (zero-width space, direction marks and isolates, soft
    hyphen, tag characters...) or a C1 control character."""
    return any(unicodedata.category(ch) in ("Cc", "Cf") and ch not in _ASCII_CONTROLS
               and not ch.isspace() for ch in text)


#: Refused by the schema's id pattern already (as is whitespace).
_ASCII_CONTROLS = frozenset(map(chr, [*range(32), 127]))


def _visible(text: str) -> bool:
    """Whether ``text`` holds a character one can see."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf")
               for ch in text)


def _invisible_id(value: str, parts: tuple[str | int, ...], where: _Locator) -> Problem:
    jp, line, col = where.at(parts)
    return Problem(jp, f"invalid id {json.dumps(value)}: it holds an invisible character "
                   "(zero-width, a direction mark, a control character...), so it would look "
                   "like another id in a node id", line, col,
                   hint="type the id again without it")


def _text_problems(story: dict[str, Any], sp: tuple[str | int, ...],
                   where: _Locator) -> list[Problem]:
    """An id with invisible characters, a title with no visible character."""
    problems = []
    sid, title = story.get("id"), story.get("title")
    if isinstance(sid, str) and _invisible(sid):
        problems.append(_invisible_id(sid, (*sp, "id"), where))
    # a blank title is the schema's to report; this is one of invisible characters only
    if isinstance(title, str) and title.strip() and not _visible(title):
        jp, line, col = where.at((*sp, "title"))
        problems.append(Problem(jp, f"expected a title with text; found {json.dumps(title)}",
                                line, col))
    return problems


def _misspelt_key_problems(raw: dict[str, Any], data: dict[str, Any],
                           where: _Locator) -> list[Problem]:
    """Keys of the top level (``raw``, as written) and of each story (in the normalized
    ``data``) that look like misspellings of a canonical key (``userStory``,
    ``acceptanceCriterias``, ``prority``, ``passed``) and would otherwise be ignored: a story
    whose criteria are under a misspelt key would get its title as its only criterion. Keys
    a dialect reads (``status``, ``steps``...), and keys next to the one they look like, are
    left alone."""
    problems: list[Problem] = []
    places: list[tuple[tuple[str | int, ...], Any, str, tuple[str, ...]]] = [
        ((), raw, "at the top level", TOP_VOCABULARY)]
    places += [(("userStories", pos), where.raw(("userStories", pos)), "in a story",
                STORY_VOCABULARY) for pos in range(len(data["userStories"]))]
    skip = {*STORY_CONTAINERS, "phases", "projectName", "name", *CRITERIA_KEYS, "status"}
    for parts, obj, what, known in places:
        if not isinstance(obj, dict):
            continue
        for key in obj:
            near = misspelt(key, known) if isinstance(key, str) and key not in skip else None
            if near is None or near in obj:
                continue
            jp, line, col = where.at((*parts, key))
            expected = ", ".join(repr(k) for k in known)
            problems.append(Problem(jp, f"unknown key {key!r} {what}; expected the keys "
                                    f"{expected}", line, col, hint=f"did you mean {near!r}?"))
    return problems


def _duplicate_id_problems(data: dict[str, Any], where: _Locator) -> list[Problem]:
    """Duplicate story ids, duplicate criterion ids within a story, and check objects the
    schema cannot judge, in the normalized ``data`` (reported with the schema problems)."""
    problems: list[Problem] = []
    first_story: dict[str, int] = {}
    for pos, story in enumerate(data["userStories"]):
        sid: str = story["id"]
        sp: tuple[str | int, ...] = ("userStories", pos)
        made = " (made from its position: the story has no id)"
        problems += _text_problems(story, sp, where)
        if not isinstance(sid, str):
            continue
        if sid in first_story:
            jp, line, col = where.at((*sp, "id"))
            first = first_story[sid]
            first_at = where.path(("userStories", first)) + (
                ", made from its position: that story has no id"
                if where.origins[first].id_synthesized else "")
            problems.append(Problem(
                jp, f"duplicate story id {sid!r}{made if where.origins[pos].id_synthesized else ''}"
                f" (first used at {first_at})", line, col,
                hint="give every story its own id"))
        else:
            first_story[sid] = pos
        criteria = story.get("acceptanceCriteria")
        if not isinstance(criteria, list):
            continue
        seen: dict[str, tuple[str | int, ...]] = {}
        for i, c in enumerate(criteria):
            cparts = (*sp, "acceptanceCriteria", i)
            if isinstance(c, dict):
                problems += _check_field_problems(c, cparts, where)
            explicit = c.get("id") if isinstance(c, dict) else None
            if isinstance(explicit, str) and _invisible(explicit):
                problems.append(_invisible_id(explicit, (*cparts, "id"), where))
            elif isinstance(c, str) and c.strip() and not _visible(c):
                jp, line, col = where.at(cparts)
                problems.append(Problem(jp, "expected a criterion with visible text; found "
                                        f"{json.dumps(c)}", line, col))
            cid = explicit if isinstance(explicit, str) and explicit else f"AC{i + 1}"
            if cid in seen:  # positions only for a duplicate: finding them is not free
                cp, line, col = where.at(cparts)
                also, _, _ = where.at(seen[cid])
                problems.append(Problem(
                    cp, f"duplicate criterion id {cid!r} in story {sid!r} (also {also})",
                    line, col, hint="give the criterion its own 'id'"))
            seen.setdefault(cid, cparts)
    return problems


# ---------------------------------------------------------------------------------------------
# Building the model


def _build(path: Path, fmt: str, normalized: Normalized, where: _Locator) -> PRD:
    data = normalized.data
    return PRD(
        path=path,
        format=fmt,
        project=data["project"],
        branch_name=data["branchName"],
        description=data["description"],
        stories=tuple(_build_stories(data["userStories"], where)),
        dialect=normalized.dialect,
        dialect_notes=normalized.notes,
        stories_path=normalized.stories_path,
    )


def _default_text(kind: str, c: dict[str, Any]) -> str:
    """The headline of a check object that has no ``text``."""
    if "kind" in c:  # a plugin's kind: its name and its fields
        fields = {k: v for k, v in c.items() if k not in ("id", "text", "kind")}
        return f"{kind} {json.dumps(fields, ensure_ascii=False)}" if fields else kind
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


def _build_stories(raw: list[dict[str, Any]], where: _Locator) -> Iterator[Story]:
    """The stories of the normalized ``raw``; lines are found when first read."""
    find = where.line
    for pos, s in enumerate(raw):
        sp: tuple[str | int, ...] = ("userStories", pos)
        origin = where.origins[pos]
        sid = s["id"]
        from_title = not origin.criteria_key
        plain = (origin.parts == sp and origin.criteria_key == "acceptanceCriteria"
                 and not origin.criteria_string)
        sjp = f"$.userStories[{pos}]" if origin.parts == sp else where.path(sp)
        criteria: list[Criterion] = []
        for i, c in enumerate(s["acceptanceCriteria"], start=1):
            cp = (f"{sjp}.acceptanceCriteria[{i - 1}]" if plain
                  else where.path((*sp, "acceptanceCriteria", i - 1)))
            line = DeferredLine(find, cp)
            if isinstance(c, str):
                criteria.append(Criterion(sid, i, f"AC{i}", c, "text", json_path=cp, line=line,
                                          synthesized=from_title))
                continue
            timeout = command = cwd = None
            if "kind" in c:  # a plugin's kind: every field is its own
                kind = c["kind"]
            else:
                key = next(k for k in _CHECK_KEYS if k in c)
                kind = CHECK_KEYS[key][0]
                if kind in _TIMED_KINDS:  # other kinds have no timeout: the key is theirs
                    timeout = c.get("timeout")
                if kind == "run":
                    command, cwd = c.get("run", c.get("testCommand")), c.get("cwd")
            criteria.append(Criterion(
                sid, i, c.get("id") or f"AC{i}", c.get("text") or _default_text(kind, c), kind,
                command=command, timeout=float(timeout) if timeout is not None else None,
                cwd=cwd, json_path=cp, line=line,
                spec={k: v for k, v in c.items() if k not in ("id", "text")}))
        yield Story(
            id=sid,
            title=s["title"],
            description=s["description"],
            criteria=tuple(criteria),
            priority=s.get("priority"),
            passes=s["passes"],
            notes=s["notes"],
            position=pos,
            json_path=sjp,
            line=DeferredLine(find, sjp),
            done_key=origin.done_key,
        )


#: Check kinds whose schema branch has a ``timeout``.
_TIMED_KINDS = frozenset(["run", "pytest", "python"])


# ---------------------------------------------------------------------------------------------
# Discovery


def discover_prd(rootdir: Path) -> Path | None:
    """The first of ``prd.json``, ``prd.jsonc``, ``prd.yaml``, ``prd.yml`` in ``rootdir``,
    then in ``rootdir/.ralph``, then in ``rootdir/scripts/ralph``; ``None`` if there is none.
    A folder of that name is passed over; anything else there (a FIFO, a device) is found, so
    that loading it says what it is instead of a "no PRD found"."""
    for folder in PRD_SEARCH_DIRS:
        for name in PRD_FILE_NAMES:
            candidate = rootdir / folder / name
            if candidate.exists() and not candidate.is_dir():
                return candidate.resolve()
    return None
