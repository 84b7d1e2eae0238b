"""The Claude Code Stop-hook driver, end to end: ``pytest --ralph-init --ralph-driver claude``
arms a run, ``python -m pytest_ralph.hook`` (a Stop payload on stdin) drives it one
iteration per Stop, and ``--ralph`` / ``--ralph-status`` / ``--ralph-cancel`` see it.

Every step is a real subprocess in a temporary project; nothing of the product is stubbed.
The hook's own entry-point corner cases (payload corpus, the promise) are in test_hook.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.claude.payload import TRUNCATION_MARKER
from pytest_ralph.claude.settings_file import SAFE_PATH_FLAG
from pytest_ralph.prd.load import load_prd
from pytest_ralph.state.folder import DB_NAME
from tests.support.env import clean_env
from tests.support.prd import story
from tests.support.project import Project
from tests.support.venv import linked_venv

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell, flock")

S1 = "S1"
#: The command our Stop hook entry in .claude/settings.json runs (any interpreter).
OURS = re.compile(r"-m pytest_ralph\.hook$")
#: A tiny agent for `pytest --ralph`: it makes the default criterion pass.
AGENT = 'import pathlib\npathlib.Path("done.txt").write_text("ok\\n")\n'
#: Holds the state folder's loop lock (argv[1]) the way a loop does, touches argv[2], sleeps.
HOLDER = """
import pathlib, sys, time
from pytest_ralph.state.folder import StateDir
lock = StateDir(pathlib.Path(sys.argv[1])).lock()
pathlib.Path(sys.argv[2]).touch()
time.sleep(120)
"""


def done_criterion(name: str = "done.txt") -> dict[str, str]:
    return {"text": f"{name} says ok", "run": f"grep -q ok {name}"}


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Project]:
    """make_project(*stories, ini="", folder="proj", max_iterations=3) -> a project with
    prd.json (one story with the done.txt criterion by default) and pytest.ini
    (ralph_max_iterations plus the ``ini`` lines)."""

    def make(*stories: dict[str, Any], ini: str = "", folder: str = "proj",
             python: str = sys.executable, max_iterations: int = 3) -> Project:
        root = tmp_path / folder
        root.mkdir()
        project = Project(root, python=python, flags=("-p", "no:randomly", "-p",
                                                      "no:cacheprovider"), session=S1)
        project.write_ini(f"ralph_max_iterations = {max_iterations}\n{ini}")
        project.write_prd(*(stories or (story("US-001", done_criterion()),)),
                          description="demo")
        return project

    return make


@pytest.fixture
def project(make_project: Callable[..., Project]) -> Project:
    return make_project()


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def criteria_of(prd: Path) -> list[Any]:
    """The acceptance criteria of each story of a JSON PRD (what the checks run)."""
    data = json.loads(prd.read_text(encoding="utf-8"))
    return [(st["id"], st["acceptanceCriteria"]) for st in data["userStories"]]


def report_path(system: str) -> Path:
    match = re.search(r"; report (\S+\.md)$", system)
    assert match, system
    return Path(match.group(1))


# -- 1. arming ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    (("--ralph-driver", "claude"), "--ralph-driver goes with --ralph-init (`pytest "
                                   "--ralph-init --ralph-driver claude`)"),
    (("--ralph-init", "--ralph-driver", "claude", "--ralph"),
     "--ralph-init cannot be used with --ralph"),
    (("--ralph-init", "--ralph-driver", "claude", "-k", "AC1"),
     "-k cannot be used with --ralph-init: a Claude Code run checks every criterion of its "
     "stories; choose stories with --ralph-story ID instead"),
    (("--ralph-init", "--ralph-driver", "claude", "-m", "slow"),
     "-m cannot be used with --ralph-init"),
    (("--ralph-init", "--ralph-driver", "claude", "--deselect", "prd.json::US-001::AC1"),
     "--deselect cannot be used with --ralph-init"),
    (("--ralph-init", "--ralph-driver", "claude", "-k", "AC1", "-m", "slow"),
     "-k and -m cannot be used with --ralph-init"),
    (("--ralph-init", "--ralph-driver", "claude", "--ralph-promise", "<promise>DONE</promise>"),
     "the completion promise '<promise>DONE</promise>' (from --ralph-promise) holds a "
     "<promise> tag itself"),
    (("--ralph-init", "--ralph-driver", "claude", "--ralph-promise", "ALL </promise> DONE"),
     "holds a <promise> tag itself, so no final message could ever hold it"),
    (("--ralph-init", "--ralph-driver", "claude", "--ralph-max-cost", "0.5"),
     "--ralph-max-cost (from --ralph-max-cost) cannot bound a Claude Code run"),
], ids=["driver-without-init", "init-with-ralph", "init-with-k",
        "init-with-m", "init-with-deselect", "init-with-k-and-m", "promise-with-tags",
        "promise-with-closing-tag", "init-with-max-cost"])
def test_arming_usage_errors(project: Project, args: tuple[str, ...], says: str) -> None:
    done = project.pytest(*args)
    assert done.returncode == 4, done.text
    assert says in done.stderr
    assert not (project.root / ".claude").exists()
    assert not project.state.exists()


def test_arming_twice_keeps_one_run_and_the_users_settings(project: Project) -> None:
    settings = {
        "permissions": {"allow": ["Bash(npm run lint)", "Read(~/.zshrc)"],
                        "deny": ["Read(./.env)"]},
        "env": {"FOO": "bär", "CLAUDE_CODE_ENABLE_TELEMETRY": "0"},
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "echo pre", "timeout": 5}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        },
        "model": "opus",
        "customThing": [1, {"nested": None}],
    }
    project.settings_file.parent.mkdir()
    project.settings_file.write_text(json.dumps(settings, indent=4, ensure_ascii=False),
                                     encoding="utf-8")

    first = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert first.returncode == 0, first.text
    run_id = project.armed()["run"]
    assert f"armed run {run_id} on {project.prd}" in first.stdout
    assert "(baseline: 0/1 criteria passing; max iterations 3, breaker 3)" in first.stdout
    assert project.armed() == {"version": 1, "run": run_id, "state_dir": str(project.state),
                               "rootdir": str(project.root), "session": ""}
    after_first = project.settings_file.read_bytes()

    second = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert second.returncode == 0, second.text
    assert f"run {run_id} of {project.prd} is already armed" in second.stdout
    assert "armed run" not in second.stdout and "restored" not in second.stdout
    assert "waiting for the first Stop of a Claude Code session" in second.stdout
    assert "`pytest --ralph-cancel` disarms it" in second.stdout
    assert project.settings_file.read_bytes() == after_first  # nothing to change
    assert project.armed()["run"] == run_id

    with project.history() as h:
        assert [r.id for r in h.runs()] == [run_id]
        assert [r.id for r in h.driven_runs()] == [run_id]
        assert [(it.n, it.passing, it.total) for it in h.iterations(run_id)] == [(0, 0, 1)]

    now = json.loads(project.settings_file.read_text(encoding="utf-8"))
    stop_groups = now["hooks"]["Stop"]
    ours = [g for g in stop_groups if any(OURS.search(hk.get("command", ""))
                                          for hk in g["hooks"])]
    assert len(ours) == 1 and len(ours[0]["hooks"]) == 1
    assert ours[0]["hooks"][0]["command"] == (
        f"{shlex.quote(sys.executable)} {SAFE_PATH_FLAG} -m pytest_ralph.hook")
    # Everything else is kept as it was, the other Stop hook included.
    assert {**now, "hooks": {**now["hooks"], "Stop": [g for g in stop_groups
                                                      if g not in ours]}} == settings

    status = project.status()
    assert f"pytest-ralph: run {run_id} of {project.prd}" in status
    assert "armed for the Claude Code Stop hook: the first Claude Code session" in status
    # The baseline was checked when the run was armed.
    assert "iteration 0/3 checked; the next check runs when the session stops" in status
    assert "criteria: 0/1 passing after the baseline check" in status


def test_hook_command_quotes_an_interpreter_path_with_spaces(
        tmp_path: Path, make_project: Callable[..., Project]) -> None:
    python = linked_venv(tmp_path / "my py")
    probe = subprocess.run([str(python), "-c", "import sys, pytest_ralph; print(sys.executable)"],
                           capture_output=True, text=True, check=False, env=clean_env())
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == str(python)
    project = make_project(folder="my project", python=str(python))
    run_id = project.arm()

    settings = json.loads(project.settings_file.read_text(encoding="utf-8"))
    [group] = settings["hooks"]["Stop"]
    [handler] = group["hooks"]
    command = handler["command"]
    assert command == f"'{python}' {SAFE_PATH_FLAG} -m pytest_ralph.hook"
    assert shlex.split(command) == [str(python), SAFE_PATH_FLAG, "-m", "pytest_ralph.hook"]

    # Run it the way Claude Code does: through a shell, the payload on stdin.
    payload = json.dumps({"session_id": S1, "cwd": str(project.root),
                          "hook_event_name": "Stop"})
    proc = subprocess.run(["/bin/sh", "-c", command], input=payload, cwd=project.root,
                          env=project.env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["decision"] == "block", proc.stderr
    assert answer["systemMessage"] == "ralph iteration 2/3: 1 criterion failing"
    assert f"Claude Code session {S1} adopted run {run_id}" in proc.stderr
    assert project.armed()["session"] == S1


def test_arming_without_a_prd_scaffolds_one_first(project: Project) -> None:
    project.prd.unlink()
    done = project.pytest("--ralph-init", "--ralph-driver", "claude")
    # --ralph-init writes an example PRD (pytest_ralph.commands.init), then arms a run of it
    assert project.prd.is_file(), done.text
    assert "prd.json" in done.stdout
    assert [s.id for s in load_prd(project.prd).stories] == ["US-001"]
    assert done.returncode in (0, 5), done.text


def test_arming_with_an_invalid_prd_exits_4_naming_it(project: Project) -> None:
    project.prd.write_text('{"project": "x", "userStories": [{"id": "US-001"}]}\n',
                           encoding="utf-8")
    done = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert done.returncode == 4, done.text
    assert f"invalid PRD {project.prd}" in done.stderr
    assert "missing required key 'title'" in done.stderr
    assert not project.marker.exists()
    if (project.state / DB_NAME).exists():
        with project.history() as h:
            assert h.runs() == []


def test_arming_when_every_criterion_passes_arms_nothing(project: Project) -> None:
    project.write("done.txt")
    done = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert done.returncode == 0, done.text
    assert "[ralph baseline]" in done.stdout
    assert ("pytest-ralph: nothing armed: every criterion passed at the baseline check (1/1)"
            in done.stdout)
    assert "armed run" not in done.stdout
    assert not project.marker.exists()
    report = re.search(r"nothing armed: .*; report (\S+\.md)$", done.stdout, re.MULTILINE)
    assert report and Path(report.group(1)).is_file(), done.stdout
    with project.history() as h:
        [run] = h.runs()
        assert (run.status, run.exit_code) == ("complete", 0)
        assert [(it.n, it.passing, it.total) for it in h.iterations(run.id)] == [(0, 1, 1)]
        assert h.driven_runs() == []
    quiet = project.stop()  # no run waits for a session: every stop goes ahead
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert "status: complete (a Claude Code run" in project.status()
    (project.root / "done.txt").unlink()
    assert project.arm() != run.id  # once a criterion fails again, a run is armed


@pytest.mark.parametrize("damage", ["missing", "not-json", "other-run"])
def test_arming_again_restores_a_missing_or_damaged_arming_file(project: Project,
                                                                damage: str) -> None:
    run_id = project.arm()
    assert project.stop().blocked  # adopted by S1
    if damage == "missing":
        project.marker.unlink()
    elif damage == "not-json":
        project.marker.write_text('{"version": 1, "run": ', encoding="utf-8")
    else:
        project.marker.write_text(json.dumps({**project.armed(), "run": "20200101-000000-abcdef"}),
                                  encoding="utf-8")
    assert (f"its arming file {project.marker} is missing or damaged, so the hook does not see "
            "the run") in project.status()
    again = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert again.returncode == 0, again.text
    assert (f"run {run_id} of {project.prd} is already armed (adopted by Claude Code session "
            f"{S1}); its arming file {project.marker} was missing or damaged and is restored; "
            "nothing else to do") in again.stdout
    assert project.armed() == {"version": 1, "run": run_id, "state_dir": str(project.state),
                               "rootdir": str(project.root), "session": S1}
    with project.history() as h:
        assert [r.id for r in h.runs()] == [run_id]
    assert "missing or damaged" not in project.status()
    resumed = project.stop()  # the session is driven again
    assert resumed.blocked, resumed.stderr
    assert resumed.system == "ralph iteration 3/3: 1 criterion failing"


# -- 2. --ralph and --ralph-cancel with a driven run -------------------------------------------


def test_ralph_refuses_while_armed_and_cancel_disarms(project: Project) -> None:
    agent = project.root / "agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    agent_cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))}"
    run_id = project.arm()

    done = project.pytest("--ralph", "--ralph-agent", agent_cmd)
    assert done.returncode == 4, done.text
    assert (f"run {run_id} of {project.prd} is armed for the Claude Code Stop hook (waiting for "
            "a Claude Code session to adopt it)") in done.stderr
    assert "disarm it with `pytest --ralph-cancel` first" in done.stderr
    assert not (project.root / "done.txt").exists()

    assert project.stop().blocked
    done = project.pytest("--ralph", "--ralph-agent", agent_cmd)
    assert done.returncode == 4, done.text
    assert (f"armed for the Claude Code Stop hook (adopted by Claude Code session {S1})"
            in done.stderr)

    done = project.pytest("--ralph-cancel")
    assert done.returncode == 0, done.text
    assert f"run {run_id} is disarmed (Claude Code session {S1})" in done.stdout
    assert not project.marker.exists()
    assert project.settings_file.exists()  # the hook stays; it has nothing to do

    quiet = project.stop()
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")

    status = project.status()
    assert "status: cancelled (a Claude Code run" in status
    assert f"disarmed by --ralph-cancel (Claude Code session {S1})" in status

    done = project.pytest("--ralph", "--ralph-agent", agent_cmd)
    assert done.returncode == 0, done.text
    assert "complete (exit 0) after 1 iteration" in done.stdout
    with project.history() as h:
        new = h.last_run()
        assert new is not None and new.id != run_id
        assert new.status == "complete" and h.driver(new.id) is None
        assert new.argv == (sys.executable, str(agent))
        driven = h.run(run_id)
        assert driven is not None and driven.status == "cancelled"
        # the baseline and the one Stop; nothing added to the old run
        assert [it.n for it in h.iterations(run_id)] == [0, 1]
    done = project.pytest("--ralph-cancel")
    assert "nothing to cancel" in done.stdout


# -- 3. the loop through the hook ------------------------------------------------------------


def test_a_driven_run_from_baseline_to_complete(make_project: Callable[..., Project]) -> None:
    project = make_project(story("US-001", done_criterion("a.txt"), done_criterion("b.txt")))
    run_id = project.arm()
    run_dir = project.state / "runs" / run_id
    assert (run_dir / "iteration-000").is_dir()  # the baseline, checked when armed
    # the PRD's good copy, taken after the baseline wrote its notes back
    assert (run_dir / "prd.last-good.json").read_bytes() == project.prd.read_bytes()

    # The session's first turn (the user's own prompt) is iteration 1.
    project.write("a.txt")
    first = project.stop()
    assert first.returncode == 0 and first.blocked, first.stderr
    assert first.system == "ralph iteration 2/3: 1 criterion failing"
    assert first.reason.startswith("# Ralph loop: iteration 2 of 3")
    assert "[pass] AC1: a.txt says ok" in first.reason
    assert "[FAIL] AC2: b.txt says ok" in first.reason
    assert f"Claude Code session {S1} adopted run {run_id}" in first.stderr
    assert "[ralph iteration 1/3]" in first.stderr and "[ralph baseline]" not in first.stderr
    assert (run_dir / "iteration-002" / "prompt.md").read_text(encoding="utf-8") == first.reason
    assert project.armed()["session"] == S1

    status = project.status()
    assert f"status: driven by Claude Code session {S1} through its Stop hook" in status
    assert "iteration 1/3 checked; the next check runs when the session stops" in status
    assert "criteria: 1/2 passing after iteration 1" in status

    # Another session in the same project is never blocked, and does not count.
    other = project.stop("S2")
    assert (other.returncode, other.stdout, other.stderr) == (0, "", "")

    project.write("b.txt")
    sub = project.root / "src" / "pkg"  # the session moved into a subfolder
    sub.mkdir(parents=True)
    last = project.stop(cwd=sub, stop_hook_active=True)
    assert last.returncode == 0 and not last.blocked, last.stderr
    assert last.system.startswith(f"pytest-ralph: run {run_id} complete after 2 iterations: "
                                  "every criterion passes (2/2); report ")
    assert report_path(last.system).is_file()
    assert "# Ralph report" in report_path(last.system).read_text(encoding="utf-8")
    assert not project.marker.exists()
    assert project.stop().stdout == ""  # disarmed: the session stops freely

    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and (run.status, run.exit_code) == ("complete", 0)
        its = h.iterations(run_id)
        assert [(it.n, it.passing, it.total) for it in its] == [(0, 0, 2), (1, 1, 2), (2, 2, 2)]
        assert its[0].agent is None
        for it in its[1:]:
            assert it.agent is not None and it.agent.argv == ("claude-code-session", S1)
            assert it.agent.outcome == "ok" and it.story == "US-001"
        drv = h.driver(run_id)
        assert drv is not None and drv.session_id == S1 and drv.adopted is not None
        assert h.driven_runs() == []
        kinds = [e.kind for e in h.events(run_id)]
        assert kinds.count("armed") == 1 and kinds.count("adopted") == 1

    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    assert (record["run"], record["status"], record["exit_code"]) == (run_id, "complete", 0)
    assert record["agent"] == ["claude-code-session"]
    assert [it["n"] for it in record["iterations"]] == [0, 1, 2]
    assert [it["passing"] for it in record["iterations"]] == [0, 1, 2]

    progress = (project.state / "progress.txt").read_text(encoding="utf-8")
    assert f"run {run_id} iteration 1/3" in progress
    assert f"run {run_id} iteration 2/3" in progress
    assert f"tried: agent `claude-code-session {S1}` exit 0" in progress
    assert f"run {run_id} ended: complete (exit 0)" in progress

    status = project.status()
    assert "status: complete (a Claude Code run" in status
    assert "criteria: 2/2 passing after iteration 2" in status
    assert f"Claude Code session {S1}" in status


# -- 4. limits ---------------------------------------------------------------------------------


def test_the_breaker_allows_the_stop(make_project: Callable[..., Project]) -> None:
    project = make_project(ini="ralph_breaker = 2\n", max_iterations=10)
    run_id = project.arm()
    assert project.stop().system == "ralph iteration 2/10: 1 criterion failing"
    last = project.stop()
    assert last.returncode == 0 and not last.blocked, last.stderr
    assert last.system.startswith(f"pytest-ralph: run {run_id} breaker after 2 iterations: "
                                  "circuit breaker: the same failure")
    assert "in 2 iterations in a row (iterations 1-2)" in last.system
    assert report_path(last.system).is_file()
    assert not project.marker.exists()
    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and run.status == "breaker"


def test_the_iteration_limit_allows_the_stop(make_project: Callable[..., Project]) -> None:
    project = make_project(max_iterations=1)
    run_id = project.arm()
    last = project.stop()  # the session's first turn is iteration 1: the limit
    assert last.returncode == 0 and not last.blocked, last.stderr
    assert last.system.startswith(f"pytest-ralph: run {run_id} limit after 1 iteration: "
                                  "stopped at the iteration limit (1) with 1 criterion still "
                                  "failing; report ")
    assert not project.marker.exists()
    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and (run.status, run.exit_code) == ("limit", 1)
        assert [it.n for it in h.iterations(run_id)] == [0, 1]


def test_the_budget_allows_the_stop(project: Project) -> None:
    run_id = project.arm("--ralph-budget", "0.001")
    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and run.settings["budget"] == 0.001
    last = project.stop()  # the budget counts from arming: spent by the first check
    assert last.returncode == 0 and not last.blocked, last.stderr
    assert (f"pytest-ralph: run {run_id} limit after 1 iteration: stopped at the wall-clock "
            "budget (0.001 s, --ralph-budget) with 1 criterion still failing") in last.system
    assert not project.marker.exists()


def test_criteria_edits_by_the_session_never_complete(make_project: Callable[..., Project]) -> None:
    project = make_project(max_iterations=2)
    run_id = project.arm()

    def loosen(data: dict[str, Any]) -> None:
        data["userStories"][0]["acceptanceCriteria"][0]["run"] = "true"

    # The "agent" makes its criterion pass by editing it, in the session's very first turn:
    # the baseline taken at arming is what the oracle guard compares with.
    project.edit_prd(loosen)
    tampered = project.stop()
    assert tampered.blocked, tampered.stderr
    assert tampered.system == "ralph iteration 2/2: 1 criterion failing"
    assert "criteria changed: criterion US-001::AC1 changed" in tampered.reason
    with project.history() as h:
        [change] = h.iterations(run_id)[1].changes
        assert change.subject == "criterion US-001::AC1" and change.change == "changed"

    last = project.stop()
    assert not last.blocked
    assert (f"run {run_id} limit after 2 iterations: stopped at the iteration limit (2) with 1 "
            "criterion still failing; the agent changed the criteria (criterion US-001::AC1 "
            "changed), so the loop refuses to report completion") in last.system
    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and run.status == "limit"


def test_removing_a_failing_story_never_completes(make_project: Callable[..., Project]) -> None:
    project = make_project(story("US-001", done_criterion("a.txt")),
                           story("US-002", done_criterion("b.txt"), priority=2),
                           ini="ralph_breaker = 10\n", max_iterations=3)
    project.write("a.txt")
    run_id = project.arm()

    def drop_us_002(data: dict[str, Any]) -> None:
        del data["userStories"][1]

    project.edit_prd(drop_us_002)  # what is left of the PRD all passes
    stop = project.stop()
    assert stop.blocked, stop.stderr
    assert stop.system == "ralph iteration 2/3: 1 criterion failing"
    assert "[US-002::AC1] b.txt says ok" in stop.reason
    assert "criteria changed: criterion US-002::AC1 removed" in stop.reason
    assert "(the failing criteria belong to US-002, which the PRD no longer has" in stop.reason
    assert "criterion US-002::AC1 removed" in stop.stderr
    with project.history() as h:
        it = h.iterations(run_id)[1]
        assert (it.n, it.passing, it.total) == (1, 1, 2)
        assert [(c.subject, c.change) for c in it.changes] == [("criterion US-002::AC1",
                                                                "removed")]

    again = project.stop()  # still the baseline's criteria: never complete
    assert again.blocked, again.stderr
    assert again.system == "ralph iteration 3/3: 1 criterion failing"
    last = project.stop()
    assert not last.blocked, last.stderr
    assert last.system.startswith(f"pytest-ralph: run {run_id} limit after 3 iterations: ")
    assert "the agent changed the criteria (criterion US-002::AC1 removed)" in last.system
    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and run.status == "limit"
        assert [it.passing for it in h.iterations(run_id)] == [1, 1, 1, 1]


# -- 5. a long prompt --------------------------------------------------------------------------


def _noisy(n: int, line: str) -> list[dict[str, str]]:
    """``n`` criteria whose command prints 200 copies of ``line`` and fails."""
    return [{"text": f"criterion {i} prints a lot",
             "run": f"for i in $(seq 1 200); do echo '{line}'; done; exit 1"} for i in range(n)]


def _check_long_prompt(project: Project, failing: int) -> None:
    run_id = project.arm()
    stop = project.stop()
    assert stop.blocked, stop.stderr
    assert stop.system == f"ralph iteration 2/3: {failing} criteria failing"
    prompt_file = project.state / "runs" / run_id / "iteration-002" / "prompt.md"
    prompt = prompt_file.read_text(encoding="utf-8")
    assert utf16_units(prompt) > 9000  # too long to pass whole
    assert utf16_units(stop.reason) < 9000
    assert stop.reason.endswith(f" is in {prompt_file}: read it before you go on.")
    head = stop.reason[:stop.reason.index(TRUNCATION_MARKER)]
    assert len(head) > 3000 and prompt.startswith(head)


def test_a_long_prompt_points_at_its_file(make_project: Callable[..., Project]) -> None:
    project = make_project(story("US-001", *_noisy(10, "noise " * 12)))
    _check_long_prompt(project, 10)


def test_a_long_prompt_of_emoji_points_at_its_file(make_project: Callable[..., Project]) -> None:
    project = make_project(story("US-001", *_noisy(4, "\U0001f600" * 40)))
    _check_long_prompt(project, 4)


# -- 6. concurrency and robustness ------------------------------------------------------------


@pytest.fixture
def lock_holder(project: Project) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def hold() -> subprocess.Popen[bytes]:
        ready = project.root / "holding"
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(project.state), str(ready)],
                                env=project.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        procs.append(proc)
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the lock holder never took the lock"
            time.sleep(0.05)
        return proc

    yield hold
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_a_stop_while_another_loop_holds_the_folder_is_allowed(
        project: Project, lock_holder: Callable[[], subprocess.Popen[bytes]]) -> None:
    run_id = project.arm()
    holder = lock_holder()
    busy = project.stop()
    assert (busy.returncode, busy.stdout) == (0, ""), busy.stderr
    assert (f"another `pytest --ralph` loop is running with the state folder {project.state} "
            f"(pid {holder.pid}") in busy.stderr
    assert "the stop is allowed" in busy.stderr
    assert project.armed()["session"] == ""  # not adopted, still armed
    with project.history() as h:
        assert [it.n for it in h.iterations(run_id)] == [0]  # only the baseline of arming
    # Re-arming reads the history without the lock first: the run is already armed.
    project.marker.unlink()
    rearm = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert rearm.returncode == 0, rearm.text
    assert (f"run {run_id} of {project.prd} is already armed (waiting for the first Stop of a "
            "Claude Code session); its arming file") in rearm.stdout
    assert "is restored" in rearm.stdout
    assert project.armed()["run"] == run_id
    with project.history() as h:
        assert [r.id for r in h.runs()] == [run_id]

    holder.kill()
    holder.wait()
    again = project.stop()
    assert again.blocked, again.stderr
    assert again.system == "ralph iteration 2/3: 1 criterion failing"
    assert project.armed()["session"] == S1


def test_a_prd_that_no_longer_loads_is_checked_with_its_last_good_copy(
        make_project: Callable[..., Project]) -> None:
    project = make_project(max_iterations=5)
    run_id = project.arm()
    copy = project.state / "runs" / run_id / "prd.last-good.json"
    assert project.stop().blocked  # iteration 1
    good = project.prd.read_bytes()
    kept = copy.read_bytes()
    assert criteria_of(copy) == criteria_of(project.prd)
    project.prd.write_text('{"project": "demo", "userStories": [', encoding="utf-8")
    broken = project.stop()  # iteration 2: counted, and blocked
    assert broken.returncode == 0 and broken.blocked, broken.stderr
    assert broken.system == "ralph iteration 3/5: 1 criterion failing"
    assert "the checks could not run" in broken.reason
    assert f"invalid PRD {project.prd}" in broken.reason
    assert "the checks could not run" in broken.stderr
    assert copy.read_bytes() == kept  # a broken PRD is never kept as the good copy
    assert project.armed() == {"version": 1, "run": run_id, "state_dir": str(project.state),
                               "rootdir": str(project.root), "session": S1}
    with project.history() as h:
        assert [it.n for it in h.iterations(run_id)] == [0, 1, 2]

    project.prd.write_bytes(good)
    fixed = project.stop()
    assert fixed.blocked, fixed.stderr
    assert fixed.system == "ralph iteration 4/5: 1 criterion failing"
    with project.history() as h:
        assert [it.n for it in h.iterations(run_id)] == [0, 1, 2, 3]
        assert h.iterations(run_id)[3].changes == ()

    # Without a good copy, nothing can be checked: the stop is allowed, the run stays armed.
    copy.unlink()
    project.prd.write_text('{"project": "demo", "userStories": [', encoding="utf-8")
    lost = project.stop()
    assert lost.returncode == 0 and not lost.blocked, lost.stderr
    assert lost.system.startswith(f"pytest-ralph: the PRD of run {run_id} does not load, "
                                  "so the criteria cannot be checked: ")
    assert str(project.prd) in lost.system
    assert "the run stays armed" in lost.stderr
    assert project.armed()["session"] == S1
    assert f"driven by Claude Code session {S1}" in project.status()
    with project.history() as h:
        assert [it.n for it in h.iterations(run_id)] == [0, 1, 2, 3]  # nothing recorded


def test_a_run_cancelled_while_a_stop_is_checked_is_not_blocked(
        make_project: Callable[..., Project]) -> None:
    started = "check-started"
    project = make_project(story("US-001", {"text": "a slow criterion that fails",
                                            "run": f"touch {started}; sleep 3; exit 1"}))
    run_id = project.arm()
    flag = project.root / started
    flag.unlink()  # touched by the baseline check
    payload = project.root.parent / "payload.json"
    payload.write_text(json.dumps({"session_id": S1, "cwd": str(project.root),
                                   "hook_event_name": "Stop", "stop_hook_active": False}),
                       encoding="utf-8")
    with payload.open("rb") as stdin, subprocess.Popen(
            [project.python, "-m", "pytest_ralph.hook"], cwd=project.root, env=project.env,
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as hook:
        try:
            deadline = time.monotonic() + 120
            while not flag.exists():
                assert hook.poll() is None, "the hook ended before its check started"
                assert time.monotonic() < deadline, "the Stop's check never started"
                time.sleep(0.05)
            cancel = project.pytest("--ralph-cancel")
            assert cancel.returncode == 0, cancel.text
            assert f"run {run_id} is disarmed (Claude Code session {S1})" in cancel.stdout
            stdout, stderr = hook.communicate(timeout=120)
        finally:
            if hook.poll() is None:
                hook.kill()
    assert hook.returncode == 0, stderr
    assert stdout == "", stderr  # not blocked
    assert (f"pytest-ralph: run {run_id} was cancelled while this Stop was being checked; the "
            "stop is allowed") in stderr
    assert not project.marker.exists()
    with project.history() as h:
        run = h.run(run_id)
        assert run is not None and run.status == "cancelled"
    assert project.stop().stdout == ""


def test_arming_with_another_state_folder_never_takes_the_hook_away(project: Project) -> None:
    run = project.arm()
    assert project.stop().blocked
    done = project.pytest("-o", "ralph_dir=.other", "--ralph-init", "--ralph-driver", "claude")
    assert done.returncode == 4, done.text
    assert (f"names run {run} of the state folder {project.state}, which has not ended"
            in done.stderr)
    assert project.armed()["run"] == run and project.armed()["session"] == S1
    assert not (project.root / ".other" / "ralph.db").exists()


@pytest.mark.skipif(os.name == "nt", reason="POSIX shell")
def test_project_modules_named_like_the_standard_library_do_not_break_the_hook(
        project: Project) -> None:
    project.arm()
    for name in ("json.py", "random.py", "uuid.py", "platform.py", "token.py"):
        project.write(name, "raise SystemExit('the project module was imported')\n")
    [command] = [h["command"] for g in json.loads(project.settings_file.read_text(
        encoding="utf-8"))["hooks"]["Stop"] for h in g["hooks"]]
    payload = json.dumps({"session_id": S1, "cwd": str(project.root), "hook_event_name": "Stop"})
    proc = subprocess.run(["/bin/sh", "-c", command], input=payload, cwd=project.root,
                          env={**project.env, "CLAUDE_PROJECT_DIR": str(project.root)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["decision"] == "block", proc.stderr
    assert answer["systemMessage"] == "ralph iteration 2/3: 1 criterion failing"


def test_a_stop_check_phase_ends_before_the_hook_timeout(tmp_path: Path) -> None:
    from pytest_ralph.checks.phase import CheckPhaseConfig
    from pytest_ralph.claude.driver import STOP_CHECK_SECONDS, stop_engine
    from pytest_ralph.claude.settings_file import DEFAULT_TIMEOUT
    from pytest_ralph.loop.settings import from_json

    engine = stop_engine(from_json({"dir": str(tmp_path / "state")}, "test"), rootdir=tmp_path,
                         inifile=None)
    phase = CheckPhaseConfig(prd=tmp_path / "prd.json", rootdir=tmp_path, inifile=None,
                             timeout=3600.0)
    assert engine.bounded(phase).timeout == STOP_CHECK_SECONDS < DEFAULT_TIMEOUT - 60


def test_the_report_of_a_promised_run_says_so_and_the_outer_loop_ignores_it(
        project: Project) -> None:
    project.arm("--ralph-promise", "ALL DONE")
    assert project.stop().blocked
    project.write("done.txt")
    waiting = project.stop(last_assistant_message="Done.")
    assert waiting.blocked and "waiting for the completion promise" in waiting.system
    done = project.stop(last_assistant_message="Done.\n<promise>ALL DONE</promise>")
    assert not done.blocked and "complete after 3 iterations" in done.system
    report = report_path(done.system).read_text(encoding="utf-8")
    assert ("- Completion promise: the final message had to hold the line "
            "`<promise>ALL DONE</promise>` (it did)") in report

    (project.root / "done.txt").unlink()
    agent = project.root / "agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    outer = project.pytest("--ralph", "--ralph-agent",
                           f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))}",
                           "--ralph-promise", "ALL DONE")
    assert outer.returncode == 0, outer.text
    assert ("warning: promise (from --ralph-promise) is ignored: `pytest --ralph` completes on "
            "the checks alone") in outer.stdout
    match = re.search(r"pytest-ralph: report (\S+\.md)", outer.stdout)
    assert match, outer.stdout
    assert "Completion promise" not in Path(match.group(1)).read_text(encoding="utf-8")
