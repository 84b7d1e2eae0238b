"""git as the lanes and the merge queue of a parallel run run it: one command, its outcome.

Every command of :mod:`pytest_ralph.parallel.worktrees` and :mod:`pytest_ralph.parallel.queue`
goes through :func:`git`: the environment of :func:`pytest_ralph.util.git.git_env` (no prompt,
no pager, ``LC_ALL=C``, none of the variables that point git at another repository), each
command in its own process group, killed after :data:`GIT_TIMEOUT` seconds; hooks never run
(``core.hooksPath=/dev/null``) and commits are not signed (:data:`CONFIG`). A failure raises
:class:`WorktreeError` with git's own message.

* :func:`git` runs a command and returns (status, stdout, stderr); :func:`fails` only asks
  whether it fails.
* :func:`list_worktrees` reads ``git worktree list --porcelain``; :func:`same_path` compares two
  paths as the file system resolves them.
* :func:`worktree_gitdir` finds a linked worktree's git folder from the repository's own
  records, so that git can be pointed at it (``--git-dir``) whatever the worktree's ``.git``
  file says.
  :func:`at_worktree` gives the arguments that do so; :func:`points_to` checks the
  worktree's ``.git`` file and :func:`restore_gitfile` writes it back as git made it.
* :func:`identity` gives a commit an author and committer when git has none configured.

This module does not import pytest.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..util.files import atomic_write_text
from ..util.git import git_env
from ..util.process import run_in_group

__all__ = [
    "CONFIG",
    "FALLBACK_EMAIL",
    "FALLBACK_NAME",
    "GIT_TIMEOUT",
    "WorktreeError",
    "at_worktree",
    "fails",
    "git",
    "identity",
    "list_worktrees",
    "points_to",
    "restore_gitfile",
    "same_path",
    "worktree_gitdir",
]

#: Seconds each git command may take (a worktree checkout of a large project included).
GIT_TIMEOUT = 120.0

#: The identity of a lane's commit when git has none configured (``-c``, never written).
FALLBACK_NAME = "pytest-ralph"
FALLBACK_EMAIL = "pytest-ralph@localhost"

#: ``-c`` settings of every git command: no hook, no daemon, no colour, no signing.
CONFIG = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.quotePath=false",
    "color.ui=false", "gc.auto=0", "maintenance.auto=false", "commit.gpgsign=false",
)


class WorktreeError(Exception):
    """A git command on a lane failed or timed out; the message holds git's own words."""


