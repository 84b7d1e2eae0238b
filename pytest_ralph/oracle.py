"""The oracle-integrity guard: notice when the agent edits what judges its work.

At the start of a run the loop takes a :class:`Snapshot` of the *oracle*: every
criterion definition (text, kind and check fields), the files named by ``pytest``
checks (a folder stands for the files in it), the ``conftest.py`` files pytest would
load for those tests and for the PRD (absent ones too: a new ``conftest.py`` can skip
or rewrite tests), ``schema`` files, the modules of ``python`` checks, and the pytest
section of the configuration file (``ralph_checks``, ``ralph_verifier`` and
``addopts`` live there) and the files the ``ralph_verifier`` command names. After each
check phase it takes another and :func:`compare` lists the :class:`Change` objects;
:func:`apply` then fails every criterion a change touches, so that the run cannot
complete on an edited oracle.

Never hashed: the targets of ``exists`` / ``file`` / ``instance`` / ``sql`` checks and
anything a ``run`` command touches (the agent is meant to change those), a file named
by a ``pytest`` check that did not exist at the start (the agent is meant to write it),
and files added to a folder named by a ``pytest`` check (except ``conftest.py``).

This module does not import pytest.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .model import PRD, Criterion
from .results import CheckResults, CriterionResult

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

#: Digest recorded for a file that does not exist.
ABSENT = "absent"

#: Configuration files pytest looks for in the rootdir (when the checks get no ``-c``).
CONFIG_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")

#: Folders never descended into when a ``pytest`` check names a folder.
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".venv",
                        "venv", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache"})

#: Hint appended to the failure of a criterion whose oracle changed.
RESTORE_HINT = ("restore it (for example `git checkout -- <file>`), or rerun with "
                "--ralph-allow-criteria-edits if the change is intended")


@dataclass(frozen=True)
class Change:
    """One difference between the oracle at the start of the run and now.

    Attributes:
        subject: what changed, for people: ``criterion US-001::AC1``, ``file
            tests/test_a.py`` (relative to the rootdir) or ``pytest configuration
            pytest.ini``.
        change: ``changed``, ``deleted`` (a file that existed is gone), ``added`` (a
            guarded file or a criterion that did not exist) or ``removed`` (a criterion
            that is no longer in the PRD).
        criteria: keys (``US-001::AC1``) of the criteria whose verdict depends on the
            subject.
    """

    subject: str
    change: str
    criteria: tuple[str, ...]

    def describe(self) -> str:
        """``file tests/test_a.py changed``."""
        return f"{self.subject} {self.change}"


@dataclass(frozen=True)
class Snapshot:
    """Digests of the oracle at one moment.

    Attributes:
        digests: subject -> SHA-256 hex digest, or :data:`ABSENT` for a missing file.
        links: subject -> keys of the criteria that depend on it.
        unguarded: files named by ``pytest`` checks that did not exist (relative paths):
            the agent may create them.
    """

    digests: Mapping[str, str]
    links: Mapping[str, frozenset[str]]
    unguarded: tuple[str, ...] = ()


def snapshot(prd: PRD, rootdir: Path, *, inifile: Path | None = None,
             stories: Sequence[str] = (), search_path: Sequence[str] | None = None,
             verifier: str | None = None, start: Snapshot | None = None) -> Snapshot:
    """Take a snapshot of the oracle of ``prd``.

    Args:
        prd: the PRD as it is on disk now.
        rootdir: the project root; relative paths in checks start there.
        inifile: the pytest configuration file the checks use, or ``None``.
        stories: only these story ids (empty: all).
        search_path: where ``python`` check modules are looked for after ``rootdir``
            (default ``sys.path``).
        verifier: the ``ralph_verifier`` command line: the files it names inside the
            rootdir (its script, say) decide every text criterion.
        start: the run's first snapshot, when this is a later one: files it did not
            guard stay unguarded, and files it guarded are hashed even if no criterion
            names them any more.

    Returns:
        The snapshot. Files are read in full (SHA-256); nothing is imported or run.
    """
    digests: dict[str, str] = {}
    links: dict[str, set[str]] = {}
    unguarded: set[str] = set(start.unguarded) if start else set()
    selected = [st for st in prd.stories if not stories or st.id in stories]
    every = {c.key for st in selected for c in st.criteria}

    def link(subject: str, keys: Iterable[str]) -> None:
        links.setdefault(subject, set()).update(keys)

    def guard_file(path: Path, keys: Iterable[str], *, optional: bool = False) -> None:
        rel = _rel(path, rootdir)
        subject = f"file {rel}"
        if subject not in digests:
            if rel in unguarded:
                return
            digest = _file_digest(path)
            if digest == ABSENT and not optional and (start is None or subject not in
                                                       start.digests):
                unguarded.add(rel)
                return
            digests[subject] = digest
        link(subject, keys)

    for story in selected:
        for c in story.criteria:
            subject = f"criterion {c.key}"
            digests[subject] = _definition_digest(c)
            link(subject, [c.key])
    for conftest in _conftests(prd.path.parent, rootdir):
        guard_file(conftest, every, optional=True)
    for story in selected:
        for c in story.criteria:
            for path, optional in _linked_files(c, rootdir, search_path):
                guard_file(path, [c.key], optional=optional)
    if verifier:
        texts = {c.key for st in selected for c in st.criteria if c.kind == "text"}
        for path in _command_files(verifier, rootdir):
            guard_file(path, texts)
    # With no -c file, the checks find their configuration like pytest does: one created
    # by the agent counts.
    for config in [inifile] if inifile is not None else [rootdir / n for n in CONFIG_NAMES]:
        subject = f"pytest configuration {_rel(config, rootdir)}"
        digests[subject] = _config_digest(config)
        link(subject, every)
    if start is not None:  # a file guarded at the start stays guarded
        for subject in start.digests:
            if subject.startswith("file ") and subject not in digests:
                digests[subject] = _file_digest(rootdir / subject[len("file "):])
                link(subject, start.links.get(subject, ()))
    return Snapshot(digests, {k: frozenset(v) for k, v in links.items()},
                    tuple(sorted(unguarded)))


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
        out.append(Change(subject, change, keys))
    for subject in now.digests:
        if subject not in start.digests and subject.startswith("criterion "):
            out.append(Change(subject, "added", tuple(sorted(now.links.get(subject, ())))))
    return out


def apply(results: CheckResults, changes: Sequence[Change]) -> CheckResults:
    """``results`` with every criterion touched by ``changes`` failing.

    The failure message names each change first (then the criterion's own failure, if it
    failed anyway), so that the prompt tells the agent what to restore and the
    fingerprint sees the edit.
    """
    if not changes:
        return results
    by_key: dict[str, list[str]] = {}
    for ch in changes:
        for key in ch.criteria:
            by_key.setdefault(key, []).append(ch.describe())
    criteria: list[CriterionResult] = []
    for c in results.criteria:
        what = by_key.get(c.key)
        if not what:
            criteria.append(c)
            continue
        message = (f"criteria changed: {'; '.join(what)} since the run started; expected "
                   f"the checks that judge this criterion to stay as they were: {RESTORE_HINT}")
        if not c.passed and c.message:
            message += f"\nthe check itself also failed:\n{c.message}"
        criteria.append(replace(c, outcome="failed", message=message, claimed=False))
    return replace(results, criteria=tuple(criteria))


def _rel(path: Path, rootdir: Path) -> str:
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return str(path)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 16), b""):
                h.update(block)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return ABSENT
    except OSError as exc:  # unreadable: a change of its own kind
        return f"unreadable: {exc.strerror}"
    return h.hexdigest()


def _definition_digest(c: Criterion) -> str:
    data = {"text": c.text, "kind": c.kind, "spec": c.spec, "command": c.command,
            "timeout": c.timeout, "cwd": c.cwd}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _config_digest(inifile: Path) -> str:
    """The digest of the pytest section of a configuration file (of ``None`` when it has
    none; of the whole file when it cannot be parsed): other sections (dependencies, say)
    may change freely."""
    try:
        raw = inifile.read_bytes()
    except OSError:
        return ABSENT
    section: object = None
    try:
        if inifile.suffix == ".toml":
            section = tomllib.loads(raw.decode("utf-8")).get("tool", {}).get("pytest")
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(raw.decode("utf-8"))
            for name in ("pytest", "tool:pytest"):
                if parser.has_section(name):
                    section = dict(parser.items(name))
                    break
    except (ValueError, configparser.Error, AttributeError):
        return "unparsable: " + hashlib.sha256(raw).hexdigest()
    return hashlib.sha256(json.dumps(section, sort_keys=True, default=str).encode()).hexdigest()


def _conftests(folder: Path, rootdir: Path) -> list[Path]:
    """``conftest.py`` in ``folder`` and each of its parents up to ``rootdir``."""
    out = []
    root = rootdir.resolve()
    here = folder.resolve()
    while True:
        out.append(here / "conftest.py")
        if here == root or root not in here.parents:
            break
        here = here.parent
    return out


def _linked_files(c: Criterion, rootdir: Path,
                  search_path: Sequence[str] | None) -> list[tuple[Path, bool]]:
    """(file, optional) pairs that decide ``c``'s verdict. An optional file is guarded even
    when it is absent (a ``conftest.py`` appearing is a change)."""
    out: list[tuple[Path, bool]] = []
    spec = c.spec
    if c.kind == "pytest":
        targets = spec["pytest"] if isinstance(spec["pytest"], list) else [spec["pytest"]]
        for target in targets:
            path = rootdir / str(target).split("::", 1)[0]
            if path.is_dir():
                files, folders = _walk(path)
                out += [(f, False) for f in files if f.name != "conftest.py"]
                out += [(d / "conftest.py", True) for d in folders]
                parent = path.parent
            else:
                out.append((path, False))
                parent = path.parent
            out += [(p, True) for p in _conftests(parent, rootdir)]
    elif c.kind == "schema":
        schema = str(spec["schema"])
        if "://" not in schema:
            out.append((rootdir / schema, False))
    elif c.kind == "python":
        module = str(spec["python"]).partition(":")[0]
        found = _module_file(module, [str(rootdir), *(sys.path if search_path is None
                                                       else search_path)])
        if found is not None:
            out.append((found, False))
    return out


def _command_files(command: str, rootdir: Path) -> list[Path]:
    """The words of a command line that name files inside ``rootdir``."""
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


def _walk(folder: Path) -> tuple[list[Path], list[Path]]:
    """(files, folders) under ``folder`` (itself included), skipping caches and hidden folders."""
    files: list[Path] = []
    folders: list[Path] = [folder]
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return files, folders
    for entry in entries:
        if entry.is_dir():
            if entry.name not in _SKIP_DIRS and not entry.name.startswith("."):
                more_files, more_folders = _walk(entry)
                files += more_files
                folders += more_folders
        elif entry.is_file() and not entry.name.endswith((".pyc", ".pyo")):
            files.append(entry)
    return files, folders


def _module_file(module: str, roots: Iterable[str]) -> Path | None:
    """The source file of a dotted module name, found without importing anything."""
    parts = module.split(".")
    for root in roots:
        base = Path(root or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None
