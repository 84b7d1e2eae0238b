"""Shared fixtures: PRD writers and scripted agents for pytester-based tests."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

PY = shlex.quote(sys.executable)


def story(sid: str, *criteria: Any, priority: int = 1, passes: bool = False,
          title: str | None = None) -> dict[str, Any]:
    """A canonical user story dict."""
    return {"id": sid, "title": title or f"story {sid}", "description": f"about {sid}",
            "acceptanceCriteria": list(criteria), "priority": priority, "passes": passes,
            "notes": ""}


@pytest.fixture
def write_prd(pytester: pytest.Pytester) -> Callable[..., Path]:
    """write_prd(*stories, name="prd.json", project="Demo") -> path of a canonical JSON PRD."""

    def write(*stories: dict[str, Any], name: str = "prd.json", project: str = "Demo",
              **top: Any) -> Path:
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"project": project, "branchName": "ralph/demo", "description": "demo",
                **top, "userStories": list(stories)}
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def agent(pytester: pytest.Pytester) -> Callable[[str, str], str]:
    """agent(name, body) writes a Python agent script and returns its command line."""

    def make(name: str, body: str) -> str:
        path = pytester.path / name
        path.write_text(body, encoding="utf-8")
        return f"{PY} {shlex.quote(str(path))}"

    return make
