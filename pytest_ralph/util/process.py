"""Run a command in its own process group, with a timeout that kills the whole group.

Agents and ``run`` checks start helpers of their own (language servers, test
runners, dev servers). Killing only the direct child would leave those running
and, worse, keep the output pipe open so that the caller hangs. Each command
therefore gets a new session (POSIX) or process group (Windows), and on timeout,
interrupt, or after it exits, every process left in that group is killed.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Seconds between SIGTERM and SIGKILL when a process group is stopped.
KILL_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class Finished:
    """How a command ended.

    Attributes:
        returncode: the exit status; negative for death by a signal (POSIX);
            ``None`` if the command timed out and was killed.
        timed_out: ``True`` when the timeout expired.
        duration: wall-clock seconds from start to exit (or kill).
    """

    returncode: int | None
    timed_out: bool
    duration: float


def run_in_group(
    args: Sequence[str] | str,
    *,
    cwd: Path,
    output: IO[bytes],
    timeout: float | None,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    shell: bool = False,
    grace: float | None = None,
    errors: IO[bytes] | None = None,
    watchdog: bool = True,
    pass_fds: Sequence[int] = (),
) -> Finished:
    """Run ``args`` with stdout and stderr both written to ``output`` (stderr to ``errors``
    instead when it is given).

    Args:
        args: an argv list (``shell=False``) or a shell command line (``shell=True``).
        cwd: working directory.
        output: a binary file that receives stdout and stderr.
        timeout: seconds before the whole process group is killed; ``None`` waits forever.
        input: bytes written to stdin, which is then closed; ``None`` gives an empty stdin.
        env: the full environment, or ``None`` to inherit.
        shell: run ``args`` through the system shell.
        grace: seconds between SIGTERM and SIGKILL when the group is stopped (default
            :data:`KILL_GRACE_SECONDS`); give more to a command that cleans up after itself.
        errors: a binary file that receives stderr, or ``None`` to send it to ``output``
            (for a command whose stdout is an answer to parse, not a log).
        watchdog: (POSIX) also start a small watchdog process, outside the group, that
            kills the group if this process dies first (even by SIGKILL, or by a second
            Ctrl-C that cuts its own clean-up short): it waits on a pipe that only this
            process holds open. On by default, so that no command outlives whoever started
            it; it costs one ``/bin/sh`` (about 1 ms) per command.
        pass_fds: (POSIX) file descriptors the command inherits (a pipe it reports on).

    Raises:
        FileNotFoundError, PermissionError: the executable cannot be started.
        KeyboardInterrupt: re-raised after the process group has been killed.
    """
    start = time.monotonic()
    proc = _popen_group(args, cwd=cwd, env=env, shell=shell, stdin=input is not None,
                        stdout=output, stderr=errors if errors is not None else subprocess.STDOUT,
                        pass_fds=pass_fds)
    dog = _start_watchdog(proc.pid, grace) if watchdog and os.name == "posix" else None
    feeder = None
    if input is not None:
        feeder = threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True)
        feeder.start()
    try:
        timed_out = _wait(proc, grace, lambda: wait_exit(proc, timeout))
    finally:
        if feeder is not None:  # the group is gone: a blocked write has failed by now
            feeder.join(DRAIN_SECONDS)
        if proc.stdin is not None and feeder is not None and not feeder.is_alive():
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()
        if dog is not None:
            _stop_watchdog(*dog)
    duration = time.monotonic() - start
    return Finished(None if timed_out else proc.returncode, timed_out, duration)


#: Longest single wait of :func:`wait_exit`, in milliseconds (``poll`` takes a C int).
_MAX_POLL_MS = 2**31 - 1


def wait_exit(proc: subprocess.Popen[bytes], timeout: float | None) -> None:
    """Wait for ``proc`` to exit, as ``proc.wait(timeout)`` does, but without polling where
    the system can say when a process exits (Linux 5.3+: a pidfd): ``Popen.wait`` with a
    timeout sleeps in steps of up to 50 ms, which a loop of short commands pays on every one.

    Raises:
        subprocess.TimeoutExpired: ``timeout`` seconds passed first.
    """
    if timeout is None or not math.isfinite(timeout):
        proc.wait()
        return
    pidfd_open = getattr(os, "pidfd_open", None) if hasattr(select, "poll") else None
    fd = None
    if pidfd_open is not None and proc.returncode is None:
        with contextlib.suppress(OSError):  # an older kernel, or the process is reaped
            fd = pidfd_open(proc.pid)
    if fd is None:
        proc.wait(timeout=timeout)
        return
    try:  # poll, not select: a descriptor numbered past 1023 is fine
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while not poller.poll(min(max(0, math.ceil((deadline - time.monotonic()) * 1000)),
                                  _MAX_POLL_MS)):
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    proc.wait()


def _wait(proc: subprocess.Popen[bytes], grace: float | None, wait: Callable[[], object]
          ) -> bool:
    """Call ``wait`` (which raises :class:`subprocess.TimeoutExpired` at the timeout), then
    kill what is left of the group: the command on timeout or interrupt, or helpers it left
    behind. Returns whether the timeout expired; re-raises an interrupt after the kill."""
    try:
        wait()
    except subprocess.TimeoutExpired:
        return True
    finally:
        kill_group(proc, grace)
    return False


def _popen_group(args: Sequence[str] | str, *, cwd: Path, env: Mapping[str, str] | None,
                 shell: bool, stdin: bool, stdout: object,
                 stderr: object, pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start ``args`` in a new session (POSIX) or process group (Windows); ``pass_fds``: file
    descriptors the child keeps (POSIX)."""
    popen_kw: dict[str, object] = {}
    if pass_fds:
        popen_kw["pass_fds"] = tuple(pass_fds)
    if os.name == "posix":
        popen_kw["start_new_session"] = True
    else:  # pragma: no cover - exercised on Windows only
        popen_kw["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        shell=shell,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        **popen_kw,  # type: ignore[call-overload]
    )
    return proc


