"""The check phase: check every criterion in a fresh child pytest.

The controller never imports project code: each phase runs
``python -m pytest <prd> --ralph-results <file>`` in the rootdir and reads the
results file (:mod:`pytest_ralph.results`). The child's terminal output is kept
in ``check.log`` beside the results.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .process import read_tail, run_in_group
from .results import CheckResults, read_results

#: Set in the child's environment: the child checks, it never drives a loop.
CHILD_ENV = "PYTEST_RALPH_CHILD"


@dataclass(frozen=True)
class CheckPhaseConfig:
    """What every check phase of a run needs.

    Attributes:
        prd: the PRD file (absolute).
        rootdir: the pytest rootdir; the child runs there.
        inifile: the configuration file the controller used, passed on with ``-c``.
        stories: limit the check to these story ids (empty: all).
        strict: pass ``--ralph-strict`` (claimed criteria fail).
        timeout: seconds the whole phase may take before it is killed.
        python: the interpreter that runs the child pytest.
        extra_args: more arguments for the child pytest.
    """

    prd: Path
    rootdir: Path
    inifile: Path | None = None
    stories: tuple[str, ...] = ()
    strict: bool = False
    timeout: float = 3600.0
    python: str = sys.executable
    extra_args: tuple[str, ...] = ()

    def argv(self, results_path: Path) -> list[str]:
        """The child pytest's argv."""
        argv = [self.python, "-m", "pytest", str(self.prd), "--ralph-results", str(results_path),
                "--rootdir", str(self.rootdir), "-p", "no:cacheprovider", "-q", "--no-header"]
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            argv += ["-p", "pytest_ralph.plugin"]
        if self.inifile is not None:
            argv += ["-c", str(self.inifile)]
        for story in self.stories:
            argv += ["--ralph-story", story]
        if self.strict:
            argv.append("--ralph-strict")
        return argv + list(self.extra_args)


def run_check_phase(config: CheckPhaseConfig, out_dir: Path,
                    argv_override: Sequence[str] | None = None) -> CheckResults:
    """Check every criterion in a child pytest; keep ``check.json`` and ``check.log`` in
    ``out_dir``.

    A child that dies, times out or writes no results gives a :class:`CheckResults`
    whose ``errors`` say so: a broken check phase is a failure, never a pass.

    Raises:
        KeyboardInterrupt: after the child's process group has been killed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / "check.json"
    log_path = out_dir / "check.log"
    results_path.unlink(missing_ok=True)
    env = dict(os.environ)
    env[CHILD_ENV] = "1"
    argv = list(argv_override) if argv_override is not None else config.argv(results_path)
    start = time.monotonic()
    with log_path.open("w+b") as log:
        finished = run_in_group(argv, cwd=config.rootdir, output=log, timeout=config.timeout,
                                env=env)
        tail = read_tail(log, 3000).rstrip()
    duration = time.monotonic() - start
    if finished.timed_out:
        return CheckResults((), (f"the check phase took longer than {config.timeout:g} s and was "
                                 f"killed; see {log_path}",), -1, duration)
    try:
        results = read_results(results_path)
    except ValueError:
        return CheckResults((), (f"the check phase (child pytest, exit {finished.returncode}) "
                                 f"wrote no results; its output ends:\n{tail}",),
                            finished.returncode if finished.returncode is not None else -1,
                            duration)
    return replace(results, duration=duration)
