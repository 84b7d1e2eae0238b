"""Special files where the plugin reads a file, and odd state folders.

A path in the PRD, an ini key or the state folder may name a FIFO (opening it blocks until a
writer comes), a device such as ``/dev/zero`` (reading it never ends) or a folder. Every
reader refuses such a path with a message that names it, says what it is and what was
expected, without blocking and without reading more than its bound. Each case runs a real
``pytest`` in a child process, under a memory cap (``RLIMIT_AS``) and a timeout, so that a
reader that blows up or hangs fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.prd import story

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs, /dev/zero, flock")

#: Address space of each child pytest, in bytes: far more than it needs, far less than what a
#: read of /dev/zero takes.
MEMORY = 2 * 1024**3

#: Seconds a child pytest may take; a blocked read of a FIFO never ends.
TIMEOUT = 90


def _bounded(permissions: bool = False) -> Callable[[], None]:
    def bound() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
        if permissions and os.geteuid() == 0:
            # Root ignores file permissions through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
            # (1 and 2): take both out of the bounding set, so that the exec'd pytest has
            # neither and a folder of mode 000 is closed to it too (PR_CAPBSET_DROP = 24).
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            for cap in (1, 2):
                if libc.prctl(24, cap, 0, 0, 0) != 0:
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")
    return bound


def run(folder: Path, *args: str, permissions: bool = False) -> tuple[int, str]:
    """``python -m pytest *args`` in ``folder``: (exit code, stdout and stderr); with
    ``permissions``, file permissions apply to the child even when it runs as root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RALPH_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=_bounded(permissions), check=False)
    return proc.returncode, proc.stdout + proc.stderr