def git(cwd: Path, *args: str, ok: tuple[int, ...] = (0,),
        config: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``git -C cwd -c <CONFIG and config> <args>``, run in ``cwd``.

    Args:
        cwd: the folder git runs in (and is pointed at with ``-C``).
        args: git's arguments (``"rev-parse", "HEAD"``).
        ok: the exit statuses that are no failure.
        config: more ``-c`` settings (``"user.name=..."``), after :data:`CONFIG`.

    Returns:
        (exit status, stdout, stderr stripped), both decoded as UTF-8 (errors replaced).

    Raises:
        WorktreeError: git is missing or cannot start in ``cwd``, exits with a status not in
            ``ok``, dies of a signal or runs past :data:`GIT_TIMEOUT` seconds (its process
            group is then killed); the message names the command, the folder and git's words.
    """
    argv = ["git", "-C", str(cwd)]
    for c in (*CONFIG, *config):
        argv += ["-c", c]
    argv += args
    shown = "git " + " ".join(args)
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            done = run_in_group(argv, cwd=cwd, output=out, errors=err, timeout=GIT_TIMEOUT,
                                env=git_env(), watchdog=False, grace=1.0)
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", "replace")
            stderr = err.read().decode("utf-8", "replace").strip()
    except OSError as exc:
        raise WorktreeError(f"cannot run {shown} in {cwd}: {exc}") from None
    if done.timed_out or done.returncode is None:
        raise WorktreeError(f"{shown} in {cwd} took more than {GIT_TIMEOUT:g} s and was "
                            "stopped")
    if done.returncode not in ok:
        raise WorktreeError(f"{shown} in {cwd} failed (exit {done.returncode}): "
                            f"{stderr or 'no message'}")
    return done.returncode, stdout, stderr


def fails(cwd: Path, *args: str) -> bool:
    """Whether ``git -C cwd <args>`` (as :func:`git` runs it) exits non-zero; a git that
    cannot run, dies or times out fails too. Never raises."""
    try:
        return git(cwd, *args, ok=tuple(range(256)))[0] != 0
    except WorktreeError:
        return True


def list_worktrees(top: Path) -> list[dict[str, str]]:
    """The worktrees of the repository at ``top`` (``git worktree list --porcelain``), in
    git's order, as one dict per worktree: ``worktree`` (its path, as git prints it), ``HEAD``
    (a commit id), ``branch`` (``refs/heads/...``), and ``detached``, ``bare``, ``locked``,
    ``prunable`` when present (their reason, or ``""``).

    Raises:
        WorktreeError: git failed.
    """
    out = git(top, "worktree", "list", "--porcelain")[1]
    found: list[dict[str, str]] = []
    for block in out.split("\n\n"):
        entry: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(" ")
            entry[name] = value
        if "worktree" in entry:
            found.append(entry)
    return found


def same_path(a: Path | str, b: Path | str) -> bool:
    """Whether ``a`` and ``b`` name the same path once resolved (symbolic links followed);
    ``False`` when either cannot be resolved. Never raises (a symbolic link loop included)."""
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def worktree_gitdir(top: Path, path: Path) -> Path | None:
    """The git folder of the linked worktree at ``path`` of the repository at ``top``
    (``<common .git>/worktrees/<name>``), found from the repository's own records (each
    entry's ``gitdir`` file names the worktree's ``.git``), never from the worktree's ``.git``
    file, which code run in the worktree could have rewritten to point git at a folder of its
    own (its ``config`` then names filters and other commands git runs). ``None`` when no
    entry names ``path``.

    Raises:
        WorktreeError: git failed.
    """
    common = git(top, "rev-parse", "--path-format=absolute", "--git-common-dir")[1].strip()
    entries = Path(common) / "worktrees"
    try:
        names = sorted(entries.iterdir())
    except OSError:
        return None
    for entry in names:
        try:
            named = (entry / "gitdir").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if named and same_path(Path(named).parent, path):
            return entry
    return None


def identity(where: Path) -> tuple[str, ...]:
    """The ``-c`` settings (for :func:`git`'s ``config``) that give a commit made in ``where``
    an author and committer when git has none: ``()`` when git has both
    (``GIT_AUTHOR_NAME``... or ``user.name`` and ``user.email``), else
    ``user.name=`` :data:`FALLBACK_NAME` and/or ``user.email=`` :data:`FALLBACK_EMAIL`, for the
    parts missing. Nothing is written to a configuration. Never raises (a git that cannot run
    counts as one without an identity)."""
    if not fails(where, "var", "GIT_AUTHOR_IDENT") and \
            not fails(where, "var", "GIT_COMMITTER_IDENT"):
        return ()
    extra = []
    if fails(where, "config", "--get", "user.name"):
        extra.append(f"user.name={FALLBACK_NAME}")
    if fails(where, "config", "--get", "user.email"):
        extra.append(f"user.email={FALLBACK_EMAIL}")
    return tuple(extra)


def points_to(path: Path, gitdir: Path) -> bool:
    """Whether the linked worktree at ``path`` has the ``.git`` file git writes for it: a
    regular file (no symbolic link) ``gitdir: <path>`` naming ``gitdir``. Never raises."""
    dotgit = path / ".git"
    try:
        if dotgit.is_symlink() or not dotgit.is_file():
            return False
        text = dotgit.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    first, _, rest = text.partition("\n")
    return first.startswith("gitdir: ") and not rest.strip() and same_path(
        first[len("gitdir: "):], gitdir)


def restore_gitfile(path: Path, gitdir: Path) -> None:
    """Put the ``.git`` file of the linked worktree at ``path`` back as git writes it
    (``gitdir: <gitdir>``, :func:`worktree_gitdir`), whatever code run there made of it (a
    file pointing elsewhere, a folder, a symbolic link); nothing is written when it is right
    (:func:`points_to`).

    Nothing is done either when the worktree's folder is gone (removed).

    Raises:
        OSError: it cannot be written.
    """
    if not path.is_dir() or points_to(path, gitdir):
        return
    dotgit = path / ".git"
    if dotgit.is_dir() and not dotgit.is_symlink():
        shutil.rmtree(dotgit, ignore_errors=True)
    else:
        dotgit.unlink(missing_ok=True)
    atomic_write_text(dotgit, f"gitdir: {gitdir}\n")


def at_worktree(path: Path, gitdir: Path | None) -> tuple[str, ...]:
    """The arguments that point a git command at the linked worktree ``path`` and its git
    folder ``gitdir`` (``--git-dir``, ``--work-tree``), before the command's name, so that git
    never reads the worktree's ``.git`` file; ``()`` when ``gitdir`` is ``None``."""
    return () if gitdir is None else (f"--git-dir={gitdir}", f"--work-tree={path}")
