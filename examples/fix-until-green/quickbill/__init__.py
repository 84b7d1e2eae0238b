"""quickbill: price a list of line items read from a CSV file.

A small invoicing library: currencies and their minor units, money rounding and
formatting, CSV line items with validation, bulk discounts and tax, and a command
line (``python -m quickbill``).
"""

from __future__ import annotations

from quickbill.currency import CURRENCIES, Currency, UnknownCurrencyError, get_currency
from quickbill.invoice import (
    BULK_DISCOUNT,
    BULK_THRESHOLD,
    Invoice,
    InvoiceLine,
    build_invoice,
    price_line,
)
from quickbill.items import ItemError, LineItem, check_items, read_items
from quickbill.money import format_money, parse_amount, round_money

__all__ = [
    "BULK_DISCOUNT",
    "BULK_THRESHOLD",
    "CURRENCIES",
    "Currency",
    "Invoice",
    "InvoiceLine",
    "ItemError",
    "LineItem",
    "UnknownCurrencyError",
    "build_invoice",
    "check_items",
    "format_money",
    "get_currency",
    "parse_amount",
    "price_line",
    "read_items",
    "round_money",
]

__version__ = "1.0.0"
