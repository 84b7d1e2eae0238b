"""Shortens aider's retry back-off in the real-CLI tests (on ``PYTHONPATH`` there only).

aider 0.86.2 retries a failed model request with a doubling back-off until it passes
``aider.models.RETRY_TIMEOUT`` (60 s: nine attempts, about 64 s), a constant with no option
or variable. When ``RALPH_TEST_AIDER_RETRY_TIMEOUT`` holds a number of seconds, this sets
that constant as ``aider.models`` is imported (before ``aider.coders.base_coder`` copies
it), so an error ends a run in about a second. Nothing else of the CLI changes; in any other
interpreter (no ``aider.models`` is ever imported) it does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

_VARIABLE = "RALPH_TEST_AIDER_RETRY_TIMEOUT"


class _RetryTimeout(importlib.abc.MetaPathFinder):
    """Finds ``aider.models`` as usual and sets its ``RETRY_TIMEOUT`` once it has run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "aider.models":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, seconds = spec.loader, self.seconds

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                module.RETRY_TIMEOUT = seconds  # type: ignore[attr-defined]

        spec.loader = Loader()
        return spec


def _install() -> None:
    try:
        seconds = float(os.environ.get(_VARIABLE, ""))
    except ValueError:
        return
    sys.meta_path.insert(0, _RetryTimeout(seconds))


_install()
