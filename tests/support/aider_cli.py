"""The real aider offline: the environment that points aider (through litellm) at a loopback
:class:`~tests.support.model_server.ModelServer`.

aider 0.86.2 calls its model through litellm; ``--model anthropic/<name>`` (here the
variable ``AIDER_MODEL``: every option has an ``AIDER_`` variable) sends Anthropic Messages
requests to ``$ANTHROPIC_API_BASE`` with ``$ANTHROPIC_API_KEY`` (litellm 1.81.10,
``litellm/main.py``). aider sends no tools: each request is the chat, and the model's edits
are text edit blocks in its answer (for a model aider knows nothing of, the *whole* format:
the file's path, then its new content in a fence), so the server scripts every request
(``side_requests_use_script=True``). ``~/.aider.model.metadata.json`` (read from the home
folder, the documented place) describes the model, so aider neither downloads litellm's
model-price list from GitHub nor warns about an unknown model; ``LITELLM_LOCAL_MODEL_COST_MAP``
keeps litellm's own copy local. The retry back-off is shortened by
``tests/support/aider_site/sitecustomize.py`` (aider has no option for it). The CLI installs
from :mod:`tests.support.real_cli`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.model_server import ModelServer

#: The model requested: a name aider has no settings for (whole-file edit format, no weak
#: model of its own).
MODEL = "anthropic/claude-test"

#: The folder whose ``sitecustomize.py`` shortens aider's retry back-off.
SITE_DIR = Path(__file__).parent / "aider_site"

#: Seconds of aider's ``RETRY_TIMEOUT`` in the tests: attempts after 0.25 s and 0.5 s back-off,
#: so an HTTP error ends a run after three requests, under a second.
RETRY_TIMEOUT = 0.5

#: What ``~/.aider.model.metadata.json`` says of :data:`MODEL` (litellm's model-info fields).
METADATA = {MODEL: {"max_input_tokens": 200_000, "max_output_tokens": 8192,
                    "max_tokens": 8192, "input_cost_per_token": 0.000003,
                    "output_cost_per_token": 0.000015, "litellm_provider": "anthropic",
                    "mode": "chat"}}


def write_home(home: Path) -> Path:
    """Make ``home`` (created) a home folder for aider: ``.aider.model.metadata.json`` with
    :data:`METADATA`; returns ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".aider.model.metadata.json").write_text(json.dumps(METADATA, indent=2),
                                                      encoding="utf-8")
    return home


def whole_edit(path: str, content: str) -> str:
    """A model answer in aider's *whole* edit format that replaces ``path`` (relative to the
    project) with ``content`` (ending with a newline)."""
    return f"{path}\n```\n{content}```\n"


def offline_env(server: ModelServer, home: Path, bin_dir: Path, *,
                retry_timeout: float = RETRY_TIMEOUT) -> dict[str, str]:
    """The variables (to add to the process environment) that run the pinned aider offline
    against ``server``: ``HOME`` (``home``, see :func:`write_home`), ``PATH`` starting with
    ``bin_dir`` (the folder holding only ``aider``), ``AIDER_MODEL``, ``ANTHROPIC_API_BASE``
    and a dummy ``ANTHROPIC_API_KEY``, no OpenAI/Anthropic settings from outside (set
    empty), ``PYTHONPATH`` with :data:`SITE_DIR` and ``RALPH_TEST_AIDER_RETRY_TIMEOUT``
    (``retry_timeout`` seconds), ``LITELLM_LOCAL_MODEL_COST_MAP``, ``NO_COLOR``."""
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(bin_dir)]
    return {"HOME": os.fspath(home), "PATH": os.pathsep.join([os.fspath(bin_dir), *rest]),
            "AIDER_MODEL": MODEL, "ANTHROPIC_API_BASE": server.url,
            "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": "", "OPENAI_API_KEY": "",
            "OPENAI_API_BASE": "", "OPENAI_BASE_URL": "",
            "PYTHONPATH": os.fspath(SITE_DIR),
            "RALPH_TEST_AIDER_RETRY_TIMEOUT": f"{retry_timeout:g}",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}
