"""Builders of PRD content: user stories and acceptance criteria, as the JSON dicts of a
canonical ``prd.json``."""

from __future__ import annotations

from typing import Any


def story(sid: str, *criteria: Any, priority: int = 1, passes: bool = False,
          title: str | None = None, description: str | None = None) -> dict[str, Any]:
    """A canonical user story dict: ``criteria`` are its acceptance criteria (texts or criterion
    dicts), ``title`` defaults to ``"story <sid>"``, ``description`` to ``"about <sid>"``."""
    return {"id": sid, "title": title or f"story {sid}",
            "description": f"about {sid}" if description is None else description,
            "acceptanceCriteria": list(criteria), "priority": priority, "passes": passes,
            "notes": ""}


def files_criteria(*names: str) -> list[dict[str, str]]:
    """One ``run`` criterion per file name: ``"<name> exists"``, checked by ``test -f <name>``."""
    return [{"text": f"{n} exists", "run": f"test -f {n}"} for n in names]
