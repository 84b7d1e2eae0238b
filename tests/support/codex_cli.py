"""The real Codex CLI offline: a ``CODEX_HOME`` whose ``config.toml`` points it at a loopback
:class:`~tests.support.responses_server.ResponsesServer`.

Codex (codex-cli 0.171.0) reads ``$CODEX_HOME/config.toml`` (default ``~/.codex``). A custom
provider (``[model_providers.<id>]``, chosen by ``model_provider``) with ``base_url``,
``wire_api = "responses"`` (the only value 0.171.0 accepts) and ``env_key`` (the variable
holding the API key, sent as ``Authorization: Bearer``) sends every model request to the
scripted server; ``request_max_retries`` / ``stream_max_retries`` (per provider) set how often
it retries a failed request or a dropped stream, and ``stream_idle_timeout_ms`` how long it
waits on a silent stream (documented in Codex's ``docs/config.md``, "Per-provider network
tuning"). 0.171.0 accepts every key written here under ``--strict-config``. The CLI installs
from :mod:`tests.support.real_cli`.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The provider id of the scripted server in ``config.toml``.
PROVIDER = "ralph-test"

#: The variable that holds the (dummy) API key, named by the provider's ``env_key``.
KEY_ENV = "RALPH_TEST_OPENAI_KEY"

#: A model in Codex 0.171.0's bundled catalog (``codex debug models``): a model missing
#: there makes the CLI print a ``Model metadata ... not found`` error item and fall back to
#: generic metadata (no ``apply_patch`` tool).
MODEL = "gpt-5.5"


def config_toml(base_url: str, *, model: str = MODEL, retries: int = 0,
                idle_timeout_ms: int = 10_000) -> str:
    """The ``config.toml`` text that sends Codex to ``base_url``.

    Args:
        base_url: the scripted server's root, e.g. ``http://127.0.0.1:40123`` (no ``/v1``).
        model: the model slug requested.
        retries: ``request_max_retries`` and ``stream_max_retries`` (0: one attempt each, so
            an HTTP error ends the turn at once instead of after seconds of back-off).
        idle_timeout_ms: ``stream_idle_timeout_ms``, milliseconds of a silent stream.
    """
    return (f'model = "{model}"\n'
            f'model_provider = "{PROVIDER}"\n'
            'check_for_update_on_startup = false\n'
            f'\n[model_providers.{PROVIDER}]\n'
            'name = "scripted loopback model"\n'
            f'base_url = "{base_url}/v1"\n'
            f'env_key = "{KEY_ENV}"\n'
            'wire_api = "responses"\n'
            f'request_max_retries = {retries}\n'
            f'stream_max_retries = {retries}\n'
            f'stream_idle_timeout_ms = {idle_timeout_ms}\n'
            '\n[analytics]\nenabled = false\n')


def write_codex_home(folder: Path, base_url: str, *, model: str = MODEL, retries: int = 0,
                     idle_timeout_ms: int = 10_000) -> Path:
    """Make ``folder`` a ``CODEX_HOME`` whose ``config.toml`` is :func:`config_toml` (the
    arguments as there); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        config_toml(base_url, model=model, retries=retries, idle_timeout_ms=idle_timeout_ms),
        encoding="utf-8")
    return folder


def offline_env(codex_home: Path, home: Path, bin_dir: Path) -> dict[str, str]:
    """The variables (to add to the process environment) that run the pinned CLI offline:
    ``CODEX_HOME``, a dummy key in :data:`KEY_ENV`, ``HOME`` (a folder outside the project),
    ``PATH`` starting with ``bin_dir`` (the folder holding only ``codex``), no
    ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` from outside (set to empty: Codex ignores empty
    values), and ``NO_COLOR``."""
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(bin_dir)]
    return {"CODEX_HOME": os.fspath(codex_home), KEY_ENV: "test-key",
            "HOME": os.fspath(home), "PATH": os.pathsep.join([os.fspath(bin_dir), *rest]),
            "OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "NO_COLOR": "1"}
