"""Line items and the CSV files they are read from.

A line-item file is a CSV file with a header row naming at least the columns
``description``, ``quantity`` and ``unit_price``; other columns are ignored, and
so are blank lines::

    description,quantity,unit_price
    Notebook,3,4.20
    Fountain pen,1,35.00
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from quickbill.money import parse_amount

COLUMNS = ("description", "quantity", "unit_price")
"""The columns a line-item file must have."""


@dataclass(frozen=True)
class LineItem:
    """One line of an invoice before pricing.

    Attributes:
        description: what is sold.
        quantity: how many units, at least 1.
        unit_price: the price of one unit, never negative.
    """

    description: str
    quantity: int
    unit_price: Decimal


class ItemError(ValueError):
    """A problem in a line-item file, located by file and line number."""

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        super().__init__(f"{self.path}:{line}: {message}")


def parse_row(row: dict[str, str], *, path: str | Path, line: int) -> LineItem:
    """Turn one CSV row into a :class:`LineItem`.

    Raises:
        ItemError: when a field is empty or out of range.
    """
    description = (row.get("description") or "").strip()
    if not description:
        raise ItemError(path, line, "description is empty")
    quantity_text = (row.get("quantity") or "").strip()
    if not quantity_text.isdigit() or int(quantity_text) < 1:
        raise ItemError(path, line,
                        f"quantity must be a whole number of at least 1, got {quantity_text!r}")
    try:
        unit_price = parse_amount(row.get("unit_price") or "")
    except ValueError as error:
        raise ItemError(path, line, f"unit_price: {error}") from None
    if unit_price < 0:
        raise ItemError(path, line, f"unit_price must not be negative, got {unit_price}")
    return LineItem(description, int(quantity_text), unit_price)


def iter_rows(path: str | Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, row)`` for each non-blank data row of a line-item file.

    Raises:
        ItemError: when the header lacks one of :data:`COLUMNS`.
        OSError: when the file cannot be read.
    """
    with open(path, newline="", encoding="utf-8") as stream:
        reader = csv.DictReader(stream)
        header = [name.strip() for name in reader.fieldnames or []]
        missing = [name for name in COLUMNS if name not in header]
        if missing:
            raise ItemError(path, 1, f"missing column(s) {', '.join(missing)} in the header")
        reader.fieldnames = header
        for row in reader:
            values = [value for key, value in row.items() if key is not None]
            if all(not (value or "").strip() for value in values):
                continue
            yield reader.line_num, row


def read_items(path: str | Path) -> list[LineItem]:
    """Read every line item of a file, in file order.

    Raises:
        ItemError: at the first invalid row.
        OSError: when the file cannot be read.
    """
    return [parse_row(row, path=path, line=line) for line, row in iter_rows(path)]


def check_items(path: str | Path) -> list[ItemError]:
    """Return every problem in a line-item file (an empty list when it is valid).

    Raises:
        OSError: when the file cannot be read.
    """
    problems: list[ItemError] = []
    try:
        for line, row in iter_rows(path):
            try:
                parse_row(row, path=path, line=line)
            except ItemError as problem:
                problems.append(problem)
    except ItemError as problem:  # a bad header: nothing else can be checked
        problems.append(problem)
    return problems
