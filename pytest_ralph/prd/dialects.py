"""Normalize PRD dialects to the canonical ``prd.json`` shape.

Real PRD files drift from the canonical shape (see PRODUCT.md, "1. The PRD"). This
module turns the already-parsed data of such a file into the canonical shape and says
what it did. It is pure: no I/O, no pytest, standard library only, and it never
mutates its input. :func:`pytest_ralph.prd.load.load_prd` applies it after parsing and before
validating against the schema; write-back uses :attr:`Normalized.origins` to find a story's
fields in the file as written.

The canonical shape::

    {"project": str, "branchName": str, "description": str,
     "userStories": [{"id": str, "title": str, "description": str,
                      "acceptanceCriteria": [str | {criterion object}, ...],
                      "priority": int,            # left out when the story has none
                      "passes": bool, "notes": str,
                      "dependsOn": [str, ...],   # left out when the story has none
                      ...other story keys kept...}]}

The rules, each a small function below:

- stories (:func:`_find_stories`): under ``userStories | stories | tasks | items |
  features``, under ``phases[].stories`` (flattened, in phase order), or a top-level array.
  An empty container gives zero stories (the loader's callers report "no stories").
- criteria (:func:`_criteria`): under ``acceptanceCriteria | acceptance | steps |
  steps_to_verify | acceptance_tests``; a single string is one criterion; criterion
  objects (``{"text": ..., "run": ...}``) are kept as they are. A story with no criteria
  gets one criterion: its title.
- priority (:func:`_priority`): an int >= 0; a float (rounded down); ``high`` /
  ``medium`` / ``low`` in any case -> 1 / 2 / 3; ``P0`` .. ``P9`` -> 0 .. 9 (a suffix
  after a non-alphanumeric character, as in ``P0-when-scaling``, is ignored); a string
  of digits -> that int. Missing or null: left out (file order decides).
- done (:func:`_passes`): ``passes`` (a bool); else ``status``: ``done``, ``complete``,
  ``completed``, ``passed`` (any case) -> true, any other string -> false; neither -> false.
- id (:func:`_story_id`): a missing (or null, or empty) id is synthesized from the
  story's 1-based position: ``S1``, ``S2``, ...; integer ids become strings.
- title (:func:`_title`): a story without a title takes the first line of its description.
- dependencies (:func:`_depends_on`): ``dependsOn | dependencies | depends_on``, a list of
  story ids (integer ids become strings); a single string is one id, a blank one none;
  missing or null: left out (no dependencies). Two of these keys with different lists are
  an error (which one is meant?). Only story keys are read: a top-level grouping such as
  ``waves: {"2": {"depends_on_wave": 1}}`` is not (the stories' own lists say the same).
- top level (:func:`_header`): ``project`` may be an object with ``name`` (and
  ``description``), or be called ``projectName`` / ``name``.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..util.text import plural

__all__ = ["CRITERIA_KEYS", "DEPENDS_KEYS", "STORY_CONTAINERS", "DialectError", "Normalized",
           "Origin", "describe", "json_path", "normalize", "source_path"]

#: Keys that may hold the list of stories, in the order they are tried.
STORY_CONTAINERS = ("userStories", "stories", "tasks", "items", "features")

#: Keys of a story that may hold its acceptance criteria, in the order they are tried.
CRITERIA_KEYS = ("acceptanceCriteria", "acceptance", "steps", "steps_to_verify",
                 "acceptance_tests")

#: Keys of a story that may hold the ids of the stories it depends on; the first is canonical.
DEPENDS_KEYS = ("dependsOn", "dependencies", "depends_on")

#: Priority words (compared case-insensitively) and the value each maps to.
PRIORITY_WORDS = {"high": 1, "medium": 2, "low": 3}

#: ``status`` values (compared case-insensitively, stripped) that mean the story is done.
DONE_STATUSES = frozenset({"done", "complete", "completed", "passed"})

_EXPECTED_TOP = ("an object with stories under " + " | ".join(STORY_CONTAINERS)
                 + " | phases[].stories, or an array of stories")
_P_PRIORITY = re.compile(r"[Pp]([0-9])(?![0-9A-Za-z])")
_CANONICAL_STORY_KEYS = ("id", "title", "description", "acceptanceCriteria", "priority",
                         "passes", "notes")


class DialectError(ValueError):
    """PRD data of a shape that no known dialect describes.

    Attributes:
        problems: ``(json_path, message)`` pairs, e.g.
            ``("$.tasks[2]", 'expected a story object with a title; found string "x"')``;
            every message says what was expected and what was found.

    ``str(error)`` is ``json_path: message``, one problem per line.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{jp}: {message}" for jp, message in problems))


