"""What the checks import: guarded against shadowing, and (outside the project, or in its test
folders) against change.

A check phase's processes import pytest, its plugins, their dependencies, the standard library
and, through the tests, the project's own modules. The loop asks the baseline's processes what
they imported (:data:`pytest_ralph.checks.phase.IMPORTS_ENV`: each process's ``sys.path``, the
file each top-level module came from and every source file loaded) and turns the answer into
three kinds of oracle subjects
(see :mod:`pytest_ralph.oracle.snapshot`), taken again after every check phase:

- ``folder <path>/ (names the checks import)``, one per folder inside the project that a check
  process had on ``sys.path`` *before* the folder one of its modules came from (the basedir of
  the tests, say, before the rootdir; the rootdir before site-packages): the names and digests
  of what, in that folder, would be imported instead of those modules (``<name>.py``,
  ``<name>.pyc``, an extension module, a package ``<name>/`` with an ``__init__``), plus the
  top-level names found in the folders outside the project the check processes import from
  (site-packages and the like) and those an import outside the project looked for and did
  not find (the report's ``"missing"``: ``copy`` tries ``org``); and the distributions'
  metadata folders there (``*.dist-info``, ``*.egg-info``: their names and the digests of
  their ``entry_points.txt``, whose ``pytest11`` plugins the check's pytest loads). A new
  ``typing_extensions.py`` or ``org.py`` beside the tests, a ``calc.py`` in ``tests/`` that
  stands in for the project's ``src/calc.py``, or a ``plug-1.0.dist-info/`` in the rootdir,
  is a change;
- ``environment (the installed modules the checks import)``: the digests of every imported
  source file outside the project (standard library and site-packages: pytest's own
  ``_pytest/reports.py`` among them), of the ``.pth`` files and of the ``entry_points.txt``
  of every distribution in the folders outside the project the check processes import from
  (``pytest11`` plugins come from there), and the names of those files. A ``.pth`` file or
  a plugin installed into the virtualenv during the run, or an edited installed module, is a
  change;
- :data:`TEST_MODULES`: the digests of the project's own source files the checks loaded from a
  test folder (:func:`in_test_folder`: a folder of the path, relative to the rootdir, whose
  name starts with ``test``): ``tests/helpers.py`` a test takes its expected values from,
  ``tests/__init__.py``, ``tests/fixtures/data.py``. An edited or deleted helper is a change.
  The code under test (``src/``, the package, ``calc.py`` in the rootdir, ``pkg/mod.py``
  beside ``pkg/tests/``) is not: the agent is meant to change it. Data files the tests read
  (``tests/data/cases.json``) are not imported: they are guarded only when a criterion names
  them.

All three link to every criterion: what the checker imports can decide any verdict. Nothing is
imported or run.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import json
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..util.files import digest

#: Subject suffix of a folder's list of modules that would shadow what the checks import.
SHADOWS = " (names the checks import)"

#: The subject of the installed environment's digest.
ENVIRONMENT = "environment (the installed modules the checks import)"

#: The subject of the project's source files the checks import from its test folders.
TEST_MODULES = "modules the checks import from test folders"

#: The subject of the project's source files in test folders that the guarded test files
#: import, found by reading their source (:mod:`pytest_ralph.oracle.staticimports`): what a
#: process a ``run`` command starts imports is in no imports report.
TESTS_IMPORT = "modules the tests import from test folders"

#: Folders of installed distributions: a virtualenv inside the project is no test folder.
_INSTALLED_FOLDERS = frozenset({"site-packages", "dist-packages"})

#: Suffixes of files that import finds as a module ``<name><suffix>``.
_MODULE_ENDINGS = (".py", ".pyc", ".pyw", ".so", ".pyd")

#: Suffixes of the folders of a distribution's metadata: ``importlib.metadata`` finds them in
#: every ``sys.path`` folder, and pytest loads the ``pytest11`` entry points they declare.
DIST_ENDINGS = (".dist-info", ".egg-info")


def site_folders() -> list[str]:
    """The site-packages folders of this environment (and the user site when it is on
    ``sys.path``), absolute and resolved, without duplicates."""
    found: list[str] = []
    paths = sysconfig.get_paths()
    candidates = [paths.get("purelib", ""), paths.get("platlib", "")]
    with contextlib.suppress(AttributeError):  # an old virtualenv's site module
        candidates += site.getsitepackages()
    user = getattr(site, "USER_SITE", None)
    if user and user in sys.path:
        candidates.append(user)
    for c in candidates:
        if c and os.path.isdir(c):
            found.append(os.path.realpath(c))
    return list(dict.fromkeys(found))


def installed_names(folders: Iterable[str]) -> set[str]:
    """The top-level module and package names directly in ``folders`` (site-packages)."""
    out: set[str] = set()
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            name = module_name(entry)
            if name and name.isidentifier():
                out.add(name)
            elif entry.isidentifier() and os.path.isfile(os.path.join(folder, entry,
                                                                       "__init__.py")):
                out.add(entry)
    return out


def module_name(filename: str) -> str | None:
    """``pdb`` for ``pdb.py``, ``pdb.pyc`` or ``pdb.cpython-311-x86_64-linux-gnu.so``."""
    if filename.endswith((".so", ".pyd")):
        return filename.partition(".")[0]
    for ending in (".py", ".pyc", ".pyw"):
        if filename.endswith(ending):
            return filename[:-len(ending)]
    return None


def in_test_folder(rel: str) -> bool:
    """Whether the file at ``rel`` (a POSIX path relative to the rootdir) is in a test folder:
    one of its folders (not the file's own name) starts with ``test`` (``tests/helpers.py``,
    ``test/util.py``, ``testing/data.py``, ``pkg/tests/conftest_helpers.py``), and none is a
    ``site-packages`` or ``dist-packages`` folder (a virtualenv inside the project)."""
    folders = rel.split("/")[:-1]
    return (any(part.startswith("test") for part in folders)
            and not _INSTALLED_FOLDERS.intersection(folders))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _holder(origin: str) -> str:
    """The ``sys.path`` folder a top-level module's file (or namespace folder, ending in a
    separator) was found in."""
    if origin.endswith(os.sep):
        return os.path.dirname(origin.rstrip(os.sep))
    folder = os.path.dirname(origin)
    if os.path.basename(origin).startswith("__init__."):
        return os.path.dirname(folder)
    return folder


def watch(imports: Sequence[Mapping[str, Any]], rootdir: Path,
          extra_folders: Iterable[Path] = ()) -> dict[str, tuple[str, ...]]:
    """The subjects to guard, from a check phase's imports report, with their parameters.

    Args:
        imports: one dict per process: ``{"path": [...], "modules": {name: file},
            "sources": [...], "missing": [names]}`` (:data:`pytest_ralph.checks.phase.
            IMPORTS_ENV`; ``"missing"`` may be absent).
        rootdir: the project root.
        extra_folders: more folders inside the project that come first on a check's
            ``sys.path`` (the rootdir, the PRD's folder, the basedirs): guarded for the
            installed names.

    Returns:
        ``{"folder <rel>/ (names the checks import)": (names...), "environment (...)":
        (files...), TEST_MODULES: (rel paths...)}``: for each folder, the top-level names that
        a module there would shadow (installed, or missing) and, implied, its distributions'
        metadata; for the environment, the absolute paths of the files
        whose digests are kept; for :data:`TEST_MODULES` (only when there is one), the
        source files inside the project, in a test folder (:func:`in_test_folder`), as POSIX
        paths relative to the rootdir, symbolic links resolved.
    """
    root = os.path.realpath(rootdir)
    folders: dict[str, set[str]] = {}
    sources: set[str] = set()
    tested: set[str] = set()
    # Every folder outside the project that a check process imports from (site-packages, and
    # folders a .pth file adds, where distributions and their entry points live too).
    sites = list(dict.fromkeys([*site_folders(), *(
        os.path.realpath(str(p)) for proc in imports for p in proc.get("path", ())
        if isinstance(p, str) and os.path.isdir(p)
        and not _inside(os.path.realpath(p), root))]))
    installed = installed_names(sites)
    # A name the checks imported from inside the project is the project's own module (an
    # installed copy of the project, say): the agent may edit it where it is.
    own = {name for proc in imports for name, origin in dict(
        proc.get("modules") or {}).items() if isinstance(origin, str)
        and _inside(os.path.realpath(_holder(origin)), root)}
    # The names an installed module tried to import and found nowhere (``copy`` tries
    # ``org.python.core``): a module of that name in a project folder would run.
    missing = {name for proc in imports for name in _list(proc.get("missing"))
               if isinstance(name, str) and name.isidentifier()}
    # (``?name``: a folder of the name counts too, as a namespace package: import finds the
    # name nowhere else; for an installed name the installed module wins over such a folder)
    installed = (installed | missing | {f"?{m}" for m in missing}) - own
    for proc in imports:
        path = [os.path.realpath(str(p)) for p in proc.get("path", ()) if isinstance(p, str)]
        modules = proc.get("modules", {})
        if not isinstance(modules, dict):
            continue
        for name, origin in modules.items():
            if not isinstance(name, str) or not isinstance(origin, str) or not origin:
                continue
            holder = os.path.realpath(_holder(origin))
            k = path.index(holder) if holder in path else len(path)
            for entry in path[:k]:
                if _inside(entry, root) and entry != holder:
                    folders.setdefault(entry, set()).add(name)
        for entry in path:
            if _inside(entry, root):
                folders.setdefault(entry, set()).update(installed)
        for source in proc.get("sources", ()):
            if not isinstance(source, str) or not os.path.isabs(source):
                continue
            real = os.path.realpath(source)
            if not _inside(real, root):
                sources.add(source)
                continue
            rel = os.path.relpath(real, root).replace(os.sep, "/")
            if in_test_folder(rel):
                tested.add(rel)
    for extra in extra_folders:
        real = os.path.realpath(extra)
        if _inside(real, root):
            folders.setdefault(real, set()).update(installed)
    out: dict[str, tuple[str, ...]] = {}
    for where, names in sorted(folders.items()):
        rel = os.path.relpath(where, root).replace(os.sep, "/")
        out[f"folder {rel}/{SHADOWS}"] = tuple(sorted(names))
    for site_dir in sites:
        if not _inside(site_dir, root):
            sources.add(os.path.join(site_dir, ""))  # the folder's .pth and entry-point files
    out[ENVIRONMENT] = tuple(sorted(sources))
    if tested:
        out[TEST_MODULES] = tuple(sorted(tested))
    return out


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def take(subject: str, params: Sequence[str], rootdir: Path) -> tuple[str, tuple[str, ...]]:
    """The digest of ``subject`` now and its name list (``name<TAB>digest`` items).

    Raises:
        ValueError: ``subject`` is not one of this module's.
    """
    if subject == ENVIRONMENT:
        return _environment(params)
    if subject in (TEST_MODULES, TESTS_IMPORT):
        return _test_modules(rootdir, params)
    if subject.startswith("folder ") and subject.endswith(SHADOWS):
        rel = subject[len("folder "):-len(SHADOWS)].rstrip("/") or "."
        return _shadows(rootdir / rel, frozenset(params))
    raise ValueError(f"not a subject of pytest_ralph.oracle.judges: {subject!r}")


def _file_digest(path: str) -> str:
    """:func:`pytest_ralph.util.files.digest`: a FIFO or a huge sparse file planted as a module
    neither hangs nor crashes the loop."""
    return digest(path)


def _pairs(pairs: list[tuple[str, str]]) -> tuple[str, tuple[str, ...]]:
    pairs.sort()
    listing = tuple(f"{name}\t{digest[:16]}" for name, digest in pairs)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest(), listing


def _shadows(folder: Path, names: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """What in ``folder`` import would take for one of ``names``: modules, packages with
    an ``__init__``, and for a name marked ``?name`` (one whose import failed at the baseline,
    found nowhere else) any folder of the name, which import takes as a namespace package; and
    the distributions' metadata there (:data:`DIST_ENDINGS`): the name of each, with the digest
    of its ``entry_points.txt`` (``absent`` without one; ``file`` for a metadata file), since
    the check's pytest loads the ``pytest11`` plugins it declares. The rest of the metadata
    (``SOURCES.txt``, which ``pip install -e .`` rewrites) does not count."""
    pairs: list[tuple[str, str]] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                name = module_name(entry.name)
                if entry.name.lower().endswith(DIST_ENDINGS):  # as importlib.metadata
                    if entry.is_dir():
                        pairs.append((f"{entry.name}/entry_points.txt", _file_digest(
                            os.path.join(entry.path, "entry_points.txt"))))
                    else:
                        pairs.append((entry.name, "file"))
                elif name in names and entry.is_file():
                    pairs.append((entry.name, _file_digest(entry.path)))
                elif entry.name in names and entry.is_dir():
                    if f"?{entry.name}" in names:  # a namespace package would be taken
                        pairs.append((f"{entry.name}/", "folder"))
                    for init in sorted(os.listdir(entry.path)):
                        if init.startswith("__init__.") and init.endswith(_MODULE_ENDINGS):
                            pairs.append((f"{entry.name}/{init}",
                                          _file_digest(os.path.join(entry.path, init))))
    except (FileNotFoundError, NotADirectoryError):
        return "absent", ()
    except OSError as exc:
        return f"unreadable: {exc.strerror}", ()
    return _pairs(pairs)


def _test_modules(rootdir: Path, files: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """Digests of ``files`` (POSIX paths relative to ``rootdir``); a file that is gone is left
    out of the listing (:func:`pytest_ralph.oracle.snapshot.listing_detail` says ``removed``)
    and changes the digest all the same. Beside each module, what import would take before
    it in its folder is listed too (:func:`_ahead_of`: a package ``helpers/`` or an extension
    module ``helpers.cpython-311-x86_64-linux-gnu.so`` beside ``helpers.py``), so that a new
    one standing in for a guarded module is a change."""
    pairs: list[tuple[str, str]] = []
    for rel in files:
        found = _file_digest(os.path.join(rootdir, rel))
        if found != "absent":
            pairs.append((rel, found))
        pairs += [(ahead, _file_digest(os.path.join(rootdir, ahead)))
                  for ahead in _ahead_of(rootdir, rel)]
    return _pairs(sorted(set(pairs)))


def _ahead_of(rootdir: Path, rel: str) -> list[str]:
    """The files in the folder of the module ``rel`` (``tests/helpers.py``) that import takes
    before it: ``helpers/__init__.*`` (a package wins over a module of its folder) and
    ``helpers`` with an extension-module suffix (tried before ``.py``)."""
    folder, _, name = rel.rpartition("/")
    stem, dot, _ = name.partition(".")
    if not dot or name.startswith("__init__."):
        return []
    base = os.path.join(rootdir, folder) if folder else str(rootdir)
    out: list[str] = []
    prefix = f"{folder}/" if folder else ""
    for ext in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.lexists(os.path.join(base, stem + ext)):
            out.append(f"{prefix}{stem}{ext}")
    for ext in (*importlib.machinery.EXTENSION_SUFFIXES, *importlib.machinery.SOURCE_SUFFIXES,
                *importlib.machinery.BYTECODE_SUFFIXES):
        if os.path.lexists(os.path.join(base, stem, "__init__" + ext)):
            out.append(f"{prefix}{stem}/__init__{ext}")
    return out


def _environment(files: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """Digests of ``files``; an entry ending in a separator is a site-packages folder: its
    ``*.pth`` files and each ``*.dist-info/entry_points.txt`` (and ``*.egg-link``) count."""
    pairs: list[tuple[str, str]] = []
    for path in files:
        if not path.endswith(os.sep):
            pairs.append((path, _file_digest(path)))
            continue
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            pairs.append((path, "absent"))
            continue
        for entry in entries:
            full = os.path.join(path, entry)
            if entry.endswith((".pth", ".egg-link")):
                pairs.append((full, _file_digest(full)))
            elif entry.lower().endswith((".dist-info", ".egg-info")):
                points = os.path.join(full, "entry_points.txt")
                if os.path.exists(points):
                    pairs.append((points, _file_digest(points)))
            elif entry in ("sitecustomize.py", "usercustomize.py"):
                pairs.append((full, _file_digest(full)))
    return _pairs(pairs)
