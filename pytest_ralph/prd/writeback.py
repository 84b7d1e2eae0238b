"""Write-back: after each check phase, set each story's ``passes`` to what the checks found,
and keep one line of its ``notes`` saying so.

A story passes when all of its criteria passed; a story whose criteria are all
claimed therefore keeps its own claim. The file is edited, never re-serialized: every
byte that is not part of an edit (comments, key order, escapes, non-ASCII text, a BOM,
CRLF line endings, a missing final newline) stays as it was. Sidecar files are
informational and never feed the claimed rule.

Every PRD dialect is written (see :mod:`pytest_ralph.prd.dialects`). The file is parsed and
normalized; a verdict or note is matched against the *normalized* story ids (``S3`` for
a story without an id, ``"1"`` for ``"id": 1``), and each story's fields are found in the
file through its :class:`~pytest_ralph.prd.dialects.Origin` (``tasks[2]``,
``phases[1].stories[0]``, ``[3]`` of a top-level array...). The rules, per story:

- ``passes``: a story with a boolean ``passes`` gets that ``true``/``false`` word replaced
  (JSON, JSONC and YAML). A story whose done-ness comes from ``status`` keeps its
  ``status`` untouched and gets no ``passes`` (it would shadow the status): its verdict
  goes to the sidecar. A JSON or JSONC story with neither gets ``, "passes": X`` inserted
  right after its id literal (a string or an integer); one without an id (synthesized),
  and a YAML one, gets its verdict in the sidecar. Any other ``passes`` (``null``, a
  number, a repeated key) is left alone: sidecar.
- ``notes``: the loop owns exactly one line of a story's ``notes``: the one starting with
  :data:`NOTE_PREFIX` (see :func:`story_notes`). In JSON and JSONC, writing a note replaces
  that line of the ``notes`` string, or appends it on a new line, and leaves every other
  character of the string literal (escapes included) as it was; a story without ``notes``
  gets ``, "notes": "<note>"`` inserted after its ``passes`` word (or, without one, after
  its id literal; without either: sidecar). YAML notes, and ``notes`` that are not a string
  (``null``, a number, the list of strings of some dialects...), are never edited: the
  note goes to the sidecar instead.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..util.files import atomic_write_text, read_bytes
from .dialects import DialectError, Origin, json_path, normalize
from .load import MAX_PRD_BYTES, PRD_FORMATS
from .positions import Positions, strip_jsonc
from .yamlload import YAML_LOADER

#: Largest PRD write-back reads, in bytes (the loader's default limit is lower; a larger
#: file, which the loader refused anyway, is left alone).
WRITE_BACK_MAX_BYTES = max(MAX_PRD_BYTES, 256 * 1024 * 1024)

#: Largest sidecar (``passes.json``) read, in bytes; a larger one is replaced.
SIDECAR_MAX_BYTES = 64 * 1024 * 1024

#: The start of the one line of a story's ``notes`` that the loop owns.
NOTE_PREFIX = "pytest-ralph: "

def write_back(prd_path: Path, verdicts: Mapping[str, bool], sidecar: Path, *,
               notes: Mapping[str, str] | None = None,
               max_bytes: int = WRITE_BACK_MAX_BYTES) -> list[str]:
    """Set ``passes`` of the stories in ``verdicts`` and the loop's line of their ``notes``.

    Works on every PRD dialect. The file is parsed and normalized
    (:func:`pytest_ralph.prd.dialects.normalize`); ``verdicts`` and ``notes`` are keyed by the
    normalized story ids (``"S3"`` for the third story, which has no id; ``"1"`` for
    ``"id": 1``), and each story's fields are found in the file through its origin. Per
    story:

    - a boolean ``passes``: its ``true``/``false`` word is replaced (JSON, JSONC, YAML);
    - done-ness from ``status``: ``status`` is not touched and no ``passes`` is added (it
      would shadow the status); the verdict goes to the sidecar;
    - neither ``passes`` nor ``status``, in JSON/JSONC, with an id written in the file (a
      string or an integer literal): ``, "passes": X`` is inserted right after the id;
      without an id (synthesized), in YAML, or with any other ``passes`` (``null``, a
      number, a repeated key): the sidecar.

    A note (see :func:`story_notes`) is the one line of ``notes`` that starts with
    :data:`NOTE_PREFIX` (the first one, if a human copied it; later ones are kept as
    text). In a JSON/JSONC ``notes`` string, that line is replaced, or else
    the note is appended on a new line (``\\n``, or ``\\r\\n`` when the string uses those), or
    is the whole value of an empty string; every other character of the literal is kept as
    written. A story without ``notes`` gets ``, "notes": "<note>"`` inserted after its
    ``passes`` word (or after its id literal; with neither, the sidecar). YAML stories and
    ``notes`` that are not a string (``null``, a number, a list of strings...) are not
    edited: their note goes to the sidecar. Every other byte of the file stays as it was
    (comments, key order, escapes, BOM, CRLF, a missing final newline); all edits of the
    PRD are made in one write that keeps the file's mode, owner and hard links and never
    leaves it half written (:func:`write_keeping_file`).

    Stories whose id is not a string or an integer in the file (a value the schema
    reports) are not matched.

    Args:
        prd_path: the PRD file.
        verdicts: normalized story id -> passes.
        sidecar: JSON file for what cannot be written into the PRD:
            ``{"prd": path, "passes": {story id: bool}, "notes": {story id: str}}``
            (normalized ids; ``"notes"`` only when there is one; a sidecar without it is
            read as none). The sidecar keeps the entries of stories not written this time;
            one written for another PRD is replaced.
        notes: normalized story id -> note. A note is made one line (line breaks become
            spaces) and gets :data:`NOTE_PREFIX` in front when it does not start with it.
        max_bytes: a PRD larger than this many bytes is left alone (as is anything but a
            regular file: a FIFO, a device).

    Returns:
        The ids of the stories whose ``passes`` or note changed (in the file or the
        sidecar), each once, in file order; a story whose only change is its note is
        listed. Nothing is written when nothing changes (the file keeps its mtime), or when
        the file cannot be read or parsed, or its shape is no known dialect (the check
        phase reports that as a failure).

    Raises:
        OSError: the PRD or the sidecar cannot be written.
    """
    notes = {sid: _one_line(note) for sid, note in (notes or {}).items()}
    fmt = PRD_FORMATS.get(prd_path.suffix.lower())
    try:
        raw = read_bytes(prd_path, max_bytes)  # never a FIFO or a device
        bom = raw.startswith(b"\xef\xbb\xbf")
        text = raw[3:].decode("utf-8") if bom else raw.decode("utf-8")
        stories = _stories(_load(text, fmt))
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return []
    if stories is None:
        return []
    plan = _Plan(text, fmt or "json", json_like=fmt in ("json", "jsonc"))
    order: list[str] = []
    for story in stories:
        if story.sid in verdicts or story.sid in notes:
            order.append(story.sid)
            _plan_story(plan, story, verdicts.get(story.sid), notes.get(story.sid))
    out = plan.apply()
    if plan.side_passes or plan.side_notes:
        plan.changed.update(_write_sidecar(prd_path, plan.side_passes, plan.side_notes, sidecar))
    if out != text:
        write_keeping_file(prd_path, raw, ("\ufeff" if bom else "").encode() + out.encode("utf-8"),
                           backup_dir=sidecar.parent)
    return [sid for sid in dict.fromkeys(order) if sid in plan.changed]


#: Name of the copy of a PRD's old content that :func:`write_keeping_file` keeps while it
#: writes the file in place (``<name>`` is the PRD's file name).
BACKUP_NAME = "{name}.before-write-back"


def write_keeping_file(path: Path, old: bytes, new: bytes, *, backup_dir: Path) -> None:
    """Replace the content ``old`` of the file at ``path`` with ``new``, keeping the file
    itself: its mode, its owner and group (when they can be set), its hard links, and a
    symbolic link at ``path`` (the file it points to is written). A reader sees the old
    content or the new one, and a crash at any moment loses neither.

    Two ways, chosen per write:

    - **Atomic replace** (the usual case: one link, and an owner this process can give a
      new file): ``new`` goes to a temporary file in the same folder, which gets the file's
      mode (and owner and group), is flushed to disk (``fsync``) and renamed over the file.
      A crash leaves the old file whole (plus, at worst, the temporary file). Extended
      attributes and ACLs are not copied.
    - **In place** (the file has more than one hard link, which a rename would break; or its
      owner or group cannot be kept; or its folder is not writable): ``old`` is first
      written to ``backup_dir/<name>.before-write-back`` and flushed to disk; then ``new``,
      padded with spaces to the old length when it is shorter, is written over the file in
      one ``pwrite``, the file is cut to the new length and flushed, and the copy is
      deleted. A process killed between the write and the cut leaves the new content with
      trailing spaces (still valid JSON or YAML); if the write itself fails (a full disk),
      the old content is written back. Only a system crash during the write can leave the
      file damaged, and then the copy still holds the old content. The inode, its links,
      owner, mode, ACLs and extended attributes all stay.

    Args:
        path: the file (a PRD), as given (symbolic links are followed).
        old: its current content (as just read: a change made since then is overwritten).
        new: the content to write.
        backup_dir: a writable folder for the in-place copy (the state folder).

    Raises:
        OSError: the file cannot be written (its old content is then kept, in the file or,
            after a failed in-place write that could not be undone, in the copy).
    """
    real = Path(os.path.realpath(path))
    st = os.stat(real)
    if st.st_nlink == 1 and _replace(real, new, st):
        return
    backup = backup_dir / BACKUP_NAME.format(name=real.name)
    backup_dir.mkdir(parents=True, exist_ok=True)
    _write_synced(backup, old)
    fd = os.open(real, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    try:
        padded = new + b" " * (len(old) - len(new))
        try:
            _pwrite_all(fd, padded)
        except OSError:
            with contextlib.suppress(OSError):
                _pwrite_all(fd, old)
                os.ftruncate(fd, len(old))
                os.fsync(fd)
                backup.unlink()
            raise
        os.ftruncate(fd, len(new))
        os.fsync(fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        backup.unlink()


def _replace(real: Path, new: bytes, st: os.stat_result) -> bool:
    """The atomic-replace way of :func:`write_keeping_file`; ``False`` (nothing changed)
    when the new file could not get the old one's owner and group or the folder is not
    writable, so that the caller writes in place."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchown"):
                mine = os.fstat(f.fileno())
                if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
                    try:
                        os.fchown(f.fileno(), st.st_uid, st.st_gid)
                    except OSError:  # not ours to give away: write in place instead
                        os.unlink(tmp)
                        return False
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(real.parent)
    return True


