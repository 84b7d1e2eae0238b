"""Looking up currencies by code."""

from __future__ import annotations

import pytest

from quickbill.currency import CURRENCIES, UnknownCurrencyError, get_currency


def test_get_currency_by_code() -> None:
    euro = get_currency("EUR")
    assert (euro.code, euro.minor_units, euro.name) == ("EUR", 2, "Euro")
    assert get_currency("JPY").minor_units == 0


def test_surrounding_spaces_are_ignored() -> None:
    assert get_currency(" GBP ") is CURRENCIES["GBP"]


def test_currency_code_is_case_insensitive() -> None:
    assert get_currency("eur") is CURRENCIES["EUR"]
    assert get_currency("Usd") is CURRENCIES["USD"]


def test_unknown_currency_is_rejected() -> None:
    with pytest.raises(UnknownCurrencyError, match="unknown currency code 'XYZ'") as info:
        get_currency("XYZ")
    assert info.value.code == "XYZ"
