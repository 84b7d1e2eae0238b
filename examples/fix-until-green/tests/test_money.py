"""Parsing, rounding and formatting amounts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quickbill.currency import CURRENCIES
from quickbill.money import format_money, parse_amount, round_money

EUR = CURRENCIES["EUR"]
JPY = CURRENCIES["JPY"]
KWD = CURRENCIES["KWD"]


@pytest.mark.parametrize(("text", "expected"), [("12.50", "12.50"), (" -3 ", "-3"), ("0.005", "0.005")])
def test_parse_amount(text: str, expected: str) -> None:
    assert parse_amount(text) == Decimal(expected)


@pytest.mark.parametrize("text", ["", "twelve", "1.2.3", "NaN", "Infinity"])
def test_parse_amount_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="not an amount"):
        parse_amount(text)


@pytest.mark.parametrize(("amount", "expected"), [
    ("0.135", "0.14"),
    ("0.125", "0.13"),
    ("2.345", "2.35"),
    ("-0.125", "-0.13"),
    ("7.994", "7.99"),
])
def test_round_half_up(amount: str, expected: str) -> None:
    assert round_money(Decimal(amount), EUR) == Decimal(expected)


def test_round_to_minor_units() -> None:
    assert round_money(Decimal("1234.4"), JPY) == Decimal("1234")
    assert round_money(Decimal("1.23456"), KWD) == Decimal("1.235")
    assert round_money(Decimal("3"), EUR) == Decimal("3.00")
    assert str(round_money(Decimal("3"), EUR)) == "3.00"


def test_format_money() -> None:
    assert format_money(Decimal("12.5"), EUR) == "12.50 EUR"
    assert format_money(Decimal("1250.4"), JPY) == "1250 JPY"
    assert format_money(Decimal("-0.001"), EUR) == "0.00 EUR"
