"""The oracle-integrity guard: notice when the agent edits what judges its work.

At the start of a run the loop takes a :class:`Snapshot` of the *oracle*:

- every criterion definition (text, kind and check fields);
- for each ``pytest`` check, the files it names, and for a folder it names, every file in
  the folder and its subfolders plus the list of their names (a file of any kind appearing
  there is a change); the check's pytest gets no ``-c``, so also, absent ones included, the
  ``conftest.py`` and ``__init__.py`` of every folder from the rootdir down to each named
  file or folder (and of a named folder's subfolders), and the pytest section of each
  configuration file pytest would look for (:data:`CONFIG_NAMES`) in the named folder, or
  the named file's folder, and each parent up to the rootdir;
- the ``conftest.py`` files (absent ones too) in the PRD's folder and each parent up to the
  rootdir;
- ``schema`` files;
- the module of each ``python`` check, found the way import finds it, and the ``__init__``
  files of its parent packages, plus, absent, each file inside the rootdir that would win
  over them at import;
- the pytest section of the configuration file the loop passes with ``-c`` or, when there
  is none, of each configuration file pytest would look for from the PRD's folder up to the
  rootdir, absent ones included (``ralph_checks``, ``ralph_verifier`` and ``addopts`` live
  there);
- the files the ``ralph_verifier`` command names, and the names and contents of the other
  Python modules (``.py``, ``.pyc``, extension modules and packages' ``__init__`` files)
  directly in each one's folder, which comes first on a script's ``sys.path``;
- in each folder that comes first on the ``sys.path`` of a check (the rootdir, the PRD's
  folder, and the *basedir* pytest's ``prepend`` import mode inserts for each guarded test
  file and ``conftest.py``: the first folder above it without ``__init__.py``), the names
  and contents of the modules and packages that would shadow a standard-library module
  (:func:`_stdlib_listing`): pytest imports some of them late (``pdb``, say), after the
  rootdir is on ``sys.path``, so a new ``pdb.py`` there could patch pytest.

A configuration file without a pytest section counts as absent when pytest ignores it (see
:func:`_config_digest`).

After each check phase it takes another and :func:`compare` lists the :class:`Change`
objects; :func:`apply` then fails every criterion a change touches, so that the run cannot
complete on an edited oracle.

Never hashed: the targets of ``exists`` / ``file`` / ``instance`` / ``sql`` checks and
anything a ``run`` command touches (the agent is meant to change those), and a file (or
folder) named by a ``pytest`` check that did not exist at the start (the agent is meant to
write it): such a file is also left out of the name lists of the folders around it, and the
``conftest.py``, ``__init__.py`` and configuration files around it are not linked to its
criterion (they still are to the criteria of guarded tests they affect). The name lists also
leave out the check targets, and, when a target is a folder, the files in it other than
Python modules (:func:`_is_code`).

A snapshot keeps each folder's name list, so that a change to one says what was added,
removed or (for lists of modules) changed (:attr:`Change.detail`).

This module does not import pytest.
"""

from __future__ import annotations

import bisect
import configparser
import hashlib
import importlib.machinery
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..prd.model import PRD, Criterion
from ..util.files import FileTooLarge, NotRegularFile, read_bytes
from ..util.files import digest as file_digest
from .judges import SHADOWS, take, watch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

#: Digest recorded for a file (or folder) that does not exist.
ABSENT = "absent"

#: Configuration files pytest looks for in each folder from the common ancestor of its
#: arguments upwards, in its order of precedence (pytest 9).
CONFIG_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                "tox.ini", "setup.cfg")

#: Configuration files pytest takes even when they have no pytest section.
_ALWAYS_TAKEN = frozenset({"pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"})

#: Files pytest loads from each folder on the way to a test: plugins and package markers.
_SIDE_FILES = ("conftest.py", "__init__.py")

#: Folders never descended into when a ``pytest`` check names a folder.
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".venv",
                        "venv", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache"})

#: Suffixes of importable modules, in the order import tries them in one folder.
_MODULE_SUFFIXES = (*importlib.machinery.EXTENSION_SUFFIXES,
                    *importlib.machinery.SOURCE_SUFFIXES,
                    *importlib.machinery.BYTECODE_SUFFIXES)

#: How the subject of a folder's name list ends: all files (a ``pytest`` check's folder),
#: the modules in it (a verifier file's folder), or the modules and packages in it named
#: after a standard-library module (a folder first on a check's ``sys.path``).
_FILES, _MODULES, _STDLIB = " (files)", " (modules)", " (standard-library names)"

#: Top-level modules of the standard library (on every platform).
_STDLIB_NAMES = frozenset(sys.stdlib_module_names)

#: Suffixes of the files a name list keeps under a check target that is a folder: the
#: Python modules (any extension module, for any interpreter, included).
_CODE_SUFFIXES = (*_MODULE_SUFFIXES, ".py", ".pyw", ".pyc", ".so", ".pyd")

#: The check field that names the target of a criterion of each kind that has one.
_TARGET_FIELDS = {"exists": "exists", "file": "file", "schema": "instance", "sql": "db"}

#: The subject of the ``conftest.py`` files the loop's own process loads at its start.
LOOP_CONFTESTS = "folder ./ (conftest.py files pytest --ralph loads)"

_LOOP_CONFTESTS_WHAT = " (conftest.py files pytest --ralph loads)"

#: How many names :attr:`Change.detail` shows.
_DETAIL_NAMES = 5

#: Hint put first when the change added files: ``git checkout`` does not remove them.
ADDED_HINT = ("delete the files added there (a guarded folder takes no new file, not even a "
              "new test)")

#: Hint appended to the failure of a criterion whose oracle changed.
RESTORE_HINT = ("restore it (for example `git checkout -- <file>`), or rerun with "
                "--ralph-allow-criteria-edits if the change is intended")


