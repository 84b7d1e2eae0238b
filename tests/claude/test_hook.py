"""End-to-end tests of the Claude Code Stop hook, ``python -m pytest_ralph.hook``.

Every test runs the hook the way Claude Code does: a real child process fed one payload on
stdin, in a real project armed by ``pytest --ralph-init --ralph-driver claude`` (also a child
process). Nothing of the product is stubbed: arming checks the baseline (iteration 0), and each
Stop of the owning session runs the real check phase (a child pytest) and records the next
iteration in the real run history. So the first Stop is iteration 1 (the user's own turn): when
a criterion fails, it blocks with the prompt of iteration 2.

The payloads and transcripts are written here with made-up values; each reproduces one shape
or quirk seen in real Stop hook inputs (see ``pytest_ralph.claude.payload``): the minimal
2025 fields, the 2026 fields with ``last_assistant_message``, the camelCase payload of
another CLI, Windows paths with spaces, mojibake, a log holding merge-conflict markers, and
transcripts that lag the Stop event. The tests are grouped by the failures seen in other
Ralph Stop hooks (never armed, completion faked or missed by text matching, frontmatter
parsing, empty session ids, unbounded loops, shell tools, heavy start-up, bad JSON output)
and by the hook's promise never to wedge a session.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.claude.settings_file import SAFE_PATH_FLAG
from tests.support.env import PYTHON, clean_env
from tests.support.prd import story
from tests.support.privileges import unprivileged as as_unprivileged
from tests.support.project import Done, Project, run

SID = "3c9d2b7e-5a41-4f0e-9b6d-7e21f0a4c815"
OTHER_SID = "a07e4f13-2d9c-4b8a-8e55-0c6b9f3d2e71"
PROMISE = "ALL DONE"
TAG = f"<promise>{PROMISE}</promise>"
TIMEOUT = 120


# -- helpers ---------------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    """The environment of a child: ours without anything that would steer pytest, a Ralph
    loop or Claude Code (this suite may itself run inside a Claude Code session or a loop)."""
    return clean_env(drop=("PYTEST_", "CLAUDE", "RALPH_"), names=(), bytecode=True, **extra)


def run_hook(stdin: bytes, *, cwd: Path, python: str = PYTHON, unprivileged: bool = False,
             **env: str) -> Done:
    """Run ``python -m pytest_ralph.hook`` once with ``stdin`` as the payload (without root's
    power over file permissions when ``unprivileged``, see tests/support/privileges.py)."""
    cmd = [python, "-m", "pytest_ralph.hook"]
    return run(as_unprivileged(cmd) if unprivileged else cmd, cwd=cwd, env=_env(**env),
               timeout=TIMEOUT, stdin=stdin)


def payload(session: str | None = SID, cwd: Path | str | None = None, **fields: Any) -> bytes:
    """A Stop payload of the 2025 shape (all five fields) plus ``fields``."""
    obj: dict[str, Any] = {"session_id": session,
                           "transcript_path": f"/home/dev/.claude/projects/demo/{session}.jsonl",
                           "cwd": str(cwd) if cwd is not None else None,
                           "hook_event_name": "Stop", "stop_hook_active": False}
    obj.update(fields)
    return json.dumps({k: v for k, v in obj.items() if v is not None}).encode("utf-8")


def project_in(root: Path, *, description: str = "Create done.txt holding ok.",
               criteria: tuple[dict[str, str], ...] = (), ini: str = "") -> Project:
    """A project folder with a PRD (story US-001, by default the criterion that done.txt
    holds ok) and a pytest.ini (``ini``); its Stops are of session :data:`SID`, with the
    2025 payload (:func:`payload`)."""
    project = Project(root, env=_env(), flags=("-p", "no:randomly"), timeout=TIMEOUT,
                      session=SID, payload=payload)
    done = {"text": "done.txt holds ok", "run": "grep -q ok done.txt"}
    project.write_prd(story("US-001", *(criteria or (done,)), title="Make done",
                            description=description))
    project.write_ini(ini)
    return project


def arm(project: Project, *args: str, python: str = PYTHON) -> Project:
    """Arm a run; its baseline must have a failing criterion (else nothing is armed)."""
    proc = project.pytest("--ralph-init", "--ralph-driver", "claude", *args, python=python)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "armed run " in proc.stdout and "criteria passing;" in proc.stdout, proc.stdout
    assert project.session() == ""
    return project


def armed(tmp_path: Path, *args: str, ini: str = "ralph_max_iterations = 6\n",
          **kw: Any) -> Project:
    """A project under ``tmp_path`` armed with ``args``; its one criterion fails (at the
    baseline, and at each Stop until :meth:`Project.done`)."""
    return arm(project_in(tmp_path / "proj", ini=ini, **kw), *args)


def report_of(message: str) -> Path:
    """The report file an allow ``systemMessage`` names (``...; report <path>``)."""
    assert "; report " in message, message
    path = Path(message.rsplit("; report ", 1)[1].strip())
    assert path.is_file(), message
    return path


def jsonl(path: Path, *records: dict[str, Any] | str) -> str:
    """Write a transcript: dict records as JSON lines, strings as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records)
    path.write_text(body, encoding="utf-8")
    return str(path)


