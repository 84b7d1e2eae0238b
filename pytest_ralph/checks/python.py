"""The ``python`` check kind: ``module:function`` called in a Python process of its own
(:class:`PythonCheck`): the runner (``_PYTHON_RUNNER``, its source) reads the path of a verdict
file and a nonce from its stdin, and reports there, in records that carry the nonce
(``_RECORD_FIELDS``), what the call did.

This module does not import pytest.
"""

from __future__ import annotations

import ast
import os
import secrets
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..util.files import open_regular
from ..util.process import Finished, read_tail, run_in_group
from .base import DEFAULT_CHECK_TIMEOUT, OUTPUT_TAIL_BYTES, CheckResult, command_env

#: Characters of an exception's text (and of its traceback) a ``python`` check reports.
PYTHON_TEXT_MAX_CHARS = 4000

#: Bytes of a ``python`` check's verdict file that are read.
VERDICT_MAX_BYTES = 256 * 1024

# The process of a `python` check: `python -c _PYTHON_RUNNER`, in the rootdir, with on stdin
# the NUL-separated UTF-8 fields target, rootdir, verdict file, nonce, text limit, then our
# sys.path entries. It reads stdin before any checked code runs (stdin then reads /dev/null),
# so the verdict file's path and the nonce are in no environment variable, argument or open
# file. It imports no more than it must (each import costs start-up time). Each record it appends
# to the verdict file is one line, the repr() of a tuple that starts with the nonce:
# ("called",) before the call, then one of ("import", type, text),
# ("not-callable", type), ("raised", type, text, traceback), ("returned", is_false); then it
# ends at once with os._exit(0) (no atexit handlers of the checked code). Names it uses after
# the checked code is imported are bound first, so replacing os.write, repr, getattr... does
# not reach it. The working directory is off sys.path until the runner's own imports are done.
_PYTHON_RUNNER = r'''
import os, sys


def _run():
    fs_open, fs_write, fs_close, fs_dup2, hard_exit = os.open, os.write, os.close, os.dup2, os._exit
    as_repr, as_str, as_type, is_callable, get_attr = repr, str, type, callable, getattr
    join, realpath = "".join, os.path.realpath
    here = realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if realpath(p or os.curdir) != here]
    import importlib
    import_module = importlib.import_module
    spec = sys.stdin.buffer.read().decode("utf-8", "surrogateescape").split("\0")
    null = fs_open(os.devnull, os.O_RDONLY)
    fs_dup2(null, 0)
    fs_close(null)
    target, rootdir, where, nonce, limit = spec[0], spec[1], spec[2], spec[3], int(spec[4])
    first = [rootdir] + [p for p in spec[5:] if p != rootdir]
    sys.path[:] = first + [p for p in sys.path if p not in first]
    sys.argv[:] = ["-c"]
    append = os.O_WRONLY | os.O_APPEND
    del spec

    def plain(value):
        try:
            return join((value,))
        except BaseException:
            return "?"

    def text(exc):
        try:
            return plain(as_str(exc))[:limit]
        except BaseException:
            return "<str() of the exception failed>"

    def say(*fields):
        line = as_repr((nonce,) + fields) + "\n"
        fd = fs_open(where, append)
        try:
            fs_write(fd, line.encode("utf-8", "backslashreplace"))
        finally:
            fs_close(fd)

    def done():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        hard_exit(0)

    module_name, _, attr = target.partition(":")
    try:
        obj = import_module(module_name)
        for part in attr.split("."):
            obj = get_attr(obj, part)
    except SystemExit:
        raise
    except BaseException as exc:
        say("import", plain(as_type(exc).__name__), text(exc))
        done()
    if not is_callable(obj):
        say("not-callable", plain(as_type(obj).__name__))
        done()
    say("called")
    try:
        value = obj()
    except SystemExit:
        raise
    except BaseException as exc:
        try:
            import traceback
            tb = exc.__traceback__  # its first frame is this runner's call: leave it out
            lines = traceback.format_exception(as_type(exc), exc,
                                               tb.tb_next if tb is not None else None)
            trace = plain(join(lines[-3:]))
        except BaseException:
            trace = ""
        say("raised", plain(as_type(exc).__name__), text(exc), trace[-limit:])
    else:
        say("returned", value is False)
    done()


_run()
'''

#: Fields after the kind of each record of a verdict file, by kind (see :class:`PythonCheck`).
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "called": (), "import": (str, str), "not-callable": (str,), "raised": (str, str, str),
    "returned": (bool,)}


