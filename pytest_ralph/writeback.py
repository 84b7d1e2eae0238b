"""Write-back: after each check phase, set each story's ``passes`` to what the checks found.

A story passes when all of its criteria passed; a story whose criteria are all
claimed therefore keeps its own claim. The file is edited, never re-serialized: the
``true``/``false`` word of a changed story is replaced, and a JSON or JSONC story
without ``passes`` gets ``, "passes": true`` inserted after its id. Formatting,
comments, escapes and line endings survive. A YAML story without ``passes`` gets its
verdict in a sidecar file; sidecars are informational and never feed the claimed rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .model import PRD
from .prd import PRD_FORMATS, YAML_LOADER, Positions, strip_jsonc
from .results import CheckResults, atomic_write_text


def story_verdicts(results: CheckResults, prd: PRD | None = None) -> dict[str, bool]:
    """Story id -> whether every criterion of the story passed in ``results``.

    With ``prd``, only stories whose every criterion was actually checked get a verdict
    (``-k`` may have checked part of a story: that says nothing about the rest).
    """
    out: dict[str, bool] = {}
    for sid, crits in results.by_story().items():
        if prd is not None:
            story = prd.story(sid)
            checked = {c.criterion for c in crits if c.kind != "missing"}
            if story is None or not {c.id for c in story.criteria} <= checked:
                continue
        out[sid] = all(c.passed for c in crits)
    return out


def write_back(prd_path: Path, verdicts: Mapping[str, bool], sidecar: Path) -> list[str]:
    """Set ``passes`` of the stories in ``verdicts``.

    Only the ``passes`` literal of a changed story is replaced, or for a JSON/JSONC story
    without one, ``, "passes": X`` is inserted after its id: the rest of the file stays byte
    for byte. A YAML story without ``passes`` gets its verdict in the sidecar instead.

    Args:
        prd_path: the PRD file.
        verdicts: story id -> passes.
        sidecar: JSON file for verdicts that cannot be written into the PRD
            (``{"prd": path, "passes": {story id: bool}}``).

    Returns:
        The ids of the stories whose ``passes`` changed (in the file or the sidecar).
        Nothing is written when the file cannot be read or parsed, or is not a canonical
        PRD any more (the check phase reports that as a failure).
    """
    fmt = PRD_FORMATS.get(prd_path.suffix.lower())
    try:
        raw = prd_path.read_bytes()
        bom = raw.startswith(b"\xef\xbb\xbf")
        text = raw[3:].decode("utf-8") if bom else raw.decode("utf-8")
        data = _load(text, fmt)
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return []
    stories = data.get("userStories") if isinstance(data, dict) else None
    if not isinstance(stories, list):
        return []
    positions = Positions(text, fmt or "json")
    line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    edits: list[tuple[int, int, str]] = []
    changed: list[str] = []
    unplaced: dict[str, bool] = {}
    for i, story in enumerate(stories):
        if not (isinstance(story, dict) and story.get("id") in verdicts):
            continue
        sid, want = story["id"], verdicts[story["id"]]
        span = _literal_span(text, line_starts, positions.at(f"$.userStories[{i}].passes"))
        if span is not None and isinstance(story.get("passes"), bool):
            if story["passes"] is not want:
                edits.append((*span, "true" if want else "false"))
                changed.append(str(sid))
        elif story.get("passes") is not want:
            after_id = None
            if fmt in ("json", "jsonc") and "passes" not in story:
                after_id = _string_end(text, line_starts,
                                       positions.at(f"$.userStories[{i}].id"))
            if after_id is not None:  # insert `, "passes": X` right after the id
                edits.append((after_id, after_id, f', "passes": {"true" if want else "false"}'))
                changed.append(str(sid))
            else:
                unplaced[str(sid)] = want
    out = text
    for start, end, word in sorted(edits, reverse=True):
        out = out[:start] + word + out[end:]
    if unplaced:
        changed += _write_sidecar(prd_path, unplaced, sidecar)
    if out != text:
        atomic_write_text(prd_path, ("\ufeff" if bom else "") + out)
    return changed


_BOOL_LITERAL = re.compile(r"(?i:true|false|yes|no|on|off)\b")


def _literal_span(text: str, line_starts: list[int],
                  pos: tuple[int | None, int | None]) -> tuple[int, int] | None:
    """(start, end) of the boolean literal at 1-based (line, column), or ``None``."""
    line, column = pos
    if line is None or column is None or line > len(line_starts):
        return None
    start = line_starts[line - 1] + column - 1
    m = _BOOL_LITERAL.match(text, start)
    return (start, m.end()) if m else None


def _string_end(text: str, line_starts: list[int],
                pos: tuple[int | None, int | None]) -> int | None:
    """The index just after the JSON string literal at 1-based (line, column), or ``None``."""
    line, column = pos
    if line is None or column is None or line > len(line_starts):
        return None
    start = line_starts[line - 1] + column - 1
    if start >= len(text) or text[start] != '"':
        return None
    try:
        end: int = json.decoder.scanstring(text, start + 1)[1]  # type: ignore[attr-defined]
        return end
    except ValueError:
        return None


def _load(text: str, fmt: str | None) -> Any:
    if fmt == "yaml":
        return yaml.load(text, Loader=YAML_LOADER)
    return json.loads(strip_jsonc(text) if fmt == "jsonc" else text)


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
