"""Markdown job summaries for GitHub Actions (``GITHUB_STEP_SUMMARY``).

GitHub Actions gives every step an environment file named by ``GITHUB_STEP_SUMMARY``; the
GitHub-flavored Markdown appended to it is shown on the run's summary page, grouped per job
(GitHub's documentation: "Workflow commands for GitHub Actions", section "Adding a job
summary"). A step's summary is capped at 1 MiB, so everything here is bounded: at most
:data:`MOST_STORIES` story rows and :data:`MOST_FAILING` failing criteria, each message cut to
:data:`MESSAGE_CHARS` characters.

The gate (plain ``pytest`` on a PRD) and the loop (``pytest --ralph``) append one section each
run; the pytest layer (:mod:`pytest_ralph.plugin`) collects what they found and calls
:func:`render_gate` / :func:`render_loop`, then :func:`append`. This module does not import
pytest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..checks.results import CriterionResult
from ..util.text import plural

if TYPE_CHECKING:
    from ..loop.records import RunRecord

#: A function applied to user text before it is escaped (secret values of the environment
#: replaced: :meth:`pytest_ralph.util.redact.Redactor.text`).
Redact = Callable[[str], str]

#: The environment variable that names the step's summary file.
ENV = "GITHUB_STEP_SUMMARY"
#: Story rows shown at most; the rest are counted in one line.
MOST_STORIES = 200
#: Failing criteria listed at most; the rest are counted in one line.
MOST_FAILING = 50
#: Characters of a failure message shown at most.
MESSAGE_CHARS = 200

#: What the gate's exit codes mean (pytest's own exit codes; see "Exit codes" in
#: docs/loop.md).
GATE_EXIT = {
    0: "every selected criterion passes",
    1: "criteria (or tests) failing",
    2: "interrupted, or a PRD could not be collected",
    3: "internal error",
    4: "usage error",
    5: "no criteria collected",
}
#: What the loop's exit codes mean (``pytest_ralph.loop.records.EXIT_*``; see "Exit codes" in
#: docs/loop.md).
LOOP_EXIT = {
    0: "complete: every criterion passes",
    1: "stopped at a limit with criteria still failing",
    2: "interrupted or cancelled",
    3: "internal error",
    4: "usage error",
    5: "no criteria",
    6: "circuit breaker tripped, or every remaining story blocked",
    7: "the agent could not run",
}

#: Row statuses, in the order of the table's columns.
STATUSES = ("verified", "claimed", "failed", "unclaimed")

# ASCII punctuation that Markdown (GFM) gives a meaning to in running text or a table cell;
# each may be escaped with a backslash (GFM spec, "Backslash escapes").
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#&!])")


@dataclass(frozen=True)
class Row:
    """One criterion's outcome, as the summary shows it.

    Attributes:
        story: the story id.
        criterion: the criterion id (``AC1`` or an explicit id).
        text: the criterion's text (headline).
        status: one of :data:`STATUSES`: ``verified`` (passed by a check), ``claimed``
            (passed on the story's claim only), ``failed``, ``unclaimed`` (failing in a story
            not claimed done, under ``--ralph-gate=claims``: not counted).
        message: the failure text (``""`` for a pass).
        title: the story's title (``""`` when unknown).
    """

    story: str
    criterion: str
    text: str
    status: str
    message: str = ""
    title: str = ""

    @property
    def key(self) -> str:
        """``<story>::<criterion>``."""
        return f"{self.story}::{self.criterion}"


def escape(text: str, limit: int | None = None) -> str:
    """``text`` made safe for one Markdown table cell or list item: control characters
    dropped, every run of whitespace (newlines included) folded to one space, Markdown
    punctuation (``|``, backticks, ``*``, ``_``, ``[``, ``]``, ``<``, ``>``, ...) escaped
    with a backslash; cut to ``limit`` characters (before escaping, with ``...``) when given.

    Args:
        text: user text: a story title, a criterion's text, a failure message.
        limit: the most characters of ``text`` to keep, or ``None``.

    Returns:
        One line of Markdown that renders as ``text`` (shortened).
    """
    from ..loop.report import clean

    flat = " ".join(clean(text).split())
    if limit is not None and len(flat) > limit:
        flat = flat[:max(limit - 3, 0)].rstrip() + "..."
    return _SPECIAL.sub(r"\\\1", flat)


def shorten(message: str, limit: int = MESSAGE_CHARS) -> str:
    """The most telling line of a failure message (pytest's first ``E`` line, else the first
    line that is not a heading), escaped and cut to ``limit`` characters."""
    from ..loop.report import why

    return escape(why(message, limit=10 * limit), limit)




def _story_table(rows: Sequence[Row], titles: Mapping[str, str] | None = None) -> list[str]:
    """The per-story table: verified / claimed / failed counts (and not-claimed failures
    when there are any), stories in the order of their first row."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row.story, dict.fromkeys(STATUSES, 0))[row.status] += 1
    if not counts:
        return []
    extra = any(c["unclaimed"] for c in counts.values())
    heads = ["story", *(["title"] if titles is not None else []), "verified", "claimed",
             "failed", *(["failing, not claimed"] if extra else [])]
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for story, c in list(counts.items())[:MOST_STORIES]:
        cells = [escape(story)]
        if titles is not None:
            cells.append(escape(titles.get(story, ""), 100))
        cells += [str(c["verified"]), str(c["claimed"]), str(c["failed"])]
        if extra:
            cells.append(str(c["unclaimed"]))
        out.append("| " + " | ".join(cells) + " |")
    if len(counts) > MOST_STORIES:
        out.append(f"\n... and {plural(len(counts) - MOST_STORIES, 'more story', 'more stories')}")
    return [*out, ""]


