"""What decides each criterion's verdict, read from its definition alone (for
:mod:`pytest_ralph.oracle.snapshot`): the digest of the definition, the tests a
``pytest`` check names, the target an ``exists`` / ``file`` / ``schema`` / ``sql`` check
looks at, the files of a ``python`` check's module and a ``schema`` check's schema, the
pytest runs a ``run`` command starts, and the files a command line names.

Nothing is imported or run. This module does not import pytest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ..prd.model import Criterion
from .walk import MODULE_SUFFIXES, real

#: The check field that names the target of a criterion of each kind that has one.
TARGET_FIELDS = {"exists": "exists", "file": "file", "schema": "instance", "sql": "db"}


def definition_digest(c: Criterion) -> str:
    """The SHA-256 of a criterion's definition: its text, kind, check fields, command,
    timeout and folder."""
    data = {"text": c.text, "kind": c.kind, "spec": c.spec, "command": c.command,
            "timeout": c.timeout, "cwd": c.cwd}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def pytest_targets(c: Criterion) -> list[str]:
    """The node ids or paths of a ``pytest`` criterion."""
    targets = c.spec.get("pytest")
    return [str(t) for t in targets] if isinstance(targets, list) else [str(targets)]


def check_targets(c: Criterion) -> list[str]:
    """The paths (relative to the rootdir) an ``exists``, ``file``, ``schema`` or ``sql``
    criterion looks at and the agent is meant to write: the path, the ``instance``, the
    ``db``."""
    field_name = TARGET_FIELDS.get(c.kind)
    target = c.spec.get(field_name) if field_name else None
    return [str(target)] if isinstance(target, str) and target else []


def linked_files(c: Criterion, rootdir: Path, root: Path, search_path: Sequence[str] | None,
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
                where = real(folder)
                inside[folder] = where == root or root in where.parents
            package = folder / name
            tried = [package / f"__init__{s}" for s in MODULE_SUFFIXES]
            is_package = package.is_dir()
            if is_package:
                found = next((p for p in tried if p.is_file()), None)
                if found is not None:
                    tried = tried[:tried.index(found)]
            if found is None:
                candidates = [folder / f"{name}{s}" for s in MODULE_SUFFIXES]
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


def command_files(command: str, rootdir: Path) -> list[Path]:
    """The words of a command line that name files inside ``rootdir`` (resolved)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    root = real(rootdir)
    out = []
    for word in words:
        path = real(rootdir / word) if not word.startswith("-") else None
        if path is not None and path.is_file() and root in path.parents:
            out.append(path)
    return out


def command_path_folders(command: str, rootdir: Path) -> list[Path]:
    """The folders inside ``rootdir`` that a command line puts on Python's path with a
    ``PYTHONPATH=a:b`` assignment (before the command, or after ``env``): a check that command
    runs imports from them first, so a module, or a distribution's metadata with ``pytest11``
    entry points, planted there stands in as one planted in the rootdir would."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    root = real(rootdir)
    out: list[Path] = []
    for word in words:
        name, eq, value = word.partition("=")
        if not eq or name != "PYTHONPATH":
            continue
        for part in value.split(":"):
            folder = real(rootdir / (part or "."))
            if (folder == root or root in folder.parents) and folder not in out:
                out.append(folder)
    return out
