"""Unit tests of pytest_ralph.util.process: process groups, timeouts and output tails.

These run real subprocesses (``sys.executable`` and ``sh``).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from pytest_ralph.util import process
from pytest_ralph.util.process import Finished, kill_group, read_tail, run_in_group
from tests.support.env import PYTHON

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX process groups and signals")
linux_only = pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                                reason="checks process states in /proc (Linux)")


def _state(pid: int) -> str | None:
    """The State line of /proc/<pid>/status, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split(":", 1)[1].strip()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return ""


def _dead(pid: int, wait: float = 1.0) -> bool:
    """Whether ``pid`` is gone or a zombie, waiting up to ``wait`` seconds for SIGKILL to land."""
    deadline = time.monotonic() + wait
    while True:
        state = _state(pid)
        if state is None or state.startswith(("Z", "X")):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def _run(tmp_path: Path, args: list[str] | str, *, timeout: float | None,
         input: bytes | None = None, env: dict[str, str] | None = None,
         shell: bool = False) -> tuple[Finished, str]:
    log = tmp_path / "out.log"
    with log.open("w+b") as out:
        finished = run_in_group(args, cwd=tmp_path, output=out, timeout=timeout, input=input,
                                env=env, shell=shell)
    return finished, log.read_text("utf-8", errors="replace")


def test_returns_exit_code_and_duration(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [PYTHON, "-c", "import time, sys; time.sleep(0.2); sys.exit(3)"],
                       timeout=10)
    assert finished.returncode == 3
    assert finished.timed_out is False
    assert 0.2 <= finished.duration < 5


def test_exit_zero(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, [PYTHON, "-c", "pass"], timeout=10)
    assert finished.returncode == 0


def test_stdout_and_stderr_both_go_to_the_output_file(tmp_path: Path) -> None:
    code = ("import sys; print('to-stdout', flush=True); "
            "print('to-stderr', file=sys.stderr, flush=True)")
    _, text = _run(tmp_path, [PYTHON, "-c", code], timeout=10)
    assert "to-stdout" in text
    assert "to-stderr" in text


def test_runs_in_cwd(tmp_path: Path) -> None:
    _, text = _run(tmp_path, [PYTHON, "-c", "import os; print(os.getcwd())"], timeout=10)
    assert Path(text.strip()).resolve() == tmp_path.resolve()


def test_env_is_the_full_environment(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "RALPH_PROBE": "xyz"}
    code = "import os; print(os.environ.get('RALPH_PROBE'), os.environ.get('HOME'))"
    _, text = _run(tmp_path, [PYTHON, "-c", code], timeout=10, env=env)
    assert text.split() == ["xyz", "None"]


def test_shell_mode(tmp_path: Path) -> None:
    finished, text = _run(tmp_path, "echo one && echo two >&2 && exit 4", timeout=10, shell=True)
    assert finished.returncode == 4
    assert text.split() == ["one", "two"]


def test_stdin_input_is_delivered(tmp_path: Path) -> None:
    code = "import sys; data = sys.stdin.read(); print(len(data), data[:5])"
    _, text = _run(tmp_path, [PYTHON, "-c", code], timeout=10, input="héllo wörld".encode())
    assert text.split() == ["11", "héllo"]


def test_no_input_gives_an_empty_stdin(tmp_path: Path) -> None:
    # Must not wait on the terminal: stdin is empty, so read() returns at once.
    code = "import sys; print(repr(sys.stdin.read()))"
    finished, text = _run(tmp_path, [PYTHON, "-c", code], timeout=5)
    assert finished.timed_out is False
    assert text.strip() == "''"


def test_large_input_to_a_command_that_exits_without_reading(tmp_path: Path) -> None:
    start = time.monotonic()
    finished, _ = _run(tmp_path, [PYTHON, "-c", "import sys; sys.exit(0)"], timeout=5,
                       input=b"x" * 2_000_000)
    assert finished.returncode == 0
    assert time.monotonic() - start < 4


