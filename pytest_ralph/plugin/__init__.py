"""The pytest plugin (entry point ``pytest11: ralph``): a thin switchboard.

Only the ``pytest_*`` hook functions are here, each handing over to a module of the plugin:

* ``pytest_addoption`` registers the ``ralph`` option group and the ini keys
  (:mod:`pytest_ralph.plugin.options`).
* ``pytest_configure`` resolves the settings once into ``config.stash``
  (:mod:`pytest_ralph.plugin.stash`) and checks the PRD (:mod:`pytest_ralph.plugin.discovery`).
* ``pytest_cmdline_main`` takes over for ``--ralph`` and runs the loop
  (:mod:`pytest_ralph.loop.controller`), like pytest-xdist's looponfail, and for the one-shot
  commands (:mod:`pytest_ralph.plugin.commands`).
* ``pytest_collect_file`` collects PRD files (:mod:`pytest_ralph.plugin.collect`).
* A results recorder writes the check-results file for the loop's child pytest
  (:mod:`pytest_ralph.plugin.recorder`), and a summary lists each story's verified / claimed /
  failed criteria (:mod:`pytest_ralph.plugin.summary`).

The fixtures live in :mod:`pytest_ralph.plugin.fixtures` and :mod:`pytest_ralph.plugin.dbfixture`
(registered by ``pytest_plugins``).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

# Imported with the plugin, not on first use (pytest_ralph.prd.yamlload): pytester's inline runs
# drop the modules a run imported, and PyYAML's C parser, which cannot be loaded twice, keeps
# the node classes of the first import, so a second import of PyYAML misreads every file.
import yaml  # noqa: F401

from . import collect, commands, discovery, options, recorder
from .collect import MARKER_HELP, PRDFile
from .failure import from_wire, to_wire
from .stash import get_settings, is_child, settings_lines
from .summary import GateSummary

pytest_plugins = ["pytest_ralph.plugin.dbfixture", "pytest_ralph.plugin.fixtures"]


@pytest.hookimpl(tryfirst=True)
def pytest_report_to_serializable(
        report: pytest.CollectReport | pytest.TestReport) -> dict[str, Any] | None:
    """A report whose failure is a criterion's text
    (:class:`pytest_ralph.plugin.failure.FailureText`)
    travels from a pytest-xdist worker with a mark, so that it arrives as one."""
    return to_wire(report)


@pytest.hookimpl(tryfirst=True)
def pytest_report_from_serializable(
        data: dict[str, Any]) -> pytest.CollectReport | pytest.TestReport | None:
    """The report :func:`pytest_report_to_serializable` marked, with its failure text."""
    kind = {"TestReport": pytest.TestReport, "CollectReport": pytest.CollectReport}.get(
        str(data.get("$report_type")))
    return from_wire(data, kind) if kind is not None else None


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Add the ``pytest_ralph_*`` hook specifications (:mod:`pytest_ralph.plugin.hookspecs`) and
    register their built-in ``trylast`` implementations (:mod:`pytest_ralph.plugin.hookimpls`)."""
    from . import hookspecs
    from .hookimpls import BUILTIN_PLUGIN, BuiltinHooks

    pluginmanager.add_hookspecs(hookspecs)
    if not pluginmanager.has_plugin(BUILTIN_PLUGIN):
        pluginmanager.register(BuiltinHooks(), BUILTIN_PLUGIN)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before the first ``conftest.py`` loads.

    For ``pytest --ralph``: refuse (usage error, exit 4) to load ``conftest.py`` files that
    changed since the last run's verified snapshot, unless ``--ralph-accept-changes`` or
    ``--ralph-allow-criteria-edits``: they would run inside the loop itself
    (:func:`pytest_ralph.plugin.commands.refuse_changed_conftests`).

    On a pytest-xdist worker of a check phase: put the rootdir (the working directory) where
    the check phase's launcher put it (:func:`pytest_ralph.plugin.recorder.anchor_worker_rootdir`).

    Raises:
        pytest.UsageError: a changed ``conftest.py`` for ``--ralph``.
    """
    commands.refuse_changed_conftests(early_config)
    recorder.anchor_worker_rootdir()


def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    """Set aside a ``conftest.py`` with a misspelt ``pytest_ralph_*`` hook, for a usage error
    instead of pluggy's internal error (:func:`pytest_ralph.plugin.hookimpls.set_aside`)."""
    from .hookimpls import set_aside

    set_aside(plugin, manager)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Register ``--ralph*`` options (group ``ralph``) and their ``ralph_*`` ini twins
    (:func:`pytest_ralph.plugin.options.add_options`)."""
    options.add_options(parser, pluginmanager)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """Take over the session for ``--ralph`` / ``--ralph-dry-run`` (return the loop's exit
    code) and for ``--ralph-status`` / ``--ralph-cancel`` / ``--ralph-init`` /
    ``--ralph-doctor``, which go alone (return their exit code); never in the loop's child
    (:func:`pytest_ralph.plugin.commands.main`).

    Raises:
        pytest.UsageError: incompatible flags (exit 4).
    """
    if is_child():
        return None
    return commands.main(config)


def pytest_configure(config: pytest.Config) -> None:
    """Resolve settings; refuse misspelt ``pytest_ralph_*`` hooks; in the loop's child, record
    results; add the discovered PRD."""
    from .hookimpls import check_hook_names

    check_hook_names(config.pluginmanager)
    config.addinivalue_line("markers", MARKER_HELP)
    settings = get_settings(config)
    recorder.record_results(config)
    config.pluginmanager.register(GateSummary(config), "ralph-gate-summary")
    discovery.check_prd(config, settings)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """The effective pytest-ralph settings that differ from their defaults, with where each
    came from; with ``-v`` every setting (:func:`pytest_ralph.plugin.stash.settings_lines`)."""
    return settings_lines(config, get_settings(config), "ralph: ") or None


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(
    file_path: Path, parent: pytest.Collector
) -> Generator[None, list[Any], list[Any]]:
    """Collect as a PRD, besides what other plugins and ``conftest.py`` files collect: files
    matching ini ``ralph_prd_files``, the configured PRD (``--ralph-prd``, ini ``ralph_prd``,
    ``PYTEST_RALPH_PRD``), and a ``.json``/``.jsonc``/``.yaml``/``.yml`` file named on the
    command line that nothing else collects (pytest's YAML example, ``pytest
    test_simple.yaml`` with a ``conftest.py`` collecting it, stays that conftest's;
    :func:`pytest_ralph.plugin.discovery.is_prd_file`)."""
    collected = yield
    if discovery.is_prd_file(file_path, parent, taken=bool(collected)):
        return [*collected, PRDFile.from_parent(parent, path=file_path)]
    return collected


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """After "collected N items" (also with ``--collect-only`` and ``-q``): one line per
    collected PRD file that is not in the canonical shape, saying which dialect was applied
    and what was renamed or synthesized (:func:`pytest_ralph.plugin.collect.dialect_lines`)."""
    return collect.dialect_lines(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand what collection found (dialects, empty PRDs) to the
    controller (:func:`pytest_ralph.plugin.collect.hand_over`)."""
    collect.hand_over(session)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the pytest-xdist controller: keep what a worker's collection found (every worker
    collects the same files, so each note is kept once;
    :func:`pytest_ralph.plugin.collect.take_over`)."""
    collect.take_over(node)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Refuse misspelt hooks of conftest.py files loaded during collection; add the
    discovered PRD when pytest's own walk did not reach it (a hidden ``.ralph/`` folder,
    outside ``testpaths``) and ``--ignore``, ``--ignore-glob`` or a ``conftest.py``'s
    ``collect_ignore`` do not exclude it; deselect stories not named by ``--ralph-story``
    (:mod:`pytest_ralph.plugin.discovery`)."""
    from .hookimpls import check_hook_names

    check_hook_names(config.pluginmanager)
    discovery.add_discovered_prd(session, config, items)
    discovery.select_stories(config, items)
