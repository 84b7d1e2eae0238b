"""Which stories of a PRD may run at the same time: the plan of a parallel run.

A story says what it waits for with ``dependsOn``, a list of story ids (a dialect's
``dependencies`` or ``depends_on`` is read as the same key; see
:mod:`pytest_ralph.prd.dialects`). The rule:

- a story may start once every story it depends on is *merged* (its criteria verified on
  the integration branch); a story with no ``dependsOn`` is independent and may start at
  once;
- of the stories that may start, the lowest ``priority`` value goes first, stories without
  a priority last, file order breaking ties (:attr:`pytest_ralph.prd.model.Story.order_key`);
- to say "these must be sequential", chain them: ``US-002`` with ``"dependsOn": ["US-001"]``,
  ``US-003`` with ``"dependsOn": ["US-002"]``. Nothing else orders stories in a parallel run:
  two stories without a dependency between them may run at the same time, whatever their
  priorities.

:func:`check` refuses the dependencies no run could follow (an unknown id, a story depending
on itself, a cycle) in the PRD error style; loading a PRD checks only their form, so that a
plain gate (``pytest prd.json``) never fails over them. :func:`ready` is what a parallel
controller asks at each turn, :func:`waves` the whole plan at once (what ``pytest
--ralph-plan`` prints, :func:`matrix`), :func:`stuck` the stories a blocked one holds back,
:func:`branch_names` the lanes' branches.

Pure: no I/O, no pytest; it imports only :mod:`pytest_ralph.prd`.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from ..prd.errors import PRDError, Problem
from ..prd.model import PRD, Story
from .names import BRANCH_PREFIX, lane_key

__all__ = ["BRANCH_PREFIX", "branch_name", "branch_names", "check", "dependency_problems",
           "matrix", "ready", "stuck", "waves"]

#: How many story ids a message about an unknown id lists before "... and N more".
LISTED_IDS = 10


# ---------------------------------------------------------------------------------------------
# Checking the dependencies


def _where(story: Story) -> str:
    """The JSON path of a story's dependency list in the file (``$.tasks[2].depends_on``)."""
    return f"{story.json_path}.{story.depends_key}"


def _known(ids: list[str]) -> str:
    shown = ", ".join(ids[:LISTED_IDS])
    more = len(ids) - LISTED_IDS
    return f"{shown}, ... and {more} more" if more > 0 else shown


def dependency_problems(prd: PRD) -> list[Problem]:
    """What makes the dependencies of ``prd`` impossible to follow, in the file order of the
    stories they are reported at: an id that names no story of the PRD (the known ids listed,
    shortened, with a close match as the hint), a story that depends on itself, and each
    cycle (one problem per group of stories that wait on each other, at its first story in
    the file, naming the cycle: ``US-001 -> US-003 -> US-001``). Every problem has the
    story's line.

    Returns:
        The problems; ``[]`` when every story can start once the ones before it are merged.
    """
    ids = [s.id for s in prd.stories]
    known = set(ids)
    problems: list[tuple[int, Problem]] = []
    for story in prd.stories:
        for dep in dict.fromkeys(story.depends_on):
            if dep == story.id:
                problems.append((story.position, Problem(
                    _where(story), f"story {story.id!r} depends on itself; expected the ids of "
                    "other stories", story.line,
                    hint=f"remove {story.id!r} from its {story.depends_key}")))
            elif dep not in known:
                near = difflib.get_close_matches(dep, ids, n=1, cutoff=0.8)
                problems.append((story.position, Problem(
                    _where(story), f"story {story.id!r} depends on {dep!r}, which is no story "
                    f"of this PRD; expected one of its story ids ({_known(ids)})", story.line,
                    hint=(f"did you mean {near[0]!r}? " if near else "")
                    + "fix the id, or remove it (a parallel run waits only for stories of "
                      "its own PRD)")))
    problems += _cycle_problems(prd)
    return [p for _, p in sorted(problems, key=lambda item: item[0])]