@dataclass(frozen=True)
class Change:
    """One difference between the oracle at the start of the run and now.

    Attributes:
        subject: what changed, for people: ``criterion US-001::AC1``, ``file
            tests/test_a.py`` (relative to the rootdir), ``pytest configuration
            tests/pytest.ini`` (its pytest section), ``folder tests/ (files)`` (the names
            of the files under a folder a ``pytest`` check names) or ``folder tools/
            (modules)`` (the modules beside a file the verifier command names).
        change: ``changed``, ``deleted`` (a file, folder or pytest section that existed
            is gone), ``added`` (a guarded file or pytest section, or a criterion, that did
            not exist) or ``removed`` (a criterion that is no longer in the PRD).
        criteria: keys (``US-001::AC1``) of the criteria whose verdict depends on the
            subject.
        detail: for a folder's name list that changed, what did: ``added tests/test_b.py;
            removed tests/old.py`` (at most five names, then ``+N more``; ``changed`` names
            modules whose contents changed); empty otherwise, or when the start's snapshot
            kept no name list.
    """

    subject: str
    change: str
    criteria: tuple[str, ...]
    detail: str = ""

    def describe(self) -> str:
        """``file tests/test_a.py changed``, ``folder tests/ (files) changed: added
        tests/test_b.py``."""
        return f"{self.subject} {self.change}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Snapshot:
    """Digests of the oracle at one moment.

    Attributes:
        digests: subject -> SHA-256 hex digest, or :data:`ABSENT` for a missing file or
            folder (or a configuration file pytest ignores).
        links: subject -> keys of the criteria that depend on it.
        unguarded: files or folders named by ``pytest`` checks that did not exist at the
            start (relative paths): the agent may create them.
        listings: subject of a folder's name list -> the names it covers, relative to the
            folder, sorted; for lists of modules, each name is followed by a tab and the
            start of its file's digest. Absent for a folder that does not exist (and in
            snapshots of older versions).
        watch: the subjects learnt from what the baseline's processes imported
            (:mod:`pytest_ralph.oracle.judges`), with what each watches: the names a folder must
            not gain, the files of the environment.
    """

    digests: Mapping[str, str]
    links: Mapping[str, frozenset[str]]
    unguarded: tuple[str, ...] = ()
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    watch: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def judges(self, rootdir: Path) -> tuple[Path, ...]:
        """The files and folders inside ``rootdir`` that judge the agent's work, as they
        exist now: each guarded file (tests, ``conftest.py``, configuration files, schemas,
        modules of ``python`` checks) that exists, and each folder whose file names are
        guarded (a folder a ``pytest`` check names). A confined check phase gets them
        read-only (:func:`pytest_ralph.sandbox.bwrap.check_confinement`)."""
        out: list[Path] = []
        for subject, digest in self.digests.items():
            if digest == ABSENT:
                continue
            if subject.startswith("file "):
                rel = subject[len("file "):]
            elif subject.startswith("pytest configuration "):
                rel = subject[len("pytest configuration "):]
            elif subject.startswith("folder ") and subject.endswith(_FILES):
                rel = subject[len("folder "):-len(_FILES)].rstrip("/") or "."
            else:
                continue
            if os.path.isabs(rel):
                continue  # outside the project: read-only to a confined phase anyway
            path = rootdir / rel
            if os.path.lexists(path):
                out.append(path)
        return tuple(out)


def snapshot_to_json(snap: Snapshot) -> dict[str, Any]:
    """``snap`` as a JSON object: ``{"digests": {subject: digest}, "links": {subject:
    [criterion key, ...]}, "unguarded": [path, ...], "listings": {subject: [name, ...]}}``."""
    return {"digests": dict(snap.digests),
            "links": {k: sorted(v) for k, v in snap.links.items()},
            "unguarded": list(snap.unguarded),
            "listings": {k: list(v) for k, v in snap.listings.items()},
            "watch": {k: list(v) for k, v in snap.watch.items()}}


def snapshot_from_json(data: Mapping[str, Any]) -> Snapshot:
    """The snapshot :func:`snapshot_to_json` gave.

    Raises:
        ValueError: ``data`` is not of that shape.
    """
    try:
        return Snapshot({str(k): str(v) for k, v in data["digests"].items()},
                        {str(k): frozenset(map(str, v)) for k, v in data["links"].items()},
                        tuple(map(str, data.get("unguarded", ()))),
                        {str(k): tuple(map(str, v))
                         for k, v in data.get("listings", {}).items()},
                        {str(k): tuple(map(str, v))
                         for k, v in data.get("watch", {}).items()})
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not an oracle snapshot: {exc!r}") from None


