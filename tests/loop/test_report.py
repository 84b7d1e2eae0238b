"""Unit tests of pytest_ralph.loop.report: the final Markdown report of a run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from pathlib import Path

import pytest

from pytest_ralph.agents.run import AgentRun
from pytest_ralph.checks.fingerprint import failure_fingerprint
from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.loop.records import IterationRecord, RunRecord
from pytest_ralph.loop.report import render_report, write_report
from pytest_ralph.loop.settings import Settings, resolve
from pytest_ralph.prd.model import PRD, Criterion, Story
from pytest_ralph.state.folder import RunDir

T0 = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)

LOGIN_FAILURE = ("FAILED tests/test_login.py::test_ok\nE   assert 401 == 200\n"
                 + "filler line\n" * 50 + "LAST-LINE-OF-LOGIN-FAILURE")


def _settings(root: Path, **changes: object) -> Settings:
    base = resolve(cli={}, env={}, ini=lambda key: None, ini_file="pytest.ini",
                   invocation_dir=root, rootdir=root)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _prd(root: Path) -> PRD:
    def crit(sid: str, i: int, text: str, kind: str = "run") -> Criterion:
        return Criterion(sid, i, f"AC{i}", text, kind, command="true" if kind == "run" else None)

    stories = (
        Story("US-001", "Login | email", "", (crit("US-001", 1, "login works"),
                                              crit("US-001", 2, "tests pass")), 1, False, "", 0),
        Story("US-002", "Logout", "", (crit("US-002", 1, "logout works"),), 2, False, "", 1),
        Story("US-003", "Docs", "", (crit("US-003", 1, "Docs written", "text"),), 1, True, "",
              2),
    )
    return PRD(root / "prd.json", "json", "Acme", "ralph/login", "", stories)


def _result(key: str, outcome: str, message: str = "", claimed: bool = False
            ) -> CriterionResult:
    story, crit = key.split("::")
    texts = {"US-001::AC1": "login works", "US-001::AC2": "tests pass",
             "US-002::AC1": "logout works", "US-003::AC1": "Docs written"}
    return CriterionResult(f"prd.json::{key}", story, crit, texts[key],
                           "text" if claimed else "run", outcome, message, claimed)


def _check(failing: dict[str, str], errors: tuple[str, ...] = ()) -> CheckResults:
    out = []
    for key in ("US-001::AC1", "US-001::AC2", "US-002::AC1"):
        out.append(_result(key, "failed" if key in failing else "passed", failing.get(key, "")))
    out.append(_result("US-003::AC1", "passed", "claimed, not verified", claimed=True))
    return CheckResults(tuple(out), errors)


def _agent(folder: Path, outcome: str = "ok", code: int | None = 0,
           tail: str = "agent says hi") -> AgentRun:
    return AgentRun(("claude", "-p", str(folder / "prompt.md")), outcome, code, 12.34,
                    folder / "agent.log", tail)


def _run(tmp_path: Path, status: str = "breaker", exit_code: int | None = 6,
         **settings: object) -> RunRecord:
    root = tmp_path
    run_dir = RunDir(root / ".pytest_ralph" / "runs" / "20260304-050607-abcdef")
    run = RunRecord(prd=_prd(root), settings=_settings(root, **settings),
                    argv=["claude", "-p", "{prompt_file}"], run_dir=run_dir, started=T0,
                    finished=T0 + dt.timedelta(minutes=3))
    folders = [run_dir.path / f"iteration-{n:03d}" for n in range(4)]
    same = {"US-001::AC2": LOGIN_FAILURE, "US-002::AC1": "logout: exit status 1"}
    run.iterations = [
        IterationRecord(0, _check({"US-001::AC1": "x", **same}), None, "", 0, 0, T0, folders[0]),
        IterationRecord(1, _check(same), _agent(folders[1]), "US-001", 1, 0, T0, folders[1]),
        IterationRecord(2, _check(same), _agent(folders[2]), "US-001", 2, 0, T0, folders[2]),
        IterationRecord(3, _check(same), _agent(folders[3], tail="LAST AGENT WORDS"), "US-001",
                        3, 0, T0, folders[3]),
    ]
    run.status, run.exit_code = status, exit_code
    run.reason = "circuit breaker: the same failure in 3 iterations in a row"
    return run


def test_header(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path))
    assert text.startswith("# Ralph report: Acme\n")
    assert "- Outcome: **breaker** (exit 6: circuit breaker tripped)\n" in text
    assert "- Stop reason: circuit breaker: the same failure in 3 iterations in a row" in text
    assert f"- PRD: `{tmp_path / 'prd.json'}` (json)" in text
    assert "- Agent: `claude -p '{prompt_file}'`" in text
    assert "- Iterations: 3 of at most 5; breaker after 3 identical failures" in text
    assert "- Criteria: 2/4 passing, 1 of them claimed, not verified" in text
    assert ("- Run: `20260304-050607-abcdef`, started 2026-03-04T05:06:07+00:00, "
            "finished 2026-03-04T05:09:07+00:00") in text


def test_header_says_which_dialect_was_applied_and_what_was_synthesized(
        tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.prd = dataclasses.replace(
        run.prd, dialect="tasks+steps+status", stories_path="$.tasks",
        dialect_notes=("stories under $.tasks", "ids synthesized from position: S1..S3",
                       "status 'open' -> passes false (2 stories)"))
    text = render_report(run)
    assert (f"- PRD: `{tmp_path / 'prd.json'}` (json)\n"
            "- PRD dialect: `tasks+steps+status`, normalized on load to the canonical shape:\n"
            "  - stories under $.tasks\n"
            "  - ids synthesized from position: S1..S3\n"
            "  - status 'open' -> passes false (2 stories)\n"
            "- Agent: ") in text


def test_header_of_a_dialect_without_notes(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.prd = dataclasses.replace(run.prd, dialect="stories")
    text = render_report(run)
    assert "- PRD dialect: `stories`, normalized on load to the canonical shape\n- Agent: " \
        in text


def test_canonical_prd_header_has_no_dialect_line(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path))
    assert "dialect" not in text.lower()
    assert f"- PRD: `{tmp_path / 'prd.json'}` (json)\n- Agent: " in text


@pytest.mark.parametrize(("status", "code", "line"), [
    # The exit code's meaning only where the status does not say it already (it used to
    # read "complete (exit 0: complete)").
    ("complete", 0, "- Outcome: **complete** (exit 0)\n"),
    ("limit", 1, "- Outcome: **limit** (exit 1: stopped at a limit)\n"),
    ("interrupted", 2, "- Outcome: **interrupted** (exit 2)\n"),
    ("crashed", 3, "- Outcome: **crashed** (exit 3: internal error)\n"),
    ("agent-error", 7, "- Outcome: **agent-error** (exit 7: the agent could not run)\n"),
])
def test_outcome_line(tmp_path: Path, status: str, code: int, line: str) -> None:
    assert line in render_report(_run(tmp_path, status, code))


def test_outcome_of_a_breaker_stop_says_which_one(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.reason = ("circuit breaker: the same failure in 3 iterations in a row; every remaining "
                  "story is blocked (US-001: ...)")
    assert ("- Outcome: **breaker** (exit 6: every story that still fails is blocked)\n"
            in render_report(run))


def test_outcome_without_an_exit_code_claims_nothing(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path, "running", None))
    assert "- Outcome: **running**\n" in text


def test_story_iteration_matrix(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path))
    assert "| story | title | baseline | 1 | 2 | 3 |" in text
    lines = text.splitlines()
    header = lines.index("| story | title | baseline | 1 | 2 | 3 |")
    assert lines[header + 1] == "|---|---|---|---|---|---|"
    # Order of work: priority 1 (US-001, US-003 in file order), then priority 2.
    assert lines[header + 2] == r"| US-001 | Login \| email | 0/2 | 1/2 | 1/2 | 1/2 |"
    assert lines[header + 3] == "| US-003 | Docs | 1/1 ok | 1/1 ok | 1/1 ok | 1/1 ok |"
    assert lines[header + 4] == "| US-002 | Logout | 0/1 | 0/1 | 0/1 | 0/1 |"


def test_matrix_respects_the_story_filter(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path, story=("US-002",)))
    assert "| US-002 | Logout |" in text
    assert "| US-001 | Login" not in text
    assert "| US-003 | Docs" not in text


def test_matrix_marks_stories_without_results(tmp_path: Path) -> None:
    run = _run(tmp_path)
    only_one = CheckResults((_result("US-002::AC1", "failed", "no"),))
    run.iterations[1] = dataclasses.replace(run.iterations[1], results=only_one)
    text = render_report(run)
    assert r"| US-001 | Login \| email | 0/2 | - | 1/2 | 1/2 |" in text


def test_iteration_rows(tmp_path: Path) -> None:
    run = _run(tmp_path)
    text = render_report(run)
    login = failure_fingerprint("US-001::AC2", LOGIN_FAILURE)
    logout = failure_fingerprint("US-002::AC1", "logout: exit status 1")
    first = failure_fingerprint("US-001::AC1", "x")
    assert ("| # | story | agent | outcome | seconds | passing | result | failures | streak | "
            "cost, turns, tokens |") in text
    assert (f"| 0 | - | baseline check | - | - | 1/4 | - | US-001::AC1: `{first}`, "
            f"US-001::AC2: `{login}`, US-002::AC1: `{logout}` | - | - |") in text
    assert (f"| 1 | US-001 | exit 0 | ok | 12.3 | 2/4 | progress (+1) | US-001::AC2: `{login}`, "
            f"US-002::AC1: `{logout}` | 1 | - |") in text
    assert (f"| 3 | US-001 | exit 0 | ok | 12.3 | 2/4 | no change | US-001::AC2: `{login}`, "
            f"US-002::AC1: `{logout}` | 3 | - |") in text


def test_iteration_rows_say_regression_and_a_passing_check_has_no_fingerprint(
        tmp_path: Path) -> None:
    run = _run(tmp_path, "complete", 0)
    broke = _check({"US-001::AC1": "x", "US-001::AC2": LOGIN_FAILURE,
                    "US-002::AC1": "logout: exit status 1"})
    run.iterations[2] = dataclasses.replace(run.iterations[2], results=broke)
    run.iterations[3] = dataclasses.replace(run.iterations[3], results=_check({}), streak=1)
    text = render_report(run)
    assert "| 2 | US-001 | exit 0 | ok | 12.3 | 1/4 | regression (-1) | US-001::AC1: " in text
    # Every criterion passes: no fingerprint (it was the digest of nothing), no streak.
    assert "| 3 | US-001 | exit 0 | ok | 12.3 | 4/4 | complete (+3) | - | - | - |" in text


def test_a_failure_has_one_fingerprint_everywhere_in_the_report(tmp_path: Path) -> None:
    # One unchanged failure used to appear under three fingerprints: its check's (the
    # table), its own (the failing criteria) and its story's (the Blocked section).
    run = _run(tmp_path)
    run.reason = "circuit breaker: ...; every remaining story is blocked (US-001: ...)"
    run.iterations[3].blocked = {"US-001": "the same failure of US-001::AC2 (...)"}
    text = render_report(run)
    login = failure_fingerprint("US-001::AC2", LOGIN_FAILURE)
    table = text[text.index("## Iterations"):text.index("## Failing criteria")]
    failing = text[text.index("## Failing criteria"):text.index("## Claimed")]
    blocked = text[text.index("### Blocked: US-001"):text.index("What was tried")]
    shown = set(re.findall(r"US-001::AC2: `([0-9a-f]{16})`", table))
    assert shown == {login}
    assert table.count(login) == 4  # the baseline and the three iterations
    assert re.findall(r"### US-001::AC2: .*\n\n.*\n- fingerprint: `([0-9a-f]{16})`", failing) == [
        login]
    assert f"- US-001::AC2 (fingerprint `{login}`): E   assert 401 == 200" in blocked


def test_fingerprints_shown_are_those_of_the_hook_texts_the_breaker_compared(
        tmp_path: Path) -> None:
    # With a pytest_ralph_fingerprint hook, the texts it gave (the iteration's signature)
    # make the fingerprints, not the messages.
    run = _run(tmp_path)
    for it in run.iterations:
        it.signature = tuple((c.key, "login: still 401" if c.key == "US-001::AC2" else "other")
                             for c in it.results.failing)
    text = render_report(run)
    hooked = failure_fingerprint("US-001::AC2", "login: still 401", normalize=False)
    assert hooked != failure_fingerprint("US-001::AC2", LOGIN_FAILURE)
    assert f"US-001::AC2: `{hooked}`" in text
    assert f"- fingerprint: `{hooked}`" in text


def test_failing_criteria_with_fingerprints(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path))
    section = text[text.index("## Failing criteria (last check)"):]
    assert "### US-001::AC2: tests pass" in section
    assert "- node id: `prd.json::US-001::AC2`" in section
    assert f"- fingerprint: `{failure_fingerprint('US-001::AC2', LOGIN_FAILURE)}`" in section
    assert "### US-002::AC1: logout works" in section
    assert (f"- fingerprint: `{failure_fingerprint('US-002::AC1', 'logout: exit status 1')}`"
            in section)
    assert "E   assert 401 == 200" in section
    assert "### US-001::AC1" not in section  # fixed in iteration 1


def test_check_phase_errors_are_listed(tmp_path: Path) -> None:
    run = _run(tmp_path, "limit", 1)
    run.iterations[-1] = dataclasses.replace(
        run.iterations[-1], results=CheckResults((), ("child pytest died: INTERNALERROR",)))
    text = render_report(run)
    assert "### Check phase error" in text
    assert "child pytest died: INTERNALERROR" in text


def test_claimed_list(tmp_path: Path) -> None:
    text = render_report(_run(tmp_path))
    section = text[text.index("## Claimed, not verified"):]
    assert "- US-003::AC1: Docs written" in section
    assert "--ralph-strict" in section


@pytest.mark.parametrize("strict", [True, False])
def test_refused_claims_are_explained_under_strict_mode(tmp_path: Path, strict: bool) -> None:
    """Under --ralph-strict a claimed criterion fails whatever its story says: the report
    says so, and that write-back left the story's claim as written. Without strict mode a
    failing claimed criterion is a story that does not claim done: no such section."""
    run = _run(tmp_path, "limit", 1, strict=strict)
    last = run.iterations[-1].results
    refused = _result("US-003::AC1", "failed", "claimed, not verified: no check is mapped to "
                      "this text criterion and --ralph-strict refuses claims", claimed=True)
    run.iterations[-1] = dataclasses.replace(run.iterations[-1], results=CheckResults(
        (*last.criteria[:-1], refused)))
    text = render_report(run)
    if not strict:
        assert "## Claims refused" not in text
        return
    section = text[text.index("## Claims refused (--ralph-strict)"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    assert "--ralph-strict refuses claims: they fail whatever their story says" in section
    assert "write-back left each story's claim as it was written" in section
    assert "- US-003::AC1: Docs written (the story's `passes` says done)" in section
    assert "US-001" not in section and "Claimed, not verified" not in text


def test_no_claimed_section_without_claims(tmp_path: Path) -> None:
    run = _run(tmp_path, "limit", 1)
    last = run.iterations[-1].results
    unclaimed = CheckResults(tuple(c for c in last.criteria if not c.claimed))
    run.iterations[-1] = dataclasses.replace(run.iterations[-1], results=unclaimed)
    text = render_report(run)
    assert "Claimed, not verified" not in text
    assert "- Criteria: 1/3 passing\n" in text


def test_escalation_for_the_breaker(tmp_path: Path) -> None:
    run = _run(tmp_path)
    text = render_report(run)
    section = text[text.index("## Escalation"):]
    folder = run.iterations[3].folder
    assert "3 times in a row" in section
    assert f"- Last prompt: `{folder / 'prompt.md'}`" in section
    assert f"- Last agent log: `{folder / 'agent.log'}`" in section
    assert f"- Last check output: `{folder / 'check.log'}`" in section
    assert f"- Progress log: `{run.settings.dir / 'progress.txt'}`" in section
    assert f"- Run summary: `{run.run_dir.path / 'run.json'}`" in section
    assert "LAST AGENT WORDS" in section
    assert "#### US-001::AC2" in section
    # The full failure text, not only the short excerpt.
    assert "LAST-LINE-OF-LOGIN-FAILURE" in section
    assert section.count("filler line") == 50


@pytest.mark.parametrize(("status", "code"), [
    ("complete", 0), ("limit", 1), ("interrupted", 2), ("crashed", 3),
])
def test_no_escalation_unless_breaker_or_agent_error(tmp_path: Path, status: str,
                                                    code: int) -> None:
    text = render_report(_run(tmp_path, status, code))
    assert "Escalation" not in text
    assert "LAST AGENT WORDS" not in text


def test_report_of_a_run_interrupted_during_the_baseline(tmp_path: Path) -> None:
    run = _run(tmp_path, "interrupted", 2)
    run.iterations = []
    run.reason = "interrupted during iteration 0"
    text = render_report(run)
    assert "- Outcome: **interrupted** (exit 2)\n" in text
    assert "- Iterations: 0 of at most 5" in text
    assert "- Criteria: 0/0 passing" in text
    assert "| story | title |  |" in text


def test_report_of_a_baseline_only_run(tmp_path: Path) -> None:
    run = _run(tmp_path, "complete", 0)
    run.iterations = [dataclasses.replace(run.iterations[0], results=_check({}))]
    text = render_report(run)
    assert "- Iterations: 0 of at most 5" in text
    assert "| story | title | baseline |" in text
    assert "Failing criteria" not in text


def test_write_report(tmp_path: Path) -> None:
    run = _run(tmp_path)
    path = tmp_path / "reports" / "ralph-acme-2026-03-04.md"
    path.parent.mkdir()
    assert write_report(run, path) == path
    assert path.read_text("utf-8") == render_report(run)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_agent_output_cannot_break_out_of_its_code_block() -> None:
    from pytest_ralph.loop.report import _block, clean

    hostile = "ok\n```\n# injected heading\n\x1b]0;title\x07\x1b[31mred\x1b[0m\x07bell"
    lines = _block(hostile)
    assert lines[0] == "````text" and lines[-1] == "````"
    assert "\x1b" not in lines[1] and "\x07" not in lines[1]
    assert "# injected heading" in lines[1] and "red" in lines[1]
    assert clean("a\tb\nc\x00d") == "a\tb\ncd"


def test_agent_error_escalates_with_the_agent_log(tmp_path: Path) -> None:
    run = _run(tmp_path, "agent-error", 7)
    run.last.error_streak = 3
    text = render_report(run)
    assert "The agent did not run properly 3 times in a row" in text
    assert "LAST AGENT WORDS" in text


def test_counts_are_written_with_the_right_plural(tmp_path: Path) -> None:
    # "agent run(s)", "1 identical failures", "in 1 check in a row": counts read as English.
    run = _run(tmp_path, breaker=1)
    one = _agent(tmp_path, "rate-limited", 1)
    run.attempts = [(2, one, 30.0)]
    run.iterations[3].blocked = {"US-002": "worked on in 3 iterations and still failing"}
    run.iterations[2] = dataclasses.replace(
        run.iterations[2], results=_check({"US-001::AC2": LOGIN_FAILURE,
                                           "US-002::AC1": "logout: another failure"}))
    text = render_report(run)
    assert "breaker after 1 identical failure\n" in text
    assert "- Rate limits: 1 agent run rate-limited, 30 s paused in total" in text
    blocked = text[text.index("### Blocked: US-002"):]
    # Failed so only in the last check: no "in 1 check in a row".
    assert "- US-002::AC1 (fingerprint `" in blocked
    assert blocked.split("\n- US-002::AC1", 1)[1].split("\n", 1)[0].endswith(
        "logout: exit status 1")
    run.attempts.append((3, one, 10.0))
    assert "- Rate limits: 2 agent runs rate-limited, 40 s paused in total" in render_report(run)
