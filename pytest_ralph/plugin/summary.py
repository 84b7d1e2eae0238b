"""The gate's summary: per story, the criteria verified, claimed and failed.

:class:`GateSummary` aggregates the criteria's reports (not ``session.items``, so it works under
pytest-xdist), prints the per-story table after pytest's own summary (one line per failing
criterion instead of pytest's failure sections above :data:`COMPACT_AFTER` of them), and writes
the Markdown summary (:mod:`pytest_ralph.plugin.stepsummary`) to ``--ralph-report PATH`` and
``GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..checks.verifier import VERIFIER_KIND, VERIFIER_PASSED
from ..util.env import CONTROLLER_ENV
from .collect import (
    EMPTY_PRDS,
    PROP_CLAIMED,
    PROP_CRITERION,
    PROP_KIND,
    PROP_MESSAGE,
    PROP_STORY,
    PROP_TEXT,
    PROP_TITLE,
    WORKER_DIALECTS,
    report_props,
)
from .commands import err
from .stash import get_settings, is_child

if TYPE_CHECKING:
    from .stepsummary import Row

#: Above this many failing criteria, each gets one summary line instead of a failure section.
COMPACT_AFTER = 50


def _step_summary_wanted() -> bool:
    """Whether to append to ``GITHUB_STEP_SUMMARY``: it names a file, and this process is not
    one that the loop started (a check phase, an agent's own pytest)."""
    from .stepsummary import target

    return (target() is not None and not is_child()
            and not os.environ.get(CONTROLLER_ENV))


def _markdown_wanted(config: pytest.Config) -> bool:
    """Whether this gate process writes a Markdown summary: not on a pytest-xdist worker (the
    controller aggregates the reports), and ``--ralph-report`` or ``GITHUB_STEP_SUMMARY``."""
    if hasattr(config, "workerinput") or is_child():
        return False
    return bool(config.getoption("ralph_report", None)) or _step_summary_wanted()


class GateSummary:
    """The gate's summary: per story, criteria verified / claimed / failed.

    Aggregated from reports (not ``session.items``), so it works under pytest-xdist.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.stories: dict[str, dict[str, int]] = {}
        self.claimed: list[str] = []
        self.judged: list[str] = []
        #: For the Markdown summary (``GITHUB_STEP_SUMMARY``, ``--ralph-report``), kept only
        #: when one is wanted: (node id, row) per criterion, the collection order, and the PRD
        #: files that could not be collected.
        self.rows: list[tuple[str, Row]] | None = [] if _markdown_wanted(config) else None
        self.order: dict[str, int] = {}
        self.broken: list[str] = []
        #: The ``--ralph-report`` file, once written.
        self.report: Path | None = None
        #: Warnings about files that could not be written, printed after the table (on a
        #: line of their own, not after the progress dots).
        self.warnings: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count each criterion once, by its call report (or a failed setup)."""
        if not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        props = report_props(report)
        if PROP_STORY not in props:
            return
        counts = self.stories.setdefault(str(props[PROP_STORY]),
                                         {"verified": 0, "claimed": 0, "failed": 0,
                                          "unclaimed": 0})
        if hasattr(report, "wasxfail"):  # --ralph-gate=claims: failing, story not claimed
            status = "unclaimed"
        elif report.passed and props.get(PROP_CLAIMED):
            status = "claimed"
            self.claimed.append(f"{props[PROP_STORY]}::{props[PROP_CRITERION]}: "
                                f"{props.get(PROP_TEXT, '')}")
        elif report.passed:
            status = "verified"
            if props.get(PROP_KIND) == VERIFIER_KIND:
                evidence = str(props.get(PROP_MESSAGE, "")).removeprefix(VERIFIER_PASSED)
                first = next(iter(evidence.strip().splitlines()), "")[:200]
                self.judged.append(f"{props[PROP_STORY]}::{props[PROP_CRITERION]}: "
                                   f"{props.get(PROP_TEXT, '')} -- {first}")
        else:
            status = "failed"
        counts[status] += 1
        if self.rows is not None:
            from .stepsummary import Row

            message = "" if report.passed else str(props.get(PROP_MESSAGE) or
                                                   report.longreprtext)
            self.rows.append((report.nodeid, Row(
                story=str(props[PROP_STORY]), criterion=str(props[PROP_CRITERION]),
                text=str(props.get(PROP_TEXT, "")), status=status, message=message,
                title=str(props.get(PROP_TITLE, "")))))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Keep the collection order, for the Markdown summary."""
        if self.rows is not None and not self.order:
            self.order = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """On the pytest-xdist controller: the collection order of the first worker."""
        if self.rows is not None and not self.order:
            self.order = {nodeid: i for i, nodeid in enumerate(ids)}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Keep the PRD files that could not be collected (once each, also under xdist)."""
        if self.rows is None or not report.failed:
            return
        path = report.nodeid.split("::", 1)[0]
        name = path.rsplit("/", 1)[-1]
        prd = get_settings(self.config).prd
        if not (any(fnmatch.fnmatch(name, p) for p in self.config.getini("ralph_prd_files"))
                or (prd is not None and prd.name == name)):
            return
        from ..loop.report import why

        lines = [ln.strip() for ln in report.longreprtext.splitlines() if ln.strip()]
        if len(lines) > 1 and lines[0].startswith("invalid PRD "):  # and its first problem
            line = f"{path}: {lines[0]}; {lines[1]}"
        else:
            line = f"{path}: {why(report.longreprtext, 300)}"
        if line not in self.broken:
            self.broken.append(line)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Append the gate's Markdown section to ``GITHUB_STEP_SUMMARY`` when PRD criteria
        were collected (or a PRD failed to load), and write ``--ralph-report PATH`` (an HTML
        page when PATH ends in ``.html``: :mod:`pytest_ralph.plugin.gatehtml`); a file
        that cannot be written is a warning, and the exit status stays as it is."""
        if self.rows is None:
            return
        from ..util.redact import Redactor
        from . import stepsummary

        last = len(self.order)
        ordered = sorted(self.rows, key=lambda pair: self.order.get(pair[0], last))
        notes: list[str] = self.config.stash.get(EMPTY_PRDS, [])
        prds = list(dict.fromkeys(nodeid.split("::", 1)[0] for nodeid, _ in ordered))
        text = stepsummary.render_gate([row for _, row in ordered], exit_code=int(exitstatus),
                                       prds=prds, notes=notes, errors=self.broken,
                                       redact=Redactor.from_env().text)
        warnings: list[str | None] = []
        wanted = self.config.getoption("ralph_report", None)
        if wanted:
            path = self.config.invocation_params.dir / wanted
            page = text
            if path.suffix.lower() in (".html", ".htm"):  # the same kind of page as a run's
                from .gatehtml import render_gate_html

                page = render_gate_html([row for _, row in ordered], exit_code=int(exitstatus),
                                        prds=prds, notes=notes, errors=self.broken,
                                        redact=Redactor.from_env().text)
            warnings.append(stepsummary.write(page, path))
            self.report = None if warnings[-1] else path
        if (ordered or notes or self.broken) and _step_summary_wanted():
            warnings.append(stepsummary.append(text))
        said = [f"pytest-ralph: warning: {warning}" for warning in warnings if warning]
        if self.config.pluginmanager.get_plugin("terminalreporter") is None:
            for line in said:
                err(line)
        else:
            self.warnings += said  # printed by pytest_terminal_summary, or at unconfigure

    def pytest_unconfigure(self) -> None:
        """Warnings that no terminal summary printed (pytest ended in an internal error)."""
        for line in self.warnings:
            err(line)
        self.warnings.clear()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        """Around pytest's own summary: with many failing criteria, keep them out of pytest's
        failure sections (quadratic in the number of failures, pytest issue 13360) and print
        one line each instead; then print the per-story table."""
        tr = terminalreporter
        failed: list[Any] = tr.stats.get("failed", [])
        ours = [r for r in failed if PROP_STORY in report_props(r)]
        compact = len(ours) > COMPACT_AFTER
        if compact:
            mine = {id(r) for r in ours}
            tr.stats["failed"] = [r for r in failed if id(r) not in mine]
        try:
            return (yield)
        finally:
            if compact:
                tr.stats["failed"] = failed
                tr.write_sep("=", f"pytest-ralph: {len(ours)} failing criteria, one line each")
                for r in ours:
                    first = next((ln for ln in r.longreprtext.splitlines() if ln.strip()), "")
                    tr.write_line(f"FAILED {r.nodeid} - {first[:200]}")
            self._write_table(tr)
            if self.report is not None:
                tr.write_line(f"pytest-ralph: report {self.report}")
            for line in self.warnings:
                tr.write_line(line, yellow=True)
            self.warnings.clear()

    def _write_table(self, tr: Any) -> None:
        """Print the per-story table and notes about empty PRDs."""
        notes = self.config.stash.get(EMPTY_PRDS, [])
        dialects = self.config.stash.get(WORKER_DIALECTS, {})
        if not self.stories and not notes and not dialects:
            return
        tr.write_sep("=", "pytest-ralph: acceptance criteria")
        if dialects:  # pytest-xdist: not shown after "collected N items"
            from ..loop.report import shown_path

            for path, line in dialects.items():
                tr.write_line(f"pytest-ralph: {shown_path(Path(path), self.config.rootpath)}: "
                              f"{line}")
        for note in notes:
            tr.write_line(f"pytest-ralph: {note}")
        for story, c in self.stories.items():
            line = (f"{story}: {c['verified']} verified, {c['claimed']} claimed, "
                    f"{c['failed']} failed")
            if c["unclaimed"]:
                line += (f", {c['unclaimed']} failing in a story not claimed done (not counted: "
                         "--ralph-gate=claims)")
            tr.write_line(line)
        _write_list(tr, self.claimed, f"claimed, not verified ({len(self.claimed)}): pass only "
                    "because their story says passes: true (or a done status)")
        _write_list(tr, self.judged, f"judged passed by the verifier ({len(self.judged)}): "
                    "criterion -- evidence")


def _write_list(tr: pytest.TerminalReporter, lines: list[str], heading: str,
                most: int = 20) -> None:
    """``heading`` and up to ``most`` indented ``lines`` (nothing when there are none)."""
    if not lines:
        return
    tr.write_line(heading)
    for line in lines[:most]:
        tr.write_line(f"  {line}")
    if len(lines) > most:
        tr.write_line(f"  ... and {len(lines) - most} more")
