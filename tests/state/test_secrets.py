"""Secrets are never written: `pytest --ralph` (and the Claude Code Stop hook) in a real
subprocess, with secrets in the environment, in the agent's argv, in what the agent prints,
in what a failing criterion prints and hard-coded in a test file; then every file the loop
wrote (the state folder byte by byte, ``ralph.db`` and its ``-wal`` file as bytes and through
SQLite, the ``--junitxml`` copy, the PRD it wrote back to) is searched for each secret."""

from __future__ import annotations

import json
import random
import shlex
import sqlite3
import string
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from tests.support.prd import story

_RNG = random.Random(20)
_B62 = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = _B62) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


# Secrets in the environment: one recognised by its variable's name only, the others by the
# shape of their value under names that say nothing (PAT is a name part too).
GITHUB_TOKEN = "tok-" + _rand(28)  # no well-known shape: its name says TOKEN
GH_PAT = "ghp_" + _rand(36)
DB_PASSWORD_PART = "hunter2-" + _rand(10)
DATABASE_URL = f"postgres://ralph:{DB_PASSWORD_PART}@db.example:5432/app"
AWS_ID = "AKIA" + _rand(16, string.ascii_uppercase + string.digits)
ANTHROPIC = "sk-ant-api03-" + _rand(80, _B62 + "-_") + "AA"
ENV = {"GITHUB_TOKEN": GITHUB_TOKEN, "GH_PAT": GH_PAT, "DATABASE_URL": DATABASE_URL,
       "UPLOADER_ID": AWS_ID, "LLM_UPSTREAM": ANTHROPIC}

# Hard-coded in a test file of the project (in no environment variable): found by shape.
HARD_GITHUB = "ghs_" + _rand(36)
HARD_OPENAI = "sk-proj-" + _rand(60, _B62 + "-_") + "T3BlbkFJ" + _rand(20)
HARD_SLACK = "xoxb-1234567890-9876543210-" + _rand(24)
HARD_GOOGLE = "AIza" + _rand(35, _B62 + "-_")

#: secret -> where it comes from; the password of DATABASE_URL is the secret part of it.
SECRETS = {GITHUB_TOKEN: "$GITHUB_TOKEN", GH_PAT: "$GH_PAT", DB_PASSWORD_PART: "$DATABASE_URL",
           AWS_ID: "$UPLOADER_ID", ANTHROPIC: "$LLM_UPSTREAM", HARD_GITHUB: "ghs_ in a test",
           HARD_OPENAI: "sk-proj- in a test", HARD_SLACK: "xoxb- in a test",
           HARD_GOOGLE: "AIza in a test"}

LEAKY_AGENT = f"""
import os, sys
print("agent argv:", sys.argv[1:])
print("agent env:", [os.environ[k] for k in {sorted(ENV)!r}])
sys.stderr.write("agent stderr: " + os.environ["GH_PAT"] + " " + os.environ["DATABASE_URL"]
                 + "\\n")
print({HARD_SLACK!r})
"""

LEAKY_TEST = f"""
import os

HARD = {[HARD_GITHUB, HARD_OPENAI, HARD_SLACK, HARD_GOOGLE]!r}


def test_leaks():
    print("captured:", os.environ["GITHUB_TOKEN"], *HARD)
    assert os.environ["GH_PAT"] == ("expected " + os.environ["UPLOADER_ID"]
                                    + " " + os.environ["LLM_UPSTREAM"] + " " + HARD[0])
"""

RUN_CHECK = ("echo \"url=$DATABASE_URL token=$GITHUB_TOKEN pat=$GH_PAT id=$UPLOADER_ID "
             "ant=$LLM_UPSTREAM\"; cat service.cfg; echo \"stderr $GITHUB_TOKEN\" >&2; exit 1")

#: A project file with tokens hard-coded (the run check prints it).
SERVICE_CFG = f"google = {HARD_GOOGLE}\nopenai = '{HARD_OPENAI}'\n"

ESCALATE = "echo \"escalating with $GITHUB_TOKEN $GH_PAT $DATABASE_URL\"; cat > /dev/null"


def leaks(paths: Iterable[Path]) -> dict[str, list[str]]:
    """file -> the secrets (by origin) found in it, for every file under ``paths``."""
    found: dict[str, list[str]] = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            data = f.read_bytes()
            hits = [origin for secret, origin in SECRETS.items() if secret.encode() in data]
            if hits:
                found[str(f)] = hits
    return found


