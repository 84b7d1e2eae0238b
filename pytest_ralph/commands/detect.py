"""``pytest --ralph-init``: look at a project before scaffolding it.

:func:`detect` finds what a project has (:class:`Project`: its pytest suite, whether ruff and
mypy are configured, its pytest configuration file, :func:`find_config`), reading the
configuration files as pytest and the tools read them: TOML with tomlkit (:func:`parse_toml`,
which keeps comments and formatting for the edits), INI files as text (:func:`parse_ini`).
A file that cannot be read or parsed is a :class:`ScaffoldError` naming the file and line.
:mod:`pytest_ralph.commands.init` plans and writes the edits.

This module does not import pytest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from ..util.files import NotRegularFile, read_bytes

#: Where ruff reads its configuration besides ``pyproject.toml``.
RUFF_FILES = ("ruff.toml", ".ruff.toml")

#: Largest configuration file ``--ralph-init`` reads to edit, in bytes.
MAX_CONFIG_BYTES = 16 * 1024 * 1024

#: Where mypy reads its configuration, in its order (the INI files in section ``[mypy]``,
#: ``pyproject.toml`` in ``[tool.mypy]``).
MYPY_FILES = ("mypy.ini", ".mypy.ini", "pyproject.toml", "setup.cfg")

#: Folders never searched for tests (besides hidden ones and virtual environments).
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "build", "dist",
                       "venv", "env", "htmlcov"})

#: At most this many folders are looked at when searching for tests.
MAX_DIRS = 5000

_TEST_FILES = ("test_*.py", "*_test.py")


class ScaffoldError(ValueError):
    """A file of the project cannot be read or edited safely; the message names the file, the
    line where known, what was expected and how to fix it. Nothing has been written."""


@dataclass(frozen=True)
class Project:
    """What :func:`detect` found in a project.

    Attributes:
        rootdir: the project root.
        tests: what a ``pytest`` criterion should run, relative to the rootdir with ``/``:
            the configured ``testpaths``, else the folders (or top-level files) holding
            ``test_*.py`` / ``*_test.py`` files; empty when there is no test suite.
        ruff: where ruff is configured (``"pyproject.toml [tool.ruff]"``, ``"ruff.toml"``), or
            ``None``.
        mypy: where mypy is configured (``"mypy.ini [mypy]"``), or ``None``.
        mypy_files: whether that configuration names the files to check (then plain ``mypy``
            works; else ``mypy .``).
        config: the pytest configuration file, or ``None`` when there is none.
    """

    rootdir: Path
    tests: tuple[str, ...]
    ruff: str | None
    mypy: str | None
    mypy_files: bool
    config: Path | None


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A text file as read: its text without a BOM, the BOM, its newline."""

    text: str
    bom: str
    newline: str

    def with_bom(self, text: str) -> str:
        """``text`` with this file's BOM, if it had one."""
        return self.bom + text


def read_text(path: Path) -> Text:
    """Read a UTF-8 text file.

    Raises:
        ScaffoldError: it cannot be read or is not UTF-8 text.
    """
    try:
        raw = read_bytes(path, MAX_CONFIG_BYTES)  # never blocks on a FIFO
    except NotRegularFile as exc:
        raise ScaffoldError(f"{path}: is {exc.kind}, not a regular file; expected a text "
                            "configuration file there") from None
    except OSError as exc:
        raise ScaffoldError(f"{path}: cannot be read ({exc.strerror or exc}); check its "
                            "permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ScaffoldError(f"{path}:{line}: not UTF-8 text (byte {exc.start}); save it as "
                            "UTF-8, or add the pytest-ralph settings by hand") from None
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    text = text[len(bom):]
    newline = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
    return Text(text, bom, newline)


