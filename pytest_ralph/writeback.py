"""Write-back: after each check phase, set each story's ``passes`` to what the checks found,
and keep one line of its ``notes`` saying so.

A story passes when all of its criteria passed; a story whose criteria are all
claimed therefore keeps its own claim. The file is edited, never re-serialized: the
``true``/``false`` word of a changed story is replaced, and a JSON or JSONC story
without ``passes`` gets ``, "passes": true`` inserted after its id. Formatting,
comments, escapes and line endings survive. A YAML story without ``passes`` gets its
verdict in a sidecar file; sidecars are informational and never feed the claimed rule.

The loop owns exactly one line of a story's ``notes``: the one starting with
:data:`NOTE_PREFIX` (see :func:`story_notes`). In JSON and JSONC, writing a note replaces
that line of the ``notes`` string, or appends it on a new line, and leaves every other
character of the string literal (escapes included) as it was; a story without ``notes``
gets ``, "notes": "<note>"`` inserted after its ``passes``. YAML notes, and ``notes`` that
are not a string, are never edited: the note goes to the sidecar instead.

This module does not import pytest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .model import PRD
from .prd import PRD_FORMATS, YAML_LOADER, Positions, strip_jsonc
from .results import CheckResults, CriterionResult, atomic_write_text

#: The start of the one line of a story's ``notes`` that the loop owns.
NOTE_PREFIX = "pytest-ralph: "

#: The longest note :func:`story_notes` writes, in characters (prefix included).
NOTE_MAX_CHARS = 200


def _checked_stories(results: CheckResults,
                     prd: PRD | None) -> dict[str, list[CriterionResult]]:
    """``results.by_story()``, without the stories that ``prd`` says were checked in part."""
    out: dict[str, list[CriterionResult]] = {}
    for sid, crits in results.by_story().items():
        if prd is not None:
            story = prd.story(sid)
            checked = {c.criterion for c in crits if c.kind != "missing"}
            if story is None or not {c.id for c in story.criteria} <= checked:
                continue
        out[sid] = crits
    return out


def story_verdicts(results: CheckResults, prd: PRD | None = None) -> dict[str, bool]:
    """Story id -> whether every criterion of the story passed in ``results``.

    With ``prd``, only stories whose every criterion was actually checked get a verdict
    (``-k`` may have checked part of a story: that says nothing about the rest).
    """
    return {sid: all(c.passed for c in crits)
            for sid, crits in _checked_stories(results, prd).items()}


def story_notes(results: CheckResults, prd: PRD | None = None) -> dict[str, str]:
    """Story id -> the loop's one-line note about the story's criteria in ``results``.

    The note depends only on the outcomes (no time, no duration), so an unchanged result
    gives an unchanged note and write-back leaves the file alone. Its forms::

        pytest-ralph: all 3 criteria pass
        pytest-ralph: the 1 criterion passes (1 claimed, not verified)
        pytest-ralph: 1/3 criteria pass (1 claimed, not verified); failing: AC2, AC3

    Failing criteria are named by criterion id, in collection order; a note longer than
    :data:`NOTE_MAX_CHARS` lists the ids that fit and ``+N more``. "Claimed" counts the
    passing criteria decided by the story's claim rather than by a check.

    Args:
        results: one check phase.
        prd: as for :func:`story_verdicts`: with it, only stories whose every criterion
            was checked get a note.

    Returns:
        ``{story id: note}``; every note starts with :data:`NOTE_PREFIX` and is one line.
    """
    return {sid: _note(crits) for sid, crits in _checked_stories(results, prd).items()}


def _note(crits: list[CriterionResult]) -> str:
    n = len(crits)
    passed = [c for c in crits if c.passed]
    claimed = sum(c.claimed for c in passed)
    claim = f" ({claimed} claimed, not verified)" if claimed else ""
    if len(passed) == n:
        head = "the 1 criterion passes" if n == 1 else f"all {n} criteria pass"
        return f"{NOTE_PREFIX}{head}{claim}"
    head = f"{NOTE_PREFIX}{len(passed)}/{n} criteria pass{claim}; failing: "
    failing = [c.criterion for c in crits if not c.passed]
    return head + _bounded_list(failing, NOTE_MAX_CHARS - len(head))


def _bounded_list(ids: list[str], room: int) -> str:
    """``"A, B, +3 more"``: as many of ``ids`` as fit in ``room`` characters."""
    shown: list[str] = []
    for i, cid in enumerate(ids):
        rest = len(ids) - i - 1
        if len(", ".join([*shown, cid]) + (f", +{rest} more" if rest else "")) > room:
            break
        shown.append(cid)
    rest = len(ids) - len(shown)
    if not shown:  # not even one id fits
        return f"{rest} criteri{'on' if rest == 1 else 'a'}"
    return ", ".join(shown) + (f", +{rest} more" if rest else "")


def write_back(prd_path: Path, verdicts: Mapping[str, bool], sidecar: Path, *,
               notes: Mapping[str, str] | None = None) -> list[str]:
    """Set ``passes`` of the stories in ``verdicts`` and the loop's line of their ``notes``.

    Only the ``passes`` literal of a changed story is replaced, or for a JSON/JSONC story
    without one, ``, "passes": X`` is inserted after its id: the rest of the file stays byte
    for byte. A YAML story without ``passes`` gets its verdict in the sidecar instead.

    A note (see :func:`story_notes`) is the one line of ``notes`` that starts with
    :data:`NOTE_PREFIX` (the first one, if a human copied it; later ones are kept as
    text). In a JSON/JSONC ``notes`` string, that line is replaced, or else
    the note is appended on a new line (``\\n``, or ``\\r\\n`` when the string uses those), or
    is the whole value of an empty string; every other character of the literal is kept as
    written. A story without ``notes`` gets ``, "notes": "<note>"`` inserted after its
    ``passes`` (or its id). YAML stories and ``notes`` that are not a string (``null``, a
    number, a list...) are not edited: their note goes to the sidecar. All edits of the PRD
    are made in one atomic write (temporary file + rename).

    Args:
        prd_path: the PRD file.
        verdicts: story id -> passes.
        sidecar: JSON file for what cannot be written into the PRD:
            ``{"prd": path, "passes": {story id: bool}, "notes": {story id: str}}``
            (``"notes"`` only when there is one; a sidecar without it is read as none). The
            sidecar keeps the entries of stories not written this time; one written for
            another PRD is replaced.
        notes: story id -> note. A note is made one line (line breaks become spaces) and
            gets :data:`NOTE_PREFIX` in front when it does not start with it.

    Returns:
        The ids of the stories whose ``passes`` or note changed (in the file or the
        sidecar), each once, in file order; a story whose only change is its note is
        listed. Nothing is written when nothing changes (the file keeps its mtime), or when
        the file cannot be read or parsed, or is not a canonical PRD any more (the check
        phase reports that as a failure).

    Raises:
        OSError: the PRD or the sidecar cannot be written.
    """
    notes = {sid: _one_line(note) for sid, note in (notes or {}).items()}
    fmt = PRD_FORMATS.get(prd_path.suffix.lower())
    try:
        raw = prd_path.read_bytes()
        bom = raw.startswith(b"\xef\xbb\xbf")
        text = raw[3:].decode("utf-8") if bom else raw.decode("utf-8")
        data = _load(text, fmt)
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return []
    stories = data.get("userStories") if isinstance(data, dict) else None
    if not isinstance(stories, list):
        return []
    json_like = fmt in ("json", "jsonc")
    positions = Positions(text, fmt or "json")
    line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    # (start, end, replacement, sequence): at one position, a later edit ends up after
    edits: list[tuple[int, int, str, int]] = []
    changed: set[str] = set()
    side_passes: dict[str, bool] = {}
    side_notes: dict[str, str] = {}
    order: list[str] = []
    for i, story in enumerate(stories):
        sid = story.get("id") if isinstance(story, dict) else None
        if not isinstance(sid, str) or (sid not in verdicts and sid not in notes):
            continue
        order.append(sid)
        sp = f"$.userStories[{i}]"
        span = _literal_span(text, line_starts, positions.at(f"{sp}.passes"))
        if not isinstance(story.get("passes"), bool):
            span = None
        after_id = (_string_end(text, line_starts, positions.at(f"{sp}.id"))
                    if json_like else None)
        if sid in verdicts:
            want = verdicts[sid]
            word = "true" if want else "false"
            if span is not None:
                if story["passes"] is not want:
                    edits.append((*span, word, len(edits)))
                    changed.add(sid)
            elif story.get("passes") is not want:
                if "passes" not in story and after_id is not None:
                    # insert `, "passes": X` right after the id
                    edits.append((after_id, after_id, f', "passes": {word}', len(edits)))
                    changed.add(sid)
                else:
                    side_passes[sid] = want
        if sid in notes:
            anchor = span[1] if span is not None else after_id
            place = (_note_edit(text, line_starts, positions, sp, story, notes[sid], anchor)
                     if json_like else None)
            if place is None:
                side_notes[sid] = notes[sid]
            elif text[place[0]:place[1]] != place[2]:
                edits.append((*place, len(edits)))
                changed.add(sid)
    out = text
    for start, end, word, _ in sorted(edits, key=lambda e: (e[0], e[1], e[3]), reverse=True):
        out = out[:start] + word + out[end:]
    if side_passes or side_notes:
        changed.update(_write_sidecar(prd_path, side_passes, side_notes, sidecar))
    if out != text:
        atomic_write_text(prd_path, ("\ufeff" if bom else "") + out)
    return [sid for sid in dict.fromkeys(order) if sid in changed]


def _note_edit(text: str, line_starts: list[int], positions: Positions, sp: str,
               story: dict[str, Any], note: str,
               anchor: int | None) -> tuple[int, int, str] | None:
    """The edit (start, end, replacement) of JSON/JSONC ``text`` that makes ``note`` the
    loop's line of the ``notes`` of the story at JSON path ``sp``; a no-op edit when it
    already is. ``None`` when the note cannot go into the file: ``notes`` is not a string,
    its literal cannot be found (or its key is repeated), or there is no ``notes`` and no
    ``anchor`` (the index after ``"passes": X`` or the id) to insert it at.
    """
    if "notes" not in story:
        if anchor is None:
            return None
        return anchor, anchor, f', "notes": {json.dumps(note, ensure_ascii=False)}'
    current = story["notes"]
    if not isinstance(current, str):
        return None
    span = _string_span(text, line_starts, positions.at(f"{sp}.notes"))
    if span is None or f"{sp}.notes" in {jp for jp, _ in positions.duplicate_keys()}:
        return None
    start, end = span[0] + 1, span[1] - 1  # inside the quotes
    if _decode(text[start:end]) != current:  # not the value json.loads saw
        return None
    inner = _merge_note(text[start:end], note)
    return start, end, text[start:end] if _decode(inner) == current else inner


def _one_line(note: str) -> str:
    """``note`` on one line (any line break becomes a space), starting with the prefix."""
    note = " ".join(note.splitlines())
    return note if note.startswith(NOTE_PREFIX) else NOTE_PREFIX + note


_BOOL_LITERAL = re.compile(r"(?i:true|false|yes|no|on|off)\b")

#: One character of the inside of a JSON string literal, as written: an escape or a character.
_STRING_UNIT = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|[^\\]", re.DOTALL)

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}


def _unit_value(unit: str) -> str:
    """The character one :data:`_STRING_UNIT` stands for."""
    if unit.startswith("\\u"):
        return chr(int(unit[2:], 16))
    if unit.startswith("\\"):
        return _ESCAPES.get(unit[1:], unit[1:])
    return unit


def _decode(inner: str) -> str:
    """The value of a JSON string literal from its inside (the text between the quotes).

    Raises:
        ValueError: ``inner`` is not the inside of a JSON string literal.
    """
    value: str = json.loads(f'"{inner}"')
    return value


def _merge_note(inner: str, note: str) -> str:
    """The inside of a JSON string literal with ``note`` as its loop-owned line.

    ``inner`` is the text between the quotes, as written. The first line (of the value)
    starting with :data:`NOTE_PREFIX` is replaced, up to and excluding a final ``\\r``;
    without one, ``note`` is appended on a new line, or is the whole value when the value
    is empty or ends with a line break. All other units of ``inner`` stay as written.
    """
    units = _STRING_UNIT.findall(inner)
    values = [_unit_value(u) for u in units]
    escaped = json.dumps(note, ensure_ascii=False)[1:-1]
    start = 0
    for end in [*(k for k, v in enumerate(values) if v == "\n"), len(units)]:
        if "".join(values[start:end]).startswith(NOTE_PREFIX):
            if end > start and values[end - 1] == "\r":
                end -= 1
            return "".join(units[:start]) + escaped + "".join(units[end:])
        start = end + 1
    value = "".join(values)
    if not value or value.endswith("\n"):
        return inner + escaped
    return inner + ("\\r\\n" if "\r\n" in value else "\\n") + escaped


def _literal_span(text: str, line_starts: list[int],
                  pos: tuple[int | None, int | None]) -> tuple[int, int] | None:
    """(start, end) of the boolean literal at 1-based (line, column), or ``None``."""
    line, column = pos
    if line is None or column is None or line > len(line_starts):
        return None
    start = line_starts[line - 1] + column - 1
    m = _BOOL_LITERAL.match(text, start)
    return (start, m.end()) if m else None


def _string_span(text: str, line_starts: list[int],
                 pos: tuple[int | None, int | None]) -> tuple[int, int] | None:
    """(start, end) of the JSON string literal, quotes included, at 1-based (line, column),
    or ``None`` when there is none."""
    line, column = pos
    if line is None or column is None or line > len(line_starts):
        return None
    start = line_starts[line - 1] + column - 1
    if start >= len(text) or text[start] != '"':
        return None
    try:
        end: int = json.decoder.scanstring(text, start + 1)[1]  # type: ignore[attr-defined]
        return start, end
    except ValueError:
        return None


def _string_end(text: str, line_starts: list[int],
                pos: tuple[int | None, int | None]) -> int | None:
    """The index just after the JSON string literal at 1-based (line, column), or ``None``."""
    span = _string_span(text, line_starts, pos)
    return span[1] if span else None


def _load(text: str, fmt: str | None) -> Any:
    if fmt == "yaml":
        return yaml.load(text, Loader=YAML_LOADER)
    return json.loads(strip_jsonc(text) if fmt == "jsonc" else text)


def _write_sidecar(prd_path: Path, passes: Mapping[str, bool], notes: Mapping[str, str],
                   sidecar: Path) -> list[str]:
    """Merge ``passes`` and ``notes`` into the sidecar; return the ids whose entry changed.

    A sidecar written before notes existed (no ``"notes"``) reads as having none. The file
    is written only when an entry changes.
    """
    cur_passes: dict[str, Any] = {}
    cur_notes: dict[str, Any] = {}
    try:
        loaded = json.loads(sidecar.read_text("utf-8"))
        if isinstance(loaded, dict) and loaded.get("prd") == str(prd_path):
            if isinstance(loaded.get("passes"), dict):
                cur_passes = dict(loaded["passes"])
            if isinstance(loaded.get("notes"), dict):
                cur_notes = dict(loaded["notes"])
    except (OSError, ValueError):
        pass
    changed = [sid for sid, v in passes.items() if cur_passes.get(sid) is not v]
    changed += [sid for sid, v in notes.items() if cur_notes.get(sid) != v and sid not in changed]
    if changed:
        cur_passes.update(passes)
        cur_notes.update(notes)
        data: dict[str, Any] = {"prd": str(prd_path), "passes": cur_passes}
        if cur_notes:
            data["notes"] = cur_notes
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sidecar, json.dumps(data, indent=1, ensure_ascii=False))
    return changed