#: A JSON path as parts: keys and 0-based indices, e.g. ``("phases", 1, "stories", 0)``.
Parts = tuple[str | int, ...]


@dataclass(frozen=True)
class Origin:
    """Where one normalized story came from in the parsed file.

    Attributes:
        parts: the story object's path in the file as parts (``("tasks", 2)``; ``(2,)``
            for a top-level array).
        criteria_key: the story key its criteria came from (``"steps"``), or ``""`` when
            its one criterion was made from its title.
        criteria_string: the criteria were a single string (one criterion).
        id_synthesized: the id was made from the position (``S3``).
        title_key: ``"title"``, or ``"description"`` when the title is its first line.
        done_key: ``"passes"`` or ``"status"``: what decided ``passes``; ``""`` when
            neither was there (``passes`` is false).
        depends_key: the story key its ``dependsOn`` came from (``"depends_on"``);
            ``"dependsOn"`` also when the story has none.
        depends_string: the dependencies were a single string (one id).
    """

    parts: Parts
    criteria_key: str = "acceptanceCriteria"
    criteria_string: bool = False
    id_synthesized: bool = False
    title_key: str = "title"
    done_key: str = "passes"
    depends_key: str = "dependsOn"
    depends_string: bool = False


@dataclass(frozen=True)
class Normalized:
    """The result of :func:`normalize`.

    Attributes:
        data: a new dict in the canonical shape (see the module docstring).
        dialect: ``"canonical"`` when no rule was needed, else the names of the rules
            applied joined by ``+`` (e.g. ``"phases+acceptance+P-priority+title-criteria"``).
        notes: human-readable lines saying what was renamed or synthesized.
        origins: one :class:`Origin` per story of ``data["userStories"]``, in order.
        stories_path: the JSON path the stories were taken from: ``$.userStories``,
            ``$.tasks``, ``$.phases[].stories``, ``$`` (a top-level array)...
    """

    data: dict[str, Any]
    dialect: str = "canonical"
    notes: tuple[str, ...] = ()
    origins: tuple[Origin, ...] = ()
    stories_path: str = "$.userStories"


@dataclass
class _Work:
    """What the rules found: applied rule names, notes, per-story tallies and problems."""

    rules: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)
    problems: list[tuple[str, str]] = field(default_factory=list)
    stories_path: str = "$.userStories"

    def rule(self, name: str) -> None:
        if name not in self.rules:
            self.rules.append(name)

    def problem(self, json_path: str, message: str) -> None:
        self.problems.append((json_path, message))


def describe(value: object) -> str:
    """What a parsed JSON/YAML value is, for messages: ``null``, ``boolean true``,
    ``number 42``, ``string "text"`` (cut at 60 characters), ``an array of 2 items``,
    ``an object with keys 'a', 'b'`` (at most 8 keys named)."""
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






# ---------------------------------------------------------------------------------------------
# The rules