def snapshot(prd: PRD, rootdir: Path, *, inifile: Path | None = None,
             stories: Sequence[str] = (), search_path: Sequence[str] | None = None,
             verifier: str | None = None, start: Snapshot | None = None,
             pythonpath: Sequence[Path] = (), loop_anchors: Sequence[Path] = ()) -> Snapshot:
    """Take a snapshot of the oracle of ``prd``.

    Args:
        prd: the PRD as it is on disk now.
        rootdir: the project root; relative paths in checks start there.
        inifile: the pytest configuration file the checks use (passed with ``-c`` to the
            child pytest, not to the pytest a ``pytest`` check starts), or ``None``.
        stories: only these story ids (empty: all).
        search_path: where ``python`` check modules are looked for after ``rootdir``
            (default ``sys.path``).
        pythonpath: the folders of ini ``pythonpath``: pytest puts them first on
            ``sys.path``, so standard-library names in them are guarded like the rootdir's.
        verifier: the ``ralph_verifier`` command line: the files it names inside the
            rootdir (its script, say), and the modules beside them, decide every text
            criterion.
        start: the run's first snapshot, when this is a later one: files it did not
            guard stay unguarded, and everything it guarded is hashed even if no criterion
            names it any more.
        loop_anchors: where the loop's own pytest looks for its initial ``conftest.py`` files
            (its arguments and ``testpaths``, see :func:`loop_conftests`).

    Returns:
        The snapshot. Files are read in full (SHA-256); nothing is imported or run.

    Subjects: ``criterion <key>``, ``file <path>``, ``pytest configuration <path>`` (the
    digest of the file's pytest section), ``folder <path>/ (files)`` (the names of the files
    under a folder a ``pytest`` check names), ``folder <path>/ (modules)`` (the names and
    digests of the modules in a verifier file's folder) and ``folder <path>/ (standard-library
    names)`` (the names and digests of the modules and packages in a folder first on a
    check's ``sys.path`` that would shadow the standard library's); paths are relative to
    the rootdir.
    """
    root = rootdir.resolve()
    digests: dict[str, str] = {}
    links: dict[str, set[str]] = {}
    listings: dict[str, tuple[str, ...]] = {}
    unguarded: set[str] = set(start.unguarded) if start else set()
    selected = [st for st in prd.stories if not stories or st.id in stories]
    every = {c.key for st in selected for c in st.criteria}
    started = start.digests if start is not None else {}
    rels: dict[Path, str] = {}
    chains: dict[Path, list[Path]] = {}
    basedirs: dict[Path, Path] = {}
    modules: dict[str, list[tuple[Path, bool]]] = {}
    around: dict[tuple[Path, bool], list[str]] = {}
    found_elsewhere: dict[str, bool] = {}
    named = _command_files(verifier, rootdir) if verifier else []

    def rel_of(path: Path) -> str:
        """``path`` relative to the rootdir (symbolic links resolved), cached per path."""
        if path not in rels:
            rels[path] = _rel(path, root)
        return rels[path]

    def chain(folder: Path) -> list[Path]:
        """``folder`` and each parent up to the rootdir (resolved), cached per folder."""
        if folder not in chains:
            chains[folder] = _chain(folder, root)
        return chains[folder]

    def basedir(folder: Path) -> Path:
        """The folder pytest's ``prepend`` import mode puts first on ``sys.path`` for a
        module in ``folder``, cached per folder."""
        if folder not in basedirs:
            basedirs[folder] = _basedir(folder)
        return basedirs[folder]

    def link(subject: str, keys: Iterable[str]) -> None:
        links.setdefault(subject, set()).update(keys)

    def guard_file(path: Path, keys: Iterable[str], *, optional: bool = False,
                   rel: str | None = None) -> None:
        rel = rel_of(path) if rel is None else rel
        subject = f"file {rel}"
        if subject not in digests:
            if rel in unguarded:
                return
            digest = _file_digest(path)
            if digest == ABSENT and not optional and subject not in started:
                unguarded.add(rel)
                return
            digests[subject] = digest
        link(subject, keys)

    def guard_config(path: Path, keys: Iterable[str]) -> None:
        subject = f"pytest configuration {rel_of(path)}"
        if subject not in digests:
            digests[subject] = _config_digest(path, root)
        link(subject, keys)

    def guard_folder(path: Path, what: str, keys: Iterable[str]) -> None:
        subject = f"folder {rel_of(path)}/{what}"
        if subject not in digests:
            take_folder(subject, rel_of(path), what)
        link(subject, keys)

    def take_folder(subject: str, base: str, what: str) -> None:
        """Record the digest and name list ``what`` of the folder ``base`` (relative to the
        rootdir) under ``subject``."""
        skip = skipper(base)
        folder = rootdir / base
        if what == _FILES:
            digest, listing = _files_listing(folder, skip)
        elif what == _MODULES:
            beside = frozenset(f.name for f in named if rel_of(f.parent) == base)
            digest, listing = _modules_listing(folder, lambda n: n in beside or skip(n))
        else:
            digest, listing = _stdlib_listing(folder, skip, is_elsewhere)
        digests[subject] = digest
        if listing is not None:
            listings[subject] = listing

    def is_elsewhere(name: str) -> bool:
        """Whether import finds the top-level module ``name`` outside the rootdir, cached."""
        if name not in found_elsewhere:
            found_elsewhere[name] = _found_elsewhere(name, root)
        return found_elsewhere[name]

    def guard_around(folders: Iterable[Path], keys: Iterable[str], *,
                     configs: bool = True) -> None:
        """Guard the ``conftest.py`` and ``__init__.py`` (absent included) and, with
        ``configs``, the configuration files pytest would look for, in each of ``folders``
        (their subjects are worked out once per folder), and the standard-library names in
        the basedir of each ``conftest.py`` there."""
        keys = tuple(keys)
        for folder in folders:
            subjects = around.get((folder, configs))
            if subjects is None:
                base = rel_of(folder)
                for name in _SIDE_FILES:
                    guard_file(folder / name, (), optional=True, rel=_join(base, name))
                subjects = [f"file {_join(base, name)}" for name in _SIDE_FILES]
                if digests.get(subjects[0], ABSENT) != ABSENT:  # conftest.py: imported
                    where = basedir(folder)
                    guard_folder(where, _STDLIB, ())
                    subjects.append(f"folder {rel_of(where)}/{_STDLIB}")
                if configs:
                    for name in CONFIG_NAMES:
                        guard_config(folder / name, ())
                        subjects.append(f"pytest configuration {rel_of(folder / name)}")
                subjects = around[(folder, configs)] = [x for x in subjects if x in digests]
            for subject in subjects:
                link(subject, keys)

    def guard_tests(path: Path, keys: Iterable[str]) -> None:
        """Guard a ``pytest`` check's target (a file or folder) and what pytest loads with
        it; nothing when it is unguarded, not even the ``conftest.py`` beside it."""
        rel = rel_of(path)
        if rel in unguarded:
            return
        if path.is_dir() or f"folder {rel}/{_FILES}" in started:
            files, folders = _walk(path)
            for name in files:
                guard_file(path / name, keys, rel=_join(rel, name))
            guard_folder(path, _FILES, keys)
            guard_around(chain(path), keys)
            guard_around((path / sub for sub in folders), keys, configs=False)
            for sub in (path, *(path / sub for sub in folders)):
                guard_folder(basedir(sub), _STDLIB, keys)
        else:
            guard_file(path, keys)
            guard_around(chain(path.parent), keys)
            guard_folder(basedir(path.parent), _STDLIB, keys)

    def guard_collected(folder: Path, keys: Iterable[str]) -> None:
        """Guard what a bare ``pytest`` in ``folder`` collects (a ``run`` command with no
        path): each test file under it (``test_*.py``, ``*_test.py``), and the
        ``conftest.py`` and ``__init__.py`` of every folder on the way (absent ones included,
        so a new ``conftest.py`` counts), and the configuration files around it. New test
        files may be added: the agent may write tests."""
        files, folders = _walk(folder)
        for name in files:
            leaf = name.rpartition("/")[2]
            if leaf.endswith(".py") and (leaf.startswith("test_") or leaf.endswith("_test.py")):
                guard_file(folder / name, keys)
        guard_around(chain(folder), keys)
        guard_around((folder / sub for sub in folders), keys, configs=False)
        guard_folder(basedir(folder), _STDLIB, keys)

    def skipper(base: str) -> Callable[[str], bool]:
        """Whether a path relative to the folder ``base`` (relative to the rootdir) is left
        out of its name lists: an unguarded file or folder or a file in one, a check target,
        or a file in a check target other than a Python module."""
        prefix = "" if base == "." else base + "/"
        whole = frozenset(u[len(prefix):] for u in unguarded if u.startswith(prefix))
        # The targets under the folder, found in the sorted list without going through it
        # all: there may be thousands.
        lo = bisect.bisect_left(ordered, prefix)
        hi = bisect.bisect_left(ordered, prefix[:-1] + "0") if prefix else len(ordered)
        exact = frozenset(t[len(prefix):] for t in ordered[lo:hi])
        if not whole and not exact:
            return _never
        return lambda name: (_skipped(name, whole) or name in exact
                             or (not _is_code(name) and _skipped(name, exact)))

    targets: set[str] = set()
    prefixes = {str(root), os.path.abspath(rootdir)}
    for story in selected:
        for c in story.criteria:
            subject = f"criterion {c.key}"
            digests[subject] = _definition_digest(c)
            link(subject, [c.key])
            if c.kind in _TARGET_FIELDS:
                for target in _check_targets(c):
                    targets.add(_lexical_rel(target, prefixes))
    ordered = sorted(targets)
    prd_folder = prd.path.parent
    for folder in chain(prd_folder):
        guard_file(folder / "conftest.py", every, optional=True)
    # A test file named by a pytest check that does not exist yet is the agent's to write:
    # known before any folder's name list is taken, so that those lists leave it out.
    for c in (c for st in selected for c in st.criteria if c.kind == "pytest"):
        for target in _pytest_targets(c):
            path = rootdir / target.split("::", 1)[0]
            rel = rel_of(path)
            if (f"file {rel}" not in started and f"folder {rel}/{_FILES}" not in started
                    and not path.exists()):
                unguarded.add(rel)
    # The check phase's pytest has the rootdir first on sys.path by the time it imports
    # some standard-library modules (pdb, say), and the basedir of each conftest.py it
    # loads on the way to the PRD.
    for folder in (root, prd_folder, *(basedir(f) for f in chain(prd_folder) if digests.get(
            f"file {rel_of(f / 'conftest.py')}", ABSENT) != ABSENT), *pythonpath):
        guard_folder(folder, _STDLIB, every)
    for story in selected:
        for c in story.criteria:
            if c.kind == "pytest":
                for target in _pytest_targets(c):
                    guard_tests(rootdir / target.split("::", 1)[0], [c.key])
            elif c.kind == "run" and c.command:
                run_cwd = (rootdir / c.cwd) if c.cwd else rootdir
                for where, named_tests in run_pytest_targets(c.command, run_cwd):
                    if named_tests:
                        for test in named_tests:
                            guard_tests(where / test.split("::", 1)[0], [c.key])
                    elif where.is_dir() and (where.resolve() == root or
                                             root in where.resolve().parents):
                        guard_collected(where, [c.key])
            for path, optional in _linked_files(c, rootdir, root, search_path, modules):
                guard_file(path, [c.key], optional=optional)
    if named:
        texts = {c.key for st in selected for c in st.criteria if c.kind == "text"}
        for path in named:
            guard_file(path, texts)
            guard_folder(path.parent, _MODULES, texts)
    # The check phase's pytest gets -c (an empty file when there is no configuration file)
    # and --confcutdir; a pytest that a `run` command starts finds its configuration like
    # pytest does, from its folder up: one the agent creates counts, above the project too.
    if inifile is not None:
        guard_config(inifile, every)
    else:
        for folder in [*chain(prd_folder), root]:
            for name in CONFIG_NAMES:
                guard_config(folder / name, every)
    for folder in root.parents:
        for name in CONFIG_NAMES:
            guard_config(folder / name, every)
        for name in ("conftest.py", "setup.py"):  # setup.py: pytest's rootdir marker
            guard_file(folder / name, every, optional=True)
    # The check phase's pytest (run on the PRD) loads them from the PRD's folder too.
    anchors = tuple(Path(p) for p in (start.watch.get(LOOP_CONFTESTS, ()) if start else
                                       (*loop_anchors, prd_folder)))
    digests[LOOP_CONFTESTS], listings[LOOP_CONFTESTS] = loop_conftests(rootdir, anchors)
    link(LOOP_CONFTESTS, every)
    watched = dict(start.watch) if start is not None else {}
    watched[LOOP_CONFTESTS] = tuple(str(a) for a in anchors)
    for subject, params in watched.items():
        if subject == LOOP_CONFTESTS:
            continue
        digests[subject], listings[subject] = take(subject, params, rootdir)
        link(subject, every | set(start.links.get(subject, ()) if start else ()))
    for subject in started:  # what was guarded at the start stays guarded
        if subject in digests or subject.startswith("criterion "):
            continue
        if subject.startswith("file "):
            digests[subject] = _file_digest(rootdir / subject[len("file "):])
        elif subject.startswith("pytest configuration "):
            digests[subject] = _config_digest(
                rootdir / subject[len("pytest configuration "):], root)
        elif subject.startswith("folder ") and subject.endswith((_FILES, _MODULES, _STDLIB)):
            what = next(w for w in (_FILES, _MODULES, _STDLIB) if subject.endswith(w))
            base = subject[len("folder "):-len(what)].rstrip("/") or "/"
            take_folder(subject, base, what)
        else:  # a kind of subject this version does not take: keep it as it was
            digests[subject] = started[subject]
        link(subject, start.links.get(subject, ()) if start is not None else ())
    return Snapshot(digests, {k: frozenset(v) for k, v in links.items()},
                    tuple(sorted(unguarded)), listings, watched)


