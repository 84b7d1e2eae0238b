"""Commands run without root's power over file permissions.

CI runs the suite as root, who reads a file of mode 000 and writes into a folder of mode 555;
the tests of what happens when a file cannot be read must still run (and assert) there. As
root, :func:`unprivileged` runs a command inside a new user namespace as an ordinary user
(uid/gid 1000) that the files of root map to: the command owns them, as a user owns their
own files, and their permission bits apply to it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

import pytest

#: The prefix that drops root's privileges (util-linux ``unshare``).
USERNS = ("unshare", "--user", "--map-user=1000", "--map-group=1000")


def is_root() -> bool:
    """Whether this process ignores file permissions (effective uid 0)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def _userns_works() -> bool:
    if shutil.which(USERNS[0]) is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:  # a mode-000 file must be unreadable there
        probe = os.path.join(tmp, "probe")
        with open(probe, "w", encoding="utf-8") as f:
            f.write("x")
        os.chmod(probe, 0)
        done = subprocess.run([*USERNS, "sh", "-c", 'test ! -r "$0"', probe],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return done.returncode == 0


def unprivileged(cmd: Sequence[str]) -> list[str]:
    """``cmd`` as it is when this process is not root; as root, prefixed to run as an
    ordinary user inside a user namespace (see the module docstring).

    Fails the test (never skips: CI runs as root) when no user namespace can be made, naming
    what is missing.
    """
    if not is_root():
        return list(cmd)
    if not _userns_works():
        pytest.fail("running as root, and `unshare --user` cannot make a user namespace to "
                    "drop privileges in (util-linux missing, or user namespaces disabled: "
                    "sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)")
    return [*USERNS, *cmd]
