"""Reading a file whose path a user or an agent chose, without hanging or blowing up.

A path in a PRD, an ini key or a state folder can name something that is not a regular file:
a FIFO (opening it for reading blocks until a writer comes), ``/dev/zero`` or ``/dev/urandom``
(reading never ends), a folder, a socket. Every reader of such a path goes through
:func:`open_regular` / :func:`read_bytes`, which

- open with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer) and
  ``O_NOCTTY``, then look at what was opened (``fstat``, so there is no race between a check
  and the open) and refuse anything but a regular file with :class:`NotRegularFile`, whose
  message says what the path is (a FIFO, a character device, a folder...);
- read at most ``limit + 1`` bytes, so that a file over its limit is seen without reading it
  all (:class:`FileTooLarge`).

Both errors are :class:`OSError` subclasses (``strerror`` holds the readable reason), so
callers that already handle an unreadable file handle these too.

Standard library only, imported by the Stop hook's fast path: keep it small.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["FileTooLarge", "NotRegularFile", "check_regular", "digest", "kind_of",
           "open_regular", "read_bytes", "read_text"]

_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def kind_of(mode: int) -> str:
    """What a ``st_mode`` is, with its article, for messages: ``"a regular file"``,
    ``"a folder"``, ``"a FIFO (named pipe)"``, ``"a character device"``, ``"a block
    device"``, ``"a socket"``, ``"a symbolic link"`` or ``"a special file"``."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "a special file"


class NotRegularFile(OSError):
    """The path names something other than a regular file (after following symbolic links).

    Attributes:
        kind: what it is (:func:`kind_of`), e.g. ``"a FIFO (named pipe)"``.
        strerror: ``"<kind>, not a regular file"``; ``filename`` is the path.
    """

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        code = errno.EISDIR if kind == "a folder" else errno.EINVAL
        super().__init__(code, f"{kind}, not a regular file", os.fspath(path))
        self.kind = kind


class FileTooLarge(OSError):
    """The file holds more bytes than its reader's limit.

    Attributes:
        size: the size found, in bytes (at least ``limit + 1``: the size ``fstat`` gave, or
            what was read before stopping).
        limit: the limit, in bytes.
    """

    def __init__(self, path: str | os.PathLike[str], size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, over the limit of {limit} bytes",
                         os.fspath(path))
        self.size = size
        self.limit = limit


def check_regular(path: str | os.PathLike[str]) -> None:
    """Refuse a path that exists and is not a regular file (symbolic links followed), for a
    path handed to code that opens it itself (SQLite, a library).

    Raises:
        NotRegularFile: it is a folder, a FIFO, a device, a socket...
        FileNotFoundError: nothing is there; OSError: it cannot be looked at.
        ValueError: the path holds a NUL character.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, kind_of(mode))


def open_regular(path: str | os.PathLike[str]) -> int:
    """Open a regular file for reading without ever blocking on the open; return its file
    descriptor (the caller closes it; reads block as usual, which a regular file never does
    for long).

    Raises:
        NotRegularFile: the path names a folder, a FIFO, a device, a socket... (nothing was
            read from it).
        OSError: it cannot be opened (missing, permissions...).
        ValueError: the path holds a NUL character.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, kind_of(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole content of the regular file at ``path``, at most ``limit`` bytes.

    Raises:
        FileTooLarge: the file holds more than ``limit`` bytes (at most ``limit + 1`` were
            read).
        NotRegularFile: see :func:`open_regular`.
        OSError: it cannot be opened or read.
        ValueError: the path holds a NUL character.
    """
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileTooLarge(path, size, limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew after the fstat
        raise FileTooLarge(path, len(data), limit)
    return data


def read_text(path: str | os.PathLike[str], limit: int, *, errors: str = "strict") -> str:
    """:func:`read_bytes` decoded as UTF-8 (a leading BOM kept, as :meth:`bytes.decode`
    does).

    Raises:
        UnicodeDecodeError: not UTF-8 (with ``errors="strict"``).
        FileTooLarge, NotRegularFile, OSError, ValueError: see :func:`read_bytes`.
    """
    return read_bytes(path, limit).decode("utf-8", errors)


#: Largest file :func:`digest` reads whole, in bytes; a larger one is known by its size, inode
#: and change time instead (a sparse file of a terabyte would take hours to hash).
DIGEST_MAX_BYTES = 64 * 1024 * 1024


def digest(path: str | os.PathLike[str], max_bytes: int = DIGEST_MAX_BYTES) -> str:
    """What the guard records for the file at ``path`` (symbolic links followed): the
    SHA-256 hex digest of its content; ``"absent"`` when there is nothing (or a folder);
    ``"special: <kind>"`` for a FIFO, a device or a socket (never read: a FIFO would block,
    ``/dev/zero`` never ends); ``"large: <size> <inode> <ctime ns>"`` for a file over
    ``max_bytes`` bytes (the change time cannot be set back by a process, unlike the
    modification time); ``"unreadable: <why>"`` when it cannot be read. Never raises for a
    file that cannot be read."""
    import hashlib

    try:
        fd = open_regular(path)
    except NotRegularFile as exc:
        return "absent" if exc.kind == "a folder" else f"special: {exc.kind}"
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return "absent"
    except (OSError, ValueError) as exc:
        return f"unreadable: {getattr(exc, 'strerror', None) or exc}"
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if info.st_size > max_bytes:
            return f"large: {info.st_size} {info.st_ino} {info.st_ctime_ns}"
        h = hashlib.sha256()
        try:
            for block in iter(lambda: f.read(1 << 16), b""):
                h.update(block)
        except OSError as exc:
            return f"unreadable: {exc.strerror}"
    return h.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename,
    so that a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
