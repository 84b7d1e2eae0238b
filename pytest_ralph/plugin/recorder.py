"""The loop's child pytest (a check phase): the results recorder, and how the process is set up.

:class:`ResultsRecorder` writes the check-results file (``--ralph-results PATH``,
:mod:`pytest_ralph.checks.results`) that the loop reads back; :func:`record_results` registers
it, makes the process non-dumpable and turns SIGTERM into an interrupt.
:func:`anchor_worker_rootdir` puts a pytest-xdist worker's rootdir on ``sys.path`` where the
check phase's launcher put it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ..checks.results import CriterionResult, prd_order, write_results
from ..util.env import WORKER_ROOTDIR_ENV
from .collect import (
    PROP_CLAIMED,
    PROP_CRITERION,
    PROP_KIND,
    PROP_MESSAGE,
    PROP_STORY,
    PROP_TEXT,
    report_props,
)
from .stash import is_child


def anchor_worker_rootdir() -> None:
    """On a pytest-xdist worker of a check phase: put the rootdir (the working directory) where
    the check phase's launcher put it, as ``python -m pytest`` has it
    (:data:`pytest_ralph.checks.phase.PYTEST_LAUNCHER`)."""
    anchor = os.environ.pop(WORKER_ROOTDIR_ENV, None)  # not for what the worker starts
    if anchor is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    cwd = os.getcwd()
    for i in range(len(sys.path) - 1, -1, -1):
        if sys.path[i] == cwd:
            del sys.path[i]
            break
    else:
        return
    sys.path.insert(sys.path.index(anchor) if anchor in sys.path else 0, cwd)


def record_results(config: pytest.Config) -> None:
    """With ``--ralph-results PATH`` (the loop's child): register the :class:`ResultsRecorder`
    (not on a pytest-xdist worker, which reports to its controller) and let SIGTERM interrupt
    the session; in the loop's child, also make the process non-dumpable."""
    results = config.getoption("ralph_results", None)
    if results and is_child():
        _not_dumpable()
    if results:
        if not hasattr(config, "workerinput"):  # a pytest-xdist worker reports to its controller
            config.pluginmanager.register(ResultsRecorder(Path(results), config.rootpath),
                                          "ralph-results")
        _sigterm_interrupts()


def _sigterm_interrupts() -> None:
    """In the loop's child: SIGTERM (the controller stopping the check phase) becomes a
    KeyboardInterrupt, so that each running check kills its own process group on the way out."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, handler)


def _not_dumpable() -> None:
    """Make this check phase's process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, Linux):
    a program a criterion starts (the agent's code) then cannot open its ``/proc/<pid>/mem``
    or attach to it to rewrite the verdicts it holds, even as the same user."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)


class ResultsRecorder:
    """In the loop's child pytest: collect criterion outcomes and write the results file.

    Under pytest-xdist it runs on the controller only (the workers' reports reach it) and
    writes the same file as one process would: criteria in PRD order (whatever order they ran
    in: pytest-randomly shuffles it),
    each collection error once (every worker collects), and, as without xdist, where a
    collection error stops the session before any check runs, no criteria and exit 2.
    """

    def __init__(self, path: Path, rootdir: Path) -> None:
        self.path = path
        self.rootdir = rootdir
        self.results: dict[str, CriterionResult] = {}
        self.errors: list[str] = []
        self.order: dict[str, int] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Keep the PRD order of what was collected (after deselection)."""
        if not self.order:
            self.order = prd_order([item.nodeid for item in session.items], self.rootdir)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """On the pytest-xdist controller, which collects nothing: the PRD order of what the
        first worker collected (xdist refuses workers that collect differently)."""
        if not self.order:
            self.order = prd_order(ids, self.rootdir)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Keep collection errors: the loop counts them as failures."""
        if report.failed:
            text = f"collection error in {report.nodeid or '.'}:\n{report.longreprtext}"
            if text not in self.errors:
                self.errors.append(text)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record each criterion's outcome from its reports (works under xdist too)."""
        if report.passed and report.when != "call":
            return  # a setup or teardown that passed says nothing
        props = report_props(report)
        if PROP_STORY not in props:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.passed:
                outcome, message = "passed", str(props.get(PROP_MESSAGE, ""))
            elif report.skipped:
                outcome, message = "failed", f"skipped, which counts as a failure: " \
                                             f"{report.longreprtext}"
            else:
                outcome = "failed"
                message = str(props.get(PROP_MESSAGE) or report.longreprtext)
            self.results[report.nodeid] = CriterionResult(
                nodeid=report.nodeid, story=str(props[PROP_STORY]),
                criterion=str(props[PROP_CRITERION]), text=str(props.get(PROP_TEXT, "")),
                kind=str(props.get(PROP_KIND, "")), outcome=outcome, message=message,
                claimed=bool(props.get(PROP_CLAIMED, False)), duration=report.duration)
        elif report.when == "teardown" and report.failed and report.nodeid in self.results:
            old = self.results[report.nodeid]
            self.results[report.nodeid] = CriterionResult(
                **{**old.__dict__, "outcome": "failed",
                   "message": f"teardown failed:\n{report.longreprtext}"})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the results file."""
        last = len(self.order)
        criteria = sorted(self.results.values(), key=lambda r: self.order.get(r.nodeid, last))
        config = session.config
        if (self.errors and config.pluginmanager.has_plugin("dsession")
                and not config.getoption("continue_on_collection_errors", False)):
            # pytest-xdist runs what the workers did collect; pytest alone runs nothing
            # after a collection error and exits 2: do as it does.
            criteria = []
            if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED,
                              pytest.ExitCode.NO_TESTS_COLLECTED):
                exitstatus = session.exitstatus = pytest.ExitCode.INTERRUPTED
        write_results(self.path, criteria, self.errors, int(exitstatus))
