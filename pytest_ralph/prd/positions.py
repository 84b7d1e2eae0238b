"""Where a value is in a PRD file: the JSON-path -> (line, column) locator of the file as
written (:class:`Positions`), its view through a dialect's renames (:class:`Locator`), and
:func:`strip_jsonc`, which makes JSONC text JSON with the same lines and columns.

Loading, validation and write-back place their problems and edits with these.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .dialects import Origin, json_path, source_path

if TYPE_CHECKING:
    import yaml


def strip_jsonc(text: str) -> str:
    """Blank out ``//`` and ``/* */`` comments and trailing commas of JSONC text.

    Every removed character becomes a space (newlines are kept), so line and column
    numbers of the result match the original. Strings are left untouched. A comma is a
    trailing one when a value comes before it (``[1,]``, not ``[,]`` or ``[1,,]``, which stay
    errors); an unterminated ``/*`` is left as it is, so that parsing fails there.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma: int | None = None
    after_value = False  # the last significant character ends a value
    while i < n:
        ch = text[i]
        if ch == '"':
            last_comma = None
            after_value = True
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] not in "\r\n":
                out[i] = " "
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:  # unterminated: keep it, the parser reports it
                break
            for j in range(i, end + 2):
                if out[j] != "\n":
                    out[j] = " "
            i = end + 2
            continue
        if ch == ",":
            last_comma = i if after_value else None
            after_value = False
        elif ch in "}]":
            if last_comma is not None:
                out[last_comma] = " "
            last_comma = None
            after_value = True
        elif ch in "[{:":
            last_comma = None
            after_value = False
        elif not ch.isspace():
            last_comma = None
            after_value = True
        i += 1
    return "".join(out)


_YAML_UNSAFE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")

#: A ``\uD800``-``\uDFFF`` escape of a JSON string (half of a UTF-16 surrogate pair, or an
#: unpaired one): an odd number of backslashes before the ``u``. Group 1 is the even run of
#: escaped backslashes in front of it.
_LONE_CR = re.compile(r"\r(?!\n)")

_SURROGATE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")

#: What replaces a surrogate escape for composing: an escape of the same length ("X").
_SURROGATE_PLACEHOLDER = r"\u0058"


class Positions:
    """Maps JSON paths to (line, column), computed lazily from a YAML node tree.

    JSON is (for our purposes) a subset of YAML, so PyYAML's composer gives the
    positions of JSON and YAML files alike. When composing fails, positions are unknown.
    """

    def __init__(self, text: str, fmt: str) -> None:
        self._source = text
        self._fmt = fmt
        self._text = ""
        #: The JSON text before the edits of :meth:`_prepare`, when they changed it: keys are
        #: read from it.
        self._json: str | None = None
        #: JSON path -> (line, column, index in the text)
        self._map: dict[str, tuple[int, int, int]] | None = None
        self._dups: list[tuple[str, str]] = []
        self._walked: set[int] = set()

    def _prepare(self) -> None:
        """The text to compose: JSONC comments blanked, and JSON made YAML's."""
        self._text = strip_jsonc(self._source) if self._fmt == "jsonc" else self._source
        if self._fmt != "yaml":
            source = self._text
            # YAML breaks lines at NEL/LS/PS and refuses non-printables; JSON allows them in
            # strings. Blank them (same length) so lines match json's and composing works.
            self._text = _YAML_UNSAFE.sub(" ", self._text)
            # json counts lines at "\n" only; YAML also breaks at a lone "\r" (whitespace
            # in JSON: a raw CR cannot be inside a JSON string).
            self._text = _LONE_CR.sub(" ", self._text)
            # libyaml refuses surrogate escapes, even a valid pair such as "\ud83d\ude00"
            # (one emoji in JSON): write each as an escape of "X" of the same length.
            self._text = _SURROGATE_ESCAPE.sub(
                lambda m: m.group(1) + _SURROGATE_PLACEHOLDER, self._text)
            if self._text != source:
                self._json = source

    def _build(self) -> dict[str, tuple[int, int, int]]:
        if self._map is None:
            import yaml

            from .yamlload import YAML_LOADER

            self._prepare()
            self._map = {}
            try:
                node = yaml.compose(self._text, Loader=YAML_LOADER)
            except (yaml.YAMLError, RecursionError):
                node = None
            if node is not None:
                self._walk(node, "$")
        return self._map

    def _walk(self, node: yaml.Node, jp: str) -> None:
        import yaml

        assert self._map is not None
        self._map[jp] = (node.start_mark.line + 1, node.start_mark.column + 1,
                         node.start_mark.index)
        if isinstance(node, yaml.CollectionNode):
            if id(node) in self._walked:  # a YAML alias: may be recursive or exponential
                return
            self._walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                name = self._key_name(key)
                child = f"{jp}.{name}" if re.fullmatch(r"[A-Za-z_]\w*", name) else (
                    f"{jp}[{json.dumps(name)}]")
                if name in seen:
                    self._dups.append((child, name))
                    self._map.setdefault(child + "#dup", (key.start_mark.line + 1,
                                                          key.start_mark.column + 1,
                                                          key.start_mark.index))
                seen.add(name)
                self._walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, f"{jp}[{i}]")

    def _key_name(self, key: yaml.Node) -> str:
        import yaml

        """The name of a mapping key; a JSON key that the edits of ``__init__`` touched is
        decoded from the JSON text, so that its name is the one ``json.loads`` gives."""
        name = str(key.value)
        if self._json is not None and isinstance(key, yaml.ScalarNode) and key.style == '"':
            start, end = key.start_mark.index, key.end_mark.index
            if self._json[start:end] != self._text[start:end]:
                with contextlib.suppress(ValueError):
                    name = str(json.loads(self._json[start:end]))
        return name

    def at(self, jp: str) -> tuple[int | None, int | None]:
        """(line, column) of the value at ``jp``, or ``(None, None)``."""
        m = self._build()
        pos = m.get(jp + "#dup") or m.get(jp)
        return (pos[0], pos[1]) if pos else (None, None)

    def offset(self, jp: str) -> int | None:
        """The index in the text (in characters) where the value at ``jp`` starts, or
        ``None``. Unlike (line, column), it does not depend on which characters count as
        line breaks (YAML also breaks at a lone CR, NEL, LS and PS)."""
        pos = self._build().get(jp)
        return pos[2] if pos else None

    def duplicate_keys(self) -> list[tuple[str, str]]:
        """(JSON path, key) of every repeated key in an object."""
        self._build()
        return list(self._dups)


class Locator:
    """Where a path of the normalized data is in the file: its JSON path as written (see
    :func:`pytest_ralph.prd.dialects.source_path`) and its (line, column).

    Args:
        positions: the locator of the file as written.
        origins: where each normalized story came from (:attr:`Normalized.origins`).
        raw: the parsed data as written (before normalization).
        lines: finds the line of a JSON path faster than ``positions`` (the canonical fast
            path's :class:`~pytest_ralph.prd.lines.JSONLines`), or ``None``.
    """

    def __init__(self, positions: Positions, origins: tuple[Origin, ...], raw: Any,
                 lines: Callable[[str], int | None] | None = None) -> None:
        self.positions = positions
        self.origins = origins
        self._raw = raw
        self._lines = lines

    def path(self, parts: Iterable[str | int]) -> str:
        """The JSON path in the file of the normalized ``parts``."""
        return json_path(source_path(tuple(parts), self.origins))

    def line(self, jp: str) -> int | None:
        """The line of the JSON path ``jp`` (in the file as written), or ``None``."""
        if self._lines is not None:
            return self._lines(jp)
        return self.positions.at(jp)[0]

    def at(self, parts: Iterable[str | int]) -> tuple[str, int | None, int | None]:
        """(JSON path in the file, line, column) of the normalized ``parts``."""
        jp = self.path(parts)
        return (jp, *self.positions.at(jp))

    def raw(self, parts: Iterable[str | int]) -> Any:
        """The value in the file (before normalization) at the normalized ``parts``, or
        ``None`` when there is none."""
        value = self._raw
        for part in source_path(tuple(parts), self.origins):
            try:
                value = value[part]
            except (LookupError, TypeError):
                return None
        return value
