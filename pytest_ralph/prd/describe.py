"""What the loader did to a PRD, in words: the dialect it normalized and what it renamed or
synthesized (:func:`dialect_line`, :func:`dialect_notes`), and why a PRD without stories has
nothing to check (:func:`no_stories_message`).

The pytest collector, the loop controller and the final report describe a PRD with these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import PRD


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
