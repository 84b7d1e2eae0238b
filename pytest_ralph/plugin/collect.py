"""Collection: a PRD file -> one collector per user story -> one item per acceptance criterion.

Node ids are ``<path>::<story id>::<criterion id>`` (``AC<n>`` unless the criterion has
its own ``id``); the criterion text is the item's headline (``reportinfo``). Each item has
the :data:`MARKER` marker, and ``-k`` matches its story id, criterion id, text and story
title. An invalid PRD is a collection error that lists every problem, without a traceback.

What collection found besides the items (the dialect of each PRD not in the canonical shape,
the PRDs without stories) is kept in ``config.stash`` (:data:`DIALECTS`, :data:`EMPTY_PRDS`);
under pytest-xdist each worker hands it to the controller (:func:`hand_over`,
:func:`take_over`). :func:`report_props` reads back the ``ralph_*`` user properties of a
report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..checks.base import CheckResult
from ..checks.registry import UnknownKindCheck
from ..loop.hooks import HookError
from ..oracle import phasewatch
from ..prd.errors import PRDError
from ..prd.load import load_prd
from ..prd.model import Criterion, Story
from .batching import batchable, batched_result
from .failure import FailureText
from .stash import get_settings

#: user_properties keys put on each criterion's reports (plain str/bool values only).
PROP_STORY = "ralph_story"
PROP_CRITERION = "ralph_criterion"
PROP_KIND = "ralph_kind"
PROP_TEXT = "ralph_text"
PROP_TITLE = "ralph_title"
PROP_CLAIMED = "ralph_claimed"
PROP_MESSAGE = "ralph_message"


def report_props(report: pytest.TestReport) -> dict[str, Any]:
    """The ``ralph_*`` user properties of ``report`` (none for a test that is not a
    criterion)."""
    return {k: v for k, v in report.user_properties if k.startswith("ralph_")}

#: The marker on every criterion item: ``-m ralph`` selects the criteria, ``-m 'not ralph'``
#: the other tests; on pytest >= 8.3 ``-m "ralph(kind='run')"`` or ``-m "ralph(story='US-1')"``
#: select by its keyword arguments. Registered by the plugin's ``pytest_configure``.
MARKER = "ralph"
MARKER_HELP = (f"{MARKER}(story, criterion, kind): pytest-ralph: added to every acceptance "
               "criterion collected from a PRD (-m ralph selects them; -m \"ralph(kind='run')\" "
               "selects by an argument, pytest >= 8.3).")
_MARK = getattr(pytest.mark, MARKER)


class CriterionFailed(Exception):
    """Raised by :meth:`CriterionItem.runtest` when a criterion does not hold."""

    def __init__(self, result: CheckResult) -> None:
        super().__init__(result.message)
        self.result = result


class PRDFile(pytest.File):
    """A PRD file; collects one :class:`StoryCollector` per user story, in file order."""

    def collect(self) -> Iterator[StoryCollector]:
        """Load the PRD (an invalid one raises :class:`PRDError`, shown without traceback)."""
        settings = get_settings(self.config)
        self.config.stash.setdefault(COLLECTED_PRDS, set()).add(self.path.resolve())
        prd = load_prd(self.path, max_bytes=settings.max_prd_bytes)
        if prd.dialect != "canonical" or not prd.stories:
            from ..prd.describe import dialect_line, no_stories_message  # lazy: rarely needed

            line = dialect_line(prd)
            if line:
                dialects = self.config.stash.setdefault(DIALECTS, {})
                dialects[self.path.resolve()] = line
            if not prd.stories:
                notes: list[str] = self.config.stash.setdefault(EMPTY_PRDS, [])
                notes.append(f"{self.path}: {no_stories_message(prd)}")
        # ihook: the hooks of plugins and of the conftest.py files of the PRD's folder and
        # its parents, as pytest scopes conftest hooks to the files under their folder.
        self.ihook.pytest_ralph_prd_loaded(prd=prd, config=self.config)
        for story in prd.stories:
            yield StoryCollector.from_parent(self, name=story.id, story=story)

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> str | Any:
        """The PRD problems as plain text; other errors as pytest shows them."""
        if isinstance(excinfo.value, PRDError):
            return FailureText(excinfo.value.describe(), str(self.path))
        return super().repr_failure(excinfo)


class StoryCollector(pytest.Collector):
    """One user story; collects one :class:`CriterionItem` per acceptance criterion."""

    def __init__(self, *, story: Story, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.story = story

    def collect(self) -> Iterator[CriterionItem]:
        """The story's criteria, in file order."""
        for criterion in self.story.criteria:
            yield CriterionItem.from_parent(self, name=criterion.id, criterion=criterion,
                                            story=self.story)


