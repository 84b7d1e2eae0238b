"""What the loader did to a PRD, in words: the dialect it normalized and what it renamed or
synthesized (:func:`dialect_line`, :func:`dialect_notes`), and why a PRD without stories has
nothing to check (:func:`no_stories_message`), and where a PRD was looked for when none was
found (:func:`no_prd_message`).

The pytest collector, the loop controller and the final report describe a PRD with these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from .model import PRD


def no_prd_message(rootdir: Path) -> str:
    """Where discovery looked when it found no PRD, and how to name one: ``no PRD found:
    looked for prd.json, ... in /project and its .ralph, scripts/ralph folders; name one
    with --ralph-prd PATH (or ini ralph_prd)``."""
    from .load import PRD_FILE_NAMES, PRD_SEARCH_DIRS

    return (f"no PRD found: looked for {', '.join(PRD_FILE_NAMES)} in {rootdir} and its "
            f"{', '.join(d for d in PRD_SEARCH_DIRS if d != '.')} folders; name one with "
            "--ralph-prd PATH (or ini ralph_prd)")


def dialect_line(prd: PRD) -> str | None:
    """What the loader did to a PRD that is not in the canonical shape, on one line:
    ``dialect tasks+steps+status (stories under $.tasks; ids synthesized from position:
    S1..S3; ...)``; ``None`` for a canonical PRD."""
    if prd.dialect == "canonical":
        return None
    notes = dialect_notes(prd)
    return f"dialect {prd.dialect}" + (f" ({'; '.join(notes)})" if notes else "")


def dialect_notes(prd: PRD) -> list[str]:
    """The loader's notes on ``prd`` (what it renamed or synthesized), without the "no
    stories" note of an empty PRD, which :func:`no_stories_message` says better."""
    return [n for n in prd.dialect_notes
            if prd.stories or not n.startswith("no stories")]


def no_stories_message(prd: PRD) -> str:
    """Why a PRD with no stories has nothing to check, naming where the stories were looked
    for: ``no user stories: $.tasks is empty; expected at least one story with acceptance
    criteria``."""
    where = prd.stories_path
    if where == "$":
        what = "the top-level array is empty"
    elif where.endswith("[].stories"):
        what = f"no phase under {where.removesuffix('[].stories')} has any story"
    else:
        what = f"{where} is empty"
    return f"no user stories: {what}; expected at least one story with acceptance criteria"