#: Bytes read from a pipe at a time by :func:`run_streaming`.
CHUNK_BYTES = 64 * 1024

#: Seconds :func:`run_streaming` waits for its pipes to close after the group was killed (a
#: process that left the group may still hold them open).
DRAIN_SECONDS = 5.0


def run_streaming(
    args: Sequence[str],
    *,
    cwd: Path,
    timeout: float | None,
    on_stdout: Callable[[bytes], None],
    on_stderr: Callable[[bytes], None],
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    grace: float | None = None,
    watchdog: bool = True,
) -> Finished:
    """Run ``args`` in its own process group and hand its output to callbacks as it comes.

    Like :func:`run_in_group`, but stdout and stderr are pipes read by two threads in
    chunks of at most :data:`CHUNK_BYTES` bytes, each chunk passed to ``on_stdout`` /
    ``on_stderr`` (called from those threads; keep them short and thread-safe). Nothing is
    held in memory beyond one chunk per stream, whatever the output's size. stdin is fed
    from a third thread, so a large ``input`` (megabytes) cannot deadlock against a full
    output pipe.

    Args:
        args: the argv.
        cwd: working directory.
        timeout: seconds before the whole process group is killed; ``None`` waits forever.
        on_stdout, on_stderr: receive each chunk of output, in order per stream.
        input: bytes written to stdin, which is then closed; ``None`` gives an empty stdin.
        env: the full environment, or ``None`` to inherit.
        grace: seconds between SIGTERM and SIGKILL when the group is stopped.
        watchdog: kill the group if this process dies first (see :func:`run_in_group`).

    Raises:
        FileNotFoundError, PermissionError: the executable cannot be started.
        KeyboardInterrupt: re-raised after the process group has been killed.
    """
    start = time.monotonic()
    proc = _popen_group(args, cwd=cwd, env=env, shell=False, stdin=input is not None,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dog = _start_watchdog(proc.pid, grace) if watchdog and os.name == "posix" else None
    assert proc.stdout is not None and proc.stderr is not None
    readers = [threading.Thread(target=_pump, args=(pipe, sink), daemon=True)
               for pipe, sink in ((proc.stdout, on_stdout), (proc.stderr, on_stderr))]
    for t in readers:
        t.start()
    if input is not None:
        threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True).start()
    try:
        timed_out = _wait(proc, grace, lambda: wait_exit(proc, timeout))
    finally:
        deadline = time.monotonic() + DRAIN_SECONDS
        for t in readers:
            t.join(max(0.0, deadline - time.monotonic()))
        if dog is not None:
            _stop_watchdog(*dog)
    duration = time.monotonic() - start
    return Finished(None if timed_out else proc.returncode, timed_out, duration)


