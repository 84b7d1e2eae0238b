"""pytest-ralph: run Ralph agent loops as pytest tests.

A PRD's acceptance criteria become pytest items; ``pytest --ralph`` runs a coding
agent until every criterion passes. Importing this package is cheap: the public
names below are loaded on first use (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the Stop hook imports this package
__version__ = "0.1.0"

__all__ = ["GO_ON", "PRD", "Check", "CheckResult", "Criterion", "HookError", "LoopHooks",
           "PRDError", "Problem", "StopContext", "StopDecision", "Story", "__version__",
           "load_prd"]

_LAZY = {
    "PRD": "pytest_ralph.model",
    "Criterion": "pytest_ralph.model",
    "Story": "pytest_ralph.model",
    "PRDError": "pytest_ralph.prd",
    "Problem": "pytest_ralph.prd",
    "load_prd": "pytest_ralph.prd",
    "Check": "pytest_ralph.checks",
    "CheckResult": "pytest_ralph.checks",
    "GO_ON": "pytest_ralph.loophooks",
    "HookError": "pytest_ralph.loophooks",
    "LoopHooks": "pytest_ralph.loophooks",
    "StopContext": "pytest_ralph.loophooks",
    "StopDecision": "pytest_ralph.loophooks",
}

if TYPE_CHECKING:
    from typing import Any

    from .checks import Check, CheckResult
    from .loophooks import GO_ON, HookError, LoopHooks, StopContext, StopDecision
    from .model import PRD, Criterion, Story
    from .prd import PRDError, Problem, load_prd


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ralph' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
