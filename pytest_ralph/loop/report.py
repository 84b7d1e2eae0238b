"""The final report of a run: ``reports/ralph-<topic>-<date>.md`` in the state folder.

Sections: outcome and stop reason; a story x iteration matrix; one row per
iteration; the failing criteria of the last check with their fingerprints; claimed
criteria; and, when the circuit breaker tripped, an escalation section with the
full state a human needs to take over.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks.base import CLAIMED_NOTE
from ..checks.results import CheckResults
from ..prd.describe import dialect_notes
from ..util.env import SESSION_ARGV
from ..util.files import atomic_write_text
from ..util.text import plural
from .prompt import excerpt, same_failure_counts

if TYPE_CHECKING:
    from ..prd.model import PRD
    from .records import RunRecord

_EXIT_MEANING = {0: "complete", 1: "stopped at a limit", 2: "interrupted", 3: "internal error",
                 6: "circuit breaker tripped, or every remaining story blocked",
                 7: "the agent could not run"}


_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|"
                      r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (tabs and newlines
    kept): agent and command output must not drive a terminal or a Markdown viewer."""
    return _CONTROL.sub("", text)


def why(message: str, limit: int = 200) -> str:
    """The most telling line of a failure message: pytest's first ``E`` line, else the first
    line that is not a heading (ending in ``:``); at most ``limit`` characters."""
    lines = [ln.strip() for ln in clean(message).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if ln.startswith("E ")), None) or next(
        (ln for ln in lines if not ln.endswith(":")), lines[0] if lines else "")
    return pick[:limit]


#: The words of an iteration's result (:class:`Progress`), as ``Result:`` lines, the
#: report and ``run.json`` (``"result"``) give them.
RESULT_WORDS = ("complete", "progress", "no change", "regression", "error")


@dataclass(frozen=True)
class Progress:
    """What one check says next to the check before it: the ``Result:`` of an iteration.

    Attributes:
        word: one of :data:`RESULT_WORDS`: ``complete`` (every criterion passes), ``error``
            (the checks could not run), ``regression`` (criteria that passed before fail
            now, at least as many as were fixed), ``progress`` (more criteria pass, none
            or fewer broke), ``no change`` (the same criteria pass).
        fixed: criteria passing now that did not pass in the check before.
        broken: criteria failing now that passed in the check before.
        passing: criteria passing now.
        total: criteria checked now.
    """

    word: str
    fixed: int
    broken: int
    passing: int
    total: int

    @property
    def delta(self) -> str:
        """``"+1"``, ``"-2"``, ``"+2 -1"``; ``""`` when the same criteria pass."""
        return " ".join(([f"+{self.fixed}"] if self.fixed else [])
                        + ([f"-{self.broken}"] if self.broken else []))

    def text(self) -> str:
        """``"progress (+1)"``, ``"no change"``, ``"regression (+1 -2)"``, ``"complete (+1)"``."""
        return self.word + (f" ({self.delta})" if self.delta else "")


def progress_of(before: CheckResults | None, after: CheckResults) -> Progress:
    """The :class:`Progress` of the check ``after`` over the check ``before`` (``None``:
    there was none, nothing passed before)."""
    passed_before = {c.key for c in before.passing} if before is not None else set()
    passing = {c.key for c in after.passing}
    fixed = len(passing - passed_before)
    broken = len({c.key for c in after.failing} & passed_before)
    if after.errors and all(c.kind == "missing" for c in after.failing):
        word = "error"
    elif after.complete:
        word = "complete"
    elif broken and broken >= fixed:
        word = "regression"
    elif fixed:
        word = "progress"
    else:
        word = "no change"
    return Progress(word, fixed, broken, len(passing), len(after.criteria))


def shown_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when it is inside it (``prd.json``, ``.ralph/prd.json``),
    else as it is."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


