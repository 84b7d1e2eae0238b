"""Lines of the stories and criteria of a canonical JSON PRD.

Every criterion item reports its line (pytest asks an item's location before it runs
it), so a gate over a PRD of thousands of criteria asks for thousands of lines. The
general locator (:class:`pytest_ralph.prd.positions.Positions`) composes the whole file with
PyYAML to place any JSON path; this module places just the paths items ask for,
``$.userStories[i]`` and ``$.userStories[i].acceptanceCriteria[j]``, by walking the
file's structure with the ``json`` module's own C scanner, which skips each value in one
call. Any other path, or a file it cannot walk, goes to the general locator.

No pytest, standard library only.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable

__all__ = ["JSONLines"]

_WS = re.compile(r"[ \t\n\r]*")


class _Unexpected(Exception):
    """The text is not the JSON the walk expects."""


class JSONLines:
    """Finds the 1-based line of a story or criterion of a JSON PRD from its JSON path.

    Args:
        text: the JSON text (JSONC with its comments blanked to spaces, lines kept), as
            parsed into the PRD.
        fallback: called for any other JSON path, or for every path when the text
            cannot be walked; returns the line or ``None``.

    Lines count ``\\n`` characters, as the ``json`` module does in its error messages.
    """

    def __init__(self, text: str, fallback: Callable[[str], int | None]) -> None:
        self._text = text
        self._fallback = fallback
        self._lines: dict[str, int] | None = None

    def __call__(self, json_path: str) -> int | None:
        """The line of ``json_path`` (e.g. ``$.userStories[3].acceptanceCriteria[0]``)."""
        if self._lines is None:
            try:
                self._lines = self._walk()
            except (_Unexpected, ValueError, IndexError, StopIteration):
                self._lines = {}
        line = self._lines.get(json_path)
        return line if line is not None else self._fallback(json_path)

    def _walk(self) -> dict[str, int]:
        """Offsets of the stories and criteria, as lines."""
        text = self._text
        scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]

        def ws(i: int) -> int:
            m = _WS.match(text, i)
            assert m is not None  # it matches the empty string
            return m.end()

        starts: list[tuple[str, int]] = []

        def expect(i: int, char: str) -> int:
            i = ws(i)
            if text[i] != char:
                raise _Unexpected
            return i + 1

        def members(i: int) -> tuple[int, list[tuple[str, int]]]:
            """The members of the object at ``i``: (end, [(key, offset of the value)]),
            each value skipped with the scanner unless the caller walks into it."""
            out: list[tuple[str, int]] = []
            i = expect(i, "{")
            i = ws(i)
            if text[i] == "}":
                return i + 1, out
            while True:
                key, i = scan(text, ws(i))
                if not isinstance(key, str):
                    raise _Unexpected
                i = ws(expect(i, ":"))
                out.append((key, i))
                _, i = scan(text, i)
                i = ws(i)
                if text[i] == "}":
                    return i + 1, out
                if text[i] != ",":
                    raise _Unexpected
                i += 1

        def elements(i: int) -> list[int]:
            """Offsets of the elements of the array at ``i``."""
            out: list[int] = []
            i = ws(expect(i, "["))
            if text[i] == "]":
                return out
            while True:
                i = ws(i)
                out.append(i)
                _, i = scan(text, i)
                i = ws(i)
                if text[i] == "]":
                    return out
                if text[i] != ",":
                    raise _Unexpected
                i += 1

        _, top = members(0)
        stories = [offset for key, offset in top if key == "userStories"]
        if len(stories) != 1:
            raise _Unexpected
        for s, story_at in enumerate(elements(stories[0])):
            sp = f"$.userStories[{s}]"
            starts.append((sp, story_at))
            _, fields = members(story_at)
            for key, at in fields:
                if key == "acceptanceCriteria" and text[at] == "[":
                    starts += [(f"{sp}.acceptanceCriteria[{c}]", offset)
                               for c, offset in enumerate(elements(at))]
        lines: dict[str, int] = {}
        line, last = 1, 0
        for jp, offset in sorted(starts, key=lambda pair: pair[1]):
            line += text.count("\n", last, offset)
            last = offset
            lines[jp] = line
        return lines
