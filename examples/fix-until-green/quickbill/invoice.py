"""Pricing: bulk discounts, subtotal, tax and total of an invoice."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from quickbill.currency import Currency
from quickbill.items import LineItem
from quickbill.money import round_money

BULK_THRESHOLD = 10
"""A line of at least this many units gets the bulk discount."""

BULK_DISCOUNT = Decimal("0.05")
"""The bulk discount, as a fraction of the line's gross amount (5 %)."""


@dataclass(frozen=True)
class InvoiceLine:
    """A priced line item.

    Attributes:
        item: the line item.
        gross: quantity times unit price, rounded to the currency.
        discount: the bulk discount taken off ``gross`` (zero when none applies).
    """

    item: LineItem
    gross: Decimal
    discount: Decimal

    @property
    def total(self) -> Decimal:
        """What the customer pays for this line: gross minus discount."""
        return self.gross - self.discount


@dataclass(frozen=True)
class Invoice:
    """A priced list of line items in one currency.

    Attributes:
        currency: the currency of every amount.
        lines: the priced lines, in input order.
        tax_rate: the tax rate in percent (``Decimal("20")`` for 20 %).
    """

    currency: Currency
    lines: tuple[InvoiceLine, ...]
    tax_rate: Decimal = Decimal(0)

    @property
    def subtotal(self) -> Decimal:
        """The sum of the line totals."""
        return sum((line.total for line in self.lines), Decimal(0))

    @property
    def tax(self) -> Decimal:
        """Tax on the subtotal, rounded to the currency."""
        return round_money(self.subtotal * self.tax_rate / 100, self.currency)

    @property
    def total(self) -> Decimal:
        """Subtotal plus tax."""
        return self.subtotal + self.tax


def price_line(item: LineItem, currency: Currency) -> InvoiceLine:
    """Price one line item, applying the bulk discount from :data:`BULK_THRESHOLD` units on."""
    gross = round_money(item.quantity * item.unit_price, currency)
    discount = Decimal(0)
    if item.quantity > BULK_THRESHOLD:
        discount = round_money(gross * BULK_DISCOUNT, currency)
    return InvoiceLine(item, gross, discount)


def build_invoice(items: Iterable[LineItem], currency: Currency,
                  tax_rate: Decimal = Decimal(0)) -> Invoice:
    """Price every item and gather the lines into an :class:`Invoice`.

    Raises:
        ValueError: when ``tax_rate`` is negative.
    """
    if tax_rate < 0:
        raise ValueError(f"tax rate must not be negative, got {tax_rate}")
    return Invoice(currency, tuple(price_line(item, currency) for item in items), tax_rate)
