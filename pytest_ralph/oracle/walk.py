"""The project's files as the oracle guard reads them (:mod:`pytest_ralph.oracle.snapshot`):
paths relative to the rootdir, the folders pytest and import look in, the digests of files
and of pytest configuration sections, and the name lists of folders (all files, the
modules, the names that would shadow the standard library) with their digests.

Nothing is imported or run. This module does not import pytest.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import iniconfig

from ..util.files import FileTooLarge, NotRegularFile, read_bytes
from ..util.files import digest as _digest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

#: Digest recorded for a file (or folder) that does not exist.
ABSENT = "absent"

#: Configuration files pytest takes even when they have no pytest section.
_ALWAYS_TAKEN = frozenset({"pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"})

#: Folders never descended into when a ``pytest`` check names a folder.
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".venv",
                        "venv", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache"})

#: Suffixes of importable modules, in the order import tries them in one folder.
MODULE_SUFFIXES = (*importlib.machinery.EXTENSION_SUFFIXES,
                   *importlib.machinery.SOURCE_SUFFIXES,
                   *importlib.machinery.BYTECODE_SUFFIXES)

#: Top-level modules of the standard library (on every platform).
_STDLIB_NAMES = frozenset(sys.stdlib_module_names)

#: Suffixes of the files a name list keeps under a check target that is a folder: the
#: Python modules (any extension module, for any interpreter, included).
_CODE_SUFFIXES = (*MODULE_SUFFIXES, ".py", ".pyw", ".pyc", ".so", ".pyd")


def real(path: Path) -> Path:
    """``path`` absolute, its symbolic links resolved as far as they go
    (:func:`os.path.realpath`): unlike :meth:`pathlib.Path.resolve` on Python < 3.13, a link
    loop (``a -> b -> a``, which an agent can commit) raises no :class:`RuntimeError`: the
    path is left where the loop starts, and reading it fails as a missing file does."""
    return Path(os.path.realpath(path))


def relative(path: Path, root: Path) -> str:
    """``path`` (symbolic links resolved) relative to the resolved rootdir ``root``, as a
    POSIX path (``.`` for the rootdir itself); ``str(path)`` when it is outside."""
    try:
        return real(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def join(base: str, name: str) -> str:
    """The relative path ``name`` (POSIX) inside the folder ``base`` (as :func:`relative` gives
    it)."""
    return name if base == "." else f"{base.rstrip('/')}/{name}"


def chain(folder: Path, root: Path) -> list[Path]:
    """``folder`` and each of its parents up to the resolved rootdir ``root``, resolved; just
    ``folder`` when it is not inside ``root``."""
    out = []
    here = real(folder)
    while True:
        out.append(here)
        if here == root or root not in here.parents:
            return out
        here = here.parent


def file_digest(path: Path) -> str:
    """What the guard records for a file (:func:`pytest_ralph.util.files.digest`): its SHA-256;
    :data:`ABSENT` when there is none (or a folder); ``special: <kind>`` for a FIFO, a device
    or a socket (never read); ``large: ...`` past 64 MiB (never read whole);
    ``unreadable: <why>``."""
    return _digest(path)


def config_digest(inifile: Path, root: Path) -> str:
    """The digest of the pytest section of a configuration file: ``[pytest]`` in
    ``pytest.toml`` and ``.pytest.toml``; ``[tool.pytest]`` (which holds
    ``[tool.pytest.ini_options]``) in ``pyproject.toml``; both in another TOML file; the
    first of ``[pytest]`` and ``[tool:pytest]`` in an INI file, read by ``iniconfig`` as
    pytest reads it (keys keep their case; ``[pytest] #]`` is ``[pytest]``).

    Other sections (dependencies, say) may change freely. A file that cannot be parsed has
    the digest of its bytes (``unparsable: ...``, never :data:`ABSENT`: pytest may fail on
    it, or a later parser take it); a missing one is :data:`ABSENT`, and so is one without a pytest
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
        return file_digest(inifile)
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
            # Read as pytest reads it (iniconfig): a comment after a header's closing
            # bracket is no part of its name (``[pytest] #]`` is ``[pytest]``).
            parsed = iniconfig.IniConfig(str(inifile), data=raw.decode("utf-8"))
            for name in ("pytest", "tool:pytest"):
                if name in parsed:
                    section = dict(parsed[name].items())
                    break
    except (ValueError, iniconfig.ParseError, AttributeError):
        return "unparsable: " + hashlib.sha256(raw).hexdigest()
    if section is None and inifile.name not in _ALWAYS_TAKEN and (
            inifile.name != "pyproject.toml" or real(inifile).parent == root):
        return ABSENT
    return hashlib.sha256(json.dumps(section, sort_keys=True, default=str).encode()).hexdigest()


def lexical_rel(target: str, roots: Iterable[str]) -> str:
    """The path ``target`` (relative to the rootdir, or absolute) relative to the rootdir as
    :func:`relative` gives it, worked out from the text alone (``..`` included; symbolic links
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


def basedir(folder: Path) -> Path:
    """The folder pytest's ``prepend`` import mode inserts first on ``sys.path`` to import a
    module (a test file or ``conftest.py``) in ``folder``: the first of ``folder`` and its
    parents without an ``__init__.py`` (resolved)."""
    here = real(folder)
    while os.path.isfile(os.path.join(here, "__init__.py")) and here.parent != here:
        here = here.parent
    return here


def walk(folder: Path) -> tuple[list[str], list[str]]:
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


def files_listing(folder: Path, skip: Callable[[str], bool]
                  ) -> tuple[str, tuple[str, ...] | None]:
    """The digest of the names of the files :func:`walk` finds under ``folder``, less those
    ``skip`` says (given a path relative to ``folder``), and the names; :data:`ABSENT` and
    ``None`` when it is not a folder."""
    if not folder.is_dir():
        return ABSENT, None
    names = [name for name in walk(folder)[0] if not skip(name)]
    return hashlib.sha256(json.dumps(names).encode()).hexdigest(), tuple(names)


def never(name: str) -> bool:
    """Leave out nothing (a name list's ``skip`` when no path is left out)."""
    return False


def is_code(name: str) -> bool:
    """Whether the file ``name`` is a Python module (source, bytecode or extension)."""
    return name.endswith(_CODE_SUFFIXES)


def skipped(name: str, skip: frozenset[str]) -> bool:
    """Whether the relative path ``name`` or one of its parent folders is in ``skip``."""
    while True:
        if name in skip:
            return True
        name, sep, _ = name.rpartition("/")
        if not sep:
            return False


def modules_listing(folder: Path, skip: Callable[[str], bool]
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
                    names += [f"{entry.name}/__init__{s}" for s in MODULE_SUFFIXES
                              if os.path.isfile(os.path.join(entry.path, f"__init__{s}"))]
                elif (entry.name.endswith(MODULE_SUFFIXES) and not skip(entry.name)
                      and entry.is_file()):
                    names.append(entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT, None
    except OSError as exc:
        return f"unreadable: {exc.strerror}", None
    return _pairs_listing(folder, names)


def stdlib_listing(folder: Path, skip: Callable[[str], bool],
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
                    inits = [f"{name}/__init__{s}" for s in MODULE_SUFFIXES
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
    for suffix in MODULE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return None


def found_elsewhere(name: str, root: Path) -> bool:
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
            where = real(Path(entry or "."))
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
    :attr:`pytest_ralph.oracle.snapshot.Snapshot.listings` keeps: each name, a tab and the
    start of its digest."""
    pairs = [(name, file_digest(folder / name)) for name in sorted(names)]
    if spaces:
        pairs = sorted([*pairs, *((name, "namespace") for name in spaces)])
    listing = tuple(f"{name}\t{digest[:16]}" for name, digest in pairs)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest(), listing