def user(text: str) -> dict[str, Any]:
    return {"type": "user", "isSidechain": False, "sessionId": SID,
            "message": {"role": "user", "content": text}}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant", "isSidechain": False, "sessionId": SID,
            "message": {"role": "assistant", "model": "claude-x", "content": list(blocks)}}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


THINKING = {"type": "thinking", "thinking": "", "signature": "c2lnbmF0dXJl"}
TOOL_USE = {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "ls"}}
NON_TEXT_TAIL: tuple[dict[str, Any] | str, ...] = (
    assistant(THINKING),
    {"type": "system", "subtype": "stop_hook_summary", "hookCount": 1, "sessionId": SID},
    {"type": "file-history-snapshot", "messageId": "m-2", "snapshot": {"trackedFileBackups": {}}},
    {"type": "attachment", "attachment": {"type": "hook_success", "hookEvent": "Stop"}},
    '{"type":"assistant","message":{"role":"assistant","content":[{"type":"te',  # partial
)


# -- 1. payload shapes -----------------------------------------------------------------------

WIN_CWD = "C:\\Users\\someone\\My Projects\\x"
WIN_TRANSCRIPT = ("C:\\Users\\someone\\.claude\\projects\\C--Users-someone-My-Projects-x\\"
                  f"{SID}.jsonl")
MOJIBAKE = ("Le dÃ©ploiement est terminÃ© â€” rafraÃ®chis la page et dis-moi si l'erreur "
            "persiste.")
CONFLICT_LOG = (
    '[\n  {\n    "session_id": "%s",\n    "cwd": "%s",\n    "hook_event_name": "Stop"\n  },\n'
    '  {\n<<<<<<< HEAD\n    "session_id": "%s",\n    "hook_event_name": "Stop"\n'
    '||||||| 1a2b3c4\n=======\n    "session_id": "%s",\n    "stop_hook_active": false\n'
    '>>>>>>> origin/feature/stop-log\n  }\n]\n'
)


def shape(name: str, root: Path) -> tuple[bytes, dict[str, str]]:
    """The payload bytes of one shape for a session in ``root``, and the environment Claude
    Code (or the other CLI) gives the hook."""
    if name == "minimal-2025":
        return payload(SID, root, transcript_path=str(root.parent / f"{SID}.jsonl")), {}
    if name == "full-2026":
        return payload(SID, root, permission_mode="auto", effort={"level": "high"},
                       prompt_id="5e0b8a1c-0d3f-4e2a-9c7b-1f6e4d2a8b90",
                       last_assistant_message="Parser fixed.\n\n- `---` lines kept\n\nNext?",
                       background_tasks=[], session_crons=[]), {}
    if name == "camelcase-other-cli":
        return json.dumps({
            "hookEventName": "stop", "sessionId": SID, "cwd": str(root),
            "workspaceRoot": f"{root}/", "timestamp": "2026-03-04T09:10:11.123456789+00:00",
            "transcriptPath": f"/home/dev/.othercli/sessions/%2Fproj/{SID}/updates.jsonl",
            "promptId": "0c4f9e2a-7b1d-4a3e-8f6c-2d5b9e1a7c34", "reason": "end_turn",
        }).encode("utf-8"), {}
    if name == "windows-paths":
        # Claude Code sets CLAUDE_PROJECT_DIR for hooks; the payload's Windows cwd is not a
        # path on this system.
        return (payload(SID, WIN_CWD, transcript_path=WIN_TRANSCRIPT,
                        permission_mode="bypassPermissions"),
                {"CLAUDE_PROJECT_DIR": str(root)})
    if name == "mojibake-message":
        return payload(SID, root, stop_hook_active=True, last_assistant_message=MOJIBAKE), {}
    if name == "cp1252-bytes":  # the payload itself re-encoded by a Windows shell
        obj = {"session_id": SID, "cwd": str(root), "hook_event_name": "Stop",
               "last_assistant_message": "Le déploiement est terminé — vérifie."}
        return json.dumps(obj, ensure_ascii=False).encode("cp1252"), {}
    assert name == "merge-conflict-log"
    return (CONFLICT_LOG % (SID, root, SID, OTHER_SID)).encode("utf-8"), {}


SHAPES = ["minimal-2025", "full-2026", "camelcase-other-cli", "windows-paths",
          "mojibake-message", "cp1252-bytes", "merge-conflict-log"]


UNPARSABLE = ("cp1252-bytes", "merge-conflict-log")


@pytest.mark.parametrize("name", SHAPES)
def test_shape_without_armed_loop_is_silent(tmp_path: Path, name: str) -> None:
    project = project_in(tmp_path / "proj")  # a PRD, but no loop armed
    data, env = shape(name, project.root)
    hook = run_hook(data, cwd=project.root, **env)
    assert hook.allow() is None
    if name not in UNPARSABLE:  # a note on stderr about a bad payload is fine
        hook.quiet()
    assert not (project.root / ".claude").exists()


