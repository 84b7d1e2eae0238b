"""The pinned real opencode CLI, offline, against :class:`tests.support.model_server.ModelServer`.

opencode (1.18.33, npm ``opencode-ai``) reads its global configuration from
``$XDG_CONFIG_HOME/opencode/opencode.json`` (``~/.config/opencode`` by default; opencode's
``config`` docs, "Locations"). :func:`write_config` writes one there whose ``anthropic``
provider has ``options.baseURL`` pointed at the scripted Anthropic Messages server and a dummy
``options.apiKey``, and whose only model is :data:`MODEL` (declared in the config, so the
bundled models.dev catalog is not needed). :func:`offline_env` keeps the CLI off the network:
``OPENCODE_DISABLE_MODELS_FETCH`` (no models.dev download), ``OPENCODE_DISABLE_AUTOUPDATE``,
``OPENCODE_DISABLE_SHARE``, ``OPENCODE_DISABLE_LSP_DOWNLOAD``, ``OPENCODE_DISABLE_CLAUDE_CODE``
(no reading of ``~/.claude``), and ``NPM_CONFIG_OFFLINE=true``: 1.18.33 runs ``npm install
@opencode-ai/plugin`` in its config folder in the background at every start, which then fails
at once from npm's cache (logged as ``background dependency install failed``, harmless).

Retries: 1.18.33 retries a retryable API error (5xx, 429) five times (``RETRY_MAX_RETRIES``,
not configurable, anomalyco/opencode issue 43596), waiting what the response's
``retry-after-ms`` / ``retry-after`` header says, else 2 s doubling; so the error tests send
``retry-after-ms`` (:data:`FAST_RETRY`) and six requests fail in well under a second. The
CLI installs from :mod:`tests.support.real_cli`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: The model id declared in the config (``anthropic/claude-test``).
MODEL = "claude-test"

#: The dummy API key the CLI sends as ``x-api-key``.
API_KEY = "test-key"

#: Headers that make 1.18.33's own five retries of an API error wait 10 ms each.
FAST_RETRY = {"retry-after-ms": "10"}

#: Variables of the outer environment that would send the CLI elsewhere or read other state.
OUTER = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENCODE_CONFIG",
         "OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG_CONTENT", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
         "XDG_CACHE_HOME", "XDG_STATE_HOME")


def config(base_url: str, *, model: str = MODEL) -> dict[str, object]:
    """The ``opencode.json`` content that sends opencode to ``base_url``.

    Args:
        base_url: the scripted server's root, e.g. ``http://127.0.0.1:40123`` (no ``/v1``).
        model: the model id declared and used (also as ``small_model``, for titles).
    """
    return {
        "model": f"anthropic/{model}",
        "small_model": f"anthropic/{model}",
        "autoupdate": False,
        "share": "disabled",
        "provider": {"anthropic": {
            "options": {"baseURL": f"{base_url}/v1", "apiKey": API_KEY},
            "models": {model: {"name": model, "tool_call": True,
                               "limit": {"context": 200_000, "output": 8_192}}},
        }},
    }


def write_config(home: Path, base_url: str, *, model: str = MODEL) -> Path:
    """Write :func:`config` to ``home/.config/opencode/opencode.json`` (the global config of a
    CLI whose ``HOME`` is ``home``); returns that file."""
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "opencode.json"
    path.write_text(json.dumps(config(base_url, model=model), indent=2) + "\n",
                    encoding="utf-8")
    return path


def offline_env(home: Path, bin_dir: Path) -> dict[str, str]:
    """The variables (to add to the process environment) that run the pinned CLI offline with
    ``home`` as ``HOME`` (its config from :func:`write_config`, its data, cache and state in
    the XDG default folders under it) and ``PATH`` starting with ``bin_dir`` (the folder
    holding only ``opencode``). The caller removes the :data:`OUTER` variables from the
    process environment (the runner adds these variables to ``os.environ``)."""
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(bin_dir)]
    return {
        "HOME": os.fspath(home), "PATH": os.pathsep.join([os.fspath(bin_dir), *rest]),
        "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1", "NPM_CONFIG_OFFLINE": "true", "NO_COLOR": "1"}
