"""Entry point for ``python -m quickbill``."""

from __future__ import annotations

from quickbill.cli import main

if __name__ == "__main__":
    main()