def db_leaks(db: Path) -> dict[str, list[str]]:
    """table.column -> the secrets found in it, through SQLite (every text column of every
    table)."""
    found: dict[str, list[str]] = {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = "
                                             "'table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            for column in columns:
                for (value,) in conn.execute(f"SELECT {column} FROM {table}"):
                    text = value if isinstance(value, str) else (
                        value.decode("utf-8", "replace") if isinstance(value, bytes) else "")
                    for secret, origin in SECRETS.items():
                        if secret in text:
                            found.setdefault(f"{table}.{column}", [])
                            if origin not in found[f"{table}.{column}"]:
                                found[f"{table}.{column}"].append(origin)
    finally:
        conn.close()
    return found


@pytest.fixture
def leaky_project(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                  monkeypatch: pytest.MonkeyPatch, agent: Callable[[str, str], str]) -> str:
    """A project whose checks and agent print every secret; returns the agent command."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_leak.py").write_text(LEAKY_TEST, encoding="utf-8")
    (pytester.path / "service.cfg").write_text(SERVICE_CFG, encoding="utf-8")
    write_prd(story("US-001", {"text": "the service is configured", "run": RUN_CHECK},
                    {"text": "the leak test passes", "pytest": "tests/test_leak.py"}))
    pytester.makeini("[pytest]\n"
                     f"ralph_escalate = {ESCALATE}\n")
    command = agent("leaky_agent.py", LEAKY_AGENT)
    return " ".join([command, "--token", shlex.quote(GITHUB_TOKEN), "--pat", GH_PAT, "--db",
                     shlex.quote(DATABASE_URL), "--aws", AWS_ID, "--anthropic", ANTHROPIC])


def test_no_file_or_row_the_loop_writes_holds_a_secret(pytester: pytest.Pytester,
                                                       leaky_project: str) -> None:
    junit = pytester.path / "out" / "junit.xml"
    result = pytester.runpytest_subprocess(
        "--ralph", "--ralph-agent", leaky_project, "--ralph-max-iterations", "3",
        "--ralph-breaker", "2", f"--junitxml={junit}", "--ralph-report", "report-copy.md")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 6, out  # the breaker: the same failure twice, then escalation
    state = pytester.path / ".pytest_ralph"
    written = sorted(p.name for p in state.rglob("*") if p.is_file())
    for name in ("ralph.db", "run.json", "progress.txt", "check.json", "check.log",
                 "check.xml", "agent.log", "prompt.md"):
        assert name in written, written
    assert any(n.startswith("escalate-") for n in written), written
    assert junit.is_file()
    assert leaks([state, junit, pytester.path / "prd.json",
                  pytester.path / "report-copy.md"]) == {}
    assert db_leaks(state / "ralph.db") == {}
    for secret in SECRETS:
        assert secret not in out, SECRETS[secret]
    # The redacted copies still say what was there, by name or by kind.
    log = next(state.glob("runs/*/iteration-001/check.log")).read_text()
    assert "[redacted $GITHUB_TOKEN]" in log
    assert "postgres://ralph:[redacted $DATABASE_URL]@db.example:5432/app" in log
    assert "[redacted Google API key]" in log
    xml = next(state.glob("runs/*/iteration-001/check.xml")).read_text()
    assert "[redacted $GH_PAT]" in xml and "[redacted GitHub token]" in xml
    run = json.loads(next(state.glob("runs/*/run.json")).read_text())
    assert "[redacted $GITHUB_TOKEN]" in run["agent"]
    assert "[redacted $LLM_UPSTREAM]" in run["agent"]


def test_a_resumed_run_with_secrets_in_its_argv_sees_no_change(
        pytester: pytest.Pytester, leaky_project: str) -> None:
    """The history keeps the argv and settings redacted: a resumed run compares them
    redacted, so the same secrets are no change (and nothing raw is printed or stored)."""
    first = pytester.runpytest_subprocess("--ralph", "--ralph-agent", leaky_project,
                                          "--ralph-max-iterations", "1")
    assert first.ret == 1, first.stdout.str()
    # Exit 1 at the limit ends the run; a larger limit resumes nothing either, so interrupt
    # the history's status to make it resumable, as a killed loop leaves it.
    conn = sqlite3.connect(pytester.path / ".pytest_ralph" / "ralph.db")
    with conn:
        conn.execute("UPDATE runs SET status = 'interrupted', exit_code = 2")
    conn.close()
    second = pytester.runpytest_subprocess("--ralph", "--ralph-agent", leaky_project,
                                           "--ralph-max-iterations", "2", "--ralph-breaker",
                                           "2")
    out = second.stdout.str()
    assert "resuming run" in out, out
    # Only what really changed: the agent argv, stored redacted, is the same one.
    changed = [line for line in out.splitlines() if "changed settings" in line]
    assert changed == ["pytest-ralph: the resumed run goes on with changed settings: "
                       "max_iterations 1 -> 2; breaker 3 -> 2"], out
    # The failure of iteration 1, read back redacted from the history, is the same failure
    # as iteration 2's in the new process: the same fingerprint, and the story is blocked.
    assert second.ret == 6, out
    assert "identical-failure streak 2/2" in out, out
    assert "Blocked: US-001: the same failure" in out, out
    assert leaks([pytester.path / ".pytest_ralph"]) == {}
    assert db_leaks(pytester.path / ".pytest_ralph" / "ralph.db") == {}


def _hook(pytester: pytest.Pytester,
          payload: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_ralph.hook"], cwd=pytester.path,
                          input=json.dumps(payload), capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_claude_code_driver_writes_no_secret(pytester: pytest.Pytester,
                                                 leaky_project: str) -> None:
    armed = pytester.runpytest_subprocess("--ralph-init", "--ralph-driver", "claude",
                                          "--ralph-max-iterations", "3")
    assert armed.ret == 0, armed.stdout.str() + armed.stderr.str()
    payload = {"session_id": "s-1", "transcript_path": "", "cwd": str(pytester.path),
               "hook_event_name": "Stop", "stop_hook_active": False}
    for _ in range(2):
        answer = _hook(pytester, payload)
        assert answer.returncode == 0, answer.stderr
        for secret in SECRETS:
            assert secret not in answer.stdout + answer.stderr, SECRETS[secret]
    state = pytester.path / ".pytest_ralph"
    assert leaks([state, pytester.path / ".claude", pytester.path / "prd.json"]) == {}
    assert db_leaks(state / "ralph.db") == {}
    assert "[redacted $GITHUB_TOKEN]" in next(state.glob("runs/*/iteration-001/check.log")
                                              ).read_text()


def test_a_driven_run_uses_a_secret_of_its_settings_from_the_environment(
        pytester: pytest.Pytester, leaky_project: str) -> None:
    """The Stop hook rebuilds the settings from the history, where they are redacted: a
    secret that is an environment variable's value comes back from the hook's environment,
    so the escalation command runs with the real value."""
    command = f"printf '%s' {shlex.quote(GITHUB_TOKEN)} > escalated.txt; cat > /dev/null"
    armed = pytester.runpytest_subprocess("--ralph-init", "--ralph-driver", "claude",
                                          "--ralph-breaker", "2", "-o",
                                          f"ralph_escalate={command}")
    assert armed.ret == 0, armed.stdout.str() + armed.stderr.str()
    payload = {"session_id": "s-1", "cwd": str(pytester.path), "hook_event_name": "Stop",
               "stop_hook_active": False}
    answers = [_hook(pytester, payload) for _ in range(2)]
    assert all(a.returncode == 0 for a in answers), [a.stderr for a in answers]
    assert "breaker" in answers[-1].stdout, answers[-1].stdout
    assert (pytester.path / "escalated.txt").read_text() == GITHUB_TOKEN
    state = pytester.path / ".pytest_ralph"
    assert db_leaks(state / "ralph.db") == {}
    assert leaks([state]) == {}
    conn = sqlite3.connect(state / "ralph.db")
    (settings,) = conn.execute("SELECT settings FROM runs").fetchone()
    conn.close()
    assert json.loads(settings)["escalate"] == command.replace(GITHUB_TOKEN,
                                                               "[redacted $GITHUB_TOKEN]")


def test_arming_refuses_a_secret_the_stop_hook_could_not_get_back(
        pytester: pytest.Pytester, leaky_project: str) -> None:
    command = f"notify --token {HARD_GITHUB}"
    armed = pytester.runpytest_subprocess("--ralph-init", "--ralph-driver", "claude", "-o",
                                          f"ralph_escalate={command}")
    assert armed.ret == 4, armed.stdout.str()
    assert ("escalate (from -o ralph_escalate) holds a secret ([redacted GitHub token]) that "
            "is not the value of an environment variable") in armed.stderr.str()
    assert HARD_GITHUB not in armed.stdout.str() + armed.stderr.str()
    assert not (pytester.path / ".pytest_ralph" / "ralph.db").exists()
