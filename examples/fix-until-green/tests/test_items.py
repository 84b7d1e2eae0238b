"""Reading and checking line-item files."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from quickbill.items import ItemError, LineItem, check_items, read_items


def write_csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "items.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_read_items_parses_rows(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "description,quantity,unit_price\nNotebook,3,4.20\nFountain pen,1,35.00\n")
    assert read_items(path) == [
        LineItem("Notebook", 3, Decimal("4.20")),
        LineItem("Fountain pen", 1, Decimal("35.00")),
    ]


def test_read_items_skips_blank_lines(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "description,quantity,unit_price\n\nNotebook,3,4.20\n,,\n\nStapler,1,9.90\n")
    assert [item.description for item in read_items(path)] == ["Notebook", "Stapler"]


def test_extra_columns_are_ignored(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "sku,description,unit_price,quantity\nN-1,Notebook,4.20,3\n")
    assert read_items(path) == [LineItem("Notebook", 3, Decimal("4.20"))]


def test_read_items_stops_at_the_first_bad_row(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "description,quantity,unit_price\nNotebook,3,4.20\n\nStapler,0,9.90\n")
    with pytest.raises(ItemError) as info:
        read_items(path)
    assert info.value.line == 4
    assert "quantity" in info.value.message


def test_check_items_reports_every_problem() -> None:
    path = Path(__file__).parent.parent / "samples" / "bad_items.csv"
    problems = check_items(path)
    assert [(problem.line, problem.message.split()[0]) for problem in problems] == [
        (3, "quantity"), (4, "quantity"), (5, "unit_price"),
    ]


def test_missing_column_is_reported(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "description,unit_price\nNotebook,4.20\n")
    [problem] = check_items(path)
    assert problem.line == 1
    assert "quantity" in problem.message