class CriterionItem(pytest.Item):
    """One acceptance criterion, checked by its check kind (:mod:`pytest_ralph.checks.registry`)."""

    def __init__(self, *, criterion: Criterion, story: Story, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.criterion = criterion
        self.story = story
        self.keywords[story.id] = True
        self.add_marker(_MARK(story=story.id, criterion=criterion.id, kind=criterion.kind))
        # -k matches the criterion's text and the story's title too (by substring, any case)
        self.extra_keyword_matches.update(t for t in (criterion.text, story.title) if t)
        self.user_properties += [(PROP_STORY, story.id), (PROP_TITLE, story.title),
                                 (PROP_CRITERION, criterion.id), (PROP_KIND, criterion.kind),
                                 (PROP_TEXT, criterion.text)]

    def runtest(self) -> None:
        """Run the check; raise :class:`CriterionFailed` when the criterion does not hold."""
        settings = get_settings(self.config)
        watch = phasewatch.current()  # the judges' signatures, taken before the first check
        check = self.ihook.pytest_ralph_make_check(
            criterion=self.criterion, story=self.story, prd_path=self.path, config=self.config)
        if not callable(getattr(check, "run", None)):
            raise HookError(
                f"pytest_ralph_make_check returned {check!r} for {self.criterion.key} (kind "
                f"{self.criterion.kind!r}); expected an object with a run() method that returns "
                "a pytest_ralph.CheckResult, or None")
        result = batched_result(self, check) if settings.check_batch and \
            batchable(self, check) else check.run()
        if isinstance(check, UnknownKindCheck) and not result.passed:
            result = dataclasses.replace(result, message=result.message + _out_of_scope(self))
        if not isinstance(result, CheckResult):
            raise HookError(
                f"the check {type(check).__qualname__} that pytest_ralph_make_check made for "
                f"{self.criterion.key} returned {result!r} from run(); expected a "
                "pytest_ralph.CheckResult(passed, message)")
        changed = watch.changed() if watch is not None else ""
        if changed:  # a judge changed during the phase: nothing it decided can be trusted
            result = CheckResult(False, changed + (f"\nthe check itself said: {result.message}"
                                                   if result.message else ""))
        if result.kind:  # decided by another kind of check (the verifier): report that kind
            self.user_properties[:] = [(k, result.kind if k == PROP_KIND else v)
                                       for k, v in self.user_properties]
        self.user_properties += [(PROP_CLAIMED, result.claimed), (PROP_MESSAGE, result.message)]
        if result.passed:
            return
        if settings.gate == "claims" and not self.story.passes:
            # Work in progress: reported, but only claimed-done stories decide the gate.
            pytest.xfail(f"story {self.story.id} is not claimed done (passes: false), so "
                         f"--ralph-gate=claims does not count this failure: {result.message}")
        if settings.gate == "claims":
            raise CriterionFailed(dataclasses.replace(
                result, message=f"story {self.story.id} claims passes: true, but criterion "
                                f"{self.criterion.key} fails: {result.message}"))
        raise CriterionFailed(result)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        """The check's own failure text (what was expected, what was found)."""
        if isinstance(excinfo.value, CriterionFailed):
            return FailureText(excinfo.value.result.message, str(self.path),
                               self.criterion.line or 0)
        if isinstance(excinfo.value, HookError):
            return FailureText(str(excinfo.value), str(self.path), self.criterion.line or 0)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """(PRD path, 0-based line or ``None``, the criterion text as headline)."""
        line = self.criterion.line - 1 if self.criterion.line else None
        return self.path, line, f"{self.criterion.key}: {self.criterion.text}"


def _out_of_scope(item: CriterionItem) -> str:
    """A note naming the ``conftest.py`` files that implement ``pytest_ralph_make_check`` but
    do not apply to ``item``'s PRD (they are not in its folder or a parent), or ``""``."""
    here = item.path.parent
    files = []
    for impl in item.config.hook.pytest_ralph_make_check.get_hookimpls():
        path = Path(getattr(impl.plugin, "__file__", None) or "")
        if path.name == "conftest.py" and not here.is_relative_to(path.parent):
            files.append(str(path))
    if not files:
        return ""
    return (f" ({', '.join(files)} implement{'s' if len(files) == 1 else ''} "
            f"pytest_ralph_make_check, but a conftest.py applies only to files in its folder "
            f"and below; move it to {here / 'conftest.py'} or a parent folder's)")


EMPTY_PRDS = pytest.StashKey[list[str]]()
#: Collected PRD files that are not in the canonical shape: resolved path -> what the loader
#: did (``dialect tasks+steps (stories under $.tasks; ...)``), in collection order.
DIALECTS = pytest.StashKey[dict[Path, str]]()
COLLECTED_PRDS = pytest.StashKey[set[Path]]()


def dialect_lines(config: pytest.Config) -> list[str]:
    """After "collected N items" (also with ``--collect-only`` and ``-q``): one line per
    collected PRD file that is not in the canonical shape, saying which dialect was applied
    and what was renamed or synthesized."""
    found = config.stash.get(DIALECTS, {})
    if not found:
        return []
    from ..loop.report import shown_path

    return [f"pytest-ralph: {shown_path(path, config.rootpath)}: {line}"
            for path, line in found.items()]


#: Under pytest-xdist, on the controller: the dialect lines the workers collected (shown in
#: the summary, since the controller collects nothing and prints no collection lines).
WORKER_DIALECTS = pytest.StashKey[dict[str, str]]()
_WORKER_KEY = "pytest_ralph"


def hand_over(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand what collection found (dialects, empty PRDs) to the
    controller."""
    config = session.config
    out = getattr(config, "workeroutput", None)
    if out is not None:
        empty: list[str] = config.stash.get(EMPTY_PRDS, [])
        out[_WORKER_KEY] = {
            "dialects": {str(p): line for p, line in config.stash.get(DIALECTS, {}).items()},
            "empty": list(empty)}


def take_over(node: Any) -> None:
    """On the pytest-xdist controller: keep what a worker's collection found (every worker
    collects the same files, so each note is kept once)."""
    found = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if not found:
        return
    config = node.config
    config.stash.setdefault(WORKER_DIALECTS, {}).update(found["dialects"])
    notes = config.stash.setdefault(EMPTY_PRDS, [])
    notes += [n for n in found["empty"] if n not in notes]
