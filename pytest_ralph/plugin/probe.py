"""The tamper probe of a ``pytest`` criterion's child pytest (``-p pytest_ralph.plugin.probe``).

A ``pytest`` criterion's tests import the code under test, which then runs in the very process
that decides whether those tests pass: an agent can write code that, once imported, rewrites
pytest's reports in memory (``TestReport.from_item_and_call`` patched to say "passed", a hook
wrapper registered at import time). This plugin makes that visible to
:class:`pytest_ralph.checks.pytest_kind.PytestCheck`, the parent that reads the child's JUnit XML:

- **Probe items.** When anything was collected, two items are added, one first and one last
  (test functions of the module of the first test and of the last one),
  whose test always raises. Their names carry a random token
  (:data:`~pytest_ralph.util.env.PROBE_TOKEN_ENV`, chosen by the parent for each run); the
  parent requires both to have *failed*. A change that forces every
  outcome to passed passes them too, and the criterion fails, saying why.
- **Node ids.** Each collected item (not the probes) gets two user properties, its node id
  (:data:`~pytest_ralph.checks.pytest_kind.NODEID_PROPERTY`) and its file's path
  (:data:`~pytest_ralph.checks.pytest_kind.PATH_PROPERTY`), in its JUnit ``testcase``: the
  parent of a batched child (:mod:`pytest_ralph.checks.batch`) tells by them which criteria
  each outcome belongs to.
- **An outcome invariant.** Outermost around ``pytest_runtest_makereport``: the call phase of a
  test that raised (``call.excinfo`` set) never yields a passed report in pytest (an ``xfail``
  yields ``skipped``); such a report is turned back to failed, naming the exception.

Code that reads this module can still aim at its own tests only and hide their exceptions
before any report is made; ``docs/limitations.md`` says so. Everything here runs in the child
pytest; the parent only sets the token and reads the JUnit XML.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from typing import Any

import pytest

from ..checks.pytest_kind import NODEID_PROPERTY, PATH_PROPERTY, PROBE_FAILURE, probe_names
from ..util.env import PROBE_TOKEN_ENV

#: Where an invariant breach is named in a report's ``longrepr``.
TAMPERED = ("pytest-ralph: this test raised {exc}, yet its report said passed: code loaded by "
            "the tests changed how pytest reports outcomes")


def _token() -> str:
    """The token of this child, or ``""`` when none (or a malformed one) was given."""
    token = os.environ.get(PROBE_TOKEN_ENV, "")
    return token if len(token) == 16 and all(c in "0123456789abcdef" for c in token) else ""


class ProbeItem(pytest.Item):
    """An item whose test always fails (see the module docstring)."""

    def runtest(self) -> None:
        """Raise ``AssertionError`` (:data:`PROBE_FAILURE`)."""
        raise AssertionError(PROBE_FAILURE)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        """One line (:data:`~pytest_ralph.checks.pytest_kind.PROBE_FAILURE`), not a traceback:
        the parent leaves the probe's lines out of the output it shows."""
        return PROBE_FAILURE

    def reportinfo(self) -> tuple[os.PathLike[str] | str, int | None, str]:
        """Where pytest says the item is: its module's file, no line."""
        return self.path, None, self.name


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Put a probe item first and one last, when anything was collected and a token is set;
    give every other item its node id and path as user properties."""
    token = _token()
    if not token or not items:
        return
    for item in items:  # which criteria of a batch each testcase belongs to (checks.batch)
        item.user_properties += [(NODEID_PROPERTY, item.nodeid), (PATH_PROPERTY, str(item.path))]
    first, last = probe_names(token)
    items.insert(0, _probe(session, items[0], first))
    items.append(_probe(session, items[-1], last))


def _probe_test() -> None:
    """The test of a probe :class:`pytest.Function`: it always fails."""
    raise AssertionError(PROBE_FAILURE)


def _probe(session: pytest.Session, beside: pytest.Item, name: str) -> pytest.Item:
    """A probe named ``name`` beside the test ``beside``: a :class:`pytest.Function` of its
    module when it has one (code that tells a module's tests from the rest by node id, or
    that changes how every ``Function`` runs, treats the probe as one of those tests), else
    a :class:`ProbeItem` of that test's parent."""
    module = beside.getparent(pytest.Module)
    if module is not None:
        with contextlib.suppress(Exception):  # a module pytest would not make a test of
            return pytest.Function.from_parent(module, name=name, callobj=_probe_test)
    return ProbeItem.from_parent(beside.parent or session, name=name)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, Any, Any]:
    """Leave the probe items out of the count the progress is shown against (``[100%]``
    after the last test); pytest's exit status and every report are unchanged."""
    token = _token()
    names = probe_names(token) if token else ()
    probes = sum(1 for item in session.items if item.name in names)
    if probes and session.testscollected > probes:
        session.testscollected -= probes
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Outermost around every report: a call that raised is never reported as passed."""
    report = yield
    excinfo = call.excinfo
    if (call.when == "call" and excinfo is not None and report.outcome == "passed"
            and _token()):  # (an xfail that raised is "skipped", never "passed")
        report.outcome = "failed"
        report.longrepr = TAMPERED.format(exc=excinfo.exconly()[:300])
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """Keep the probe items out of the terminal (no letter, no count, no failure section);
    their JUnit entries and the exit status are pytest's as ever."""
    token = _token()
    if token and report.nodeid.rpartition("::")[2] in probe_names(token):
        return "", "", ""
    return None
