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
  (:func:`pytest_ralph.oracle.walk.stdlib_listing`): pytest imports some of them late
  (``pdb``, say), after the rootdir is on ``sys.path``, so a new ``pdb.py`` there could patch
  pytest;
- the modules in test folders that the guarded Python files in test folders import, found
  by reading their source (:mod:`pytest_ralph.oracle.staticimports`; subject
  :data:`~pytest_ralph.oracle.judges.TESTS_IMPORT`): ``tests/helpers.py`` behind a ``run``
  criterion's pytest, whose imports no report names.

A configuration file without a pytest section counts as absent when pytest ignores it (see
:func:`pytest_ralph.oracle.walk.config_digest`).

After each check phase it takes another and :func:`compare` lists the :class:`Change`
objects; :func:`pytest_ralph.checks.verdicts.apply` then fails every criterion a change
touches, so that the run cannot complete on an edited oracle.

Never hashed: the targets of ``exists`` / ``file`` / ``instance`` / ``sql`` checks and
anything a ``run`` command touches (the agent is meant to change those), and a file (or
folder) named by a ``pytest`` check that did not exist at the start (the agent is meant to
write it): such a file is also left out of the name lists of the folders around it, and the
``conftest.py``, ``__init__.py`` and configuration files around it are not linked to its
criterion (they still are to the criteria of guarded tests they affect). The name lists also
leave out the check targets, and, when a target is a folder, the files in it other than
Python modules (:func:`pytest_ralph.oracle.walk.is_code`).

The walk of the files (digests, name lists, paths) is in :mod:`pytest_ralph.oracle.walk`,
what each criterion's definition names in :mod:`pytest_ralph.oracle.sources`.

A snapshot keeps each folder's name list, so that a change to one says what was added,
removed or (for lists of modules) changed (:attr:`Change.detail`).

This module does not import pytest.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..prd.model import PRD
from .judges import SHADOWS, TEST_MODULES, TESTS_IMPORT, in_test_folder, take, watch
from .sources import (
    TARGET_FIELDS,
    check_targets,
    command_files,
    command_path_folders,
    definition_digest,
    linked_files,
    pytest_targets,
    run_pytest_targets,
)
from .staticimports import imported_test_modules
from .walk import (
    ABSENT,
    basedir,
    chain,
    config_digest,
    file_digest,
    files_listing,
    found_elsewhere,
    is_code,
    join,
    lexical_rel,
    modules_listing,
    never,
    real,
    relative,
    skipped,
    stdlib_listing,
    walk,
)

#: Configuration files pytest looks for in each folder from the common ancestor of its
#: arguments upwards, in its order of precedence (pytest 9).
CONFIG_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                "tox.ini", "setup.cfg")

#: Files pytest loads from each folder on the way to a test: plugins and package markers.
_SIDE_FILES = ("conftest.py", "__init__.py")

