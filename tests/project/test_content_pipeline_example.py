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
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
        "__pycache__", ".pytest_ralph", "content.db", "*.metrics.md", ".*.building",
        "*-journal", "*-wal", "*-shm"))
    return dest


def implement_every_story(project: Path) -> None:
    """Put every story's solution into ``project``'s pipeline, as the agent would."""
    for story in STORIES:
        shutil.copytree(project / "solutions" / story / "pipeline",
                        project / "pipeline", dirs_exist_ok=True)


def pipeline_all(project: Path, db: str) -> subprocess.CompletedProcess[str]:
    """``python -m pipeline all --db DB`` in ``project``."""
    return subprocess.run([sys.executable, "-m", "pipeline", "all", "--db", db], cwd=project,
                          capture_output=True, text=True, timeout=120)


def test_story_ids_and_priorities() -> None:
    assert STORIES == ["SETUP-1", "PLAN-1", "PLAN-2", "PLAN-3", "WRITE-1", "WRITE-2",
                       "WRITE-3", "REVIEW-1", "PUBLISH-1", "SOCIAL-1", "NEWSLETTER-1",
                       "METRICS-1"]


def test_gate_fails_every_story_at_baseline(pipeline_copy: Path) -> None:
    # A complete content.db and report, left by code that is gone: the gate must judge the
    # code (the skeleton), not the file.
    implement_every_story(pipeline_copy)
    assert pipeline_all(pipeline_copy, "content.db").returncode == 0
    shutil.rmtree(pipeline_copy / "pipeline")
    shutil.copytree(EXAMPLE / "pipeline", pipeline_copy / "pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert (pipeline_copy / "content.metrics.md").is_file()

    result = pytest_in(pipeline_copy, "prd.json")

    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(
        "content-pipeline: no content.db: the code cannot build it (python -m pipeline all: "
        "exit 2: "), result.stdout
    summary = {m["story"]: int(m["failed"]) for m in SUMMARY.finditer(result.stdout)}
    assert list(summary) == STORIES
    assert all(failed >= 1 for failed in summary.values()), summary
    assert re.search(r"\b38 failed in ", result.stdout), result.stdout
    assert not (pipeline_copy / "content.db").exists()
    assert not (pipeline_copy / "content.metrics.md").exists()


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
    assert gate.stdout.startswith("content-pipeline: rebuilt content.db from the code ")


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
    # The example's tests alone do not check the PRD: content.db is not rebuilt for them.
    assert "content-pipeline:" not in result.stdout + result.stderr
    assert not (pipeline_copy / "content.db").exists()
    # The pipeline's own init names the row too, in one line.
    init = subprocess.run([sys.executable, "-m", "pipeline", "init", "--db", "c.db"],
                          cwd=pipeline_copy, capture_output=True, text=True, timeout=60)
    assert init.returncode == 1 and "Traceback" not in init.stderr
    assert init.stderr == ("python -m pipeline init: the seeded database is broken: "
                           "content_patterns row 1 points at a missing competitor_content row\n")


def test_agent_changes_nothing_for_an_unknown_story(pipeline_copy: Path) -> None:
    before = sorted(p.relative_to(pipeline_copy) for p in pipeline_copy.rglob("*"))
    for prompt in ("## Work on this story now\nUS-404: Not in this PRD\n", "no story here\n"):
        done = subprocess.run([sys.executable, "agent.py"], cwd=pipeline_copy, input=prompt,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0
        assert "nothing changed" in done.stdout
    assert sorted(p.relative_to(pipeline_copy) for p in pipeline_copy.rglob("*")) == before


KILLED_WRITER = """\
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 2")  # spill: the journal is synced, the file written
conn.execute("BEGIN IMMEDIATE")
conn.execute("DELETE FROM agent_log")
for i in range(3000):
    conn.execute("INSERT INTO agent_log (story_id, level, message) VALUES ('X-1', 'info', ?)",
                 (f"{i} " + "x" * 300,))
print("ready", flush=True)
time.sleep(120)
"""
"""Opens the database, writes in a transaction it never ends, and waits to be killed."""


def table_counts(path: Path) -> dict[str, int]:
    """The number of rows of every table of the database at ``path``."""
    conn = sqlite3.connect(path)
    try:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name")]
        return {name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                for name in tables}
    finally:
        conn.close()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_rebuild_ignores_the_journal_of_a_killed_writer(pipeline_copy: Path) -> None:
    # A database built earlier, and a process killed in the middle of writing to it: its
    # journal holds pages of that database, which SQLite would write back into the next
    # file opened under the same name.
    implement_every_story(pipeline_copy)
    assert pipeline_all(pipeline_copy, "content.db").returncode == 0
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, "content.db"],
                              cwd=pipeline_copy, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    finally:
        writer.kill()
        writer.wait(timeout=30)
        if writer.stdout is not None:
            writer.stdout.close()
    journal = pipeline_copy / "content.db-journal"
    assert journal.is_file() and journal.stat().st_size > 0  # a hot journal, left behind

    done = pipeline_all(pipeline_copy, "content.db")
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = pipeline_all(pipeline_copy, "fresh.db")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr

    conn = sqlite3.connect(pipeline_copy / "content.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()
    assert not journal.exists()
    counts = table_counts(pipeline_copy / "content.db")
    assert counts == table_counts(pipeline_copy / "fresh.db")
    assert (counts["published"], counts["drafts"], counts["critique_results"]) == (10, 11, 4)


def test_gate_rebuilds_the_database_once_before_the_xdist_workers_start(
        pipeline_copy: Path) -> None:
    pytest.importorskip("xdist")
    implement_every_story(pipeline_copy)
    (pipeline_copy / "content.db").write_text("not a database\n", encoding="utf-8")

    result = pytest_in(pipeline_copy, "prd.json", "-n", "2")

    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b38 passed in ", result.stdout), result.stdout
    assert result.stdout.count("content-pipeline: rebuilt content.db from the code") == 1
    assert result.stdout.index("content-pipeline: rebuilt") < result.stdout.index("2 workers")


@pytest.mark.parametrize("command", [["init", "--force"], ["all"]])
def test_a_folder_given_as_the_database_is_a_one_line_error(
        pipeline_copy: Path, command: list[str]) -> None:
    implement_every_story(pipeline_copy)
    (pipeline_copy / "d").mkdir()
    done = subprocess.run([sys.executable, "-m", "pipeline", *command, "--db", "d"],
                          cwd=pipeline_copy, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == (f"python -m pipeline {command[0]}: d is a folder; give the path of "
                           "a database file\n")
    assert list((pipeline_copy / "d").iterdir()) == []