@pytest.mark.parametrize("name", SHAPES)
def test_shape_with_armed_loop(tmp_path: Path, name: str) -> None:
    project = armed(tmp_path)
    data, env = shape(name, project.root)
    # The hook runs in another folder: the payload's cwd (or CLAUDE_PROJECT_DIR) says where.
    # Claude Code runs hooks in the session's folder with CLAUDE_PROJECT_DIR set: all that is
    # left to find the project when the payload does not parse.
    if name in UNPARSABLE:
        env = {**env, "CLAUDE_PROJECT_DIR": str(project.root)}
    hook = run_hook(data, cwd=project.root if name in UNPARSABLE else tmp_path, **env)
    if name == "merge-conflict-log":  # not JSON: no session, so nothing is adopted
        assert hook.allow() is None
        assert "JSON" in hook.stderr and "stop is allowed" in hook.stderr
        assert project.session() == ""
        return
    # The first Stop is iteration 1: the criterion still fails, so the prompt of iteration 2.
    answer = hook.block()
    assert answer["systemMessage"] == "ralph iteration 2/6: 1 criterion failing"
    assert "grep -q ok done.txt" in answer["reason"]
    assert project.session() == SID
    if name == "cp1252-bytes":
        assert "UTF-8" in hook.stderr


def test_cp1252_payload_of_the_owning_session_is_checked(tmp_path: Path) -> None:
    project = armed(tmp_path)
    assert project.stop().block()["systemMessage"].startswith("ralph iteration 2/6")
    # The fast path reads the session id of a cp1252 payload (bytes replaced): it is the
    # owner's, so the Stop is checked, not waved through.
    data, _ = shape("cp1252-bytes", project.root)
    hook = run_hook(data, cwd=project.root, CLAUDE_PROJECT_DIR=str(project.root))
    assert hook.block()["systemMessage"].startswith("ralph iteration 3/6")


# -- 2. the failures seen in other Ralph Stop hooks ------------------------------------------