def _write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file at ``path`` (replacing one there) and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_BINARY", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    _sync_folder(path.parent)


def _pwrite_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at offset 0 of ``fd`` (``os.pwrite`` may write less at once)."""
    done = 0
    view = memoryview(data)
    while done < len(data):
        n = os.pwrite(fd, view[done:], done) if hasattr(os, "pwrite") else _seek_write(
            fd, view[done:], done)
        if n <= 0:
            raise OSError(errno.EIO, "nothing written")
        done += n


def _seek_write(fd: int, data: memoryview, offset: int) -> int:
    """``os.pwrite`` where there is none (Windows)."""
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk (so that a rename or a new file survives a system
    crash); nothing where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Story:
    """One story of the PRD file, as write-back sees it.

    Attributes:
        sid: its normalized id (what ``verdicts`` and ``notes`` are keyed by).
        raw: the story object as parsed from the file (not normalized).
        sp: the JSON path of ``raw`` in the file (``$.phases[1].stories[0]``).
        done_key: :attr:`~pytest_ralph.prd.dialects.Origin.done_key`.
        id_synthesized: the file gives the story no id.
    """

    sid: str
    raw: dict[str, Any]
    sp: str
    done_key: str
    id_synthesized: bool


def _stories(data: Any) -> list[_Story] | None:
    """The stories of parsed PRD ``data`` that have a string id (after normalization), in
    file order; ``None`` when ``data`` is of a shape that no dialect describes."""
    try:
        normalized = normalize(data)
    except DialectError:
        return None
    return [_Story(story["id"], _raw_story(data, origin), json_path(origin.parts),
                   origin.done_key, origin.id_synthesized)
            for story, origin in zip(normalized.data["userStories"], normalized.origins,
                                     strict=True)
            if isinstance(story["id"], str)]


def _raw_story(data: Any, origin: Origin) -> dict[str, Any]:
    """The story object at ``origin.parts`` of ``data`` (normalize checked it is one)."""
    node = data
    for part in origin.parts:
        node = node[part]
    assert isinstance(node, dict)
    return node


@dataclass
class _Plan:
    """The edits of one write-back: of the PRD ``text`` (in format ``fmt``) and of the sidecar.

    Attributes:
        edits: ``(start, end, replacement, sequence)``; at one position, a later edit ends
            up after an earlier one.
        changed: ids of the stories with an edit of the file.
        side_passes, side_notes: what goes to the sidecar, by story id.

    Positions (:class:`~pytest_ralph.prd.positions.Positions`) are computed on the first
    :meth:`offset`, so a write-back that matches no story does not compose the file.
    """

    text: str
    fmt: str
    json_like: bool
    edits: list[tuple[int, int, str, int]] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    side_passes: dict[str, bool] = field(default_factory=dict)
    side_notes: dict[str, str] = field(default_factory=dict)
    _positions: Positions | None = field(default=None, init=False, repr=False)
    _dups: set[str] = field(default_factory=set, init=False, repr=False)

    def offset(self, jp: str) -> int | None:
        """The index in ``text`` of the value at JSON path ``jp``; ``None`` when unknown or
        when its key is repeated (which value the parser kept is not known here)."""
        if self._positions is None:
            self._positions = Positions(self.text, self.fmt)
            self._dups = {path for path, _ in self._positions.duplicate_keys()}
        if jp in self._dups:
            return None
        return self._positions.offset(jp)

    def edit(self, sid: str, start: int, end: int, new: str) -> None:
        """Replace ``text[start:end]`` with ``new`` for story ``sid``."""
        self.edits.append((start, end, new, len(self.edits)))
        self.changed.add(sid)

    def apply(self) -> str:
        """``text`` with every edit made."""
        out = self.text
        for start, end, new, _ in sorted(self.edits, key=lambda e: (e[0], e[1], e[3]),
                                         reverse=True):
            out = out[:start] + new + out[end:]
        return out


def _plan_story(plan: _Plan, story: _Story, verdict: bool | None, note: str | None) -> None:
    """Plan the edits (or sidecar entries) of one story's verdict and note."""
    passes = story.raw.get("passes")
    span = _bool_span(plan, f"{story.sp}.passes") if isinstance(passes, bool) else None
    after_id = _id_end(plan, story)
    if verdict is not None:
        _plan_passes(plan, story, verdict, span, after_id)
    if note is not None:
        place = (_note_edit(plan, story, note, span[1] if span else after_id)
                 if plan.json_like else None)
        if place is None:
            plan.side_notes[story.sid] = note
        elif plan.text[place[0]:place[1]] != place[2]:
            plan.edit(story.sid, *place)


