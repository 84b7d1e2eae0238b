"""Every example's README is run as a new user would run it, from a fresh clone: the commands
of its "Run it" section, on a copy of the example's tracked files, with the exit codes and the
output its marks state.

A README's "Run it" section has one ``sh`` block, which a user copies line by line:

* its first line, ``work="$(mktemp -d)" && cp -R examples/NAME/. "$work" && cd "$work"``,
  run from the top of the clone, copies the example to a new temporary folder and goes there:
  the test copies the files git tracks under ``examples/NAME`` (what a fresh clone holds;
  every file but build products when the tree is not a git checkout) into a temporary folder,
  and works there;
* every other line is a ``pytest`` command, with an optional ``# comment`` for the reader.

After the block, HTML comments (invisible when rendered) state what those commands do:

* ``<!-- run: COMMAND => CODE -->``: COMMAND (a line of the block, without its comment) exits
  with CODE. The runs must list the block's commands, in order: a command typed in the block
  but not run, or run but not shown, fails the test;
* ``<!-- expect: PATTERN -->``: a line of the output (stdout and stderr) of the run above
  matches the ``fnmatch`` PATTERN;
* ``<!-- file: PATH has: PATTERN -->`` / ``<!-- file: PATH lacks: PATTERN -->``: after the run
  above, a line of PATH matches PATTERN (or none does). PATH may be a glob, e.g.
  ``.pytest_ralph/reports/*.md``: it must match a file, and ``has`` holds when a line of one
  of them matches, ``lacks`` when no line of any does.

A command runs as ``python -m pytest -p no:cacheprovider -p no:randomly ARGS`` with this
interpreter, in the environment of ``tests/project/test_docs.py`` (nothing of the user's or of
this test run's own settings), with this interpreter's folder first on ``PATH`` so that the
examples' ``python agent.py`` is this Python.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.project.test_docs import user_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: Examples whose README is not a "Run it" of commands on a copy: the plugin's README
#: installs it into the environment (``pip install``), which CI does verbatim in ``.ci/run``,
#: then runs its tests there.
NOT_RUN = {"ralph_example_plugin": "installed and tested by .ci/run, as its README says"}

#: The first line of every "Run it" block.
COPY = 'work="$(mktemp -d)" && cp -R examples/{name}/. "$work" && cd "$work"'

MARK = re.compile(r"^<!-- (?P<kind>run|expect|file): (?P<body>.*) -->$")

#: Seconds one command may take: content-pipeline's loop runs 13 check phases.
TIMEOUT = 1200


@dataclass
class Step:
    """One command of a README and what its marks say it does."""

    command: str
    code: int
    expect: list[str] = field(default_factory=list)
    #: ``(path glob, "has" or "lacks", pattern)``, checked after the command.
    files: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class Readme:
    """The "Run it" section of one example's README."""

    name: str
    #: The block's first line (the copy), then its commands without their comments.
    first: str
    typed: list[str]
    steps: list[Step]


def _strip_comment(line: str) -> str:
    """A command line as the shell runs it: without its ``# comment``, words rejoined."""
    return shlex.join(shlex.split(line, comments=True))


def parse(path: Path) -> Readme:
    """The "Run it" section of the README ``path``: its typed lines and its marks."""
    text = path.read_text(encoding="utf-8")
    start = text.find("\n## Run it\n")
    assert start >= 0, f"{path}: no '## Run it' section"
    section = text[start + 1:]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, flags=re.M | re.S)
    assert len(blocks) == 1, f"{path}: the 'Run it' section needs exactly one ```sh block"
    lines = [line for line in blocks[0].splitlines() if line.strip()]
    assert lines, f"{path}: the 'Run it' block is empty"
    typed = [_strip_comment(line) for line in lines[1:]]
    steps: list[Step] = []
    for line in section.splitlines():
        m = MARK.match(line)
        if not m:
            continue
        kind, body = m["kind"], m["body"]
        if kind == "run":
            command, code = body.rsplit(" => ", 1)
            steps.append(Step(_strip_comment(command), int(code)))
            continue
        assert steps, f"{path}: `{kind}: {body}` follows no run"
        if kind == "expect":
            steps[-1].expect.append(body)
        else:
            file, rest = body.split(" ", 1)
            verb, pattern = rest.split(": ", 1)
            assert verb in ("has", "lacks"), f"{path}: {line}"
            steps[-1].files.append((file, verb, pattern))
    return Readme(path.parent.name, lines[0], typed, steps)