def _failing_list(rows: Sequence[Row], heading: str) -> list[str]:
    """``heading`` and one line per failing criterion (bounded), or nothing."""
    failing = [r for r in rows if r.status == "failed"]
    if not failing:
        return []
    out = [f"**{heading} ({len(failing)})**", ""]
    for r in failing[:MOST_FAILING]:
        why = shorten(r.message)
        out.append(f"- {escape(r.key)}: {escape(r.text, 120)}" + (f" -- {why}" if why else ""))
    if len(failing) > MOST_FAILING:
        out.append(f"- ... and {len(failing) - MOST_FAILING} more")
    return [*out, ""]


def totals(rows: Sequence[Row]) -> str:
    """``3 of 5 passing: 2 verified, 1 claimed (not verified); 2 failing`` (and the failures
    not counted under ``--ralph-gate=claims``)."""
    n = {s: sum(r.status == s for r in rows) for s in STATUSES}
    text = (f"{n['verified'] + n['claimed']} of {len(rows)} passing: {n['verified']} verified, "
            f"{n['claimed']} claimed (not verified); {n['failed']} failing")
    if n["unclaimed"]:
        text += f"; {n['unclaimed']} failing in stories not claimed done (not counted)"
    return text


def _same(text: str) -> str:
    return text


def _redacted(rows: Sequence[Row], redact: Redact) -> list[Row]:
    return [Row(story=r.story, criterion=r.criterion, text=redact(r.text), status=r.status,
                message=redact(r.message), title=redact(r.title)) for r in rows]


def render_gate(rows: Sequence[Row], *, exit_code: int, prds: Iterable[str] = (),
                notes: Sequence[str] = (), errors: Sequence[str] = (),
                redact: Redact | None = None) -> str:
    """The gate's section: outcome, per-story counts, failing criteria.

    Args:
        rows: one per criterion that ran, in collection (PRD) order.
        exit_code: the exit status of the pytest session (:data:`GATE_EXIT`).
        prds: the PRD files, as shown (relative to the rootdir).
        notes: lines about PRDs with nothing to check (an empty PRD).
        errors: PRD files that could not be collected, one line each (message included).
        redact: applied to user text before it is escaped, or ``None``.

    Returns:
        GitHub-flavored Markdown, ending with a blank line.
    """
    r = redact or _same
    rows = _redacted(rows, r)
    shown = ", ".join(escape(p) for p in prds) or "none collected"
    verdict = "passed" if exit_code == 0 else "failed"
    meaning = GATE_EXIT.get(exit_code, "see the exit codes")
    unclaimed = sum(row.status == "unclaimed" for row in rows)
    if exit_code == 0 and unclaimed:  # --ralph-gate=claims: passed, but not all pass
        meaning = ("every story that claims to be done passes (--ralph-gate=claims); "
                   f"{plural(unclaimed, 'criterion', 'criteria')} of stories not claimed "
                   f"done {'fails' if unclaimed == 1 else 'fail'} (work in progress)")
    out = [f"### pytest-ralph gate: {verdict}", "",
           f"- PRD: {shown}",
           f"- Outcome: **exit {exit_code}**: {meaning}",
           f"- Criteria: {totals(rows)}", ""]
    if errors or notes:
        out += [*(f"- {escape(r(line), 400)}" for line in [*errors, *notes]), ""]
    titles = {row.story: row.title for row in rows if row.title}
    out += _story_table(rows, titles or None)
    out += _failing_list(rows, "Failing criteria")
    return "\n".join(out) + "\n"