def with_imports(snap: Snapshot, imports: Sequence[Mapping[str, Any]], rootdir: Path,
                 folders: Iterable[Path] = ()) -> Snapshot:
    """``snap`` plus the subjects :func:`pytest_ralph.oracle.judges.watch` finds in the imports
    report of a check phase (the baseline's, before any agent ran), taken now and linked to
    every criterion ``snap`` knows. ``folders`` are more folders inside the project that come
    first on a check's ``sys.path``."""
    found = watch(imports, rootdir, folders)
    every = frozenset(k for subject, keys in snap.links.items() if subject.startswith(
        "criterion ") for k in keys)
    digests, links = dict(snap.digests), dict(snap.links)
    listings, watched = dict(snap.listings), dict(snap.watch)
    for subject, params in found.items():
        digests[subject], listings[subject] = take(subject, params, rootdir)
        links[subject] = every
        watched[subject] = params
    return replace(snap, digests=digests, links=links, listings=listings, watch=watched)


def compare(start: Snapshot, now: Snapshot) -> list[Change]:
    """What changed from ``start`` to ``now``, in ``start``'s order, additions last."""
    out: list[Change] = []
    for subject, before in start.digests.items():
        after = now.digests.get(subject)
        if after == before:
            continue
        keys = tuple(sorted(start.links.get(subject, frozenset()) |
                            now.links.get(subject, frozenset())))
        if after is None:
            change = "removed"
        elif after == ABSENT:
            change = "deleted"
        elif before == ABSENT:
            change = "added"
        else:
            change = "changed"
        detail = ""
        if change == "changed" and subject in start.listings and subject in now.listings:
            detail = _listing_detail(subject, start.listings[subject], now.listings[subject])
        out.append(Change(subject, change, keys, detail))
    for subject in now.digests:
        if subject not in start.digests and subject.startswith("criterion "):
            out.append(Change(subject, "added", tuple(sorted(now.links.get(subject, ())))))
    return out


