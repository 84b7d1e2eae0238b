"""Command line of the content pipeline: ``python -m pipeline COMMAND --db PATH``.

Nothing is implemented yet: the stories of ``prd.json`` add the commands one by one.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Say that no command exists yet; exit status 2."""
    shown = " ".join(argv) or "(no command)"
    print(f"python -m pipeline: {shown}: no command is implemented yet (see prd.json)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