def _pump(pipe: IO[bytes], sink: Callable[[bytes], None]) -> None:
    """Read ``pipe`` to its end, handing each chunk to ``sink``."""
    with contextlib.suppress(OSError, ValueError):
        read = getattr(pipe, "read1", pipe.read)
        while chunk := read(CHUNK_BYTES):
            sink(chunk)
    with contextlib.suppress(OSError):
        pipe.close()


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    """Write ``data`` to ``pipe`` and close it; a reader that went away is not an error."""
    if pipe is None:
        return
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


# The watchdog, a POSIX shell reading the pipe on its stdin: a line means "done, leave the
# group alone"; end of file means the controller died: stop the group (SIGTERM, grace,
# SIGKILL). Arguments: the group id, the grace in seconds.
_WATCHDOG = """trap '' INT
IFS= read -r done
if [ -z "$done" ]; then
  kill -TERM "-$1" 2>/dev/null && { sleep "$2"; kill -KILL "-$1" 2>/dev/null; }
fi
exit 0
"""


def _start_watchdog(pgid: int, grace: float | None) -> tuple[subprocess.Popen[bytes], int]:
    """Start the watchdog of group ``pgid``; return it and the write end of its pipe."""
    read_end, write_end = os.pipe()
    try:
        dog = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG, "ralph-watchdog", str(pgid),
             f"{KILL_GRACE_SECONDS if grace is None else grace:g}"],
            start_new_session=True, stdin=read_end, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return dog, write_end