def json_path(parts: Iterable[str | int]) -> str:
    """Format path parts (keys and indices) as a JSON path: ``("tasks", 2, "id")`` ->
    ``$.tasks[2].id``; a key that is not an identifier is quoted: ``$["my key"]``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_]\w*", part):
            out += f".{part}"
        else:
            out += "[" + json.dumps(part) + "]"
    return out


def _find_stories(data: object, work: _Work) -> list[tuple[Parts, object]]:
    """The raw stories as ``(parts, story)`` pairs, in file order.

    Tries ``STORY_CONTAINERS`` in order, then ``phases[].stories``; a top-level array is
    the list of stories itself. An empty container gives no stories (and a note). Records
    a DialectError problem when the container is of the wrong type or is not there at all.
    """
    if isinstance(data, list):
        work.rule("top-level-array")
        work.stories_path = "$"
        work.notes.append("stories are the top-level array")
        if not data:
            work.notes.append("no stories: $ is an empty array")
        return [((i,), s) for i, s in enumerate(data)]
    if not isinstance(data, dict):
        work.problem("$", f"expected {_EXPECTED_TOP}; found {describe(data)}")
        return []
    present = [k for k in (*STORY_CONTAINERS, "phases") if k in data]
    holding = [k for k in present if _holds_stories(data[k], k)]
    if len(holding) > 1:
        where = ", ".join(f"$.{k}" for k in holding)
        work.problem("$", f"expected one story container; found {where}")
        return []
    if present:
        key = (holding or present)[0]
        ignored = [k for k in present if k != key]
        if ignored:
            work.notes.append(f"stories taken from $.{key}; ignored the empty "
                              + ", ".join(f"$.{k}" for k in ignored))
        if key == "phases":
            return _phase_stories(data["phases"], work)
        value = data[key]
        jp = json_path((key,))
        work.stories_path = jp
        if key != "userStories":
            work.rule(key)
            work.notes.append(f"stories under {jp}")
        if not isinstance(value, list):
            work.problem(jp, f"expected an array of stories; found {describe(value)}")
            return []
        if not value:
            work.notes.append(f"no stories: {jp} is empty")
        return [((key, i), s) for i, s in enumerate(value)]
    keys = ", ".join(map(str, data)) or "none"
    stray = [k for k in CRITERIA_KEYS if isinstance(data.get(k), list)]
    found = ""
    if stray:
        n = len(data[stray[0]])
        found = (f"; $.{stray[0]} holds {n} criteri{'on' if n == 1 else 'a'} but no story owns "
                 f"them (put them in a story: {{\"id\", \"title\", \"{stray[0]}\"}})")
    work.problem("$", f"no stories found: expected {_EXPECTED_TOP}; found keys: {keys}{found}")
    return []


def _holds_stories(value: object, key: str) -> bool:
    """Whether a story container (``phases`` included) holds anything: a non-empty list,
    or for ``phases``, a phase with a non-empty container; any other value counts too (it
    is reported when the container is used)."""
    if value is None or value == []:
        return False
    if key == "phases" and isinstance(value, list):
        return any(isinstance(ph, dict) and any(ph.get(k) not in (None, []) for k in
                                                STORY_CONTAINERS) for ph in value)
    return True


def _phase_stories(phases: object, work: _Work) -> list[tuple[Parts, object]]:
    """``phases[].stories`` flattened in phase order (a phase without stories adds none);
    a phase may hold its stories under any of ``STORY_CONTAINERS``, as the top level can."""
    work.rule("phases")
    work.stories_path = "$.phases[].stories"
    if not isinstance(phases, list):
        work.problem("$.phases", "expected an array of phases, each an object with a "
                     f"'stories' array; found {describe(phases)}")
        return []
    stories: list[tuple[Parts, object]] = []
    for p, phase in enumerate(phases):
        pp = f"$.phases[{p}]"
        if not isinstance(phase, dict):
            work.problem(pp, f"expected a phase object with a 'stories' array; found "
                         f"{describe(phase)}")
            continue
        keys = [k for k in STORY_CONTAINERS if phase.get(k) not in (None, [])]
        if len(keys) > 1:
            work.problem(pp, "expected one story container in a phase; found "
                         + ", ".join(f"{pp}.{k}" for k in keys))
            continue
        key = keys[0] if keys else "stories"
        value = phase.get(key)
        if value is None:
            value = []
        if not isinstance(value, list):
            work.problem(f"{pp}.{key}", f"expected an array of stories; found {describe(value)}")
            continue
        if key != "stories":
            work.notes.append(f"stories of {pp} under {pp}.{key}")
        stories += [(("phases", p, key, i), s) for i, s in enumerate(value)]
    work.notes.append(f"stories under $.phases[].stories: {plural(len(phases), 'phase')} "
                      "flattened in order")
    if not stories and not work.problems:
        work.notes.append("no stories: no phase under $.phases has any")
    return stories


def _story_id(story: dict[str, Any], position: int, work: _Work) -> Any:
    """The story's id: ``S<position>`` when it has none; an int becomes a string; any
    other value is kept for the schema to report."""
    sid = story.get("id")
    if sid is None or sid == "":
        work.rule("position-ids")
        work.tally["synth-id"] += 1
        work.tally[f"synth-id:S{position}"] += 1
        return f"S{position}"
    if isinstance(sid, int) and not isinstance(sid, bool):
        work.rule("int-ids")
        work.tally["int-id"] += 1
        return str(sid)
    return sid


def _title(story: dict[str, Any], work: _Work) -> Any:
    """The story's title; without one (missing, null or blank), the first non-empty line
    of its description; ``None`` when there is neither. A title that is not a string is
    kept for the schema to report."""
    title = story.get("title")
    if isinstance(title, str) and title.strip():
        return title
    if title is not None and not isinstance(title, str):
        return title
    description = story.get("description")
    if isinstance(description, list) and all(isinstance(v, str) for v in description):
        description = "\n".join(description)
    if isinstance(description, str):
        line = next((ln.strip() for ln in description.splitlines() if ln.strip()), "")
        if line:
            work.rule("title-from-description")
            work.tally["title-from-description"] += 1
            return line
    return title


def _criteria(story: dict[str, Any], title: Any, work: _Work) -> tuple[Any, str, bool]:
    """The story's criteria (a new list), the key they came from (``""`` when none) and
    whether they were made from the title.

    A single string is one criterion; items are kept as they are (the schema judges
    them); an empty or missing list becomes ``[title]``. A value that is neither a list
    nor a string is kept for the schema to report.
    """
    present = [k for k in CRITERIA_KEYS if k in story]
    full = [k for k in present if story[k] not in (None, [])
            and not (isinstance(story[k], str) and not story[k].strip())]
    key = (full or present or [""])[0]  # the first that holds criteria
    value = story.get(key) if key else None
    if key and key != "acceptanceCriteria":
        work.rule(key)
        work.tally[f"criteria-key:{key}"] += 1
    if isinstance(value, str) and not value.strip():
        value = None  # a blank string, like an empty list: no criteria
    if isinstance(value, str):
        work.rule("string-criteria")
        work.tally["string-criteria"] += 1
        return [value], key, False
    if value is not None and not isinstance(value, (list, str)):
        return copy.deepcopy(value), key, False
    if value:
        return copy.deepcopy(value), key, False
    if not (isinstance(title, str) and title.strip()):
        return [], key, False  # no title either: the schema reports the missing title
    return _title_criteria(title, work), key, True


def _title_criteria(title: str, work: _Work) -> list[Any]:
    work.rule("title-criteria")
    work.tally["title-criteria"] += 1
    return [title]


def _priority(value: object, work: _Work) -> Any:
    """The priority as an int >= 0 (see the module docstring), or ``None`` when missing;
    a value of no known form is kept for the schema to report."""
    if value is None:
        return None
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if value >= 0:
            return value
    elif isinstance(value, float):
        if math.isfinite(value) and value >= 0:
            work.rule("float-priority")
            work.tally[f"priority:{value!r} -> {math.floor(value)}"] += 1
            return math.floor(value)
    elif isinstance(value, str):
        text = value.strip()
        mapped: int | None = None
        if text.lower() in PRIORITY_WORDS:
            work.rule("word-priority")
            mapped = PRIORITY_WORDS[text.lower()]
        elif m := _P_PRIORITY.match(text):
            work.rule("P-priority")
            mapped = int(m.group(1))
        elif text.isascii() and text.isdigit():
            work.rule("string-priority")
            mapped = int(text)
        if mapped is not None:
            work.tally[f"priority:{value!r} -> {mapped}"] += 1
            return mapped
    return value  # the schema reports it


def _passes(story: dict[str, Any], jp: str, work: _Work) -> Any:
    """``passes`` when it is there (a value that is not a bool is kept for the schema to
    report); else whether ``status`` is a done status; else false."""
    passes = story.get("passes")
    if passes is not None:
        return passes
    if "status" not in story or story["status"] is None:
        return False
    status = story["status"]
    if not isinstance(status, str):
        work.problem(f"{jp}.status", "expected a string such as 'done' or 'open'; found "
                     f"{describe(status)}")
        return False
    work.rule("status")
    done = status.strip().lower() in DONE_STATUSES
    work.tally[f"status:{status!r} -> passes {str(done).lower()}"] += 1
    return done


def _depends_on(story: dict[str, Any], jp: str, work: _Work) -> tuple[Any, str, bool]:
    """The story's dependencies (a new list; ``None`` when it has none), the key they came
    from and whether they were a single string.

    The first of :data:`DEPENDS_KEYS` whose value is not null is used; another of them with
    a different list is a problem. A string is one id (a blank one: none); integer items
    become strings; any other value or item is kept for the schema to report.
    """
    present = [k for k in DEPENDS_KEYS if story.get(k) is not None]
    if not present:
        return None, "dependsOn", False
    key = present[0]
    value = story[key]
    for other in present[1:]:
        if story[other] != value:
            work.problem(f"{jp}.{other}", f"expected one list of dependencies; found "
                         f"{jp}.{key} and {jp}.{other}, which differ (keep one of them)")
    if key != "dependsOn":
        work.rule(key)
        work.tally[f"depends-key:{key}"] += 1
    if isinstance(value, str):
        work.rule("string-depends")
        work.tally["string-depends"] += 1
        return ([value] if value.strip() else []), key, True
    if not isinstance(value, list):
        return copy.deepcopy(value), key, False
    if any(isinstance(v, int) and not isinstance(v, bool) for v in value):
        work.rule("int-depends")
        work.tally["int-depends"] += 1
    return [str(v) if isinstance(v, int) and not isinstance(v, bool) else copy.deepcopy(v)
            for v in value], key, False


def _text_field(story: dict[str, Any], key: str, work: _Work) -> Any:
    """A string field (``description``, ``notes``): ``""`` when missing; a list of
    strings is joined with newlines; another value is kept for the schema to report."""
    value = story.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        work.rule(f"list-{key}")
        work.tally[f"list-{key}"] += 1
        return "\n".join(value)
    return copy.deepcopy(value)


def _header(data: object, work: _Work) -> dict[str, Any]:
    """``project``, ``branchName`` and ``description`` of the file (``""`` when missing;
    a value that is not a string is kept for the schema to report).

    ``project`` may be an object with ``name`` (its ``description`` is used when there is
    no top-level one), or be called ``projectName`` or ``name``.
    """
    if not isinstance(data, dict):
        return {"project": "", "branchName": "", "description": ""}
    out: dict[str, Any] = {}
    description = data.get("description")
    project = data.get("project")
    if isinstance(project, dict):
        work.rule("project-object")
        name = project.get("name")
        out["project"] = "" if name is None else copy.deepcopy(name)
        work.notes.append("project from $.project.name")
        if description is None and isinstance(project.get("description"), str):
            description = project["description"]
            work.notes.append("description from $.project.description")
    elif project is None:
        for alias in ("projectName", "name"):
            if isinstance(data.get(alias), str):
                work.rule(alias)
                out["project"] = data[alias]
                work.notes.append(f"project from $.{alias}")
                break
    for key, value in (("project", project), ("branchName", data.get("branchName")),
                       ("description", description)):
        if key in out:
            continue
        out[key] = "" if value is None else copy.deepcopy(value)
    return {k: out[k] for k in ("project", "branchName", "description")}


# ---------------------------------------------------------------------------------------------
# Putting it together


def _story(raw: object, parts: Parts, position: int,
           work: _Work) -> tuple[dict[str, Any], Origin] | None:
    if not isinstance(raw, dict):
        work.problem(json_path(parts),
                     f"expected a story object with a title; found {describe(raw)}")
        return None
    title = _title(raw, work)
    criteria, criteria_key, from_title = _criteria(raw, title, work)
    story: dict[str, Any] = {"id": _story_id(raw, position, work)}
    if title is not None:  # else the schema reports the missing title
        story["title"] = title
    story["description"] = _text_field(raw, "description", work)
    story["acceptanceCriteria"] = criteria
    priority = _priority(raw.get("priority"), work)
    if priority is not None:
        story["priority"] = priority
    story["passes"] = _passes(raw, json_path(parts), work)
    story["notes"] = _text_field(raw, "notes", work)
    depends, depends_key, depends_string = _depends_on(raw, json_path(parts), work)
    if depends is not None:
        story["dependsOn"] = depends
    done_key = ("passes" if raw.get("passes") is not None else
                "status" if isinstance(raw.get("status"), str) else "")
    consumed = {*_CANONICAL_STORY_KEYS, criteria_key, "status" if done_key == "status" else "",
                *DEPENDS_KEYS}
    story.update((k, copy.deepcopy(v)) for k, v in raw.items() if k not in consumed)
    origin = Origin(
        parts=parts,
        criteria_key="" if from_title else criteria_key,
        criteria_string=not from_title and isinstance(raw.get(criteria_key), str),
        id_synthesized=raw.get("id") is None or raw.get("id") == "",
        title_key="description" if title is not None and title is not raw.get("title")
        else "title",
        done_key=done_key,
        depends_key=depends_key,
        depends_string=depends_string,
    )
    return story, origin


def _tally_notes(work: _Work, n_stories: int) -> list[str]:
    """The per-story tallies as note lines, in a fixed order."""
    t = work.tally
    notes: list[str] = []
    synth = [int(k.split(":S")[1]) for k in t if k.startswith("synth-id:S")]
    if synth:
        if synth == list(range(synth[0], synth[0] + len(synth))):
            span = f"S{synth[0]}" if len(synth) == 1 else f"S{synth[0]}..S{synth[-1]}"
        else:
            span = ", ".join(f"S{n}" for n in synth[:10]) + (", ..." if len(synth) > 10 else "")
        notes.append(f"ids synthesized from position: {span}")
    if t["int-id"]:
        notes.append(f"integer ids made strings for {plural(t['int-id'], 'story')}")
    if t["title-from-description"]:
        n = t["title-from-description"]
        notes.append(f"titles from descriptions for {plural(n, 'story')}")
    for key in CRITERIA_KEYS[1:]:
        if t[f"criteria-key:{key}"]:
            notes.append(f"criteria from '{key}' for "
                         f"{plural(t[f'criteria-key:{key}'], 'story')}")
    if t["string-criteria"]:
        notes.append(f"single-string criteria for {plural(t['string-criteria'], 'story')}")
    if t["title-criteria"]:
        notes.append(f"criteria from titles for {plural(t['title-criteria'], 'story')}")
    for key in DEPENDS_KEYS[1:]:
        if t[f"depends-key:{key}"]:
            notes.append(f"dependsOn from '{key}' for "
                         f"{plural(t[f'depends-key:{key}'], 'story')}")
    if t["string-depends"]:
        notes.append(f"single-string dependencies for {plural(t['string-depends'], 'story')}")
    if t["int-depends"]:
        notes.append(f"integer dependency ids made strings for "
                     f"{plural(t['int-depends'], 'story')}")
    for prefix in ("priority:", "status:"):
        for key, n in t.items():
            if key.startswith(prefix):
                what = key[len(prefix) :]
                notes.append(f"{prefix[:-1]} {what}"
                             + (f" ({plural(n, 'story')})" if n_stories > 1 else ""))
    for key in ("list-description", "list-notes"):
        if t[key]:
            notes.append(f"{key[5:]} lists joined for {plural(t[key], 'story')}")
    return notes


def normalize(data: object) -> Normalized:
    """Turn the parsed data of a PRD file into the canonical shape.

    Args:
        data: what ``json.loads`` / ``yaml.safe_load`` returned for the file. Not mutated.

    Returns:
        A :class:`Normalized`: the canonical data (a new dict sharing nothing with
        ``data``; other story keys are kept), the dialect name
        (``"canonical"`` when no rule applied), notes, and one :class:`Origin` per
        story. Normalizing ``result.data`` again gives the same data and dialect
        ``"canonical"``. An empty story container gives zero stories, with a note.

    Raises:
        DialectError: the data matches no known dialect; its
            ``problems`` name each JSON path, what was found there and what was expected.
    """
    work = _Work()
    header = _header(data, work)
    found = _find_stories(data, work)
    made = [m for pos, (parts, raw) in enumerate(found, start=1)
            if (m := _story(raw, parts, pos, work)) is not None]
    if work.problems:
        raise DialectError(work.problems)
    notes = [*work.notes, *_tally_notes(work, len(made))]
    return Normalized(
        data={**header, "userStories": [story for story, _ in made]},
        dialect="+".join(work.rules) or "canonical",
        notes=tuple(notes),
        origins=tuple(origin for _, origin in made),
        stories_path=work.stories_path,
    )


def source_path(parts: Parts, origins: tuple[Origin, ...]) -> Parts:
    """Map a path in the normalized data to the path of the same thing in the file.

    ``("userStories", 3, "acceptanceCriteria", 1)`` of a story taken from
    ``phases[1].stories[0]`` whose criteria were under ``steps`` becomes
    ``("phases", 1, "stories", 0, "steps", 1)``. Synthesized values map to what they were
    made from: a criterion made from the title to the title, a synthesized id to the
    story, a title taken from the description to the description, ``passes`` decided by
    ``status`` to ``status``. Paths outside ``userStories`` are returned unchanged.

    Args:
        parts: keys and 0-based indices in the normalized data.
        origins: :attr:`Normalized.origins` of that data.

    Returns:
        The parts in the parsed file (before normalization).
    """
    if len(parts) < 2 or parts[0] != "userStories" or not isinstance(parts[1], int):
        return parts
    if not 0 <= parts[1] < len(origins):
        return parts
    origin = origins[parts[1]]
    rest = parts[2:]
    if not rest:
        return origin.parts
    head, tail = rest[0], rest[1:]
    if head == "acceptanceCriteria":
        if not origin.criteria_key:
            return (*origin.parts, origin.title_key)
        if origin.criteria_string:
            return (*origin.parts, origin.criteria_key)
        return (*origin.parts, origin.criteria_key, *tail)
    if head == "id" and origin.id_synthesized:
        return origin.parts
    if head == "title" and origin.title_key != "title":
        return (*origin.parts, origin.title_key)
    if head == "passes" and origin.done_key == "status":
        return (*origin.parts, "status")
    if head == "dependsOn":
        if origin.depends_string:
            return (*origin.parts, origin.depends_key)
        return (*origin.parts, origin.depends_key, *tail)
    return (*origin.parts, *rest)
