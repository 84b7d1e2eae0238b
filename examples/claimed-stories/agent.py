"""A scripted stand-in for a coding agent that "finishes" one user story per run.

For PRDs whose acceptance criteria are all text (no commands), such as the
reference ``prd.json.example`` of snarktank/ralph: pytest-ralph treats each text
criterion as *claimed*, so a story's criteria pass once the story says
``"passes": true``. This agent reads the prompt on stdin, takes the story id from
the line after ``## Work on this story now`` (``US-002: title``), and sets that
story's ``passes`` to true in the PRD named by ``PRD`` (default ``prd.json``) in
the current directory. It does nothing else, and prints what it did.

The loop completes in one iteration per story; every criterion is then reported
as "claimed, not verified", and ``--ralph-strict`` makes the same loop trip the
circuit breaker instead. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

STORY = re.compile(r"^## Work on this story now\n(?P<id>[^:\s]+):", re.MULTILINE)


def main() -> int:
    """Mark the story the prompt asks for as done; exit 0."""
    prompt = sys.stdin.read()
    match = STORY.search(prompt)
    if match is None:
        print("agent: the prompt names no story; nothing to do")
        return 0
    path = Path(os.environ.get("PRD", "prd.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    for story in data["userStories"]:
        if story["id"] == match["id"]:
            if story.get("passes") is True:
                print(f"agent: {story['id']} already says passes: true; nothing to do")
                return 0
            story["passes"] = True
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                            encoding="utf-8")
            print(f"agent: set passes: true on {story['id']}")
            return 0
    print(f"agent: no story {match['id']} in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