def _cycle_problems(prd: PRD) -> list[tuple[int, Problem]]:
    """One problem per strongly connected group of two or more stories (a self-dependency
    is reported by :func:`dependency_problems` itself)."""
    by_id = {s.id: s for s in prd.stories}
    edges = {s.id: [d for d in dict.fromkeys(s.depends_on) if d in by_id and d != s.id]
             for s in prd.stories}
    problems: list[tuple[int, Problem]] = []
    for group in _components(list(by_id), edges):
        if len(group) < 2:
            continue
        first = min(group, key=lambda sid: by_id[sid].position)
        cycle = _cycle_from(first, edges, set(group))
        story = by_id[first]
        problems.append((story.position, Problem(
            _where(story), "dependency cycle: " + " -> ".join(cycle) + "; expected "
            "dependencies that end (no story of a cycle could ever start)", story.line,
            hint="remove one of these dependencies"
            + (f" ({len(group)} stories wait on each other: "
               f"{_known(sorted(group, key=lambda sid: by_id[sid].position))})"
               if len(group) > len(cycle) - 1 else ""))))
    return problems


def _components(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of the graph (Tarjan's algorithm, without
    recursion: a PRD may hold thousands of stories in one chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succ = edges[node]
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # back in the parent: carry the low link up
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                out.append(group)
    return out


def _cycle_from(start: str, edges: dict[str, list[str]], group: set[str]) -> list[str]:
    """A shortest cycle through ``start`` inside ``group`` (breadth first), as ids from
    ``start`` back to ``start``."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for dep in edges[node]:
                if dep not in group:
                    continue
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if dep not in came:
                    came[dep] = node
                    nxt.append(dep)
        frontier = nxt
    return [start, start]  # not reached: every member of a group lies on a cycle


def check(prd: PRD) -> None:
    """Refuse dependencies no run could follow (:func:`dependency_problems`).

    Raises:
        PRDError: naming the PRD file and, per problem, the line, the JSON path of the story's
            dependency list, what was expected and how to fix it.
    """
    problems = dependency_problems(prd)
    if problems:
        raise PRDError(prd.path, problems)


# ---------------------------------------------------------------------------------------------
# The plan


def ready(prd: PRD, merged: Collection[str] = (), running: Collection[str] = (),
          blocked: Collection[str] = ()) -> list[Story]:
    """The stories that may start now, in the order of work (lowest priority value first,
    then file order): neither merged, running nor blocked, and every story they depend on
    merged.

    Args:
        prd: the PRD.
        merged: ids of the stories whose work is merged (verified on the integration branch).
        running: ids of the stories whose lane runs.
        blocked: ids of the stories given up on (never merged); those that depend on them
            are never ready (see :func:`stuck`).

    Raises:
        PRDError: the dependencies cannot be followed (:func:`check`).
    """
    check(prd)
    taken = {*merged, *running, *blocked}
    done = set(merged)
    return [s for s in prd.ordered_stories()
            if s.id not in taken and all(d in done for d in s.depends_on)]


def waves(prd: PRD, done: Collection[str] = ()) -> list[list[Story]]:
    """The stories not in ``done`` in waves: wave 0 holds those that depend on nothing left
    to do, wave ``n`` those whose last dependency is in wave ``n - 1``. Each wave is in the
    order of work. Running the waves one after another, each one's stories side by side,
    follows every dependency; :func:`ready` starts a story sooner when its own dependencies
    are merged before the rest of the wave before it.

    Args:
        prd: the PRD.
        done: ids of stories already complete (merged); a dependency on one is met.

    Returns:
        The waves, each a non-empty list; ``[]`` when every story is done.

    Raises:
        PRDError: the dependencies cannot be followed (:func:`check`).
    """
    check(prd)
    finished = set(done)
    left = [s for s in prd.stories if s.id not in finished]
    by_id = {s.id: s for s in left}
    level: dict[str, int] = {}
    for story in _topological(left, by_id):
        deps = [level[d] for d in story.depends_on if d in by_id]
        level[story.id] = max(deps) + 1 if deps else 0
    out: list[list[Story]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for story in sorted(left, key=lambda s: s.order_key):
        out[level[story.id]].append(story)
    return out


def _topological(stories: list[Story], by_id: dict[str, Story]) -> list[Story]:
    """``stories`` with each after those of them it depends on (the graph has no cycle)."""
    placed: set[str] = set()
    out: list[Story] = []
    for root in stories:
        work = [(root, iter(root.depends_on))]
        while work:
            story, deps = work[-1]
            dep = next((by_id[d] for d in deps if d in by_id and d not in placed), None)
            if dep is not None:
                work.append((dep, iter(dep.depends_on)))
                continue
            work.pop()
            if story.id not in placed:
                placed.add(story.id)
                out.append(story)
    return out


def stuck(prd: PRD, blocked: Collection[str]) -> dict[str, str]:
    """The stories that can never start because a story they depend on, directly or through
    others, is blocked: story id -> the blocked story it waits on (the first found). A
    parallel run reports them with the blocked story instead of dropping them.

    Raises:
        PRDError: the dependencies cannot be followed (:func:`check`).
    """
    check(prd)
    by_id = {s.id: s for s in prd.stories}
    cause: dict[str, str] = {}
    for story in _topological(list(prd.stories), by_id):
        if story.id in blocked:
            continue
        for dep in story.depends_on:
            if dep in blocked:
                cause[story.id] = dep
                break
            if dep in cause:
                cause[story.id] = cause[dep]
                break
    return {s.id: cause[s.id] for s in prd.stories if s.id in cause}


# ---------------------------------------------------------------------------------------------
# Branches and the CI matrix


def branch_name(story_id: str) -> str:
    """The branch of a story's lane in a CI matrix: ``ralph/<key>``, ``key`` being
    :func:`pytest_ralph.parallel.names.lane_key` of ``story_id`` (a valid ref name; an id that
    had to change gets a short hash, so that ``US 1`` and ``US-1`` differ). ``US-001`` gives
    ``ralph/US-001``. Deterministic; :func:`branch_names` makes a PRD's branches unique."""
    return f"{BRANCH_PREFIX}/{lane_key(story_id)}"


def branch_names(ids: Iterable[str]) -> dict[str, str]:
    """:func:`branch_name` of each id, unique: a name already given (two ids whose keys and
    hashes agree) gets ``-2``, ``-3``... in the order of ``ids``."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for sid in ids:
        name = base = branch_name(sid)
        n = 1
        while name in used:
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        out[sid] = name
    return out


def matrix(prd: PRD, rootdir: Path) -> dict[str, Any]:
    """The plan of ``prd`` as a GitHub Actions matrix (what ``pytest --ralph-plan`` prints)::

        {"prd": "prd.json",
         "waves": [["US-001", "US-002"], ["US-003"]],
         "include": [{"story": "US-001", "title": "...", "branch": "ralph/US-001",
                      "wave": 0, "dependsOn": []}, ...]}

    Every story is planned: ``passes: true`` in the file is the story's claim, not a
    verification, and only a check phase says which criteria pass. ``include`` is in wave
    order, each wave in the order of work.

    Args:
        prd: the PRD.
        rootdir: ``prd`` is named relative to it (POSIX separators); absolute when the PRD
            is outside it.

    Raises:
        PRDError: the dependencies cannot be followed (:func:`check`).
    """
    planned = waves(prd)
    branches = branch_names(s.id for s in prd.stories)
    try:
        where = prd.path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        where = prd.path.as_posix()
    return {
        "prd": where,
        "waves": [[s.id for s in wave] for wave in planned],
        "include": [{"story": s.id, "title": s.title, "branch": branches[s.id], "wave": n,
                     "dependsOn": list(s.depends_on)}
                    for n, wave in enumerate(planned) for s in wave],
    }
