"""The signature of the run history's files: how a loop tells its own writes from someone
else's.

After each of its own commits the loop keeps :func:`db_signature` of the database; a later
signature that differs means the file was deleted, replaced or written by another process
(the agent, say), and the loop rebuilds the history from memory
(:meth:`pytest_ralph.loop.store.RunStore.check`).

This module does not import pytest.
"""

from __future__ import annotations

from pathlib import Path


def db_signature(db: Path) -> tuple[object, ...]:
    """Identity, size and modification time of the database and its WAL file: what our own
    commits change, so that a change between two of them was made by someone else.

    Returns:
        One item per file (the database, then ``<db>-wal``): ``(inode, size in bytes,
        mtime in ns)``, or ``None`` for a file that cannot be stat'ed (missing, say).
    """
    out: list[object] = []
    for path in (db, db.with_name(db.name + "-wal")):
        try:
            st = path.stat()
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)
