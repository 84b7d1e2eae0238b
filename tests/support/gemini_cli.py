"""The real Gemini CLI offline: a home folder whose ``.gemini/settings.json`` keeps it quiet and
quick, and the variables that point it at a loopback
:class:`~tests.support.gemini_server.GeminiServer`.

Gemini CLI 0.61.0 (its own ``docs/reference/configuration.md``, shipped in the npm package and
at https://geminicli.com/docs/reference/configuration/) reads the user settings from
``~/.gemini/settings.json``, where ``~`` is ``$GEMINI_CLI_HOME`` when set, else the home
folder. With ``gemini-api-key`` authentication (``security.auth.selectedType``, the key in
``GEMINI_API_KEY``, sent as ``x-goog-api-key``) it sends every model request to
``GOOGLE_GEMINI_BASE_URL`` (plain http is allowed for ``127.0.0.1``).
``general.maxAttempts`` (default 10) is how often it tries each request to the main chat
model: 1 makes an HTTP 500 or 429 end the run after one request, in about two seconds,
instead of minutes of back-off. Telemetry, usage statistics and update checks are switched
off. The CLI installs from :mod:`tests.support.real_cli`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The variables of the outer environment that would change what the CLI does: other
#: credentials and back ends, a model, a settings folder, and the trust switch (the preset
#: must trust the workspace on its own). Set to empty, which the CLI treats as unset.
CLEARED = ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA",
           "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_APPLICATION_CREDENTIALS",
           "GOOGLE_VERTEX_BASE_URL", "GEMINI_MODEL", "GEMINI_CLI_HOME",
           "GEMINI_CLI_TRUST_WORKSPACE", "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
           "GEMINI_CLI_SYSTEM_DEFAULTS_PATH", "GEMINI_CLI_TRUSTED_FOLDERS_PATH",
           "GEMINI_TELEMETRY_ENABLED")


def settings(*, max_attempts: int = 1) -> dict[str, Any]:
    """The ``settings.json`` object: ``gemini-api-key`` auth, ``general.maxAttempts =
    max_attempts`` (1 to 10), no fetch-error retries, no telemetry, usage statistics, auto
    update or update notification."""
    return {"general": {"maxAttempts": max_attempts, "retryFetchErrors": False,
                        "enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}}}


def write_settings(home: Path, *, max_attempts: int = 1) -> Path:
    """Write :func:`settings` to ``home/.gemini/settings.json`` (``home`` being ``HOME`` or
    ``GEMINI_CLI_HOME``); returns the ``.gemini`` folder."""
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(settings(max_attempts=max_attempts),
                                                     indent=2) + "\n", encoding="utf-8")
    return folder


def offline_env(base_url: str, home: Path, bin_dir: Path,
                tmp: Path | None = None) -> dict[str, str]:
    """The variables (to add to the process environment) that run the pinned CLI offline
    against ``base_url`` (the scripted server's root, e.g. ``http://127.0.0.1:40123``):
    ``GOOGLE_GEMINI_BASE_URL``, a dummy ``GEMINI_API_KEY``, ``HOME`` (a folder outside the
    project holding :func:`write_settings`' settings), ``PATH`` starting with ``bin_dir``
    (the folder holding only ``gemini``), :data:`CLEARED` set to empty, ``NO_COLOR``, and
    with ``tmp`` ``TMPDIR``: where the CLI writes the ``gemini-client-error-*.json`` report
    of each API error (``/tmp`` otherwise)."""
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(bin_dir)]
    env = {name: "" for name in CLEARED}
    env.update({"GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_API_KEY": "test-key",
                "HOME": os.fspath(home), "PATH": os.pathsep.join([os.fspath(bin_dir), *rest]),
                "NO_COLOR": "1"})
    if tmp is not None:
        env["TMPDIR"] = os.fspath(tmp)
    return env
