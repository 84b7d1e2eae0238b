"""Amounts of money: parsing, rounding to a currency's minor unit, formatting.

Amounts are always :class:`decimal.Decimal`, never ``float``.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

from quickbill.currency import Currency

#: Rounding used for every amount: commercial rounding, halves go away from zero
#: (0.125 EUR -> 0.13 EUR, -0.125 EUR -> -0.13 EUR).
ROUNDING = decimal.ROUND_HALF_EVEN


def parse_amount(text: str) -> Decimal:
    """Parse a decimal amount such as ``"12.50"`` or ``" -3 "``.

    Raises:
        ValueError: when ``text`` is not a finite decimal number.
    """
    try:
        amount = Decimal(text.strip())
    except decimal.InvalidOperation:
        raise ValueError(f"not an amount: {text!r}") from None
    if not amount.is_finite():
        raise ValueError(f"not an amount: {text!r}")
    return amount


def round_money(amount: Decimal, currency: Currency) -> Decimal:
    """Round ``amount`` to the minor unit of ``currency`` (cents for EUR, whole yen for JPY)."""
    exponent = Decimal(1).scaleb(-currency.minor_units)
    return amount.quantize(exponent, rounding=ROUNDING)


def format_money(amount: Decimal, currency: Currency) -> str:
    """Format ``amount`` rounded to ``currency``, followed by its code: ``"12.50 EUR"``."""
    rounded = round_money(amount, currency)
    if rounded == 0:
        rounded = abs(rounded)  # no "-0.00"
    return f"{rounded:.{currency.minor_units}f} {currency.code}"
