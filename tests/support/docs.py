"""The examples of ``docs/*.md``: where the pages are and a reader of the examples marked in
them with HTML comments (the marks are described in ``tests/project/test_docs.py``, which runs
every example)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: The documentation pages' folder.
DOCS = Path(__file__).resolve().parents[2] / "docs"
MARK = re.compile(r"^<!-- example: (?P<body>.*) -->$")
FENCE = re.compile(r"^```")


@dataclass
class Run:
    """One command of an example and the checks on its own stdout."""

    command: str
    code: int
    json: list[str] = field(default_factory=list)


@dataclass
class Example:
    """One example of page ``doc``: the files written before its first command, its steps,
    the output patterns and the files it must leave."""

    doc: str
    name: str
    files: dict[str, str] = field(default_factory=dict)
    #: In page order: a :class:`Run`, or ``(PATH, TEXT)`` written at that point.
    steps: list[Run | tuple[str, str]] = field(default_factory=list)
    expect: list[str] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)

    @property
    def commands(self) -> list[tuple[str, int]]:
        return [(s.command, s.code) for s in self.steps if isinstance(s, Run)]


def _block(lines: list[str], i: int) -> tuple[str, int]:
    """The fenced block at or after line ``i``: its text and the line after it."""
    while not FENCE.match(lines[i]):
        i += 1
    start = i = i + 1
    while not FENCE.match(lines[i]):
        i += 1
    return "\n".join(lines[start:i]) + "\n", i + 1


def parse(path: Path) -> list[Example]:
    """The examples marked in the Markdown page ``path``, in the order they first appear."""
    examples: dict[str, Example] = {}
    lines = path.read_text(encoding="utf-8").splitlines()

    def example(name: str) -> Example:
        return examples.setdefault(name, Example(path.name, name))

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
            example(name).steps.append(Run(command, int(code)))
        elif " expect: " in body:
            name, pattern = body.split(" expect: ", 1)
            example(name).expect.append(pattern)
        elif " json: " in body:
            name, check = body.split(" json: ", 1)
            runs = [s for s in example(name).steps if isinstance(s, Run)]
            assert runs, f"{path.name}: `json: {check}` of {name} follows no command"
            runs[-1].json.append(check)
        elif " file: " in body:
            name, rest = body.split(" file: ", 1)
            file, text = rest.split(" = ", 1)
            example(name).results.append((file, text))
        elif " > " in body:
            name, file = body.split(" > ", 1)
            text, i = _block(lines, i)
            example(name).steps.append((file, text))
        else:
            name, file = body.split("/", 1)
            example(name).files[file], i = _block(lines, i)
    return list(examples.values())
