"""pytest-ralph: run Ralph agent loops as pytest tests.

A PRD's acceptance criteria become pytest items; ``pytest --ralph`` runs a coding
agent until every criterion passes. Importing this package is cheap: the public
names below are loaded on first use (PEP 562 module ``__getattr__``).

These names, ``pytest_ralph.testing`` and the commands ``python -m pytest_ralph.hook`` and
``python -m pytest_ralph.docgen`` are the public interface. Every other module (the folders of
the package, see ``docs/architecture.md``) is internal and may move between versions.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the Stop hook imports this package

__all__ = ["GO_ON", "PRD", "AgentRun", "Check", "CheckResult", "CheckResults", "Criterion",
           "CriterionResult", "HookError", "Loop", "LoopHooks", "PRDError", "Problem",
           "PromptContext", "RalphDatabase", "StopContext", "StopDecision", "Story",
           "__version__", "load_prd", "normalize_failure", "template_path"]

_LAZY = {
    "__version__": "pytest_ralph.util.version",
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
    # The types in the hookspecs' signatures, for plugin authors:
    "AgentRun": "pytest_ralph.agents.run",
    "CheckResults": "pytest_ralph.checks.results",
    "CriterionResult": "pytest_ralph.checks.results",
    "normalize_failure": "pytest_ralph.checks.fingerprint",
    "PromptContext": "pytest_ralph.loop.prompt",
    # The loop in Python, without pytest (docs/hooks.md), and the bundled templates (docs/ci.md):
    "Loop": "pytest_ralph.loop.controller",
    "template_path": "pytest_ralph.loop.prompt",
}

if TYPE_CHECKING:
    from typing import Any

    from .agents.run import AgentRun
    from .checks.base import Check, CheckResult
    from .checks.fingerprint import normalize_failure
    from .checks.results import CheckResults, CriterionResult
    from .loop.controller import Loop
    from .loop.hooks import GO_ON, HookError, LoopHooks, StopContext, StopDecision
    from .loop.prompt import PromptContext, template_path
    from .plugin.dbfixture import RalphDatabase
    from .prd.errors import PRDError, Problem
    from .prd.load import load_prd
    from .prd.model import PRD, Criterion, Story
    from .util.version import __version__


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ralph' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
