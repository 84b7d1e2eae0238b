"""The last run's verified oracle, and what changed in it since: a new run does not launder a
weakened oracle.

Every run starts from a snapshot of its oracle (:mod:`pytest_ralph.oracle.snapshot`): the criteria,
and
the tests, ``conftest.py`` and configuration files, schemas and modules that judge them. That
snapshot is what the run's verdicts were checked against; a run that ends (or is killed) leaves
it as the *verified snapshot* for the next run of the same PRD. An agent that weakened a test,
killed the loop and waited for ``pytest --ralph --ralph-new`` would otherwise have its weaker
oracle taken as the new run's reference. So a new run compares its own start with the last
run's verified snapshot and, when the criteria or the files that judge them differ, says what
changed (a diff stat, :func:`changes_stat`) and refuses to start unless the user says the changes
are theirs (``--ralph-accept-changes``).

For the diff stat, each run keeps, in ``<state folder>/oracle-files/``, a copy of each guarded
file of at most :data:`MAX_COPY_BYTES` bytes (secrets redacted), named by the SHA-256 of the
file's contents, which is also the file's digest in the snapshot: the next run finds the old
text of a changed file by its digest. Only the copies the newest snapshot names are kept.

The verified snapshot lives in the run history of the state folder, and also, so that a
``ralph_dir`` moved by an edited configuration file (or a state folder deleted) cannot hide it,
in a small record under the user's cache folder (:func:`pointer_path`), read-only to a
confined agent.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..oracle.snapshot import Change, Snapshot
from ..oracle.walk import ABSENT
from .folder import COPIES, DB_NAME

#: Largest guarded file that is copied, in bytes.
MAX_COPY_BYTES = 1024 * 1024

#: How many changed subjects a diff stat lists before ``... N more``.
MAX_LINES = 20


def pointer_path(rootdir: Path) -> Path | None:
    """Where the last verified snapshot of the project at ``rootdir`` is recorded apart from
    its state folder: ``$XDG_CACHE_HOME/pytest-ralph/verified/<digest of the rootdir>.json``
    (``~/.cache`` without ``XDG_CACHE_HOME``); ``None`` when that folder would be inside the
    project (where the agent could write it) or the path is relative."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.realpath(os.path.join(base, "pytest-ralph", "verified"))
    root = os.path.realpath(rootdir)
    if not os.path.isabs(folder) or folder == root or folder.startswith(
            root.rstrip(os.sep) + os.sep):
        return None
    name = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return Path(folder) / f"{name}.json"


