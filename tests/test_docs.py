"""Every example in ``docs/*.md`` is run: its files written, its commands run, their exit
codes, output lines and resulting files checked.

An example is marked in the Markdown with HTML comments (invisible when rendered):

* ``<!-- example: NAME/PATH -->`` before a fenced block: the block is the file PATH;
* ``<!-- example: NAME $ pytest ARGS => CODE -->``: run ``pytest ARGS``, expect exit CODE;
* ``<!-- example: NAME expect: PATTERN -->``: a line of some command's output matches the
  ``fnmatch`` PATTERN;
* ``<!-- example: NAME file: PATH = TEXT -->``: after the commands, PATH holds TEXT.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
MARK = re.compile(r"^<!-- example: (?P<body>.*) -->$")
FENCE = re.compile(r"^```")


@dataclass
class Example:
    doc: str
    name: str
    files: dict[str, str] = field(default_factory=dict)
    commands: list[tuple[str, int]] = field(default_factory=list)
    expect: list[str] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)


def parse(path: Path) -> list[Example]:
    examples: dict[str, Example] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        i += 1
        if not m:
            continue
        body = m.group("body")
        if " $ " in body:
            name, command = body.split(" $ ", 1)
            command, code = command.rsplit(" => ", 1)
            examples.setdefault(name, Example(path.name, name)).commands.append(
                (command, int(code)))
        elif " expect: " in body:
            name, pattern = body.split(" expect: ", 1)
            examples.setdefault(name, Example(path.name, name)).expect.append(pattern)
        elif " file: " in body:
            name, rest = body.split(" file: ", 1)
            file, text = rest.split(" = ", 1)
            examples.setdefault(name, Example(path.name, name)).results.append((file, text))
        else:
            name, file = body.split("/", 1)
            while not FENCE.match(lines[i]):
                i += 1
            start = i + 1
            i = start
            while not FENCE.match(lines[i]):
                i += 1
            examples.setdefault(name, Example(path.name, name)).files[file] = \
                "\n".join(lines[start:i]) + "\n"
            i += 1
    return list(examples.values())


EXAMPLES = [ex for doc in sorted(DOCS.glob("*.md")) for ex in parse(doc)]


def test_the_docs_have_examples() -> None:
    names = {(ex.doc, ex.name) for ex in EXAMPLES}
    assert {("hooks.md", "wordcount"), ("hooks.md", "mood"), ("hooks.md", "patience"),
            ("hooks.md", "notices"), ("fixtures.md", "rules"), ("fixtures.md", "until"),
            ("fixtures.md", "db")} <= names
    assert all(ex.commands for ex in EXAMPLES), [ex.name for ex in EXAMPLES if not ex.commands]


def test_every_hook_and_fixture_is_documented() -> None:
    from pytest_ralph.hookspecs import HOOK_NAMES

    hooks = (DOCS / "hooks.md").read_text()
    for name in HOOK_NAMES:
        assert f"`{name}(" in hooks, name
    fixtures = (DOCS / "fixtures.md").read_text()
    for name in ("ralph_prd", "ralph_story", "ralph_loop", "ralph_db", "ralph_agent"):
        assert f"`{name}`" in fixtures, name


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.doc}:{e.name}" for e in EXAMPLES])
def test_doc_example(example: Example, tmp_path: Path) -> None:
    for name, text in example.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")])}
    env.pop("PYTEST_ADDOPTS", None)
    output = []
    for command, code in example.commands:
        args = shlex.split(command)
        assert args[0] == "pytest", command
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                               "-p", "no:randomly", *args[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        text = done.stdout + done.stderr
        assert done.returncode == code, f"{command}: exit {done.returncode}\n{text}"
        output += text.splitlines()
    for pattern in example.expect:
        assert any(fnmatch(line, pattern) for line in output), \
            f"no line matches {pattern!r}:\n" + "\n".join(output)
    for name, text in example.results:
        assert (tmp_path / name).read_text(encoding="utf-8").strip() == text