def story_report(run: RunRecord, story_id: str) -> dict[str, object]:
    """What a human needs about one story of ``run``: its failing criteria in the last check
    (with how many checks in a row each failed the same way, and the fingerprint of its
    failure: :meth:`pytest_ralph.loop.records.IterationRecord.failure_fingerprints`), what
    was tried on it, and the
    last ``git diff --stat`` of an iteration on it. The shape of one ``stories`` entry of
    :func:`pytest_ralph.loop.escalation.state_dump`."""
    story = run.prd.story(story_id)
    repeats = same_failure_counts([it.results for it in run.iterations])
    fps = dict(run.last.failure_fingerprints())
    failing = [{"criterion": c.key, "text": c.text, "why": why(c.message, 500),
                "repeated": repeats.get(c.key, 1), "fingerprint": fps.get(c.key, "")}
               for c in run.last.results.failing if c.story == story_id]
    tried = []
    last_diff = ""
    for it in run.iterations[1:]:
        if it.story != story_id or it.agent is None:
            continue
        crits = it.results.by_story().get(story_id, [])
        tried.append({"iteration": it.n, "agent": it.agent.describe(),
                      "outcome": it.agent.outcome,
                      "passing": sum(c.passed for c in crits), "total": len(crits)})
        last_diff = it.diff or last_diff
    return {"id": story_id, "title": story.title if story else "",
            "blocked": run.blocked.get(story_id, ""), "failing": failing, "tried": tried,
            "last_diff": last_diff}


