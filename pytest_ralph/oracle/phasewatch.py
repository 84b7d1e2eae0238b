"""The judges, watched while a check phase runs: a change that is undone before the phase
ends is still a change.

The guard (:mod:`pytest_ralph.oracle.snapshot`) compares the oracle after the agent's turn, before
the
check phase, and again after it. Code the agent wrote runs during the phase, though (the code
under test, imported by one criterion's tests; a program a ``run`` criterion starts), and could
change a judge of a *later* criterion and put it back before the phase ends: a ``conftest.py``
that forces every outcome to passed, then deletes itself; a test weakened through a hard link,
then restored.

So the loop hands the check phase's child pytest the list of its judges
(:data:`JUDGES_ENV`, a JSON file :func:`write_judges` makes from the run's snapshot): each
guarded file (present or absent; the modules the checks import from test folders among
them), each guarded folder whose file names count, and each folder whose modules could shadow
what the checks import (with those names; the distributions' metadata there counts too: a
``plug-1.0.dist-info/`` whose ``pytest11`` entry point a later criterion's pytest would load).
The child takes their signature when the first criterion starts (:class:`PhaseWatch`) and
after each criterion; from the first difference on, that criterion and every later one fail,
naming the change. A file's signature is what ``stat`` says of it, symbolic links followed
and not: inode, size, link count, modification and change time. The change time cannot be
set back by a process (the modification time can), so a file rewritten with its old content
and date still differs.

This module does not import pytest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..util.env import JUDGES_ENV
from ..util.files import digest

#: How many changed paths a message names.
_SHOWN = 5


def write_judges(path: Path, snapshot: Any, rootdir: Path) -> None:
    """Write the judges of ``snapshot`` (a :class:`pytest_ralph.oracle.snapshot.Snapshot`) to
    ``path``:
    ``{"files": [absolute paths], "folders": [absolute paths], "names": {folder: [names]}}``.
    """
    from .judges import SHADOWS, TEST_MODULES, TESTS_IMPORT
    from .snapshot import FILES

    files: list[str] = []
    folders: list[str] = []
    names: dict[str, list[str]] = {}

    def absolute(rel: str) -> str:
        return rel if os.path.isabs(rel) else os.path.join(rootdir, rel)

    for subject in snapshot.digests:
        if subject.startswith("file "):
            files.append(absolute(subject[len("file "):]))
        elif subject.startswith("pytest configuration "):
            files.append(absolute(subject[len("pytest configuration "):]))
        elif subject.startswith("folder ") and subject.endswith(FILES):
            folders.append(absolute(subject[len("folder "):-len(FILES)].rstrip("/") or "."))
        elif subject.startswith("folder ") and subject.endswith(SHADOWS):
            folder = absolute(subject[len("folder "):-len(SHADOWS)].rstrip("/") or ".")
            names[folder] = list(snapshot.watch.get(subject, ()))
        elif subject in (TEST_MODULES, TESTS_IMPORT):
            files.extend(absolute(rel) for rel in snapshot.watch.get(subject, ()))
    path.write_text(json.dumps({"files": files, "folders": folders, "names": names}),
                    encoding="utf-8")


def _file(path: str) -> tuple[object, ...]:
    """What ``stat`` and ``lstat`` say of ``path``: absent, or inode, size, links, times."""
    out: list[object] = []
    for look in (os.stat, os.lstat):
        try:
            st = look(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_mode, st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns,
                    st.st_ctime_ns))
    return tuple(out)


def _tree(folder: str) -> tuple[str, ...]:
    """The names of the files under ``folder`` (as the guard lists them), sorted."""
    from .walk import walk

    return tuple(walk(Path(folder))[0]) if os.path.isdir(folder) else ()


def _entries(folder: str, names: frozenset[str]) -> tuple[tuple[str, object], ...]:
    """The entries of ``folder`` that are one of ``names`` (``name.py``, ``name/``...), with
    their signatures; and its distributions' metadata folders (``*.dist-info``,
    ``*.egg-info``), with the digest of their ``entry_points.txt`` (the rest of the metadata
    may change: ``pip install -e .`` rewrites ``SOURCES.txt``, and ``entry_points.txt`` with
    the same text)."""
    from .judges import DIST_ENDINGS, module_name

    out: list[tuple[str, object]] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.name.endswith(DIST_ENDINGS):
                    out.append((entry.name, digest(os.path.join(entry.path, "entry_points.txt"))
                                if entry.is_dir() else "file"))
                    continue
                name = entry.name if entry.is_dir() else module_name(entry.name)
                if name in names:
                    out.append((entry.name, _file(entry.path)))
    except OSError:
        return ()
    return tuple(sorted(out))


class PhaseWatch:
    """The judges of one check phase and their signatures when it started.

    Args:
        files: guarded files (absolute; absent ones too).
        folders: guarded folders whose file names count.
        names: folders that could shadow the checks' imports -> those module names.
    """

    def __init__(self, files: Sequence[str], folders: Sequence[str],
                 names: Mapping[str, Sequence[str]]) -> None:
        self.files = list(files)
        self.folders = list(folders)
        self.names = {k: frozenset(v) for k, v in names.items()}
        self._start = self._take()
        self._changed = ""

    @classmethod
    def from_file(cls, path: str) -> PhaseWatch | None:
        """The watch of the judges listed in ``path`` (:func:`write_judges`), or ``None`` when
        it cannot be read (the check phase then fails every criterion: see
        :func:`current`)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls([str(f) for f in data["files"]], [str(f) for f in data["folders"]],
                       {str(k): [str(n) for n in v] for k, v in data["names"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _take(self) -> dict[str, object]:
        state: dict[str, object] = {}
        for f in self.files:
            state[f"file {f}"] = _file(f)
        for d in self.folders:
            state[f"folder {d}"] = _tree(d)
        for d, names in self.names.items():
            state[f"modules in {d}"] = _entries(d, names)
        return state

    def changed(self) -> str:
        """What changed since the phase started (``""``: nothing). Once something changed,
        it stays changed for the rest of the phase."""
        if self._changed:
            return self._changed
        now = self._take()
        differ = [k for k in self._start if now.get(k) != self._start[k]]
        if differ:
            shown = ", ".join(differ[:_SHOWN]) + (f", +{len(differ) - _SHOWN} more"
                                                 if len(differ) > _SHOWN else "")
            self._changed = (f"a file that judges the criteria changed while the check phase "
                             f"ran ({shown}): code that ran in the check (the code under "
                             "test, or a program a criterion started) changed it; so this "
                             "criterion and every later one of the phase fail")
        return self._changed


#: The watch of this process, once made (``[]``: not a check phase child).
_current: list[PhaseWatch | None] = []


def current() -> PhaseWatch | None:
    """The watch of this check phase's child pytest (made on first use, when the first
    criterion starts), or ``None`` outside a check phase. A judges file named by
    :data:`JUDGES_ENV` that cannot be read gives a watch that reports a change at once."""
    if not _current:
        path = os.environ.get(JUDGES_ENV)
        watch = PhaseWatch.from_file(path) if path else None
        if path and watch is None:
            watch = PhaseWatch([], [], {})
            watch._changed = (f"the check phase's list of judges ({path}) cannot be read: "
                              "nothing it checks can be trusted")
        _current.append(watch)
    return _current[0]