def _readmes() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*/README.md") if p.parent.name not in NOT_RUN)


def test_every_example_has_a_readme_that_is_run() -> None:
    names = {p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name[0] not in "._"}
    assert names == {p.parent.name for p in _readmes()} | set(NOT_RUN)
    assert {"fix-until-green", "claimed-stories", "content-pipeline"} <= names


def test_the_reader_of_marks(tmp_path: Path) -> None:
    readme = tmp_path / "ex" / "README.md"
    readme.parent.mkdir()
    readme.write_text("\n".join([
        "# Ex", "", "## Run it", "", "```sh", COPY.format(name="ex"),
        "pytest prd.json   # the gate: 2 fail", "pytest --ralph -o 'a=b c'", "```", "",
        "<!-- run: pytest prd.json => 1 -->", "<!-- expect: *2 failed* -->",
        "<!-- run: pytest --ralph -o 'a=b c' => 0 -->",
        "<!-- file: reports/*.md has: - Outcome: **complete** (exit 0) -->",
        "<!-- file: prd.json lacks: *false* -->", "", "## Next", "",
        "<!-- run: pytest => 3 -->"]) + "\n", encoding="utf-8")
    parsed = parse(readme)
    assert parsed.first == COPY.format(name="ex")
    assert parsed.typed == ["pytest prd.json", "pytest --ralph -o 'a=b c'"]
    assert parsed.steps == [
        Step("pytest prd.json", 1, ["*2 failed*"]),
        Step("pytest --ralph -o 'a=b c'", 0, [],
             [("reports/*.md", "has", "- Outcome: **complete** (exit 0)"),
              ("prd.json", "lacks", "*false*")])]


def fresh_copy(name: str, dest: Path) -> None:
    """The files of ``examples/NAME`` that a fresh clone has, copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", f"examples/{name}"], cwd=ROOT,
                            capture_output=True, check=False)
    files = [f for f in listed.stdout.decode().split("\0") if f] if listed.returncode == 0 \
        else []
    if not files:  # not a git checkout (an sdist): the folder as it is, less build products
        shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns(
            "__pycache__", ".pytest_ralph", "content.db*", "content.metrics.md"))
        return
    for file in files:
        target = dest / Path(file).relative_to(f"examples/{name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / file, target)


def _lines(cwd: Path, pattern: str) -> list[str]:
    """The lines of the files that the glob ``pattern`` matches under ``cwd`` (at least one)."""
    found = sorted(cwd.glob(pattern))
    assert found, f"no file matches {pattern} in {cwd}"
    return [line for path in found for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def private_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("example-user")
    (root / "home").mkdir()
    (root / "pycache").mkdir()
    return {"HOME": str(root / "home"), "USERPROFILE": str(root / "home"),
            "PYTEST_RALPH_PYCACHE": str(root / "pycache")}


@pytest.mark.parametrize("readme", _readmes(), ids=lambda p: p.parent.name)
def test_example_readme_runs_as_it_says(readme: Path, tmp_path: Path,
                                        private_state: dict[str, str]) -> None:
    parsed = parse(readme)
    name = parsed.name
    assert parsed.first == COPY.format(name=name), \
        f"{name}: the block must start with {COPY.format(name=name)!r}"
    assert [s.command for s in parsed.steps] == parsed.typed, \
        f"{name}: the <!-- run: --> marks must list the block's commands, in order"
    work = tmp_path / name
    fresh_copy(name, work)
    env = user_env(private_state)
    for step in parsed.steps:
        args = shlex.split(step.command)
        assert args[0] == "pytest", step.command
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                               "no:randomly", *args[1:]], cwd=work, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        output = (done.stdout + done.stderr).splitlines()
        where = f"{name}: `{step.command}`: exit {done.returncode}\n" + "\n".join(output)
        assert done.returncode == step.code, where
        for pattern in step.expect:
            assert any(fnmatch(line, pattern) for line in output), \
                f"no line matches {pattern!r}\n{where}"
        for file, verb, pattern in step.files:
            lines = _lines(work, file)
            found = any(fnmatch(line, pattern) for line in lines)
            assert found == (verb == "has"), f"{name}: {file} {verb} {pattern!r}:\n" + \
                "\n".join(lines)