def write_pointer(rootdir: Path, record: Mapping[str, Any]) -> None:
    """Record the verified snapshot of a run (``{"run", "status", "prd", "state",
    "oracle"}``) at :func:`pointer_path`, atomically; errors are ignored (the history still
    holds it)."""
    path = pointer_path(rootdir)
    if path is None:
        return
    with contextlib.suppress(OSError, TypeError, ValueError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_text(json.dumps({"rootdir": os.path.realpath(rootdir), **record}),
                        encoding="utf-8")
        part.replace(path)


def read_pointer(rootdir: Path) -> dict[str, Any] | None:
    """The record :func:`write_pointer` left for ``rootdir``, or ``None`` (none, or one that
    cannot be read)."""
    from ..util.files import read_text

    path = pointer_path(rootdir)
    if path is None:
        return None
    try:
        data = json.loads(read_text(path, 64 * 1024 * 1024))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("rootdir") != os.path.realpath(rootdir) or \
            not isinstance(data.get("oracle"), dict):
        return None
    return data


def keep_copies(snap: Snapshot, rootdir: Path, state_root: Path,
                redact: Callable[[str], str] = lambda text: text) -> None:
    """Copy each guarded file of ``snap`` that exists (and is small enough, and text) into
    ``<state_root>/oracle-files/<digest>``, and remove the copies ``snap`` does not name.
    Errors are ignored: a missing copy only makes a diff stat less precise."""
    folder = state_root / COPIES
    wanted: set[str] = set()
    for subject, digest in snap.digests.items():
        if not subject.startswith("file ") or len(digest) != 64:
            continue
        wanted.add(digest)
        target = folder / digest
        if target.exists():
            continue
        rel = subject[len("file "):]
        path = Path(rel) if os.path.isabs(rel) else rootdir / rel
        try:
            if path.stat().st_size > MAX_COPY_BYTES:
                continue
            text = path.read_bytes().decode("utf-8")
            folder.mkdir(parents=True, exist_ok=True)
            part = target.with_name(target.name + ".part")
            part.write_text(redact(text), encoding="utf-8")
            part.replace(target)
        except (OSError, UnicodeDecodeError):
            continue
    with contextlib.suppress(OSError):
        for old in folder.iterdir():
            if old.name not in wanted:
                old.unlink()


def _old_text(state_root: Path, digest: str) -> str | None:
    try:
        return (state_root / COPIES / digest).read_text("utf-8")
    except OSError:
        return None


def _counts(old: str, new: str) -> tuple[int, int]:
    """Lines added and removed from ``old`` to ``new``."""
    added = removed = 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed


def changes_stat(changes: Sequence[Change], before: Snapshot, rootdir: Path, state_root: Path,
              redact: Callable[[str], str] = lambda text: text) -> list[str]:
    """A ``git diff --stat`` of ``changes`` from ``before``: one line per change, e.g.
    ``tests/test_calc.py | 3 +1 -2``, ``tests/conftest.py | added (12 lines)``, ``criterion
    US-001::AC1 | changed``, ``folder tests/ (files) | changed: added tests/test_b.py``;
    at most :data:`MAX_LINES` lines, then ``... N more``."""
    out: list[str] = []
    for ch in changes[:MAX_LINES]:
        subject = ch.subject
        what = ch.change + (f": {ch.detail}" if ch.detail else "")
        if subject.startswith("file "):
            rel = subject[len("file "):]
            path = Path(rel) if os.path.isabs(rel) else rootdir / rel
            try:
                new = redact(path.read_bytes().decode("utf-8"))
            except (OSError, UnicodeDecodeError):
                new = None
            old_digest = before.digests.get(subject, ABSENT)
            old = "" if old_digest == ABSENT else _old_text(state_root, old_digest)
            if ch.change == "added" and new is not None:
                what = f"added ({new.count(chr(10)) + (not new.endswith(chr(10)))} lines)"
            elif ch.change == "deleted" and old is not None:
                what = f"deleted ({old.count(chr(10)) + (not old.endswith(chr(10)))} lines)"
            elif ch.change == "changed" and old is not None and new is not None:
                plus, minus = _counts(old, new)
                what = f"{plus + minus} +{plus} -{minus}"
            subject = rel
        out.append(f"{subject} | {what}")
    if len(changes) > MAX_LINES:
        out.append(f"... {len(changes) - MAX_LINES} more")
    return out


def weakening(changes: Iterable[Change]) -> list[Change]:
    """The changes a new run refuses: all but criteria that were added (a new criterion
    weakens nothing that was verified)."""
    return [ch for ch in changes
            if not (ch.subject.startswith("criterion ") and ch.change == "added")]


def check_loop_conftests(state_root: Path, rootdir: Path, anchors: Sequence[Path],
                         db_name: str = DB_NAME) -> str:
    """Why ``pytest --ralph`` must not load its initial ``conftest.py`` files now, or ``""``.

    The loop's own process loads them when it starts, before pytest-ralph compares anything,
    so a ``conftest.py`` the agent planted or edited would run inside the loop itself (and
    could switch the guard off). They are compared, before pytest loads them, with the list
    the last run's verified snapshot kept (:data:`pytest_ralph.oracle.snapshot.LOOP_CONFTESTS`,
    see :func:`pytest_ralph.oracle.snapshot.loop_conftests`). Nothing to compare (no history, a
    run of an older version) is no reason. Never raises.
    """
    from ..oracle.snapshot import (
        LOOP_CONFTESTS,
        listing_detail,
        loop_conftests,
        snapshot_from_json,
    )
    from .history import History
    from .records import HistoryError

    db = state_root / db_name
    last_id = last_status = ""
    oracle: Any = None
    if db.is_file():
        try:
            history = History.open(db, readonly=True)
        except (HistoryError, OSError, ValueError):
            history = None
        if history is not None:
            try:
                last = history.last_run()
            except Exception:  # a damaged history is the loop's to report, once it starts
                last = None
            finally:
                history.close()
            if last is not None:
                last_id, last_status, oracle = last.id, last.status, last.oracle
    pointer = read_pointer(rootdir)
    if pointer is not None and (oracle is None or pointer.get("state") != str(state_root)):
        # No history here, or it is not the one the last run kept (ralph_dir moved).
        last_id, last_status = str(pointer.get("run")), str(pointer.get("status"))
        oracle = pointer["oracle"]
    if oracle is None:
        return ""
    try:
        before = snapshot_from_json(oracle)
    except ValueError:
        return ""
    if LOOP_CONFTESTS not in before.digests:
        return ""
    digest, listing = loop_conftests(rootdir, anchors)
    if digest == before.digests[LOOP_CONFTESTS]:
        return ""
    what = listing_detail(LOOP_CONFTESTS, before.listings.get(LOOP_CONFTESTS, ()), listing)
    return (f"a conftest.py that `pytest --ralph` loads changed since the last run {last_id} "
            f"({last_status}) started ({what or 'changed'}): it would run inside the loop "
            "itself, before anything is checked, so it was not loaded; if you made this change, "
            "rerun with --ralph-accept-changes; if an agent did, restore it (for example `git "
            "checkout -- <file>`, and delete added files)")