def _rel(path: Path, root: Path) -> str:
    """``path`` (symbolic links resolved) relative to the resolved rootdir ``root``, as a
    POSIX path (``.`` for the rootdir itself); ``str(path)`` when it is outside."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _join(base: str, name: str) -> str:
    """The relative path ``name`` (POSIX) inside the folder ``base`` (as :func:`_rel` gives
    it)."""
    return name if base == "." else f"{base.rstrip('/')}/{name}"


def _chain(folder: Path, root: Path) -> list[Path]:
    """``folder`` and each of its parents up to the resolved rootdir ``root``, resolved; just
    ``folder`` when it is not inside ``root``."""
    out = []
    here = folder.resolve()
    while True:
        out.append(here)
        if here == root or root not in here.parents:
            return out
        here = here.parent


def _file_digest(path: Path) -> str:
    """What the guard records for a file (:func:`pytest_ralph.util.files.digest`): its SHA-256;
    :data:`ABSENT` when there is none (or a folder); ``special: <kind>`` for a FIFO, a device
    or a socket (never read); ``large: ...`` past 64 MiB (never read whole);
    ``unreadable: <why>``."""
    return file_digest(path)


def _definition_digest(c: Criterion) -> str:
    data = {"text": c.text, "kind": c.kind, "spec": c.spec, "command": c.command,
            "timeout": c.timeout, "cwd": c.cwd}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _config_digest(inifile: Path, root: Path) -> str:
    """The digest of the pytest section of a configuration file: ``[pytest]`` in
    ``pytest.toml`` and ``.pytest.toml``; ``[tool.pytest]`` (which holds
    ``[tool.pytest.ini_options]``) in ``pyproject.toml``; both in another TOML file; the
    first of ``[pytest]`` and ``[tool:pytest]`` in an INI file (keys keep their case).

    Other sections (dependencies, say) may change freely. A file that cannot be parsed has
    the digest of its bytes; a missing one is :data:`ABSENT`, and so is one without a pytest
    section when pytest ignores it then: any file but ``pytest.ini``, ``.pytest.ini``,
    ``pytest.toml`` and ``.pytest.toml`` (which pytest always takes) and a ``pyproject.toml``
    in a folder other than the resolved rootdir ``root`` (which pytest takes for lack of any
    other configuration file, moving its rootdir there). Otherwise, a file without a pytest
    section has the digest of ``None``: its appearing is a change."""
    try:
        raw = read_bytes(inifile, 16 * 1024 * 1024)  # never blocks on a FIFO
    except NotRegularFile as exc:
        return ABSENT if exc.kind == "a folder" else f"special: {exc.kind}"
    except FileTooLarge:
        return _file_digest(inifile)
    except OSError:
        return ABSENT
    section: object = None
    try:
        if inifile.suffix == ".toml":
            document = tomllib.loads(raw.decode("utf-8"))
            tool = document.get("tool", {}).get("pytest")
            if inifile.name in ("pytest.toml", ".pytest.toml"):
                section = document.get("pytest")
            elif inifile.name == "pyproject.toml" or "pytest" not in document:
                section = tool
            else:
                section = [document["pytest"], tool]
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            parser.read_string(raw.decode("utf-8"))
            for name in ("pytest", "tool:pytest"):
                if parser.has_section(name):
                    section = dict(parser.items(name))
                    break
    except (ValueError, configparser.Error, AttributeError):
        return "unparsable: " + hashlib.sha256(raw).hexdigest()
    if section is None and inifile.name not in _ALWAYS_TAKEN and (
            inifile.name != "pyproject.toml" or inifile.resolve().parent == root):
        return ABSENT
    return hashlib.sha256(json.dumps(section, sort_keys=True, default=str).encode()).hexdigest()


def _pytest_targets(c: Criterion) -> list[str]:
    """The node ids or paths of a ``pytest`` criterion."""
    targets = c.spec.get("pytest")
    return [str(t) for t in targets] if isinstance(targets, list) else [str(targets)]


def _check_targets(c: Criterion) -> list[str]:
    """The paths (relative to the rootdir) an ``exists``, ``file``, ``schema`` or ``sql``
    criterion looks at and the agent is meant to write: the path, the ``instance``, the
    ``db``."""
    field_name = _TARGET_FIELDS.get(c.kind)
    target = c.spec.get(field_name) if field_name else None
    return [str(target)] if isinstance(target, str) and target else []


def _lexical_rel(target: str, roots: Iterable[str]) -> str:
    """The path ``target`` (relative to the rootdir, or absolute) relative to the rootdir as
    :func:`_rel` gives it, worked out from the text alone (``..`` included; symbolic links
    are not resolved: thousands of targets cost next to nothing). ``roots`` are the
    rootdir's absolute paths, resolved and as given."""
    if os.sep == "/" and not (target.startswith(("/", ".")) or target.endswith("/")
                              or "/." in target or "//" in target):
        return target  # already normal
    path = os.path.normpath(target)
    if not os.path.isabs(path) and path != os.pardir and not path.startswith(
            os.pardir + os.sep):
        return path.replace(os.sep, "/")
    roots = list(roots)
    path = os.path.normpath(os.path.join(roots[0], target))
    for prefix in roots:
        if path == prefix:
            return "."
        if path.startswith(prefix.rstrip(os.sep) + os.sep):
            return path[len(prefix.rstrip(os.sep)) + 1:].replace(os.sep, "/")
    return path