#: How the subject of a folder's name list ends: all files (a ``pytest`` check's folder),
#: the modules in it (a verifier file's folder), or the modules and packages in it named
#: after a standard-library module (a folder first on a check's ``sys.path``).
FILES, MODULES, STDLIB = " (files)", " (modules)", " (standard-library names)"

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
        guarded (a folder a ``pytest`` check names), and each module the checks import from
        a test folder (:data:`~pytest_ralph.oracle.judges.TEST_MODULES`). A confined check
        phase gets them read-only (:func:`pytest_ralph.sandbox.bwrap.check_confinement`)."""
        out: list[Path] = []
        for subject, digest in self.digests.items():
            if digest == ABSENT:
                continue
            if subject.startswith("file "):
                rel = subject[len("file "):]
            elif subject.startswith("pytest configuration "):
                rel = subject[len("pytest configuration "):]
            elif subject.startswith("folder ") and subject.endswith(FILES):
                rel = subject[len("folder "):-len(FILES)].rstrip("/") or "."
            elif subject in (TEST_MODULES, TESTS_IMPORT):
                out.extend(rootdir / r for r in self.watch.get(subject, ())
                           if os.path.lexists(rootdir / r))
                continue
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
    return _Taking(prd, rootdir, inifile=inifile, stories=stories, search_path=search_path,
                   verifier=verifier, start=start, pythonpath=pythonpath,
                   loop_anchors=loop_anchors).take()


class _Taking:
    """One snapshot being taken (:func:`snapshot`, whose arguments it keeps): the digests,
    links, name lists and unguarded paths found so far, and what the walk caches (paths
    relative to the rootdir, chains of parents, basedirs, the files of modules, the subjects
    around each folder, where standard-library names are found)."""

    def __init__(self, prd: PRD, rootdir: Path, *, inifile: Path | None,
                 stories: Sequence[str], search_path: Sequence[str] | None,
                 verifier: str | None, start: Snapshot | None, pythonpath: Sequence[Path],
                 loop_anchors: Sequence[Path]) -> None:
        self.prd = prd
        self.rootdir = rootdir
        self.inifile = inifile
        self.search_path = search_path
        self.start = start
        self.pythonpath = pythonpath
        self.loop_anchors = loop_anchors
        self.root = real(rootdir)
        self.digests: dict[str, str] = {}
        self.links: dict[str, set[str]] = {}
        self.listings: dict[str, tuple[str, ...]] = {}
        self.unguarded: set[str] = set(start.unguarded) if start else set()
        self.selected = [st for st in prd.stories if not stories or st.id in stories]
        self.every = {c.key for st in self.selected for c in st.criteria}
        self.started: Mapping[str, str] = start.digests if start is not None else {}
        self.rels: dict[Path, str] = {}
        self.chains: dict[Path, list[Path]] = {}
        self.basedirs: dict[Path, Path] = {}
        self.modules: dict[str, list[tuple[Path, bool]]] = {}
        self.around: dict[tuple[Path, bool], list[str]] = {}
        self.elsewhere: dict[str, bool] = {}
        self.named = command_files(verifier, rootdir) if verifier else []
        #: The check targets (relative to the rootdir), sorted: left out of the name lists.
        self.ordered: list[str] = []
        self.watched: dict[str, tuple[str, ...]] = {}

    def take(self) -> Snapshot:
        """The snapshot."""
        prd_folder = self.prd.path.parent
        self.take_definitions()
        for folder in self.chain_of(prd_folder):
            self.guard_file(folder / "conftest.py", self.every, optional=True)
        self.unguard_new_tests()
        # The check phase's pytest has the rootdir first on sys.path by the time it imports
        # some standard-library modules (pdb, say), and the basedir of each conftest.py it
        # loads on the way to the PRD.
        for folder in (self.root, prd_folder, *(
                self.basedir_of(f) for f in self.chain_of(prd_folder) if self.digests.get(
                    f"file {self.rel_of(f / 'conftest.py')}", ABSENT) != ABSENT),
                *self.pythonpath):
            self.guard_folder(folder, STDLIB, self.every)
        self.guard_criteria()
        if self.named:
            texts = {c.key for st in self.selected for c in st.criteria if c.kind == "text"}
            for path in self.named:
                self.guard_file(path, texts)
                self.guard_folder(path.parent, MODULES, texts)
        self.guard_configs(prd_folder)
        self.take_watched(prd_folder)
        self.guard_imported()
        self.take_started()
        return Snapshot(self.digests, {k: frozenset(v) for k, v in self.links.items()},
                        tuple(sorted(self.unguarded)), self.listings, self.watched)

    def take_definitions(self) -> None:
        """Record each criterion's definition, and the targets of the checks (sorted in
        :attr:`ordered`)."""
        targets: set[str] = set()
        prefixes = {str(self.root), os.path.abspath(self.rootdir)}
        for story in self.selected:
            for c in story.criteria:
                subject = f"criterion {c.key}"
                self.digests[subject] = definition_digest(c)
                self.link(subject, [c.key])
                if c.kind in TARGET_FIELDS:
                    for target in check_targets(c):
                        targets.add(lexical_rel(target, prefixes))
        self.ordered = sorted(targets)

    def unguard_new_tests(self) -> None:
        """A test file named by a pytest check that does not exist yet is the agent's to
        write: known before any folder's name list is taken, so that those lists leave it
        out."""
        for c in (c for st in self.selected for c in st.criteria if c.kind == "pytest"):
            for target in pytest_targets(c):
                path = self.rootdir / target.split("::", 1)[0]
                rel = self.rel_of(path)
                if (f"file {rel}" not in self.started
                        and f"folder {rel}/{FILES}" not in self.started
                        and not path.exists()):
                    self.unguarded.add(rel)

    def guard_criteria(self) -> None:
        """Guard what each criterion's checks name: the tests of ``pytest`` checks, what
        the pytest runs of ``run`` commands collect, the files of the other kinds."""
        rootdir, root = self.rootdir, self.root
        for story in self.selected:
            for c in story.criteria:
                if c.kind == "pytest":
                    for target in pytest_targets(c):
                        self.guard_tests(rootdir / target.split("::", 1)[0], [c.key])
                elif c.kind == "run" and c.command:
                    run_cwd = (rootdir / c.cwd) if c.cwd else rootdir
                    for where, named_tests in run_pytest_targets(c.command, run_cwd):
                        if named_tests:
                            for test in named_tests:
                                self.guard_tests(where / test.split("::", 1)[0], [c.key])
                        elif where.is_dir() and (real(where) == root or
                                                 root in real(where).parents):
                            self.guard_collected(where, [c.key])
                for path, optional in linked_files(c, rootdir, root, self.search_path,
                                                   self.modules):
                    self.guard_file(path, [c.key], optional=optional)

    def guard_configs(self, prd_folder: Path) -> None:
        """The check phase's pytest gets -c (an empty file when there is no configuration
        file) and --confcutdir; a pytest that a `run` command starts finds its configuration
        like pytest does, from its folder up: one the agent creates counts, above the
        project too."""
        every = self.every
        if self.inifile is not None:
            self.guard_config(self.inifile, every)
        else:
            for folder in [*self.chain_of(prd_folder), self.root]:
                for name in CONFIG_NAMES:
                    self.guard_config(folder / name, every)
        for folder in self.root.parents:
            for name in CONFIG_NAMES:
                self.guard_config(folder / name, every)
            for name in ("conftest.py", "setup.py"):  # setup.py: pytest's rootdir marker
                self.guard_file(folder / name, every, optional=True)

    def take_watched(self, prd_folder: Path) -> None:
        """Take the ``conftest.py`` files the loop's own process loads, and the subjects the
        start learnt from the baseline's imports."""
        start, every = self.start, self.every
        # The check phase's pytest (run on the PRD) loads them from the PRD's folder too.
        anchors = tuple(Path(p) for p in (start.watch.get(LOOP_CONFTESTS, ()) if start else
                                           (*self.loop_anchors, prd_folder)))
        self.digests[LOOP_CONFTESTS], self.listings[LOOP_CONFTESTS] = loop_conftests(
            self.rootdir, anchors)
        self.link(LOOP_CONFTESTS, every)
        watched = self.watched = dict(start.watch) if start is not None else {}
        watched[LOOP_CONFTESTS] = tuple(str(a) for a in anchors)
        for subject, params in watched.items():
            if subject in (LOOP_CONFTESTS, TESTS_IMPORT):
                continue
            self.digests[subject], self.listings[subject] = take(subject, params, self.rootdir)
            self.link(subject, every | set(start.links.get(subject, ()) if start else ()))

    def guard_imported(self) -> None:
        """Guard :data:`~pytest_ralph.oracle.judges.TESTS_IMPORT`: the modules in test
        folders that the guarded Python files in test folders import (read, never imported:
        :func:`~pytest_ralph.oracle.staticimports.imported_test_modules`), less the files
        guarded on their own, those left to the agent and the checks' targets; linked to the
        criteria of the files that import them. A later snapshot takes the start's list
        again (nothing when the start had none)."""
        if self.start is not None:
            params = self.start.watch.get(TESTS_IMPORT)
            keys: set[str] = set(self.start.links.get(TESTS_IMPORT, ()))
            if params is None:
                return
        else:
            roots: list[Path] = []
            keys = set()
            for subject, digest in self.digests.items():
                rel = subject[len("file "):]
                if (subject.startswith("file ") and digest != ABSENT and rel.endswith(".py")
                        and not os.path.isabs(rel) and in_test_folder(rel)):
                    roots.append(self.rootdir / rel)
                    keys |= self.links.get(subject, set())
            targets = tuple(t.split("::", 1)[0].rstrip("/") for t in self.ordered)
            params = tuple(rel for rel in imported_test_modules(
                roots, self.root, (self.root, *map(real, self.pythonpath)))
                if f"file {rel}" not in self.digests and rel not in self.unguarded
                and not any(rel == t or rel.startswith(t + "/") for t in targets))
            if not params or not keys:
                return
        self.digests[TESTS_IMPORT], self.listings[TESTS_IMPORT] = take(
            TESTS_IMPORT, params, self.rootdir)
        self.link(TESTS_IMPORT, keys)
        self.watched[TESTS_IMPORT] = tuple(params)

    def take_started(self) -> None:
        """What was guarded at the start stays guarded."""
        start, digests, rootdir = self.start, self.digests, self.rootdir
        for subject in self.started:
            if subject in digests or subject.startswith("criterion "):
                continue
            if subject.startswith("file "):
                digests[subject] = file_digest(rootdir / subject[len("file "):])
            elif subject.startswith("pytest configuration "):
                digests[subject] = config_digest(
                    rootdir / subject[len("pytest configuration "):], self.root)
            elif subject.startswith("folder ") and subject.endswith((FILES, MODULES, STDLIB)):
                what = next(w for w in (FILES, MODULES, STDLIB) if subject.endswith(w))
                base = subject[len("folder "):-len(what)].rstrip("/") or "/"
                self.take_folder(subject, base, what)
            else:  # a kind of subject this version does not take: keep it as it was
                digests[subject] = self.started[subject]
            self.link(subject, start.links.get(subject, ()) if start is not None else ())

    def rel_of(self, path: Path) -> str:
        """``path`` relative to the rootdir (symbolic links resolved), cached per path."""
        if path not in self.rels:
            self.rels[path] = relative(path, self.root)
        return self.rels[path]

    def chain_of(self, folder: Path) -> list[Path]:
        """``folder`` and each parent up to the rootdir (resolved), cached per folder."""
        if folder not in self.chains:
            self.chains[folder] = chain(folder, self.root)
        return self.chains[folder]

    def basedir_of(self, folder: Path) -> Path:
        """The folder pytest's ``prepend`` import mode puts first on ``sys.path`` for a
        module in ``folder``, cached per folder."""
        if folder not in self.basedirs:
            self.basedirs[folder] = basedir(folder)
        return self.basedirs[folder]

    def link(self, subject: str, keys: Iterable[str]) -> None:
        self.links.setdefault(subject, set()).update(keys)

    def guard_file(self, path: Path, keys: Iterable[str], *, optional: bool = False,
                   rel: str | None = None) -> None:
        rel = self.rel_of(path) if rel is None else rel
        subject = f"file {rel}"
        if subject not in self.digests:
            if rel in self.unguarded:
                return
            digest = file_digest(path)
            if digest == ABSENT and not optional and subject not in self.started:
                self.unguarded.add(rel)
                return
            self.digests[subject] = digest
        self.link(subject, keys)

    def guard_config(self, path: Path, keys: Iterable[str]) -> None:
        subject = f"pytest configuration {self.rel_of(path)}"
        if subject not in self.digests:
            self.digests[subject] = config_digest(path, self.root)
        self.link(subject, keys)

    def guard_folder(self, path: Path, what: str, keys: Iterable[str]) -> None:
        subject = f"folder {self.rel_of(path)}/{what}"
        if subject not in self.digests:
            self.take_folder(subject, self.rel_of(path), what)
        self.link(subject, keys)

    def take_folder(self, subject: str, base: str, what: str) -> None:
        """Record the digest and name list ``what`` of the folder ``base`` (relative to the
        rootdir) under ``subject``."""
        skip = self.skipper(base)
        folder = self.rootdir / base
        if what == FILES:
            digest, listing = files_listing(folder, skip)
        elif what == MODULES:
            beside = frozenset(f.name for f in self.named if self.rel_of(f.parent) == base)
            digest, listing = modules_listing(folder, lambda n: n in beside or skip(n))
        else:
            digest, listing = stdlib_listing(folder, skip, self.is_elsewhere)
        self.digests[subject] = digest
        if listing is not None:
            self.listings[subject] = listing

    def is_elsewhere(self, name: str) -> bool:
        """Whether import finds the top-level module ``name`` outside the rootdir, cached."""
        if name not in self.elsewhere:
            self.elsewhere[name] = found_elsewhere(name, self.root)
        return self.elsewhere[name]

    def guard_around(self, folders: Iterable[Path], keys: Iterable[str], *,
                     configs: bool = True) -> None:
        """Guard the ``conftest.py`` and ``__init__.py`` (absent included) and, with
        ``configs``, the configuration files pytest would look for, in each of ``folders``
        (their subjects are worked out once per folder), and the standard-library names in
        the basedir of each ``conftest.py`` there."""
        keys = tuple(keys)
        for folder in folders:
            subjects = self.around.get((folder, configs))
            if subjects is None:
                base = self.rel_of(folder)
                for name in _SIDE_FILES:
                    self.guard_file(folder / name, (), optional=True, rel=join(base, name))
                subjects = [f"file {join(base, name)}" for name in _SIDE_FILES]
                if self.digests.get(subjects[0], ABSENT) != ABSENT:  # conftest.py: imported
                    where = self.basedir_of(folder)
                    self.guard_folder(where, STDLIB, ())
                    subjects.append(f"folder {self.rel_of(where)}/{STDLIB}")
                if configs:
                    for name in CONFIG_NAMES:
                        self.guard_config(folder / name, ())
                        subjects.append(f"pytest configuration {self.rel_of(folder / name)}")
                subjects = self.around[(folder, configs)] = [x for x in subjects
                                                             if x in self.digests]
            for subject in subjects:
                self.link(subject, keys)

    def guard_tests(self, path: Path, keys: Iterable[str]) -> None:
        """Guard a ``pytest`` check's target (a file or folder) and what pytest loads with
        it; nothing when it is unguarded, not even the ``conftest.py`` beside it."""
        rel = self.rel_of(path)
        if rel in self.unguarded:
            return
        if path.is_dir() or f"folder {rel}/{FILES}" in self.started:
            files, folders = walk(path)
            for name in files:
                self.guard_file(path / name, keys, rel=join(rel, name))
            self.guard_folder(path, FILES, keys)
            self.guard_around(self.chain_of(path), keys)
            self.guard_around((path / sub for sub in folders), keys, configs=False)
            for sub in (path, *(path / sub for sub in folders)):
                self.guard_folder(self.basedir_of(sub), STDLIB, keys)
        else:
            self.guard_file(path, keys)
            self.guard_around(self.chain_of(path.parent), keys)
            self.guard_folder(self.basedir_of(path.parent), STDLIB, keys)

    def guard_collected(self, folder: Path, keys: Iterable[str]) -> None:
        """Guard what a bare ``pytest`` in ``folder`` collects (a ``run`` command with no
        path): each test file under it (``test_*.py``, ``*_test.py``), and the
        ``conftest.py`` and ``__init__.py`` of every folder on the way (absent ones included,
        so a new ``conftest.py`` counts), and the configuration files around it. New test
        files may be added: the agent may write tests."""
        files, folders = walk(folder)
        for name in files:
            leaf = name.rpartition("/")[2]
            if leaf.endswith(".py") and (leaf.startswith("test_") or leaf.endswith("_test.py")):
                self.guard_file(folder / name, keys)
        self.guard_around(self.chain_of(folder), keys)
        self.guard_around((folder / sub for sub in folders), keys, configs=False)
        self.guard_folder(self.basedir_of(folder), STDLIB, keys)

    def skipper(self, base: str) -> Callable[[str], bool]:
        """Whether a path relative to the folder ``base`` (relative to the rootdir) is left
        out of its name lists: an unguarded file or folder or a file in one, a check target,
        or a file in a check target other than a Python module."""
        ordered = self.ordered
        prefix = "" if base == "." else base + "/"
        whole = frozenset(u[len(prefix):] for u in self.unguarded if u.startswith(prefix))
        # The targets under the folder, found in the sorted list without going through it
        # all: there may be thousands.
        lo = bisect.bisect_left(ordered, prefix)
        hi = bisect.bisect_left(ordered, prefix[:-1] + "0") if prefix else len(ordered)
        exact = frozenset(t[len(prefix):] for t in ordered[lo:hi])
        if not whole and not exact:
            return never
        return lambda name: (skipped(name, whole) or name in exact
                             or (not is_code(name) and skipped(name, exact)))


