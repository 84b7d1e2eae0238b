"""The arming file: how the Claude Code Stop hook knows a loop is armed for a project.

``pytest --ralph-init --ralph-driver claude`` writes ``.claude/pytest-ralph.local.json`` in
the project (the rootdir); the first Stop of a Claude Code session adopts the armed run and
the file then names that session. The hook (:mod:`pytest_ralph.hook`) runs on every reply
Claude gives, so finding out that *no* loop is armed must cost a few ``stat`` calls: the hook
looks for this file with :mod:`os.path` alone and imports this module (standard library
only) only once it found one. The file is small JSON, never YAML frontmatter, whose
hand-rolled parsing broke other Ralph hooks on a ``---`` line in a prompt, an
``iteration:1`` without a space, or a multi-line quoted promise.

Format (version 1), one JSON object::

    {"version": 1,
     "run": "20261130-051500-ab12cd",         # the run id in the history
     "state_dir": "/abs/project/.pytest_ralph",  # the state folder (ralph.db lives there)
     "rootdir": "/abs/project",
     "session": ""}                           # "" until a session adopts the run

The run history (:mod:`pytest_ralph.state.history`, table ``drivers``) is the record of truth;
this file only says where to look and who owns the run, so that other sessions are
answered without opening SQLite. The ``.local`` name follows Claude Code's convention for
files that belong to one machine and are not committed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..util.env import CONTROLLER_ENV, MARKER_PARTS, SESSION_ARGV
from ..util.files import FileTooLarge, NotRegularFile, read_bytes

__all__ = [
    "CONTROLLER_ENV",
    "MARKER",
    "MARKER_VERSION",
    "MAX_MARKER_BYTES",
    "SESSION_ARGV",
    "Armed",
    "MarkerError",
    "read_marker",
    "remove_marker",
    "write_marker",
]

#: Where the arming file lives, relative to the project folder.
MARKER = Path(*MARKER_PARTS)

#: The format version this module writes and reads.
MARKER_VERSION = 1

#: Arming files larger than this many bytes are refused (a real one is about 300 bytes).
MAX_MARKER_BYTES = 64 * 1024


class MarkerError(Exception):
    """The arming file cannot be read or written; the message names the file, what was
    found and what to do."""


@dataclass(frozen=True)
class Armed:
    """What an arming file says.

    Attributes:
        path: the arming file itself.
        run: the armed run's id.
        state_dir: the state folder holding the run history (absolute).
        rootdir: the project root the checks run in (absolute).
        session: the Claude Code session that adopted the run; ``""`` until one does.
    """

    path: Path
    run: str
    state_dir: Path
    rootdir: Path
    session: str = ""

    def to_json(self) -> dict[str, object]:
        """The file's JSON object."""
        return {"version": MARKER_VERSION, "run": self.run, "state_dir": str(self.state_dir),
                "rootdir": str(self.rootdir), "session": self.session}


def read_marker(path: Path) -> Armed:
    """Read and check an arming file.

    Raises:
        MarkerError: unreadable, not a regular file (a FIFO, a folder...), over
            :data:`MAX_MARKER_BYTES`, not UTF-8 JSON (or nested too deeply), not an object,
            another version, or a field missing or of the wrong type; the message names the
            field and says how to recover (``pytest --ralph-cancel`` then ``pytest
            --ralph-init --ralph-driver claude``).
    """
    fix = ("; remove it (`pytest --ralph-cancel`) and arm again with `pytest --ralph-init "
           "--ralph-driver claude`")
    try:
        data = read_bytes(path, MAX_MARKER_BYTES)
    except FileTooLarge:
        raise MarkerError(f"the arming file {path} is over {MAX_MARKER_BYTES} bytes: not "
                          f"written by pytest-ralph{fix}") from None
    except NotRegularFile as exc:
        raise MarkerError(f"the arming file {path} is {exc.kind}, expected a regular file (a "
                          f"small JSON file){fix}") from None
    except (OSError, ValueError) as exc:
        raise MarkerError(f"cannot read the arming file {path}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except ValueError as exc:  # UnicodeDecodeError included
        raise MarkerError(f"the arming file {path} is not UTF-8 JSON ({exc}){fix}") from None
    except RecursionError:
        raise MarkerError(f"the arming file {path} holds JSON nested too deeply to read: not "
                          f"written by pytest-ralph{fix}") from None
    if not isinstance(obj, dict):
        raise MarkerError(f"the arming file {path}: expected a JSON object at $, found "
                          f"{type(obj).__name__}{fix}")
    if obj.get("version") != MARKER_VERSION:
        raise MarkerError(f"the arming file {path}: expected $.version {MARKER_VERSION}, found "
                          f"{obj.get('version')!r} (written by another pytest-ralph version)"
                          f"{fix}")
    return Armed(path=path, run=_text(obj, "run", path, fix, empty=False),
                 state_dir=Path(_text(obj, "state_dir", path, fix, empty=False, absolute=True)),
                 rootdir=Path(_text(obj, "rootdir", path, fix, empty=False, absolute=True)),
                 session=_text(obj, "session", path, fix))


def _text(obj: Mapping[str, object], key: str, path: Path, fix: str, *, empty: bool = True,
          absolute: bool = False) -> str:
    value = obj.get(key, "" if empty else None)
    if not isinstance(value, str) or (not empty and not value):
        raise MarkerError(f"the arming file {path}: expected $.{key} to be a "
                          f"{'' if empty else 'non-empty '}string, found {value!r}{fix}")
    if absolute and not os.path.isabs(value):
        raise MarkerError(f"the arming file {path}: expected $.{key} to be an absolute path, "
                          f"found {value!r}{fix}")
    return value


def write_marker(armed: Armed) -> None:
    """Write an arming file atomically (a temporary file in the same folder, then
    ``os.replace``): a reader sees the old file or the new one, never half of one.

    Raises:
        MarkerError: the folder cannot be created or written.
    """
    import contextlib
    import tempfile  # not on the hook's fast path

    path = armed.path
    text = json.dumps(armed.to_json(), indent=1, ensure_ascii=False) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".pytest-ralph-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise MarkerError(f"cannot write the arming file {path}: {exc.strerror or exc}; check "
                          f"that {path.parent} is writable") from None


def remove_marker(path: Path, run: str | None = None) -> bool:
    """Delete the arming file (only if it still names ``run``, when given).

    Returns:
        ``True`` if a file was removed. Never raises: a file that cannot be read or removed is
        left (the hook then finds its run ended and ignores it).
    """
    if run is not None:
        try:
            if read_marker(path).run != run:
                return False
        except MarkerError:
            pass
    try:
        path.unlink()
    except OSError:
        return False
    return True