def _basedir(folder: Path) -> Path:
    """The folder pytest's ``prepend`` import mode inserts first on ``sys.path`` to import a
    module (a test file or ``conftest.py``) in ``folder``: the first of ``folder`` and its
    parents without an ``__init__.py`` (resolved)."""
    here = folder.resolve()
    while os.path.isfile(os.path.join(here, "__init__.py")) and here.parent != here:
        here = here.parent
    return here


def _linked_files(c: Criterion, rootdir: Path, root: Path, search_path: Sequence[str] | None,
                  modules: dict[str, list[tuple[Path, bool]]]) -> list[tuple[Path, bool]]:
    """(file, optional) pairs that decide the verdict of ``c``, a criterion of a kind other
    than ``pytest``. An optional file is guarded even when it is absent (its appearing is a
    change). ``modules`` caches :func:`_module_files` per module name."""
    if c.kind == "schema":
        schema = str(c.spec["schema"])
        return [] if "://" in schema else [(rootdir / schema, False)]
    if c.kind == "python":
        module = str(c.spec["python"]).partition(":")[0]
        if module not in modules:
            roots = [str(rootdir), *(sys.path if search_path is None else search_path)]
            modules[module] = _module_files(module, roots, root)
        return modules[module]
    return []


def _module_files(module: str, roots: Sequence[str], root: Path) -> list[tuple[Path, bool]]:
    """(file, optional) pairs that decide what ``import module`` loads, found the way import
    finds them but without importing anything.

    For each dotted name in turn, import looks in each folder of its search path (``roots``
    for the first name, the parent package's folder for the others) for a package,
    ``name/__init__`` with a module suffix, then for a module, ``name`` with a module suffix
    (extension modules first, then ``.py``, then ``.pyc``); a folder without ``__init__`` is
    a namespace package portion, used only when no folder holds a package or module of that
    name. Each file found (the module, and the ``__init__`` of each parent package) is
    guarded as it is (not optional); each candidate inside the rootdir tried before it is
    guarded absent (optional): creating it would shadow the file found. Empty when the
    module is not found (it may be the agent's to write).
    """
    out: list[tuple[Path, bool]] = []
    inside: dict[Path, bool] = {}
    folders = [Path(r or ".") for r in roots]
    names = module.split(".")
    for i, name in enumerate(names):
        found: Path | None = None
        portions: list[Path] = []
        for folder in folders:
            if folder not in inside:
                where = folder.resolve()
                inside[folder] = where == root or root in where.parents
            package = folder / name
            tried = [package / f"__init__{s}" for s in _MODULE_SUFFIXES]
            is_package = package.is_dir()
            if is_package:
                found = next((p for p in tried if p.is_file()), None)
                if found is not None:
                    tried = tried[:tried.index(found)]
            if found is None:
                candidates = [folder / f"{name}{s}" for s in _MODULE_SUFFIXES]
                found = next((p for p in candidates if p.is_file()), None)
                tried += candidates if found is None else candidates[:candidates.index(found)]
            if inside[folder]:
                out += [(p, True) for p in tried]
            if found is not None:
                break
            if is_package:
                portions.append(package)
        if found is None and not portions:
            return []
        if found is None:  # a namespace package: its portions are searched next
            folders = portions
            continue
        out.append((found, False))
        if found.name.startswith("__init__."):
            folders = [found.parent]
        elif i < len(names) - 1:  # a module is not a package: the import fails
            return []
    return out


#: Words that start a pytest run in a shell command (alone, or after ``python -m``).
_PYTEST_WORDS = frozenset({"pytest", "py.test"})

