"""The final report of a parallel run, in Markdown (``parallel-report.md``, which GitHub renders,
its chart a Mermaid block) and as a self-contained HTML page beside it
(``parallel-report.html``: inline CSS and SVG, no script, no network), both from the run's
:class:`~pytest_ralph.parallel.lanerecord.Record`: the outcome, the stories merged over
time, each story's phase, the lane timeline and the merge queue's history with each merge's
check, and (HTML) links to each lane's log and own report.

This module does not import pytest.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..loop.chart import merge_chart
from ..loop.page import facts, page, text
from ..util.files import atomic_write_text
from .lanerecord import Record, clock

__all__ = ["REPORT", "REPORT_HTML", "write_reports"]

#: The Markdown report, in the state folder.
REPORT = "parallel-report.md"

#: The HTML report, beside it.
REPORT_HTML = "parallel-report.html"

#: The outcomes of the merge queue as the HTML grid colours them.
_TONE = {"merged": "ok", "conflict": "part", "story-failed": "bad", "regressed": "bad",
         "blocked": "bad"}


def write_reports(rec: Record, state_dir: Path, *, lanes: int, gate: str, fin_text: str,
                  kept: Sequence[str]) -> tuple[Path, Path]:
    """Write both reports of the run ``rec`` into ``state_dir``: ``lanes`` is the number of
    lanes at once, ``gate`` the sentence of what the gate could write, ``fin_text`` what
    became of the user's branch, ``kept`` the branches kept.

    Returns:
        (the Markdown report's path, the HTML report's path).

    Raises:
        OSError: a report cannot be written.
    """
    ended = (rec.ended or time.time()) - rec.started
    md = state_dir / REPORT
    atomic_write_text(md, markdown(rec, lanes=lanes, gate=gate, fin_text=fin_text, kept=kept,
                                   ended=ended))
    page_path = state_dir / REPORT_HTML
    atomic_write_text(page_path, html_page(rec, state_dir, lanes=lanes, gate=gate,
                                           fin_text=fin_text, kept=kept, ended=ended))
    return md, page_path


def _merged_at(rec: Record) -> list[float]:
    return [float(q["at"]) for q in rec.queue if q.get("outcome") == "merged"]


def markdown(rec: Record, *, lanes: int, gate: str, fin_text: str, kept: Sequence[str],
             ended: float) -> str:
    """The Markdown report (see the module docstring)."""
    lines = [f"# pytest-ralph parallel run {rec.run_id}", "",
             f"- PRD: {rec.prd}", f"- From: {rec.branch or 'detached HEAD'} at "
             f"{rec.base[:12]}", f"- Lanes at once: {lanes}",
             f"- Outcome: **{rec.result}**",
             *([f"- Gate: {gate}"] if gate else []), "",
             *merge_chart(_merged_at(rec), len(rec.stories), ended),
             "## Stories", "",
             "| story | phase | attempts | merges | iterations | why |",
             "|---|---|---|---|---|---|"]
    for sid, st in rec.stories.items():
        why = str(st.get("why", "")).replace("|", "/")
        lines.append(f"| {sid} | {st['phase']} | {st['attempt']} | {st.get('merges', 0)} "
                     f"| {st.get('iterations', 0)} | {why} |")
    lines += ["", "## Lane timeline", "", "| at | story | attempt | event |",
              "|---|---|---|---|"]
    for ev in rec.timeline:
        lines.append(f"| +{clock(ev['at'])} | {ev['story']} | {ev['attempt']} | "
                     f"{ev['event']} |")
    lines += ["", "## Merge queue", "", "| at | story | attempt | outcome | check |",
              "|---|---|---|---|---|"]
    for q in rec.queue:
        first = (q["text"].splitlines() or [""])[0].replace("|", "/")
        lines.append(f"| +{clock(q['at'])} | {q['story']} | {q['attempt']} | "
                     f"{q['outcome']} | {first} |")
    lines += ["", "## End", "", fin_text or "(nothing to say)"]
    if kept:
        lines += ["", "Branches kept (blocked stories, the integration branch): "
                  + ", ".join(kept)]
    return "\n".join(lines) + "\n"


def merges_svg(merged_at: Sequence[float], stories: int, ended: float) -> str:
    """An inline SVG of the stories merged over the run's time (a step line, a dot per
    merge); ``""`` without a merge. Fixed size (960 x 240 user units)."""
    if not merged_at:
        return ""
    width, height, left, bottom, top_pad = 960, 240, 56, 40, 16
    span = max(ended, max(merged_at), 1.0)
    top = max(stories, 1)

    def x(t: float) -> float:
        return left + (width - left - 16) * min(max(t, 0.0), span) / span

    def y(v: int) -> float:
        return top_pad + (height - top_pad - bottom) * (1 - v / top)

    times = sorted(merged_at)
    path = [f"M{x(0):.1f},{y(0):.1f}"]
    for n, t in enumerate(times, 1):
        path += [f"H{x(t):.1f}", f"V{y(n):.1f}"]
    path.append(f"H{x(span):.1f}")
    parts = ['<svg class="chart" viewBox="0 0 960 240" role="img" '
             'xmlns="http://www.w3.org/2000/svg" aria-labelledby="merges-title">'
             '<title id="merges-title">Stories merged over time</title>']
    for v in sorted({0, top}):
        parts.append(f'<line class="grid" x1="{left}" x2="944" y1="{y(v):.1f}" '
                     f'y2="{y(v):.1f}"/><text class="axis" x="{left - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{v}</text>')
    parts.append(f'<path class="stories" d="{" ".join(path)}"/>')
    for n, t in enumerate(times, 1):
        parts.append(f'<circle class="pass" cx="{x(t):.1f}" cy="{y(n):.1f}" r="5">'
                     f'<title>+{html.escape(clock(t))}: {n} merged</title></circle>')
    parts.append(f'<text class="axis" x="{left}" y="{height - 8}">0 s</text>'
                 f'<text class="axis" x="944" y="{height - 8}" text-anchor="end">'
                 f'{html.escape(clock(span))}</text>'
                 f'<text class="axis" x="500" y="{height - 8}" text-anchor="middle">'
                 'time since the start; dots: merges kept by the gate</text></svg>')
    return "".join(parts)


def _link(path: Any, base: Path, label: str) -> str:
    """A relative link from the report's folder to ``path`` (when it is a string)."""
    if not isinstance(path, str) or not path:
        return ""
    rel = os.path.relpath(path, base)
    return f'<a href="{html.escape(Path(rel).as_posix(), quote=True)}">{html.escape(label)}</a>'


