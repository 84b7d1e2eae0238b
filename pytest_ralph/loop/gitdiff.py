"""What an iteration changed in the project, from git, without touching the user's git state.

:func:`tree_snapshot` records the working tree of the project as a git tree object: it builds
a *temporary* index (``GIT_INDEX_FILE`` pointing into a private temporary folder; it starts as
a copy of the user's index, read and never written, else as ``HEAD``'s tree, else empty), adds
every file to it with ``git add -A -- .`` and writes the tree with ``git write-tree``.
Nothing the user works with changes: not the index, not ``HEAD`` or any ref, not the stash,
not a file of the working tree. The only writes are blob and tree objects in the
repository's object store, unreferenced (``git gc`` prunes them after its grace period, two
weeks by default).

:func:`diff_stat` compares two snapshots: ``git diff --stat`` of the two trees, bounded.

The loop takes a :func:`work_mark` right before the agent runs and one right after: the
snapshot's tree and the commit ``HEAD`` names. The diff stat of the two trees is "what the
last iteration changed" in the next prompt; :func:`commit_moves` adds what the agent did to
``HEAD`` (new commits, or a reset, amend or rebase that left commits off it). Because the
snapshot is of the working tree, an agent that commits, amends or resets during its turn
changes nothing in the diff stat: it always compares the files as the turn found and left
them, whatever ``HEAD`` says.

Scope and rules:

* Only the project root and what is below it are snapshot (pathspec ``.`` from the root), so a
  project inside a larger repository (a home folder under git, a monorepo) hashes only its
  own files, and diff stats name paths relative to the project root (``--relative``).
* Files git is told to skip (``git update-index --assume-unchanged`` or
  ``--skip-worktree``) keep the content the user's index has for them.
* ``.gitignore``, ``.git/info/exclude`` and ``core.excludesFile`` are respected (``git add -A``
  honours them): ignored files are not snapshot. The state folder ``.pytest_ralph/`` ignores
  itself (its own ``.gitignore`` holds ``*``). Files ignored but tracked (in the user's
  index) are still snapshot.
* git runs with ``-C <root>``, ``GIT_OPTIONAL_LOCKS=0``, ``LC_ALL=C``, no pager, no prompt,
  no colour, no external diff, no fsmonitor, no split index, and without the variables that
  point git at another repository or index (``GIT_DIR``, ``GIT_WORK_TREE``,
  ``GIT_INDEX_FILE``... as ``git rev-parse --local-env-vars`` lists them), so a loop started
  from a git hook still looks at the project's own repository.
* Each git command may take :data:`GIT_TIMEOUT` seconds; its whole process group is killed
  after that. Every function returns ``None`` or ``""`` on any failure and never raises.
* git's configuration can make it run commands (a ``clean`` filter, ``core.fsmonitor``, a
  diff driver), and the agent can write the repository's ``.git/config``: the loop runs git
  only while :func:`config_digest` is what it was when the run started
  (:func:`tree_snapshot`'s ``trust``; the files of a ``commondir`` count), and ``git add``
  and every other git command run with every filter driver turned off
  (``_filters_off``; ``git write-tree`` runs a clean filter too), diffs without text
  conversion or external diff, so that git never runs a command the agent configured.

This module does not import pytest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..util.git import git_env
from ..util.process import run_in_group

#: Seconds each git command may take.
GIT_TIMEOUT = 30.0

#: Bytes of a git command's stdout read; the rest is ignored.
GIT_OUTPUT_BYTES = 1024 * 1024

#: Width given to ``git diff --stat``.
STAT_WIDTH = 100

#: ``-c`` options of every git command: nothing that writes outside the temporary index,
#: starts a daemon or changes the output's form.
_CONFIG = (
    "core.quotePath=false", "core.fsmonitor=false", "core.splitIndex=false", "gc.auto=0",
    "maintenance.auto=false", "color.ui=false", "advice.addEmbeddedRepo=false",
)

_SUMMARY = re.compile(r"\s*(\d+) files? changed")

#: A filter driver name :func:`_filters_off` can turn off with ``-c`` (others: no snapshot).
_DRIVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_OBJECT_ID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def _env(index: Path | None = None) -> dict[str, str]:
    env = git_env()
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    return env


def _git(root: Path, *args: str, index: Path | None = None,
         ok: tuple[int, ...] = (0,), config: tuple[str, ...] = ()) -> bytes | None:
    """The stdout (at most :data:`GIT_OUTPUT_BYTES` bytes) of ``git -C root <args>``, or
    ``None`` when git is missing, exits with a status not in ``ok``, dies of a signal or runs
    past :data:`GIT_TIMEOUT` seconds (its process group is then killed), or ``root`` is in no
    work tree :func:`_git_dir` finds. ``config``: more ``-c`` settings.

    git is told its repository (``GIT_DIR``, ``GIT_WORK_TREE``: the ``.git`` that
    :func:`_git_dir` found and the folder holding it, whose configuration
    :func:`config_digest` hashes) instead of looking for one: a project folder dressed as a
    bare repository (``HEAD``, ``objects/``, ``refs/``, a ``config`` with a filter) or a
    ``.git`` whose ``HEAD`` is gone would otherwise make git read a configuration the
    digest never saw."""
    gitdir, _common, top = _repo(root)
    if gitdir is None or top is None:
        return None
    argv = ["git", "-C", str(root)]
    for c in (*_CONFIG, *config):
        argv += ["-c", c]
    argv += args
    env = _env(index)
    env.update(GIT_DIR=str(gitdir), GIT_WORK_TREE=str(top))
    try:
        with tempfile.TemporaryFile() as out, open(os.devnull, "wb") as err:
            done = run_in_group(argv, cwd=root, output=out, errors=err, timeout=GIT_TIMEOUT,
                                env=env, watchdog=False, grace=1.0)
            if done.returncode not in ok:
                return None
            out.seek(0)
            return out.read(GIT_OUTPUT_BYTES)
    except Exception:  # never raise: "no answer" is an answer here
        return None


def _common(gitdir: Path) -> Path:
    """The common dir of ``gitdir``: where its ``commondir`` file points (git reads the
    configuration there, for a ``.git`` folder too), else ``gitdir`` itself."""
    try:
        return (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    except OSError:
        return gitdir


def _git_dir(root: Path) -> tuple[Path | None, Path | None]:
    """(git dir, common dir) of the work tree holding ``root`` (:func:`_repo`)."""
    gitdir, common, _top = _repo(root)
    return gitdir, common


def _repo(root: Path) -> tuple[Path | None, Path | None, Path | None]:
    """(git dir, common dir, work tree) of the work tree holding ``root``, found by walking
    up from it for a ``.git`` folder, or a ``.git`` file ``gitdir: PATH`` for a linked work
    tree (either may hold a ``commondir`` file), without running git; the work tree is the
    folder holding that ``.git``. ``(None, None, None)`` outside a work tree (inside a
    ``.git`` folder too). Never a bare repository: a project is a work tree."""
    here = root.resolve()
    for folder in (here, *here.parents):
        dot = folder / ".git"
        try:
            if dot.is_dir():
                if dot in (here, *here.parents):
                    return None, None, None  # inside the git folder: no work tree
                return dot, _common(dot), folder
            if dot.is_file():
                text = dot.read_text("utf-8", errors="replace").strip()
                if not text.startswith("gitdir:"):
                    return None, None, None
                gitdir = (folder / text[len("gitdir:"):].strip()).resolve()
                return gitdir, _common(gitdir), folder
        except OSError:
            return None, None, None
    return None, None, None


def config_digest(root: Path) -> str:
    """The SHA-256 of every file that configures git for the repository of ``root``: the
    system (``/etc/gitconfig``), global (``~/.gitconfig``, ``$XDG_CONFIG_HOME/git/config``)
    and repository configuration (``config``, ``config.worktree``) and
    ``info/attributes``, with ``$GIT_CONFIG_SYSTEM`` / ``$GIT_CONFIG_GLOBAL`` honoured.
    Missing files count as missing. Never raises."""
    home = Path(os.path.expanduser("~"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path(os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"),
             Path(os.environ.get("GIT_CONFIG_GLOBAL") or home / ".gitconfig"),
             xdg / "git" / "config", xdg / "git" / "attributes"]
    gitdir, common = _git_dir(root)
    for folder in {gitdir, common} - {None}:
        assert folder is not None
        files += [folder / "config", folder / "config.worktree", folder / "info" / "attributes",
                  folder / "commondir"]
    h = hashlib.sha256()
    for path in sorted(set(files)):
        h.update(str(path).encode("utf-8", "surrogateescape") + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


def tree_snapshot(root: Path, trust: str | None = None) -> str | None:
    """The id of a git tree object holding the working tree under ``root`` as it is now
    (untracked files included, ignored files left out), made without touching the user's
    index, ``HEAD``, refs, stash or files (see the module docstring).

    Args:
        root: the project folder.
        trust: the :func:`config_digest` git may run with; ``None``: any.

    Returns:
        The tree id, or ``None`` when ``root`` is not inside a git work tree, git is not
        installed, git's configuration is not ``trust``, or any git command fails or takes
        more than :data:`GIT_TIMEOUT` seconds. Never raises.
    """
    try:
        if not root.is_dir() or (trust is not None and config_digest(root) != trust):
            return None
        info = _git(root, "rev-parse", "--is-inside-work-tree", "--git-path", "index")
        lines = info.decode("utf-8", errors="replace").splitlines() if info else []
        if len(lines) != 2 or lines[0] != "true":
            return None
        user_index = root / lines[1]  # relative to root, or absolute
        folder = Path(tempfile.mkdtemp(prefix="pytest-ralph-index-"))
    except (OSError, ValueError):
        return None
    try:
        index = folder / "index"
        off = _filters_off(root)
        if off is None or not _seed(root, user_index, index, off):
            return None
        # --ignore-errors: a file that cannot be read (permissions) is left out, not fatal;
        # git then exits 1 but still writes the index.
        if _git(root, "add", "-A", "--ignore-errors", "--", ".", index=index, ok=(0, 1),
                config=off) is None:
            return None
        tree = _git(root, "write-tree", index=index, config=off)
        if tree is None:
            return None
        text = tree.decode("ascii", errors="replace").strip()
        return text if _OBJECT_ID.fullmatch(text) else None
    except (OSError, ValueError):
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def work_mark(root: Path, trust: str | None = None) -> str | None:
    """The mark of the project as it is now: the :func:`tree_snapshot` id, then a space and
    the commit id ``HEAD`` names when there is one (``"<tree>"`` in a repository without
    commits). :func:`diff_stat` and :func:`commit_moves` take two marks.

    Returns:
        The mark, or ``None`` when :func:`tree_snapshot` gives none. Never raises.
    """
    tree = tree_snapshot(root, trust)
    if tree is None:
        return None
    head = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    text = head.decode("ascii", errors="replace").strip() if head else ""
    return f"{tree} {text}" if _OBJECT_ID.fullmatch(text) else tree


def tree_of(mark: str | None) -> str | None:
    """The tree id of a :func:`work_mark` (a bare tree id is its own mark)."""
    return mark.split(" ", 1)[0] or None if mark else None


def head_of(mark: str | None) -> str | None:
    """The ``HEAD`` commit id of a :func:`work_mark`; ``None`` when it has none."""
    parts = mark.split(" ", 1) if mark else []
    return parts[1] if len(parts) == 2 and _OBJECT_ID.fullmatch(parts[1]) else None


#: How the line of :func:`commit_moves` starts (it follows the diff stat in an iteration's
#: ``diff`` text).
COMMITS = "commits: "

#: Commits named one by one in :func:`commit_moves`; the rest are counted.
MOVES_SHOWN = 5

#: Characters of a commit subject shown.
SUBJECT_CHARS = 72

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def commit_moves(root: Path, before: str | None, after: str | None,
                 trust: str | None = None) -> str:
    """What happened to ``HEAD`` between two :func:`work_mark` marks, in one line:

    * ``commits: 2 new: 3f2a1b9 fix add; 9e8d7c6 add tests``: ``HEAD`` moved forward (the
      agent committed);
    * ``commits: HEAD moved from 14da30a to a24951c (a reset, amend, rebase or checkout): 1
      commit is no longer on it: 14da30a add parser (git reflog still has it); 1 new: ...``:
      ``HEAD`` moved to a commit that does not descend from the old one;
    * ``commits: the first commit: ...`` in a repository that had none.

    At most :data:`MOVES_SHOWN` commits are named (abbreviated id and subject, cut to
    :data:`SUBJECT_CHARS` characters, control characters dropped), the others counted.

    Returns:
        The line, or ``""`` when ``HEAD`` did not move, either mark has no ``HEAD`` after the
        first commit, git's configuration is not ``trust`` or git fails. Never raises.
    """
    old, new = head_of(before), head_of(after)
    if before is None or after is None or new is None or old == new:
        return ""
    if trust is not None and config_digest(root) != trust:
        return ""
    off = _filters_off(root)
    if off is None:
        return ""
    if old is None:
        return COMMITS + "the first commit: " + _listed(root, new, None, off)
    gone = _count(root, f"{new}..{old}", off)
    added = _count(root, f"{old}..{new}", off)
    if gone is None or added is None:
        return ""
    if gone == 0:
        return f"{COMMITS}{added} new: " + _listed(root, new, old, off)
    short = _short(root, old, off), _short(root, new, off)
    text = (f"{COMMITS}HEAD moved from {short[0]} to {short[1]} (a reset, amend, rebase or "
            f"checkout): {gone} commit{'s are' if gone != 1 else ' is'} no longer on it: "
            f"{_listed(root, old, new, off)} (git reflog still has "
            f"{'them' if gone != 1 else 'it'})")
    if added:
        text += f"; {added} new: " + _listed(root, new, old, off)
    return text


def turn_change(root: Path, before: str | None, after: str | None, trust: str | None,
                unchanged: str) -> tuple[str, bool]:
    """What an agent's turn changed, from the :func:`work_mark` before and after it: the
    :func:`diff_stat`, then the :func:`commit_moves` line when ``HEAD`` moved (``unchanged``
    stands first when only ``HEAD`` moved).

    Returns:
        ``(text, known)``: ``known`` is True when the files' change is known (a diff stat, or
        two equal trees). Two trees that differ without a diff stat (an agent's ``git gc
        --prune=now`` took the first away) are unknown, never "no file changed".
    """
    diff = diff_stat(root, before, after, trust=trust) if before and after else ""
    known = after is not None and (bool(diff) or tree_of(before) == tree_of(after))
    moved = commit_moves(root, before, after, trust)
    if moved:
        diff = f"{diff}\n{moved}" if diff else (f"{unchanged}\n{moved}" if known else moved)
    return diff, known


def _count(root: Path, span: str, off: tuple[str, ...]) -> int | None:
    out = _git(root, "rev-list", "--count", span, "--", config=off)
    text = out.decode("ascii", errors="replace").strip() if out else ""
    return int(text) if text.isdigit() else None


def _short(root: Path, commit: str, off: tuple[str, ...]) -> str:
    out = _git(root, "rev-parse", "--short", commit, config=off)
    text = out.decode("ascii", errors="replace").strip() if out else ""
    return text or commit[:7]


def _listed(root: Path, tip: str, stop: str | None, off: tuple[str, ...]) -> str:
    """``<id> <subject>; ...`` of the commits reachable from ``tip`` and not from ``stop``,
    newest first, at most :data:`MOVES_SHOWN` named."""
    span = [tip] if stop is None else [tip, f"^{stop}"]
    out = _git(root, "log", "--no-decorate", "--no-color", "--no-show-signature",
               "--format=%h%x09%s", f"--max-count={MOVES_SHOWN + 1}", *span, "--", config=off)
    rows = out.decode("utf-8", errors="replace").splitlines() if out else []
    named = []
    for row in rows[:MOVES_SHOWN]:
        commit, _, subject = row.partition("\t")
        subject = _CONTROL.sub("", subject).strip()
        if len(subject) > SUBJECT_CHARS:
            subject = subject[:SUBJECT_CHARS - 3].rstrip() + "..."
        named.append(f"{commit} {subject}".rstrip())
    total = _count(root, tip if stop is None else f"{stop}..{tip}", off) or len(rows)
    if total > len(named):
        named.append(f"... {total - len(named)} more")
    return "; ".join(named)


def _filters_off(root: Path) -> tuple[str, ...] | None:
    """The ``-c`` settings that turn off every filter driver git's configuration defines for
    ``root`` (``filter.<driver>.clean``, ``.smudge``, ``.process`` emptied, ``.required``
    false), as git itself lists them (includes and ``commondir`` followed): ``git add`` and
    ``git write-tree`` then hash each file's bytes and run no command. (A git-lfs file is
    then hashed whole, not as its pointer: slower, for the loop's own snapshot only.)
    ``None`` when git cannot list them, or a driver's name holds anything but letters,
    digits, ``.``, ``_`` and ``-`` (``a=b``: ``-c filter.a=b.clean=`` would set another
    key)."""
    out = _git(root, "config", "--name-only", "--get-regexp", r"^filter\..*\.", ok=(0, 1))
    if out is None:
        return None
    drivers = {name[len("filter."):].rpartition(".")[0]
               for name in out.decode("utf-8", errors="replace").splitlines()
               if name.startswith("filter.") and name.count(".") >= 2}
    if not all(_DRIVER_NAME.fullmatch(driver) for driver in drivers):
        return None  # git splits "-c" at the first "=": such a name could not be turned off
    return tuple(f"filter.{driver}.{key}={value}" for driver in sorted(drivers)
                 for key, value in (("clean", ""), ("smudge", ""), ("process", ""),
                                    ("required", "false")))


def _seed(root: Path, user_index: Path, index: Path, off: tuple[str, ...]) -> bool:
    """Start the temporary ``index``: a copy of the user's index when there is one (read,
    never written; its stat data lets ``git add`` skip every unchanged file: 0.05 s instead
    of 0.2 s for 5000 files), else ``HEAD``'s tree when there is a commit, else empty.
    ``False`` when git fails."""
    try:
        shutil.copy2(user_index, index)  # copy2 keeps the mtime git's racy-clean test needs
        return True
    except OSError:
        index.unlink(missing_ok=True)
    if _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{tree}") is None:
        return True  # no commit yet: start empty
    return _git(root, "read-tree", "HEAD", index=index, config=off) is not None


def diff_stat(root: Path, before: str | None, after: str | None, max_chars: int = 2000,
              trust: str | None = None) -> str:
    """``git diff --stat`` from tree ``before`` to tree ``after`` (two :func:`tree_snapshot`
    ids or :func:`work_mark` marks), paths relative to ``root``, at most about ``max_chars``
    characters: file lines are dropped from the end, replaced by ``... N more files``, and
    the summary line
    (``3 files changed, 10 insertions(+), 2 deletions(-)``) is always kept.

    Returns:
        The text (no trailing newline), or ``""`` when the trees are equal, either is
        ``None``, git's configuration is not ``trust`` (:func:`tree_snapshot`), or git fails.
        Never raises.
    """
    before, after = tree_of(before), tree_of(after)
    if not before or not after or before == after:
        return ""
    if trust is not None and config_digest(root) != trust:
        return ""
    options = ("--relative", "--no-color", "--no-ext-diff", "--no-textconv")
    off = _filters_off(root)
    if off is None:
        return ""
    out = _git(root, "diff", f"--stat={STAT_WIDTH}", *options, before, after, "--", config=off)
    if not out:
        return ""
    lines = [line.rstrip() for line in out.decode("utf-8", errors="replace").splitlines()
             if line.strip()]
    summary = ""
    if len(out) >= GIT_OUTPUT_BYTES:  # cut short: no summary line, maybe half a file line
        lines = lines[:-1]
        short = _git(root, "diff", "--shortstat", *options, before, after, "--", config=off)
        summary = short.decode("utf-8", errors="replace").strip() if short else ""
    elif lines and _SUMMARY.match(lines[-1]):
        summary = lines.pop().strip()
    if not lines and not summary:
        return ""
    m = _SUMMARY.match(summary)
    total = max(len(lines), int(m.group(1)) if m else 0)
    kept: list[str] = []
    size = len(summary)
    for line in lines:
        more = total - len(kept) - 1
        reserve = len(f"\n ... {more} more files") if more else 0
        if size + len(line) + 1 + reserve > max_chars:
            break
        kept.append(line)
        size += len(line) + 1
    if len(kept) < total:
        more = total - len(kept)
        kept.append(f" ... {more} more file{'s' if more != 1 else ''}")
    if summary:
        kept.append(" " + summary)
    return "\n".join(kept)
