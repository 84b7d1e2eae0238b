"""The pipeline's stages, found at run time: one module each in this package.

A stage module defines

* ``STORY``: the PRD story id it implements (``"PLAN-1"``), for its ``agent_log`` lines;
* ``ORDER``: its place in ``python -m pipeline all`` (lower first);
* ``FINAL`` (optional, default false): run once after the others have settled (reports);
* ``run(conn) -> Outcome``: do the stage's work on an open database, in one transaction,
  and skip what is already done, so that running it twice changes nothing the second time.

Its command is its module name (``python -m pipeline briefs``) and its help the first line
of its docstring.
"""

from __future__ import annotations

import importlib
import pkgutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """What one run of a stage did.

    Attributes:
        changed: rows inserted or moved to another state (0: nothing left to do).
        summary: one line for the console, starting with the stage's name.
    """

    changed: int
    summary: str


@dataclass(frozen=True)
class Stage:
    """A stage module, as the command line sees it."""

    name: str
    story: str
    order: int
    final: bool
    help: str
    run: Callable[[sqlite3.Connection], Outcome]


def discover() -> list[Stage]:
    """Every stage module of this package, in ``ORDER``."""
    stages = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        doc = (module.__doc__ or info.name).strip().splitlines()[0]
        stages.append(Stage(name=info.name, story=module.STORY, order=module.ORDER,
                            final=getattr(module, "FINAL", False), help=doc, run=module.run))
    return sorted(stages, key=lambda stage: (stage.order, stage.name))
