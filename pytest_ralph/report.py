"""The final report of a run: ``reports/ralph-<topic>-<date>.md`` in the state folder.

Sections: outcome and stop reason; a story x iteration matrix; one row per
iteration; the failing criteria of the last check with their fingerprints; claimed
criteria; and, when the circuit breaker tripped, an escalation section with the
full state a human needs to take over.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from .checks import CLAIMED_NOTE
from .fingerprint import fingerprint
from .prompt import excerpt
from .results import CheckResults, atomic_write_text

if TYPE_CHECKING:
    from .loop import RunRecord

_EXIT_MEANING = {0: "complete", 1: "stopped at a limit", 2: "interrupted", 3: "internal error",
                 6: "circuit breaker tripped", 7: "the agent could not run"}


_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|"
                      r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (tabs and newlines
    kept): agent and command output must not drive a terminal or a Markdown viewer."""
    return _CONTROL.sub("", text)


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
        f"- Outcome: **{run.status}**" + (
            f" (exit {run.exit_code}: {_EXIT_MEANING.get(run.exit_code, '')})"
            if run.exit_code is not None else ""),
        f"- Stop reason: {run.reason}",
        f"- PRD: `{run.prd.path}` ({run.prd.format})",
        f"- Agent: `{shlex.join(run.argv)}`",
        f"- Iterations: {n_iter} of at most {s.max_iterations}; breaker after {s.breaker} "
        f"identical failures",
        f"- Criteria: {len(last.passing)}/{total} passing"
        + (f", {len(claimed)} of them {CLAIMED_NOTE}" if claimed else ""),
        f"- Run: `{run.run_dir.id}`, started {run.started.isoformat(timespec='seconds')}"
        + (f", finished {run.finished.isoformat(timespec='seconds')}" if run.finished else ""),
        f"- State: `{run.run_dir.path}`",
        *_guard_line(run),
        *([f"- Resumed: this run was resumed after it was {run.resumed_from}"]
          if run.resumed_from else []),
        "",
    ]
    if run.warnings:
        out += ["## Warnings", "", *[f"- {w}" for w in run.warnings], ""]
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
            "| # | story | agent | outcome | seconds | passing | fingerprint | streak |",
            "|---|---|---|---|---|---|---|---|"]
    for it in run.iterations:
        r = it.results
        if it.agent is None:
            agent_cells = "baseline check | - | -"
        else:
            code = "-" if it.agent.exit_code is None else f"exit {it.agent.exit_code}"
            agent_cells = f"{code} | {it.agent.outcome} | {it.agent.duration:.1f}"
        out.append(f"| {it.n} | {it.story or '-'} | {agent_cells} | "
                   f"{len(r.passing)}/{len(r.criteria)} | `{it.fingerprint or r.fingerprint}` | "
                   f"{it.streak} |")
    out.append("")
    # Failures.
    if last.failing or last.errors:
        out += ["## Failing criteria (last check)", ""]
        for c in last.failing:
            fp = fingerprint([(c.key, c.message)])
            heading = _cell(clean(" ".join(c.text.split())))
            out += [f"### {c.key}: {heading}", "", f"- node id: `{c.nodeid or '-'}`",
                    f"- fingerprint: `{fp}`", "", *_block(excerpt(c.message, 2000)), ""]
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
    if claimed:
        out += ["## Claimed, not verified", "",
                "These text criteria pass only because their story says `passes: true`; no "
                "check verified them (map them to commands, or use --ralph-strict).", ""]
        out += [f"- {c.key}: {c.text}" for c in claimed]
        out.append("")
    if run.status in ("breaker", "agent-error") and run.iterations:
        out += _escalation(run)
    return "\n".join(out)


def _guard_line(run: RunRecord) -> list[str]:
    if run.oracle is None:
        return []
    subjects = list(run.oracle.digests)
    files = sum(1 for x in subjects if x.startswith("file ") and
                run.oracle.digests[x] != "absent")
    defs = sum(1 for x in subjects if x.startswith("criterion "))
    line = (f"- Oracle guard: {defs} criterion definition{'s' if defs != 1 else ''} and "
            f"{files} file{'s' if files != 1 else ''} checked after each iteration")
    if run.settings.allow_criteria_edits:
        line += " (--ralph-allow-criteria-edits: changes are only reported)"
    if run.oracle.unguarded:
        line += ("; not guarded, because they did not exist when the run started: "
                 + ", ".join(f"`{u}`" for u in run.oracle.unguarded[:10]))
    return [line]


def _escalation(run: RunRecord) -> list[str]:
    if run.status == "breaker":
        why = (f"The circuit breaker stopped the loop: the agent produced the same failures "
               f"{run.last.streak} times in a row.")
    else:
        why = (f"The agent did not run properly {run.last.error_streak} times in a row (see the "
               "end of its log below).")
    out = ["## Escalation", "", f"{why} A human needs to look at this. Full state:", ""]
    last_agent = next((it for it in reversed(run.iterations) if it.agent is not None), None)
    if last_agent is not None and last_agent.agent is not None:
        out += [f"- Last prompt: `{last_agent.folder / 'prompt.md'}`",
                f"- Last agent log: `{last_agent.agent.log_path}`",
                f"- Last check output: `{last_agent.folder / 'check.log'}`"]
    out += [f"- Progress log: `{run.settings.dir / 'progress.txt'}`",
            f"- Run summary: `{run.run_dir.path / 'run.json'}`", ""]
    if last_agent is not None and last_agent.agent is not None:
        out += ["### End of the last agent log", "",
                *_block(excerpt(last_agent.agent.log_tail, 3000) or "(empty)"), ""]
    out += ["### Full failure text of the last check", ""]
    for c in run.last.results.failing:
        out += [f"#### {c.key}", "", *_block(excerpt(c.message, 6000)), ""]
    return out


def write_report(run: RunRecord, path: Path) -> Path:
    """Write the report of ``run`` to ``path`` and return the path."""
    atomic_write_text(path, render_report(run))
    return path
