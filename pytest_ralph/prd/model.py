"""The PRD as plain data: user stories and their acceptance criteria.

These dataclasses are what :func:`pytest_ralph.prd.load.load_prd` returns. They carry no
behaviour beyond ordering and naming, and import nothing from pytest, so the loop
controller, the Stop hook and the pytest layer all share them.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

#: Criterion kinds built into this version. ``"text"`` is a plain-string criterion; any other
#: kind is a plugin's (a check object with ``"kind": NAME``).
CRITERION_KINDS = ("run", "pytest", "exists", "file", "sql", "schema", "python", "text")


class DeferredLine:
    """A line number found when it is first read: loading a large PRD does not place every
    story and criterion in the file until something (a report, an item's location) asks.

    Args:
        find: called with ``key`` once, on first read; returns the 1-based line or ``None``.
        key: what to find, e.g. the JSON path ``$.userStories[2].acceptanceCriteria[0]``.

    Copying or pickling one gives the line itself.
    """

    __slots__ = ("_find", "_key")

    def __init__(self, find: Callable[[str], int | None], key: str) -> None:
        self._find = find
        self._key = key

    def resolve(self) -> int | None:
        """The line (calls ``find``)."""
        return self._find(self._key)

    def __reduce__(self) -> tuple[Callable[[int | None], int | None], tuple[int | None]]:
        return (_same, (self.resolve(),))


def _same(value: int | None) -> int | None:
    return value


class _LineField:
    """The ``line`` field of :class:`Criterion` and :class:`Story`: an ``int`` or ``None``,
    which may be given as a :class:`DeferredLine` and is then found on first read (and
    kept)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = "_" + name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> None: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> int | None: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> int | None:
        if obj is None:
            return None  # the field's default
        value = obj.__dict__[self._slot]
        if isinstance(value, DeferredLine):
            value = value.resolve()
            obj.__dict__[self._slot] = value
        return value  # type: ignore[no-any-return]

    def __set__(self, obj: object, value: int | DeferredLine | None) -> None:
        obj.__dict__[self._slot] = value


@dataclass(frozen=True)
class Criterion:
    """One acceptance criterion of a user story; it becomes one pytest item.

    Attributes:
        story_id: id of the story the criterion belongs to.
        index: 1-based position among all criteria of its story.
        id: ``AC<index>``, or the criterion's explicit ``id`` when it has one.
        text: the headline shown in reports: the string itself for a text
            criterion, ``text`` (or the command) for a check object.
        kind: ``"run"`` (shell command, passes on exit 0), ``"pytest"`` (node ids or paths),
            ``"exists"`` (a path), ``"file"`` (a file, optionally ``contains`` a regex),
            ``"sql"`` (a SQLite query and its expected result), ``"schema"`` (a file that
            must match a JSON Schema), ``"python"`` (``module:function``), ``"text"`` (no
            check: claimed), or the name of a kind a plugin or ``conftest.py`` provides (an
            object with ``"kind": NAME``; see ``pytest_ralph_make_check``).
        command: the shell command of a ``run`` criterion, else ``None``.
        timeout: seconds a ``run`` command may take, or ``None`` for the default.
        cwd: working directory of a ``run`` command, relative to the rootdir.
        json_path: where the criterion sits in the file, e.g.
            ``$.userStories[0].acceptanceCriteria[1]``.
        line: 1-based line of the criterion in the file, when known (``int`` or ``None``;
            may be given as a :class:`DeferredLine`).
        synthesized: ``True`` when the PRD had no criteria for the story and
            the story's title stands in for one.
        spec: the check object's fields other than ``id`` and ``text`` (``{}`` for text):
            e.g. ``{"pytest": ["tests/test_a.py"]}`` or ``{"file": "x", "contains": "re"}``.
    """

    story_id: str
    index: int
    id: str
    text: str
    kind: str
    command: str | None = None
    timeout: float | None = None
    cwd: str | None = None
    json_path: str = ""
    line: _LineField = _LineField()
    synthesized: bool = False
    spec: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        """``<story id>::<criterion id>``, the criterion's name in prompts and reports."""
        return f"{self.story_id}::{self.id}"


@dataclass(frozen=True)
class Story:
    """One user story of a PRD.

    Attributes:
        id: the story id (``US-001``); unique in its PRD.
        title: one-line summary.
        description: free text, possibly empty.
        criteria: the acceptance criteria, in file order.
        priority: lower values are worked first; ``None`` sorts after all others.
        passes: the story's own claim that it is done (``passes: true``).
        notes: free text, possibly empty.
        position: 0-based position in the file; breaks priority ties.
        json_path: where the story sits in the file, e.g. ``$.userStories[2]``.
        line: 1-based line of the story in the file, when known (``int`` or ``None``;
            may be given as a :class:`DeferredLine`).
        done_key: what the story's claim was read from: ``"passes"``, ``"status"`` (a
            dialect: ``status: done`` and the like), or ``""`` when it has neither.
        depends_on: the ids of the stories this one depends on (``dependsOn``), in file
            order; ``()`` when it depends on none. Loading checks only their form; that each
            names another story, and that they make no cycle, is checked by the parallel
            run (:func:`pytest_ralph.parallel.plan.check`).
        depends_key: the key ``depends_on`` was read from: ``"dependsOn"``, or a dialect's
            ``"dependencies"`` / ``"depends_on"``.
    """

    id: str
    title: str
    description: str
    criteria: tuple[Criterion, ...]
    priority: int | None
    passes: bool
    notes: str
    position: int
    json_path: str = ""
    line: _LineField = _LineField()
    done_key: str = "passes"
    depends_on: tuple[str, ...] = ()
    depends_key: str = "dependsOn"

    @property
    def order_key(self) -> tuple[int, int, int]:
        """Sort key: lowest priority value first, stories without one last, file order on ties."""
        if self.priority is None:
            return (1, 0, self.position)
        return (0, self.priority, self.position)


@dataclass(frozen=True)
class PRD:
    """A loaded and validated PRD.

    Attributes:
        path: the file it was loaded from (absolute).
        format: ``"json"``, ``"jsonc"`` or ``"yaml"``.
        project: the ``project`` field, or ``""``.
        branch_name: the ``branchName`` field, or ``""``.
        description: the ``description`` field, or ``""``.
        stories: the user stories in file order.
        dialect: ``"canonical"``, or the dialect rules applied on load joined by ``+``
            (``"tasks+steps+status"``; see :mod:`pytest_ralph.prd.dialects`).
        dialect_notes: one line per thing the loader renamed or synthesized
            (``"ids synthesized from position: S1..S4"``); empty for a canonical file.
        stories_path: the JSON path the stories were read from (``$.userStories``,
            ``$.tasks``, ``$.phases[].stories``, ``$``...).
    """

    path: Path
    format: str
    project: str
    branch_name: str
    description: str
    stories: tuple[Story, ...]
    dialect: str = "canonical"
    dialect_notes: tuple[str, ...] = ()
    stories_path: str = "$.userStories"

    def ordered_stories(self) -> list[Story]:
        """The stories in the order of work (see :attr:`Story.order_key`)."""
        return sorted(self.stories, key=lambda s: s.order_key)

    def criteria(self) -> list[Criterion]:
        """Every criterion of every story, in file order."""
        return [c for s in self.stories for c in s.criteria]

    def story(self, story_id: str) -> Story | None:
        """The story with this id, or ``None``."""
        for s in self.stories:
            if s.id == story_id:
                return s
        return None

    @property
    def topic(self) -> str:
        """A file-name-safe slug of the project, else the branch, else the file stem."""
        return slugify(self.project or self.branch_name or self.path.stem) or "prd"


def slugify(text: str) -> str:
    """Lower-case ``text`` with accents removed (``é`` -> ``e``), and keep ``[a-z0-9]`` runs
    joined by ``-`` (at most 60 characters)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:60].strip("-")


def fold_text(text: str) -> str:
    """A criterion text as ini ``ralph_checks`` matches it: case-folded, runs of whitespace
    made one space, ends stripped."""
    return " ".join(text.casefold().split())


def default_text(kind: str, c: dict[str, Any]) -> str:
    """The headline of a check object that has no ``text``: what :attr:`Criterion.text` is
    then, e.g. ``"pytest tests/test_login.py"`` or ``"out.txt contains /ok/"``.

    Args:
        kind: the criterion's kind (:data:`CRITERION_KINDS`, or a plugin's kind name).
        c: the check object as the normalized PRD holds it (its ``id``/``text`` ignored).
    """
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
