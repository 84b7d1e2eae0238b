"""The reports in a real headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it):
the HTML report of the content-pipeline example and of a 200-iteration run, screenshot
taken, its DOM checked for the chart, every story and every failure, its console for errors;
and the Markdown report's Mermaid chart rendered by the ``mermaid`` npm package (pinned
:data:`tests.support.chromium.MERMAID_VERSION`, GitHub's 10.x line) in the same Chromium, so
a chart GitHub cannot draw fails.

Screenshots go to ``$PYTEST_RALPH_SCREENSHOTS`` (default ``.pytest_ralph/screenshots`` in the
repository); each test prints the paths it wrote. Without Chromium or npm these tests skip,
except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ralph.loop.chart import merge_chart
from pytest_ralph.loop.report import render_report
from pytest_ralph.loop.report_html import write_html
from pytest_ralph.parallel.lanerecord import Record
from pytest_ralph.parallel.report import write_reports
from tests.support.chromium import (
    BrowserError,
    browser,
    console,
    dump_dom,
    mermaid_js,
    mermaid_page,
    png_colours,
    screenshot,
)
from tests.support.reports import made_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "content-pipeline"


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what}: CI must run the browser tests", pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def chromium() -> Path:
    exe = browser()
    if exe is None:
        _missing("chromium is not installed (apt-get install -y chromium)")
    assert exe is not None
    return exe


@pytest.fixture(scope="module")
def mermaid() -> Path:
    try:
        js = mermaid_js()
    except BrowserError as exc:
        pytest.fail(f"installing the pinned mermaid package failed:\n{exc}", pytrace=False)
    if js is None:
        _missing("the mermaid package is not installed and npm is not on PATH")
    assert js is not None
    return js


@pytest.fixture(scope="module")
def shots() -> Path:
    folder = Path(os.environ.get("PYTEST_RALPH_SCREENSHOTS",
                                 ROOT / ".pytest_ralph" / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def look_at(chromium: Path, page: Path, png: Path, size: str = "1280,2400") -> str:
    """Screenshot ``page`` into ``png`` (checked non-blank and console-clean); its DOM."""
    stderr = screenshot(chromium, page, png, size)
    print(f"screenshot: {png}")
    assert png.stat().st_size > 10_000
    assert png_colours(png) > 20, "the screenshot is blank"
    assert console(stderr) == []
    dom, stderr = dump_dom(chromium, page)
    assert console(stderr) == []
    return dom


def render_mermaid(chromium: Path, js: Path, source: str, page: Path,
                   png: Path | None = None) -> str:
    """Render ``source`` with mermaid in Chromium; the DOM (title ``MERMAID-OK`` or
    ``MERMAID-ERROR: ...``)."""
    mermaid_page(source, js, page)
    if png is not None:
        screenshot(chromium, page, png, "1000,700")
        print(f"screenshot: {png}")
    dom, stderr = dump_dom(chromium, page)
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and title.group(1) == "MERMAID-OK", (
        title.group(1) if title else dom[:2000])
    assert re.search(r'<svg[^>]*aria-roledescription="xychart"', dom)
    assert console(stderr) == []
    return dom


def mermaid_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```mermaid\n(.*?)\n```$", markdown, re.S | re.M)


def test_html_report_of_a_200_iteration_run_in_chromium(chromium: Path, shots: Path,
                                                        tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=200, stories=100, hostile=True)
    reports = tmp_path / ".pytest_ralph" / "reports"
    reports.mkdir(parents=True)
    page = write_html(run, reports / "ralph-big-2026-03-04.html")
    assert page.stat().st_size < 2 * 1024 * 1024
    dom = look_at(chromium, page, shots / "report-200-iterations.png")
    assert "<title>Ralph report: Big &lt;run&gt;</title>" in dom  # no script renamed it
    assert 'class="chart"' in dom and dom.count("<rect") >= 30
    for k in range(1, 101):
        assert f'id="story-US-{k:03d}"' in dom
    failing = [c.key for c in run.last.results.failing]
    assert failing
    for key in failing:
        assert f'id="failure-{key}"' in dom
    assert "<script" not in dom and "<img" not in dom
    assert "&lt;script&gt;" in dom and "&lt;/style&gt;" in dom


def test_mermaid_charts_render_in_chromium(chromium: Path, mermaid: Path, shots: Path,
                                           tmp_path: Path) -> None:
    run = made_run(tmp_path, iterations=200, stories=100, hostile=True)
    (block,) = mermaid_blocks(render_report(run))
    render_mermaid(chromium, mermaid, block, tmp_path / "m200.html",
                   shots / "mermaid-200-iterations.png")
    merges = "\n".join(merge_chart([40.0, 130.0, 3000.0], stories=5, ended=3100.0))
    (block,) = mermaid_blocks(merges)
    render_mermaid(chromium, mermaid, block, tmp_path / "merges.html")
    # The check can fail: a chart mermaid cannot parse is an error, not a pass.
    mermaid_page("xychart-beta\n    bar [1, 2,", mermaid, tmp_path / "bad.html")
    dom, _ = dump_dom(chromium, tmp_path / "bad.html")
    assert "<title>MERMAID-ERROR: " in dom


def test_content_pipeline_report_in_chromium(chromium: Path, mermaid: Path, shots: Path,
                                             tmp_path: Path) -> None:
    project = tmp_path / "content-pipeline"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(
        "__pycache__", ".pytest_ralph", "content.db", "*.metrics.md", ".*.building",
        "*-journal", "*-wal", "*-shm"))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for name in ("PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY", "PYTEST_RALPH_CONTROLLER",
                 "PYTEST_RALPH_CHILD", "PYTEST_RALPH_GATE"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ralph"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    (md,) = (project / ".pytest_ralph" / "reports").glob("ralph-content-pipeline-*.md")
    dom = look_at(chromium, md.with_suffix(".html"), shots / "content-pipeline.png")
    assert "<b>Outcome: complete (exit 0)</b>" in dom
    assert 'class="chart"' in dom
    stories = ["SETUP-1", "PLAN-1", "PLAN-2", "PLAN-3", "WRITE-1", "WRITE-2", "WRITE-3",
               "REVIEW-1", "PUBLISH-1", "SOCIAL-1", "NEWSLETTER-1", "METRICS-1"]
    for sid in stories:
        assert f'id="story-{sid}"' in dom
        assert f"iteration {stories.index(sid) + 1}: {sid}</li>" in dom  # its pass point
    (block,) = mermaid_blocks(md.read_text("utf-8"))
    render_mermaid(chromium, mermaid, block, tmp_path / "pipeline-chart.html",
                   shots / "content-pipeline-mermaid.png")


def test_parallel_run_report_in_chromium(chromium: Path, shots: Path, tmp_path: Path) -> None:
    """The HTML report of a parallel run (``parallel-report.html``): the outcome, the merges
    over time, every story, the lane timeline and each merge's check, links to the lanes'
    logs; no script, no console error."""
    state = tmp_path / ".pytest_ralph"
    lanes = state / "parallel" / "r1"
    lanes.mkdir(parents=True)
    stories: dict[str, dict[str, object]] = {}
    queue: list[dict[str, object]] = []
    for k in range(1, 7):
        sid = f"US-{k:03d}<b>"
        log = lanes / f"US-{k:03d}.1.log"
        log.write_text("lane log\n")
        phase = "blocked" if k == 6 else "merged"
        stories[sid] = {"phase": phase, "attempt": 1 + (k == 6), "merges": int(k < 6),
                        "iterations": k, "why": "conflict twice" if k == 6 else "",
                        "log": str(log), "state": str(lanes / f"US-{k:03d}.1.state")}
        queue.append({"at": 10.0 * k, "story": sid, "attempt": 1,
                      "outcome": "conflict" if k == 6 else "merged",
                      "text": f"{sid} ralph/r1/{sid}: merged ({k}/6 criteria passed)\n"
                              f"  {sid}::c1: a failure line"})
    rec = Record("r1", "a" * 40, "main", "prd.json", 1000.0, 1075.0, None, stories,
                 [{"story": s, "attempt": 1, "event": "started", "at": 0.5} for s in stories],
                 queue, "incomplete")
    md, page = write_reports(rec, state, lanes=3, gate="the gate ran the lanes' code UNCONFINED",
                             fin_text="main left at aaaaaaaaaaaa", kept=["ralph/r1/US-006"])
    assert "```mermaid" in md.read_text()
    dom = look_at(chromium, page, shots / "parallel-report.png", "1280,1600")
    assert "Outcome: incomplete (exit 1)" in dom and "5/6 stories merged" in dom
    assert "<svg" in dom and dom.count("<circle") == 5
    for k in range(1, 7):
        assert f"US-{k:03d}&lt;b&gt;" in dom and f'href="parallel/r1/US-{k:03d}.1.log"' in dom
    assert "a failure line" in dom and "conflict twice" in dom
    assert "<script" not in dom and "<b>&lt;" not in dom
