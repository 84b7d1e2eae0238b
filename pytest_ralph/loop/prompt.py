"""The agent's prompt: a template filled with the story to work on, what fails, and progress.

The default template is ``prompt.md`` among the package templates (``templates/`` at
the top of the repository, shipped in the wheel as ``pytest_ralph/templates``); ini
``ralph_prompt`` names another file. Templates use :class:`string.Template` placeholders
(``$name`` or ``${name}``; ``$$`` is a literal ``$``). Unknown placeholders are left as
they are, and the values put in are never substituted again.

===================  ======================================================  =====================
variable             value                                                   example
===================  ======================================================  =====================
``$iteration``       the iteration about to run (1-based)                    3
``$max_iterations``  the iteration limit                                     8
``$project``         the PRD's ``project``, else its ``branchName``, else    Acme shop
                     the PRD file's stem (one line)
``$prd_path``        the PRD file, relative to the rootdir when inside it    prd.json
``$rootdir``         the project root                                        /home/me/shop
``$goal``            what ends the loop, and how far along it is             Make all 11
                     (:func:`render_goal`)                                   acceptance criteria of
                                                                             the 5 stories pass.
                                                                             Now 9 of 11 pass.
``$story``           the story to work on: id and title, description, then   US-003: Login
                     each of its criteria marked pass, FAIL or unknown       - [FAIL] AC1: ...
``$story_id``        that story's id; ``""`` when there is none              US-003
``$failing``         the story's failing criteria, each with its check,      - [US-003::AC1] ...
                     ``REGRESSION: passed before`` when it passed earlier    check: run `make t`
                     in the run, ``failed the same way in N checks in a      failed the same way
                     row`` when N >= 2, and a failure excerpt; then later    in 3 checks in a row
                     stories' failing criteria, one line each; then          failure (excerpt):
                     check-phase errors; ``(none)`` when nothing fails       ...
``$regressions``     section (*): the criteria that passed earlier in this   ## Regressions
                     run and fail now                                        - [US-001::AC2] ...
``$last_change``     section (*): what the last iteration changed, as the    ## What the last
                     loop gives it: ``git diff --stat`` when the project is  iteration changed
                     a git repository, :data:`NO_CHANGE` when no file        app.py | 4 +---
                     changed
``$blocked``         section (*): the stories the loop does not ask for,     ## Blocked stories
                     and why                                                 - US-004: title: why
``$progress``        the end of ``progress.txt`` (at most                    From an earlier run
                     :data:`PROGRESS_CHARS`), earlier runs' entries marked   (...), the code may
                     as such (:func:`render_progress`), or a note that       have changed since:
                     there is none yet                                       ## 2026-... run ...
===================  ======================================================  =====================

(An example on several lines is several lines of the value.)

(*) A *section* variable holds its own ``## `` heading and is ``""`` when there is nothing to
say; a template line that holds only such a variable is then dropped, with the blank line
after it, so the prompt has no empty sections.

Every value is bounded, so a prompt stays under about 20 000 characters plus the template
whatever the PRD, the failures, the diff or the progress log: see the ``*_CHARS`` constants.
:attr:`PromptContext.redact` is applied to the finished prompt.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..checks.fingerprint import normalize_failure
from ..checks.results import CheckResults, CriterionResult
from ..checks.verifier import VERIFIER_KIND
from ..prd.model import CRITERION_KINDS, PRD, Criterion, Story
from ..util.files import read_text

#: Characters of failure text kept per failing criterion.
EXCERPT_CHARS = 1500

#: Characters of failure text in one prompt, all failing criteria of the chosen story and
#: check-phase errors together. When they are spent, the remaining failing criteria of the
#: story are listed without their output (the first check-phase error still gets
#: :data:`MIN_ERROR_CHARS`).
FAILING_CHARS = 8000

#: An excerpt shorter than this is not worth showing; the criterion is listed instead.
MIN_EXCERPT_CHARS = 200

#: Characters of failure text the first check-phase error gets even when
#: :data:`FAILING_CHARS` is spent.
MIN_ERROR_CHARS = 500

#: Characters of the chosen story's failing-criterion entries other than their excerpts
#: (criterion, check, notes); past it the rest are counted in "... and N more".
FAILING_LIST_CHARS = 1500

#: Characters of the one-line list of failing criteria of later stories.
OTHER_FAILURES_CHARS = 1200

#: Failing criteria of later stories listed (one line each) before "... and N more".
MAX_OTHER_FAILURES = 30

#: Characters of a criterion text shown on one line.
ONE_LINE_CHARS = 300

#: Characters of the story's title, description, and criterion list in ``$story``.
TITLE_CHARS = 200
DESCRIPTION_CHARS = 600
STORY_CRITERIA_CHARS = 1200

#: Characters of the ``$regressions`` and ``$blocked`` sections.
REGRESSIONS_CHARS = 800
BLOCKED_CHARS = 800

#: Characters of the ``$last_change`` section's text.
LAST_CHANGE_CHARS = 2000

#: Characters of ``progress.txt`` kept in the prompt.
PROGRESS_CHARS = 3000

#: Characters of a failure message compared by :func:`same_failure_counts` (its head and
#: tail, half each; a check keeps about 4000 of a command's output anyway), so that
#: megabytes of output are not normalized again and again.
COMPARED_CHARS = 8000

#: What the loop passes as ``last_change`` when the last iteration changed no file.
NO_CHANGE = "(no file changed: the last iteration left the project as it was)"

#: The section variables (see the module docstring).
SECTION_VARIABLES = ("regressions", "last_change", "blocked")


#: Largest prompt template read, in bytes: 16 MiB (the bundled one is under 2 KB; a template
#: that carries a large specification or a codebase digest is a few megabytes).
MAX_TEMPLATE_BYTES = 16 * 1024 * 1024


def read_template(path: Path) -> str:
    """The text of the prompt template at ``path`` (ini ``ralph_prompt``, or
    :func:`template_path`), read without blocking on a FIFO or reading a device without end.

    Raises:
        OSError: it cannot be read; :class:`~pytest_ralph.util.files.NotRegularFile` for a folder,
            a FIFO or a device, :class:`~pytest_ralph.util.files.FileTooLarge` over
            :data:`MAX_TEMPLATE_BYTES` (``strerror`` says which).
        UnicodeDecodeError: it is not UTF-8 text.
    """
    return read_text(path, MAX_TEMPLATE_BYTES)


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
    source = Path(__file__).resolve().parents[2] / "templates" / name
    if source.is_file():
        return source
    raise FileNotFoundError(f"pytest-ralph template {name!r} not found (looked in {packaged} "
                            f"and {source}); reinstall pytest-ralph")


def _one_line(text: str, limit: int = ONE_LINE_CHARS) -> str:
    if len(text) > 4 * limit:  # never fold megabytes to show a few hundred characters
        text = text[:2 * limit]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` cut to at most about ``limit`` characters: its head and its tail."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 4
    return text[:head].rstrip() + "\n[... cut ...]\n" + text[-(limit - head):].lstrip()


def _head(text: str, limit: int) -> str:
    """``text`` cut to its first ``limit`` characters (at a line end when one is near)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    end = cut.rfind("\n")
    return (cut[:end] if end > limit // 2 else cut).rstrip() + "\n[... cut ...]"


def _tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, from a line start, after a ``...`` line."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return "...\n" + cut[cut.find("\n") + 1:]


def pick_story(prd: PRD, results: CheckResults, blocked: Collection[str] = ()) -> Story | None:
    """The story to work on: in order of work, the first with a failing criterion that is not
    ``blocked`` (story ids; a mapping's keys)."""
    failing = {c.story for c in results.failing}
    for story in prd.ordered_stories():
        if story.id in failing and story.id not in blocked:
            return story
    return None


@functools.lru_cache(maxsize=4096)  # the loop asks again every iteration, history grown by one
def _compared(message: str) -> str:
    if len(message) > COMPARED_CHARS:
        half = COMPARED_CHARS // 2
        message = message[:half] + "\n" + message[-half:]
    return normalize_failure(message)


def same_failure_counts(history: Sequence[CheckResults]) -> dict[str, int]:
    """For each criterion failing in the last check of ``history`` (oldest first): in how many
    checks in a row, counted back from the last, it failed with the same failure text once
    normalized (:func:`pytest_ralph.checks.fingerprint.normalize_failure`). 1 when the last check is
    the first to fail it so; ``{}`` for an empty history."""
    if not history:
        return {}
    out: dict[str, int] = {}
    older: list[dict[str, str]] = []  # failing key -> message, newest first, made as needed
    for r in history[-1].failing:
        key, target = r.key, None
        n = 1
        for depth in range(len(history) - 1):
            if depth == len(older):
                check = history[-2 - depth]
                older.append({f"{c.story}::{c.criterion}": c.message for c in check.criteria
                              if c.outcome != "passed"})
            prev = older[depth].get(key)
            if prev is None:
                break
            if prev != r.message:
                if target is None:
                    target = _compared(r.message)
                if _compared(prev) != target:
                    break
            n += 1
        out[key] = n
    return out


def same_failure_step(counts: Mapping[str, int], previous: CheckResults | None,
                      latest: CheckResults) -> dict[str, int]:
    """:func:`same_failure_counts` one check at a time: ``counts`` were the counts for the
    check ``previous`` (``{}`` and ``None`` before the first check); the result is the counts
    for ``latest``. Costs one comparison per failing criterion, whatever the run's length,
    so a loop that keeps its counts need not walk the whole history every iteration."""
    before = ({f"{c.story}::{c.criterion}": c.message for c in previous.criteria
               if c.outcome != "passed"} if previous is not None else {})
    out: dict[str, int] = {}
    for r in latest.failing:
        prev = before.get(r.key)
        same = prev is not None and (prev == r.message or _compared(prev) == _compared(r.message))
        out[r.key] = counts.get(r.key, 1) + 1 if same else 1
    return out


@dataclass(frozen=True)
class PromptContext:
    """What a prompt is built from.

    Attributes:
        prd: the PRD (as loaded by the controller).
        results: the latest check results.
        iteration: the iteration about to run (1-based).
        max_iterations: the iteration limit.
        rootdir: the project root.
        progress: the text of the progress log (its end is kept: :data:`PROGRESS_CHARS`).
        repeats: criterion key (``"US-001::AC2"``) -> in how many checks in a row it has
            failed the same way (:func:`same_failure_counts`, or :func:`same_failure_step`
            kept check by check); shown from 2 on.
        regressions: keys of the criteria that passed in an earlier check of this run and
            fail in ``results``.
        last_change: what the last iteration changed (the ``git diff --stat`` text of
            :func:`pytest_ralph.loop.gitdiff.diff_stat`, or :data:`NO_CHANGE`); ``""`` when
            unknown (first iteration, not a git repository): no section then.
        blocked: story id -> why the loop will not ask for it; such a story is never the
            one to work on, and is listed as blocked.
        redact: applied to the finished prompt (e.g. to hide secrets), or ``None``.
        run: the id of the run the prompt is for: ``progress`` entries of other runs are
            marked as earlier runs' (:func:`render_progress`); ``""``: every entry is.
    """

    prd: PRD
    results: CheckResults
    iteration: int
    max_iterations: int
    rootdir: Path
    progress: str
    repeats: Mapping[str, int] = field(default_factory=dict)
    regressions: Sequence[str] = ()
    last_change: str = ""
    blocked: Mapping[str, str] = field(default_factory=dict)
    redact: Callable[[str], str] | None = None
    run: str = ""


def _check_line(c: Criterion | None, r: CriterionResult, done_key: str = "passes") -> str:
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
    if c is not None and c.kind not in CRITERION_KINDS:
        fields = {k: v for k, v in c.spec.items() if k != "kind"}
        return (f"check: `{c.kind}`, a check kind from a plugin or conftest.py, with "
                f"{json.dumps(fields, ensure_ascii=False)}")
    if r.kind == VERIFIER_KIND:
        return "check: judged by the verifier command (ini ralph_verifier); see its evidence"
    if c is not None and c.kind == "text" and not r.claimed and r.kind == "text":
        return "check: the command ini ralph_checks maps this text to"
    if r.claimed or (c is not None and c.kind == "text"):
        if done_key == "status":
            return ("check: none (text criterion, claimed by the story's `status`: this PRD has "
                    "no `passes`; set the status to done, never add `passes`)")
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


def _entry_head(prd: PRD, r: CriterionResult, repeats: Mapping[str, int],
                regressions: Collection[str]) -> str:
    """A failing criterion's lines before its output: name and text, check, notes."""
    story = prd.story(r.story)
    crit = next((c for c in story.criteria if c.id == r.criterion), None) if story else None
    check = _check_line(crit, r, story.done_key if story else "passes")
    lines = [f"- [{r.key}] {_one_line(r.text)}", f"  {_one_line(check)}"]
    if r.key in regressions:
        lines.append("  REGRESSION: passed before in this run; a later change broke it")
    n = repeats.get(r.key, 0)
    if n >= 2:
        lines.append(f"  failed the same way in {n} checks in a row: the attempts so far did "
                     "not change it; try another approach")
    return "\n".join(lines)


def render_failing(prd: PRD, results: CheckResults, story: Story | None, *,
                   repeats: Mapping[str, int] | None = None,
                   regressions: Collection[str] = (),
                   blocked: Collection[str] = ()) -> str:
    """The failing criteria: the chosen story's first, each with an excerpt; then the others
    (not of ``blocked`` stories) as one line each; then check-phase errors."""
    repeats = repeats or {}
    first = [r for r in results.failing if story is not None and r.story == story.id]
    rest = [r for r in results.failing
            if (story is None or r.story != story.id) and r.story not in blocked]
    parts = []
    budget = FAILING_CHARS
    listed = FAILING_LIST_CHARS
    for i, r in enumerate(first):
        head = _entry_head(prd, r, repeats, regressions)
        if listed < len(head) and i:
            parts.append(f"- ... and {len(first) - i} more failing criteria of this story "
                         "(no room left to show them)")
            break
        listed -= len(head)
        limit = min(EXCERPT_CHARS, budget)
        if limit < MIN_EXCERPT_CHARS:
            parts.append(f"{head}\n  failure: not shown (no room left in this prompt)")
            continue
        body = _indented_excerpt(r.message, limit)
        budget -= len(body)
        parts.append(f"{head}\n  failure (excerpt):\n{body or '      (no output)'}")
    if rest:
        shown: list[str] = []
        room = OTHER_FAILURES_CHARS
        for r in rest[:MAX_OTHER_FAILURES]:
            line = f"- [{r.key}] {_one_line(r.text)}"
            if r.key in regressions:
                line += " (REGRESSION: passed before)"
            if len(line) > room and shown:
                break
            room -= len(line)
            shown.append(line)
        if len(rest) > len(shown):
            shown.append(f"- ... and {len(rest) - len(shown)} more")
        parts.append("Also failing, in later stories (work on them after this one):\n"
                     + "\n".join(shown))
    for i, err in enumerate(results.errors):
        limit = min(EXCERPT_CHARS, budget if i else max(budget, MIN_ERROR_CHARS))
        if limit < MIN_EXCERPT_CHARS:
            parts.append(f"- ... and {len(results.errors) - i} more check-phase errors (no room "
                         "left to show them)")
            break
        body = _indented_excerpt(err, limit)
        budget -= len(body)
        parts.append("- [check phase] the checks could not run:\n" + body)
    return "\n".join(parts) if parts else "(none)"


def render_story(story: Story | None, results: CheckResults,
                 blocked: Collection[str] = ()) -> str:
    """The story block: id, title, description and each criterion with its status."""
    if story is None:
        if any(r.story in blocked for r in results.failing):
            return ("(none: every story with failing criteria is blocked, see \"Blocked "
                    "stories\"; fix the check-phase errors below, if any)")
        if results.failing:  # failing, yet no story of the PRD has them: removed from it
            gone = ", ".join(dict.fromkeys(r.story for r in results.failing))
            return (f"(the failing criteria belong to {gone}, which the PRD no longer has: the "
                    "criteria of the run are those it started with; restore them in the PRD "
                    "and make them pass)")
        return "(no story has failing criteria; fix the check-phase errors below)"
    status = {r.criterion: r for r in results.criteria if r.story == story.id}
    lines = [f"{story.id}: {_one_line(story.title, TITLE_CHARS)}"]
    if story.description.strip():
        lines.append(_head(story.description, DESCRIPTION_CHARS))
    lines.append("Acceptance criteria:")
    room = STORY_CRITERIA_CHARS
    for i, c in enumerate(story.criteria):
        r = status.get(c.id)
        mark = "unknown" if r is None else ("pass" if r.passed else "FAIL")
        line = f"- [{mark}] {c.id}: {_one_line(c.text)}"
        if len(line) > room and i:
            left = story.criteria[i:]
            fail = sum(1 for c in left if c.id in status and not status[c.id].passed)
            lines.append(f"- ({len(left)} more criteria not listed here, {fail} of them failing)")
            break
        room -= len(line)
        lines.append(line)
    return "\n".join(lines)


def _listed(lines: Sequence[str], room: int) -> list[str]:
    """``lines`` while they fit in ``room`` characters (the first always), then a count."""
    out: list[str] = []
    for line in lines:
        if len(line) > room and out:
            out.append(f"- ... and {len(lines) - len(out)} more")
            break
        room -= len(line)
        out.append(line)
    return out


def render_regressions(results: CheckResults, regressions: Collection[str]) -> str:
    """The ``$regressions`` section, or ``""``."""
    failing = [r for r in results.failing if r.key in regressions]
    if not failing:
        return ""
    lines = [f"- [{r.key}] {_one_line(r.text, 120)}" for r in failing]
    return ("## Regressions\nThese passed earlier in this run and fail now: a change since then "
            "broke them. Do not leave them broken.\n"
            + "\n".join(_listed(lines, REGRESSIONS_CHARS)))


def render_last_change(last_change: str) -> str:
    """The ``$last_change`` section, or ``""``."""
    text = last_change.strip("\r\n")
    if not text.strip():
        return ""
    if len(text) > LAST_CHANGE_CHARS:
        text = excerpt(text, LAST_CHANGE_CHARS)
    return "## What the last iteration changed\n" + text


def render_blocked(prd: PRD, results: CheckResults, blocked: Mapping[str, str]) -> str:
    """The ``$blocked`` section, or ``""``."""
    if not blocked:
        return ""
    failing: dict[str, int] = {}
    for r in results.failing:
        failing[r.story] = failing.get(r.story, 0) + 1
    lines = []
    for sid, why in blocked.items():
        story = prd.story(sid)
        title = f": {_one_line(story.title, 80)}" if story else ""
        count = f" ({failing[sid]} failing)" if failing.get(sid) else ""
        lines.append(f"- {_one_line(sid, 40)}{title}{count}. Why: "
                     f"{_one_line(why, 200) or 'not given'}")
    return ("## Blocked stories\nThe loop does not ask for these; do not work on them.\n"
            + "\n".join(_listed(lines, BLOCKED_CHARS)))


def render_goal(total: int, passing: int, stories: int) -> str:
    """The ``$goal`` value: ``total`` criteria of ``stories`` stories, ``passing`` of them
    passing now (``Make all 3 acceptance criteria of the 2 stories pass. Now 1 of 3
    passes.``; ``Make the acceptance criterion pass. Now it fails.``)."""
    if total == 1:
        return f"Make the acceptance criterion pass. Now it {'passes' if passing else 'fails'}."
    if total == 0:
        return "Make every acceptance criterion pass."
    whose = "of the story" if stories == 1 else f"of the {stories} stories"
    now = ("none of them passes" if passing == 0 else
           f"{passing} of {total} {'passes' if passing == 1 else 'pass'}")
    return f"Make all {total} acceptance criteria {whose} pass. Now {now}."


#: The first line of a ``progress.txt`` entry: ``## <UTC time> run <run id> ...``
#: (:func:`pytest_ralph.loop.output.progress_entry`, :func:`pytest_ralph.loop.output.end_entry`).
_ENTRY = re.compile(r"## (?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}):\d{2}Z run (?P<run>\S+) ")


def render_progress(progress: str, run: str) -> str:
    """The ``$progress`` value: the end of ``progress`` (at most :data:`PROGRESS_CHARS` of
    it), its entries grouped by the run that wrote them (each entry's first line names it);
    the entries of a run other than ``run`` (the id of the run the prompt is for; ``""``: none
    of them is) are headed ``From an earlier run (<time>, run <id>), the code may have changed
    since:``, so that what an earlier run found is never read as the state of the code now,
    and this run's entries, after them, ``This run:``. The part of an entry that the cut left
    at the start is dropped; a text without entries is kept as it is. ``""`` when there is no
    progress."""
    text = _tail(progress.strip(), PROGRESS_CHARS)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if _ENTRY.match(line)), None)
    if first is None:
        return text
    groups: list[tuple[str, str, list[str]]] = []  # (run id, time, lines)
    for line in lines[first:]:
        m = _ENTRY.match(line)
        if m and (not groups or groups[-1][0] != m["run"]):
            groups.append((m["run"], m["time"].replace("T", " ") + " UTC", []))
        groups[-1][2].append(line)
    earlier = any(rid != run for rid, _, _ in groups)
    out = ["..."] if first else []
    for rid, time, body in groups:
        if rid != run:
            out.append(f"From an earlier run ({time}, run {rid}), the code may have changed "
                       "since:")
        elif earlier:
            out.append("This run:")
        out += body
    return "\n".join(out)


