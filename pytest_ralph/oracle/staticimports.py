"""The modules the guarded test files import from test folders, found by reading their source.

The baseline's imports report (:mod:`pytest_ralph.oracle.judges`) names what the check
processes imported, but not what a process a ``run`` command starts imported: ``run: python -m
pytest tests/test_calc.py`` runs ``tests/test_calc.py`` in a subprocess, and the helper module
it takes its expected values from (``tests/helpers.py``) would be the agent's to edit. So the
oracle follows the imports of each guarded Python file inside a test folder statically: each
file is parsed with :mod:`ast` (never imported), and each ``import X``, ``from X import Y`` and
relative import is resolved to files inside the project, in a test folder
(:func:`~pytest_ralph.oracle.judges.in_test_folder`), recursively.

Nothing is imported or run. This module does not import pytest.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..util.files import read_bytes
from .judges import in_test_folder

#: How many files the search reads at most (the guarded files included).
MAX_FILES = 200

#: The largest source file parsed (bytes); a larger one is skipped.
_MAX_SOURCE = 4 * 1024 * 1024


def imported_names(source: bytes) -> list[tuple[int, str, tuple[str, ...]]]:
    """The imports of a Python source: ``(level, module, names)`` for each ``import`` and
    ``from ... import`` statement anywhere in it (functions, ``try`` blocks included): level
    0 and each dotted module for ``import a.b, c`` (no names); the relative level, the module
    (``""`` for ``from . import x``) and the imported names for ``from``. ``[]`` when it does
    not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(0, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "",
                        tuple(a.name for a in node.names if a.name != "*")))
        else:
            out += [(0, name, ()) for name in _named_modules(node)]
    return out


def _named_modules(node: ast.AST) -> list[str]:
    """Modules a statement names as strings for something else to import:
    ``pytest_plugins = "a"`` / ``["a", "b"]`` (pytest imports them) and
    ``importlib.import_module("a")`` / ``__import__("a")`` with a literal name."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in targets) and \
                node.value is not None:
            value = node.value
            items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            return [i.value for i in items
                    if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else (
            func.id if isinstance(func, ast.Name) else "")
        if name in ("import_module", "__import__"):
            return [node.args[0].value]
    return []


def _module_files(base: Path, dotted: str) -> list[Path]:
    """The files import loads for the module ``dotted`` found under the folder ``base``: the
    ``__init__.py`` of each package on the way and the module itself (``a/b.py`` or
    ``a/b/__init__.py``); ``[]`` when its first part is not there."""
    out: list[Path] = []
    here = base
    parts = [p for p in dotted.split(".") if p]
    for part in parts:
        package = here / part / "__init__.py"
        module = here / f"{part}.py"
        if package.is_file():
            out.append(package)
            here = here / part
        elif module.is_file():
            out.append(module)
            break  # a module holds no submodules
        elif (here / part).is_dir():
            here = here / part  # a namespace package
        else:
            break
    return out


def resolve(path: Path, imports: Iterable[tuple[int, str, tuple[str, ...]]],
            bases: Sequence[Path]) -> list[Path]:
    """The files the imports ``imports`` of the file ``path`` may load: absolute imports
    looked up in the file's own folder (pytest puts a test's basedir first on ``sys.path``:
    ``from helpers import X`` beside the test when its folder has no ``__init__.py``) and in
    ``bases`` (the rootdir: ``from tests.helpers import X``); relative ones from the file's
    package. For ``from X import Y``, ``X.Y`` is tried too (``Y`` may be a submodule). Files
    that do not exist are left out; the paths are not resolved."""
    out: list[Path] = []
    folder = path.parent
    for level, module, names in imports:
        if level:
            start = folder
            for _ in range(level - 1):
                start = start.parent
            roots: Sequence[Path] = (start,)
        else:
            roots = (folder, *bases)
        for root in roots:
            dotted = [module] if module else []
            dotted += [f"{module}.{name}" if module else name for name in names]
            for each in dotted:
                out += _module_files(root, each)
    return out


def imported_test_modules(files: Iterable[Path], root: Path, bases: Sequence[Path],
                 limit: int = MAX_FILES) -> list[str]:
    """The files inside the resolved rootdir ``root``, in a test folder, that ``files``
    (guarded Python files) import, directly or through one another (see :func:`resolve`;
    ``bases`` are more folders absolute imports are looked up in: the rootdir), as sorted
    POSIX paths relative to ``root``, symbolic links resolved; ``files`` themselves are left
    out. At most ``limit`` files are read; a file that cannot be read or parsed is skipped.
    """
    seen: set[str] = set()
    found: set[str] = set()
    queue: list[Path] = []
    for path in files:
        rel = _rel(path, root)
        if rel is not None and rel not in seen:
            seen.add(rel)
            queue.append(path)
    reads = 0
    while queue and reads < limit:
        path = queue.pop(0)
        reads += 1
        try:
            source = read_bytes(path, _MAX_SOURCE)
        except (OSError, ValueError):
            continue
        for target in resolve(path, imported_names(source), bases):
            rel = _rel(target, root)
            if rel is None or rel in seen or not in_test_folder(rel):
                continue
            seen.add(rel)
            found.add(rel)
            queue.append(target)
    return sorted(found)


def _rel(path: Path, root: Path) -> str | None:
    """``path`` (links resolved) relative to ``root`` as a POSIX path; ``None`` outside."""
    real = os.path.realpath(path)
    if real == str(root) or not real.startswith(str(root).rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(real, root).replace(os.sep, "/")
