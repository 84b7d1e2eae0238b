"""Validate a parsed PRD: the canonical JSON Schema, and the problems the schema cannot see.

Before normalizing, the shape of the parsed data (:func:`shape_problems`: depth, YAML aliases,
JSON types) and its text (:func:`unicode_problems`: unpaired surrogates); after it, the schema
(:func:`schema_problems`), duplicate ids and check objects (:func:`duplicate_id_problems`) and
misspelt keys (:func:`misspelt_key_problems`). Each problem is placed where it is in the file
as written (:class:`pytest_ralph.prd.positions.Locator`).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import unicodedata
from collections.abc import Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any

from .dialects import CRITERIA_KEYS, DEPENDS_KEYS, STORY_CONTAINERS, describe, json_path
from .errors import (
    ALIAS_EXPANSION,
    MAX_DEPTH,
    MAX_EXPANDED_VALUES,
    MAX_PROBLEMS,
    MAX_VALUES,
    Problem,
    too_many_values,
)
from .fastpath import (
    CHECK_FIELDS,
    NO_NUL_PATTERN,
    STORY_VOCABULARY,
    TOP_VOCABULARY,
    misspelt,
    regex_problem,
)
from .positions import Locator, Positions

if TYPE_CHECKING:
    import jsonschema


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


def _priority_text(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"number {_number(value)}"
    return _describe(value)


def _number(value: object) -> str:
    """A number as found in the file, shortened when it has many digits."""
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= 24 else text[:10] + f"...({len(text)} characters)"


_JSON_SCALARS = (str, int, float, bool, type(None))


def shape_problems(data: Any, positions: Positions, fmt: str) -> list[Problem]:
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
                return [too_many_values()]
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
                     positions: Positions) -> list[Problem]:
    """A value JSON has no type for, or a number that is not finite."""
    if not isinstance(value, _JSON_SCALARS):
        return [_at(positions, parts, "expected a JSON value (text, number, true/false, null, "
                    f"list, mapping); found {_yaml_type(value)}", "quote it as text")]
    if isinstance(value, float) and not math.isfinite(value):
        return [_at(positions, parts, f"expected a finite number; found {value}",
                    "write a number, or quote it as text")]
    return []


def _at(positions: Positions, parts: tuple[str | int, ...], message: str,
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def unicode_problems(data: Any, positions: Positions) -> list[Problem]:
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


def schema_problems(data: dict[str, Any], where: Locator) -> list[Problem]:
    """Schema problems of the normalized ``data``, each placed where it is in the file."""
    problems: list[Problem] = []
    for err in itertools.islice(_validator().iter_errors(data), MAX_PROBLEMS + 1):
        if err.validator == "anyOf" and "acceptanceCriteria" in err.absolute_path:
            problems += _criterion_problems(err, where)
        else:
            problems.append(_problem(err, where))
    return list(dict.fromkeys(problems))  # e.g. -0.5: not an integer and below 0: one message


def _problem(err: jsonschema.ValidationError, where: Locator) -> Problem:
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
    if not hint and "dependsOn" in err.absolute_path:
        hint = ('list the ids of the stories it depends on, e.g. ["US-001", "US-002"] (the '
                "dependsOn of a story: also read from 'dependencies' and 'depends_on'; rename "
                "the key if it means something else)")
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


def _criterion_problems(err: jsonschema.ValidationError, where: Locator) -> list[Problem]:
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
                          where: Locator) -> list[Problem]:
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
            elif near is not None:
                wrong = f"unknown key {field!r}{_beside(near, c)} for {kinds[0]!r} criteria"
                hint = _rename_hint(near, c)
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


def _invisible_id(value: str, parts: tuple[str | int, ...], where: Locator) -> Problem:
    jp, line, col = where.at(parts)
    return Problem(jp, f"invalid id {json.dumps(value)}: it holds an invisible character "
                   "(zero-width, a direction mark, a control character...), so it would look "
                   "like another id in a node id", line, col,
                   hint="type the id again without it")


def _text_problems(story: dict[str, Any], sp: tuple[str | int, ...],
                   where: Locator) -> list[Problem]:
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


def misspelt_key_problems(raw: dict[str, Any], data: dict[str, Any],
                           where: Locator) -> list[Problem]:
    """Keys of the top level (``raw``, as written) and of each story (in the normalized
    ``data``) that look like misspellings of a canonical key (``userStory``,
    ``acceptanceCriterias``, ``prority``, ``passed``) and would otherwise be ignored: a story
    whose criteria are under a misspelt key would get its title as its only criterion. A
    misspelt key next to the key it looks like (``prority`` beside ``priority``) is refused
    too: its value would be dropped without a word. Keys a dialect reads (``status``,
    ``steps``, ``depends_on``...) are left alone."""
    problems: list[Problem] = []
    places: list[tuple[tuple[str | int, ...], Any, str, tuple[str, ...]]] = [
        ((), raw, "at the top level", TOP_VOCABULARY)]
    places += [(("userStories", pos), where.raw(("userStories", pos)), "in a story",
                STORY_VOCABULARY) for pos in range(len(data["userStories"]))]
    skip = {*STORY_CONTAINERS, "phases", "projectName", "name", *CRITERIA_KEYS, "status",
            *DEPENDS_KEYS}
    for parts, obj, what, known in places:
        if not isinstance(obj, dict):
            continue
        for key in obj:
            near = misspelt(key, known) if isinstance(key, str) and key not in skip else None
            if near is None:
                continue
            jp, line, col = where.at((*parts, key))
            expected = ", ".join(repr(k) for k in known)
            problems.append(Problem(jp, f"unknown key {key!r}{_beside(near, obj)} {what}; "
                                    f"expected the keys {expected}", line, col,
                                    hint=_rename_hint(near, obj)))
    return problems


def _beside(near: str, obj: dict[str, Any]) -> str:
    """`` next to 'priority'`` when ``obj`` holds ``near``, the key a misspelt one looks like;
    else ``""``."""
    return f" next to {near!r}" if near in obj else ""


def _rename_hint(near: str, obj: dict[str, Any]) -> str:
    """The hint for a misspelt key that looks like ``near``: with ``near`` in ``obj`` as well,
    the misspelt key's value would be dropped, so it must go or get a name of its own."""
    if near in obj:
        return (f"did you mean {near!r}? remove or rename it (only {near!r} is read; "
                "this key's value is ignored)")
    return f"did you mean {near!r}?"


def duplicate_id_problems(data: dict[str, Any], where: Locator) -> list[Problem]:
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
