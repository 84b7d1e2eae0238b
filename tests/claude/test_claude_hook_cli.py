"""The Claude Code Stop-hook driver against the real client (issue 6).

The pinned real Claude Code CLI (see tests/support/claude_cli.py) runs offline against a
scripted loopback model (tests/support/model_server.py) in a project armed with
``pytest --ralph-init --ralph-driver claude``, so every Stop event of the session runs the
real ``python -m pytest_ralph.hook`` from the project's ``.claude/settings.json``. The tests
show, from the outside (the CLI's stream-json output, what it sent to the model, the files it
left and the run history):

- an armed loop (its baseline, iteration 0, checked when armed) blocks while a criterion
  fails: the session's first Stop is iteration 1 and blocks with the prompt of iteration 2;
  the model gets the block reason and acts on it with a real tool call, and the session stops
  once the criteria pass, with the run recorded ``complete``;
- at the iteration limit the stop goes ahead (no wedged session) and the run is ``limit``;
- a session other than the one that adopted the run is never blocked.

The CLI runs with ``--include-hook-events`` on top of the ``claude`` preset's argv, so its
stream also carries each hook run (``hook_started`` / ``hook_response`` with the hook's stdout,
stderr and exit code). Observed with 2.1.328: a hook's ``systemMessage`` shows up as
``{"type": "system", "subtype": "informational", "content": "Stop says: <message>"}``; a block
reason reaches the model as a user message ``"Stop hook feedback:\\n<reason>"`` (a synthetic
user record in stream-json), followed in the request body by a ``system`` message
``"Stop hook blocking error from command: ...: <reason>"``; and every block also gives a
``system`` / ``notification`` record with key ``stop-hook-error``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.env import clean_env
from tests.support.model_server import Block, ModelServer, Reply, Text, ToolUse
from tests.support.prd import story
from tests.support.project import Done, Project

# No module-level skip: every test needs the session fixture `claude_bin` (through `project`),
# which installs the pinned CLI when it is absent, makes a failed install an error, and skips
# only where npm is missing outside CI.

#: The ``claude`` preset's argv (prompt on stdin), plus the hook runs in the stream.
CLAUDE_ARGV = ("-p", "--output-format", "stream-json", "--verbose",
               "--dangerously-skip-permissions", "--include-hook-events")

#: Seconds one CLI session may take (each Stop runs the hook's check phase, a child pytest;
#: a whole session here takes about 2-5 s).
CLI_TIMEOUT = 120.0

#: Seconds one ``python -m pytest --ralph-...`` or one hook run may take.
PYTEST_TIMEOUT = 120.0

CRITERION = {"text": "done.txt says ok", "run": "grep -qx ok done.txt"}

#: The start of the user message that carries a Stop hook's block reason.
FEEDBACK = "Stop hook feedback:\n"


# -- what the CLI printed --------------------------------------------------------------------


@dataclass
class Session:
    """One finished ``claude -p`` run: the process and its stream-json records."""

    proc: Done
    lines: list[dict[str, Any]]

    @property
    def session_id(self) -> str:
        """The id in the ``system`` / ``init`` record (the first line)."""
        init = self.lines[0] if self.lines else {}
        assert (init.get("type"), init.get("subtype")) == ("system", "init"), init
        return str(init["session_id"])

    @property
    def result(self) -> dict[str, Any]:
        """The ``result`` record (the last line)."""
        assert self.lines and self.lines[-1].get("type") == "result", self.lines[-1:]
        return self.lines[-1]

    def system(self, subtype: str) -> list[dict[str, Any]]:
        return [ln for ln in self.lines if ln.get("type") == "system"
                and ln.get("subtype") == subtype]

    @property
    def stop_says(self) -> list[str]:
        """The hooks' ``systemMessage`` texts, as the CLI showed them ("Stop says: ...")."""
        return [str(ln.get("content", "")) for ln in self.system("informational")]

    @property
    def stop_hooks(self) -> list[dict[str, Any]]:
        """The ``hook_response`` records of the Stop hook runs, in order."""
        return [ln for ln in self.system("hook_response") if ln.get("hook_event") == "Stop"]

    def hook_answers(self) -> list[dict[str, Any] | None]:
        """What each Stop hook run printed on stdout, as JSON (``None`` for no output,
        ``{"unparsed": text}`` for output that is not JSON)."""
        answers: list[dict[str, Any] | None] = []
        for hook in self.stop_hooks:
            text = str(hook.get("stdout") or "")
            try:
                answers.append(json.loads(text) if text.strip() else None)
            except ValueError:
                answers.append({"unparsed": text})
        return answers

    @property
    def feedback(self) -> list[str]:
        """The texts of the synthetic user records carrying Stop hook feedback."""
        out = []
        for ln in self.lines:
            if ln.get("type") != "user":
                continue
            content = ln["message"]["content"]
            texts = [content] if isinstance(content, str) else [
                b.get("text", "") for b in content if isinstance(b, dict)]
            out += [t for t in texts if isinstance(t, str) and t.startswith(FEEDBACK)]
        return out


