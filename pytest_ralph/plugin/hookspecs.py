"""The ``pytest_ralph_*`` hooks: how a plugin or a ``conftest.py`` changes what pytest-ralph does.

Implement a hook by defining a function of its name in a ``conftest.py`` or in an installed
plugin (a module registered under the ``pytest11`` entry point), taking any subset of its
arguments by name, exactly like pytest's own hooks (pluggy). pytest-ralph registers these
specifications through ``pytest_addhooks``, so a misspelt hook name is an error at start-up.

Every hook has a built-in implementation marked ``trylast``
(:mod:`pytest_ralph.plugin.hookimpls`): a hook marked *first result* stops at the first
implementation that returns something other than ``None``, so returning ``None`` leaves
the decision to the next implementation and, in the end, to the built-in one.

Where each hook fires:

* in the check phase (every process that runs criterion items: plain ``pytest``, the
  loop's child pytest, each pytest-xdist worker): :func:`pytest_ralph_make_check`, and
  :func:`pytest_ralph_prd_loaded` when a PRD file is collected;
* in the loop controller (``pytest --ralph``): :func:`pytest_ralph_prd_loaded` once at the
  start, then per iteration :func:`pytest_ralph_build_prompt`,
  :func:`pytest_ralph_agent_command`, :func:`pytest_ralph_before_iteration`,
  :func:`pytest_ralph_after_iteration`, :func:`pytest_ralph_fingerprint` (once per failing
  criterion) and :func:`pytest_ralph_should_stop`. The controller loads ``conftest.py``
  files the way pytest does before a session: the ones of the rootdir, ``testpaths`` and
  the paths given; an installed plugin is always loaded.

Under the Claude Code driver (the Stop hook) only the check-phase hooks fire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from ..agents.run import AgentRun
    from ..checks.base import Check
    from ..checks.results import CheckResults, CriterionResult
    from ..loop.hooks import StopContext, StopDecision
    from ..loop.prompt import PromptContext
    from ..prd.model import PRD, Criterion, Story

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_ralph_prd_loaded(prd: PRD, config: pytest.Config) -> None:
    """A PRD file was loaded and validated.

    Fires when a PRD file is collected (in every process that collects it, each
    pytest-xdist worker included), in the loop controller once at the start of
    ``pytest --ralph`` and ``--ralph-dry-run``, and when the ``ralph_prd`` fixture loads it.

    Args:
        prd: the PRD (:class:`pytest_ralph.PRD`; read-only).
        config: the pytest config.

    Raises:
        pytest_ralph.PRDError: raise it to refuse the PRD: collection reports it as a
            collection error, the loop exits 4, both without a traceback.
    """


@hookspec(firstresult=True)
def pytest_ralph_make_check(criterion: Criterion, story: Story, prd_path: Path,
                            config: pytest.Config) -> Check | None:
    """Make the check that decides ``criterion`` (first result).

    Fires each time a criterion item runs: in plain ``pytest``, in the loop's check phase,
    and on pytest-xdist workers. Return ``None`` to leave the criterion to the next
    implementation; the built-in one knows the kinds ``run``, ``pytest``, ``exists``,
    ``file``, ``sql``, ``schema``, ``python`` and text, and fails a criterion of any other
    kind (``{"kind": "wordcount", ...}``) with a message naming the kind.

    A criterion of your own kind is an object with a ``kind`` key in the PRD, e.g.
    ``{"kind": "wordcount", "file": "post.md", "min": 300}``: ``criterion.kind`` is
    ``"wordcount"`` and ``criterion.spec`` holds every field but ``id`` and ``text``.

    Args:
        criterion: the criterion (:class:`pytest_ralph.Criterion`).
        story: its user story (:class:`pytest_ralph.Story`).
        prd_path: the PRD file the criterion comes from.
        config: the pytest config (``config.rootpath`` is where relative paths start).

    Returns:
        An object with a ``run() -> pytest_ralph.CheckResult`` method
        (:class:`pytest_ralph.Check`), or ``None``. ``run`` returns
        ``CheckResult(passed, message)``: for a failure, the message says what was
        expected and what was found (the agent reads it in its next prompt). An exception
        raised by ``run`` fails the criterion with its traceback.
    """


@hookspec(firstresult=True)
def pytest_ralph_build_prompt(context: PromptContext, template: str,
                              config: pytest.Config) -> str | None:
    """Build the prompt of an iteration (first result); fires in the loop controller before
    each agent run, and once for ``--ralph-dry-run``.

    Args:
        context: what the prompt is built from (:class:`pytest_ralph.loop.prompt.PromptContext`:
            ``prd``, ``results`` of the last check, ``iteration``, ``max_iterations``,
            ``rootdir``, ``progress``, ``repeats``, ``regressions``, ``last_change``,
            ``blocked``).
        template: the prompt template's text (ini ``ralph_prompt`` or the built-in
            ``templates/prompt.md``), with ``$name`` placeholders.
        config: the pytest config.

    Returns:
        The prompt text, or ``None`` for the next implementation's. Secrets are redacted
        from the returned text before the agent sees it.
    """


@hookspec(firstresult=True)
def pytest_ralph_agent_command(argv: list[str], iteration: int, story: Story | None,
                               config: pytest.Config) -> list[str] | None:
    """The agent command of an iteration (first result); fires in the loop controller before
    each agent run, and once for ``--ralph-dry-run`` (iteration 1).

    Args:
        argv: the configured agent argv (ini ``ralph_agent``, a preset resolved), which may
            hold ``{prompt_file}``.
        iteration: the iteration about to run (1-based).
        story: the user story the prompt asks for, or ``None``.
        config: the pytest config.

    Returns:
        The argv to run (a non-empty list of strings; ``{prompt_file}`` is replaced by the
        prompt file's path; the prompt is also on stdin), or ``None`` for the next
        implementation's.
    """


@hookspec
def pytest_ralph_before_iteration(iteration: int, story: Story | None, prompt: str,
                                  argv: list[str], config: pytest.Config) -> None:
    """Iteration ``iteration`` is about to run the agent; fires in the loop controller.

    Args:
        iteration: the iteration (1-based).
        story: the user story the prompt asks for, or ``None``.
        prompt: the prompt the agent gets.
        argv: the agent argv about to run.
        config: the pytest config.
    """


@hookspec
def pytest_ralph_after_iteration(iteration: int, results: CheckResults, agent: AgentRun,
                                 story: str, config: pytest.Config) -> None:
    """Iteration ``iteration`` was checked and recorded in the history; fires in the loop
    controller, before the stop decision.

    Args:
        iteration: the iteration (1-based).
        results: the check results after it (:class:`pytest_ralph.checks.results.CheckResults`:
            ``criteria``, ``failing``, ``passing``, ``errors``, ``complete``).
        agent: the agent run (:class:`pytest_ralph.agents.run.AgentRun`: ``outcome``,
            ``exit_code``, ``duration``, ``log_path``, ...).
        story: id of the story the iteration worked on, or ``""``.
        config: the pytest config.
    """


@hookspec(firstresult=True)
def pytest_ralph_fingerprint(result: CriterionResult, config: pytest.Config) -> str | None:
    """The text that stands for one failing criterion in the failure fingerprint (first
    result); fires in the loop controller once per failing criterion of each check.

    The identical-failure circuit breaker compares, iteration to iteration, the set of
    (criterion key, this text); a story is blocked, and the run stopped, when it stays the
    same ``ralph_breaker`` times in a row. The built-in text is the failure message with
    timestamps, addresses, absolute paths and numbers replaced by placeholders.

    Args:
        result: the failing criterion's result
        (:class:`pytest_ralph.checks.results.CriterionResult`:
            ``story``, ``criterion``, ``kind``, ``text``, ``message``).
        config: the pytest config.

    Returns:
        The text (equal texts: the same failure), or ``None`` for the next
        implementation's.
    """


@hookspec(firstresult=True)
def pytest_ralph_should_stop(context: StopContext, config: pytest.Config) -> StopDecision | None:
    """Decide whether the run stops after an iteration (first result); fires in the loop
    controller after each iteration that left criteria failing (a run whose criteria all
    pass is complete without asking). The iteration limit, ``--ralph-budget`` and
    ``--ralph-max-cost`` are enforced whatever the decision.

    Args:
        context: the iteration's outcome and counters
            (:class:`pytest_ralph.StopContext`: ``iteration``, ``results``, ``agent``,
            ``story``, ``fingerprint``, ``failures``, ``streak``, ``breaker``,
            ``error_streak``, ``agent_errors``, ``blocked``, ``newly_blocked``,
            ``all_blocked``).
        config: the pytest config.

    Returns:
        :class:`pytest_ralph.StopDecision`: ``StopDecision(True, reason, status)`` stops
        (status ``"limit"``, ``"breaker"`` or ``"agent-error"``), ``pytest_ralph.GO_ON``
        goes on; ``None`` leaves it to the next implementation (the built-in one stops on
        the agent-error limit and the identical-failure circuit breaker).
    """


#: The hook names, for documentation and tests.
HOOK_NAMES: tuple[str, ...] = tuple(
    name for name, value in list(globals().items())
    if name.startswith("pytest_ralph_") and callable(value))
