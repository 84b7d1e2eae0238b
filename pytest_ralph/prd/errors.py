"""What is wrong with a PRD file: :class:`Problem`, :class:`PRDError`, and the limits on a
PRD's size and shape that loading enforces (each one a problem when a file goes past it).

This module imports nothing of the package: every other module of :mod:`pytest_ralph.prd`
reports through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Most values (strings, numbers, lists, mappings...) a PRD may hold; a PRD of 20,000
#: criteria holds about 100,000. At this many, loading takes seconds and hundreds of MB
#: (placing items and problems in the file); far beyond it, minutes and gigabytes.
MAX_VALUES = 500_000

#: Most problems one PRDError lists (the schema stops looking after this many).
MAX_PROBLEMS = 50

#: Deepest nesting of arrays and objects accepted in a PRD (a canonical PRD needs 5).
MAX_DEPTH = 64

#: YAML aliases may repeat values; more than this many values after expansion, and more
#: than :data:`ALIAS_EXPANSION` times the values written, is refused ("billion laughs").
MAX_EXPANDED_VALUES = 100_000

#: See :data:`MAX_EXPANDED_VALUES`.
ALIAS_EXPANSION = 10


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a PRD file.

    Attributes:
        json_path: where, as a JSON path (``$.userStories[1].id``); ``$`` for the whole file.
        message: what was expected and what was found.
        line: 1-based line, when known.
        column: 1-based column, when known.
        hint: how to fix it, or ``""``.
    """

    json_path: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str = ""

    def format(self, path: Path | str) -> str:
        """``file:line:column: json_path: message`` (parts that are unknown are left out)."""
        where = str(path)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: {self.json_path}: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text


class PRDError(Exception):
    """A PRD file that cannot be used; carries every problem found.

    Attributes:
        path: the PRD file.
        problems: the problems, in file order where positions are known.
    """

    def __init__(self, path: Path | str, problems: list[Problem]) -> None:
        self.path = Path(path)
        self.problems = problems
        super().__init__(self.describe())

    def describe(self) -> str:
        """A multi-line message: a header naming the file, then one entry per problem."""
        n = len(self.problems)
        head = f"invalid PRD {self.path}: {n} problem{'s' if n != 1 else ''}"
        if n > MAX_PROBLEMS:  # the last entry says the list was cut
            head = (f"invalid PRD {self.path}: more than {MAX_PROBLEMS} problems, the first "
                    "shown")
        return "\n".join([head, *("  " + p.format(self.path) for p in self.problems)])


def too_many_values() -> Problem:
    """The problem of a file that holds more than :data:`MAX_VALUES` values."""
    return Problem("$", f"the file holds more than {MAX_VALUES:,} values; expected a PRD "
                   "under that", hint="split the PRD into several files")