def _lane_report(state: Any) -> str | None:
    """The newest HTML report in a lane's state folder, if any."""
    if not isinstance(state, str):
        return None
    try:
        found = sorted(Path(state, "reports").glob("*.html"))
    except OSError:
        return None
    return str(found[-1]) if found else None


def html_page(rec: Record, state_dir: Path, *, lanes: int, gate: str, fin_text: str,
              kept: Sequence[str], ended: float) -> str:
    """The HTML report (see the module docstring); links are relative to ``state_dir``."""
    ok = rec.result == "complete"
    merged = sum(1 for st in rec.stories.values() if st.get("phase") == "merged")
    body = [f"<h1>Parallel run {text(rec.run_id)}</h1>",
            f'<p class="outcome {"ok" if ok else "bad"}" id="outcome"><b>Outcome: '
            f'{text(rec.result or "running")} (exit {0 if ok else 1})</b><br>'
            f"{merged}/{len(rec.stories)} stories merged and verified by the gate</p>",
            facts([("PRD", f"<code>{text(rec.prd)}</code>"),
                   ("From", f"{text(rec.branch or 'detached HEAD')} at "
                            f"<code>{text(rec.base[:12])}</code>"),
                   ("Lanes at once", str(lanes)), ("Took", text(clock(ended))),
                   *([("Gate", text(gate))] if gate else [])]),
            "<h2>Stories merged over time</h2>",
            merges_svg(_merged_at(rec), len(rec.stories), ended) or
            '<p class="muted">no story was merged</p>',
            "<h2>Stories</h2>", '<table><tr><th>story</th><th>phase</th><th>attempts</th>'
            "<th>merges</th><th>iterations</th><th>why</th><th>files</th></tr>"]
    for sid, st in rec.stories.items():
        phase = str(st.get("phase", ""))
        links = [_link(st.get("log"), state_dir, "lane log"),
                 _link(_lane_report(st.get("state")), state_dir, "lane report")]
        body.append(f'<tr><td><b>{text(sid)}</b></td><td class="'
                    f'{"ok" if phase == "merged" else "bad" if phase == "blocked" else "none"}'
                    f'">{text(phase)}</td><td>{text(st.get("attempt", ""))}</td>'
                    f'<td>{text(st.get("merges", 0))}</td><td>{text(st.get("iterations", 0))}'
                    f'</td><td>{text(st.get("why", ""))}</td><td>{" ".join(x for x in links if x)}'
                    "</td></tr>")
    body += ["</table>", "<h2>Lane timeline</h2>",
             "<table><tr><th>at</th><th>story</th><th>attempt</th><th>event</th></tr>",
             *(f"<tr><td>+{text(clock(ev['at']))}</td><td>{text(ev['story'])}</td>"
               f"<td>{text(ev['attempt'])}</td><td>{text(ev['event'])}</td></tr>"
               for ev in rec.timeline), "</table>", "<h2>Merge queue</h2>",
             "<table><tr><th>at</th><th>story</th><th>attempt</th><th>outcome</th>"
             "<th>check</th></tr>"]
    for q in rec.queue:
        lines = str(q.get("text", "")).splitlines() or [""]
        more = "".join(f"<br><code>{text(line.strip())}</code>" for line in lines[1:11])
        body.append(f"<tr><td>+{text(clock(q['at']))}</td><td>{text(q['story'])}</td>"
                    f"<td>{text(q['attempt'])}</td><td class=\""
                    f"{_TONE.get(str(q.get('outcome')), 'none')}\">{text(q['outcome'])}</td>"
                    f"<td>{text(lines[0])}{more}</td></tr>")
    body += ["</table>", "<h2>End</h2>", f"<p>{text(fin_text or '(nothing to say)')}</p>"]
    if kept:
        body.append(f"<p>Branches kept (blocked stories, the integration branch): "
                    f"{text(', '.join(kept))}</p>")
    return page(f"pytest-ralph parallel run {rec.run_id}", body)