def _verdict_records(path: Path, nonce: str) -> list[tuple[Any, ...]]:
    """The records of a ``python`` check's verdict file (kind first, nonce dropped), in file
    order. Only lines that are a Python tuple literal starting with ``nonce`` and shaped as
    :data:`_RECORD_FIELDS` says count; anything else in the file is ignored. The first
    :data:`VERDICT_MAX_BYTES` bytes are read; a missing file has no records."""
    try:  # the checked code may have put a FIFO there: never block on it
        with os.fdopen(open_regular(path), "rb") as f:
            data = f.read(VERDICT_MAX_BYTES)
    except OSError:
        return []
    records = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            value = ast.literal_eval(line)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if not (isinstance(value, tuple) and len(value) >= 2 and value[0] == nonce
                and isinstance(value[1], str)):
            continue
        shape = _RECORD_FIELDS.get(value[1])
        fields = value[2:]
        if shape is not None and len(fields) == len(shape) and all(
                type(v) is t for v, t in zip(fields, shape, strict=True)):
            records.append(value[1:])
    return records


@dataclass(frozen=True)
class PythonCheck:
    """``module:function`` called with no arguments in a Python process of its own; passes
    unless it raises or returns False.

    The process is ``sys.executable``, run in ``rootdir``, in its own process group (killed
    with the group after ``timeout`` seconds), with the environment of a checked command
    (bytecode in a private folder). Its ``sys.path`` is ``rootdir``, then this process's
    ``sys.path`` (so ini ``pythonpath`` entries and test folders that pytest added still
    import), then its own. The process reads the path of a verdict file and a random nonce
    from its stdin before it imports the checked code, and reports the outcome there; only
    records that carry the nonce count. So the checked code cannot report a pass by printing
    or by exiting, and it cannot reach other criteria or pytest-ralph's results file: it runs
    in a process that ends with its check. Code that digs the nonce out of the runner's own
    frames can still forge the verdict of its own criterion, and only that one.

    Failures: the import fails, the attribute is not callable, the call raises (any
    exception but ``SystemExit``) or returns ``False``, the process ends before a verdict
    (``os._exit``, ``sys.exit``, a crash or a signal), or the timeout expires. The end of the
    process's output follows the failure text.

    Attributes:
        target: ``module:function`` (``function`` may be dotted: ``Class.method``).
        rootdir: the working directory, put first on ``sys.path`` so that project modules
            import (absolute).
        timeout: seconds before the process group is killed.
    """

    target: str
    rootdir: Path
    timeout: float = DEFAULT_CHECK_TIMEOUT

    def run(self) -> CheckResult:
        """Start the process, wait for it, and read its verdict."""
        nonce = secrets.token_hex(16)
        search = [os.path.abspath(p) for p in sys.path if isinstance(p, str) and "\0" not in p]
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as out:
            verdict = Path(tmp) / "verdict"
            verdict.touch(mode=0o600)
            spec = "\0".join([self.target, str(self.rootdir), str(verdict), nonce,
                              str(PYTHON_TEXT_MAX_CHARS), *search])
            try:
                finished = run_in_group([sys.executable, "-c", _PYTHON_RUNNER], cwd=self.rootdir,
                                        output=out, timeout=self.timeout,
                                        input=spec.encode("utf-8", "surrogateescape"),
                                        env=command_env(self.rootdir))
            except OSError as exc:
                return CheckResult(False, f"cannot start a Python process ({sys.executable}) in "
                                          f"{self.rootdir} for `{self.target}()`: {exc}; "
                                          "expected to run it")
            tail = read_tail(out, OUTPUT_TAIL_BYTES).rstrip()
            records = _verdict_records(verdict, nonce)
        text = self._failure(finished, records)
        if text is None:
            return CheckResult(True)
        text += f"\noutput (last lines):\n{tail}" if tail else ""
        return CheckResult(False, text)

    def _failure(self, finished: Finished, records: list[tuple[Any, ...]]) -> str | None:
        """The failure text for how the process ended and what it reported, or ``None`` for
        a pass."""
        t = self.target
        final = [r for r in records if r[0] != "called"]
        if final:
            kind, *fields = final[-1]
            if kind == "import":
                return f"cannot import `{t}`: {fields[0]}: {fields[1]}; expected a function to call"
            if kind == "not-callable":
                article = "an" if fields[0][:1].lower() in "aeiou" else "a"
                return f"`{t}` is {article} {fields[0]}; expected a function"
            if kind == "raised":
                return (f"`{t}()` raised {fields[0]}: {fields[1]}; expected it to return without "
                        f"raising\n{fields[2].rstrip()}")
            if fields[0]:
                return f"`{t}()` returned False; expected anything else"
            return None
        called = ("called",) in records
        if finished.timed_out:
            if called:
                return (f"`{t}()` did not return within the timeout of {self.timeout:g} s "
                        "(process group killed); expected it to return")
            return (f"cannot import `{t}`: the import did not finish within the timeout of "
                    f"{self.timeout:g} s (process group killed); expected a function to call")
        code = finished.returncode if finished.returncode is not None else -1
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        if called:
            return f"`{t}()` ended the process ({how}) before returning; expected it to return"
        return (f"cannot import `{t}`: the process ended ({how}) before the import finished; "
                "expected a function to call")
