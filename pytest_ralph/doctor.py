"""Placeholder until the doctor lands."""

from __future__ import annotations

from pathlib import Path


def doctor(rootdir: Path) -> tuple[int, str]:
    """Check the Claude Code wiring of ``rootdir``."""
    return 0, f"pytest-ralph: doctor not written yet ({rootdir})"