def rows_of(results: Iterable[CriterionResult]) -> list[Row]:
    """:class:`Row` objects from the results of one of the loop's checks: a pass is
    ``claimed`` when its story's claim decided it, else ``verified``."""
    return [Row(story=c.story, criterion=c.criterion, text=c.text,
                status=("claimed" if c.claimed else "verified") if c.passed else "failed",
                message="" if c.passed else c.message) for c in results]


def render_loop(run: RunRecord, *, report: Path | None = None,
                redact: Redact | None = None) -> str:
    """The loop's section: status, exit code, iterations, reason, the chart of the criteria
    passing per iteration (Mermaid: :func:`pytest_ralph.loop.chart.mermaid`), per-story counts
    of the last check, its failing criteria, the report's path.

    Args:
        run: the ended run (:class:`pytest_ralph.loop.records.RunRecord`).
        report: the report file, or ``None``.
        redact: applied to user text before it is escaped (secret values of the environment),
            or ``None``.

    Returns:
        GitHub-flavored Markdown, ending with a blank line.
    """
    r = redact or _same
    results = run.last.results.criteria if run.iterations else ()
    rows = _redacted(rows_of(results), r)
    iterations = max(len(run.iterations) - 1, 0)
    code = run.exit_code
    meaning = LOOP_EXIT.get(code, "see the exit codes") if code is not None else "not ended"
    title = run.prd.project or run.prd.branch_name or run.prd.path.stem
    titles = {st.id: r(st.title) for st in run.prd.stories}
    out = [f"### pytest-ralph loop: {escape(r(title), 100)}: {escape(run.status)}", "",
           f"- Outcome: **exit {code}**: {meaning}",
           f"- Iterations: {iterations} of at most {run.settings.max_iterations}",
           f"- Reason: {escape(r(run.reason), 600)}",
           f"- Criteria: {totals(rows)}" if rows else "- Criteria: none checked",
           *([f"- Report: {escape(r(str(report)))}"] if report is not None else []), ""]
    from ..loop.chart import mermaid, run_chart

    out += mermaid(run_chart(run))
    out += _story_table(rows, titles)
    out += _failing_list(rows, "Failing criteria (last check)")
    return "\n".join(out) + "\n"


def render_loop_error(code: int, messages: Sequence[str], redact: Redact | None = None) -> str:
    """The loop's section when it stopped before a run began (a usage error, no criteria, an
    internal error): the exit code and what was said.

    Args:
        code: the exit code (:data:`LOOP_EXIT`).
        messages: the error messages printed.
        redact: applied to the messages before they are escaped, or ``None``.
    """
    r = redact or _same
    out = ["### pytest-ralph loop: not run", "",
           f"- Outcome: **exit {code}**: {LOOP_EXIT.get(code, 'see the exit codes')}",
           *(f"- {escape(r(m.removeprefix('pytest-ralph: ')), 600)}" for m in messages), ""]
    return "\n".join(out) + "\n"


def target(environ: Mapping[str, str] | None = None) -> Path | None:
    """The summary file named by ``GITHUB_STEP_SUMMARY`` in ``environ`` (default
    ``os.environ``), or ``None`` when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return Path(value) if value.strip() else None


def append(markdown: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Append ``markdown`` to the file named by ``GITHUB_STEP_SUMMARY`` (UTF-8), after a
    blank line when the file does not end with one; never replace what is there.

    Args:
        markdown: the section to add.
        environ: the environment (default ``os.environ``).

    Returns:
        ``None`` when written, or when the variable is unset (nothing to do); otherwise a
        warning that says why the file could not be written. It never raises ``OSError``: a
        summary that cannot be written must not change the outcome of the run.
    """
    path = target(environ)
    if path is None:
        return None
    try:
        with open(path, "a+b") as f:
            f.write(_separator(f) + markdown.encode("utf-8"))
    except OSError as exc:
        return f"cannot write the job summary {ENV}={path}: {exc.strerror or exc}"
    return None


def _separator(f: BinaryIO) -> bytes:
    """What goes before a new section so that it starts after a blank line: nothing for an
    empty file (or one that cannot be read back, such as a pipe)."""
    try:
        end = f.seek(0, os.SEEK_END)
        if not end:
            return b""
        f.seek(max(end - 2, 0))
        tail = f.read()
    except OSError:
        return b""
    return b"" if tail.endswith(b"\n\n") else (b"\n" if tail.endswith(b"\n") else b"\n\n")


def write(markdown: str, path: Path) -> str | None:
    """Write ``markdown`` to ``path`` (replaced; folders created).

    Returns:
        ``None`` when written, else a warning that says why not (never raises ``OSError``).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown, encoding="utf-8")
    except OSError as exc:
        return f"cannot write the report {path}: {exc.strerror or exc}"
    return None
