"""The command line, called in-process through ``quickbill.cli.main``."""

from __future__ import annotations

from pathlib import Path

import pytest

from quickbill.cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main

SAMPLES = Path(__file__).parent.parent / "samples"


def test_total_prints_the_invoice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["total", "--currency", "EUR", "--tax-rate", "20", str(SAMPLES / "items.csv")]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert "(bulk discount -1.50 EUR)" in out[2]
    assert out[-3:] == ["Subtotal: 80.00 EUR", "Tax (20%): 16.00 EUR", "Total: 96.00 EUR"]


def test_check_reports_problems(capsys: pytest.CaptureFixture[str]) -> None:
    path = SAMPLES / "bad_items.csv"
    assert main(["check", str(path)]) == EXIT_PROBLEMS
    out = capsys.readouterr().out
    assert f"{path}:3: quantity" in out
    assert out.endswith(f"3 problems found in {path}\n")


def test_check_accepts_a_valid_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(SAMPLES / "items.csv")]) == EXIT_OK
    assert "no problems found" in capsys.readouterr().out


def test_unknown_currency_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["total", "--currency", "XYZ", str(SAMPLES / "items.csv")]) == EXIT_USAGE
    assert "unknown currency code 'XYZ'" in capsys.readouterr().err


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nowhere.csv")]) == EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err
