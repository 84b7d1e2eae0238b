"""The names of parallel stories' lanes: a story or run id made one valid component of a git
ref name and of a folder name.

:func:`lane_key` is the one place that makes such a name; the plan's branches
(:func:`pytest_ralph.parallel.plan.branch_name`, ``ralph/<key>``) and the lanes of a local run
(:mod:`pytest_ralph.parallel.worktrees`, ``ralph/<run>/<key>``) are both built from it.

Standard library only; this module does not import pytest.
"""

from __future__ import annotations

import re
import unicodedata
import zlib

__all__ = ["BRANCH_PREFIX", "INTEGRATION", "KEY_LENGTH", "lane_key"]

#: The prefix of every branch of a parallel run: ``ralph/<key>`` or ``ralph/<run>/<key>``.
BRANCH_PREFIX = "ralph"

#: The last component of a run's integration branch, ``ralph/<run>/integration``, and the name
#: of its worktree folder (:mod:`pytest_ralph.parallel.queue`); never a lane's key.
INTEGRATION = "integration"

#: Longest :func:`lane_key`, in characters (a short hash included when it was cut).
KEY_LENGTH = 64

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def lane_key(name: str) -> str:
    """``name`` (a story or run id) as one valid component of a ref name and a folder name:
    letters, digits, ``.``, ``_`` and ``-`` only, no ``..``, no leading or trailing ``.`` or
    ``-``, no trailing ``.lock``, at most :data:`KEY_LENGTH` characters. Accented letters lose
    their accents; any other character becomes ``-``. A name that had to change gets
    ``-<8 hex digits>`` of a CRC-32 of the original (UTF-8), so that two ids never share a
    key by accident (``"US 1"`` and ``"US-1"`` differ). ``US-001`` stays ``US-001``.
    Deterministic: the same id gives the same key on every machine."""
    plain = unicodedata.normalize("NFKD", name)
    plain = "".join(c for c in plain if not unicodedata.combining(c))
    key = _UNSAFE.sub("-", plain)
    key = re.sub(r"\.{2,}", ".", key)
    key = re.sub(r"-{2,}", "-", key).strip(".-")
    while key.endswith(".lock"):
        key = key[: -len(".lock")].rstrip(".-")
    if key == name and 0 < len(key) <= KEY_LENGTH:
        return key
    digest = f"{zlib.crc32(name.encode('utf-8', 'surrogatepass')):08x}"
    return f"{key[: KEY_LENGTH - 9].rstrip('.-')}-{digest}" if key else digest
