"""The content-pipeline example (examples/content-pipeline), run for real on temporary copies.

A scripted agent implements one story per iteration from the example's own solution files
and rebuilds the example's SQLite database; the loop must take the 12 stories in priority
order and end with every criterion passing. The example's tests use the ``ralph_db``
fixture, whose setup must name the table and row of a seed row that breaks a foreign key.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "content-pipeline"
STORIES = [story["id"] for story in sorted(
    json.loads((EXAMPLE / "prd.json").read_text(encoding="utf-8"))["userStories"],
    key=lambda story: story["priority"])]
SUMMARY = re.compile(r"^(?P<story>[A-Z]+-\d+): (?P<verified>\d+) verified, (?P<claimed>\d+) "
                     r"claimed, (?P<failed>\d+) failed$", re.MULTILINE)


def pytest_in(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``cwd``, with this interpreter's ``python`` first on PATH.

    The example's agent (``python agent.py``) and its ``run`` criteria (``python -m
    pipeline``) name ``python``; putting this interpreter's folder first makes them run
    on it, whatever else is installed.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def pipeline_copy(tmp_path: Path) -> Path:
    """A fresh copy of the example, without anything an earlier run produced."""
    dest = tmp_path / "content-pipeline"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(
        "__pycache__", ".pytest_ralph", "content.db", "*.metrics.md", ".*.building"))
    return dest


def test_story_ids_and_priorities() -> None:
    assert STORIES == ["SETUP-1", "PLAN-1", "PLAN-2", "PLAN-3", "WRITE-1", "WRITE-2",
                       "WRITE-3", "REVIEW-1", "PUBLISH-1", "SOCIAL-1", "NEWSLETTER-1",
                       "METRICS-1"]


def test_gate_fails_every_story_at_baseline(pipeline_copy: Path) -> None:
    result = pytest_in(pipeline_copy, "prd.json")
    assert result.returncode == 1, result.stdout + result.stderr
    summary = {m["story"]: int(m["failed"]) for m in SUMMARY.finditer(result.stdout)}
    assert list(summary) == STORIES
    assert all(failed >= 1 for failed in summary.values()), summary


def test_loop_implements_one_story_per_iteration(pipeline_copy: Path) -> None:
    result = pytest_in(pipeline_copy, "--ralph")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "[ralph iteration 12/16]" in out and "[ralph iteration 13/" not in out
    assert "pytest-ralph: complete (exit 0) after 12 iterations" in out
    # Lowest priority first, one story per iteration, none worked twice.
    assert re.findall(r"^  Story: (\S+)$", out, re.MULTILINE) == STORIES
    # The agent wrote the pipeline into place and built the database the sql criteria read.
    assert (pipeline_copy / "pipeline" / "stages" / "metrics.py").is_file()
    assert (pipeline_copy / "content.db").is_file()
    prd = json.loads((pipeline_copy / "prd.json").read_text(encoding="utf-8"))
    assert all(story["passes"] for story in prd["userStories"])
    n_criteria = sum(len(story["acceptanceCriteria"]) for story in prd["userStories"])
    # The gate and the example's own tests (3, on ralph_db databases) pass afterwards.
    gate = pytest_in(pipeline_copy)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert f"{n_criteria + 3} passed" in gate.stdout


def implement_every_story(project: Path) -> None:
    """Put every story's solution into ``project``'s pipeline, as the agent would."""
    for story in STORIES:
        shutil.copytree(project / "solutions" / story / "pipeline",
                        project / "pipeline", dirs_exist_ok=True)


def test_a_dangling_seed_row_fails_ralph_db_tests_at_setup(pipeline_copy: Path) -> None:
    implement_every_story(pipeline_copy)
    seed = pipeline_copy / "db" / "seed.sql"
    text = seed.read_text(encoding="utf-8")
    # The first content_patterns row's competitor_content_id becomes a dangling 9999.
    corrupted, n = re.subn(r"(INSERT INTO content_patterns \([^)]*\) VALUES\s*\(\d+,\s*)\d+",
                           r"\g<1>9999", text, count=1)
    assert n == 1
    seed.write_text(corrupted, encoding="utf-8")

    result = pytest_in(pipeline_copy, "tests")

    assert result.returncode == 1, result.stdout
    assert "3 errors" in result.stdout and "passed" not in result.stdout
    assert result.stdout.count("ERROR at setup of") == 3
    assert ("table content_patterns, row rowid 1 (id=1): competitor_content_id = 9999 "
            "references competitor_content(id), which has no such row") in result.stdout


def test_agent_changes_nothing_for_an_unknown_story(pipeline_copy: Path) -> None:
    before = sorted(p.relative_to(pipeline_copy) for p in pipeline_copy.rglob("*"))
    for prompt in ("## Work on this story now\nUS-404: Not in this PRD\n", "no story here\n"):
        done = subprocess.run([sys.executable, "agent.py"], cwd=pipeline_copy, input=prompt,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0
        assert "nothing changed" in done.stdout
    assert sorted(p.relative_to(pipeline_copy) for p in pipeline_copy.rglob("*")) == before
