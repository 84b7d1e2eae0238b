"""``pytest --ralph --ralph-parallel N``: the session's part of a parallel run.

:func:`run_parallel` hands the session's settings to the controller
(:class:`pytest_ralph.parallel.scheduler.Scheduler`): the project, the state folder, the PRD,
the limits shared by the run (``--ralph-budget``, ``--ralph-max-cost``) and the options every
lane's own ``pytest --ralph`` gets (:func:`lane_args`); the merge queue comes from
:mod:`pytest_ralph.parallel.queue`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..loop.settings import SPECS, Settings
from .options import child_args

#: Settings the controller sets for each lane itself (never passed through).
_OWN = frozenset({"parallel", "story", "dir", "budget", "max_cost", "prd"})


def lane_args(config: pytest.Config, settings: Settings) -> tuple[str, ...]:
    """The options of the command line that each lane's ``pytest --ralph`` gets too: every
    ``--ralph-*`` setting typed there (the agent, ``--ralph-max-iterations``, which counts
    per story, the breaker, the sandbox...; paths made absolute), ``-q``, and the ``-p`` /
    ``-o`` options of the check phases. Ini keys and environment variables reach the lanes
    on their own (the worktree holds the configuration file; the environment is passed)."""
    out: list[str] = []
    for spec in SPECS:
        if not spec.cli or spec.name in _OWN or settings.sources.get(spec.name) != spec.cli:
            continue
        value = getattr(settings, spec.name)
        if spec.kind == "bool":
            if value:
                out.append(spec.cli)
        elif spec.kind == "list":
            for item in value:
                out += [spec.cli, str(item)]
        else:
            out += [spec.cli, str(value)]
    if config.get_verbosity() < 0:
        out.append("-q")
    return (*out, *child_args(config.invocation_params.args))


def run_parallel(config: pytest.Config, settings: Settings) -> int:
    """Run the stories of the PRD in parallel lanes; return the exit code (4 with a message
    when the project cannot: not a git repository, uncommitted changes, bad dependencies).

    Raises:
        pytest.UsageError: ``--ralph-story`` with ``--ralph-parallel`` (a lane is one story).
    """
    from ..loop.records import EXIT_NO_CRITERIA
    from ..parallel.queue import MergeQueue, gate_check
    from ..parallel.scheduler import Options, Queue, Scheduler
    from ..parallel.worktrees import Repo
    from ..prd.load import discover_prd

    if settings.story:
        raise pytest.UsageError(
            f"pytest-ralph: --ralph-story cannot be used with --ralph-parallel "
            f"{settings.parallel}: a parallel run works every story of the PRD, each in its "
            "own lane; run one story with --ralph-parallel 1")
    prd = settings.prd or discover_prd(config.rootpath)
    if prd is None:
        sys.stderr.write(f"pytest-ralph: --ralph-parallel: no PRD found in {config.rootpath}"
                         " (give it with --ralph-prd)\n")
        return EXIT_NO_CRITERIA
    options = Options(rootdir=config.rootpath, state_dir=settings.dir,
                      prd_path=Path(prd).resolve(), parallel=settings.parallel,
                      lane_args=lane_args(config, settings), budget=settings.budget,
                      max_cost=settings.max_cost, agent=settings.agent or "",
                      python=sys.executable, inifile=config.inipath,
                      max_bytes=settings.max_prd_bytes,
                      tty=sys.stdout.isatty())

    def make_queue(repo: Repo, run_id: str, base: str) -> Queue:
        prd_rel = options.prd_path.relative_to(repo.project)
        return MergeQueue(repo, run_id, base, gate_check(prd_rel, python=sys.executable),
                          prd=prd_rel)

    return Scheduler(options, make_queue).run()
