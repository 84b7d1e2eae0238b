"""The HTML report of a run: ``reports/ralph-<topic>-<date>.html``, beside the Markdown one.

One self-contained page (:mod:`pytest_ralph.loop.page`: inline CSS, an inline SVG chart, no
network, no JavaScript): the outcome and stop reason at the top, the chart of criteria
passing per iteration (:mod:`pytest_ralph.loop.chart`), a story x iteration grid in colour,
each failing criterion of the last check with its excerpt and fingerprint, the time and cost
spent on each story, and one row per iteration with relative links to its prompt and agent
log in the state folder. Its size is bounded: a run of 200 iterations and 100 stories stays
under 2 MB. This module does not import pytest.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..util.files import atomic_write_text
from .chart import pass_points, run_chart, svg
from .page import Redact, facts, legend, page, text, tone
from .prompt import excerpt
from .report import outcome_line, progress_of

if TYPE_CHECKING:
    from .records import IterationRecord, RunRecord

#: Characters of a failure message the page shows at most (head and tail).
EXCERPT = 2000
#: Iterations beyond which the grid shows colours only (the numbers are in each cell's
#: tooltip).
DENSE_AFTER = 40


def _link(target: Path, base: Path | None, label: str) -> str:
    """A relative link to ``target`` from the folder ``base`` (``None``: the path as text)."""
    if base is None:
        return f"<code>{text(target)}</code>"
    try:
        rel = os.path.relpath(target, base)
    except ValueError:  # another drive (Windows)
        rel = str(target)
    href = "/".join(part.replace("%", "%25").replace("#", "%23").replace("?", "%3F")
                    for part in Path(rel).parts)
    return f'<a href="{text(href)}">{text(label)}</a>'


def _header(run: RunRecord, r: Redact | None) -> list[str]:
    s = run.settings
    last = run.last.results if run.iterations else None
    n_iter = max(len(run.iterations) - 1, 0)
    word = "ok" if run.status == "complete" else ("part" if run.status == "running" else "bad")
    outcome = text(outcome_line(run).removeprefix("- Outcome: ").replace("**", ""))
    items = [("Stop reason", text(run.reason or "-", r)),
             ("PRD", f"<code>{text(run.prd.path, r)}</code> ({text(run.prd.format)})"),
             ("Agent", f"<code>{text(' '.join(run.argv), r)}</code>"),
             ("Iterations", f"{n_iter} of at most {s.max_iterations}"),
             ("Criteria", f"{len(last.passing)}/{len(last.criteria)} passing" if last
              else "none checked"),
             ("Run", f"<code>{text(run.run_dir.id)}</code>, started "
              f"{text(run.started.isoformat(timespec='seconds'))}"
              + (f", finished {text(run.finished.isoformat(timespec='seconds'))}"
                 if run.finished else "")),
             ("State", f"<code>{text(run.run_dir.path, r)}</code>")]
    if run.cost:
        items.append(("Agent cost", f"${run.cost:.4f} (as the agent reported it)"))
    if run.blocked:
        items.append(("Blocked stories", text(", ".join(run.blocked), r)))
    title = run.prd.project or run.prd.branch_name or run.prd.path.stem
    out = [f"<h1>Ralph report: {text(title, r)}</h1>",
           f'<p class="outcome {word}" id="outcome"><b>Outcome: {outcome}</b><br>'
           f"{text(run.reason, r)}</p>", facts(items)]
    if run.warnings:
        out += ["<h2>Warnings</h2><ul>", *(f"<li>{text(w, r)}</li>" for w in run.warnings),
                "</ul>"]
    return out


def _chart(run: RunRecord) -> list[str]:
    chart = run_chart(run)
    if not chart.points:
        return []
    out = ['<h2 id="chart">Criteria passing per iteration</h2>', svg(chart),
           f'<p class="muted">Bars: criteria passing (of {chart.total}); line: stories '
           f"passing (of {chart.stories})"
           + (f"; {len(chart.points)} of {chart.checks} checks shown" if chart.sampled else "")
           + ".</p>"]
    points = pass_points(chart)
    if points:  # folded when long (a details element: no JavaScript needed)
        out += [f'<details class="passes"{" open" if len(points) <= 12 else ""}><summary>'
                f"Story pass points ({len(points)} iterations)</summary><ul>",
                *(f"<li>iteration {n}: {text(', '.join(sids))}</li>" for n, sids in points),
                "</ul></details>"]
    return out


def _grid(run: RunRecord, r: Redact | None) -> list[str]:
    wanted = set(run.settings.story or ())
    its = run.iterations
    dense = len(its) > DENSE_AFTER
    heads = "".join(f'<th class="n">{"b" if it.n == 0 else it.n}</th>' for it in its)
    rows = []
    by_story = [it.results.by_story() for it in its]
    for story in run.prd.ordered_stories():
        if wanted and story.id not in wanted:
            continue
        cells = []
        for it, found in zip(its, by_story, strict=True):
            crits = found.get(story.id, [])
            good = sum(c.passed for c in crits)
            label = f"{good}/{len(crits)}" if crits else ""
            cells.append(f'<td class="c {tone(good, len(crits))}" title="{it.n}: '
                         f'{label or "-"}">{"" if dense else label}</td>')
        rows.append(f'<tr class="story" id="story-{text(story.id)}"><th>{text(story.id)}</th>'
                    f"<td>{text(story.title, r)}</td>{''.join(cells)}</tr>")
    return ['<h2 id="grid">Stories x iterations</h2>', legend(),
            '<p class="muted">Passing criteria of each story after each check (b: baseline).'
            "</p>",
            f'<div class="scroll"><table class="grid{" dense" if dense else ""}"><thead><tr>'
            f"<th>story</th><th>title</th>{heads}</tr></thead><tbody>", *rows,
            "</tbody></table></div>"]


def _failures(run: RunRecord, r: Redact | None) -> list[str]:
    if not run.iterations:
        return []
    last = run.last.results
    if not last.failing and not last.errors:
        return []
    fps = dict(run.last.failure_fingerprints())
    out = ['<h2 id="failures">Failing criteria (last check)</h2>']
    for c in last.failing:
        out += [f'<section class="failure" id="failure-{text(c.key)}">'
                f"<h3>{text(c.key)}: {text(' '.join(c.text.split()), r)}</h3>",
                f"<p>node id <code>{text(c.nodeid or '-')}</code>; fingerprint "
                f'<code class="fp">{text(fps.get(c.key, "-"))}</code></p>',
                f"<pre>{text(excerpt(c.message, EXCERPT), r)}</pre></section>"]
    for e in last.errors:
        out += ['<section class="failure"><h3>Check phase error</h3>'
                f"<pre>{text(excerpt(e, EXCERPT), r)}</pre></section>"]
    return out


def _per_story(run: RunRecord, r: Redact | None) -> list[str]:
    spent: dict[str, list[float]] = {}
    cost: dict[str, float] = {}
    for it in run.iterations:
        if it.agent is not None and it.story:
            spent.setdefault(it.story, []).append(it.agent.duration)
            cost[it.story] = cost.get(it.story, 0.0) + (it.agent.cost_usd or 0.0)
    if not spent:
        return []
    passed = dict(run_chart(run).passed_at)
    rows = [f"<tr><td>{text(sid)}</td><td>{len(times)}</td><td>{sum(times):.1f}</td>"
            f"<td>{f'${cost[sid]:.4f}' if cost.get(sid) else '-'}</td>"
            f"<td>{passed.get(sid, '-')}</td></tr>" for sid, times in spent.items()]
    return ['<h2 id="time">Time and cost per story</h2>',
            "<table><thead><tr><th>story</th><th>iterations</th><th>agent seconds</th>"
            "<th>cost (as reported)</th><th>passed at iteration</th></tr></thead><tbody>",
            *rows, "</tbody></table>"]


def _iteration_row(run: RunRecord, i: int, it: IterationRecord, base: Path | None,
                   r: Redact | None) -> str:
    res = it.results
    result = progress_of(run.iterations[i - 1].results, res).text() if i else "baseline"
    if it.agent is None:
        agent, seconds, cost, links = "baseline check", "-", "-", ""
    else:
        agent = text(it.agent.outcome + (f": {it.agent.detail}" if it.agent.detail else ""), r)
        seconds = f"{it.agent.duration:.1f}"
        cost = f"${it.agent.cost_usd:.4f}" if it.agent.cost_usd is not None else "-"
        links = (_link(it.folder / "prompt.md", base, "prompt") + " "
                 + _link(it.agent.log_path, base, "agent log"))
    return (f"<tr><td>{it.n}</td><td>{text(it.story or '-')}</td><td>{agent}</td>"
            f"<td>{seconds}</td><td>{len(res.passing)}/{len(res.criteria)}</td>"
            f"<td>{text(result)}</td><td>{len(res.failing)}</td><td>{cost}</td>"
            f"<td>{links}</td></tr>")


def _iterations(run: RunRecord, base: Path | None, r: Redact | None) -> list[str]:
    return ['<h2 id="iterations">Iterations</h2>',
            "<table><thead><tr><th>#</th><th>story</th><th>agent</th><th>seconds</th>"
            "<th>passing</th><th>result</th><th>failing</th><th>cost</th><th>files</th>"
            "</tr></thead><tbody>",
            *(_iteration_row(run, i, it, base, r) for i, it in enumerate(run.iterations)),
            "</tbody></table>"]


def render_html(run: RunRecord, base: Path | None = None,
                redact: Callable[[str], str] | None = None) -> str:
    """The report of ``run`` as one HTML page.

    Args:
        run: the run.
        base: the folder the page is written to, for relative links to each iteration's
            prompt and agent log; ``None`` shows the paths as text.
        redact: applied to user text before it is escaped (secret values of the environment),
            or ``None``.
    """
    title = run.prd.project or run.prd.branch_name or run.prd.path.stem
    body = [*_header(run, redact), *_chart(run), *_grid(run, redact),
            *_failures(run, redact), *_per_story(run, redact),
            *_iterations(run, base, redact)]
    name = redact(title) if redact else title
    return page(f"Ralph report: {name}", body)


def write_html(run: RunRecord, path: Path,
               redact: Callable[[str], str] | None = None) -> Path:
    """Write the HTML report of ``run`` to ``path`` (replaced atomically; its links relative
    to ``path``'s folder) and return the path."""
    atomic_write_text(path, render_html(run, path.parent, redact))
    return path


def write_beside(run: RunRecord, markdown: Path,
                 redact: Callable[[str], str] | None = None) -> str | None:
    """Write the HTML report of ``run`` beside its Markdown report ``markdown`` (same name,
    ``.html``).

    Returns:
        ``None`` when written, else a warning that says why not (it never raises
        ``OSError``: the Markdown report is written already, the run's outcome stays).
    """
    path = markdown.with_suffix(".html")
    try:
        write_html(run, path, redact)
    except OSError as exc:
        return f"cannot write the HTML report {path}: {exc.strerror or exc}"
    return None