def test_large_input_to_a_command_that_never_reads_stops_at_the_timeout(tmp_path: Path) -> None:
    start = time.monotonic()
    finished, _ = _run(tmp_path, [PYTHON, "-c", "import time; time.sleep(30)"], timeout=0.5,
                       input=b"x" * 2_000_000)
    assert finished.timed_out is True
    assert finished.returncode is None
    assert time.monotonic() - start < 5


def test_large_input_is_delivered_in_full(tmp_path: Path) -> None:
    data = os.urandom(2_000_000)
    code = "import sys; print(len(sys.stdin.buffer.read()))"
    _, text = _run(tmp_path, [PYTHON, "-c", code], timeout=10, input=data)
    assert text.strip() == "2000000"


@linux_only
def test_timeout_kills_the_command_and_its_grandchild(tmp_path: Path) -> None:
    # sh starts a background grandchild, reports its pid, then waits forever.
    script = "sleep 30 & echo $! > grandchild.pid; echo $$ > child.pid; sleep 30"
    start = time.monotonic()
    finished, _ = _run(tmp_path, ["sh", "-c", script], timeout=0.5)
    elapsed = time.monotonic() - start
    assert finished.timed_out is True
    assert finished.returncode is None
    assert 0.5 <= finished.duration < 4
    assert elapsed < 4
    assert _dead(int((tmp_path / "child.pid").read_text()))
    assert _dead(int((tmp_path / "grandchild.pid").read_text()))


@linux_only
def test_timeout_kills_a_grandchild_that_ignores_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGTERM first; after the grace period, SIGKILL for the whole group.
    monkeypatch.setattr(process, "KILL_GRACE_SECONDS", 0.4)
    script = "(trap '' TERM; exec sleep 30) & echo $! > grandchild.pid; sleep 30"
    finished, _ = _run(tmp_path, ["sh", "-c", script], timeout=0.3)
    assert finished.timed_out is True
    # The grandchild survived SIGTERM, so the whole grace period was spent before SIGKILL.
    assert 0.3 + 0.4 <= finished.duration < 3
    assert _dead(int((tmp_path / "grandchild.pid").read_text()))


@linux_only
def test_leftover_background_process_of_a_successful_command_is_killed(tmp_path: Path) -> None:
    script = "sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; exit 0"
    start = time.monotonic()
    finished, _ = _run(tmp_path, ["sh", "-c", script], timeout=10)
    assert finished.returncode == 0
    assert finished.timed_out is False
    assert _dead(int((tmp_path / "bg.pid").read_text()))
    # A zombie left behind (reaped late by whoever adopted it) does not cost the grace period.
    assert time.monotonic() - start < 1.5


@linux_only
def test_leftover_python_grandchild_is_killed(tmp_path: Path) -> None:
    code = ("import subprocess, sys, pathlib; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "pathlib.Path('gc.pid').write_text(str(p.pid))")
    finished, _ = _run(tmp_path, [PYTHON, "-c", code], timeout=10)
    assert finished.returncode == 0
    assert _dead(int((tmp_path / "gc.pid").read_text()))


@posix_only
def test_death_by_signal_is_a_negative_returncode(tmp_path: Path) -> None:
    finished, _ = _run(tmp_path, ["sh", "-c", "kill -9 $$"], timeout=10)
    assert finished.returncode == -9
    assert finished.timed_out is False


def test_missing_executable_raises_file_not_found(tmp_path: Path) -> None:
    with (tmp_path / "out.log").open("w+b") as out, pytest.raises(FileNotFoundError):
        run_in_group(["pytest-ralph-no-such-program-xyz"], cwd=tmp_path, output=out, timeout=5)


def test_missing_cwd_raises_file_not_found(tmp_path: Path) -> None:
    with (tmp_path / "out.log").open("w+b") as out, pytest.raises(FileNotFoundError):
        run_in_group([PYTHON, "-c", "pass"], cwd=tmp_path / "nope", output=out, timeout=5)


@posix_only
def test_kill_group_is_safe_on_a_finished_process(tmp_path: Path) -> None:
    import subprocess

    proc = subprocess.Popen([PYTHON, "-c", "pass"], start_new_session=True)
    proc.wait()
    kill_group(proc, grace=0.1)  # no error
    assert proc.returncode == 0


# -- read_tail ------------------------------------------------------------------------------


def test_read_tail_returns_everything_when_short() -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"line one\nline two\n")
        assert read_tail(f, 1000) == "line one\nline two\n"


