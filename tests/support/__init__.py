"""The helpers the tests import (``tests/conftest.py`` holds only fixtures and hooks).

- ``env``: this run's interpreter (``PY``, ``PYTHON``) and ``clean_env``, the environment of
  a child process;
- ``prd``: PRD content (``story``, ``files_criteria``);
- ``project``: ``Project``, a project folder driven through real child processes (pytest,
  the loop, the Stop hook, fake agent CLIs), and ``Done``, what a child gave;
- ``loop``: starting ``pytest --ralph`` in a pytester folder and reading what it left;
- ``git``: git with a fixed identity, and ``needs_git``;
- ``docs``: the examples marked in ``docs/*.md``;
- ``fake_cli``: a fake agent CLI (a script); ``claude_cli`` and ``model_server``: the pinned
  real Claude Code CLI against a scripted loopback model; ``responses_server`` and
  ``codex_cli``: a scripted loopback OpenAI Responses API and the ``CODEX_HOME`` that points
  the real Codex CLI at it; ``opencode_cli``: the config and environment that point the
  real opencode CLI at ``model_server``; ``privileges``: commands run without
  root's power; ``chaos``: the harness of the dishonest-agent cases (``tests/chaos``).
"""
