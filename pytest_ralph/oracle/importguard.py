"""Keep the loop's own process from importing the agent's files while a run goes on.

The loop (``pytest --ralph``, the controller) is a pytest process started in the project, so
the project is on its ``sys.path`` (first of all under ``python -m pytest``), and it imports
some modules only when it first needs them (``jsonschema`` to explain a broken PRD, ``sqlite3``,
``xml.etree``...). A ``jsonschema.py`` or ``sqlite3/`` the agent wrote into the project would be
imported into the controller itself, which decides "complete": no guard could hold then.

:class:`ProjectImports` is a ``sys.meta_path`` finder installed for the whole run
(:func:`guarded`): an import that would load a file from inside the project (a module, a
package, a namespace portion) is looked up again without the project's folders on the path,
and fails with :class:`ImportError` when only the project has it. The ``conftest.py`` files
the controller loaded at start-up, and anything they imported then, stay as they are (they are
in ``sys.modules``); pytest-ralph itself, when it is installed from inside the project (its own
repository), is let through.

This module does not import pytest.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


def _inside(path: str | None, root: str) -> bool:
    if not path:
        return False
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


class ProjectImports(importlib.abc.MetaPathFinder):
    """A finder that never lets a module be imported from inside ``root``.

    Attributes:
        root: the project folder (resolved).
        refused: the names it refused or redirected, with the project file, in order.
    """

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.refused: list[tuple[str, str]] = []
        own = sys.modules.get("pytest_ralph")
        self._own = _inside(getattr(own, "__file__", None), self.root)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """The spec import would find, but from outside the project.

        Raises:
            ImportError: only the project has ``fullname``.
        """
        if self._own and fullname.split(".")[0] == "pytest_ralph":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        where = spec.origin if spec.origin not in (None, "namespace") else next(
            iter(spec.submodule_search_locations or ()), None)
        if not _inside(where, self.root):
            return spec
        self.refused.append((fullname, str(where)))
        search = [p for p in (path if path is not None else sys.path)
                  if isinstance(p, str) and not _inside(p or os.curdir, self.root)]
        other = importlib.machinery.PathFinder.find_spec(fullname, search)
        if other is not None:
            return other
        raise ImportError(f"pytest-ralph: the loop does not import {fullname!r} from the "
                          f"project while it runs ({where}); a conftest.py hook that needs a "
                          "project module imports it at the top of the conftest.py",
                          name=fullname)


@contextmanager
def guarded(root: Path) -> Iterator[ProjectImports]:
    """Install a :class:`ProjectImports` for ``root`` first on ``sys.meta_path`` for the body."""
    finder = ProjectImports(root)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