def parse_toml(path: Path, text: str) -> tomlkit.TOMLDocument:
    """Parse TOML with tomlkit (which keeps comments and formatting).

    Raises:
        ScaffoldError: not valid TOML; names the file, line and column.
    """
    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        reason = str(exc).split(" at line ")[0]
        raise ScaffoldError(f"{path}:{exc.line}:{exc.col}: not valid TOML: {reason}; fix the "
                            "file (pytest and the tools that read it need it valid too)") \
            from None
    except Exception as exc:  # tomlkit raises a few other errors on odd documents
        raise ScaffoldError(f"{path}: not valid TOML: {exc}; fix the file") from None


@dataclass
class _Section:
    """One ``[section]`` of an INI file: where it is and its keys."""

    name: str
    header: int  # index of the header line
    end: int  # index after its last key or continuation line (where keys are appended)
    values: dict[str, str] = field(default_factory=dict)


def parse_ini(path: Path, lines: Sequence[str]) -> list[_Section]:
    """The sections of an INI file read the way pytest (iniconfig) reads them: ``[name]``
    headers, ``key = value`` or ``key: value`` lines, indented continuation lines, comments
    starting with ``#`` or ``;``.

    Raises:
        ScaffoldError: a line that is none of these; names the file and line.
    """
    sections: list[_Section] = []
    key: str | None = None
    for i, raw in enumerate(lines):
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        where = f"{path}:{i + 1}"
        if line[0] in " \t" and key is not None and sections:
            sections[-1].values[key] += "\n" + stripped
            sections[-1].end = i + 1
            continue
        if stripped.startswith("["):
            end = stripped.find("]")
            if end < 0 or stripped[end + 1:].strip()[:1] not in ("", "#", ";"):
                raise ScaffoldError(f"{where}: expected a section header such as [pytest]; "
                                    f"found {stripped!r}; close the bracket")
            sections.append(_Section(stripped[1:end].strip(), i, i + 1))
            key = None
            continue
        cut = min((p for p in (stripped.find("="), stripped.find(":")) if p >= 0), default=-1)
        if cut <= 0:
            raise ScaffoldError(f"{where}: expected `key = value`, a [section] header, a "
                                f"comment or an indented continuation line; found {stripped!r}")
        if not sections:
            raise ScaffoldError(f"{where}: `{stripped}` comes before any [section] header; put "
                                "it under one")
        key = stripped[:cut].strip()
        sections[-1].values[key] = stripped[cut + 1:].strip()
        sections[-1].end = i + 1
    return sections


def find_section(sections: Sequence[_Section], name: str) -> _Section | None:
    return next((s for s in sections if s.name == name), None)


def toml_get(doc: Mapping[str, Any], *keys: str) -> Any:
    """``doc[k1][k2]...``, or ``None`` where a key is missing or not a table."""
    value: Any = doc
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


# -- detection -------------------------------------------------------------------------------


#: The configuration files pytest looks for, in its order of precedence (pytest >= 9; older
#: versions know the same files less the TOML ones).
CONFIG_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                "tox.ini", "setup.cfg")


def find_config(rootdir: Path) -> Path | None:
    """The pytest configuration file of ``rootdir`` as pytest picks it among the files of that
    folder: the first of :data:`CONFIG_NAMES` that holds pytest configuration
    (``pytest.toml``, ``.pytest.toml``, ``pytest.ini`` and ``.pytest.ini`` always do;
    ``pyproject.toml`` with ``[tool.pytest]`` or ``[tool.pytest.ini_options]``; ``tox.ini``
    with ``[pytest]``; ``setup.cfg`` with ``[tool:pytest]``), else a ``pyproject.toml``
    without them, else ``None``. (pytest also looks in the parent folders and takes ``-c``;
    the plugin passes the file pytest chose.)

    Raises:
        ScaffoldError: a candidate file is malformed.
    """
    pyproject: Path | None = None
    for name in CONFIG_NAMES:
        path = rootdir / name
        if not path.is_file():
            continue
        if name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
            return path
        if name == "pyproject.toml":
            pyproject = path
            if _pytest_tables(parse_toml(path, read_text(path).text)):
                return path
            continue
        wanted = "pytest" if name == "tox.ini" else "tool:pytest"
        if find_section(parse_ini(path, read_text(path).text.splitlines()), wanted):
            return path
    return pyproject


