"""The tests that run real bubblewrap: :func:`require_bwrap`, called at a module's top, skips the
module off Linux or without ``bwrap`` and, under CI (``CI`` set), fails it instead of skipping
when ``bwrap`` is missing (CI must install it: ``apt-get install -y bubblewrap``)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest


def require_bwrap() -> None:
    """Skip (or, under CI, fail) the calling test module when bubblewrap cannot run here.

    Raises:
        RuntimeError: under CI, ``bwrap`` is not installed.
    """
    if sys.platform != "linux":  # pragma: no cover - bubblewrap is Linux's
        pytest.skip("bubblewrap confines commands on Linux only", allow_module_level=True)
    if shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            raise RuntimeError("bubblewrap is not installed: CI must install it "
                               "(apt-get install -y bubblewrap)")
        pytest.skip("bubblewrap is not installed", allow_module_level=True)
