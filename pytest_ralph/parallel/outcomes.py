"""What the merge queue found and did: the outcome of one check (:class:`CheckOutcome`), of one
merge (:class:`MergeResult`) and of bringing the integration branch home
(:class:`FinishResult`), each with its JSON form (``queue.json`` of
:mod:`pytest_ralph.parallel.queue`).

This module does not import pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..checks.results import CheckResults

__all__ = ["FAILURE_CHARS", "OUTCOMES", "CheckOutcome", "FinishResult", "MergeResult",
           "one_line"]

#: What a merge can come to: kept; refused by git; refused by the criteria (the story's own,
#: or others that passed before); never tried (a story it depends on is not merged).
OUTCOMES = ("merged", "conflict", "story-failed", "regressed", "blocked")

#: How many characters of a failure message go into one failure line.
FAILURE_CHARS = 400


# -- what a check found -----------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOutcome:
    """What one whole check phase found in one folder.

    Attributes:
        criteria: criterion key (``<story>::<criterion>``, as
            :attr:`pytest_ralph.checks.results.CriterionResult.key`) -> passed, in check order.
        stories: story id -> every one of its criteria passed (a story with no criterion
            checked is absent).
        failures: one line per failing criterion, ``<story>::<criterion>: <message>`` (the
            message on one line, at most :data:`FAILURE_CHARS` characters), in check order.
        errors: what kept criteria from being checked (a collection error, a gate that did not
            run); a check with errors verifies no story.
        claimed: the keys of the criteria that passed on their story's claim (text criteria
            without a check, ``"passes": true``), not on a check: said in :attr:`summary`;
            under ``--ralph-strict`` there are none (they fail).
        imports: what the check's processes imported
            (:attr:`pytest_ralph.checks.results.CheckResults.imports`, when the gate asked),
            for the queue's guard of the names the checks import; not kept in JSON.
    """

    criteria: Mapping[str, bool]
    stories: Mapping[str, bool]
    failures: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    claimed: tuple[str, ...] = ()
    imports: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_results(cls, results: CheckResults) -> CheckOutcome:
        """The outcome of a results file (:func:`pytest_ralph.checks.results.read_results`)."""
        criteria = {c.key: c.passed for c in results.criteria}
        stories = {story: all(c.passed for c in items)
                   for story, items in results.by_story().items()}
        failures = tuple(f"{c.key}: {one_line(c.message) or 'failed'}"
                         for c in results.failing)
        claimed = tuple(c.key for c in results.criteria if c.passed and c.claimed)
        return cls(criteria, stories, failures, tuple(one_line(e) for e in results.errors),
                   claimed, results.imports)

    def verified(self, story_id: str) -> bool:
        """Whether the check verified ``story_id``: it has criteria, all passed, no error."""
        return not self.errors and self.stories.get(story_id, False)

    def story_failures(self, story_id: str) -> list[str]:
        """The failure lines of ``story_id``'s criteria, then the check's errors."""
        own = [f for f in self.failures if f.startswith(f"{story_id}::")]
        return own + [f"<check>: {e}" for e in self.errors]

    def regressions(self, before: CheckOutcome) -> list[str]:
        """The criterion keys that passed in ``before`` and do not pass here (failed, or
        gone), in ``before``'s order."""
        return [k for k, ok in before.criteria.items() if ok and not self.criteria.get(k, False)]

    @property
    def summary(self) -> str:
        """One line: ``5/6 criteria passed`` (``, 1 claimed, not verified`` when some passed
        on their story's claim; ``, 1 error`` when there were errors)."""
        passed = sum(1 for ok in self.criteria.values() if ok)
        text = f"{passed}/{len(self.criteria)} criteria passed"
        if self.claimed:
            text += f", {len(self.claimed)} claimed, not verified"
        if self.errors:
            text += f", {len(self.errors)} error{'s' if len(self.errors) > 1 else ''}"
        return text

    def to_json(self) -> dict[str, Any]:
        """As a JSON-ready dict: ``{"criteria": {key: bool}, "stories": {id: bool},
        "failures": [str], "errors": [str], "claimed": [str]}``."""
        return {"criteria": dict(self.criteria), "stories": dict(self.stories),
                "failures": list(self.failures), "errors": list(self.errors),
                "claimed": list(self.claimed)}

    @classmethod
    def from_json(cls, data: Any) -> CheckOutcome:
        """The reverse of :meth:`to_json`.

        Raises:
            ValueError: ``data`` is not of that shape.
        """
        if not isinstance(data, dict):
            raise ValueError("a check outcome is an object")
        criteria: Any = data.get("criteria")
        stories: Any = data.get("stories")
        if not (_bool_map(criteria) and _bool_map(stories)):
            raise ValueError("a check outcome's criteria and stories map names to true/false")
        return cls(dict(criteria), dict(stories), _strings(data.get("failures", [])),
                   _strings(data.get("errors", [])), _strings(data.get("claimed", [])))