def last_feedback(body: dict[str, Any]) -> str:
    """The Stop hook feedback the model is answering in request ``body``: the user message
    after the last assistant message that starts with :data:`FEEDBACK` ("" when none)."""
    messages = body.get("messages", [])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    found = ""
    for message in messages[last + 1:]:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        texts = [content] if isinstance(content, str) else [
            b.get("text", "") for b in content or [] if isinstance(b, dict)]
        found = next((t for t in texts if isinstance(t, str) and t.startswith(FEEDBACK)), found)
    return found


# -- the project -----------------------------------------------------------------------------


def write(project: Project, *, ini: str = "") -> None:
    """The PRD (one story, :data:`CRITERION`) and pytest.ini (``ini``) of the project."""
    project.write_prd(story("US-001", CRITERION), project="Demo", branchName="ralph/demo",
                      description="demo")
    project.write_ini(f"{ini}\n")


def arm(project: Project) -> None:
    """``pytest --ralph-init --ralph-driver claude``; remembers the armed run's id."""
    proc = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert proc.returncode == 0, f"--ralph-init failed:\n{proc.stdout}\n{proc.stderr}"
    settings = json.loads(project.settings_file.read_text("utf-8"))
    commands = [h["command"] for entry in settings["hooks"]["Stop"] for h in entry["hooks"]]
    assert any(sys.executable in c and "pytest_ralph.hook" in c for c in commands), commands
    marker = json.loads(project.marker.read_text(encoding="utf-8"))
    assert marker["session"] == "", marker
    project.run_id = str(marker["run"])
    assert f"armed run {project.run_id}" in proc.stdout, proc.stdout


def claude(project: Project, prompt: str) -> Session:
    """One ``claude -p`` session in the project: the pinned CLI, first on its PATH."""
    exe = shutil.which("claude", path=project.env["PATH"])
    assert exe, project.env["PATH"]
    try:
        proc = project.run([exe, *CLAUDE_ARGV], stdin=prompt, timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"claude did not end within {CLI_TIMEOUT:.0f} s (a wedged session?)\n"
                    f"--- stdout ---\n{_text(exc.stdout)[-6000:]}\n--- stderr ---\n"
                    f"{_text(exc.stderr)[-3000:]}\n{project.hook_log()}", pytrace=False)
    lines = []
    for raw in proc.stdout.splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            lines.append({"type": "unparsed", "text": raw})
    return Session(proc, lines)


def explain(project: Project, session: Session) -> str:
    """What to look at when an assertion about ``session`` fails."""
    stream = "\n".join(json.dumps(ln)[:700] for ln in session.lines
                       if ln.get("subtype") != "init")
    hooks = "\n".join(f"exit {h.get('exit_code')} ({h.get('outcome')}): stdout "
                      f"{str(h.get('stdout'))[:500]!r} stderr {str(h.get('stderr'))[-1500:]!r}"
                      for h in session.stop_hooks)
    return (f"claude exited {session.proc.returncode}\n--- stderr ---\n"
            f"{session.proc.stderr[-3000:]}\n--- Stop hook runs ---\n{hooks}\n"
            f"--- stream-json (init left out) ---\n{stream[-8000:]}\n{project.hook_log()}")


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


@pytest.fixture
def project(tmp_path: Path, claude_bin: Path, claude_env: dict[str, str]) -> Project:
    """An empty project folder and the environment of everything run in it: this process's
    environment without pytest's, pytest-ralph's or an outer Claude Code session's variables
    (``PYTEST_RALPH_CONTROLLER`` would silence the hook, ``CLAUDE_PROJECT_DIR`` point it
    elsewhere), plus the offline CLI environment (``HOME`` a temporary folder)."""
    env = clean_env(drop=("PYTEST_", "CLAUDE", "ANTHROPIC_"), names=(),
                    keep={"PYTEST_RALPH_CACHE"}, bytecode=True, **claude_env)
    return Project(tmp_path / "project", env=env, timeout=PYTEST_TIMEOUT)


