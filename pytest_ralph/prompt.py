"""The agent's prompt: a template filled with the story to work on, what fails, and progress.

The default template is ``prompt.md`` among the package templates (``templates/`` at
the top of the repository, shipped in the wheel as ``pytest_ralph/templates``).
ini ``ralph_prompt`` names another file. Templates use :class:`string.Template`
placeholders: ``$iteration``, ``$max_iterations``, ``$project``, ``$prd_path``,
``$rootdir``, ``$goal``, ``$story``, ``$story_id``, ``$failing``, ``$progress``.
Unknown placeholders are left as they are.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .checks import VERIFIER_KIND
from .model import PRD, Criterion, Story
from .results import CheckResults, CriterionResult

#: Characters of failure text kept per failing criterion.
EXCERPT_CHARS = 1500

#: Characters of failure text in one prompt, all failing criteria together. When they are
#: spent, the remaining failing criteria of the story are listed without their output.
FAILING_CHARS = 8000

#: An excerpt shorter than this is not worth showing; the criterion is listed instead.
MIN_EXCERPT_CHARS = 200

#: Characters of ``progress.txt`` kept in the prompt.
PROGRESS_CHARS = 3000


def template_path(name: str) -> Path:
    """The path of a bundled template (e.g. ``"prompt.md"``).

    Looks inside the installed package first (a wheel install), then in the
    ``templates/`` folder beside the package (an editable install or a source checkout).

    Raises:
        FileNotFoundError: no such template.
    """
    packaged = resources.files("pytest_ralph").joinpath("templates").joinpath(name)
    if packaged.is_file():
        return Path(str(packaged))
    source = Path(__file__).resolve().parent.parent / "templates" / name
    if source.is_file():
        return source
    raise FileNotFoundError(f"pytest-ralph template {name!r} not found (looked in {packaged} "
                            f"and {source}); reinstall pytest-ralph")


#: Failing criteria of later stories listed (one line each) before "... and N more".
MAX_OTHER_FAILURES = 30

#: Characters of a criterion text shown on one line.
ONE_LINE_CHARS = 300


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ONE_LINE_CHARS else text[:ONE_LINE_CHARS - 3] + "..."


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` cut to at most about ``limit`` characters: its head and its tail."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 4
    return text[:head].rstrip() + "\n[... cut ...]\n" + text[-(limit - head):].lstrip()


def pick_story(prd: PRD, results: CheckResults) -> Story | None:
    """The story to work on: in order of work, the first with a failing criterion."""
    failing = {c.story for c in results.failing}
    for story in prd.ordered_stories():
        if story.id in failing:
            return story
    return None


@dataclass(frozen=True)
class PromptContext:
    """What a prompt is built from.

    Attributes:
        prd: the PRD (as loaded by the controller).
        results: the latest check results.
        iteration: the iteration about to run (1-based).
        max_iterations: the iteration limit.
        rootdir: the project root.
        progress: text of the progress log to show (already bounded).
    """

    prd: PRD
    results: CheckResults
    iteration: int
    max_iterations: int
    rootdir: Path
    progress: str


def _check_line(c: Criterion | None, r: CriterionResult) -> str:
    if c is not None and c.kind == "run":
        return f"check: run `{c.command}`"
    if c is not None and c.kind == "pytest":
        targets = c.spec["pytest"] if isinstance(c.spec["pytest"], list) else [c.spec["pytest"]]
        return f"check: these tests must run and pass: `pytest {' '.join(targets)}`"
    if c is not None and c.kind == "exists":
        return f"check: `{c.spec['exists']}` must exist"
    if c is not None and c.kind == "file":
        contains = c.spec.get("contains")
        return f"check: file `{c.spec['file']}` must exist" + (
            f" and match /{contains}/" if contains else "")
    if c is not None and c.kind == "sql":
        return (f"check: `{c.spec['sql']}` on the SQLite database `{c.spec['db']}` must give "
                f"{json.dumps(c.spec['expect'])}")
    if c is not None and c.kind == "schema":
        return f"check: `{c.spec['instance']}` must be valid against `{c.spec['schema']}`"
    if c is not None and c.kind == "python":
        return f"check: `{c.spec['python']}()` must not raise or return False"
    if r.kind == VERIFIER_KIND:
        return "check: judged by the verifier command (ini ralph_verifier); see its evidence"
    if c is not None and c.kind == "text" and not r.claimed and r.kind == "text":
        return "check: the command ini ralph_checks maps this text to"
    if r.claimed or (c is not None and c.kind == "text"):
        return "check: none (text criterion, claimed by the story's `passes`)"
    return f"check: {r.kind}"


def _indented_excerpt(text: str, limit: int) -> str:
    """An excerpt of ``text`` with each line indented, at most about ``limit`` characters
    with the indentation counted (output of many short lines would otherwise grow by half)."""
    cut = limit
    for _ in range(8):
        body = "\n".join("      " + line for line in excerpt(text, cut).splitlines())
        if len(body) <= limit + len("      [... cut ...]") or cut <= 50:
            return body
        cut = max(50, cut * limit // len(body))
    return body


def _failing_entry(prd: PRD, r: CriterionResult, body: str | None) -> str:
    """One failing criterion with ``body`` (its indented excerpt), or without output when
    ``body`` is ``None``."""
    story = prd.story(r.story)
    crit = next((c for c in story.criteria if c.id == r.criterion), None) if story else None
    if body is None:
        return (f"- [{r.key}] {r.text}\n  {_check_line(crit, r)}\n  failure: not shown (no "
                "room left in this prompt)")
    return (f"- [{r.key}] {r.text}\n  {_check_line(crit, r)}\n  failure (excerpt):\n"
            f"{body or '      (no output)'}")


def render_failing(prd: PRD, results: CheckResults, story: Story | None) -> str:
    """The failing criteria: the chosen story's first, each with an excerpt; then the others
    as one line each; then check-phase errors."""
    first = [r for r in results.failing if story is not None and r.story == story.id]
    rest = [r for r in results.failing if story is None or r.story != story.id]
    parts = []
    budget = FAILING_CHARS
    for r in first:
        limit = min(EXCERPT_CHARS, budget)
        body = _indented_excerpt(r.message, limit) if limit >= MIN_EXCERPT_CHARS else None
        parts.append(_failing_entry(prd, r, body))
        budget -= len(body or "")
    if rest:
        shown = [f"- [{r.key}] {_one_line(r.text)}" for r in rest[:MAX_OTHER_FAILURES]]
        if len(rest) > MAX_OTHER_FAILURES:
            shown.append(f"- ... and {len(rest) - MAX_OTHER_FAILURES} more")
        parts.append("Also failing, in later stories (work on them after this one):\n"
                     + "\n".join(shown))
    for err in results.errors:
        parts.append("- [check phase] the checks could not run:\n"
                     + _indented_excerpt(err, EXCERPT_CHARS))
    return "\n".join(parts) if parts else "(none)"


def render_story(story: Story | None, results: CheckResults) -> str:
    """The story block: id, title, description and each criterion with its status."""
    if story is None:
        return "(no story has failing criteria; fix the check-phase errors below)"
    status = {r.criterion: r for r in results.criteria if r.story == story.id}
    lines = [f"{story.id}: {story.title}"]
    if story.description:
        lines.append(story.description)
    lines.append("Acceptance criteria:")
    for c in story.criteria:
        r = status.get(c.id)
        mark = "unknown" if r is None else ("pass" if r.passed else "FAIL")
        lines.append(f"- [{mark}] {c.id}: {_one_line(c.text)}")
    return "\n".join(lines)


def build_prompt(template: str, ctx: PromptContext) -> str:
    """Fill ``template`` from ``ctx``; see the module docstring for the placeholders."""
    story = pick_story(ctx.prd, ctx.results)
    total = len(ctx.results.criteria)
    passing = len(ctx.results.passing)
    n_stories = len(ctx.results.by_story()) or len(ctx.prd.stories)
    goal = (f"Make all {total} acceptance criteri{'a' if total != 1 else 'on'} of "
            f"{'the ' if n_stories != 1 else ''}{n_stories} "
            f"stor{'ies' if n_stories != 1 else 'y'} pass. Now {passing} of {total} pass.")
    values = {
        "iteration": str(ctx.iteration),
        "max_iterations": str(ctx.max_iterations),
        "project": ctx.prd.project or ctx.prd.branch_name or ctx.prd.path.stem,
        "prd_path": _rel(ctx.prd.path, ctx.rootdir),
        "rootdir": str(ctx.rootdir),
        "goal": goal,
        "story": render_story(story, ctx.results),
        "story_id": story.id if story else "",
        "failing": render_failing(ctx.prd, ctx.results, story),
        "progress": ctx.progress.strip() or "(nothing yet: this is the first iteration)",
    }
    return string.Template(template).safe_substitute(values)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