def _stop_watchdog(dog: subprocess.Popen[bytes], write_end: int) -> None:
    """Tell the watchdog the group is taken care of, and reap it."""
    with contextlib.suppress(OSError):
        os.write(write_end, b"done\n")
    with contextlib.suppress(OSError):
        os.close(write_end)
    try:
        wait_exit(dog, 5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a stuck shell start
        dog.kill()
        dog.wait()


def kill_group(proc: subprocess.Popen[bytes], grace: float | None = None) -> None:
    """Stop every process in ``proc``'s group: SIGTERM, then SIGKILL after ``grace`` seconds
    (default :data:`KILL_GRACE_SECONDS`).

    Safe to call when the group is already gone. Waits for ``proc`` itself to exit.
    """
    if grace is None:
        grace = KILL_GRACE_SECONDS
    if os.name != "posix":  # pragma: no cover - exercised on Windows only
        subprocess.run(["taskkill", "/T", "/F", "/PID", str(proc.pid)],
                       capture_output=True, check=False)
        proc.wait()
        return
    pgid = proc.pid
    if not _signal_group(pgid, signal.SIGTERM):
        proc.wait()
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group can still run.

    Zombies count as gone: they cannot be killed, and orphans in the group are reaped
    by whatever adopted them (often late, or never, when PID 1 does not reap), so
    waiting for them would only spend the whole grace period.
    """
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    states = _group_states(pgid)
    if not states:  # no /proc, or its members are not visible: trust killpg
        return True
    return any(state not in ("Z", "X") for state in states)


def _group_states(pgid: int) -> list[str]:
    """The process states (``R``, ``S``, ``Z``...) of the members of group ``pgid``, read
    from ``/proc`` (Linux); empty when ``/proc`` is not available."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    states = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command name (which may contain spaces and parentheses):
        # state, ppid, pgrp, ...
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode():
            states.append(fields[0].decode("ascii", "replace"))
    return states


#: The supervisor: ``python -I -S -c SUPERVISOR <grace> <argv...>`` runs argv and makes sure
#: that no process it started outlives it, ``setsid`` or double fork included (Linux).
#:
#: It marks itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so that every
#: orphaned descendant is re-parented to it rather than to init, then spawns argv in its own
#: process group and waits. When argv exits, every descendant left is stopped (SIGTERM, up to
#: ``min(grace, 2)`` seconds, SIGKILL), found by walking ``/proc`` from its own pid, until none
#: is left; then it exits as argv did (the same status, or the same signal). argv stays in
#: the supervisor's process group, so the loop's group-wide SIGTERM and SIGKILL reach both.
#: On SIGTERM, SIGINT or SIGHUP it kills (SIGKILL) the descendants that left the group, every
#: 50 ms, while argv gets its grace. If the loop dies, the kernel sends it SIGTERM
#: (``PR_SET_PDEATHSIG``), which it passes on to its group. Standard library
#: only, no site (``-I -S``): it costs about 20 ms.
SUPERVISOR = r"""
import ctypes, os, signal, sys, time

def _children_map():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 4:
            kids.setdefault(int(fields[1]), []).append((int(name), int(fields[2]),
                                                        fields[0]))
    return kids

def _descendants():
    kids = _children_map()
    out, todo = [], [os.getpid()]
    while todo:
        for pid, pgrp, state in kids.get(todo.pop(), ()):
            out.append((pid, pgrp, state))
            todo.append(pid)
    return out

def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return

def _kill(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass

def _sweep(grace):
    _kill([p for p, _, s in _descendants() if s not in (b"Z", b"X")], signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        _reap()
        if not [p for p, _, s in _descendants() if s not in (b"Z", b"X")]:
            break
        time.sleep(0.02)
    for _ in range(1000):
        _reap()
        alive = [p for p, _, s in _descendants() if s not in (b"Z", b"X")]
        if not alive:
            break
        _kill(alive, signal.SIGKILL)
        time.sleep(0.005)
    _reap()

class _Stop(Exception):
    pass

def main():
    grace = float(sys.argv[1])
    argv = sys.argv[2:]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    got = []

    def on_signal(signum, frame):
        got.append(signum)
        raise _Stop()

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    parent = os.getppid()
    try:
        child = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as exc:
        sys.stderr.write("pytest-ralph: cannot start %r: %s\n" % (argv[0], exc))
        sys.stderr.flush()
        os._exit(127)
    status = None
    stopping = False
    while status is None:
        try:
            if not stopping:
                pid, st = os.waitpid(-1, 0)
            else:
                pid, st = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    pgrp = os.getpgid(0)
                    _kill([p for p, g, s in _descendants() if g != pgrp and s != b"Z"],
                          signal.SIGKILL)
                    time.sleep(0.05)
                    continue
            if pid == child:
                status = st
        except _Stop:
            if not stopping and os.getppid() != parent:  # the loop died: stop the group
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                try:
                    os.killpg(0, signal.SIGTERM)
                except OSError:
                    pass
            stopping = True
        except ChildProcessError:
            break
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    _sweep(min(grace, 2.0))
    if status is None:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, OSError, ValueError):
            pass
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: always the default
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))

main()
"""


def supervised(argv: Sequence[str], grace: float | None = None,
               python: str | None = None, cwd: Path | str | None = None) -> list[str]:
    """``argv`` run by the :data:`SUPERVISOR` (POSIX; ``argv`` unchanged elsewhere), so that
    every process it starts dies when it ends, ``setsid`` or not.

    Args:
        argv: the command.
        grace: seconds the left-over processes get between SIGTERM and SIGKILL once argv has
            ended (at most 2; default :data:`KILL_GRACE_SECONDS`).
        python: the interpreter that runs the supervisor (default ``sys.executable``).
        cwd: the folder argv will run in (a relative ``argv[0]`` with a slash starts there).

    Raises:
        FileNotFoundError, PermissionError: ``argv[0]`` cannot be found or run (checked here:
            the supervisor itself would only exit 127).
    """
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return list(argv)
    exe = argv[0]
    if os.sep in exe:
        exe = os.path.join(cwd or os.curdir, exe)
        if not os.path.isfile(exe):
            raise FileNotFoundError(2, "No such file or directory", exe)
        if not os.access(exe, os.X_OK):
            raise PermissionError(13, "Permission denied", exe)
    elif shutil.which(exe) is None:
        raise FileNotFoundError(2, "No such file or directory", exe)
    return [python or sys.executable, "-I", "-S", "-c", SUPERVISOR,
            f"{KILL_GRACE_SECONDS if grace is None else grace:g}", *argv]


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): a
    descendant whose parent dies is re-parented to it, not to init, so that
    :func:`sweep_descendants` still finds it (an unconfined agent that kills its supervisor
    leaves its daemons here). Returns whether it worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, state) of every descendant of ``root``, from ``/proc`` (Linux); empty elsewhere."""
    kids: dict[int, list[tuple[int, str]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(
                (int(name), fields[0].decode("ascii", "replace")))
    out: list[tuple[int, str]] = []
    todo = [root]
    while todo:
        for pid, state in kids.get(todo.pop(), ()):
            out.append((pid, state))
            todo.append(pid)
    return out


def descendant_pids() -> frozenset[int]:
    """The pids of this process's descendants now (Linux; empty elsewhere)."""
    return frozenset(pid for pid, _ in _descendants(os.getpid()))


