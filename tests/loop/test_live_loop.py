"""The live view of a real loop: under a pseudo-terminal the status line changes while the
agent runs and while the check phase runs; without a terminal heartbeat lines show; ``-q``
keeps it quiet; ``--ralph-echo`` streams the agent's output (redacted); ``--ralph-status``
shows the live phase of a running run.

The agent and the check wait on the loop's own ``live.json`` (what elapsed, by the loop's
clock), so the tests do not depend on timing.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.env import PY, clean_env
from tests.support.prd import story

#: ``wait.py PHASE SECONDS [MARK]``: wait (60 s at most, then exit 3) until the loop's
#: live.json says PHASE has run SECONDS; then write the file MARK, if given.
WAIT = """
import glob, json, sys, time
phase, need = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + 60
while time.monotonic() < end:
    for p in glob.glob(".pytest_ralph/runs/*/live.json"):
        try:
            r = json.load(open(p))
        except Exception:
            continue
        if r.get("phase") == phase and r.get("running") and r.get("elapsed", 0) >= need:
            if len(sys.argv) > 3:
                open(sys.argv[3], "w").write("done")
            print("waited for", phase, flush=True)
            sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""

posix_only = pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal (pty)")


@pytest.fixture
def project(pytester: pytest.Pytester, write_prd: object) -> Path:
    """A project whose one criterion waits 2.5 s into its check phase, then needs done.txt,
    which the agent writes 2.5 s into its run."""
    (pytester.path / "wait.py").write_text(WAIT, encoding="utf-8")
    write_prd(story("US-1", {"text": "done", "run": f"{PY} wait.py check 2.5 && "  # type: ignore[operator]
                                                   "test -f done.txt"}))
    return pytester.path


def _loop(*extra: str, agent: str = f"{PY} wait.py agent 2.5 done.txt") -> list[str]:
    return [sys.executable, "-m", "pytest", "--ralph", "--ralph-agent", agent,
            "--ralph-max-iterations", "2", "-p", "no:randomly", "-p", "no:cacheprovider",
            *extra]