# -- the tests -------------------------------------------------------------------------------


def test_blocks_until_the_model_makes_the_criterion_pass(project: Project,
                                                         model_server: ModelServer) -> None:
    """Turn 1 (iteration 1) only looks around; its Stop blocks with the failing criterion and
    the prompt of iteration 2; the model reads that reason and writes done.txt (a real Write);
    the next Stop (iteration 2) passes and is allowed."""
    target = project.root / "done.txt"

    def act_on_feedback(body: dict[str, Any]) -> Sequence[Block]:
        told = last_feedback(body)
        if "US-001" not in told or CRITERION["text"] not in told:
            return [Text(f"No Stop hook feedback about US-001 reached me ({told[:200]!r}).")]
        return [Text("The Stop hook says done.txt must say ok; writing it."),
                ToolUse("Write", {"file_path": str(target), "content": "ok\n"})]

    model_server.add([Text("Hello, looking around.")], Reply(act_on_feedback), [Text("Done.")])
    write(project)
    arm(project)

    session = claude(project, "Work on the PRD")
    why = explain(project, session)

    assert session.proc.returncode == 0, why
    assert model_server.reply_errors == [], why
    assert target.is_file(), f"the model did not write {target}\n{why}"
    assert target.read_text(encoding="utf-8") == "ok\n", why
    result = session.result
    assert (result["is_error"], result["terminal_reason"], result["result"]) == (
        False, "completed", "Done."), why
    assert result["session_id"] == session.session_id
    # Two Stop events: the first (iteration 1) blocked with the prompt of iteration 2, the
    # second (iteration 2) allowed.
    prompt = (project.root / ".pytest_ralph" / "runs" / project.run_id / "iteration-002"
              / "prompt.md").read_text(encoding="utf-8")
    assert [h.get("exit_code") for h in session.stop_hooks] == [0, 0], why
    first, second = session.hook_answers()
    assert first == {"decision": "block", "reason": prompt,
                     "systemMessage": "ralph iteration 2/5: 1 criterion failing"}, why
    assert second is not None and set(second) == {"systemMessage"}, why
    assert second["systemMessage"].startswith(
        f"pytest-ralph: run {project.run_id} complete after 2 iterations: "), why
    assert session.stop_says == [f"Stop says: {first['systemMessage']}",
                                 f"Stop says: {second['systemMessage']}"], why
    assert session.feedback == [FEEDBACK + prompt], why  # the reason, verbatim
    # The prompt names the story, the criterion and its check.
    for part in ("# Ralph loop: iteration 2 of 5", "US-001", "[FAIL] AC1: done.txt says ok",
                 "grep -qx ok done.txt"):
        assert part in prompt, prompt
    # What the model was sent: the plain prompt, then the block reason, then the Write result.
    agent = model_server.agent_requests
    assert len(agent) == 3, why
    assert last_feedback(agent[0]) == ""
    assert last_feedback(agent[1]) == FEEDBACK + prompt, why
    assert "Stop hook blocking error from command" in json.dumps(agent[1]), why
    (tool_result,) = model_server.tool_results()
    assert "File created successfully" in str(tool_result["content"]), tool_result
    assert model_server.remaining == 0
    # The run history: complete, owned by this session; the baseline (checked when armed) and
    # the session's first turn failing, its second passing.
    assert project.run_row()[:2] == ("complete", 0), why
    assert project.driver_session() == session.session_id, why
    assert project.iterations() == [(0, "", 0, 1), (1, "US-001", 0, 1),
                                    (2, "US-001", 1, 1)], why
    agent_runs = project.rows("SELECT n, outcome, argv FROM agent_runs WHERE run_id = ? "
                              "ORDER BY n", project.run_id)
    assert [r[:2] for r in agent_runs] == [(1, "ok"), (2, "ok")], agent_runs
    assert all(session.session_id in r[2] for r in agent_runs), agent_runs
    assert "**complete**" in project.report()
    assert not project.marker.exists(), why
    assert f"adopted run {project.run_id}" in project.hook_log()
    status = project.pytest("--ralph-status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"run {project.run_id}" in status.stdout, status.stdout
    assert "status: complete" in status.stdout, status.stdout


def test_iteration_limit_lets_the_session_end(project: Project,
                                              model_server: ModelServer) -> None:
    """With ``ralph_max_iterations = 2`` and a model that never fixes anything, the first Stop
    (iteration 1) blocks with the prompt of iteration 2/2 and the second (iteration 2) is
    allowed with the limit message: the session ends, the run is ``limit``."""
    model_server.add([Text("Hello, looking around.")], [Text("I will not change anything.")])
    write(project, ini="ralph_max_iterations = 2")
    arm(project)

    session = claude(project, "Work on the PRD")
    why = explain(project, session)

    assert session.proc.returncode == 0, why
    assert (session.result["is_error"], session.result["result"]) == (
        False, "I will not change anything."), why
    assert len(model_server.agent_requests) == 2, why  # no third turn: not blocked again
    assert last_feedback(model_server.agent_requests[1]).startswith(
        FEEDBACK + "# Ralph loop: iteration 2 of 2"), why
    first, second = session.hook_answers()
    assert first is not None and first["decision"] == "block", why
    assert first["systemMessage"] == "ralph iteration 2/2: 1 criterion failing", why
    assert second is not None and set(second) == {"systemMessage"}, why
    assert second["systemMessage"].startswith(
        f"pytest-ralph: run {project.run_id} limit after 2 iterations: stopped at the "
        "iteration limit (2) with 1 criterion still failing"), why
    assert f"report {project.root / '.pytest_ralph' / 'reports'}" in second["systemMessage"]
    assert session.stop_says == [f"Stop says: {first['systemMessage']}",
                                 f"Stop says: {second['systemMessage']}"], why
    assert not (project.root / "done.txt").exists()
    status, code, reason = project.run_row()
    assert (status, code) == ("limit", 1), (status, code, reason, why)
    assert project.driver_session() == session.session_id, why
    assert project.iterations() == [(0, "", 0, 1), (1, "US-001", 0, 1),
                                    (2, "US-001", 0, 1)], why
    assert "**limit**" in project.report()
    assert not project.marker.exists(), why
    status_out = project.pytest("--ralph-status").stdout
    assert "status: limit" in status_out, status_out


def test_another_session_is_never_blocked(project: Project,
                                          model_server: ModelServer) -> None:
    """Session "A" adopted the run (its Stop piped to the hook by hand); a real session B in
    the same project stops after its first turn, its hook run silent, and the run stays A's."""
    model_server.add([Text("Hello from session B.")])
    write(project)
    arm(project)
    adopt = project.hook({"session_id": "A", "hook_event_name": "Stop", "cwd": str(project.root),
                          "transcript_path": str(project.root / "no-transcript.jsonl"),
                          "stop_hook_active": False, "last_assistant_message": "Looked around."})
    assert adopt.returncode == 0, adopt.stderr
    answer = json.loads(adopt.stdout)
    assert (answer["decision"], answer["systemMessage"]) == (
        "block", "ralph iteration 2/5: 1 criterion failing"), adopt.stdout
    assert json.loads(project.marker.read_text(encoding="utf-8"))["session"] == "A"

    session = claude(project, "Say hello")
    why = explain(project, session)

    assert session.proc.returncode == 0, why
    assert session.session_id != "A"
    assert session.result["result"] == "Hello from session B.", why
    assert len(model_server.agent_requests) == 1, why
    assert not any(t.startswith(FEEDBACK) for t in model_server.texts()), why
    # The hook did run for B's Stop, and said nothing.
    assert [(h.get("exit_code"), h.get("stdout")) for h in session.stop_hooks] == [(0, "")], why
    assert session.stop_says == [] and session.feedback == [], why
    # The run is still A's, armed, with only the baseline (checked when armed) and the
    # iteration 1 that A's Stop recorded.
    assert project.run_row()[0] == "running", why
    assert project.driver_session() == "A"
    assert project.iterations() == [(0, "", 0, 1), (1, "US-001", 0, 1)]
    assert json.loads(project.marker.read_text(encoding="utf-8"))["session"] == "A"
    assert session.session_id not in project.hook_log()
    status = project.pytest("--ralph-status").stdout
    assert "status: driven by Claude Code session A through its Stop hook" in status, status