_LONE_VARIABLE = re.compile(r"[ \t]*\$(?:(?P<a>[_a-z][_a-z0-9]*)|\{(?P<b>[_a-z][_a-z0-9]*)\})"
                            r"[ \t]*\r?\n?", re.IGNORECASE | re.ASCII)


def _drop_empty_sections(template: str, values: Mapping[str, str]) -> str:
    """``template`` without the lines holding only an empty section variable (and the blank
    line after each)."""
    out: list[str] = []
    drop_blank = False
    for line in template.splitlines(keepends=True):
        m = _LONE_VARIABLE.fullmatch(line)
        name = (m.group("a") or m.group("b")) if m else None
        if name in SECTION_VARIABLES and not values[name]:
            drop_blank = True
            continue
        if drop_blank and not line.strip():
            drop_blank = False
            continue
        drop_blank = False
        out.append(line)
    return "".join(out)


def build_prompt(template: str, ctx: PromptContext) -> str:
    """Fill ``template`` from ``ctx``; see the module docstring for the placeholders."""
    story = pick_story(ctx.prd, ctx.results, ctx.blocked)
    total = len(ctx.results.criteria)
    passing = len(ctx.results.passing)
    n_stories = len(ctx.results.by_story()) or len(ctx.prd.stories)
    goal = render_goal(total, passing, n_stories)
    regressions = frozenset(ctx.regressions)
    progress = render_progress(ctx.progress, ctx.run)
    values = {
        "iteration": str(ctx.iteration),
        "max_iterations": str(ctx.max_iterations),
        "project": _one_line(ctx.prd.project or ctx.prd.branch_name or ctx.prd.path.stem, 200),
        "prd_path": _rel(ctx.prd.path, ctx.rootdir),
        "rootdir": str(ctx.rootdir),
        "goal": goal,
        "story": render_story(story, ctx.results, ctx.blocked),
        "story_id": story.id if story else "",
        "failing": render_failing(ctx.prd, ctx.results, story, repeats=ctx.repeats,
                                  regressions=regressions, blocked=ctx.blocked),
        "regressions": render_regressions(ctx.results, regressions),
        "last_change": render_last_change(ctx.last_change),
        "blocked": render_blocked(ctx.prd, ctx.results, ctx.blocked),
        "progress": progress or "(nothing yet: this is the first iteration)",
    }
    prompt = string.Template(_drop_empty_sections(template, values)).safe_substitute(values)
    return ctx.redact(prompt) if ctx.redact is not None else prompt


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
