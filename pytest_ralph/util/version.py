"""The version of pytest-ralph (``pyproject.toml``'s ``version``; a test holds them equal)."""

__version__ = "0.1.0"