def _pytest_tables(doc: Mapping[str, Any]) -> bool:
    """Whether a ``pyproject.toml`` holds pytest configuration (``[tool.pytest]`` with keys
    of its own, or ``[tool.pytest.ini_options]``), as pytest decides it."""
    table = toml_get(doc, "tool", "pytest")
    return isinstance(table, Mapping) and bool(table)


def _skip_dir(folder: Path, name: str, skip: Sequence[Path]) -> bool:
    path = folder / name
    return (name.startswith(".") or name in SKIP_DIRS or path in skip
            or (path / "pyvenv.cfg").is_file())


def _test_files(rootdir: Path, skip: Sequence[Path]) -> Iterator[str]:
    """Paths (relative, ``/``) of ``test_*.py`` and ``*_test.py`` files under ``rootdir``, in
    a stable order, skipping hidden folders, virtual environments and :data:`SKIP_DIRS`."""
    for seen, (folder, dirs, files) in enumerate(os.walk(rootdir), 1):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not _skip_dir(here, d, skip))
        for name in sorted(files):
            if any(fnmatch(name, pattern) for pattern in _TEST_FILES):
                yield (here / name).relative_to(rootdir).as_posix()
        if seen >= MAX_DIRS:
            return


def _test_targets(files: Sequence[str], prd: Path | None, rootdir: Path) -> tuple[str, ...]:
    """What a ``pytest`` criterion runs for these test files: each file's folder (a top-level
    file itself), without folders inside others; a folder holding the PRD is replaced by its
    test files (a check that collects its own PRD would check itself)."""
    targets: list[str] = []
    for file in files:
        folder = file.rpartition("/")[0]
        target = file if not folder or _holds(rootdir / folder, prd) else folder
        if target not in targets:
            targets.append(target)
    return tuple(t for t in targets
                 if not any(t.startswith(other + "/") for other in targets if other != t))


def _holds(folder: Path, prd: Path | None) -> bool:
    """Whether ``folder`` is ``prd``'s folder or one of its parents."""
    return prd is not None and prd.resolve().parent.is_relative_to(folder.resolve())


def _testpaths(config: Path | None) -> list[str]:
    """The ``testpaths`` of a pytest configuration file (empty when unset or unreadable)."""
    return _setting(config, "testpaths")


#: Top-level files that are not the project's code.
_NOT_CODE = ("conftest.py", "setup.py", "noxfile.py", "fabfile.py", "tasks.py")


def import_note(rootdir: Path, tests: Sequence[str], config: Path | None) -> str | None:
    """A note when a ``pytest`` criterion could import the project's top-level modules where
    a bare ``pytest`` cannot: tests in folders that are not packages, modules or packages at
    the top, and neither a top-level ``conftest.py`` nor a ``pythonpath`` setting. A check
    phase runs like ``python -m pytest`` (the rootdir on ``sys.path``); bare ``pytest`` puts
    only each test file's first folder outside a package there (pytest's default
    ``prepend`` import mode). ``None`` when nothing suggests a difference."""
    if (rootdir / "conftest.py").is_file() or _setting(config, "pythonpath"):
        return None
    folders = [rootdir / t for t in tests if (rootdir / t).is_dir()]
    if not folders or all((f / "__init__.py").is_file() for f in folders):
        return None
    code = sorted(p.name for p in rootdir.iterdir()
                  if (p.is_file() and p.suffix == ".py" and p.name not in _NOT_CODE
                      and not any(fnmatch(p.name, pattern) for pattern in _TEST_FILES))
                  or (p.is_dir() and (p / "__init__.py").is_file() and p not in folders))
    if not code:
        return None
    shown = ", ".join(code[:3]) + (", ..." if len(code) > 3 else "")
    return (f"a `pytest` criterion runs like `python -m pytest`, with the project folder on "
            f"sys.path, so its tests can import {shown} where a bare `pytest` may not; if "
            "`pytest` alone fails with ModuleNotFoundError, add an empty conftest.py at the "
            "top (or `pythonpath = .` to the pytest settings) so that both agree")


