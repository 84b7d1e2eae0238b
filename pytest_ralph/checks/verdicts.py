"""Verdicts from one check phase's results: the criteria whose judges changed, each story's
verdict and the note that write-back puts into the PRD.

:func:`apply` fails each criterion touched by an oracle change (see
:mod:`pytest_ralph.oracle.snapshot`).

:func:`story_verdicts` says whether every criterion of a story passed; :func:`story_notes`
gives the one line of a story's ``notes`` that the loop owns. Both take plain
:class:`~pytest_ralph.checks.results.CheckResults` and hand plain maps to
:func:`pytest_ralph.prd.writeback.write_back`, so that the PRD editor knows nothing of checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..oracle.snapshot import ADDED_HINT, RESTORE_HINT, Change
from ..prd.model import PRD
from ..prd.writeback import NOTE_PREFIX
from .results import CheckResults, CriterionResult

__all__ = ["NOTE_MAX_CHARS", "apply", "story_notes", "story_verdicts"]

#: The longest note :func:`story_notes` writes, in characters (prefix included).
NOTE_MAX_CHARS = 200


def _checked_stories(results: CheckResults,
                     prd: PRD | None) -> dict[str, list[CriterionResult]]:
    """``results.by_story()``, without the stories that ``prd`` says were checked in part."""
    out: dict[str, list[CriterionResult]] = {}
    for sid, crits in results.by_story().items():
        if prd is not None:
            story = prd.story(sid)
            checked = {c.criterion for c in crits if c.kind != "missing"}
            if story is None or not {c.id for c in story.criteria} <= checked:
                continue
        out[sid] = crits
    return out


def story_verdicts(results: CheckResults, prd: PRD | None = None, *,
                   strict: bool = False) -> dict[str, bool]:
    """Story id -> whether every criterion of the story passed in ``results``.

    With ``prd``, only stories whose every criterion was actually checked get a verdict
    (``-k`` may have checked part of a story: that says nothing about the rest).

    With ``strict`` (``--ralph-strict``: every claimed criterion fails, whatever the claim),
    a story whose only failing criteria are claimed gets no verdict: no check found it
    wrong, so its ``passes`` stays as the user set it (write-back would otherwise turn
    every claim into ``false``). A story with a failing check still gets ``False``, and one
    whose every criterion passed ``True``.
    """
    return {sid: all(c.passed for c in crits)
            for sid, crits in _checked_stories(results, prd).items()
            if not (strict and _only_claims_refused(crits))}


def _only_claims_refused(crits: list[CriterionResult]) -> bool:
    """Whether ``crits`` fail, and only on claimed criteria (refused by strict mode)."""
    failing = [c for c in crits if not c.passed]
    return bool(failing) and all(c.claimed for c in failing)


def story_notes(results: CheckResults, prd: PRD | None = None, *,
                strict: bool = False) -> dict[str, str]:
    """Story id -> the loop's one-line note about the story's criteria in ``results``.

    The note depends only on the outcomes (no time, no duration), so an unchanged result
    gives an unchanged note and write-back leaves the file alone. Its forms::

        pytest-ralph: all 3 criteria pass
        pytest-ralph: the 1 criterion passes (1 claimed, not verified)
        pytest-ralph: 1/3 criteria pass (1 claimed, not verified); failing: AC2, AC3
        pytest-ralph: 0/2 criteria pass (2 claims refused by --ralph-strict; passes left as
            written); failing: AC1, AC2   (one line, cut here)

    Failing criteria are named by criterion id, in collection order; a note longer than
    :data:`NOTE_MAX_CHARS` lists the ids that fit and ``+N more``. "Claimed" counts the
    passing criteria decided by the story's claim rather than by a check; under ``strict``,
    "claims refused" counts the failing ones, and "passes left as written" says that the
    story got no verdict (see :func:`story_verdicts`).

    Args:
        results: one check phase.
        prd: as for :func:`story_verdicts`: with it, only stories whose every criterion
            was checked get a note.
        strict: the phase ran with ``--ralph-strict``.

    Returns:
        ``{story id: note}``; every note starts with :data:`NOTE_PREFIX` and is one line.
    """
    return {sid: _note(crits, strict)
            for sid, crits in _checked_stories(results, prd).items()}


def _note(crits: list[CriterionResult], strict: bool = False) -> str:
    n = len(crits)
    passed = [c for c in crits if c.passed]
    claimed = sum(c.claimed for c in passed)
    claim = f" ({claimed} claimed, not verified)" if claimed else ""
    refused = sum(c.claimed and not c.passed for c in crits) if strict else 0
    if refused:
        kept = "; passes left as written" if _only_claims_refused(crits) else ""
        claim = (f" ({refused} claim{'s' if refused != 1 else ''} refused by --ralph-strict"
                 f"{kept})")
    if len(passed) == n:
        head = "the 1 criterion passes" if n == 1 else f"all {n} criteria pass"
        return f"{NOTE_PREFIX}{head}{claim}"
    head = f"{NOTE_PREFIX}{len(passed)}/{n} criteria pass{claim}; failing: "
    failing = [c.criterion for c in crits if not c.passed]
    return head + _bounded_list(failing, NOTE_MAX_CHARS - len(head))


def _bounded_list(ids: list[str], room: int) -> str:
    """``"A, B, +3 more"``: as many of ``ids`` as fit in ``room`` characters."""
    shown: list[str] = []
    for i, cid in enumerate(ids):
        rest = len(ids) - i - 1
        if len(", ".join([*shown, cid]) + (f", +{rest} more" if rest else "")) > room:
            break
        shown.append(cid)
    rest = len(ids) - len(shown)
    if not shown:  # not even one id fits
        return f"{rest} criteri{'on' if rest == 1 else 'a'}"
    return ", ".join(shown) + (f", +{rest} more" if rest else "")


def apply(results: CheckResults, changes: Sequence[Change]) -> CheckResults:
    """``results`` with every criterion touched by ``changes`` failing.

    The failure message names each change first (then the criterion's own failure, if it
    failed anyway), so that the prompt tells the agent what to restore and the
    fingerprint sees the edit.
    """
    if not changes:
        return results
    by_key: dict[str, list[str]] = {}
    for ch in changes:
        for key in ch.criteria:
            by_key.setdefault(key, []).append(ch.describe())
    criteria: list[CriterionResult] = []
    for c in results.criteria:
        what = by_key.get(c.key)
        if not what:
            criteria.append(c)
            continue
        hint = RESTORE_HINT
        if any(": added " in w or w.endswith(" added") for w in what):
            hint = ADDED_HINT + "; " + hint
        message = (f"criteria changed: {'; '.join(what)} since the run started; expected "
                   f"the checks that judge this criterion to stay as they were: {hint}")
        if not c.passed and c.message:
            message += f"\nthe check itself also failed:\n{c.message}"
        criteria.append(replace(c, outcome="failed", message=message, claimed=False))
    return replace(results, criteria=tuple(criteria))
