"""The session's settings, resolved once into ``config.stash``, and whether this process is
the loop's child.

:func:`get_settings` is how every module of the plugin reads the settings (command line >
environment > ini > default, validated by :mod:`pytest_ralph.loop.settings`);
:func:`settings_lines` shows them in the report header and the loop's first lines;
:func:`is_child` tells a check phase's pytest (started by the loop) from any other. This
module imports nothing else of the plugin, so that each of its modules can import it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..loop.settings import SPECS, Settings, SettingsError, describe, resolve
from ..util.env import CHILD_ENV

SETTINGS = pytest.StashKey[Settings]()


def resolve_settings(config: pytest.Config, namespace: Any = None) -> Settings:
    """The settings of ``config``, resolved afresh (not cached); ``namespace``: the options of
    pytest's early parse, before the command line is parsed in full.

    Raises:
        pytest.UsageError: a setting has a bad value.
    """
    if namespace is None:
        cli = {spec.name: config.getoption(spec.dest, None) for spec in SPECS if spec.cli}
    else:  # before the command line is parsed in full: what pytest's early parse found
        cli = {spec.name: getattr(namespace, spec.dest, None) for spec in SPECS if spec.cli}
    try:
        return resolve(
            cli=cli, env=os.environ, ini=config.getini,
            ini_file=config.inipath.name if config.inipath else "no ini file",
            invocation_dir=config.invocation_params.dir, rootdir=config.rootpath,
            overridden={str(o).partition("=")[0].strip()
                        for o in config.getoption("override_ini", None) or ()})
    except SettingsError as exc:
        raise pytest.UsageError(f"pytest-ralph: {exc}") from None


def get_settings(config: pytest.Config) -> Settings:
    """The effective settings of this session (resolved once, then cached in ``config.stash``).

    Raises:
        pytest.UsageError: a setting has a bad value.
    """
    if SETTINGS not in config.stash:
        config.stash[SETTINGS] = resolve_settings(config)
    return config.stash[SETTINGS]


def is_child() -> bool:
    """Whether this process is a pytest that the loop started (a check phase)."""
    return bool(os.environ.get(CHILD_ENV))


def settings_lines(config: pytest.Config, settings: Settings, prefix: str) -> list[str]:
    """The settings for the gate's report header and the loop's first lines: one line of the
    settings that are not at their default (none when all are), or with ``-v`` a heading and
    one line per setting; each ``name = value (source)``, the source being the option, the
    environment variable, ``ini KEY (FILE)``, ``-o KEY`` or ``default``. Secrets of the
    environment are redacted (an agent command line may hold a token)."""
    from ..util.redact import Redactor

    redact = Redactor.from_env().text
    verbosity = int(config.getoption("verbose", 0) or 0)
    if verbosity > 0:
        return [f"{prefix}every setting, with where it came from:",
                *(f"  {redact(line)}" for line in describe(settings, everything=True))]
    lines = describe(settings)
    return [prefix + redact("; ".join(lines))] if lines and verbosity == 0 else []
