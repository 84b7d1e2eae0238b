"""pytest-ralph: run Ralph agent loops as pytest tests.

A PRD's acceptance criteria become pytest items; ``pytest --ralph`` runs a coding
agent until every criterion passes. Importing this package is cheap: the public
names below are loaded on first use (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the Stop hook imports this package
__version__ = "0.1.0"

__all__ = ["PRD", "Criterion", "PRDError", "Problem", "Story", "__version__", "load_prd"]

_LAZY = {
    "PRD": "pytest_ralph.model",
    "Criterion": "pytest_ralph.model",
    "Story": "pytest_ralph.model",
    "PRDError": "pytest_ralph.prd",
    "Problem": "pytest_ralph.prd",
    "load_prd": "pytest_ralph.prd",
}

if TYPE_CHECKING:
    from typing import Any

    from .model import PRD, Criterion, Story
    from .prd import PRDError, Problem, load_prd


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ralph' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