def write_prd(folder: Path, *criteria: Any, name: str = "prd.json") -> Path:
    path = folder / name
    path.write_text(json.dumps({"project": "demo", "userStories": [
        story("US-001", *(criteria or ({"text": "done", "run": "test -f done.txt"},)))]}),
        encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\nralph_max_iterations = 1\n", encoding="utf-8")
    return path


def special(folder: Path, name: str, kind: str) -> Path:
    """A ``kind`` special file at ``folder / name``: a FIFO, or a link to /dev/zero."""
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


KINDS = {"fifo": "a FIFO (named pipe)", "zero": "a character device"}


# -- the PRD -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_prd_that_is_a_fifo_or_a_device_is_a_usage_error(tmp_path: Path, kind: str) -> None:
    write_prd(tmp_path)
    special(tmp_path, "odd.json", kind)
    what = KINDS[kind]
    for args in (["--ralph", "--ralph-agent", "true"], ["--ralph-dry-run", "--ralph-agent",
                                                        "true"]):
        started = time.monotonic()
        code, out = run(tmp_path, *args, "--ralph-prd", "odd.json")
        assert code == 4, out
        assert f"{tmp_path / 'odd.json'}: $: expected a regular file, found {what}" in out
        assert "Traceback" not in out and "internal error" not in out
        assert time.monotonic() - started < 30
    # The gate: a configured PRD, and a path on the command line, are not "not found".
    code, out = run(tmp_path, "--ralph-prd", "odd.json")
    assert code == 4 and f"odd.json (from --ralph-prd) is {what}, not a regular file" in out, out
    code, out = run(tmp_path, "odd.json::US-001")
    assert code == 4 and f"odd.json::US-001 is {what}, not a regular file" in out, out
    assert "not found" not in out


def test_a_discovered_prd_that_is_a_fifo_is_named(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    os.mkfifo(tmp_path / "prd.json")
    code, out = run(tmp_path)
    assert code == 4, out
    assert f"the PRD {tmp_path / 'prd.json'} (found by discovery) is a FIFO (named pipe)" in out
    code, out = run(tmp_path, "--ralph", "--ralph-agent", "true")
    assert code == 4 and "expected a regular file, found a FIFO (named pipe)" in out, out


@pytest.mark.parametrize("kind", KINDS)
def test_a_prompt_template_that_is_a_fifo_or_a_device_is_a_usage_error(tmp_path: Path,
                                                                       kind: str) -> None:
    write_prd(tmp_path)
    template = special(tmp_path, "prompt.md", kind)
    for mode in ("--ralph", "--ralph-dry-run"):
        code, out = run(tmp_path, mode, "--ralph-agent", "true", "-o", f"ralph_prompt={template}")
        assert code == 4, out
        assert (f"cannot read the prompt template {template} (from -o ralph_prompt): "
                f"{KINDS[kind]}, not a regular file") in out
    # Over the template's bound: refused without reading it all.
    template.unlink()
    with template.open("wb") as big:  # sparse: nothing to write
        big.truncate(16 * 1024 * 1024 + 1)
    code, out = run(tmp_path, "--ralph-dry-run", "--ralph-agent", "true", "-o",
                    f"ralph_prompt={template}")
    assert code == 4 and "16777217 bytes, over the limit of 16777216 bytes" in out, out


# -- check targets -----------------------------------------------------------------------------


def test_check_targets_that_are_special_files_fail_their_criterion(tmp_path: Path) -> None:
    for kind in KINDS:
        special(tmp_path, f"{kind}.txt", kind)
        special(tmp_path, f"{kind}.json", kind)
        special(tmp_path, f"{kind}.db", kind)
    (tmp_path / "schema.json").write_text('{"type": "object"}', encoding="utf-8")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    criteria: list[dict[str, Any]] = []
    for kind in KINDS:
        criteria += [{"file": f"{kind}.txt", "contains": "x"}, {"file": f"{kind}.txt"},
                     {"schema": "schema.json", "instance": f"{kind}.json"},
                     {"schema": f"{kind}.json", "instance": "schema.json"},
                     {"sql": "select 1", "db": f"{kind}.db", "expect": 1}]
    criteria.append({"schema": "schema.json", "instance": "deep.json"})
    write_prd(tmp_path, *criteria)
    started = time.monotonic()
    code, out = run(tmp_path, "prd.json", "-rf", "--tb=line")
    assert code == 1, out
    assert time.monotonic() - started < 60
    assert f"{len(criteria)} failed" in out and "Traceback" not in out, out
    for kind, what in KINDS.items():
        assert out.count(f"`{kind}.txt` is {what}; expected a regular file") >= 2  # contains too
        assert f"cannot load `{kind}.json`: {what}, not a regular file; expected a JSON or " \
               "YAML file" in out
        assert f"`{kind}.db` is {what}; expected a SQLite file" in out
    assert "cannot load `deep.json`: nested too deeply to read" in out


def test_a_fifo_planted_among_the_guarded_files_does_not_hang_the_loop(tmp_path: Path) -> None:
    write_prd(tmp_path)
    os.mkfifo(tmp_path / "conftest.py")  # the guard digests every conftest.py of the chain
    code, out = run(tmp_path, "--ralph", "--ralph-agent", "true")
    assert code == 1, out
    assert "limit (exit 1) after 1 iteration" in out


# -- the state folder --------------------------------------------------------------------------


@pytest.mark.parametrize("name, what", [
    ("progress.txt", "the progress log"), ("passes.json", "the write-back sidecar"),
    ("lock", "the loop lock file")])
def test_a_state_file_that_is_a_folder_is_a_usage_error_every_time(tmp_path: Path, name: str,
                                                                   what: str) -> None:
    write_prd(tmp_path)
    path = tmp_path / ".pytest_ralph" / name
    path.mkdir(parents=True)
    for _ in range(2):  # and again: nothing was left half done to resume
        code, out = run(tmp_path, "--ralph", "--ralph-agent", "true")
        assert code == 4, out
        assert (f"{path} is a folder, where pytest-ralph keeps {what} (a regular file): move "
                "it aside or remove it") in out
        assert "internal error" not in out
    path.rmdir()
    os.mkfifo(path)
    code, out = run(tmp_path, "--ralph", "--ralph-agent", "true")
    assert code == 4 and f"{path} is a FIFO (named pipe), where pytest-ralph keeps" in out, out


def test_a_history_that_is_a_folder_is_said_to_be_one(tmp_path: Path) -> None:
    write_prd(tmp_path)
    db = tmp_path / ".pytest_ralph" / "ralph.db"
    db.mkdir(parents=True)
    expected = (f"the run history {db} is a folder, not a SQLite file: move it aside or remove "
                "it")
    for args in (["--ralph", "--ralph-agent", "true"], ["--ralph-status"], ["--ralph-cancel"]):
        code, out = run(tmp_path, *args)
        assert code == 4 and expected in out, (args, out)
        assert "disk I/O error" not in out


def test_status_of_a_history_it_cannot_open_says_why(tmp_path: Path) -> None:
    write_prd(tmp_path)
    code, out = run(tmp_path, "--ralph", "--ralph-agent", "true")
    assert code == 1, out
    # ralph_dir naming a file: not "no runs yet".
    for flag in ("--ralph-status", "--ralph-cancel"):
        code, out = run(tmp_path, flag, "-o", "ralph_dir=prd.json")
        assert code == 4, out
        assert f"the state folder {tmp_path / 'prd.json'} is not a folder" in out
        assert "no runs yet" not in out
    # A state folder this user may not look into.
    state = tmp_path / ".pytest_ralph"
    state.chmod(0)
    try:
        for flag in ("--ralph-status", "--ralph-cancel"):
            code, out = run(tmp_path, flag, permissions=True)
            assert code == 4, out
            assert f"cannot open the run history {state / 'ralph.db'}: Permission denied" in out
            assert "no runs yet" not in out and "Traceback" not in out
    finally:
        state.chmod(0o755)


HOLDER = """
import fcntl, os, sys, time
path = os.path.realpath(sys.argv[1])
f = open(path, "a+")
fcntl.flock(f.fileno(), fcntl.LOCK_EX)
print("locked", flush=True)
if sys.argv[2] == "never":
    time.sleep(120)
me = str(os.getpid())

def opened_elsewhere():
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid != me:
            try:
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") == path
                       for fd in os.listdir(f"/proc/{pid}/fd")):
                    return True
            except OSError:
                pass
    return False

deadline = time.monotonic() + 60
while not opened_elsewhere() and time.monotonic() < deadline:
    time.sleep(0.001)
time.sleep(0.1)  # the other loop has the file open: write the pid an instant later
f.write(f"pid {os.getpid()}, started 2026-12-01 10:00:00 UTC\\n")
f.flush()
time.sleep(120)
"""


@pytest.mark.parametrize("writes", ["soon", "never"])
def test_the_lock_refusal_names_a_loop_that_is_just_starting(tmp_path: Path,
                                                             writes: str) -> None:
    """Another controller took the lock an instant ago and has not written its pid yet: it
    writes it 0.1 s after this loop opened the lock file, or never."""
    write_prd(tmp_path)
    lock = tmp_path / ".pytest_ralph" / "lock"
    lock.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), writes],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        code, out = run(tmp_path, "--ralph", "--ralph-agent", "true")
    finally:
        holder.kill()
        holder.wait()
    assert code == 4, out
    assert "unknown process" not in out
    if writes == "soon":  # written within the wait: its own words
        assert f"(pid {holder.pid}, started 2026-12-01 10:00:00 UTC)" in out, out
    else:  # never written: the kernel's record of the lock's holder
        assert f"(pid {holder.pid}, just starting)" in out, out
