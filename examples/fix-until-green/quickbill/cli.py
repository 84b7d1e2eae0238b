"""The ``quickbill`` command line.

::

    python -m quickbill total [--currency CODE] [--tax-rate PERCENT] FILE
    python -m quickbill check FILE

Exit status: 0 on success, 1 when the line-item file has problems, 2 on a usage
error (bad option, unknown currency, unreadable file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from quickbill import __version__
from quickbill.currency import UnknownCurrencyError, get_currency
from quickbill.invoice import Invoice, build_invoice
from quickbill.items import ItemError, check_items, read_items
from quickbill.money import format_money, parse_amount

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quickbill",
                                     description="Price line items read from a CSV file.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    total = commands.add_parser("total", help="print the priced invoice and its total")
    total.add_argument("--currency", default="EUR", metavar="CODE",
                       help="ISO 4217 currency code, any case (default: EUR)")
    total.add_argument("--tax-rate", default="0", metavar="PERCENT",
                       help="tax rate in percent (default: 0)")
    total.add_argument("file", metavar="FILE", help="CSV file of line items")

    check = commands.add_parser("check", help="report every problem in a line-item file")
    check.add_argument("file", metavar="FILE", help="CSV file of line items")
    return parser


def render_invoice(invoice: Invoice) -> list[str]:
    """Return the lines that ``quickbill total`` prints for ``invoice``."""
    money = invoice.currency
    out: list[str] = []
    for line in invoice.lines:
        text = (f"{line.item.description:<24} {line.item.quantity:>4} x "
                f"{format_money(line.item.unit_price, money):>12}  "
                f"{format_money(line.total, money):>14}")
        if line.discount:
            text += f"  (bulk discount -{format_money(line.discount, money)})"
        out.append(text)
    rate = format(invoice.tax_rate.normalize(), "f")
    out.append(f"Subtotal: {format_money(invoice.subtotal, money)}")
    out.append(f"Tax ({rate}%): {format_money(invoice.tax, money)}")
    out.append(f"Total: {format_money(invoice.total, money)}")
    return out


def _error(message: str) -> None:
    print(f"quickbill: {message}", file=sys.stderr)


def _run_total(args: argparse.Namespace) -> int:
    try:
        currency = get_currency(args.currency)
        tax_rate = parse_amount(args.tax_rate)
    except (UnknownCurrencyError, ValueError) as error:
        _error(str(error))
        return EXIT_USAGE
    try:
        items = read_items(args.file)
    except ItemError as error:
        _error(str(error))
        return EXIT_PROBLEMS
    except OSError as error:
        _error(f"cannot read {args.file}: {error.strerror or error}")
        return EXIT_USAGE
    try:
        invoice = build_invoice(items, currency, tax_rate)
    except ValueError as error:
        _error(str(error))
        return EXIT_USAGE
    print("\n".join(render_invoice(invoice)))
    return EXIT_OK


def _run_check(args: argparse.Namespace) -> int:
    try:
        problems = check_items(args.file)
    except OSError as error:
        _error(f"cannot read {args.file}: {error.strerror or error}")
        return EXIT_USAGE
    for problem in problems:
        print(problem)
    if problems:
        count = len(problems)
        print(f"{count} problem{'s' if count != 1 else ''} found in {args.file}")
        return EXIT_PROBLEMS
    print(f"{args.file}: no problems found")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    args = _build_parser().parse_args(argv)
    if args.command == "total":
        return _run_total(args)
    return _run_check(args)
