"""Bulk discounts, tax and totals."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quickbill.currency import CURRENCIES
from quickbill.invoice import BULK_THRESHOLD, build_invoice, price_line
from quickbill.items import LineItem

EUR = CURRENCIES["EUR"]


def test_no_bulk_discount_below_threshold() -> None:
    line = price_line(LineItem("Pen", BULK_THRESHOLD - 1, Decimal("9.90")), EUR)
    assert (line.gross, line.discount, line.total) == (Decimal("89.10"), Decimal("0"), Decimal("89.10"))


def test_bulk_discount_starts_at_threshold() -> None:
    line = price_line(LineItem("Pen", BULK_THRESHOLD, Decimal("9.90")), EUR)
    assert line.discount == Decimal("4.95")
    assert line.total == Decimal("94.05")


def test_bulk_discount_above_threshold() -> None:
    line = price_line(LineItem("Ink cartridge", 12, Decimal("2.50")), EUR)
    assert (line.gross, line.discount, line.total) == (Decimal("30.00"), Decimal("1.50"), Decimal("28.50"))


def test_invoice_totals() -> None:
    items = [LineItem("Notebook", 3, Decimal("4.20")), LineItem("Stapler", 1, Decimal("9.99"))]
    invoice = build_invoice(items, EUR, tax_rate=Decimal("20"))
    assert invoice.subtotal == Decimal("22.59")
    assert invoice.tax == Decimal("4.52")
    assert invoice.total == Decimal("27.11")


def test_empty_invoice() -> None:
    invoice = build_invoice([], EUR)
    assert (invoice.subtotal, invoice.tax, invoice.total) == (0, 0, 0)


def test_negative_tax_rate_is_rejected() -> None:
    with pytest.raises(ValueError, match="tax rate"):
        build_invoice([], EUR, tax_rate=Decimal("-1"))
