"""Fixtures of the parallel-stories tests."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def base() -> Iterator[Path]:
    """A new folder outside ``/tmp`` (which a confined command gets a private copy of), for a
    repository and a home folder, as a user's are; removed afterwards."""
    folder = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"
    folder.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(dir=folder))
    yield made
    shutil.rmtree(made, ignore_errors=True)