def sweep_descendants(grace: float = 0.5, keep: frozenset[int] = frozenset()) -> int:
    """Stop every process descended from this one but ``keep`` (and theirs: SIGTERM, up to
    ``grace`` seconds, then SIGKILL until none is left) and reap the ones re-parented here;
    return how many were found. For the loop between two commands, when none of its own
    should be running: with :func:`become_subreaper`, nothing an unconfined agent started can
    hide from it; ``keep`` spares what was running before the loop started (a server a
    ``conftest.py`` started)."""
    me = os.getpid()

    def targets() -> list[int]:
        kids: dict[int, int] = {}
        spared = set(keep)
        found = _descendants(me)
        for pid, _ in found:  # a kept process's children are kept too
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/{pid}/stat", "rb") as f:
                    raw = f.read()
                kids[pid] = int(raw[raw.rfind(b")") + 2:].split()[1])
        for pid, _ in found:
            chain, here = [], pid
            while here in kids and here not in spared:
                chain.append(here)
                here = kids[here]
            if here in spared:
                spared.update(chain)
        return [pid for pid, state in found if state not in ("Z", "X") and pid not in spared]

    alive = targets()
    found = len(alive)
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for _ in range(1000):
        alive = targets()
        if not alive:
            break
        if time.monotonic() >= deadline:
            for pid in alive:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    for pid, _ in _descendants(me):  # zombies re-parented here: ours to reap
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)
    return found


def read_tail(f: IO[bytes], max_bytes: int) -> str:
    """The last ``max_bytes`` bytes of the binary file ``f``, decoded as UTF-8 (errors replaced)."""
    f.flush()
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - max_bytes))
    data = f.read()
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:
        # Drop the partial first line so the excerpt starts cleanly.
        nl = text.find("\n")
        text = "...\n" + (text[nl + 1:] if 0 <= nl < 200 else text)
    return text


@contextmanager
def sigterm_raises(make: Callable[[str], BaseException]) -> Iterator[None]:
    """While the block runs, SIGTERM raises ``make("signal 15")`` in the main thread (as
    Ctrl-C raises :class:`KeyboardInterrupt`), so that the code under it cleans up as for an
    interrupt; the previous handler comes back after the block. Outside the main thread
    nothing is installed (Python allows signal handlers only there)."""
    def handler(signum: int, frame: object) -> None:
        raise make(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
