"""``pytest --ralph --ralph-parallel N``: the session's part of a parallel run.

:func:`run_parallel` hands the session's settings to the controller
(:class:`pytest_ralph.parallel.scheduler.Scheduler`): the project, the state folder, the PRD,
the limits shared by the run (``--ralph-budget``, ``--ralph-max-cost``) and the options every
lane's own ``pytest --ralph`` gets (:func:`lane_args`); the merge queue comes from
:mod:`pytest_ralph.parallel.queue`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ..loop.settings import SPECS, Settings
from ..sandbox.bwrap import Sandbox, probe
from .options import child_args

#: Who the merge queue's sandbox confines, for the messages of :func:`gate_sandbox`.
GATE = "the gate (the lanes' code)"


def gate_sandbox(settings: Settings) -> Sandbox:
    """The sandbox of the merge queue's gate: ``ralph_sandbox`` / ``--ralph-sandbox`` and
    ``ralph_sandbox_writable`` as the loop resolves and probes them
    (:func:`pytest_ralph.sandbox.bwrap.probe`): ``required`` without a working bubblewrap is
    refused, ``auto`` runs the gate unconfined and says so, ``off`` never confines.

    Raises:
        pytest_ralph.sandbox.bwrap.SandboxError: ``required`` and bubblewrap cannot confine.
    """
    return probe(settings.sandbox, source=settings.sources.get("sandbox", "default"),
                 writable=settings.sandbox_writable, what=GATE)


def gate_inifile(config: pytest.Config, top: Path, project: Path) -> Path | None:
    """The configuration file the gate uses: the session's, relative to ``project`` when it
    lies in the work tree ``top`` (each worktree's copy is then used), else as it is."""
    ini = config.inipath
    if ini is None:
        return None
    real = Path(os.path.realpath(ini))
    if real == top or top in real.parents:
        return Path(os.path.relpath(real, project))
    return real

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
    from ..loop.records import EXIT_NO_CRITERIA, EXIT_USAGE
    from ..oracle.bytecode import TrustedBytecode
    from ..parallel.gate import describe_gate, gate_around, gate_check
    from ..parallel.queue import MergeQueue
    from ..parallel.scheduler import Options, Queue, Scheduler
    from ..parallel.worktrees import Repo
    from ..prd.load import discover_prd
    from ..sandbox.bwrap import SandboxError

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
    try:
        sandbox = gate_sandbox(settings)
    except SandboxError as exc:
        sys.stderr.write(f"pytest-ralph: --ralph-parallel: {exc}\n")
        return EXIT_USAGE
    options = Options(rootdir=config.rootpath, state_dir=settings.dir,
                      prd_path=Path(prd).resolve(), parallel=settings.parallel,
                      lane_args=lane_args(config, settings), budget=settings.budget,
                      max_cost=settings.max_cost, agent=settings.agent or "",
                      python=sys.executable, inifile=config.inipath,
                      max_bytes=settings.max_prd_bytes,
                      tty=sys.stdout.isatty(), gate=describe_gate(sandbox, done=False))

    # The gates share one bytecode folder that only this process compiles into.
    bytecode = TrustedBytecode.for_run(config.rootpath, confined=sandbox.confined)
    bytecode.prime_in_background(bytecode.sources_loaded_here())

    def make_queue(repo: Repo, run_id: str, base: str) -> Queue:
        prd_rel = options.prd_path.relative_to(repo.project)
        gate = gate_check(prd_rel, python=sys.executable, sandbox=sandbox,
                          state_dir=repo.state_dir, around=gate_around(repo),
                          inifile=gate_inifile(config, repo.top, repo.project),
                          bytecode=bytecode, strict=settings.strict)
        return MergeQueue(repo, run_id, base, gate, prd=prd_rel)

    try:
        return Scheduler(options, make_queue).run()
    finally:
        bytecode.close()