#: pytest options whose value is the next word (not a path to test).
_VALUED = frozenset({"-k", "-m", "-p", "-o", "-c", "-n", "-W", "-r", "--rootdir",
                     "--confcutdir", "--basetemp", "--tb", "--maxfail", "--deselect",
                     "--ignore", "--ignore-glob", "--junitxml", "--junit-xml", "--durations",
                     "--import-mode", "--dist", "--tx", "--override-ini", "--capture",
                     "--log-level", "--cov", "--cov-report", "--timeout", "--ralph-prd"})


def run_pytest_targets(command: str, cwd: Path) -> list[tuple[Path, list[str]]]:
    """The pytest runs a ``run`` command starts, read from the command line: for each
    ``pytest ...``, ``py.test ...`` or ``python -m pytest ...`` (a path to any of them
    included) in the shell command, the folder it runs in (following ``cd DIR &&``) and its
    test paths and node ids (empty: what pytest collects by itself). Words after shell
    operators (``&&``, ``;``, ``|``) start a new command. A command that cannot be split
    gives nothing."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        return []
    out: list[tuple[Path, list[str]]] = []
    here = cwd
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in ("&&", "||", ";", "|", "&"):
            segment.append(word)
            continue
        if segment:
            if segment[0] == "cd" and len(segment) > 1:
                here = here / segment[1]
            else:
                args = _pytest_args(segment)
                if args is not None:
                    targets: list[str] = []
                    skip = False
                    for arg in args:
                        if skip:
                            skip = False
                        elif arg in _VALUED:
                            skip = True
                        elif not arg.startswith("-"):
                            targets.append(arg)
                    out.append((here, targets))
        segment = []
    return out


def _pytest_args(words: list[str]) -> list[str] | None:
    """The arguments after ``pytest`` when ``words`` is a pytest run (``env VAR=x`` and
    ``timeout N`` in front allowed), else ``None``."""
    i = 0
    while i < len(words) and (("=" in words[i] and not words[i].startswith("-"))
                              or words[i] in ("env", "exec", "nice", "time")):
        i += 1
    if i < len(words) and words[i] == "timeout":
        i += 2
    if i >= len(words):
        return None
    name = os.path.basename(words[i])
    if name in _PYTEST_WORDS:
        return words[i + 1:]
    if name.startswith("python") and len(words) > i + 2 and words[i + 1] == "-m" and \
            words[i + 2] in _PYTEST_WORDS:
        return words[i + 3:]
    return None


def loop_conftests(rootdir: Path, anchors: Sequence[Path] = ()) -> tuple[str, tuple[str, ...]]:
    """The digest and name list (``path<TAB>digest`` items, relative to ``rootdir``) of the
    ``conftest.py`` files a pytest started in ``rootdir`` loads before any test is collected,
    the way pytest finds its initial conftests: in each of ``anchors`` (its arguments or
    ``testpaths``; the rootdir itself always) and each parent up to the rootdir, and in each
    ``test*`` folder of those. ``pytest --ralph`` loads them into the loop's own process, before
    pytest-ralph can check anything: :func:`pytest_ralph.state.verified.check_loop_conftests`
    compares them with the last run's before pytest loads them."""
    root = rootdir.resolve()
    folders: dict[Path, None] = {}
    for anchor in (root, *anchors):
        here = anchor.resolve()
        if here != root and root not in here.parents:
            continue
        for folder in _chain(here, root):
            folders[folder] = None
        try:
            for sub in sorted(here.iterdir()):
                if sub.name.startswith("test") and sub.is_dir():
                    folders[sub.resolve()] = None
        except OSError:
            continue
    pairs: list[tuple[str, str]] = []
    for folder in folders:
        path = folder / "conftest.py"
        digest = _file_digest(path)
        if digest != ABSENT:
            pairs.append((_rel(path, root), digest))
    pairs.sort()
    listing = tuple(f"{name}\t{digest[:16]}" for name, digest in pairs)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest(), listing


