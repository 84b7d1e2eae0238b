"""``python -m pytest_ralph.docgen``: writes (or with ``--check`` compares) ``docs/prd-format.md``
from the PRD schema; kept at this path because the generated page and the docs name it.

The generator itself is :mod:`pytest_ralph.prd.docgen`; this module only hands over to it.
"""

from __future__ import annotations

from .prd.docgen import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
