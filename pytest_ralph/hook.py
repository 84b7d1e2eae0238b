"""``python -m pytest_ralph.hook`` and the console script ``pytest-ralph-hook``: the Claude Code
Stop hook, kept at this path because it is written into users' ``.claude/settings.json`` files.

The hook itself is :mod:`pytest_ralph.claude.hook`; this module only hands over to it.
"""

from __future__ import annotations

import sys

from .claude.hook import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
