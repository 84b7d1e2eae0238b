"""The Claude Code Stop hook: ``python -m pytest_ralph.hook`` (console script
``pytest-ralph-hook``).

Claude Code runs it each time a session ends a reply, with the Stop payload as JSON on stdin
(Claude Code hooks reference, https://code.claude.com/docs/en/hooks). It answers on stdout
and always exits 0:

- no loop armed for this project, a session other than the one that adopted the armed run,
  a session without an id, an event that is not a plain Stop (``StopFailure``), or
  ``PYTEST_RALPH_CONTROLLER`` set (the session is itself an agent run of ``pytest --ralph``):
  no output, the stop goes ahead. This path imports only the standard library (never
  pytest, jsonschema or SQLite) and looks at one small file, so it costs about as much as
  starting Python;
- otherwise :func:`pytest_ralph.claude.driver.on_stop` checks the criteria and answers (block with
  the next prompt, or allow with a ``systemMessage``).

It never wedges a session: a closed stdin, stdout or stderr, empty stdin, a payload over
:data:`MAX_STDIN_BYTES`, invalid JSON or UTF-8, JSON nested too deeply to read, a value that
is not a JSON object, a missing or special transcript (a FIFO, a device), an unreadable
arming file or history, even an internal error all let the stop go ahead: nothing on
stdout, the reason in one line on stderr, exit 0. (One case is beyond any Python program:
when stdin is a folder, the interpreter itself refuses to start, before this module runs.)
"""

from __future__ import annotations

import json
import os
import sys

from ..util.env import CONTROLLER_ENV, MARKER_PARTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO


#: Bytes of stdin read at most (a Stop payload with a long last message is well under this).
MAX_STDIN_BYTES = 16 * 1024 * 1024

#: A ``cwd`` or ``$CLAUDE_PROJECT_DIR`` longer than this many characters is ignored: no
#: real folder has such a path (Linux's ``PATH_MAX`` is 4096 bytes), and walking up the
#: parents of a multi-megabyte one would take hours.
MAX_PATH_CHARS = 4096


def candidates(cwd: str, project_dir: str | None) -> list[str]:
    """Folders whose arming file the hook looks at, in order: ``$CLAUDE_PROJECT_DIR`` (set
    by Claude Code for hooks), then the payload's ``cwd`` and each of its parents (a session
    may have moved into a subfolder). Empty or relative values are skipped; no duplicates.
    Values longer than :data:`MAX_PATH_CHARS` are skipped too. Plain strings
    (:mod:`os.path`), so that the unarmed path imports nothing."""
    out: list[str] = []
    if project_dir and len(project_dir) <= MAX_PATH_CHARS and os.path.isabs(project_dir):
        out.append(os.path.normpath(project_dir))
    if cwd and len(cwd) <= MAX_PATH_CHARS and os.path.isabs(cwd):
        here = os.path.normpath(cwd)
        while True:
            out.append(here)
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
    return list(dict.fromkeys(out))


def find_marker(folders: list[str]) -> str | None:
    """The first arming file found in ``folders`` (see :func:`candidates`), or ``None``.
    One ``stat`` per folder; never raises."""
    for folder in folders:
        path = os.path.join(folder, *MARKER_PARTS)
        try:
            if os.path.isfile(path):
                return path
        except (OSError, ValueError):  # a folder we may not look into, a NUL in the path
            continue
    return None


def _glance(data: bytes) -> tuple[dict[str, object] | None, str]:
    """The payload as a JSON object (``None`` if it is not one) and a note when it is not:
    a first look with :mod:`json` only, before anything else is imported."""
    if not data.strip():
        return None, "pytest-ralph hook: stdin is empty (no Stop payload); the stop is allowed"
    try:  # bytes that are not UTF-8 (a Windows code page) become U+FFFD, as parse_payload does
        obj = json.loads(data.decode("utf-8-sig", "replace"))
    except ValueError:
        return None, ("pytest-ralph hook: stdin is not a UTF-8 JSON object (the Stop payload "
                      "of the Claude Code hooks reference); the stop is allowed")
    except RecursionError:  # [[[[...]]]]: deeper than Python's JSON reader goes
        return None, ("pytest-ralph hook: stdin holds JSON nested too deeply to read, not the "
                      "Stop payload object; the stop is allowed")
    if not isinstance(obj, dict):
        return None, (f"pytest-ralph hook: stdin holds a JSON {type(obj).__name__}, not the "
                      "Stop payload object; the stop is allowed")
    return obj, ""