def test_never_armed_then_armed_blocks_and_completes(tmp_path: Path) -> None:
    project = project_in(tmp_path / "proj", ini="ralph_max_iterations = 4\n")
    project.stop().quiet()  # nothing armed: every stop goes ahead
    proc = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "armed run" in proc.stdout
    assert "(baseline: 0/1 criteria passing; max iterations 4" in proc.stdout
    # The arming file is a small JSON object, no frontmatter to parse by hand.
    assert set(json.loads(project.marker.read_text(encoding="utf-8"))) == {
        "version", "run", "state_dir", "rootdir", "session"}

    assert project.stop().block()["systemMessage"] == "ralph iteration 2/4: 1 criterion failing"
    assert project.session() == SID

    # Arming again changes nothing; an arming file lost or damaged meanwhile is restored,
    # still naming the session that adopted the run.
    def rearm() -> str:
        again = project.pytest("--ralph-init", "--ralph-driver", "claude")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already armed (adopted by Claude Code session " + SID in again.stdout
        assert project.session() == SID
        return again.stdout

    assert "restored" not in rearm()
    project.marker.unlink()
    assert "was missing or damaged and is restored" in rearm()
    project.marker.write_bytes(b"<<<<<<< HEAD\n{\x00\xff")
    assert "was missing or damaged and is restored" in rearm()

    assert project.stop().block()["systemMessage"] == "ralph iteration 3/4: 1 criterion failing"
    project.write("done.txt")
    message = project.stop().allow()
    assert message is not None and " complete after 3 iterations" in message
    report = report_of(message)
    assert not project.marker.exists()
    project.stop().quiet()  # the run ended: back to silence

    # 5. history: the run is recorded as complete.
    status = project.pytest("--ralph-status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "status: complete" in status.stdout and "1/1 passing" in status.stdout
    assert report.read_text(encoding="utf-8").strip()


def test_criteria_passing_at_arming_arm_nothing(tmp_path: Path) -> None:
    project = project_in(tmp_path / "proj")
    project.write("done.txt")
    proc = project.pytest("--ralph-init", "--ralph-driver", "claude")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing armed: every criterion passed at the baseline check (1/1)" in proc.stdout
    assert "armed run" not in proc.stdout
    assert not project.marker.exists()
    report_of(proc.stdout.strip().splitlines()[-1])
    project.stop().quiet()  # no session is ever blocked for it
    status = project.pytest("--ralph-status")
    assert "status: complete" in status.stdout, status.stdout + status.stderr


def test_promise_faked_or_missed_by_text(tmp_path: Path) -> None:
    project = armed(tmp_path, "--ralph-promise", PROMISE, ini="ralph_max_iterations = 9\n")
    # The promise while a criterion fails completes nothing, from the first Stop on.
    first = project.stop(last_assistant_message=f"Done!\n{TAG}\n").block()
    assert first["systemMessage"] == "ralph iteration 2/9: 1 criterion failing"
    assert f"\n\n{TAG}\n\n" in first["reason"]  # the instructions hold the tag line
    project.write("done.txt")

    # Criteria pass; the final message equals the promise, without the tag: ask for it.
    ask = project.stop(last_assistant_message=PROMISE).block()
    assert ask["systemMessage"] == ("ralph iteration 3/9: 0 criteria failing; waiting for the "
                                    "completion promise")
    assert f"\n{TAG}\n" in ask["reason"]
    # Prose that mentions the tag.
    prose = f"Nearly there; I will print {TAG} once the last check is green."
    assert "waiting for the completion promise" in (
        project.stop(last_assistant_message=prose).block()["systemMessage"])
    # The agent echoing its instructions (which hold the tag line) as a quotation.
    echo = "You asked me to:\n\n" + "\n".join(f"> {line}" if line else ">"
                                              for line in ask["reason"].splitlines())
    assert f"> {TAG}" in echo
    assert "waiting for the completion promise" in (
        project.stop(last_assistant_message=echo).block()["systemMessage"])
    assert project.marker.is_file()
    # Two spaces inside the tag fold to the promise: it matches.
    done = project.stop(last_assistant_message="All green.\n<promise>ALL  DONE</promise>\n")
    message = done.allow()
    assert message is not None and " complete after 5 iterations" in message
    report_of(message)
    assert not project.marker.exists()


TWO_CRITERIA = ({"text": "done.txt holds ok", "run": "grep -q ok done.txt"},
                {"text": "b.txt exists", "run": "test -f b.txt"})


def _edit_criteria(project: Project, **runs: str) -> None:
    """Rewrite the PRD's criteria: ``AC1="cmd"`` sets a criterion's command, ``AC2=""``
    removes it."""
    path = project.root / "prd.json"
    prd = json.loads(path.read_text(encoding="utf-8"))
    story = prd["userStories"][0]
    kept = []
    for i, criterion in enumerate(story["acceptanceCriteria"], 1):
        run = runs.get(f"AC{i}", criterion["run"])
        if run:
            kept.append({**criterion, "run": run})
    story["acceptanceCriteria"] = kept
    path.write_text(json.dumps(prd, indent=1), encoding="utf-8")


def test_criteria_faked_at_the_first_stop_fail(tmp_path: Path) -> None:
    # The oracle guard applies from the first Stop on: a judge weakened and a criterion
    # dropped during the user's own turn complete nothing.
    project = armed(tmp_path, criteria=TWO_CRITERIA)
    _edit_criteria(project, AC1="true", AC2="")
    answer = project.stop().block()
    assert answer["systemMessage"] == "ralph iteration 2/6: 2 criteria failing"
    assert "criterion US-001::AC1 changed since the run started" in answer["reason"]
    assert "criterion US-001::AC2 removed since the run started" in answer["reason"]

    # With criteria edits allowed, the criteria checked are still the baseline's: one removed
    # from the PRD fails as missing, so the run cannot end by deleting what fails.
    other = armed(tmp_path / "edits", "--ralph-allow-criteria-edits", criteria=TWO_CRITERIA)
    _edit_criteria(other, AC2="")
    other.write("done.txt")
    answer = other.stop().block()
    assert answer["systemMessage"] == "ralph iteration 2/6: 1 criterion failing"
    assert "[US-001::AC2] b.txt exists\n  check: missing" in answer["reason"]
    assert "was in the PRD when the run started" in answer["reason"]


def test_final_message_from_a_lagging_transcript(tmp_path: Path) -> None:
    project = armed(tmp_path, "--ralph-promise", PROMISE, ini="ralph_max_iterations = 9\n")
    project.write("done.txt")  # the criterion failed at arming; it passes from the first Stop on
    logs = tmp_path / "transcripts"

    # "No text in the last line" is not "done": the last text is read, and it holds no
    # promise. The promise is asked for at the first Stop too.
    path = jsonl(logs / "b.jsonl", user("go"), assistant(text("Checking done.txt first.")),
                 assistant(TOOL_USE))
    ask = project.stop(transcript_path=path).block()
    assert ask["systemMessage"] == ("ralph iteration 2/9: 0 criteria failing; waiting for the "
                                    "completion promise")
    assert project.session() == SID

    # 3. A transcript path that does not exist (worktrees), no last_assistant_message: the
    # criteria pass but the promise cannot be looked for. Allow (never wedge), say why on
    # stderr, and keep the run armed: nothing is completed on a message nobody read.
    hook = project.stop(transcript_path=str(logs / "missing" / f"{SID}.jsonl"))
    message = hook.allow()
    assert message is not None and "cannot be read" in message and "stays armed" in message
    assert "missing or unreadable" in hook.stderr and "the stop is allowed" in hook.stderr
    assert project.marker.is_file() and project.session() == SID

    # Read from the end, skipping non-text records and a partial last line: the promise.
    path = jsonl(logs / "a.jsonl", user("go"), assistant(THINKING),
                 assistant(text("done.txt holds ok."), text(TAG)), *NON_TEXT_TAIL)
    done = project.stop(transcript_path=path).allow()
    assert done is not None and " complete after " in done
    assert not project.marker.exists()


TRICKY = ("Create done.txt holding ok.\n"
          "---\n"
          "iteration:1\n"
          "cat > notes.md <<EOF\nline one\nEOF\n"
          "Never run $(rm -rf x) nor `rm -rf x`.\n"
          'completion_promise: "I\n  will achieve 95%+ build success (129+/136 files)"\n'
          "---")
MULTILINE_PROMISE = "I\n  will achieve 95%+ build success (129+/136 files)"


def test_prd_text_reaches_the_reason_verbatim(tmp_path: Path) -> None:
    project = project_in(tmp_path / "proj", description=TRICKY, ini="ralph_max_iterations = 5\n",
                      criteria=({"text": "done.txt exists $(rm -rf x) EOF",
                                 "run": "grep -q ok done.txt"},))
    canary = project.root / "x"
    canary.write_text("still here\n", encoding="utf-8")
    arm(project, "--ralph-promise", MULTILINE_PROMISE)

    first = project.stop().block()
    assert TRICKY in first["reason"]
    assert "done.txt exists $(rm -rf x) EOF" in first["reason"]
    assert f"<promise>{MULTILINE_PROMISE}</promise>" in first["reason"]
    assert first["systemMessage"] == "ralph iteration 2/5: 1 criterion failing"
    assert canary.read_text(encoding="utf-8") == "still here\n"

    # The multi-line promise is the whole text, not `"I`: only the whole text (here folded
    # over other lines) completes the run.
    project.write("done.txt")
    folded = ("Done.\n<promise>I will achieve 95%+ build success\n(129+/136 files)</promise>")
    done = project.stop(last_assistant_message=folded).allow()
    assert done is not None and " complete after 2 iterations:" in done
    assert canary.read_text(encoding="utf-8") == "still here\n"


FAST_PATH_PROBE = r"""
import io, json, sys
from pytest_ralph.claude import hook
out, err = io.BytesIO(), io.BytesIO()
rc = hook.main(io.BytesIO(sys.argv[1].encode("utf-8")), out, err, json.loads(sys.argv[2]))
heavy = ("pytest", "_pytest", "jsonschema", "sqlite3", "_sqlite3", "yaml")
loaded = sorted(m for m in heavy if m in sys.modules)
control = None
if sys.argv[3] == "control":
    import pytest_ralph.claude.driver  # the slow path does load them: the probe can see them
    control = sorted(m for m in heavy if m in sys.modules)
print(json.dumps({"rc": rc, "out": out.getvalue().decode(), "err": err.getvalue().decode(),
                  "loaded": loaded, "control": control}))
"""


def fast_path(data: bytes, cwd: Path, env: dict[str, str] | None = None, *,
              control: bool = False) -> dict[str, Any]:
    """Run :func:`pytest_ralph.claude.hook.main` in a fresh interpreter; what it printed and which
    heavy modules it had imported (with ``control``, check that the probe sees them once
    the driver is imported)."""
    proc = subprocess.run([PYTHON, "-c", FAST_PATH_PROBE, data.decode("utf-8"),
                           json.dumps(env or {}), "control" if control else "-"],
                          cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    if control:
        assert "sqlite3" in result["control"], result
    return result


def test_unarmed_fast_path_imports_nothing_heavy(tmp_path: Path) -> None:
    project = project_in(tmp_path / "proj")
    for data in (payload(SID, project.root),
                 payload(SID, project.root, hook_event_name="StopFailure")):
        result = fast_path(data, project.root, control=True)
        assert (result["rc"], result["out"], result["err"]) == (0, "", "")
        assert result["loaded"] == []
    result = fast_path(b'{"session_id": "' + SID.encode(), project.root)  # not JSON
    assert (result["rc"], result["out"], result["loaded"]) == (0, "", [])


INERT: tuple[tuple[dict[str, str], dict[str, Any]], ...] = (
    ({"PYTEST_RALPH_CONTROLLER": "1"}, {}),  # 4. an agent run of `pytest --ralph`
    ({}, {"hook_event_name": "StopFailure", "error": "rate_limit"}),  # an API error
    ({}, {"hook_event_name": None, "hookEventName": "StopFailure"}),
)


def test_only_the_owning_session_is_ever_checked(tmp_path: Path) -> None:
    project = armed(tmp_path)

    def inert() -> None:
        """Controller runs and StopFailure events: nothing at all, even for the owner."""
        for env, fields in INERT:
            data = payload(SID, project.root, **fields)
            run_hook(data, cwd=project.root, **env).quiet()
            result = fast_path(data, project.root, env)
            assert (result["out"], result["err"], result["loaded"]) == ("", "", [])

    # An empty session id never adopts the run (every session would loop).
    for session in ("", "   ", None):
        hook = project.stop(session)
        assert hook.allow() is None
        assert "no session id" in hook.stderr and "never adopts" in hook.stderr
    inert()
    assert project.session() == ""

    assert project.stop(SID).block()["systemMessage"].startswith("ralph iteration 2/6")
    assert project.session() == SID
    # Another session is never blocked, and is answered without the heavy runtime.
    project.stop(OTHER_SID).quiet()
    project.stop(OTHER_SID, last_assistant_message="done").quiet()
    result = fast_path(payload(OTHER_SID, project.root), project.root)
    assert (result["rc"], result["out"], result["err"], result["loaded"]) == (0, "", "", [])
    assert project.stop("").allow() is None
    inert()
    assert project.session() == SID
    # Nothing was recorded meanwhile: this Stop ends iteration 2.
    assert project.stop(SID).block()["systemMessage"].startswith("ralph iteration 3/6")


def test_max_iterations_bounds_the_loop(tmp_path: Path) -> None:
    project = armed(tmp_path, ini="ralph_max_iterations = 1\nralph_breaker = 10\n")
    # The first Stop is iteration 1 of 1: it ends the run, though the criterion fails.
    message = project.stop().allow()
    assert message is not None and "iteration limit (1)" in message
    assert " limit after 1 iteration:" in message
    report_of(message)
    assert not project.marker.exists()
    project.stop().quiet()


def test_max_iterations_bounds_a_run_whose_final_message_cannot_be_read(tmp_path: Path) -> None:
    project = armed(tmp_path, "--ralph-promise", PROMISE,
                    ini="ralph_max_iterations = 1\nralph_breaker = 10\n")
    project.write("done.txt")
    hook = project.stop(transcript_path=str(tmp_path / "missing.jsonl"))
    message = hook.allow()
    assert message is not None and "iteration limit (1)" in message
    assert "the final message cannot be read" in message
    assert not project.marker.exists()  # iteration 1 of 1 was the last: the run ended
    project.stop().quiet()


@pytest.mark.parametrize("ini, args, why", [
    ("ralph_max_iterations = 0\n", (), "max_iterations"),  # an unbounded or empty loop
    # A promise holding the tag could never be found as <promise>TEXT</promise>: a loop
    # that no final message could complete.
    ("", ("--ralph-promise", "ok </promise> then"), "holds a <promise> tag"),
    ("", ("--ralph-promise", f"<promise>{PROMISE}</promise>"), "holds a <promise> tag"),
    # Deselected criteria would never be checked, so never pass.
    ("", ("-k", "nothing"), "-k cannot be used with --ralph-init"),
    ("", ("-m", "slow"), "-m cannot be used with --ralph-init"),
    ("", ("--deselect", "prd.json::US-001"), "--deselect cannot be used with --ralph-init"),
])
def test_arming_refuses_a_loop_that_cannot_end_well(tmp_path: Path, ini: str,
                                                   args: tuple[str, ...], why: str) -> None:
    project = project_in(tmp_path / "proj", ini=ini)
    proc = project.pytest("--ralph-init", "--ralph-driver", "claude", *args)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert why in proc.stdout + proc.stderr
    assert not project.marker.exists()
    assert not (project.root / ".claude" / "settings.json").exists()
    assert not (project.root / ".claude" / "settings.local.json").exists()
    project.stop().quiet()


def test_breaker_stops_identical_failures(tmp_path: Path) -> None:
    project = armed(tmp_path, ini="ralph_max_iterations = 10\nralph_breaker = 2\n")
    assert project.stop().block()["systemMessage"].startswith("ralph iteration 2/10")
    message = project.stop().allow()
    assert message is not None and "circuit breaker" in message
    assert " breaker after 2 iterations:" in message
    assert "in 2 iterations in a row (iterations 1-2)" in message
    report_of(message)
    assert not project.marker.exists()


def _spaced_python(tmp_path: Path) -> str:
    """An interpreter of this virtual environment at a path with spaces (a venv copy whose
    ``lib`` is a link to ours), or this interpreter when it does not run in a venv."""
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    if os.name == "nt" or sys.prefix == sys.base_prefix or not cfg.is_file():
        return PYTHON
    venv = tmp_path / "My Tools" / "py env"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(cfg, venv / "pyvenv.cfg")
    for name in ("lib", "lib64"):
        if (Path(sys.prefix) / name).is_dir():
            (venv / name).symlink_to(Path(sys.prefix) / name, target_is_directory=True)
    exe = venv / "bin" / "python"
    exe.symlink_to(os.path.realpath(PYTHON))
    return str(exe)


@pytest.mark.skipif(os.name == "nt", reason="runs the hook command through /bin/sh")
def test_hook_command_needs_only_the_interpreter(tmp_path: Path) -> None:
    python = _spaced_python(tmp_path)
    project = project_in(tmp_path / "My Projects" / "demo app", ini="ralph_max_iterations = 3\n")
    arm(project, python=python)
    settings = json.loads((project.root / ".claude" / "settings.local.json").read_text("utf-8"))
    (group,) = settings["hooks"]["Stop"]
    (handler,) = group["hooks"]
    command = handler["command"]
    assert handler["type"] == "command"
    assert command == f"{shlex.quote(python)} {SAFE_PATH_FLAG} -m pytest_ralph.hook"
    assert shlex.split(command) == [python, SAFE_PATH_FLAG, "-m", "pytest_ralph.hook"]
    for tool in ("bash", "jq", "perl", "sed", "grep", "|", "&&", ";"):
        assert tool not in command.replace(python, "")

    def through_shell(data: bytes) -> Done:
        proc = subprocess.run(["/bin/sh", "-c", command], input=data, cwd=project.root,
                              env=_env(), capture_output=True, timeout=TIMEOUT, check=False)
        return Done(proc.returncode, proc.stdout.decode(), proc.stderr.decode())

    # The command as Claude Code runs it, with spaces in both paths: the hook answers.
    hook = through_shell(payload("", project.root))
    assert hook.allow() is None and "no session id" in hook.stderr
    answer = through_shell(payload(SID, project.root)).block()
    assert answer["systemMessage"] == "ralph iteration 2/3: 1 criterion failing"


def test_reason_is_bounded_when_the_prompt_is_long(tmp_path: Path) -> None:
    loud = f"{shlex.quote(PYTHON)} -c \"print('E' * 3000); raise SystemExit(1)\""
    criteria = tuple({"text": f"loud check {i} " + "é" * 150, "run": loud} for i in range(5))
    project = armed(tmp_path, description="Ünïcode 🚀 line\n" * 400, criteria=criteria)
    answer = project.stop().block()
    reason = answer["reason"]
    assert answer["systemMessage"] == "ralph iteration 2/6: 5 criteria failing"
    assert "The whole prompt of iteration 2" in reason
    prompt = Path(reason.rsplit(") is in ", 1)[1].split(": read it", 1)[0])
    assert prompt.is_file() and len(prompt.read_text(encoding="utf-8")) > len(reason)


# -- 3. never wedge --------------------------------------------------------------------------


def bad_stdin(project: Project, session: str = SID) -> dict[bytes, str]:
    """Payloads that are no Stop payload, each with a word its stderr note must hold."""
    good = payload(session, project.root)
    return {
        b"": "empty",
        b"\n  \n": "empty",
        good[:40]: "JSON",
        bytes(range(256)) * 4: "UTF-8",
        json.dumps(json.loads(good)).encode("utf-16"): "UTF-8",
        b'[{"session_id": "x"}]': "JSON",
        b'"a JSON string"': "JSON",
        b"[" * 1000 + b"]" * 1000: "nested too deeply",  # 2 KB: a RecursionError once
        b'{"a":' * 1000 + b"1" + b"}" * 1000: "nested too deeply",
    }


def assert_never_wedges(project: Project, cases: dict[bytes, str]) -> None:
    for data, why in cases.items():
        hook = run_hook(data, cwd=project.root, CLAUDE_PROJECT_DIR=str(project.root))
        assert hook.allow() is None, data
        assert why in hook.stderr and "stop is allowed" in hook.stderr, (data, hook)
        assert hook.stderr.count("\n") == 1, hook  # the reason, on one line


def run_hook_shell(redirects: str, stdin: bytes, cwd: Path) -> Done:
    """Run the hook through ``sh`` with ``redirects`` applied to it (``<&-`` closes its
    stdin, ``>&-`` its stdout), ``stdin`` on the shell's own stdin; stdout and stderr are
    captured unless ``redirects`` closes them."""
    cmd = f'exec "$0" -m pytest_ralph.hook {redirects}'
    proc = subprocess.run(["/bin/sh", "-c", cmd, PYTHON], input=stdin, cwd=cwd, env=_env(),
                          capture_output=True, timeout=TIMEOUT, check=False)
    return Done(proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8"))


@pytest.mark.skipif(os.name == "nt", reason="POSIX shell redirections")
def test_closed_streams_never_wedge(tmp_path: Path) -> None:
    project = armed(tmp_path)
    good = payload(SID, project.root)
    # stdin closed: Python sets sys.stdin to None (an AttributeError once).
    hook = run_hook_shell("<&-", good, project.root)
    assert hook.allow() is None
    assert hook.stderr == ("pytest-ralph hook: stdin is closed (no Stop payload); the stop is "
                           "allowed\n")
    assert project.session() == ""
    # stdout closed: the owning session's Stop is checked; its block answer goes nowhere.
    hook = run_hook_shell(">&-", good, project.root)
    assert (hook.returncode, hook.stdout) == (0, "") and "Traceback" not in hook.stderr, hook
    assert project.session() == SID
    # stderr closed, with a payload that needs a note there.
    hook = run_hook_shell("2>&-", b"[" * 5000 + b"]" * 5000, project.root)
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, "", "")
    # All three closed.
    hook = run_hook_shell("<&- >&- 2>&-", good, project.root)
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, "", "")


@pytest.mark.skipif(os.name == "nt", reason="POSIX shell; a folder deleted while in use")
def test_a_deleted_working_directory_never_wedges(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    # No cwd in the payload: the hook looks from its own working directory, deleted here.
    proc = subprocess.run(["/bin/sh", "-c", 'cd "$1" && rmdir "$1" && exec "$0" -m '
                           "pytest_ralph.hook", PYTHON, str(gone)],
                          input=b'{"session_id": "' + SID.encode() + b'"}', env=_env(),
                          capture_output=True, timeout=TIMEOUT, check=False)
    Done(proc.returncode, proc.stdout.decode(), proc.stderr.decode()).quiet()


@pytest.mark.skipif(os.name == "nt", reason="/dev/zero and resource limits")
def test_special_stdin_never_wedges(tmp_path: Path) -> None:
    project = armed(tmp_path)
    with open("/dev/zero", "rb") as zero:  # endless: read up to the bound, then refused
        proc = subprocess.run([PYTHON, "-m", "pytest_ralph.hook"], stdin=zero, cwd=project.root,
                              env=_env(), capture_output=True, timeout=TIMEOUT, check=False)
    hook = Done(proc.returncode, proc.stdout.decode(), proc.stderr.decode())
    assert hook.allow() is None and "over 16777216 bytes" in hook.stderr, hook
    # A cwd of 400 KB: its 200,000 parents, each a string of up to 400 KB, once filled the
    # memory (under this bound: a MemoryError) or took hours.
    huge = json.dumps({"session_id": SID, "cwd": "/a" * 200_000}).encode()
    proc = subprocess.run([PYTHON, "-m", "pytest_ralph.hook"], input=huge, cwd=tmp_path, env=_env(),
                          capture_output=True, timeout=TIMEOUT, check=False,
                          preexec_fn=_memory_bound(2 * 1024**3))
    Done(proc.returncode, proc.stdout.decode(), proc.stderr.decode()).quiet()
    assert project.session() == ""


def _memory_bound(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that caps the child's address space at ``limit`` bytes."""
    def bound() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return bound


def test_bad_stdin_never_wedges(tmp_path: Path) -> None:
    project = armed(tmp_path)
    wrong_type = json.dumps({**json.loads(payload(SID, project.root)), "session_id": 42})
    assert_never_wedges(project, {**bad_stdin(project), wrong_type.encode(): "string"})
    assert project.session() == ""  # nothing adopted the run


@pytest.mark.parametrize("content, why", [
    (b"\x00\x01garbage\xff", "not UTF-8 JSON"),
    (b'{"version": 1, "run": ', "not UTF-8 JSON"),
    (b"[]", "expected a JSON object"),
    (b'{"version": 99}', "expected $.version 1"),
    (b'{"version": 1, "run": "r1", "state_dir": "rel/dir", "rootdir": "/p", "session": ""}',
     "absolute path"),
    (b'{"version": 1, "run": "", "state_dir": "/s", "rootdir": "/p", "session": ""}',
     "$.run"),
    (b"{}" + b" " * 70000, "over 65536 bytes"),
    (b'{"version": 1, "session": ' + b"[" * 20000 + b"]" * 20000 + b"}", "nested too deeply"),
])
def test_corrupt_arming_file_never_wedges(tmp_path: Path, content: bytes, why: str) -> None:
    marker = tmp_path / ".claude" / "pytest-ralph.local.json"
    marker.parent.mkdir()
    marker.write_bytes(content)
    hook = run_hook(payload(SID, tmp_path), cwd=tmp_path)
    assert hook.allow() is None
    assert why in hook.stderr and str(marker) in hook.stderr and "--ralph-cancel" in hook.stderr


@pytest.mark.skipif(os.name == "nt", reason="POSIX file permissions")
def test_unreadable_arming_file_never_wedges(tmp_path: Path) -> None:
    marker = tmp_path / ".claude" / "pytest-ralph.local.json"
    marker.parent.mkdir()
    marker.write_text("{}", encoding="utf-8")
    marker.chmod(0)
    try:  # as root (CI), in a user namespace where the mode applies
        hook = run_hook(payload(SID, tmp_path), cwd=tmp_path, unprivileged=True)
    finally:
        marker.chmod(0o600)
    assert hook.allow() is None  # exit 0, no traceback
    assert f"cannot read the arming file {marker}: Permission denied" in hook.stderr, hook.stderr


def test_damaged_state_never_wedges(tmp_path: Path) -> None:
    project = armed(tmp_path)
    prd = project.root / "prd.json"
    good = json.loads(prd.read_text(encoding="utf-8"))
    # The PRD broken (then deleted) after arming: each Stop is checked with the last good copy
    # kept at arming; the check phase fails on the broken file, the iteration counts, and the
    # next prompt says the checks could not run.
    prd.write_text('{"project": "demo", "userStories": [', encoding="utf-8")
    answer = project.stop().block()
    assert answer["systemMessage"] == "ralph iteration 2/6: 1 criterion failing"
    assert "the checks could not run" in answer["reason"] and "invalid JSON" in answer["reason"]
    assert project.session() == SID
    prd.unlink()
    answer = project.stop().block()
    assert answer["systemMessage"] == "ralph iteration 3/6: 1 criterion failing"
    assert "the checks could not run" in answer["reason"]
    assert "does not exist any more" in answer["reason"]
    # Without a good copy either, the run cannot be checked: allowed, and it stays armed.
    (copy,) = (project.root / ".pytest_ralph" / "runs").glob("*/prd.last-good.json")
    kept = json.loads(copy.read_text(encoding="utf-8"))
    assert kept["userStories"][0]["acceptanceCriteria"] == (
        good["userStories"][0]["acceptanceCriteria"])
    copy.unlink()
    hook = project.stop()
    message = hook.allow()
    assert message is not None and "does not load" in message
    assert "run stays armed" in hook.stderr
    assert project.session() == SID
    # Bad stdin of the owning session.
    assert_never_wedges(project, bad_stdin(project))

    # The history replaced by garbage.
    state = project.root / ".pytest_ralph"
    db = state / "ralph.db"
    assert db.is_file()
    db.write_bytes(b"<<<<<<< HEAD\nnot a database\x00\xff" * 200)
    hook = project.stop()
    assert hook.allow() is None
    assert "damaged or not a SQLite database" in hook.stderr and "stop is allowed" in hook.stderr
    assert project.marker.is_file()

    # The state folder deleted.
    shutil.rmtree(state)
    hook = project.stop()
    assert hook.allow() is None
    assert "does not exist" in hook.stderr and "arming file was removed" in hook.stderr
    assert not project.marker.exists()
    project.stop().quiet()
