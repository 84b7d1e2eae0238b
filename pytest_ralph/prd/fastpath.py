"""The fast path of PRD loading: a canonical PRD judged without jsonschema.

Most PRD files are canonical (``{"userStories": [{"id", "title", "description",
"acceptanceCriteria", "priority", "passes", "notes"}]}``) and valid. For those, the full
path of :func:`pytest_ralph.prd.load.load_prd` (the dialect rules, the JSON Schema validator,
the checks of duplicate ids, invisible characters, nesting and YAML aliases) costs about a
hundred times the parse itself, almost all of it in jsonschema. :func:`fast_normalize`
makes the same judgement in one pass over the data for that common case, with the
limits (id pattern, lengths, priority range) read from ``prd.schema.json`` itself.

It never decides that a file is invalid: it returns ``None`` as soon as anything is not
plainly canonical and valid (a dialect, a plugin's check kind, a duplicate id, a value
out of range, a YAML alias, a float that is not finite...), and the loader then takes
the full path, which finds and explains the problems. So a file the fast path accepts
is one the full path accepts, with the same result; ``tests/prd/test_canonical.py`` holds
it to that on generated and mutated PRDs.

Pure: no I/O, no pytest, standard library only; the input is not mutated.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
import unicodedata
import warnings
from dataclasses import dataclass
from typing import Any, TypeGuard

from .dialects import CRITERIA_KEYS, DEPENDS_KEYS, STORY_CONTAINERS, Normalized, Origin

__all__ = ["CHECK_FIELDS", "STORY_VOCABULARY", "TOP_VOCABULARY", "FastRules", "fast_normalize",
           "misspelt", "regex_problem"]

#: Story keys the dialect rules read; a story holding one besides its canonical keys takes
#: the full path (e.g. ``status`` next to ``passes``).
_DIALECT_STORY_KEYS = frozenset([*CRITERIA_KEYS, *DEPENDS_KEYS[1:], "status"])

#: Top-level keys the dialect rules read.
_DIALECT_TOP_KEYS = frozenset([*STORY_CONTAINERS, "phases", "projectName", "name"])

_STORY_KEYS = frozenset(["id", "title", "description", "acceptanceCriteria", "priority",
                         "passes", "notes", "dependsOn"])

#: Built-in check keys -> the kind's own keys (besides ``id`` and ``text``), from the
#: schema's criterion branches; ``tests/prd/test_canonical.py`` compares them with the schema.
CHECK_FIELDS: dict[str, frozenset[str]] = {
    "run": frozenset(["run", "testCommand", "timeout", "cwd"]),
    "testCommand": frozenset(["run", "testCommand", "timeout", "cwd"]),
    "pytest": frozenset(["pytest", "timeout"]),
    "exists": frozenset(["exists"]),
    "file": frozenset(["file", "contains"]),
    "sql": frozenset(["sql", "db", "expect"]),
    "schema": frozenset(["schema", "instance"]),
    "python": frozenset(["python", "timeout"]),
}
_CHECK_KEYS = frozenset(CHECK_FIELDS)

#: Every key a built-in check object knows, for :func:`misspelt`.
_KNOWN_KEYS = tuple(sorted({"id", "text", "kind", *(k for f in CHECK_FIELDS.values() for k in f)}))


#: The canonical keys of a story and of the top level, for :func:`misspelt`.
STORY_VOCABULARY = tuple(sorted(_STORY_KEYS))
TOP_VOCABULARY = ("branchName", "description", "project", "userStories")


@functools.lru_cache(maxsize=512)
def misspelt(key: str, known: tuple[str, ...] = _KNOWN_KEYS, cutoff: float = 0.8) -> str | None:
    """The key of ``known`` (by default the built-in check keys; :data:`STORY_VOCABULARY`,
    :data:`TOP_VOCABULARY`) that ``key`` looks like a misspelling of (``"contians"`` ->
    ``"contains"``, ``"Timeout"`` -> ``"timeout"``, ``"acceptanceCriterias"`` ->
    ``"acceptanceCriteria"``), or ``None`` for a key of its own (``"note"`` on a check,
    ``"owner"``): a close match by :func:`difflib.get_close_matches` (ratio ``cutoff`` or
    more, ignoring case; a lower one suits a hint for an object that is refused anyway)."""
    if key in known:
        return None
    lowered = {k.lower(): k for k in known}
    found = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[found[0]] if found else None

#: An ASCII character one can see: a string holding one is not blank (``\\S``) and has
#: visible text.
_VISIBLE_ASCII = re.compile(r"[!-~]")

#: Deepest nesting of a value under a key the fast path does not know (an extra story
#: field, ``expect``); deeper values take the full path, which checks the limit.
_EXTRA_DEPTH = 32

_SCALARS = (str, int, bool, type(None))


#: The schema's pattern of a text that reaches a command line or the file system: no NUL.
NO_NUL_PATTERN = "^[^\\u0000]*$"


@dataclass(frozen=True)
class FastRules:
    """The limits of the schema the fast path applies, read from ``prd.schema.json``.

    Attributes:
        id_pattern: the ``$defs.id`` pattern, searched as jsonschema does (``re.search``).
        id_min, id_max: the id length bounds, in characters.
        python_pattern: the ``pythonCriterion.python`` pattern.
        priority_min, priority_max: the story ``priority`` bounds.
        timeout_max: the largest ``timeout`` of a check, in seconds.
        no_nul: the check fields whose text may not hold a NUL character (it would reach
            a command line or a path): those whose schema (or list items' schema) has the
            pattern :data:`NO_NUL_PATTERN`.
    """

    id_pattern: re.Pattern[str]
    id_min: int
    id_max: int
    python_pattern: re.Pattern[str]
    priority_min: int
    priority_max: int
    timeout_max: float
    no_nul: frozenset[str] = frozenset()

    @classmethod
    def from_schema(cls, schema: dict[str, Any]) -> FastRules:
        """The rules of ``schema`` (the PRD JSON Schema as a dict).

        Raises:
            KeyError: the schema lacks one of the definitions read here (a schema edit
                that the fast path must follow).
        """
        defs = schema["$defs"]
        ident = defs["id"]
        priority = defs["story"]["properties"]["priority"]
        no_nul = set()
        for name, branch in defs.items():
            if not name.endswith("Criterion"):
                continue
            for field, node in branch.get("properties", {}).items():
                nodes = [node, *node.get("anyOf", [])]
                nodes += [n["items"] for n in nodes if isinstance(n.get("items"), dict)]
                if any(n.get("pattern") == NO_NUL_PATTERN for n in nodes):
                    no_nul.add(field)
        return cls(
            id_pattern=re.compile(ident["pattern"]),
            id_min=ident["minLength"],
            id_max=ident["maxLength"],
            python_pattern=re.compile(defs["pythonCriterion"]["properties"]["python"]["pattern"]),
            priority_min=priority["minimum"],
            priority_max=priority["maximum"],
            timeout_max=defs["runCriterion"]["properties"]["timeout"]["maximum"],
            no_nul=frozenset(no_nul),
        )


class _Slow(Exception):
    """Raised inside the walk: take the full path."""


def fast_normalize(data: object, rules: FastRules) -> Normalized | None:
    """The normalized data of a canonical, valid PRD, or ``None``.

    Args:
        data: what the JSON or YAML parser returned, with no duplicate keys (the caller
            checks those) and with no unpaired surrogate escapes in the text.
        rules: :meth:`FastRules.from_schema` of the PRD schema.

    Returns:
        The :class:`~pytest_ralph.prd.dialects.Normalized` that
        :func:`~pytest_ralph.prd.dialects.normalize` gives for ``data`` (dialect
        ``"canonical"``), valid against the schema with no duplicate story or criterion
        ids; a story dict of ``data`` is reused when it already has ``description``,
        ``passes`` and ``notes``. ``None`` when the file is not plainly canonical and valid:
        the caller takes the full path.
    """
    try:
        return _normalize(data, rules)
    except _Slow:
        return None


def _normalize(data: object, rules: FastRules) -> Normalized | None:
    if type(data) is not dict:
        return None
    stories = data.get("userStories")
    if type(stories) is not list or not stories:
        return None
    seen: set[int] = {id(stories)}  # YAML aliases share containers: the full path judges them
    header: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("project", "branchName", "description"):
            if value is None:
                if key == "project" and ("projectName" in data or "name" in data):
                    return None
                value = ""
            elif type(value) is not str:
                return None
            header[key] = value
        elif key in _DIALECT_TOP_KEYS and key != "userStories":
            return None
        elif key != "userStories":
            if misspelt(key, TOP_VOCABULARY):
                return None  # the full path reports it
            _plain(value, 2, seen)
    if "project" not in header and ("projectName" in data or "name" in data):
        return None
    ids: set[str] = set()
    out: list[dict[str, Any]] = []
    for story in stories:
        if type(story) is not dict or id(story) in seen:
            return None
        seen.add(id(story))
        sid = story.get("id")
        if not _valid_id(sid, rules) or sid in ids:
            return None
        ids.add(sid)
        title = story.get("title")
        if type(title) is not str or not _visible(title):
            return None
        criteria = story.get("acceptanceCriteria")
        if type(criteria) is not list or not criteria or id(criteria) in seen:
            return None
        seen.add(id(criteria))
        _criteria(criteria, rules, seen)
        if "dependsOn" in story:
            _depends_on(story["dependsOn"], rules, seen)
        complete = True
        for key, value in story.items():
            if key in _STORY_KEYS:
                continue
            if key in _DIALECT_STORY_KEYS or misspelt(key, STORY_VOCABULARY):
                return None
            _plain(value, 4, seen)
        for key in ("description", "notes"):
            value = story.get(key, "")
            if type(value) is not str:
                return None
            complete = complete and key in story
        passes = story.get("passes", False)
        if type(passes) is not bool:
            return None
        complete = complete and "passes" in story
        if "priority" in story:
            priority = story["priority"]
            if (type(priority) is not int
                    or not rules.priority_min <= priority <= rules.priority_max):
                return None
        out.append(story if complete else _completed(story))
    return Normalized(
        data={"project": header.get("project", ""), "branchName": header.get("branchName", ""),
              "description": header.get("description", ""), "userStories": out},
        origins=tuple(Origin(("userStories", i), done_key="passes" if "passes" in story else "")
                      for i, story in enumerate(stories)),
    )


def _depends_on(value: object, rules: FastRules, seen: set[int]) -> None:
    """Raise :class:`_Slow` unless ``value`` is a list of valid ids (a string, ``null``,
    integer ids: the dialect rules normalize them)."""
    if type(value) is not list or id(value) in seen:
        raise _Slow
    seen.add(id(value))
    if not all(_valid_id(v, rules) for v in value):
        raise _Slow


def _completed(story: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``story`` in the normalized key order, with the defaults filled in."""
    out: dict[str, Any] = {"id": story["id"], "title": story["title"],
                           "description": story.get("description", ""),
                           "acceptanceCriteria": story["acceptanceCriteria"]}
    if "priority" in story:
        out["priority"] = story["priority"]
    out["passes"] = story.get("passes", False)
    out["notes"] = story.get("notes", "")
    out.update((k, v) for k, v in story.items() if k not in out)
    return out


def _criteria(criteria: list[Any], rules: FastRules, seen: set[int]) -> None:
    """Raise :class:`_Slow` unless every criterion is valid and their ids are unique."""
    ids: set[str] = set()
    for i, c in enumerate(criteria, start=1):
        if type(c) is str:
            if not _visible(c):
                raise _Slow
            cid = f"AC{i}"
        elif type(c) is dict:
            if id(c) in seen:
                raise _Slow
            seen.add(id(c))
            cid = _check_object(c, i, rules, seen)
        else:
            raise _Slow
        if cid in ids:
            raise _Slow
        ids.add(cid)


def _check_object(c: dict[str, Any], index: int, rules: FastRules, seen: set[int]) -> str:
    """The criterion id of a valid built-in check object; raise :class:`_Slow` otherwise."""
    kinds = c.keys() & _CHECK_KEYS
    if len(kinds) != 1 or "kind" in c:
        raise _Slow  # several kinds, none, or a plugin's kind
    (key,) = kinds
    own = CHECK_FIELDS[key]
    for field, value in c.items():
        if field == "id":
            if not _valid_id(value, rules):
                raise _Slow
        elif field == "text":
            if type(value) is not str:
                raise _Slow
        elif field in own:
            _field(key, field, value, rules, seen)
        elif field in ("timeout", "cwd") or field in _CHECK_KEYS or misspelt(field):
            raise _Slow  # a field of another kind, or a misspelt one: the full path reports it
        else:
            _plain(value, 6, seen)
    if key == "sql" and not {"db", "expect"} <= c.keys():
        raise _Slow
    if key == "schema" and "instance" not in c:
        raise _Slow
    explicit = c.get("id")
    return explicit if explicit else f"AC{index}"


def _field(key: str, field: str, value: Any, rules: FastRules, seen: set[int]) -> None:
    """Raise :class:`_Slow` unless ``value`` is valid for ``field`` of kind ``key``."""
    if field == "timeout":
        if type(value) is float and not math.isfinite(value):
            raise _Slow
        if type(value) not in (int, float) or not 0 < value <= rules.timeout_max:
            raise _Slow
    elif field == "expect":
        _plain(value, 6, seen)
    elif field == "pytest":
        if type(value) is list:
            if id(value) in seen:
                raise _Slow
            seen.add(id(value))
        targets = value if type(value) is list else [value]
        if not targets or any(type(t) is not str or not t
                              or (field in rules.no_nul and "\0" in t) for t in targets):
            raise _Slow
    elif type(value) is not str or not value or (field in rules.no_nul and "\0" in value):
        raise _Slow
    elif field == "python":
        if not rules.python_pattern.search(value):
            raise _Slow
    elif field == "contains" and regex_problem(value) is not None:
        raise _Slow


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a regular expression Python compiles (with ``re.MULTILINE``,
    as the ``file`` check does), or ``None`` when it is one. Warnings (``FutureWarning`` on
    ``[[``) are not problems, even under ``-W error``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            return str(exc)
        except RecursionError:
            return "groups nested too deeply for Python's regular expression compiler"
        except (OverflowError, MemoryError) as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def _valid_id(value: object, rules: FastRules) -> TypeGuard[str]:
    """Whether ``value`` is an id the schema accepts, with no invisible character."""
    if type(value) is not str or not rules.id_min <= len(value) <= rules.id_max:
        return False
    if not rules.id_pattern.search(value):
        return False
    return value.isascii() or not _invisible(value)


def _visible(text: str) -> bool:
    """Whether ``text`` holds a character one can see (the schema's ``\\S`` follows)."""
    if _VISIBLE_ASCII.search(text):
        return True
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf")
               for ch in text)


def _invisible(text: str) -> bool:
    """Whether ``text`` holds a format or control character (zero-width space, direction
    marks, C1 controls...)."""
    return any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


def _plain(value: Any, depth: int, seen: set[int]) -> None:
    """Raise :class:`_Slow` unless ``value`` is plain JSON: text keys, finite numbers, no
    shared containers, at most :data:`_EXTRA_DEPTH` levels below ``depth``."""
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is float:
            if not math.isfinite(item):
                raise _Slow
            continue
        if kind is not dict and kind is not list:
            raise _Slow
        if level >= _EXTRA_DEPTH or id(item) in seen:
            raise _Slow
        seen.add(id(item))
        if kind is dict:
            if any(type(k) is not str for k in item):
                raise _Slow
            stack.extend((v, level + 1) for v in item.values())
        else:
            stack.extend((v, level + 1) for v in item)
