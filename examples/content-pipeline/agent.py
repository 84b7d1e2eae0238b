"""A scripted stand-in for a coding agent, for the content-pipeline example.

``pytest --ralph`` runs ``python agent.py`` once per iteration, with the prompt on stdin
(or, when stdin is empty, in the file named by ``PYTEST_RALPH_PROMPT_FILE``; a path given
as the first argument wins over both). The agent behaves like a developer who works the
story it is given and nothing else:

1. it reads the story id from the ``## Work on this story now`` section of the prompt
   (its first line is ``<STORY-ID>: <title>``);
2. it writes that story's code into ``pipeline/``: the files under
   ``solutions/<STORY-ID>/``, copied to the same paths (the solutions are plain
   Python modules, so that they can be read and linted like any other code);
3. it tries its code, as a developer would: ``python -m pipeline all`` on a scratch
   database in a temporary folder (when that fails, the pipeline's output goes to stderr,
   so into the loop's agent log);
4. it prints one line saying what it did, and exits 0.

It writes nothing outside ``pipeline/``: not the PRD, the tests, ``db/``, nor
``content.db``, which the gate rebuilds from the code at the start of each check (see
``conftest.py``), so that the ``sql`` criteria judge the code, not a file the agent left.
A prompt that names no story, or a story it has no solution for, changes nothing.
Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
"""The example folder: the agent works here, whatever the current directory."""
SOLUTIONS = HERE / "solutions"
"""One folder per story id, holding the files the story adds or replaces."""
WRITABLE = "pipeline"
"""The only top-level folder the agent writes into."""

STORY = re.compile(r"^## Work on this story now[ \t]*\n\s*(?P<id>[^\s:]+):", re.MULTILINE)
STORY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def read_prompt(argv: list[str]) -> str:
    """The prompt: the file named by ``argv[1]``, else stdin, else ``$PYTEST_RALPH_PROMPT_FILE``."""
    if len(argv) > 1:
        return Path(argv[1]).read_text(encoding="utf-8", errors="replace")
    text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    prompt_file = os.environ.get("PYTEST_RALPH_PROMPT_FILE")
    if not text.strip() and prompt_file:
        return Path(prompt_file).read_text(encoding="utf-8", errors="replace")
    return text


def story_of(prompt: str) -> str | None:
    """The story id the prompt asks for, or None."""
    match = STORY.search(prompt)
    return match["id"] if match else None


def solution_files(story: str) -> list[Path]:
    """The files of ``story``'s solution, relative to its folder, in path order.

    Raises:
        ValueError: a file would land outside ``pipeline/``.
    """
    folder = SOLUTIONS / story
    # Not the caches tools leave there (__pycache__, .mypy_cache, .ruff_cache...).
    files = sorted(relative for relative in (p.relative_to(folder) for p in folder.rglob("*")
                                             if p.is_file())
                   if not any(part == "__pycache__" or part.startswith(".")
                              for part in relative.parts))
    outside = [str(p) for p in files if p.parts[0] != WRITABLE]
    if outside:
        raise ValueError(f"refusing to write outside {WRITABLE}/: {', '.join(outside)}")
    return files


def apply(story: str) -> list[str]:
    """Copy ``story``'s files into place; return the paths that changed."""
    changed = []
    for relative in solution_files(story):
        source, target = SOLUTIONS / story / relative, HERE / relative
        if target.is_file() and target.read_bytes() == source.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        changed.append(relative.as_posix())
    return changed


def try_it() -> str:
    """Run every stage written so far on a scratch database; a few words on how it went.

    When the pipeline fails, its output goes to stderr (so into the loop's agent log).
    """
    with tempfile.TemporaryDirectory(prefix="content-pipeline-") as scratch:
        command = [sys.executable, "-m", "pipeline", "all", "--db", str(Path(scratch, "c.db"))]
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        return f"python -m pipeline all fails (exit {done.returncode}) on a scratch database"
    return "python -m pipeline all runs on a scratch database"


def run(prompt: str) -> str:
    """Act on ``prompt`` and return the one-line report."""
    story = story_of(prompt)
    if story is None:
        return "agent: the prompt names no story to work on; nothing changed"
    if not STORY_ID.fullmatch(story) or not (SOLUTIONS / story).is_dir():
        return f"agent: I do not know how to do story {story!r}; nothing changed"
    try:
        changed = apply(story)
    except ValueError as exc:
        return f"agent: {story}: {exc}; nothing changed"
    wrote = f"wrote {', '.join(changed)}" if changed else "its code was already in place"
    return f"agent: {story}: {wrote}; {try_it()}"


def main(argv: list[str]) -> int:
    """Read the prompt, act, print one line; always exit 0."""
    print(run(read_prompt(argv)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