def with_imports(snap: Snapshot, imports: Sequence[Mapping[str, Any]], rootdir: Path,
                 folders: Iterable[Path] = (), prd: PRD | None = None) -> Snapshot:
    """``snap`` plus the subjects :func:`pytest_ralph.oracle.judges.watch` finds in the imports
    report of a check phase (the baseline's, before any agent ran), taken now and linked to
    every criterion ``snap`` knows. ``folders`` are more folders inside the project that come
    first on a check's ``sys.path``. The modules imported from test folders are those of
    :func:`imports_watch`."""
    return with_subjects(snap, imports_watch(snap, imports, rootdir, folders, prd), rootdir)


def imports_watch(snap: Snapshot, imports: Sequence[Mapping[str, Any]], rootdir: Path,
                  folders: Iterable[Path] = (), prd: PRD | None = None
                  ) -> dict[str, tuple[str, ...]]:
    """The subjects (subject -> its parameters) that :func:`pytest_ralph.oracle.judges.watch`
    finds in the imports report ``imports``, for :func:`with_subjects` over ``snap``. The
    modules imported from test folders (:data:`~pytest_ralph.oracle.judges.TEST_MODULES`)
    leave out the files ``snap`` guards already (a test file a criterion names, a
    ``conftest.py``: one change, said once) and those it leaves to the agent: the targets of
    the checks of ``prd`` (an ``exists`` or ``file`` check on ``tests/helpers.py``, on
    ``tests/gen/``, asks the agent to write it). The folders a ``run`` criterion of ``prd``
    puts on the path (``PYTHONPATH=src ...``: :func:`~pytest_ralph.oracle.sources.
    command_path_folders`) are guarded as ``folders`` are."""
    folders = [*folders, *(f for st in (prd.stories if prd is not None else ())
                           for c in st.criteria if c.kind == "run" and c.command
                           for f in command_path_folders(
                               c.command, (rootdir / c.cwd) if c.cwd else rootdir))]
    found = watch(imports, rootdir, folders)
    if TEST_MODULES in found:
        prefixes = {str(real(rootdir)), os.path.abspath(rootdir)}
        targets = tuple(lexical_rel(t, prefixes).rstrip("/") for st in (
            prd.stories if prd is not None else ()) for c in st.criteria
            for t in check_targets(c))
        static = frozenset(snap.watch.get(TESTS_IMPORT, ()))
        kept = tuple(rel for rel in found[TEST_MODULES] if f"file {rel}" not in snap.digests
                     and rel not in snap.unguarded and rel not in static and not any(
                         rel == t or rel.startswith(t + "/") for t in targets))
        found = {k: v for k, v in found.items() if k != TEST_MODULES}
        if kept:
            found[TEST_MODULES] = kept
    return found


