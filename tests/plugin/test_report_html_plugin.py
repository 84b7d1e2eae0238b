"""``--ralph-report PATH.html``: the gate's and the loop's HTML pages, written by real pytest
sessions (pytester subprocesses)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.testing import AgentFactory
from tests.support.prd import story


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_STEP_SUMMARY", "PYTEST_RALPH_CONTROLLER", "PYTEST_RALPH_CHILD",
                 "PYTEST_RALPH_GATE", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)


def test_gate_writes_an_html_page_for_an_html_path(pytester: pytest.Pytester,
                                                   write_prd: Callable[..., Path]) -> None:
    (pytester.path / "hello.txt").write_text("hi\n", encoding="utf-8")
    write_prd(story("US-1", {"text": "hello.txt exists", "exists": "hello.txt"},
                    title="Greets <b>you</b>"),
              story("US-2", {"text": "the <script> check",
                             "run": "echo '<script>alert(1)</script></style>'; exit 3"}),
              story("US-3", {"text": "wave.txt exists", "exists": "wave.txt"}))
    result = pytester.runpytest_subprocess("prd.json", "--ralph-report", "out/gate.html")
    assert result.ret == 1
    page_path = pytester.path / "out" / "gate.html"
    result.stdout.fnmatch_lines([f"pytest-ralph: report {page_path}"])
    page = page_path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<h1>pytest-ralph gate: failed</h1>" in page
    assert "exit 1</b>: criteria (or tests) failing" in page
    assert page.count('<tr class="story"') == 3
    assert "Greets &lt;b&gt;you&lt;/b&gt;" in page
    assert 'id="failure-US-2::AC1"' in page and 'id="failure-US-3::AC1"' in page
    assert re.search(r'fingerprint <code class="fp">[0-9a-f]{16}</code>', page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/style&gt;" in page
    assert "<script" not in page and page.count("</style>") == 1
    # A .md path keeps the Markdown summary.
    assert pytester.runpytest_subprocess("prd.json", "--ralph-report", "gate.md").ret == 1
    assert (pytester.path / "gate.md").read_text("utf-8").startswith("### pytest-ralph gate")


def test_loop_writes_its_html_report_beside_the_markdown_and_to_an_html_path(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    write_prd(story("US-1", {"text": "hello.txt exists", "run": "test -f hello.txt"}),
              story("US-2", {"text": "bye.txt exists", "run": "test -f bye.txt"}, priority=2))
    agent = ralph_agent({"files": {"hello.txt": "hi\n"}}, {"files": {"bye.txt": "bye\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "--ralph-report", "out/loop.html")
    assert result.ret == 0, result.stdout.str()
    reports = pytester.path / ".pytest_ralph" / "reports"
    (md,) = reports.glob("ralph-*.md")
    beside = md.with_suffix(".html")
    assert "```mermaid\n%%{init: " in md.read_text("utf-8")
    for page_path in (beside, pytester.path / "out" / "loop.html"):
        page = page_path.read_text(encoding="utf-8")
        assert "<b>Outcome: complete (exit 0)</b>" in page
        assert '<svg class="chart"' in page
        hrefs = re.findall(r'href="([^"]+)"', page)
        assert len(hrefs) == 4  # a prompt and an agent log per iteration
        for href in hrefs:
            assert (page_path.parent / href).is_file(), (page_path, href)
