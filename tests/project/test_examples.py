"""The bundled examples, run for real on temporary copies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CORPUS_SNARKTANK = ROOT.parent / "shared" / "corpus" / "prds" / "snarktank-example.json"


def pytest_in(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def fix_until_green(tmp_path: Path) -> Path:
    dest = tmp_path / "fix-until-green"
    shutil.copytree(EXAMPLES / "fix-until-green", dest,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_ralph"))
    return dest


def test_fix_until_green_gate_fails_at_baseline(fix_until_green: Path) -> None:
    result = pytest_in(fix_until_green, "prd.json")
    assert result.returncode == 1, result.stdout
    assert "4 failed, 7 passed" in result.stdout
    for key in ("US-002::AC1", "US-003::AC1", "US-004::AC2", "US-005::AC2"):
        assert f"FAILED prd.json::{key}" in result.stdout


def test_fix_until_green_converges_in_four_iterations(fix_until_green: Path) -> None:
    result = pytest_in(fix_until_green, "--ralph")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "[ralph iteration 4/8]" in out and "[ralph iteration 5/8]" not in out
    assert "pytest-ralph: complete (exit 0) after 4 iterations" in out
    (report,) = (fix_until_green / ".pytest_ralph" / "reports").glob("ralph-quickbill-*.md")
    text = report.read_text()
    assert "- Outcome: **complete**" in text
    assert "| US-005 | `quickbill check` fails on an invalid file | 1/2 | 1/2 | 1/2 | 1/2 | " \
           "2/2 ok |" in text
    # The gate and the library's own tests are green afterwards.
    after = pytest_in(fix_until_green)
    assert after.returncode == 0, after.stdout
    prd = json.loads((fix_until_green / "prd.json").read_text())
    assert all(s["passes"] for s in prd["userStories"])


def test_fix_until_green_needs_the_failures_in_the_prompt(fix_until_green: Path) -> None:
    """Without the failing criteria in the prompt the agent cannot act: each failing story is
    blocked after 3 identical failures, the loop moves to the next, and ends (exit 6) when
    every remaining story is blocked."""
    (fix_until_green / "blind.md").write_text("Work on $story_id. Make everything pass.\n")
    result = pytest_in(fix_until_green, "--ralph", "-o", "ralph_prompt=blind.md",
                       "--ralph-max-iterations", "12")
    assert result.returncode == 6, result.stdout
    assert "every remaining story is blocked" in result.stdout
    for story in ("US-002", "US-003", "US-004", "US-005"):
        assert f"  Blocked: {story}: the same failure" in result.stdout
    assert "agent: nothing to fix" in next(
        (fix_until_green / ".pytest_ralph" / "runs").glob("*/iteration-003/agent.log")).read_text()


CLAIMED_AGENT = EXAMPLES / "claimed-stories" / "agent.py"
#: The example's own PRD: 3 stories, 7 text criteria, none claimed yet.
CLAIMED_PRD = EXAMPLES / "claimed-stories" / "prd.json"


def _claimed_project(tmp_path: Path, source: Path | None) -> Path:
    work = tmp_path / "claimed"
    work.mkdir()
    shutil.copyfile(CLAIMED_PRD if source is None else source, work / "prd.json")
    shutil.copyfile(CLAIMED_AGENT, work / "agent.py")
    return work


@pytest.mark.parametrize("source", ["shipped", "corpus"])
def test_claimed_stories_complete_one_per_iteration(tmp_path: Path, source: str) -> None:
    if source == "corpus" and not CORPUS_SNARKTANK.is_file():
        pytest.skip("../shared/corpus is not beside this checkout")
    work = _claimed_project(tmp_path, CORPUS_SNARKTANK if source == "corpus" else None)
    stories = json.loads((work / "prd.json").read_text())["userStories"]
    n_criteria = sum(len(s["acceptanceCriteria"]) for s in stories)
    agent = f"{sys.executable} agent.py"
    result = pytest_in(work, "--ralph", "--ralph-agent", agent)
    assert result.returncode == 0, result.stdout + result.stderr
    n = len(stories)
    assert f"pytest-ralph: complete (exit 0) after {n} iterations" in result.stdout
    # One story per iteration, in priority order.
    done = 0
    for s in sorted(stories, key=lambda s: s["priority"]):
        done += len(s["acceptanceCriteria"])
        assert f"  State: {done}/{n_criteria} passing" in result.stdout
    (report,) = (work / ".pytest_ralph" / "reports").glob("ralph-*.md")
    text = report.read_text()
    assert f"{n_criteria}/{n_criteria} passing, {n_criteria} of them claimed, not verified" in text
    # The gate agrees, and says the criteria are claimed, not verified.
    gate = pytest_in(work)
    assert gate.returncode == 0
    assert f"claimed, not verified ({n_criteria})" in gate.stdout


def test_claimed_stories_strict_blocks_every_story(tmp_path: Path) -> None:
    """Under --ralph-strict a claim never passes: each story is blocked after 3 identical
    failures, then the next is tried; exit 6 once all 3 are blocked (9 iterations)."""
    work = _claimed_project(tmp_path, None)
    result = pytest_in(work, "--ralph", "--ralph-agent", f"{sys.executable} agent.py",
                       "--ralph-strict", "--ralph-max-iterations", "9")
    assert result.returncode == 6, result.stdout
    assert "every remaining story is blocked" in result.stdout
    assert "[ralph iteration 9/9]" in result.stdout
    assert "--ralph-strict refuses claims" in next(
        (work / ".pytest_ralph" / "runs").glob("*/iteration-003")).joinpath(
            "prompt.md").read_text()
    # Write-back did not wipe the claims the agent made (it set them all to false before).
    assert [s["passes"] for s in json.loads((work / "prd.json").read_text())["userStories"]] \
        == [True, True, True]