def _command_files(command: str, rootdir: Path) -> list[Path]:
    """The words of a command line that name files inside ``rootdir`` (resolved)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    root = rootdir.resolve()
    out = []
    for word in words:
        path = (rootdir / word).resolve() if not word.startswith("-") else None
        if path is not None and path.is_file() and root in path.parents:
            out.append(path)
    return out


def _walk(folder: Path) -> tuple[list[str], list[str]]:
    """(files, subfolders) under ``folder``, as sorted POSIX paths relative to it: every
    file except ``.pyc`` / ``.pyo`` files, descending into every folder except
    :data:`_SKIP_DIRS` and hidden ones (a folder reached twice through symbolic links is
    walked once)."""
    files: list[str] = []
    folders: list[str] = []
    seen: set[tuple[int, int]] = set()

    def visit(path: str, prefix: str) -> None:
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            if is_dir:
                if entry.name not in _SKIP_DIRS and not entry.name.startswith("."):
                    folders.append(prefix + entry.name)
                    visit(entry.path, prefix + entry.name + "/")
            elif is_file and not entry.name.endswith((".pyc", ".pyo")):
                files.append(prefix + entry.name)

    visit(str(folder), "")
    return files, folders


def _files_listing(folder: Path, skip: Callable[[str], bool]
                   ) -> tuple[str, tuple[str, ...] | None]:
    """The digest of the names of the files :func:`_walk` finds under ``folder``, less those
    ``skip`` says (given a path relative to ``folder``), and the names; :data:`ABSENT` and
    ``None`` when it is not a folder."""
    if not folder.is_dir():
        return ABSENT, None
    names = [name for name in _walk(folder)[0] if not skip(name)]
    return hashlib.sha256(json.dumps(names).encode()).hexdigest(), tuple(names)


def _never(name: str) -> bool:
    return False


def _is_code(name: str) -> bool:
    """Whether the file ``name`` is a Python module (source, bytecode or extension)."""
    return name.endswith(_CODE_SUFFIXES)


def _skipped(name: str, skip: frozenset[str]) -> bool:
    """Whether the relative path ``name`` or one of its parent folders is in ``skip``."""
    while True:
        if name in skip:
            return True
        name, sep, _ = name.rpartition("/")
        if not sep:
            return False


def _modules_listing(folder: Path, skip: Callable[[str], bool]
                     ) -> tuple[str, tuple[str, ...] | None]:
    """The digest of the names and contents of the modules directly in ``folder``: files
    with a module suffix and the ``__init__`` files of the packages in it (what a script in
    ``folder`` imports first), less the files ``skip`` says (the files the verifier command
    names, guarded on their own, and check targets), and their names (see
    :func:`_pairs_listing`); :data:`ABSENT` and ``None`` when it is not a folder."""
    names: list[str] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.is_dir():
                    names += [f"{entry.name}/__init__{s}" for s in _MODULE_SUFFIXES
                              if os.path.isfile(os.path.join(entry.path, f"__init__{s}"))]
                elif (entry.name.endswith(_MODULE_SUFFIXES) and not skip(entry.name)
                      and entry.is_file()):
                    names.append(entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT, None
    except OSError as exc:
        return f"unreadable: {exc.strerror}", None
    return _pairs_listing(folder, names)


def _stdlib_listing(folder: Path, skip: Callable[[str], bool],
                    elsewhere: Callable[[str], bool]) -> tuple[str, tuple[str, ...] | None]:
    """The digest of the names and contents of what, directly in ``folder``, would shadow a
    standard-library module when ``folder`` is first on ``sys.path``, and their names (see
    :func:`_pairs_listing`); :data:`ABSENT` and ``None`` when it is not a folder.

    That is, for a name in :data:`_STDLIB_NAMES`: a module (``name.py``, ``name.pyc``, an
    extension module ``name.*.so`` or ``name.*.pyd``), a package (``name/__init__.py`` or
    another ``__init__`` module; its ``__init__`` files are hashed), or a folder ``name/``
    without one when import finds no module ``name`` outside the rootdir (``elsewhere``
    says; a namespace package loses to any module or package of its name later on the
    path). Entries ``skip`` says (given the name) are left out. One ``os.scandir``; only
    the entries found are read."""
    names: list[str] = []
    spaces: list[str] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                name = entry.name
                if _module_name(name) in _STDLIB_NAMES and not skip(name) and entry.is_file():
                    names.append(name)
                elif name in _STDLIB_NAMES and not skip(name) and entry.is_dir():
                    inits = [f"{name}/__init__{s}" for s in _MODULE_SUFFIXES
                             if os.path.isfile(os.path.join(entry.path, f"__init__{s}"))]
                    if inits:
                        names += inits
                    elif not elsewhere(name):
                        spaces.append(name + "/")
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT, None
    except OSError as exc:
        return f"unreadable: {exc.strerror}", None
    return _pairs_listing(folder, names, spaces)


def _module_name(filename: str) -> str | None:
    """The module a file named ``filename`` is imported as: ``pdb`` for ``pdb.py``,
    ``pdb.pyc`` or ``pdb.cpython-311-x86_64-linux-gnu.so``; ``None`` for other files."""
    if filename.endswith((".so", ".pyd")):
        return filename.partition(".")[0]
    for suffix in _MODULE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return None


def _found_elsewhere(name: str, root: Path) -> bool:
    """Whether import finds a module or regular package named ``name`` (a top-level name)
    built in, frozen, or in a folder of ``sys.path`` outside the resolved rootdir ``root``.
    Nothing is imported."""
    if name in sys.builtin_module_names:
        return True
    try:
        if importlib.machinery.FrozenImporter.find_spec(name) is not None:
            return True
        path = []
        for entry in sys.path:
            where = Path(entry or ".").resolve()
            if where != root and root not in where.parents:
                path.append(entry)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
    except (ImportError, TypeError, ValueError, OSError):
        return False
    return spec is not None and spec.origin is not None


def _pairs_listing(folder: Path, names: list[str], spaces: Sequence[str] = ()
                   ) -> tuple[str, tuple[str, ...]]:
    """The digest of the sorted (name, digest of ``folder / name``) pairs of ``names``, and
    of the folder names ``spaces`` (namespace packages, named only), and the name list
    :attr:`Snapshot.listings` keeps: each name, a tab and the start of its digest."""
    pairs = [(name, _file_digest(folder / name)) for name in sorted(names)]
    if spaces:
        pairs = sorted([*pairs, *((name, "namespace") for name in spaces)])
    listing = tuple(f"{name}\t{digest[:16]}" for name, digest in pairs)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest(), listing


def _listing_detail(subject: str, before: Sequence[str], after: Sequence[str]) -> str:
    """What changed between two name lists of the folder ``subject``: ``added a, b;
    removed c; changed d`` (paths relative to the rootdir; at most :data:`_DETAIL_NAMES`
    names, then ``+N more``)."""
    what = next((w for w in (_FILES, _MODULES, _STDLIB, SHADOWS, _LOOP_CONFTESTS_WHAT)
                 if subject.endswith(w)), "")
    base = (subject[len("folder "):len(subject) - len(what)].rstrip("/") or "/"
            if subject.startswith("folder ") else ".")

    def parse(listing: Sequence[str]) -> dict[str, str]:
        if what == _FILES:
            return dict.fromkeys(listing, "")
        return dict(item.rpartition("\t")[::2] for item in listing)

    old, new = parse(before), parse(after)
    groups = (("added", sorted(new.keys() - old.keys())),
              ("removed", sorted(old.keys() - new.keys())),
              ("changed", sorted(k for k in old.keys() & new.keys() if old[k] != new[k])))
    parts: list[str] = []
    left, hidden = _DETAIL_NAMES, 0
    for verb, names in groups:
        shown = names[:left]
        if shown:
            parts.append(f"{verb} {', '.join(_join(base, name) for name in shown)}")
        hidden += len(names) - len(shown)
        left -= len(shown)
    return "; ".join(parts) + (f", +{hidden} more" if hidden else "")
