"""Normalize PRD dialects to the canonical ``prd.json`` shape.

Real PRD files drift from the canonical shape (see PRODUCT.md, "1. The PRD"). This
module turns the already-parsed data of such a file into the canonical shape and says
what it did. It is pure: no I/O, no pytest, standard library only, and it never
mutates its input. It is not wired into the loader yet.

The canonical shape::

    {"project": str, "branchName": str, "description": str,
     "userStories": [{"id": str, "title": str, "description": str,
                      "acceptanceCriteria": [str | {criterion object}, ...],
                      "priority": int,            # left out when the story has none
                      "passes": bool, "notes": str, ...other story keys kept...}]}

The rules, each a small function below:

- stories (:func:`_find_stories`): under ``userStories | stories | tasks | items |
  features``, under ``phases[].stories`` (flattened, in phase order), or a top-level array.
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
- top level (:func:`_header`): ``project`` may be an object with ``name`` (and
  ``description``), or be called ``projectName`` / ``name``.
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CRITERIA_KEYS", "STORY_CONTAINERS", "DialectError", "Normalized", "normalize"]

#: Keys that may hold the list of stories, in the order they are tried.
STORY_CONTAINERS = ("userStories", "stories", "tasks", "items", "features")

#: Keys of a story that may hold its acceptance criteria, in the order they are tried.
CRITERIA_KEYS = ("acceptanceCriteria", "acceptance", "steps", "steps_to_verify",
                 "acceptance_tests")

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
            ``("$.tasks[2]", "$.tasks[2] is a string; expected a story object")``;
            every message says what was found and what was expected.

    ``str(error)`` is the messages, one per line.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(message for _, message in problems))


@dataclass(frozen=True)
class Normalized:
    """The result of :func:`normalize`.

    Attributes:
        data: a new dict in the canonical shape (see the module docstring).
        dialect: ``"canonical"`` when no rule was needed, else the names of the rules
            applied joined by ``+`` (e.g. ``"phases+acceptance+P-priority+title-criteria"``).
        notes: human-readable lines saying what was renamed or synthesized.
    """

    data: dict[str, Any]
    dialect: str = "canonical"
    notes: tuple[str, ...] = ()


@dataclass
class _Work:
    """What the rules found: applied rule names, notes, per-story tallies and problems."""

    rules: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def rule(self, name: str) -> None:
        if name not in self.rules:
            self.rules.append(name)

    def problem(self, json_path: str, message: str) -> None:
        self.problems.append((json_path, message))


def _kind(value: object) -> str:
    """A JSON name for the type of ``value`` ("a string", "an object", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


# ---------------------------------------------------------------------------------------------
# The rules


def _find_stories(data: object, work: _Work) -> list[tuple[str, object]]:
    """The raw stories as ``(json_path, story)`` pairs, in file order.

    Tries ``STORY_CONTAINERS`` in order, then ``phases[].stories``; a top-level array is
    the list of stories itself. Records a DialectError problem when the container is of
    the wrong type, holds no stories, or is not there at all.
    """
    if isinstance(data, list):
        work.rule("top-level-array")
        work.notes.append("stories are the top-level array")
        stories: list[tuple[str, object]] = [(f"$[{i}]", s) for i, s in enumerate(data)]
        if not stories:
            work.problem("$", "no stories: $ is an empty array; expected at least one story")
        return stories
    if not isinstance(data, dict):
        work.problem("$", f"$ is {_kind(data)}; expected {_EXPECTED_TOP}")
        return []
    for key in STORY_CONTAINERS:
        if key in data:
            value = data[key]
            jp = f"$.{key}"
            if key != "userStories":
                work.rule(key)
                work.notes.append(f"stories under {jp}")
            others = [k for k in (*STORY_CONTAINERS, "phases") if k != key and k in data]
            if others:
                work.notes.append(f"stories taken from {jp}; ignored "
                                  + ", ".join(f"$.{k}" for k in others))
            if not isinstance(value, list):
                work.problem(jp, f"{jp} is {_kind(value)}; expected an array of stories")
                return []
            if not value:
                work.problem(jp, f"no stories: {jp} is empty; expected at least one story")
            return [(f"{jp}[{i}]", s) for i, s in enumerate(value)]
    if "phases" in data:
        return _phase_stories(data["phases"], work)
    keys = ", ".join(map(str, data)) or "none"
    work.problem("$", f"no stories found: expected {_EXPECTED_TOP}; found keys: {keys}")
    return []


def _phase_stories(phases: object, work: _Work) -> list[tuple[str, object]]:
    """``phases[].stories`` flattened in phase order (a phase without ``stories`` adds none)."""
    work.rule("phases")
    if not isinstance(phases, list):
        work.problem("$.phases", f"$.phases is {_kind(phases)}; expected an array of phases, "
                     "each an object with a 'stories' array")
        return []
    stories: list[tuple[str, object]] = []
    for p, phase in enumerate(phases):
        pp = f"$.phases[{p}]"
        if not isinstance(phase, dict):
            work.problem(pp, f"{pp} is {_kind(phase)}; expected a phase object with a "
                         "'stories' array")
            continue
        value = phase.get("stories", [])
        if not isinstance(value, list):
            work.problem(f"{pp}.stories", f"{pp}.stories is {_kind(value)}; expected an "
                         "array of stories")
            continue
        stories += [(f"{pp}.stories[{i}]", s) for i, s in enumerate(value)]
    work.notes.append(f"stories under $.phases[].stories: {_plural(len(phases), 'phase')} "
                      "flattened in order")
    if not stories and not work.problems:
        work.problem("$.phases", "no stories: no phase under $.phases has any; expected at "
                     "least one story")
    return stories


def _story_id(story: dict[str, Any], jp: str, position: int, work: _Work) -> str:
    """The story's id as a string; ``S<position>`` when it has none; ints become strings."""
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
    if isinstance(sid, str):
        return sid
    work.problem(f"{jp}.id", f"{jp}.id is {_kind(sid)}; expected a string or an integer")
    return ""


def _title(story: dict[str, Any], jp: str, work: _Work) -> str:
    """The story's title; without one, the first non-empty line of its description."""
    title = story.get("title")
    if isinstance(title, str) and title.strip():
        return title
    if title is not None and not isinstance(title, str):
        work.problem(f"{jp}.title", f"{jp}.title is {_kind(title)}; expected a string")
        return ""
    description = story.get("description")
    if isinstance(description, str):
        line = next((ln.strip() for ln in description.splitlines() if ln.strip()), "")
        if line:
            work.rule("title-from-description")
            work.tally["title-from-description"] += 1
            return line
    work.problem(jp, f"{jp} has no title; expected a non-empty 'title' (or a 'description' "
                 "to take it from)")
    return ""


def _criteria(story: dict[str, Any], jp: str, title: str, work: _Work) -> tuple[list[Any], str]:
    """The story's criteria (a new list) and the key they came from (``""`` when none).

    A single string is one criterion; strings and objects are kept as they are; an empty
    or missing list becomes ``[title]``.
    """
    key = next((k for k in CRITERIA_KEYS if k in story), "")
    value = story.get(key) if key else None
    cp = f"{jp}.{key}"
    if key and key != "acceptanceCriteria":
        work.rule(key)
        work.tally[f"criteria-key:{key}"] += 1
    if isinstance(value, str):
        work.rule("string-criteria")
        work.tally["string-criteria"] += 1
        return ([value] if value.strip() else []) or _title_criteria(title, work), key
    if value is None:
        return _title_criteria(title, work), key
    if not isinstance(value, list):
        work.problem(cp, f"{cp} is {_kind(value)}; expected an array of criteria (strings or "
                     "objects) or a single string")
        return [], key
    criteria: list[Any] = []
    for i, c in enumerate(value):
        if isinstance(c, str):
            criteria.append(c)
        elif isinstance(c, dict):
            criteria.append(copy.deepcopy(c))
        else:
            work.problem(f"{cp}[{i}]", f"{cp}[{i}] is {_kind(c)}; expected a string or a "
                         "criterion object")
    return criteria or _title_criteria(title, work), key


def _title_criteria(title: str, work: _Work) -> list[Any]:
    work.rule("title-criteria")
    work.tally["title-criteria"] += 1
    return [title]


def _priority(value: object, jp: str, work: _Work) -> int | None:
    """The priority as an int >= 0, or ``None`` when missing (see the module docstring)."""
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
    work.problem(f"{jp}.priority", f"{jp}.priority is {_kind(value)} {value!r}; expected an "
                 "integer >= 0, a number, high/medium/low or P0..P9")
    return None


def _passes(story: dict[str, Any], jp: str, work: _Work) -> bool:
    """``passes`` when it is a bool; else whether ``status`` is a done status; else false."""
    passes = story.get("passes")
    if isinstance(passes, bool):
        return passes
    if passes is not None:
        work.problem(f"{jp}.passes", f"{jp}.passes is {_kind(passes)}; expected true or false")
        return False
    if "status" not in story or story["status"] is None:
        return False
    status = story["status"]
    if not isinstance(status, str):
        work.problem(f"{jp}.status", f"{jp}.status is {_kind(status)}; expected a string such "
                     "as 'done' or 'open'")
        return False
    work.rule("status")
    done = status.strip().lower() in DONE_STATUSES
    work.tally[f"status:{status!r} -> passes {str(done).lower()}"] += 1
    return done


def _text_field(story: dict[str, Any], key: str, jp: str, work: _Work) -> str:
    """A string field (``description``, ``notes``): ``""`` when missing; a list of
    strings is joined with newlines."""
    value = story.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        work.rule(f"list-{key}")
        work.tally[f"list-{key}"] += 1
        return "\n".join(value)
    work.problem(f"{jp}.{key}", f"{jp}.{key} is {_kind(value)}; expected a string")
    return ""


def _header(data: object, work: _Work) -> dict[str, str]:
    """``project``, ``branchName`` and ``description`` of the file (``""`` when missing).

    ``project`` may be an object with ``name`` (its ``description`` is used when there is
    no top-level one), or be called ``projectName`` or ``name``.
    """
    if not isinstance(data, dict):
        return {"project": "", "branchName": "", "description": ""}
    out: dict[str, str] = {}
    description = data.get("description")
    project = data.get("project")
    if isinstance(project, dict):
        work.rule("project-object")
        name = project.get("name")
        out["project"] = name if isinstance(name, str) else ""
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
        if value is None:
            out[key] = ""
        elif isinstance(value, str):
            out[key] = value
        else:
            work.problem(f"$.{key}", f"$.{key} is {_kind(value)}; expected a string")
            out[key] = ""
    return {k: out[k] for k in ("project", "branchName", "description")}


# ---------------------------------------------------------------------------------------------
# Putting it together


def _story(raw: object, jp: str, position: int, work: _Work) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        work.problem(jp, f"{jp} is {_kind(raw)}; expected a story object with a title")
        return None
    sid = _story_id(raw, jp, position, work)
    title = _title(raw, jp, work)
    criteria, criteria_key = _criteria(raw, jp, title, work)
    priority = _priority(raw.get("priority"), jp, work)
    story: dict[str, Any] = {
        "id": sid,
        "title": title,
        "description": _text_field(raw, "description", jp, work),
        "acceptanceCriteria": criteria,
    }
    if priority is not None:
        story["priority"] = priority
    story["passes"] = _passes(raw, jp, work)
    story["notes"] = _text_field(raw, "notes", jp, work)
    consumed = {*_CANONICAL_STORY_KEYS, criteria_key}
    if not isinstance(raw.get("passes"), bool):
        consumed.add("status")
    story.update((k, copy.deepcopy(v)) for k, v in raw.items() if k not in consumed)
    return story


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
        notes.append(f"integer ids made strings for {_plural(t['int-id'], 'story')}")
    if t["title-from-description"]:
        n = t["title-from-description"]
        notes.append(f"titles from descriptions for {_plural(n, 'story')}")
    for key in CRITERIA_KEYS[1:]:
        if t[f"criteria-key:{key}"]:
            notes.append(f"criteria from '{key}' for "
                         f"{_plural(t[f'criteria-key:{key}'], 'story')}")
    if t["string-criteria"]:
        notes.append(f"single-string criteria for {_plural(t['string-criteria'], 'story')}")
    if t["title-criteria"]:
        notes.append(f"criteria from titles for {_plural(t['title-criteria'], 'story')}")
    for prefix in ("priority:", "status:"):
        for key, n in t.items():
            if key.startswith(prefix):
                what = key[len(prefix) :]
                notes.append(f"{prefix[:-1]} {what}"
                             + (f" ({_plural(n, 'story')})" if n_stories > 1 else ""))
    for key in ("list-description", "list-notes"):
        if t[key]:
            notes.append(f"{key[5:]} lists joined for {_plural(t[key], 'story')}")
    return notes


def normalize(data: object) -> Normalized:
    """Turn the parsed data of a PRD file into the canonical shape.

    Args:
        data: what ``json.loads`` / ``yaml.safe_load`` returned for the file. Not mutated.

    Returns:
        A :class:`Normalized`: the canonical data (a new dict sharing nothing with
        ``data``; other story keys are kept), the dialect name
        (``"canonical"`` when no rule applied) and notes. Normalizing ``result.data``
        again gives the same data, dialect ``"canonical"`` and no notes.

    Raises:
        DialectError: the data matches no known dialect, or has no stories at all; its
            ``problems`` name each JSON path, what was found there and what was expected.
    """
    work = _Work()
    header = _header(data, work)
    found = _find_stories(data, work)
    stories = [s for pos, (jp, raw) in enumerate(found, start=1)
               if (s := _story(raw, jp, pos, work)) is not None]
    if work.problems:
        raise DialectError(work.problems)
    notes = [*work.notes, *_tally_notes(work, len(stories))]
    return Normalized(
        data={**header, "userStories": stories},
        dialect="+".join(work.rules) or "canonical",
        notes=tuple(notes),
    )