def _under_pty(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as its stdin, stdout and stderr; its exit code and
    all it wrote."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                            env=clean_env(COLUMNS="200"), close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(30)
    return code, b"".join(chunks).decode("utf-8", "replace")


@posix_only
def test_status_line_changes_under_a_terminal_during_the_agent_and_the_check(
        project: Path) -> None:
    code, text = _under_pty(_loop(), project)
    assert code == 0, text
    shown = [s.strip("\r\n") for s in text.split("\x1b[K")]
    agent = [s for s in shown if s.startswith("[ralph iteration 1/2] agent ")]
    check = [s for s in shown if s.startswith("[ralph iteration 1/2] check ")]
    baseline = [s for s in shown if s.startswith("[ralph baseline] check ")]
    assert len(set(agent)) >= 2, shown  # it changed while the agent ran
    assert any(s.endswith(": 1 line of output") or "lines of output" in s for s in agent)
    assert len(set(check)) >= 2, shown  # and while the check phase ran
    assert any(re.fullmatch(r"\[ralph iteration 1/2\] check \d+ s: 0/1 criteria checked", s)
               for s in check), check
    assert baseline
    assert "Result: complete (+1)" in text
    # the status line was rewritten in place: carriage return and clear, never a new line
    assert "\r\x1b[K[ralph iteration 1/2] agent " in text


def test_heartbeat_lines_without_a_terminal(project: Path) -> None:
    proc = subprocess.run(_loop("--ralph-heartbeat", "1"), cwd=project, env=clean_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "\x1b[K" not in out and "\r" not in out
    beats = [line for line in out.splitlines() if line.startswith("pytest-ralph: [ralph ")]
    assert any(re.fullmatch(r"pytest-ralph: \[ralph iteration 1/2\] agent \d+ s: "
                            r"\d+ lines? of output", b) for b in beats), out
    assert any(re.fullmatch(r"pytest-ralph: \[ralph iteration 1/2\] check \d+ s: "
                            r"0/1 criteria checked", b) for b in beats), out
    assert any(b.startswith("pytest-ralph: [ralph baseline] check ") for b in beats), out


@pytest.mark.parametrize("flags", [("-q", "--ralph-heartbeat", "1"),
                                   ("--ralph-heartbeat", "0")])
def test_quiet_or_heartbeat_0_prints_no_heartbeat(project: Path, flags: tuple[str, ...]) -> None:
    proc = subprocess.run(_loop(*flags), cwd=project, env=clean_env(), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pytest-ralph: [ralph " not in proc.stdout
    assert "[ralph iteration 1/2]" in proc.stdout  # the iteration block is still there


def test_echo_streams_the_agents_output_redacted(pytester: pytest.Pytester,
                                                 write_prd: object) -> None:
    (pytester.path / "agent.py").write_text(
        "import os\nprint('agent line one', os.environ['MY_API_TOKEN'], flush=True)\n"
        "print('agent line two', flush=True)\nopen('done.txt', 'w').write('x')\n",
        encoding="utf-8")
    write_prd(story("US-1", {"text": "done", "run": "test -f done.txt"}))  # type: ignore[operator]
    token = "tok-0123456789-abcdef"
    proc = subprocess.run(_loop("--ralph-echo", agent=f"{PY} agent.py"), cwd=pytester.path,
                          env=clean_env(MY_API_TOKEN=token), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "agent line one [redacted $MY_API_TOKEN]" in lines
    assert lines.index("agent line two") < lines.index("[ralph iteration 1/2]")
    assert token not in proc.stdout
    without = subprocess.run(_loop("--ralph-new", agent=f"{PY} agent.py"),
                             cwd=pytester.path, env=clean_env(MY_API_TOKEN=token),
                             capture_output=True, text=True, timeout=240)
    assert "agent line two" not in without.stdout


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_a_bad_heartbeat_is_a_usage_error(pytester: pytest.Pytester, write_prd: object,
                                          value: str) -> None:
    write_prd(story("US-1", {"text": "done", "run": "true"}))  # type: ignore[operator]
    proc = subprocess.run(_loop("--ralph-heartbeat", value), cwd=pytester.path,
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4
    err = proc.stdout + proc.stderr
    assert f"heartbeat from --ralph-heartbeat: expected a number of seconds > 0 and <= 86400 " \
           f"(or 0 for off); got {value!r}" in err
    assert "Traceback" not in err


def test_status_of_a_running_run_shows_the_live_phase(project: Path) -> None:
    agent = f"{PY} wait.py agent 0.5 started.txt && {PY} -c \"import glob,time,os\n" \
            "end=time.monotonic()+60\nwhile not os.path.exists('go') and " \
            "time.monotonic()<end: time.sleep(0.05)\nopen('done.txt','w').write('x')\""
    (project / "agent.sh").write_text(agent + "\n", encoding="utf-8")
    proc = subprocess.Popen(_loop(agent="sh agent.sh"), cwd=project, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (project / "started.txt").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the agent never ran"
            time.sleep(0.1)
        status = subprocess.run([sys.executable, "-m", "pytest", "--ralph-status",
                                 "-p", "no:randomly"], cwd=project, env=clean_env(),
                                capture_output=True, text=True, timeout=120)
    finally:
        (project / "go").write_text("", encoding="utf-8")
        out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    text = status.stdout
    assert "iteration 0/2 done, iteration 1 running" in text or "iteration 1 running" in text, \
        text
    (live,) = [line for line in text.splitlines() if line.startswith("  live: ")]
    assert re.fullmatch(r"  live: agent running for \d+ s in \[ralph iteration 1/2\]: "
                        r"\d+ lines? of output; log .*iteration-001/agent\.log", live), live
    # the live-state record is gone once the run ended
    assert not list((project / ".pytest_ralph" / "runs").glob("*/live.json"))
    done = subprocess.run([sys.executable, "-m", "pytest", "--ralph-status", "-p",
                           "no:randomly"], cwd=project, env=clean_env(), capture_output=True,
                          text=True, timeout=120)
    assert "live:" not in done.stdout
    assert "identical-failure streak" not in done.stdout  # a complete run has none
    json.loads((next((project / ".pytest_ralph" / "runs").glob("*/run.json"))).read_text())