def _plan_passes(plan: _Plan, story: _Story, verdict: bool, span: tuple[int, int] | None,
                 after_id: int | None) -> None:
    """Plan ``passes``: replace the boolean word at ``span``, insert ``, "passes": X`` at
    ``after_id`` (a story with neither ``passes`` nor ``status``), or else the sidecar."""
    word = "true" if verdict else "false"
    current = story.raw.get("passes")
    if story.done_key == "passes" and current is verdict:
        return
    if span is not None:
        plan.edit(story.sid, *span, word)
    elif after_id is not None and not {"passes", "status"} & story.raw.keys():
        plan.edit(story.sid, after_id, after_id, f', "passes": {word}')
    else:
        plan.side_passes[story.sid] = verdict


def _id_end(plan: _Plan, story: _Story) -> int | None:
    """The index just after the story's id literal (a JSON string or integer) in JSON or
    JSONC; ``None`` in YAML, for a synthesized id, or when the literal cannot be found."""
    sid = story.raw.get("id")
    if not plan.json_like or story.id_synthesized or isinstance(sid, bool):
        return None
    start = plan.offset(f"{story.sp}.id")
    if start is None:
        return None
    if isinstance(sid, str):
        span = _string_span(plan.text, start)
        return span[1] if span else None
    m = _INT_LITERAL.match(plan.text, start) if isinstance(sid, int) else None
    return m.end() if m else None