def _text(obj: dict[str, object] | None, *keys: str) -> str:
    """The first string value of ``keys`` in ``obj``, stripped ("" when none)."""
    for key in keys:
        value = (obj or {}).get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _owner(marker: str) -> str | None:
    """The session named by the arming file at ``marker`` ("" when none adopted the run
    yet), or ``None`` when the file cannot be read as the small JSON object it should be
    (the full reader then says why)."""
    from ..util.files import read_bytes  # standard library only

    try:  # never blocks: a FIFO planted at the path is refused, not opened for good
        obj = json.loads(read_bytes(marker, 65536).decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    session = obj.get("session") if isinstance(obj, dict) else None
    return session if isinstance(session, str) else None


def main(stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
         stderr: BinaryIO | None = None, environ: dict[str, str] | None = None) -> int:
    """Run the hook once; return the exit status (always 0).

    Args:
        stdin: the payload's byte stream (default ``sys.stdin.buffer``; a closed stdin reads
            as no payload).
        stdout, stderr: byte streams for the answer and the notes (default the binary
            buffers of ``sys.stdout`` / ``sys.stderr``; a closed one is not written to); both
            are written as UTF-8 whatever the console's code page, which is what Claude Code
            reads.
        environ: the environment (default ``os.environ``); ``CLAUDE_PROJECT_DIR`` and
            ``PYTEST_RALPH_CONTROLLER`` are read.
    """
    if stdin is None or stdout is None or stderr is None:
        _fill_closed_fds()
    env = os.environ if environ is None else environ
    out = _buffer(sys.stdout) if stdout is None else stdout
    err = _buffer(sys.stderr) if stderr is None else stderr
    try:
        return _main(_buffer(sys.stdin) if stdin is None else stdin, out, err, env)
    except Exception as exc:  # never wedge the session, whatever happened
        _say(err, f"pytest-ralph hook: internal error {_short(exc)}; the stop is allowed; "
                  "please report it")
        return 0


def _main(stdin: BinaryIO | None, out: BinaryIO | None, err: BinaryIO | None,
          env: Mapping[str, str]) -> int:
    """:func:`main` with its streams resolved (``None``: closed)."""
    if stdin is None:
        _say(err, "pytest-ralph hook: stdin is closed (no Stop payload); the stop is allowed")
        return 0
    try:
        data = stdin.read(MAX_STDIN_BYTES + 1)
    except (OSError, ValueError) as exc:  # a closed or unreadable stdin
        _say(err, f"pytest-ralph hook: cannot read stdin ({_short(exc)}); the stop is allowed")
        return 0
    if data is None:  # a non-blocking stdin with nothing in it yet
        data = b""
    if len(data) > MAX_STDIN_BYTES:
        _say(err, f"pytest-ralph hook: the Stop payload on stdin is over {MAX_STDIN_BYTES} "
                  "bytes, more than any Stop payload holds; the stop is allowed")
        return 0
    if env.get(CONTROLLER_ENV):
        return 0  # an agent run of `pytest --ralph`: its controller decides, not this hook
    obj, note = _glance(data)
    event = _text(obj, "hook_event_name", "hookEventName")
    if event and event.lower() != "stop":
        return 0  # StopFailure (an API error) and others are not a normal stop
    cwd = _text(obj, "cwd")
    marker = find_marker(candidates(cwd, env.get("CLAUDE_PROJECT_DIR")
                                    or (_getcwd() if not cwd else None)))
    if marker is None:
        _say(err, note)
        return 0
    session = _text(obj, "session_id", "sessionId")
    owner = _owner(marker)
    if owner and session != owner:
        _say(err, note)
        return 0  # the run belongs to another session: never block it
    return _armed(marker, data, out, err)


def _buffer(stream: object) -> BinaryIO | None:
    """The binary buffer of a text stream of :mod:`sys`, or ``None`` when the stream is
    closed (Python sets ``sys.stdin`` to ``None`` when file descriptor 0 was closed)."""
    buffer: BinaryIO | None = getattr(stream, "buffer", None)
    return buffer


def _fill_closed_fds() -> None:
    """Open ``/dev/null`` on file descriptors 0, 1 and 2 when they are closed (``<&-``), so
    that no file this process opens later (the history, a log) gets one of them and is then
    written to as someone's stdout or stderr, by a child process say."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _getcwd() -> str | None:
    """The working directory, or ``None`` when it was deleted or cannot be read."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _short(exc: BaseException) -> str:
    """``repr(exc)`` on one line, at most 300 characters."""
    text = " ".join(repr(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _armed(marker: str, data: bytes, out: BinaryIO | None, err: BinaryIO | None) -> int:
    """The hook for the session that owns (or may adopt) the run armed by ``marker``."""
    from pathlib import Path

    from .arming import MarkerError, read_marker
    from .payload import parse_payload

    payload = parse_payload(data)
    notes = list(payload.problems)
    bad = "; ".join(notes) + "; " if notes else ""  # what is wrong with stdin, on one line
    try:
        armed = read_marker(Path(marker))
    except MarkerError as exc:
        _say(err, f"pytest-ralph hook: {bad}{exc}; the stop is allowed")
        return 0
    if not payload.session_id:
        if not armed.session:
            _say(err, f"pytest-ralph hook: {bad}run {armed.run} is armed, but this Stop payload "
                      "has no session id, and a session without an id never adopts a run; the "
                      "stop is allowed")
        elif bad:
            _say(err, f"pytest-ralph hook: {bad}the stop is allowed")
        return 0
    if armed.session and armed.session != payload.session_id:
        return 0
    try:
        from .driver import on_stop  # the heavy part: only for the session that owns the run

        answer = on_stop(armed, payload)
    except Exception as exc:  # never wedge the session on our own bug
        import traceback

        notes.append(f"pytest-ralph hook: internal error {exc!r}; the stop is allowed; please "
                     f"report it:\n{traceback.format_exc()}")
        _say(err, "\n".join(notes))
        return 0
    _say(err, "\n".join([*notes, answer.stderr] if answer.stderr else notes))
    if answer.stdout:
        _say(out, answer.stdout)
    return 0


def _say(stream: BinaryIO | None, text: str) -> None:
    """Write ``text`` and a newline as UTF-8 (lone surrogates replaced); a closed stream
    (``None``, or one that fails) is ignored."""
    if not text or stream is None:
        return
    try:
        stream.write((text + "\n").encode("utf-8", "replace"))
        stream.flush()
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
