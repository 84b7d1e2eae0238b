"""Unit tests of the picture of a run: pytest_ralph.loop.chart (Mermaid and SVG), the HTML
report (pytest_ralph.loop.report_html) and the gate's HTML page (--ralph-report PATH.html).
tests/loop/test_report_chromium.py opens the pages in a real Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_ralph.loop.chart import (
    MERMAID_POINTS,
    MOST_POINTS,
    merge_chart,
    mermaid,
    run_chart,
    sample,
)
from pytest_ralph.loop.report import render_report
from pytest_ralph.loop.report_html import render_html, write_beside, write_html
from pytest_ralph.plugin.stepsummary import render_loop
from tests.support.reports import made_run


def test_sample_keeps_short_runs_whole_and_samples_long_ones() -> None:
    assert sample(5) == [0, 1, 2, 3, 4]
    picked = sample(201)
    assert picked[0] == 0 and picked[-1] == 200
    assert len(picked) <= MOST_POINTS
    assert picked == sorted(set(picked))
    with pytest.raises(ValueError, match="at least 2 points"):
        sample(10, most=1)


def test_chart_of_a_run_counts_criteria_and_stories_and_pass_points(tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=6, stories=3)
    chart = run_chart(run)
    assert [p.n for p in chart.points] == list(range(7))
    assert [p.passing for p in chart.points] == [0, 0, 2, 2, 4, 4, 4]
    assert [p.stories for p in chart.points] == [0, 0, 1, 1, 2, 2, 2]
    assert chart.passed_at == (("US-001", 2), ("US-002", 4))
    assert not chart.sampled and chart.total == 6 and chart.stories == 3


def test_markdown_report_has_the_mermaid_chart_and_the_pass_points(tmp_path: Path) -> None:
    text = render_report(made_run(tmp_path, iterations=6, stories=3))
    block = text.split("```mermaid\n", 1)[1].split("\n```", 1)[0]
    assert block.splitlines() == [
        '%%{init: {"xyChart": {"width": 900, "height": 420}}}%%',
        "xychart-beta",
        '    title "Criteria passing per iteration"',
        '    x-axis "iteration (0: baseline)" ["0", "1", "2", "3", "4", "5", "6"]',
        '    y-axis "passing" 0 --> 6',
        "    bar [0, 0, 2, 2, 4, 4, 4]",
        "    line [0, 0, 1, 1, 2, 2, 2]"]
    assert "Bars: criteria passing (of 6); line: stories passing (of 3)." in text
    assert "- 2: US-001\n- 4: US-002\n" in text
    assert text.index("## Progress") < text.index("## Stories x iterations")


def test_a_200_iteration_chart_is_sampled_and_says_so(tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=200, stories=10, criteria=1)
    lines = mermaid(run_chart(run))
    x_axis = next(line for line in lines if "x-axis" in line)
    assert x_axis.count('"') // 2 - 1 <= MERMAID_POINTS  # the axis title is quoted too
    assert '"0"' in x_axis and '"200"' in x_axis
    assert any(f"of {201} checks shown (sampled)" in line for line in lines)
    # Nine pass points: listed; more would be folded into a details element.
    assert "- 20: US-001" in lines and "</details>" not in lines
    many = mermaid(run_chart(made_run(tmp_path, iterations=200, stories=30, criteria=1)))
    assert any(line.startswith("<details><summary>Story pass points") for line in many)
    assert "</details>" in many


def test_job_summary_of_the_loop_has_the_chart(tmp_path: Path) -> None:
    text = render_loop(made_run(tmp_path, iterations=4, stories=2))
    assert "```mermaid\n%%{init: " in text and "\nxychart-beta\n" in text


def test_merge_chart_of_a_parallel_run() -> None:
    lines = merge_chart([30.0, 90.0, 200.0], stories=4, ended=1000.0)
    assert lines[:2] == ["```mermaid", "xychart-beta"]
    assert ('    x-axis "minutes since the start" ["0", "1", "2", "3", "4", "5", "6", "7", '
            '"8", "9", "10", "11", "12", "13", "14", "15", "16", "17"]') in lines
    assert "    bar [0, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]" in lines
    short = merge_chart([12.0, 41.0], stories=2, ended=50.0)  # seconds for a short run
    assert '    x-axis "seconds since the start" ["0", "10", "20", "30", "40", "50"]' in short
    assert "    bar [0, 0, 1, 1, 1, 2]" in short
    long = merge_chart([60.0 * k for k in range(1, 200)], stories=200, ended=12000.0)
    assert next(x for x in long if "x-axis" in x).count('"') // 2 - 1 <= 30
    assert merge_chart([], stories=4) == []


def test_html_report_sections_and_relative_links(tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=4, stories=2)
    reports = tmp_path / ".pytest_ralph" / "reports"
    reports.mkdir(parents=True)
    page = write_html(run, reports / "ralph-big-2026-03-04.html").read_text("utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert '<p class="outcome bad" id="outcome"><b>Outcome: limit (exit 1: stopped at a limit)' \
        in page
    assert "the iteration limit (4) was reached" in page
    assert '<svg class="chart"' in page
    assert page.count('<tr class="story"') == 2
    assert 'id="failure-US-002::AC1"' in page and 'id="failure-US-002::AC2"' in page
    assert "Time and cost per story" in page and "$0.0200" in page
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert "../runs/20260304-050607-abcdef/iteration-001/prompt.md" in hrefs
    assert "../runs/20260304-050607-abcdef/iteration-004/agent.log" in hrefs
    for href in hrefs:  # every link resolves from the report's folder
        assert (reports / href).is_file(), href


def test_html_report_needs_no_network_and_no_javascript(tmp_path: Path) -> None:
    page = render_html(made_run(tmp_path, iterations=3, stories=2, hostile=True))
    assert "<script" not in page.lower()
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page)
    assert "<link" not in page and "@import" not in page


def test_hostile_text_renders_as_text(tmp_path: Path) -> None:
    page = render_html(made_run(tmp_path, iterations=3, stories=2, hostile=True))
    assert "<script" not in page and "</style><style>" not in page
    assert "<img" not in page and "<b>title" not in page
    assert "&lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;" in page
    assert "&lt;/style&gt;&lt;style&gt;" in page
    assert "&lt;img src=x onerror=" in page
    assert "\x1b" not in page
    assert "&amp;amp; done" in page  # escaped once more: shown as typed
    assert page.count("</style>") == 1  # the page's own
    assert "<title>Ralph report: Big &lt;run&gt;</title>" in page


def test_html_report_redacts_before_escaping(tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=2, stories=2, hostile=True)
    page = render_html(run, redact=lambda s: s.replace("PWNED", "[redacted]"))
    assert "PWNED" not in page and "[redacted]" in page


def test_html_report_of_200_iterations_and_100_stories_stays_under_2_mb(
        tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=200, stories=100, hostile=True)
    page = render_html(run, tmp_path)
    size = len(page.encode("utf-8"))
    assert size < 2 * 1024 * 1024, size
    assert page.count('<tr class="story"') == 100
    assert 'class="grid dense"' in page  # colours only, numbers in the tooltips
    assert page.count("<rect") <= MOST_POINTS


def test_html_beside_the_markdown_report_and_a_folder_that_cannot_be_written(
        tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=2, stories=2)
    md = tmp_path / "reports" / "ralph-big-2026-03-04.md"
    md.parent.mkdir()
    assert write_beside(run, md) is None
    assert (md.parent / "ralph-big-2026-03-04.html").read_text("utf-8").startswith("<!DOCTYPE")
    blocked = tmp_path / "file"
    blocked.write_text("x", encoding="utf-8")
    said = write_beside(run, blocked / "r.md")
    assert said is not None and said.startswith(f"cannot write the HTML report {blocked}")


def test_empty_run_has_no_chart(tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=1, stories=1)
    run.iterations.clear()
    assert mermaid(run_chart(run)) == []
    assert "<svg" not in render_html(run)