def _note_edit(plan: _Plan, story: _Story, note: str,
               anchor: int | None) -> tuple[int, int, str] | None:
    """The edit (start, end, replacement) of the JSON/JSONC text that makes ``note`` the
    loop's line of the story's ``notes``; a no-op edit when it already is. ``None`` when
    the note cannot go into the file: ``notes`` is not a string, its literal cannot be
    found (or its key is repeated), or there is no ``notes`` and no ``anchor`` (the index
    after ``"passes": X`` or the id) to insert it at.
    """
    if "notes" not in story.raw:
        if anchor is None:
            return None
        return anchor, anchor, f', "notes": {json.dumps(note, ensure_ascii=False)}'
    current = story.raw["notes"]
    if not isinstance(current, str):
        return None
    at = plan.offset(f"{story.sp}.notes")
    span = _string_span(plan.text, at) if at is not None else None
    if span is None:
        return None
    text = plan.text
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

#: An integer literal of JSON (a story id written as a number).
_INT_LITERAL = re.compile(r"-?[0-9]+(?![0-9.eE])")

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


def _bool_span(plan: _Plan, jp: str) -> tuple[int, int] | None:
    """(start, end) in ``plan.text`` of the boolean word at JSON path ``jp``, or ``None``."""
    start = plan.offset(jp)
    m = _BOOL_LITERAL.match(plan.text, start) if start is not None else None
    return (m.start(), m.end()) if m else None


def _string_span(text: str, start: int) -> tuple[int, int] | None:
    """(start, end) of the JSON string literal, quotes included, that starts at index
    ``start`` of ``text``, or ``None`` when there is none."""
    if start >= len(text) or text[start] != '"':
        return None
    try:
        end: int = json.decoder.scanstring(text, start + 1)[1]  # type: ignore[attr-defined]
        return start, end
    except ValueError:
        return None


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
        loaded = json.loads(read_bytes(sidecar, SIDECAR_MAX_BYTES).decode("utf-8"))
        if isinstance(loaded, dict) and loaded.get("prd") == str(prd_path):
            if isinstance(loaded.get("passes"), dict):
                cur_passes = dict(loaded["passes"])
            if isinstance(loaded.get("notes"), dict):
                cur_notes = dict(loaded["notes"])
    except (OSError, ValueError, RecursionError):  # a FIFO or garbage there: replaced
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