def _setting(config: Path | None, key: str) -> list[str]:
    """A list setting (``testpaths``, ``pythonpath``) of a pytest configuration file (empty
    when unset or unreadable)."""
    if config is None or not config.is_file():
        return []
    kind, table = config_kind(config)
    text = read_text(config).text
    if kind == "toml":
        doc = parse_toml(config, text)
        for keys in table:
            value = toml_get(doc, *keys, key)
            if isinstance(value, str):
                return value.split()
            if isinstance(value, list):
                return [str(v) for v in value]
        return []
    section = find_section(parse_ini(config, text.splitlines()), table[0][0])
    return section.values.get(key, "").split() if section else []


def detect(rootdir: Path, *, config: Path | None = None, prd: Path | None = None,
           skip: Sequence[Path] = ()) -> Project:
    """Look at a project.

    Args:
        rootdir: the project root.
        config: the pytest configuration file pytest chose, or ``None`` to look for it with
            :func:`find_config`.
        prd: the PRD (existing or about to be written), which a ``pytest`` target must not
            hold.
        skip: folders not searched for tests (the state folder).

    Raises:
        ScaffoldError: ``pyproject.toml`` or another configuration file is malformed.
    """
    config = config if config is not None else find_config(rootdir)
    configured = [p for p in _testpaths(config) if (rootdir / p).exists()
                  and not ((rootdir / p).is_dir() and _holds(rootdir / p, prd))]
    root = rootdir.resolve()
    skipped = [p.resolve() for p in skip]
    tests = tuple(configured) or _test_targets(list(_test_files(root, skipped)), prd, rootdir)
    pyproject = rootdir / "pyproject.toml"
    doc: Mapping[str, Any] = (parse_toml(pyproject, read_text(pyproject).text)
                              if pyproject.is_file() else {})
    ruff = "pyproject.toml [tool.ruff]" if toml_get(doc, "tool", "ruff") is not None else (
        next((name for name in RUFF_FILES if (rootdir / name).is_file()), None))
    mypy: str | None = None
    mypy_files = False
    for name in MYPY_FILES:  # in mypy's order
        path = rootdir / name
        if name == "pyproject.toml":
            table = toml_get(doc, "tool", "mypy")
            if isinstance(table, Mapping):
                mypy, mypy_files = "pyproject.toml [tool.mypy]", bool(table.get("files"))
        elif path.is_file():
            found = find_section(parse_ini(path, read_text(path).text.splitlines()), "mypy")
            if found is not None:
                mypy, mypy_files = f"{name} [mypy]", bool(found.values.get("files"))
        if mypy is not None:
            break
    return Project(rootdir=rootdir, tests=tests, ruff=ruff, mypy=mypy, mypy_files=mypy_files,
                   config=config)


def config_kind(path: Path) -> tuple[str, list[tuple[str, ...]]]:
    """``("toml", [candidate tables...])`` or ``("ini", [(section,)])`` for a pytest
    configuration file, by its name as pytest reads it (then by its suffix, for ``-c``)."""
    name = path.name
    if name in ("pytest.toml", ".pytest.toml"):
        return "toml", [("pytest",)]
    if name == "pyproject.toml":
        return "toml", [("tool", "pytest"), ("tool", "pytest", "ini_options")]
    if name in ("pytest.ini", ".pytest.ini", "tox.ini"):
        return "ini", [("pytest",)]
    if name == "setup.cfg" or path.suffix == ".cfg":
        return "ini", [("tool:pytest",)]
    if path.suffix == ".toml":
        return "toml", [("tool", "pytest"), ("tool", "pytest", "ini_options"), ("pytest",)]
    return "ini", [("pytest",)]