def _block(text: str) -> list[str]:
    """A fenced code block holding ``text`` verbatim: the fence is longer than any run of
    backticks inside, so the text cannot close it."""
    text = clean(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", text, fence]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_report(run: RunRecord) -> str:
    """The report as Markdown."""
    s = run.settings
    # No iteration at all when the run was interrupted during the baseline check.
    last = run.last.results if run.iterations else CheckResults(())
    n_iter = max(len(run.iterations) - 1, 0)
    total = len(last.criteria)
    claimed = [c for c in last.criteria if c.claimed and c.passed]
    out: list[str] = []
    title = run.prd.project or run.prd.branch_name or run.prd.path.stem
    out += [f"# Ralph report: {title}", ""]
    out += [
        _outcome(run),
        f"- Stop reason: {run.reason}",
        f"- PRD: `{run.prd.path}` ({run.prd.format})",
        *_dialect_lines(run.prd),
        f"- Agent: `{shlex.join(run.argv)}`",
        *([f"- Sandbox: {run.confinement}"] if run.confinement else []),
        f"- Iterations: {n_iter} of at most {s.max_iterations}; breaker after "
        f"{plural(s.breaker, 'identical failure')}",
        f"- Criteria: {len(last.passing)}/{total} passing"
        + (f", {len(claimed)} of them {CLAIMED_NOTE}" if claimed else ""),
        *([f"- Completion promise: the final message had to hold the line "
           f"`<promise>{s.promise}</promise>`"
           + (" (it did)" if run.status == "complete" and n_iter else "")]
          if s.promise and tuple(run.argv) == SESSION_ARGV else []),
        f"- Run: `{run.run_dir.id}`, started {run.started.isoformat(timespec='seconds')}"
        + (f", finished {run.finished.isoformat(timespec='seconds')}" if run.finished else ""),
        f"- State: `{run.run_dir.path}`",
        *_guard_line(run),
        *([(f"- Agent cost: ${run.cost:.4f} (as the agent reported it)" if _reported(run)
            else "- Agent cost: not reported by the agent")
           + (f"; limit ${s.max_cost:g}" if s.max_cost is not None else "")]
          if run.cost or s.max_cost is not None else []),
        *([f"- Wall-clock budget: {s.budget:g} s (--ralph-budget)"] if s.budget else []),
        *([f"- Rate limits: {plural(len(run.attempts), 'agent run')} rate-limited, "
           f"{sum(p for _, _, p in run.attempts):.0f} s paused in total; not counted as "
           "iterations"] if run.attempts else []),
        *([f"- Blocked stories: {', '.join(run.blocked)}"] if run.blocked else []),
        *([f"- Resumed: this run was resumed after it was {run.resumed_from}"]
          if run.resumed_from else []),
        "",
    ]
    if run.warnings:
        out += ["## Warnings", "", *[f"- {w}" for w in run.warnings], ""]
    out += _tables(run)
    # Failures.
    if last.failing or last.errors:
        out += ["## Failing criteria (last check)", ""]
        fps = dict(run.last.failure_fingerprints()) if run.iterations else {}
        for c in last.failing:
            heading = _cell(clean(" ".join(c.text.split())))
            out += [f"### {c.key}: {heading}", "", f"- node id: `{c.nodeid or '-'}`",
                    f"- fingerprint: `{fps.get(c.key, '-')}`", "",
                    *_block(excerpt(c.message, 2000)), ""]
        for e in last.errors:
            out += ["### Check phase error", "", *_block(excerpt(e, 2000)), ""]
    regressions = [(it.n, key) for it in run.iterations for key in it.regressions]
    if regressions:
        out += ["## Regressions", "", "Criteria that passed in an earlier check and failed "
                "again (iteration: criterion):", ""]
        out += [f"- {n}: {key}" for n, key in regressions]
        out.append("")
    changed = [(it.n, ch) for it in run.iterations for ch in it.changes]
    if changed:
        allowed = run.settings.allow_criteria_edits
        out += ["## Criteria changed", "",
                "The agent changed what judges its work (criterion definitions, linked tests, "
                "schemas, check modules, conftest.py or the pytest configuration) since the run "
                "started. " + ("--ralph-allow-criteria-edits was given: the changes were allowed."
                               if allowed else "The criteria they touch failed in those "
                               "iterations, and the run could not complete until they were "
                               "restored."), "",
                "| iteration | what | change | criteria |", "|---|---|---|---|"]
        out += [f"| {n} | {_cell(ch.subject)} | "
                f"{_cell(ch.change + (f': {ch.detail}' if ch.detail else ''))} | "
                f"{_cell(', '.join(ch.criteria))} |" for n, ch in changed]
        out.append("")
    flaky = [(it.n, key) for it in run.iterations for key in it.flaky]
    if flaky:
        out += ["## Flaky criteria", "", "Criteria that failed, then passed when re-checked "
                "with no change in between (iteration: criterion); the breaker ignores them:",
                ""]
        out += [f"- {n}: {key}" for n, key in flaky]
        out.append("")
    if run.attempts:
        out += ["## Rate-limited agent runs", "",
                "These agent runs hit a rate limit; the loop paused and ran the same iteration "
                "again (they are not counted as iterations).", "",
                "| iteration | outcome | why | paused (s) | log |", "|---|---|---|---|---|"]
        out += [f"| {n} | {a.outcome} | {_cell(clean(a.detail)) or '-'} | {p:.0f} | "
                f"`{a.log_path}` |" for n, a, p in run.attempts]
        out.append("")
    if claimed:
        out += ["## Claimed, not verified", "",
                "These text criteria pass only because their story says `passes: true` (or "
                "a done `status`); no "
                "check verified them (map them to commands, or use --ralph-strict).", ""]
        out += [f"- {c.key}: {c.text}" for c in claimed]
        out.append("")
    out += _refused_claims(run, last)
    if (run.status in ("breaker", "agent-error") or run.blocked) and run.iterations:
        out += _escalation(run)
    return "\n".join(out)


def _refused_claims(run: RunRecord, last: CheckResults) -> list[str]:
    """The section on claims that ``--ralph-strict`` refused in the last check: why those
    criteria failed, and that write-back left their stories' ``passes`` (or ``status``) as
    the user set it; ``[]`` without strict mode or such criteria."""
    refused = [c for c in last.criteria if c.claimed and not c.passed]
    if not run.settings.strict or not refused:
        return []
    out = ["## Claims refused (--ralph-strict)", "",
           "These text criteria have no check, and --ralph-strict refuses claims: they fail "
           "whatever their story says. No check found these stories wrong either, so "
           "write-back left each story's claim as it was written (a story is set to "
           "`passes: true` only when every criterion passes, and to `false` only when a check "
           "fails). Map the criteria to commands to verify them.", ""]
    for c in refused:
        story = run.prd.story(c.story)
        key = story.done_key if story is not None and story.done_key else "passes"
        claim = ("" if story is None else
                 f" (the story's `{key}` says done)" if story.passes else
                 f" (the story's `{key}` does not say done)")
        out.append(f"- {c.key}: {_cell(clean(' '.join(c.text.split())))}{claim}")
    out.append("")
    return out


def _outcome(run: RunRecord) -> str:
    """``- Outcome: **limit** (exit 1: stopped at a limit)``; the exit code's meaning is left
    out when the status says it already (``**complete** (exit 0)``)."""
    if run.exit_code is None:
        return f"- Outcome: **{run.status}**"
    meaning = _EXIT_MEANING.get(run.exit_code, "")
    if run.status == "breaker":
        meaning = ("every story that still fails is blocked"
                   if "every remaining story is blocked" in run.reason else
                   "circuit breaker tripped")
    shown = f": {meaning}" if meaning and meaning != run.status else ""
    return f"- Outcome: **{run.status}** (exit {run.exit_code}{shown})"


def _failures_cell(fps: list[tuple[str, str]], most: int = 3) -> str:
    """The failures of an iteration with their fingerprints, for a table cell: at most
    ``most``, then ``+N more``; ``-`` when nothing fails."""
    if not fps:
        return "-"
    shown = [f"{'check phase' if key == '<check>' else _cell(key)}: `{fp}`"
             for key, fp in fps[:most]]
    if len(fps) > most:
        shown.append(f"+{len(fps) - most} more")
    return ", ".join(shown)


def _tables(run: RunRecord) -> list[str]:
    """The report's "Stories x iterations" matrix and its "Iterations" table."""
    s = run.settings
    out: list[str] = []
    # Story x iteration matrix.
    heads = ["baseline" if it.n == 0 else str(it.n) for it in run.iterations]
    out += ["## Stories x iterations", "",
            "Passing criteria of each story after each check (`ok` when all pass).", "",
            "| story | title | " + " | ".join(heads) + " |",
            "|---|---|" + "---|" * len(heads)]
    for story in run.prd.ordered_stories():
        if s.story and story.id not in s.story:
            continue
        cells = []
        for it in run.iterations:
            crits = it.results.by_story().get(story.id)
            if not crits:
                cells.append("-")
                continue
            good = sum(c.passed for c in crits)
            cells.append(f"{good}/{len(crits)}" + (" ok" if good == len(crits) else ""))
        out.append(f"| {story.id} | {_cell(story.title)} | " + " | ".join(cells) + " |")
    out.append("")
    # Iterations.
    out += ["## Iterations", "",
            "Result: how the check compares with the one before. Failures: each failing "
            "criterion with the fingerprint of its failure. Streak: the identical-failure "
            "streak, while something fails.", "",
            "| # | story | agent | outcome | seconds | passing | result | failures | streak | "
            "cost, turns, tokens |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for i, it in enumerate(run.iterations):
        r = it.results
        result = progress_of(run.iterations[i - 1].results, r).text() if i else "-"
        if it.agent is None:
            agent_cells = "baseline check | - | -"
        else:
            code = "-" if it.agent.exit_code is None else f"exit {it.agent.exit_code}"
            said = f": {_cell(clean(it.agent.detail))}" if it.agent.detail else ""
            agent_cells = f"{code} | {it.agent.outcome}{said} | {it.agent.duration:.1f}"
        out.append(f"| {it.n} | {it.story or '-'} | {agent_cells} | "
                   f"{len(r.passing)}/{len(r.criteria)} | {result} | "
                   f"{_failures_cell(it.failure_fingerprints())} | "
                   f"{'-' if r.complete or not i else it.streak} | "
                   f"{(it.agent.usage() or '-') if it.agent else '-'} |")
    out.append("")
    return out


def _dialect_lines(prd: PRD) -> list[str]:
    """The header lines that say which dialect the loader applied to ``prd`` and what it
    renamed or synthesized; none for a canonical PRD."""
    if prd.dialect == "canonical":
        return []
    notes = dialect_notes(prd)
    return [f"- PRD dialect: `{prd.dialect}`, normalized on load to the canonical shape"
            + (":" if notes else ""), *[f"  - {clean(n)}" for n in notes]]


def _guard_line(run: RunRecord) -> list[str]:
    if run.oracle is None:
        return []
    subjects = list(run.oracle.digests)
    files = sum(1 for x in subjects if x.startswith("file ") and
                run.oracle.digests[x] != "absent")
    defs = sum(1 for x in subjects if x.startswith("criterion "))
    line = (f"- Oracle guard: {plural(defs, 'criterion definition')} and "
            f"{plural(files, 'file')} checked after each iteration")
    if run.settings.allow_criteria_edits:
        line += " (--ralph-allow-criteria-edits: changes are only reported)"
    if run.oracle.unguarded:
        line += ("; not guarded, because they did not exist when the run started: "
                 + ", ".join(f"`{u}`" for u in run.oracle.unguarded[:10]))
    return [line]


def _escalation(run: RunRecord) -> list[str]:
    if run.status == "breaker" and "every remaining story is blocked" in run.reason:
        cause = "Every story that still fails is blocked: the loop had nothing left to try."
    elif run.status == "breaker":
        cause = (f"The circuit breaker stopped the loop: the agent produced the same failures "
               f"{run.last.streak} times in a row.")
    elif run.status == "agent-error":
        streak = run.error_streak or run.last.error_streak
        cause = (f"The agent did not run properly {streak} times in a row (see the end of its "
                 "log below).")
    else:
        cause = f"The loop gave up on {plural(len(run.blocked), 'story')}."
    out = ["## Escalation", "", f"{cause} A human needs to look at this. Full state:", ""]
    for sid in run.blocked:
        out += _blocked_story(story_report(run, sid))
    if run.escalations:
        out += ["### Escalation command", "", *[f"- {line}" for line in run.escalations], ""]
    last_agent = next((it for it in reversed(run.iterations) if it.agent is not None), None)
    last_run = last_agent.agent if last_agent is not None else None
    if run.attempts and (last_agent is None or run.attempts[-1][0] > last_agent.n):
        last_run = run.attempts[-1][1]  # the run ended on rate-limited runs
    if last_agent is not None:
        out += [f"- Last prompt: `{last_agent.folder / 'prompt.md'}`"]
    if last_run is not None:
        out += [f"- Last agent log: `{last_run.log_path}`"]
    if last_agent is not None:
        out += [f"- Last check output: `{last_agent.folder / 'check.log'}`"]
    out += [f"- Progress log: `{run.settings.dir / 'progress.txt'}`",
            f"- Run summary: `{run.run_dir.path / 'run.json'}`", ""]
    if last_run is not None:
        out += ["### End of the last agent log", "",
                *_block(excerpt(last_run.log_tail, 3000) or "(empty)"), ""]
    out += ["### Full failure text of the last check", ""]
    for c in run.last.results.failing:
        out += [f"#### {c.key}", "", *_block(excerpt(c.message, 6000)), ""]
    return out


def _reported(run: RunRecord) -> bool:
    """Whether any agent run of ``run`` reported a cost."""
    runs = [it.agent for it in run.iterations if it.agent is not None]
    return any(a.cost_usd is not None for a in [*runs, *(a for _, a, _ in run.attempts)])




def _blocked_story(info: dict[str, Any]) -> list[str]:
    """The escalation subsection of one blocked story (from :func:`story_report`)."""
    out = [f"### Blocked: {info['id']}: {_cell(clean(str(info['title'])))}", "",
           f"- Why: {info['blocked']}", ""]
    if info["failing"]:
        out += ["Failing criteria (last check):", ""]
        out += [f"- {f['criterion']}"
                + (f" (fingerprint `{f['fingerprint']}`)" if f.get("fingerprint") else "")
                + f": {_cell(clean(f['why']))}"
                + (f" (failed the same way in {f['repeated']} checks in a row)"
                   if f["repeated"] > 1 else "")
                for f in info["failing"]]
        out.append("")
    if info["tried"]:
        out += ["What was tried on it:", "", "| iteration | agent | story criteria passing |",
                "|---|---|---|"]
        out += [f"| {t['iteration']} | {_cell(t['agent'])} | {t['passing']}/{t['total']} |"
                for t in info["tried"]]
        out.append("")
    if info["last_diff"]:
        out += ["Last diff on it (`git diff --stat`):", "", *_block(info["last_diff"]), ""]
    return out


def write_report(run: RunRecord, path: Path,
                 redact: Callable[[str], str] | None = None) -> Path:
    """Write the report of ``run`` to ``path`` and return the path.

    Args:
        run: the run.
        path: the report file (replaced atomically).
        redact: applied to the whole text (secret values of the environment), or ``None``.
    """
    text = render_report(run)
    atomic_write_text(path, redact(text) if redact else text)
    return path
