"""Batched ``pytest`` criteria (ini ``ralph_check_batch``): the pytest side of
:mod:`pytest_ralph.checks.batch`.

Lazy: at the runtest of the first ``pytest`` criterion item, the ``pytest`` criteria that
follow it in this session (``session.items``, after ``-k``/``-m`` and deselection: ``-k``
selecting one criterion runs only it) whose check shares its working directory, pin options
and timeout (:func:`~pytest_ralph.checks.batch.batch_key`), and which have no ``timeout`` of
their own, run in one child pytest, up to the first criterion of another kind (or of its
own child): every criterion is checked in PRD order, as one child per criterion would be;
each other item's verdict waits in its stash until its own runtest,
which uses it only if the check its hook makes then is the same check.

Under pytest-xdist a worker batches the items it holds: the one it runs and those queued for
it (the worker's queue, read under its lock); an item another worker takes runs there. A
worker whose queue cannot be read batches nothing (one child per criterion, as without
batching).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from ..checks.base import CheckResult
from ..checks.batch import batch_key, batching_supported, run_batch
from ..checks.pytest_kind import PytestCheck

#: An item's verdict from a batch another item ran: (the check it was made for, the verdict).
BATCHED = pytest.StashKey[tuple[PytestCheck, CheckResult]]()


def batchable(item: Any, check: object) -> bool:
    """Whether ``item`` (a criterion item) with ``check`` can join a batch: a built-in
    ``pytest`` check (not a plugin's subclass) of a criterion without its own timeout, under
    a pytest batches follow (:func:`~pytest_ralph.checks.batch.batching_supported`)."""
    return type(check) is PytestCheck and item.criterion.kind == "pytest" \
        and item.criterion.timeout is None and batching_supported()


def batched_result(item: Any, check: PytestCheck) -> CheckResult:
    """``item``'s verdict: the one a batch already gave it, or run its batch now.

    Args:
        item: a :class:`pytest_ralph.plugin.collect.CriterionItem`.
        check: the check its ``pytest_ralph_make_check`` hook made (:func:`batchable`).
    """
    got: tuple[PytestCheck, CheckResult] | None = item.stash.get(BATCHED, None)
    if got is not None:
        del item.stash[BATCHED]
        if got[0] == check:
            return got[1]
    key = batch_key(check)
    members: list[tuple[Any, PytestCheck]] = [(item, check)]
    for other in _pending(item):
        if other is item or BATCHED in getattr(other, "stash", {}):
            continue
        if not isinstance(other, type(item)):
            break
        if other.criterion.kind != "pytest" or other.criterion.timeout is not None:
            # Checked in PRD order: a criterion that runs code may change the tree for the
            # criteria after it, and one that reads the tree (a file's presence) must see it
            # before the tests of the criteria after it run.
            break
        try:
            made = other.ihook.pytest_ralph_make_check(
                criterion=other.criterion, story=other.story, prd_path=other.path,
                config=other.config)
        except Exception:  # its own runtest reports it
            break
        if not (batchable(other, made) and batch_key(made) == key):
            break
        members.append((other, made))
    if len(members) == 1:
        return check.run()
    results = run_batch([m for _, m in members])
    for (other, made), result in zip(members[1:], results[1:], strict=True):
        other.stash[BATCHED] = (made, result)
    return results[0]


def _pending(item: pytest.Item) -> list[pytest.Item]:
    """The items this process will still run: the session's from ``item`` on, or on a
    pytest-xdist worker the ones queued for it (none when the queue cannot be read)."""
    session = item.session
    if not hasattr(item.config, "workerinput"):
        items = list(session.items)
        return items[items.index(item):] if item in items else []
    for plugin in item.config.pluginmanager.get_plugins():
        if type(plugin).__name__ != "WorkerInteractor":
            continue
        with contextlib.suppress(Exception):  # another pytest-xdist: batch nothing
            queue = plugin.torun
            with queue.lock() as queued:
                indices = [plugin.nextitem_index, *queued]
            return [session.items[i] for i in indices if isinstance(i, int)
                    and not isinstance(i, bool) and 0 <= i < len(session.items)]
    return []
