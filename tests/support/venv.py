"""A throw-away virtual environment for tests: an interpreter at a chosen folder that sees the
running interpreter's packages (pytest-ralph's editable install included)."""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path


def linked_venv(folder: Path) -> Path:
    """An interpreter at ``folder/bin/python`` that sees the running interpreter's packages: a
    pyvenv.cfg next to a symlink to the real interpreter, and a .pth file that adds the
    current site-packages folders (so editable installs keep working). POSIX only.

    Returns:
        The interpreter's path, ``folder/bin/python`` (a symlink; its ``sys.executable`` is
        that path).
    """
    real = os.path.realpath(sys.executable)
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\n",
        encoding="utf-8")
    python = folder / "bin" / "python"
    python.symlink_to(real)
    packages = (folder / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                / "site-packages")
    packages.mkdir(parents=True)
    dirs = [p for p in (*site.getsitepackages(), site.getusersitepackages())
            if os.path.isdir(p)]
    dirs += [p for p in sys.path if p.endswith("site-packages") and p not in dirs]
    (packages / "outer.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in dirs) + "\n",
        encoding="utf-8")
    return python
