"""Load PRD files (``.json``, ``.jsonc``, ``.yaml``/``.yml``): :func:`load_prd` reads, parses,
normalizes and validates one and builds the model; :func:`discover_prd` finds one.

The canonical JSON Schema ships in the package as ``prd.schema.json`` and is the
single definition of the format. Loading reports every problem at once, each with
the file, the JSON path and, where it can be known, the line and column. The problems and
the limits are in :mod:`pytest_ralph.prd.errors`, the checks of the parsed data in
:mod:`pytest_ralph.prd.validate`, the placing of values in the file in
:mod:`pytest_ralph.prd.positions`.

This module does not import pytest: the loop controller and the Stop hook use it too.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..util.files import FileTooLarge, NotRegularFile, read_bytes
from .dialects import DialectError, Normalized, normalize
from .errors import MAX_PROBLEMS, MAX_VALUES, PRDError, Problem, too_many_values
from .fastpath import TOP_VOCABULARY, FastRules, fast_normalize, misspelt
from .lines import JSONLines
from .model import PRD, Criterion, DeferredLine, Story, default_text
from .positions import Locator, Positions, strip_jsonc
from .validate import (
    CHECK_KEYS,
    duplicate_id_problems,
    misspelt_key_problems,
    schema,
    schema_problems,
    shape_problems,
    unicode_problems,
)

#: Default size limit of a PRD file, in bytes (20 MiB).
MAX_PRD_BYTES = 20 * 1024 * 1024

#: File suffix -> format name.
PRD_FORMATS = {".json": "json", ".jsonc": "jsonc", ".yaml": "yaml", ".yml": "yaml"}

#: File names collected by plain ``pytest`` and tried, in order, by PRD discovery.
PRD_FILE_NAMES = ("prd.json", "prd.jsonc", "prd.yaml", "prd.yml")

#: Folders (relative to the rootdir) searched, in order, by PRD discovery.
PRD_SEARCH_DIRS = (".", ".ralph", "scripts/ralph")


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
    positions = Positions(text, fmt)
    if not duplicates and _fast_path_applies(text, fmt):
        fast = fast_normalize(data, _fast_rules())
        if fast is not None:
            lines = None if fmt == "yaml" else JSONLines(
                strip_jsonc(text) if fmt == "jsonc" else text, lambda jp: positions.at(jp)[0])
            return _build(path, fmt, fast, Locator(positions, fast.origins, data, lines))
    shape = shape_problems(data, positions, fmt)
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
    text_problems = unicode_problems(data, positions)
    if text_problems:  # the schema's messages would have to print that text: stop here
        problems += text_problems
        raise PRDError(path, _sorted(problems))
    try:
        normalized = normalize(data)
    except DialectError as exc:
        problems += [Problem(jp, message, *positions.at(jp), hint=_dialect_hint(message, data))
                     for jp, message in exc.problems]
        raise PRDError(path, _sorted(problems)) from None
    where = Locator(positions, normalized.origins, data)
    problems += schema_problems(normalized.data, where)
    problems += duplicate_id_problems(normalized.data, where)
    problems += misspelt_key_problems(data, normalized.data, where)
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
                raise PRDError(path, [too_many_values()])
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


def _short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:python/object:os.system`` -> ``!!python/object:os.system``."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix):] if tag.startswith(prefix) else tag


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


# ---------------------------------------------------------------------------------------------
# Building the model


def _build(path: Path, fmt: str, normalized: Normalized, where: Locator) -> PRD:
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


def _build_stories(raw: list[dict[str, Any]], where: Locator) -> Iterator[Story]:
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
                key = next(k for k in CHECK_KEYS if k in c)
                kind = CHECK_KEYS[key][0]
                if kind in _TIMED_KINDS:  # other kinds have no timeout: the key is theirs
                    timeout = c.get("timeout")
                if kind == "run":
                    command, cwd = c.get("run", c.get("testCommand")), c.get("cwd")
            criteria.append(Criterion(
                sid, i, c.get("id") or f"AC{i}", c.get("text") or default_text(kind, c), kind,
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
            depends_on=tuple(s.get("dependsOn", ())),
            depends_key=origin.depends_key,
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
