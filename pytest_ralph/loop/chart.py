"""The picture of a run: criteria passing per iteration, as Mermaid (GitHub) and as SVG (HTML).

:func:`run_chart` reads a :class:`~pytest_ralph.loop.records.RunRecord` into a
:class:`Chart`: one :class:`Point` per check (the baseline is iteration 0), sampled down to
at most :data:`MOST_POINTS` so that a run of 200 iterations stays readable, and the
iteration at which each story first passed. :func:`mermaid` draws it as an ``xychart-beta``
block (the chart type GitHub's Mermaid renders: bars for the criteria passing, a line for the
stories passing), :func:`svg` as an inline SVG for the HTML report.
:func:`merge_chart` draws the merges of a parallel run on its timeline.

Every text that reaches a chart is a label made here (numbers, story ids escaped for the
target), never agent output. This module does not import pytest.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import RunRecord

#: Points a chart shows at most; longer runs are sampled (each point the last check of a
#: bucket of iterations, the last check always shown).
MOST_POINTS = 40

#: Points a Mermaid chart shows at most (its labels do not turn: fewer fit than in the SVG).
MERMAID_POINTS = 25

#: Story ids listed per pass point in the Markdown note at most; the rest are counted.
MOST_IDS = 12


@dataclass(frozen=True)
class Point:
    """One point of the chart: the check after iteration ``n`` (0: the baseline).

    Attributes:
        n: the iteration number.
        passing: criteria passing after it.
        total: criteria checked after it.
        stories: stories whose criteria all pass after it.
    """

    n: int
    passing: int
    total: int
    stories: int


@dataclass(frozen=True)
class Chart:
    """A run as its chart shows it.

    Attributes:
        points: the shown checks, in order (sampled: see :data:`MOST_POINTS`).
        checks: how many checks the run made (baseline included): ``len(points)`` unless
            sampled.
        total: the most criteria any check held (the y axis's top).
        stories: the stories charted.
        passed_at: (story id, iteration) for each story, the first check after which all of
            its criteria passed, in the order of the iterations; stories that never passed
            are left out.
    """

    points: tuple[Point, ...]
    checks: int
    total: int
    stories: int
    passed_at: tuple[tuple[str, int], ...]

    @property
    def sampled(self) -> bool:
        """Whether some checks are not shown (a long run)."""
        return len(self.points) < self.checks


def sample(count: int, most: int = MOST_POINTS) -> list[int]:
    """The indexes of ``count`` items to show at most ``most`` of them: all when they fit,
    else the first, the last and the last of each equal bucket in between (sorted, unique).

    Raises:
        ValueError: ``most`` below 2.
    """
    if most < 2:
        raise ValueError(f"a chart needs at least 2 points, not {most}")
    if count <= most:
        return list(range(count))
    step = math.ceil((count - 1) / (most - 1))
    picked = sorted({0, count - 1, *range(step, count - 1, step)})
    return picked


def run_chart(run: RunRecord, most: int = MOST_POINTS) -> Chart:
    """The :class:`Chart` of ``run`` (baseline first); an empty chart for a run without a
    check. Stories are those of the PRD, or of ``--ralph-story`` when given."""
    wanted = set(run.settings.story or ())
    ids = [s.id for s in run.prd.ordered_stories() if not wanted or s.id in wanted]
    all_points: list[Point] = []
    passed_at: dict[str, int] = {}
    for it in run.iterations:
        by_story = it.results.by_story()
        done = [sid for sid in ids if by_story.get(sid) and
                all(c.passed for c in by_story[sid])]
        for sid in done:
            passed_at.setdefault(sid, it.n)
        all_points.append(Point(it.n, len(it.results.passing), len(it.results.criteria),
                                len(done)))
    points = tuple(all_points[i] for i in sample(len(all_points), most))
    order = sorted(passed_at.items(), key=lambda pair: (pair[1], ids.index(pair[0])))
    return Chart(points, len(all_points), max((p.total for p in points), default=0),
                 len(ids), tuple(order))


def pass_points(chart: Chart) -> list[tuple[int, list[str]]]:
    """(iteration, story ids) of each iteration at which stories first passed, in order."""
    out: dict[int, list[str]] = {}
    for sid, n in chart.passed_at:
        out.setdefault(n, []).append(sid)
    return sorted(out.items())


_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/+()-]")


def _label(text: str) -> str:
    """A Mermaid string: only characters that cannot end the quotes or start a directive."""
    return _UNSAFE.sub("_", text)[:60]


def mermaid(chart: Chart, title: str = "Criteria passing per iteration") -> list[str]:
    """A fenced ``mermaid`` block (``xychart-beta``) of ``chart``, then a note of the story
    pass points; no lines for a chart without points.

    Returns:
        Markdown lines. The chart uses only what Mermaid 10.9 parses (GitHub's renderer):
        an ``init`` directive (its size), a title, an x axis of category labels, a y axis
        range, one ``bar`` and one ``line``; at most :data:`MERMAID_POINTS` points.
    """
    if not chart.points:
        return []
    shown = [chart.points[i] for i in sample(len(chart.points), MERMAID_POINTS)]
    labels = ", ".join(f'"{p.n}"' for p in shown)
    top = max(chart.total, chart.stories, 1)
    out = ["```mermaid", '%%{init: {"xyChart": {"width": 900, "height": 420}}}%%',
           "xychart-beta",
           f'    title "{_label(title)}"',
           f'    x-axis "iteration (0: baseline)" [{labels}]',
           f'    y-axis "passing" 0 --> {top}',
           f"    bar [{', '.join(str(p.passing) for p in shown)}]",
           f"    line [{', '.join(str(p.stories) for p in shown)}]",
           "```", "",
           f"Bars: criteria passing (of {chart.total}); line: stories passing (of "
           f"{chart.stories})."
           + (f" {len(shown)} of {chart.checks} checks shown (sampled)."
              if len(shown) < chart.checks else "")]
    points = pass_points(chart)
    if not points:
        return [*out, ""]
    head = "Story pass points (iteration: stories that passed for the first time)"
    fold = len(points) > MOST_IDS  # a long list folded (GitHub renders details)
    out += ["", f"<details><summary>{head}: {len(points)}</summary>" if fold else head + ":",
            ""]
    for n, sids in points:
        more = f" and {len(sids) - MOST_IDS} more" if len(sids) > MOST_IDS else ""
        names = ", ".join(_UNSAFE.sub("_", s) for s in sids[:MOST_IDS])
        out.append(f"- {n}: {names}{more}")
    return [*out, *(["", "</details>"] if fold else []), ""]


def merge_chart(merged_at: Sequence[float], stories: int, ended: float | None = None,
                most: int = 30) -> list[str]:
    """A fenced ``mermaid`` block of the merges of a parallel run on its timeline: the
    stories merged by each mark (bars and a line), in seconds for a run of at most 5
    minutes, else in minutes, sampled to at most ``most`` marks; no lines without a merge.

    Args:
        merged_at: seconds after the run started at which each story was merged.
        stories: the stories of the run (the y axis's top).
        ended: seconds after the start when the run ended, or ``None`` (the last merge).
        most: marks shown at most.
    """
    if not merged_at:
        return []
    times = sorted(max(t, 0.0) for t in merged_at)
    span = max(ended or 0.0, times[-1])
    unit, word = (10, "seconds") if span <= 300 else (60, "minutes")
    steps = max(math.ceil(span / unit), 1)
    marks = sample(steps + 1, most)  # 0, then every k-th step, and the last
    counts = [sum(t <= m * unit for t in times) for m in marks]
    labels = ", ".join(f'"{m * unit // (1 if unit == 10 else 60)}"' for m in marks)
    return ["```mermaid", "xychart-beta", '    title "Stories merged over time"',
            f'    x-axis "{word} since the start" [{labels}]',
            f'    y-axis "stories merged" 0 --> {max(stories, 1)}',
            f"    bar [{', '.join(str(c) for c in counts)}]",
            f"    line [{', '.join(str(c) for c in counts)}]", "```", ""]


# --- SVG -------------------------------------------------------------------------------

_W, _H = 960, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 24, 48


def svg(chart: Chart, title: str = "Criteria passing per iteration") -> str:
    """An inline SVG of ``chart``: bars for the criteria passing, a line for the stories
    passing, a marker under each iteration at which stories first passed (its ``<title>``
    names them); ``""`` for a chart without points. Fixed size (960 x 320 user units,
    scaled by CSS); at most :data:`MOST_POINTS` bars, so its size does not grow with the run.
    """
    if not chart.points:
        return ""
    n = len(chart.points)
    top = max(chart.total, chart.stories, 1)
    width = _W - _LEFT - _RIGHT
    height = _H - _TOP - _BOTTOM
    slot = width / n

    def x(i: int) -> float:
        return _LEFT + slot * (i + 0.5)

    def y(v: int) -> float:
        return _TOP + height * (1 - v / top)

    e = html.escape
    parts = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" '
             f'xmlns="http://www.w3.org/2000/svg" aria-labelledby="chart-title">',
             f'<title id="chart-title">{e(title)}</title>']
    for v in sorted({0, top // 2, top}):
        parts.append(f'<line class="grid" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v):.1f}" '
                     f'y2="{y(v):.1f}"/><text class="axis" x="{_LEFT - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{v}</text>')
    every = max(1, math.ceil(n / 20))  # x labels at most 20
    for i, p in enumerate(chart.points):
        h = y(0) - y(p.passing)
        parts.append(f'<rect class="bar" x="{x(i) - slot * 0.35:.1f}" y="{y(p.passing):.1f}" '
                     f'width="{slot * 0.7:.1f}" height="{h:.1f}"><title>iteration {p.n}: '
                     f'{p.passing}/{p.total} criteria, {p.stories} stories</title></rect>')
        if i % every == 0 or i == n - 1:
            parts.append(f'<text class="axis" x="{x(i):.1f}" y="{_H - _BOTTOM + 16}" '
                         f'text-anchor="middle">{p.n}</text>')
    line = " ".join(f"{x(i):.1f},{y(p.stories):.1f}" for i, p in enumerate(chart.points))
    parts.append(f'<polyline class="stories" points="{line}"/>')
    shown = [p.n for p in chart.points]
    for n_it, sids in pass_points(chart):
        i = next((k for k, m in enumerate(shown) if m >= n_it), len(shown) - 1)
        names = ", ".join(sids[:50]) + (f" and {len(sids) - 50} more" if len(sids) > 50 else "")
        parts.append(f'<path class="pass" d="M{x(i):.1f},{_H - _BOTTOM + 22} l-5,9 h10 z">'
                     f'<title>iteration {n_it}: {e(names)} passed</title></path>')
    parts.append(f'<text class="axis" x="{_LEFT + width / 2:.1f}" y="{_H - 4}" '
                 'text-anchor="middle">iteration (0: baseline); triangles: stories passing '
                 'for the first time</text></svg>')
    return "".join(parts)