def with_subjects(snap: Snapshot, found: Mapping[str, Sequence[str]], rootdir: Path) -> Snapshot:
    """``snap`` plus the subjects ``found`` (subject -> its parameters, as
    :func:`imports_watch` gives them, or :attr:`Snapshot.watch` of an earlier snapshot holds
    them), each taken now and linked to every criterion ``snap`` knows."""
    every = frozenset(k for subject, keys in snap.links.items() if subject.startswith(
        "criterion ") for k in keys)
    digests, links = dict(snap.digests), dict(snap.links)
    listings, watched = dict(snap.listings), dict(snap.watch)
    for subject, params in found.items():
        digests[subject], listings[subject] = take(subject, tuple(params), rootdir)
        links[subject] = every
        watched[subject] = tuple(params)
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
            detail = listing_detail(subject, start.listings[subject], now.listings[subject])
        out.append(Change(subject, change, keys, detail))
    for subject in now.digests:
        if subject not in start.digests and subject.startswith("criterion "):
            out.append(Change(subject, "added", tuple(sorted(now.links.get(subject, ())))))
    return out


def loop_conftests(rootdir: Path, anchors: Sequence[Path] = ()) -> tuple[str, tuple[str, ...]]:
    """The digest and name list (``path<TAB>digest`` items, relative to ``rootdir``) of the
    ``conftest.py`` files a pytest started in ``rootdir`` loads before any test is collected,
    the way pytest finds its initial conftests: in each of ``anchors`` (its arguments or
    ``testpaths``; the rootdir itself always) and each parent up to the rootdir, and in each
    ``test*`` folder of those. ``pytest --ralph`` loads them into the loop's own process, before
    pytest-ralph can check anything: :func:`pytest_ralph.state.verified.check_loop_conftests`
    compares them with the last run's before pytest loads them."""
    root = real(rootdir)
    folders: dict[Path, None] = {}
    for anchor in (root, *anchors):
        here = real(anchor)
        if here != root and root not in here.parents:
            continue
        for folder in chain(here, root):
            folders[folder] = None
        try:
            for sub in sorted(here.iterdir()):
                if sub.name.startswith("test") and sub.is_dir():
                    folders[real(sub)] = None
        except OSError:
            continue
    pairs: list[tuple[str, str]] = []
    for folder in folders:
        path = folder / "conftest.py"
        digest = file_digest(path)
        if digest != ABSENT:
            pairs.append((relative(path, root), digest))
    pairs.sort()
    listing = tuple(f"{name}\t{digest[:16]}" for name, digest in pairs)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest(), listing


def listing_detail(subject: str, before: Sequence[str], after: Sequence[str]) -> str:
    """What changed between two name lists of the folder ``subject``: ``added a, b;
    removed c; changed d`` (paths relative to the rootdir; at most :data:`_DETAIL_NAMES`
    names, then ``+N more``)."""
    what = next((w for w in (FILES, MODULES, STDLIB, SHADOWS, _LOOP_CONFTESTS_WHAT)
                 if subject.endswith(w)), "")
    base = (subject[len("folder "):len(subject) - len(what)].rstrip("/") or "/"
            if subject.startswith("folder ") else ".")

    def parse(listing: Sequence[str]) -> dict[str, str]:
        if what == FILES:
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
            parts.append(f"{verb} {', '.join(join(base, name) for name in shown)}")
        hidden += len(names) - len(shown)
        left -= len(shown)
    return "; ".join(parts) + (f", +{hidden} more" if hidden else "")
