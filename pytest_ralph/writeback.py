"""Write-back: after each check phase, set each story's ``passes`` to what the checks found.

A story passes when all of its criteria passed; a story whose criteria are all
claimed therefore keeps its own claim. JSON files are rewritten in place, keeping
key order, indentation and the final newline. Formats that cannot be rewritten
without losing what the user wrote (``.jsonc`` comments, YAML) get a sidecar
file instead; sidecars are informational and never feed the claimed rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .results import CheckResults, atomic_write_text


def story_verdicts(results: CheckResults) -> dict[str, bool]:
    """Story id -> whether every criterion of the story passed in ``results``."""
    return {story: all(c.passed for c in crits) for story, crits in results.by_story().items()}


def write_back(prd_path: Path, verdicts: Mapping[str, bool], sidecar: Path) -> list[str]:
    """Set ``passes`` of the stories in ``verdicts``.

    Args:
        prd_path: the PRD file.
        verdicts: story id -> passes.
        sidecar: JSON file used for formats that are not rewritten in place
            (``{"prd": path, "passes": {story id: bool}}``).

    Returns:
        The ids of the stories whose ``passes`` changed (in the file or the sidecar).
        Nothing is written when the file cannot be read or is not a canonical PRD
        any more (the check phase reports that as a failure).
    """
    if prd_path.suffix.lower() != ".json":
        return _write_sidecar(prd_path, verdicts, sidecar)
    try:
        raw = prd_path.read_text("utf-8-sig")
        data = json.loads(raw)
    except (OSError, ValueError):
        return []
    stories = data.get("userStories") if isinstance(data, dict) else None
    if not isinstance(stories, list):
        return []
    changed: list[str] = []
    for story in stories:
        if isinstance(story, dict) and story.get("id") in verdicts:
            want = verdicts[story["id"]]
            if story.get("passes") is not want:
                story["passes"] = want
                changed.append(str(story["id"]))
    if changed:
        text = json.dumps(data, indent=_indent(raw), ensure_ascii=False)
        atomic_write_text(prd_path, text + ("\n" if raw.endswith("\n") else ""))
    return changed


def _indent(text: str) -> int | str | None:
    """The indentation of ``text`` for :func:`json.dumps`: a tab, a number of spaces, or
    ``None`` for a file written on one line (kept on one line)."""
    lines = text.strip().splitlines()
    if len(lines) <= 1:
        return None
    for line in lines[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) != len(line):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


def _write_sidecar(prd_path: Path, verdicts: Mapping[str, bool], sidecar: Path) -> list[str]:
    current: dict[str, Any] = {}
    try:
        loaded = json.loads(sidecar.read_text("utf-8"))
        if isinstance(loaded, dict) and loaded.get("prd") == str(prd_path):
            current = dict(loaded.get("passes") or {})
    except (OSError, ValueError):
        pass
    changed = [sid for sid, v in verdicts.items() if current.get(sid) is not v]
    if changed:
        current.update(verdicts)
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sidecar, json.dumps({"prd": str(prd_path), "passes": current}, indent=1))
    return changed
