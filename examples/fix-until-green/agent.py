"""A scripted stand-in for a coding agent, for the fix-until-green example.

``pytest --ralph`` runs ``python agent.py`` with the prompt on stdin (a prompt file
given as the first argument is read instead). The agent behaves like a very
narrow-minded developer:

1. it finds the ``## Failing acceptance criteria`` section of the prompt and, in
   it, the first criterion (a line ``- [US-002::AC1] <text>``);
2. it reads that criterion's ``failure (excerpt):`` block, the tail of the failing
   check's output, and looks there for the names of failing tests it knows or,
   failing that, for the functions or command output it knows;
3. it applies the one matching fix, an exact text replacement in the quickbill
   sources, and stops.

It never guesses: no failing criterion, no excerpt, an excerpt it does not
recognize, or a buggy snippet that is no longer there (already fixed) all mean
that it changes nothing. It prints one line saying what it did and exits 0.
Standard library only.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
"""The example folder: fixes are applied to the sources next to this script."""

SECTION = "## Failing acceptance criteria"
CRITERION = re.compile(r"^ {0,3}- \[(?P<key>[^\]]*::[^\]]*)\]\s*(?P<text>.*)$")
EXCERPT = re.compile(r"^\s*failure \(excerpt\):\s*(?P<rest>.*)$")


@dataclass(frozen=True)
class Fix:
    """One known bug and its repair.

    Attributes:
        what: a short name for the fix, for the report line.
        file: the source file, relative to the example folder.
        tests: names of the tests that fail because of the bug.
        clues: regular expressions for other traces of the bug in a failure
            output (function names, command output), used when no test is named.
        old: the buggy snippet, exactly as it appears in the file.
        new: the fixed snippet.
    """

    what: str
    file: str
    tests: tuple[str, ...]
    clues: tuple[str, ...]
    old: str
    new: str


FIXES: tuple[Fix, ...] = (
    Fix(
        what="half-up rounding",
        file="quickbill/money.py",
        tests=("test_round_half_up",),
        clues=(r"\bround_money\(",),
        old="ROUNDING = decimal.ROUND_HALF_EVEN\n",
        new="ROUNDING = decimal.ROUND_HALF_UP\n",
    ),
    Fix(
        what="case-insensitive currency lookup",
        file="quickbill/currency.py",
        tests=("test_currency_code_is_case_insensitive",),
        clues=(r"\bUnknownCurrencyError\b", r"unknown currency code '[a-z]"),
        old="    key = code.strip()\n",
        new="    key = code.strip().upper()\n",
    ),
    Fix(
        what="off-by-one bulk discount threshold",
        file="quickbill/invoice.py",
        tests=("test_bulk_discount_starts_at_threshold",),
        clues=(r"\bprice_line\(",),
        old="    if item.quantity > BULK_THRESHOLD:\n",
        new="    if item.quantity >= BULK_THRESHOLD:\n",
    ),
    Fix(
        what="exit status of `python -m quickbill`",
        file="quickbill/__main__.py",
        tests=(),
        clues=(r"\b\d+ problems? found in ",),
        old='if __name__ == "__main__":\n    main()\n',
        new='if __name__ == "__main__":\n    raise SystemExit(main())\n',
    ),
)


def first_failing_criterion(prompt: str) -> tuple[str, str] | None:
    """Return ``(key, excerpt)`` of the first failing criterion of the prompt.

    The excerpt is the dedented ``failure (excerpt):`` block of that criterion, or
    ``""`` when it has none. Returns None when the prompt has no failing criteria
    section or the section lists no criterion.
    """
    lines = prompt.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(SECTION)), None)
    if start is None:
        return None
    section: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        section.append(line)
    first = next((i for i, line in enumerate(section) if CRITERION.match(line)), None)
    if first is None:
        return None
    match = CRITERION.match(section[first])
    assert match is not None
    block: list[str] = []
    for line in section[first + 1:]:
        if CRITERION.match(line):
            break
        block.append(line)
    for i, line in enumerate(block):
        found = EXCERPT.match(line)
        if found:
            body = textwrap.dedent("\n".join(block[i + 1:]))
            excerpt = "\n".join(part for part in (found["rest"], body) if part.strip())
            return match["key"], excerpt.strip("\n")
    return match["key"], ""


def choose_fix(excerpt: str) -> Fix | None:
    """Pick the fix that the failure excerpt points to.

    A failing test named in the excerpt decides first; otherwise the other clues
    (function names, command output) do. When several fixes match, the one whose
    trace comes first in the excerpt wins.
    """
    for patterns_of in (lambda fix: [rf"\b{re.escape(name)}\b" for name in fix.tests],
                        lambda fix: list(fix.clues)):
        hits: list[tuple[int, int]] = []
        for index, fix in enumerate(FIXES):
            positions = [m.start() for p in patterns_of(fix) if (m := re.search(p, excerpt))]
            if positions:
                hits.append((min(positions), index))
        if hits:
            return FIXES[min(hits)[1]]
    return None


def apply_fix(fix: Fix) -> bool:
    """Replace the buggy snippet by the fixed one; False when the snippet is not there once."""
    path = HERE / fix.file
    with open(path, encoding="utf-8", newline="") as stream:
        source = stream.read()
    if source.count(fix.old) != 1:
        return False
    with open(path, "w", encoding="utf-8", newline="") as stream:
        stream.write(source.replace(fix.old, fix.new))
    return True


def run(prompt: str) -> str:
    """Act on ``prompt`` and return the one-line report."""
    criterion = first_failing_criterion(prompt)
    if criterion is None:
        return "agent: nothing to fix (the prompt lists no failing acceptance criteria)"
    key, excerpt = criterion
    if not excerpt.strip():
        return f"agent: nothing to fix for {key} (no failure excerpt)"
    fix = choose_fix(excerpt)
    if fix is None:
        return f"agent: nothing to fix for {key} (the failure excerpt matches no known bug)"
    if not apply_fix(fix):
        return (f"agent: nothing to fix for {key} "
                f"({fix.what}: the buggy snippet is not in {fix.file})")
    return f"agent: fixed {fix.what} in {fix.file} for {key}"


def main(argv: list[str]) -> int:
    """Read the prompt (stdin, or the file named by the first argument), act, report."""
    if len(argv) > 1:
        data = Path(argv[1]).read_bytes()
    else:
        data = sys.stdin.buffer.read()
    print(run(data.decode("utf-8", errors="replace")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
