"""The gate's HTML report: ``pytest prd.json --ralph-report PATH.html``.

The same kind of page as a run's (:mod:`pytest_ralph.loop.page`: self-contained, escaped,
no JavaScript): the outcome at the top, a chart of the criteria per story (verified, claimed,
failing), a story grid in colour, and each failing criterion with its excerpt and
fingerprint. Made from the rows of :mod:`pytest_ralph.plugin.stepsummary`. This module does
not import pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..checks.fingerprint import failure_fingerprint
from ..loop.page import Redact, facts, legend, page, text, tone
from ..loop.prompt import excerpt
from .stepsummary import GATE_EXIT, Row, totals

#: Characters of a failure message shown at most (head and tail).
EXCERPT = 2000
#: Stories drawn in the chart at most (the grid lists them all).
CHART_STORIES = 60


def _chart(counts: dict[str, dict[str, int]]) -> str:
    """An inline SVG: one stacked bar per story (verified, claimed, failing)."""
    shown = list(counts.items())[:CHART_STORIES]
    if not shown:
        return ""
    w, h, left, bottom = 960, 240, 40, 40
    top = max(sum(c.values()) for _, c in shown) or 1
    slot = (w - left - 10) / len(shown)
    parts = [f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" '
             'xmlns="http://www.w3.org/2000/svg" aria-labelledby="chart-title">'
             '<title id="chart-title">Criteria per story</title>',
             f'<text class="axis" x="{left - 6}" y="16" text-anchor="end">{top}</text>',
             f'<text class="axis" x="{left - 6}" y="{h - bottom}" text-anchor="end">0</text>']
    colours = {"verified": "var(--ok)", "claimed": "var(--part)", "failed": "var(--bad)"}
    every = max(1, len(shown) // 20)
    for i, (sid, c) in enumerate(shown):
        y = float(h - bottom)
        for status, colour in colours.items():
            size = (h - bottom - 10) * c.get(status, 0) / top
            if size:
                y -= size
                parts.append(f'<rect x="{left + slot * i + slot * 0.15:.1f}" y="{y:.1f}" '
                             f'width="{slot * 0.7:.1f}" height="{size:.1f}" '
                             f'style="fill:{colour}"><title>{text(sid)}: {c[status]} '
                             f"{status}</title></rect>")
        if i % every == 0:
            parts.append(f'<text class="axis" x="{left + slot * (i + 0.5):.1f}" '
                         f'y="{h - bottom + 16}" text-anchor="middle">{text(sid[:12])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_gate_html(rows: Sequence[Row], *, exit_code: int, prds: Iterable[str] = (),
                     notes: Sequence[str] = (), errors: Sequence[str] = (),
                     redact: Redact | None = None) -> str:
    """The gate's report as one HTML page (arguments as
    :func:`pytest_ralph.plugin.stepsummary.render_gate`)."""
    r = redact
    counts: dict[str, dict[str, int]] = {}
    titles: dict[str, str] = {}
    for row in rows:
        counts.setdefault(row.story, {"verified": 0, "claimed": 0, "failed": 0,
                                      "unclaimed": 0})[row.status] += 1
        titles.setdefault(row.story, row.title)
    verdict = "passed" if exit_code == 0 else "failed"
    shown = ", ".join(prds) or "none collected"
    body = [f"<h1>pytest-ralph gate: {verdict}</h1>",
            f'<p class="outcome {"ok" if exit_code == 0 else "bad"}" id="outcome"><b>Outcome: '
            f"exit {exit_code}</b>: {text(GATE_EXIT.get(exit_code, 'see the exit codes'))}</p>",
            facts([("PRD", text(shown, r)), ("Criteria", text(totals(rows)))])]
    if errors or notes:
        body += ["<ul>", *(f"<li>{text(line, r)}</li>" for line in [*errors, *notes]), "</ul>"]
    if counts:
        body += ['<h2 id="chart">Criteria per story</h2>', _chart(counts),
                 '<p class="muted">Green: verified; amber: claimed, not verified; red: '
                 "failing.</p>", '<h2 id="grid">Stories</h2>', legend(),
                 "<table class=\"grid\"><thead><tr><th>story</th><th>title</th><th>passing"
                 "</th><th>verified</th><th>claimed</th><th>failed</th></tr></thead><tbody>"]
        for sid, c in counts.items():
            good = c["verified"] + c["claimed"]
            total = good + c["failed"] + c["unclaimed"]
            body.append(f'<tr class="story" id="story-{text(sid)}"><th>{text(sid)}</th>'
                        f"<td>{text(titles.get(sid, ''), r)}</td>"
                        f'<td class="c {tone(good, total)}">{good}/{total}</td>'
                        f"<td>{c['verified']}</td><td>{c['claimed']}</td>"
                        f"<td>{c['failed']}</td></tr>")
        body.append("</tbody></table>")
    failing = [row for row in rows if row.status == "failed"]
    if failing:
        body.append(f'<h2 id="failures">Failing criteria ({len(failing)})</h2>')
        for row in failing:
            fp = failure_fingerprint(row.key, row.message)
            body += [f'<section class="failure" id="failure-{text(row.key)}">'
                     f"<h3>{text(row.key)}: {text(' '.join(row.text.split()), r)}</h3>",
                     f'<p>fingerprint <code class="fp">{fp}</code></p>',
                     f"<pre>{text(excerpt(row.message, EXCERPT), r)}</pre></section>"]
    return page(f"pytest-ralph gate: {verdict}", body)
