"""Currencies that quickbill knows, keyed by their ISO 4217 code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Currency:
    """An ISO 4217 currency.

    Attributes:
        code: the three-letter code, upper case (``"EUR"``).
        minor_units: digits after the decimal point (2 for cents, 0 for the yen).
        name: the English name, for messages.
    """

    code: str
    minor_units: int
    name: str


CURRENCIES: dict[str, Currency] = {
    currency.code: currency
    for currency in (
        Currency("CHF", 2, "Swiss franc"),
        Currency("EUR", 2, "Euro"),
        Currency("GBP", 2, "Pound sterling"),
        Currency("JPY", 0, "Japanese yen"),
        Currency("KWD", 3, "Kuwaiti dinar"),
        Currency("USD", 2, "US dollar"),
    )
}
"""Every supported currency, keyed by its upper-case code."""


class UnknownCurrencyError(ValueError):
    """Raised for a currency code that is not in :data:`CURRENCIES`."""

    def __init__(self, code: str) -> None:
        self.code = code
        known = ", ".join(sorted(CURRENCIES))
        super().__init__(f"unknown currency code {code!r} (known: {known})")


def get_currency(code: str) -> Currency:
    """Return the currency for ``code``.

    Codes are case-insensitive and surrounding spaces are ignored, so ``"eur"``,
    ``" EUR "`` and ``"Eur"`` all name the euro.

    Raises:
        UnknownCurrencyError: when no currency has that code.
    """
    key = code.strip()
    try:
        return CURRENCIES[key]
    except KeyError:
        raise UnknownCurrencyError(code) from None
