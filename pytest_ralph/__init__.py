"""pytest-ralph: run Ralph agent loops as pytest tests.

A PRD's acceptance criteria become pytest items; ``pytest --ralph`` runs a coding
agent until every criterion passes. Importing this package is cheap: the public
names below are loaded on first use (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

from .util.version import __version__

TYPE_CHECKING = False  # typing is not imported at run time: the Stop hook imports this package

__all__ = ["GO_ON", "PRD", "Check", "CheckResult", "Criterion", "HookError", "LoopHooks",
           "PRDError", "Problem", "RalphDatabase", "StopContext", "StopDecision", "Story",
           "__version__", "load_prd"]

_LAZY = {
    "PRD": "pytest_ralph.prd.model",
    "Criterion": "pytest_ralph.prd.model",
    "Story": "pytest_ralph.prd.model",
    "PRDError": "pytest_ralph.prd.errors",
    "Problem": "pytest_ralph.prd.errors",
    "load_prd": "pytest_ralph.prd.load",
    "Check": "pytest_ralph.checks.base",
    "CheckResult": "pytest_ralph.checks.base",
    "GO_ON": "pytest_ralph.loop.hooks",
    "HookError": "pytest_ralph.loop.hooks",
    "LoopHooks": "pytest_ralph.loop.hooks",
    "StopContext": "pytest_ralph.loop.hooks",
    "StopDecision": "pytest_ralph.loop.hooks",
    "RalphDatabase": "pytest_ralph.plugin.dbfixture",
}

if TYPE_CHECKING:
    from typing import Any

    from .checks.base import Check, CheckResult
    from .loop.hooks import GO_ON, HookError, LoopHooks, StopContext, StopDecision
    from .plugin.dbfixture import RalphDatabase
    from .prd.errors import PRDError, Problem
    from .prd.load import load_prd
    from .prd.model import PRD, Criterion, Story


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ralph' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