def _bool_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, bool) for k, v in value.items())


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    return tuple(value)


def one_line(text: str) -> str:
    """``text`` on one line (runs of white space made one space), at most
    :data:`FAILURE_CHARS` characters (the end cut to "...")."""
    line = " ".join(text.split())
    return line if len(line) <= FAILURE_CHARS else line[: FAILURE_CHARS - 3] + "..."


# -- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeResult:
    """What one turn of the queue did with one story.

    Attributes:
        story: the story id.
        branch: the lane's branch (as given, without ``refs/heads/``).
        outcome: one of :data:`OUTCOMES`.
        lane_commit: the commit the lane's branch named when it was merged (``""`` for
            ``blocked``).
        before: the integration head before the turn.
        commit: the integration head after it: the merge commit when ``merged``, else
            ``before`` (the merge was undone or never made).
        summary: the check's one-line summary (:attr:`CheckOutcome.summary`), or what refused
            the merge (``conflict in 2 files``, ``waits for US-001``).
        conflicts: the paths git could not merge (``conflict`` only), relative to the top.
        regressed: the criterion keys that passed before and failed after (``regressed``).
        failures: the lines for the lane's next prompt: the story's failing criteria, the
            regressed ones, or the conflicting paths; ``()`` when merged.
        at: when the turn ended, Unix time in seconds.
    """

    story: str
    branch: str
    outcome: str
    lane_commit: str
    before: str
    commit: str
    summary: str
    conflicts: tuple[str, ...] = ()
    regressed: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    at: float = 0.0

    @property
    def merged(self) -> bool:
        """Whether the story's work is on the integration branch."""
        return self.outcome == "merged"

    def line(self) -> str:
        """One line for a terminal: ``US-001 ralph/r/US-001: merged (3/3 criteria passed)``."""
        return f"{self.story} {self.branch}: {self.outcome} ({self.summary})"

    def to_json(self) -> dict[str, Any]:
        """As a JSON-ready dict, the attributes by name (tuples as lists)."""
        return {"story": self.story, "branch": self.branch, "outcome": self.outcome,
                "lane_commit": self.lane_commit, "before": self.before, "commit": self.commit,
                "summary": self.summary, "conflicts": list(self.conflicts),
                "regressed": list(self.regressed), "failures": list(self.failures),
                "at": self.at}

    @classmethod
    def from_json(cls, data: Any) -> MergeResult:
        """The reverse of :meth:`to_json`.

        Raises:
            ValueError: ``data`` is not of that shape.
        """
        if not isinstance(data, dict):
            raise ValueError("a merge result is an object")
        text = {k: data.get(k) for k in ("story", "branch", "outcome", "lane_commit", "before",
                                          "commit", "summary")}
        if not all(isinstance(v, str) for v in text.values()) or text["outcome"] not in OUTCOMES:
            raise ValueError("a merge result needs story, branch, outcome (one of "
                             f"{', '.join(OUTCOMES)}), lane_commit, before, commit, summary")
        at = data.get("at", 0.0)
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            raise ValueError("a merge result's 'at' is a number")
        return cls(**{k: str(v) for k, v in text.items()},
                   conflicts=_strings(data.get("conflicts", [])),
                   regressed=_strings(data.get("regressed", [])),
                   failures=_strings(data.get("failures", [])), at=float(at))


@dataclass(frozen=True)
class FinishResult:
    """What :meth:`MergeQueue.finish` did with the user's branch.

    Attributes:
        outcome: ``fast-forwarded`` (the branch now names the integration head), ``manual``
            (it was left alone; ``reason`` says why, ``command`` how to merge by hand) or
            ``nothing`` (no story was merged; the branch was left alone).
        branch: the user's branch.
        old: the commit it named before.
        new: the commit it names now (``old`` unless fast-forwarded).
        integration: the integration branch and, in ``head``, its head.
        head: the integration branch's head.
        reason: why it was not fast-forwarded (``""`` when it was).
        command: the shell command that merges the integration branch into the user's branch
            by hand (``""`` unless ``manual``).
    """

    outcome: str
    branch: str
    old: str
    new: str
    integration: str
    head: str
    reason: str = ""
    command: str = ""

    def line(self) -> str:
        """One line for a terminal."""
        if self.outcome == "fast-forwarded":
            return (f"{self.branch} fast-forwarded to {self.integration} "
                    f"({self.old[:12]}..{self.new[:12]})")
        if self.outcome == "nothing":
            return f"{self.branch} left at {self.old[:12]}: no story was merged"
        return f"{self.branch} left at {self.old[:12]}: {self.reason}; merge by hand: " \
               f"{self.command}"

    def to_json(self) -> dict[str, Any]:
        """As a JSON-ready dict, the attributes by name."""
        return dict(self.__dict__)
