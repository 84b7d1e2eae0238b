"""The environment git runs in when the package runs it: no prompt, no pager, ``LC_ALL=C``,
and none of the variables that point git at another repository, work tree or index.

A loop started from a git hook (or from inside another tool that sets ``GIT_DIR``) must still
look at the project's own repository, so every variable of :data:`REPO_ENV` and every
``GIT_CONFIG_KEY_<n>``/``GIT_CONFIG_VALUE_<n>`` pair is dropped from the environment git gets.

Standard library only; this module does not import pytest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Variables that make git use another repository, work tree, index or object store than
#: the one at ``-C <root>`` (``git rev-parse --local-env-vars``, plus a few of the same kind).
REPO_ENV = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT", "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
    "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_LITERAL_PATHSPECS", "GIT_GLOB_PATHSPECS", "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS", "GIT_EXTERNAL_DIFF", "GIT_DIFF_OPTS",
)


def git_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a git command: ``base`` (default ``os.environ``) without
    :data:`REPO_ENV` and the ``GIT_CONFIG_KEY_*``/``GIT_CONFIG_VALUE_*`` pairs, with
    ``GIT_OPTIONAL_LOCKS=0``, ``GIT_TERMINAL_PROMPT=0``, ``GIT_PAGER=PAGER=cat``,
    ``LC_ALL=LANG=C`` and ``GIT_ADVICE=0``. The identity variables (``GIT_AUTHOR_NAME``...)
    are kept."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k not in REPO_ENV}
    for k in [k for k in env if k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))]:
        del env[k]
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat",
               LC_ALL="C", LANG="C", GIT_ADVICE="0")
    return env