def test_read_tail_keeps_the_last_bytes_and_drops_the_partial_line() -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"".join(b"line %04d\n" % i for i in range(1000)))
        tail = read_tail(f, 100)
    assert tail.startswith("...\n")
    assert tail.endswith("line 0999\n")
    assert "line 0000" not in tail
    body = tail[len("...\n"):]
    # Only whole lines after the marker.
    assert all(line.startswith("line ") and len(line) == 9 for line in body.splitlines())
    assert len(body.encode()) <= 100


def test_read_tail_reads_from_any_position_and_flushes() -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"abc")
        f.seek(0)  # position does not matter
        assert read_tail(f, 10) == "abc"


def test_read_tail_handles_invalid_utf8() -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"ok \xff\xfe bad \xc3\n")
        text = read_tail(f, 1000)
    assert text.startswith("ok ")
    assert "bad" in text
    assert "\ufffd" in text


def test_read_tail_cut_inside_a_multibyte_character() -> None:
    with tempfile.TemporaryFile() as f:
        f.write("é".encode() * 300)  # 600 bytes, no newline
        text = read_tail(f, 101)  # starts in the middle of a character
    assert text.startswith("...\n")
    assert text.rstrip("é").endswith(("...\n", "\ufffd"))
    assert text.count("é") == 50


@posix_only
@linux_only
def test_watchdog_stops_the_group_only_when_its_pipe_closes_without_a_word() -> None:
    import subprocess

    def group() -> subprocess.Popen[bytes]:
        return subprocess.Popen(["sleep", "30"], start_new_session=True)

    told = group()
    dog, write_end = process._start_watchdog(told.pid, 0.2)
    process._stop_watchdog(dog, write_end)  # "done": the group is left alone
    assert dog.returncode == 0
    assert not _dead(told.pid, wait=0.3)
    kill_group(told, grace=0.1)

    orphaned = group()
    dog, write_end = process._start_watchdog(orphaned.pid, 0.2)
    os.close(write_end)  # as when the controller dies: end of file, no word
    assert _dead(orphaned.pid, wait=3.0), "the watchdog did not stop the group"
    orphaned.wait()
    dog.wait(timeout=5)


@posix_only
def test_wait_exit_returns_when_the_command_ends_not_at_a_polling_step(tmp_path: Path) -> None:
    import subprocess

    proc = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(0.3)"])
    start = time.monotonic()
    process.wait_exit(proc, timeout=10)
    assert proc.returncode == 0 and time.monotonic() - start < 5
    slow = subprocess.Popen(["sleep", "5"], start_new_session=True)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait_exit(slow, timeout=0.2)
    kill_group(slow, grace=0.1)
    process.wait_exit(slow, timeout=1)  # reaped already: returns at once


@posix_only
def test_wait_exit_with_descriptors_numbered_past_1023(tmp_path: Path) -> None:
    """select() refuses descriptors past 1023; a process holding that many files open (a
    conftest, a long session) must still wait for its commands."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit of open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        finished, out = _run(tmp_path, [PYTHON, "-c", "print('ok')"], timeout=30)
        assert (finished.returncode, out.strip()) == (0, "ok")
        finished, _ = _run(tmp_path, ["sleep", "5"], timeout=0.2)
        assert finished.timed_out
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
