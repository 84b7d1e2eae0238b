"""The check-results file: what one check phase found, as plain JSON.

The child pytest of each check phase writes this file (``--ralph-results PATH``);
the loop controller reads it. Keeping the exchange in a file means the controller
never imports project code.

Format (``version`` 1)::

    {"version": 1, "prd": "/abs/prd.json", "exitstatus": 1,
     "criteria": [{"nodeid": "prd.json::US-001::AC1", "story": "US-001", "criterion": "AC1",
                   "text": "...", "kind": "run", "outcome": "passed" | "failed",
                   "message": "...", "claimed": false, "duration": 0.12}],
     "errors": ["collection error text", ...]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..util.files import atomic_write_text, read_text
from .fingerprint import fingerprint

RESULTS_VERSION = 1

#: Largest results file read, in bytes (10,000 criteria with long messages are ~50 MB).
MAX_RESULTS_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class CriterionResult:
    """The outcome of one criterion in one check phase.

    Attributes:
        nodeid: the pytest node id.
        story: story id.
        criterion: criterion id (``AC1`` or explicit).
        text: the criterion text (headline).
        kind: the criterion's check kind (``run``, ``pytest``, ... ``text``), ``verifier``
            for a text criterion judged by ini ``ralph_verifier``, or ``missing``.
        outcome: ``passed`` or ``failed``.
        message: failure text, or a note for a pass (``claimed, not verified``).
        claimed: decided by the story's claim, not a check.
        duration: seconds the check took.
    """

    nodeid: str
    story: str
    criterion: str
    text: str
    kind: str
    outcome: str
    message: str = ""
    claimed: bool = False
    duration: float = 0.0

    @property
    def key(self) -> str:
        """``<story>::<criterion>``."""
        return f"{self.story}::{self.criterion}"

    @property
    def passed(self) -> bool:
        """Whether the criterion passed."""
        return self.outcome == "passed"


@dataclass(frozen=True)
class CheckResults:
    """Everything one check phase found.

    Attributes:
        criteria: one result per criterion, in collection order.
        errors: problems that kept criteria from being checked at all (an invalid
            PRD, a child pytest that crashed); each is a failure of the phase.
        exitstatus: the child pytest's exit status (``-1`` when unknown).
        duration: seconds the phase took.
        imports: what the phase's Python processes imported, when the loop asked (one dict
            per process, see :data:`pytest_ralph.util.env.IMPORTS_ENV`); never stored.
    """

    criteria: tuple[CriterionResult, ...]
    errors: tuple[str, ...] = ()
    exitstatus: int = -1
    duration: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    imports: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)

    @property
    def failing(self) -> list[CriterionResult]:
        """The criteria that failed, in collection order."""
        return [c for c in self.criteria if not c.passed]

    @property
    def passing(self) -> list[CriterionResult]:
        """The criteria that passed."""
        return [c for c in self.criteria if c.passed]

    @property
    def complete(self) -> bool:
        """True when there was at least one criterion, all passed, and nothing went wrong."""
        return bool(self.criteria) and not self.errors and not self.failing

    def failures(self) -> list[tuple[str, str]]:
        """(criterion key or ``<check>``, failure text) for every failure and error."""
        out = [(c.key, c.message) for c in self.failing]
        out += [("<check>", e) for e in self.errors]
        return out

    @property
    def fingerprint(self) -> str:
        """The failure fingerprint of :meth:`failures`, their texts normalized (see
        :mod:`pytest_ralph.checks.fingerprint`); ``""`` when nothing fails."""
        return fingerprint(self.failures())

    def by_story(self) -> dict[str, list[CriterionResult]]:
        """Criterion results grouped by story id, in collection order."""
        out: dict[str, list[CriterionResult]] = {}
        for c in self.criteria:
            out.setdefault(c.story, []).append(c)
        return out

    def redacted(self, redact: Callable[[str], str]) -> CheckResults:
        """These results with ``redact`` applied to every criterion's text and message and to
        every error (:meth:`pytest_ralph.util.redact.Redactor.text`: the loop keeps and compares
        only redacted failures, so a fingerprint is the same in every process that knows the
        same secrets)."""
        return replace(self, criteria=tuple(
            replace(c, text=redact(c.text), message=redact(c.message)) for c in self.criteria),
            errors=tuple(redact(e) for e in self.errors))

    def to_json(self) -> dict[str, Any]:
        """The results as a JSON-ready dict (format in the module docstring)."""
        return {**self.extra, "version": RESULTS_VERSION, "exitstatus": self.exitstatus,
                "duration": self.duration,
                "criteria": [asdict(c) for c in self.criteria], "errors": list(self.errors)}


def write_results(path: Path, criteria: Iterable[CriterionResult], errors: Iterable[str],
                  exitstatus: int, extra: dict[str, Any] | None = None) -> None:
    """Write a results file atomically (temp file + rename)."""
    results = CheckResults(tuple(criteria), tuple(errors), exitstatus, extra=extra or {})
    atomic_write_text(path, json.dumps(results.to_json(), indent=1, ensure_ascii=False))


def read_results(path: Path) -> CheckResults:
    """Read a results file.

    Raises:
        ValueError: the file is missing, not a regular file, over :data:`MAX_RESULTS_BYTES`,
            not JSON, or not of this format.
    """
    try:  # read_text: never a FIFO or a device; bounded
        data = json.loads(read_text(path, MAX_RESULTS_BYTES))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise ValueError(f"cannot read check results {path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"cannot read check results {path}: nested too deeply") from None
    if not isinstance(data, dict) or data.get("version") != RESULTS_VERSION:
        raise ValueError(f"check results {path}: unknown format")
    fields = CriterionResult.__dataclass_fields__
    try:
        criteria = tuple(
            CriterionResult(**{k: v for k, v in c.items() if k in fields})
            for c in data["criteria"]
        )
        return CheckResults(criteria, tuple(data.get("errors", [])),
                            int(data.get("exitstatus", -1)), float(data.get("duration", 0.0)))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"check results {path}: unknown format ({exc!r})") from None


def prd_order(nodeids: Iterable[str], rootdir: Path) -> dict[str, int]:
    """Each node id's rank in PRD order: criteria of one PRD file by story position, then
    criterion position (``prd.json::US-001::AC1`` and so on), PRD files in the order they
    first appear in ``nodeids``, anything else (a criterion the PRD no longer has, another
    test) after its file's criteria in the order given. What a shuffling plugin
    (pytest-randomly) does to the run order does not change it.

    Args:
        nodeids: pytest node ids, relative to ``rootdir`` (as pytest makes them).
        rootdir: the session's rootdir.
    """
    from ..prd.errors import PRDError
    from ..prd.load import load_prd

    ids = list(nodeids)
    files: dict[str, int] = {}
    places: dict[str, dict[tuple[str, str], tuple[int, int]]] = {}
    for nodeid in ids:
        name = nodeid.split("::", 1)[0]
        if name in files:
            continue
        files[name] = len(files)
        try:
            prd = load_prd(rootdir / name)
        except (PRDError, OSError, ValueError):
            places[name] = {}
            continue
        places[name] = {(s.id, c.id): (s.position, c.index) for s in prd.stories
                        for c in s.criteria}
    last = (1 << 30, 0)

    def key(pair: tuple[int, str]) -> tuple[int, tuple[int, int], int]:
        given, nodeid = pair
        parts = nodeid.split("::")
        name = parts[0]
        place = places[name].get((parts[1], parts[2])) if len(parts) == 3 else None
        return files[name], place or last, given

    ranked = sorted(enumerate(ids), key=key)
    return {nodeid: rank for rank, (_, nodeid) in enumerate(ranked)}
