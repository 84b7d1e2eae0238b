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
- otherwise :func:`pytest_ralph.driver.on_stop` checks the criteria and answers (block with
  the next prompt, or allow with a ``systemMessage``).

It never wedges a session: empty stdin, invalid JSON or UTF-8, a missing transcript, an
unreadable arming file or history, even an internal error all let the stop go ahead, with
the reason on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import BinaryIO

from .arming import CONTROLLER_ENV, MarkerError, candidates, find_marker, read_marker
from .stop_payload import parse_payload

#: Bytes of stdin read at most (a Stop payload with a long last message is well under this).
MAX_STDIN_BYTES = 16 * 1024 * 1024


def main(stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
         stderr: BinaryIO | None = None, environ: dict[str, str] | None = None) -> int:
    """Run the hook once; return the exit status (always 0).

    Args:
        stdin: the payload's byte stream (default ``sys.stdin.buffer``).
        stdout, stderr: byte streams for the answer and the notes (default the binary
            buffers of ``sys.stdout`` / ``sys.stderr``); both are written as UTF-8 whatever
            the console's code page, which is what Claude Code reads.
        environ: the environment (default ``os.environ``); ``CLAUDE_PROJECT_DIR`` and
            ``PYTEST_RALPH_CONTROLLER`` are read.
    """
    env = os.environ if environ is None else environ
    out = sys.stdout.buffer if stdout is None else stdout
    err = sys.stderr.buffer if stderr is None else stderr
    try:
        data = (sys.stdin.buffer if stdin is None else stdin).read(MAX_STDIN_BYTES)
    except (OSError, ValueError) as exc:  # a closed or unreadable stdin
        _say(err, f"pytest-ralph hook: cannot read stdin ({exc}); the stop is allowed")
        return 0
    if env.get(CONTROLLER_ENV):
        return 0  # an agent run of `pytest --ralph`: its controller decides, not this hook
    payload = parse_payload(data)
    notes = list(payload.problems)
    if not payload.is_stop:
        return 0
    marker = find_marker(candidates(payload.cwd or "", env.get("CLAUDE_PROJECT_DIR")
                                    or (os.getcwd() if not payload.cwd else None)))
    if marker is None:
        return 0
    try:
        armed = read_marker(marker)
    except MarkerError as exc:
        _say(err, "\n".join([*notes, f"pytest-ralph hook: {exc}; the stop is allowed"]))
        return 0
    if not payload.session_id:
        if not armed.session:
            notes.append(f"pytest-ralph hook: run {armed.run} is armed, but this Stop payload "
                         "has no session id, and a session without an id never adopts a run; "
                         "the stop is allowed")
        _say(err, "\n".join(notes))
        return 0
    if armed.session and armed.session != payload.session_id:
        return 0  # the run belongs to another session
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


def _say(stream: BinaryIO, text: str) -> None:
    """Write ``text`` and a newline as UTF-8 (lone surrogates replaced); a closed stream is
    ignored."""
    if not text:
        return
    try:
        stream.write((text + "\n").encode("utf-8", "replace"))
        stream.flush()
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
