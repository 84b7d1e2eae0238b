"""The pytest plugin (entry point ``pytest11: ralph``): a thin switchboard.

* ``pytest_addoption`` registers the ``ralph`` option group and the ini keys.
* ``pytest_configure`` resolves the settings once into ``config.stash``.
* ``pytest_cmdline_main`` takes over for ``--ralph`` and runs the loop
  (:mod:`pytest_ralph.loop.controller`), like pytest-xdist's looponfail.
* ``pytest_collect_file`` collects PRD files (:mod:`pytest_ralph.plugin.collect`).
* A results recorder writes the check-results file for the loop's child pytest,
  and a summary lists each story's verified / claimed / failed criteria.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import os
import signal
import stat
import sys
import tempfile
import traceback
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Imported with the plugin, not on first use (pytest_ralph.prd.yamlload): pytester's inline runs
# drop the modules a run imported, and PyYAML's C parser, which cannot be loaded twice, keeps
# the node classes of the first import, so a second import of PyYAML misreads every file.
import yaml  # noqa: F401

from ..checks.kinds import VERIFIER_KIND, VERIFIER_PASSED
from ..checks.phase import CHILD_ENV, WORKER_ROOTDIR_ENV
from ..checks.results import CriterionResult, prd_order, write_results
from ..claude.arming import CONTROLLER_ENV
from ..loop.settings import SPECS, Settings, SettingsError, default_text, describe, resolve
from ..prd.load import PRD_FILE_NAMES, PRD_FORMATS, discover_prd
from .collect import (
    COLLECTED_PRDS,
    DIALECTS,
    EMPTY_PRDS,
    MARKER_HELP,
    PROP_CLAIMED,
    PROP_CRITERION,
    PROP_KIND,
    PROP_MESSAGE,
    PROP_STORY,
    PROP_TEXT,
    PROP_TITLE,
    CriterionItem,
    PRDFile,
)
from .failure import from_wire, to_wire

if TYPE_CHECKING:
    from ..loop.controller import Loop
    from .stepsummary import Row

pytest_plugins = ["pytest_ralph.plugin.dbfixture", "pytest_ralph.plugin.fixtures"]

SETTINGS = pytest.StashKey[Settings]()

#: Above this many failing criteria, each gets one summary line instead of a failure section.
COMPACT_AFTER = 50
DISCOVERED_PRD = pytest.StashKey[Path]()


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
    (:func:`pytest_ralph.state.verified.check_loop_conftests`).

    On a pytest-xdist worker of a check phase: put the rootdir (the working directory) where
    the check phase's launcher put it, as ``python -m pytest`` has it
    (:data:`pytest_ralph.checks.phase.PYTEST_LAUNCHER`).

    Raises:
        pytest.UsageError: a changed ``conftest.py`` for ``--ralph``.
    """
    _check_loop_conftests(early_config)
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


def loop_anchors(config: pytest.Config) -> tuple[Path, ...]:
    """Where the loop's own pytest looks for its initial ``conftest.py`` files: the
    invocation folder, its path arguments and ``testpaths`` (see
    :func:`pytest_ralph.oracle.snapshot.loop_conftests`)."""
    base = config.invocation_params.dir
    out = [base]
    for arg in config.invocation_params.args:
        text = str(arg)
        if not text.startswith("-") and (base / text.split("::")[0]).exists():
            out.append(base / text.split("::")[0])
    with contextlib.suppress(ValueError, KeyError):
        out += [config.rootpath / str(p) for p in config.getini("testpaths") or ()]
    return tuple(dict.fromkeys(p.resolve() for p in out))


#: ``sys.path[0]`` when this module was imported: ``""`` or the working folder under
#: ``python -m pytest``.
_FIRST_PATH = sys.path[0] if sys.path else None


def _started_unsafely(config: pytest.Config) -> list[str]:
    """A warning when the loop was started as ``python -m pytest`` without ``-P``: the project
    was first on ``sys.path`` before pytest and its plugins were imported, so a module the
    agent adds there (``pytest.py``, ``pluggy/``, a plugin named in ``addopts``) would be
    imported into the loop itself by the next such start."""
    first = _FIRST_PATH
    if first is None or getattr(sys.flags, "safe_path", False):
        return []
    try:
        here = os.path.realpath(first or os.curdir)
    except (OSError, ValueError):
        return []
    root = os.path.realpath(config.rootpath)
    if here != root and not here.startswith(root.rstrip(os.sep) + os.sep):
        return []
    return ["pytest-ralph: warning: started as `python -m pytest`, which puts the project "
            "first on sys.path before pytest and its plugins load: a module the agent writes "
            "there would run inside the next loop you start this way; start it with the "
            "`pytest` command (or `python -P -m pytest` on Python 3.11+)"]


def _check_loop_conftests(config: pytest.Config) -> None:
    """The ``--ralph`` part of :func:`pytest_load_initial_conftests`."""
    ns = config.known_args_namespace
    if _is_child() or not getattr(ns, "ralph", False):
        return
    from ..loop.settings import from_person
    from ..state.verified import check_loop_conftests

    try:
        settings = _resolve_settings(config, ns)  # not cached: the parse is not complete
    except pytest.UsageError:
        return  # reported when the loop starts
    if from_person(settings, "accept_changes") or from_person(settings,
                                                              "allow_criteria_edits"):
        return
    why = check_loop_conftests(settings.dir, config.rootpath, loop_anchors(config))
    if why:
        raise pytest.UsageError(f"pytest-ralph: {why}")


def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    """Set aside a ``conftest.py`` with a misspelt ``pytest_ralph_*`` hook, for a usage error
    instead of pluggy's internal error (:func:`pytest_ralph.plugin.hookimpls.set_aside`)."""
    from .hookimpls import set_aside

    set_aside(plugin, manager)


#: Options of pytest's cacheprovider and stepwise plugins, which the loop's check phase turns
#: off (``-p no:cacheprovider``): (spellings, takes a value).
_CACHE_OPTIONS = ((("--lf", "--last-failed"), False), (("--ff", "--failed-first"), False),
                  (("--nf", "--new-first"), False), (("--cache-clear",), False),
                  (("--lfnf", "--last-failed-no-failures"), True),
                  (("--sw", "--stepwise"), False), (("--sw-skip", "--stepwise-skip"), False),
                  (("--sw-reset", "--stepwise-reset"), False))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Register ``--ralph*`` options (group ``ralph``) and their ``ralph_*`` ini twins.

    In the loop's check phase, which runs without pytest's cache (``-p no:cacheprovider``),
    also accept and ignore the cache's options, so that ``addopts`` written for plain
    ``pytest`` (``--ff``, ``--lf``, ``--sw``) do not break every check."""
    group = parser.getgroup("ralph", "Ralph agent loops (pytest-ralph)")
    if _is_child() and pluginmanager.is_blocked("cacheprovider"):
        for names, valued in _CACHE_OPTIONS:
            group.addoption(*names, action="store" if valued else "store_true",
                            dest="ralph_ignored_" + names[-1].lstrip("-").replace("-", "_"),
                            help=argparse.SUPPRESS)
    group.addoption("--ralph", action="store_true", default=False,
                    help="Run the Ralph loop: check the PRD's criteria, run the agent on what "
                         "fails, check again, until all pass or a limit is hit. "
                         "(default: off)")
    for spec in SPECS:
        if not spec.cli:
            continue
        help_text = (f"{spec.help} [{f'ini {spec.ini}, ' if spec.ini_allowed else ''}env "
                     f"{spec.env}] {default_text(spec)}")
        if spec.kind == "bool":
            group.addoption(spec.cli, action="store_true", dest=spec.dest, default=None,
                            help=help_text)
        elif spec.kind == "list":
            group.addoption(spec.cli, action="append", dest=spec.dest, default=None,
                            metavar="ID", help=help_text)
        else:
            group.addoption(spec.cli, action="store", dest=spec.dest, default=None,
                            metavar=spec.metavar or ("|".join(spec.choices) if spec.choices
                                                     else _METAVARS.get(spec.kind, "VALUE")),
                            help=help_text)
    group.addoption("--ralph-dry-run", action="store_true", default=False,
                    help="Print the first prompt and the agent's argv; run nothing. "
                         "(default: off)")
    group.addoption("--ralph-new", action="store_true", default=False,
                    help="Start a new run even if the last one (interrupted, cancelled, "
                         "crashed or ended on agent errors) could be resumed. "
                         "(default: off)")
    group.addoption("--ralph-status", action="store_true", default=False,
                    help="Print the current or last run of the state folder and exit; safe "
                         "while a loop runs. (default: off)")
    group.addoption("--ralph-cancel", action="store_true", default=False,
                    help="Stop the loop running on the state folder (it exits 2 and can be "
                         "resumed with --ralph); idempotent. (default: off)")
    group.addoption("--ralph-init", action="store_true", default=False,
                    help="Scaffold the project: a prd.json whose example story checks the "
                         "project (its tests; ruff and mypy when configured), the ralph ini "
                         "keys in its pytest configuration file (a new pytest.ini where there "
                         "is none), the state folder in .gitignore. Never overwrites a file or "
                         "a value; running it again changes nothing. With --ralph-driver "
                         "claude, also install the Claude Code Stop hook in "
                         ".claude/settings.json and arm a run that the next Claude Code "
                         "session adopts. (default: off)")
    group.addoption("--ralph-driver", action="store", default=None, choices=("claude",),
                    help="With --ralph-init, what drives the loop: 'claude' (a Claude Code "
                         "session, through its Stop hook). Without it --ralph-init only "
                         "scaffolds (the loop is then `pytest --ralph`). (default: none)")
    group.addoption("--ralph-doctor", action="store_true", default=False,
                    help="Check the Claude Code wiring: the Stop hook command in "
                         ".claude/settings.json exists and answers a sample payload. "
                         "(default: off)")
    group.addoption("--ralph-report", action="store", default=None, metavar="PATH",
                    help="Also write a Markdown report to PATH (replaced): the gate's summary "
                         "(per story verified / claimed / failed, the failing criteria, the "
                         "exit code), or with --ralph a copy of the loop's final report. "
                         "(default: none)")
    group.addoption("--ralph-results", action="store", default=None, metavar="PATH",
                    help=argparse.SUPPRESS)
    for spec in SPECS:
        if not spec.ini_allowed:
            continue
        ini_help = f"pytest-ralph: {spec.help} (env {spec.env}) {default_text(spec)}"
        if spec.kind == "list":
            parser.addini(spec.ini, ini_help, type="args")
        elif spec.kind in ("mapping", "paths"):
            parser.addini(spec.ini, ini_help, type="linelist")
        else:  # unset is None; settings.resolve() then falls back to the default
            parser.addini(spec.ini, ini_help, type=_ini_type(spec.kind), default=None)
    parser.addini("ralph_prd_files", "pytest-ralph: file name patterns collected as PRDs. "
                  f"(default: {' '.join(PRD_FILE_NAMES)})", type="args",
                  default=list(PRD_FILE_NAMES))


def _ini_type(kind: str) -> Any:
    """The ``addini`` type: strings, which :mod:`pytest_ralph.loop.settings` validates with messages
    that name the source; on pytest >= 9.2 also the native TOML type of ``[tool.pytest]``
    (``ralph_max_iterations = 8``, ``ralph_strict = true``)."""
    if pytest.version_tuple < (9, 2):
        return "string"
    native: dict[str, Any] = {"int": str | int, "float": str | float | int, "bool": str | bool,
                              "workers": str | int}
    return native.get(kind, "string")


_METAVARS = {"path": "PATH", "str": "CMD|PRESET", "int": "N", "float": "SECONDS"}


def _resolve_settings(config: pytest.Config, namespace: Any = None) -> Settings:
    if namespace is None:
        cli = {spec.name: config.getoption(spec.dest, None) for spec in SPECS if spec.cli}
    else:  # before the command line is parsed in full: what pytest's early parse found
        cli = {spec.name: getattr(namespace, spec.dest, None) for spec in SPECS if spec.cli}
    try:
        return resolve(
            cli=cli, env=os.environ, ini=config.getini,
            ini_file=config.inipath.name if config.inipath else "no ini file",
            invocation_dir=config.invocation_params.dir, rootdir=config.rootpath,
            overridden={str(o).partition("=")[0].strip()
                        for o in config.getoption("override_ini", None) or ()})
    except SettingsError as exc:
        raise pytest.UsageError(f"pytest-ralph: {exc}") from None


def get_settings(config: pytest.Config) -> Settings:
    """The effective settings of this session (resolved once, then cached in ``config.stash``).

    Raises:
        pytest.UsageError: a setting has a bad value.
    """
    if SETTINGS not in config.stash:
        config.stash[SETTINGS] = _resolve_settings(config)
    return config.stash[SETTINGS]


def _is_child() -> bool:
    return bool(os.environ.get(CHILD_ENV))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """Take over the session for ``--ralph`` / ``--ralph-dry-run`` (return the loop's exit
    code) and for ``--ralph-status`` / ``--ralph-cancel``, which go alone (return their exit
    code).

    Raises:
        pytest.UsageError: incompatible flags (exit 4).
    """
    if _is_child():
        return None
    alone = ("ralph_status", "ralph_cancel", "ralph_init", "ralph_doctor")
    if any(config.getoption(dest) for dest in alone):
        given = [name for dest, name in (("ralph_status", "--ralph-status"),
                                         ("ralph_cancel", "--ralph-cancel"),
                                         ("ralph_init", "--ralph-init"),
                                         ("ralph_doctor", "--ralph-doctor"),
                                         ("ralph", "--ralph"),
                                         ("ralph_dry_run", "--ralph-dry-run"))
                 if config.getoption(dest)]
        if len(given) > 1:
            raise pytest.UsageError(
                f"pytest-ralph: {given[0]} cannot be used with {' or '.join(given[1:])} "
                "(--ralph-status, --ralph-cancel, --ralph-init and --ralph-doctor each do one "
                "thing and exit; run each on its own)")
        _refuse_with_command(config, given[0])
        code, text = _command(config, given[0])
        (_err if code else _out)(text)
        return code
    if config.getoption("ralph_driver"):
        raise pytest.UsageError("pytest-ralph: --ralph-driver goes with --ralph-init "
                                "(`pytest --ralph-init --ralph-driver claude`)")
    if not (config.getoption("ralph") or config.getoption("ralph_dry_run")):
        if config.getoption("ralph_new"):
            raise pytest.UsageError("pytest-ralph: --ralph-new goes with --ralph (`pytest "
                                    "--ralph --ralph-new` starts a new run instead of resuming "
                                    "the last one)")
        return None
    dry = "use --ralph-dry-run to see what the loop would do"
    debug = "the loop runs the checks in child processes; debug a criterion with plain pytest"
    for flag, name, hint in (("usepdb", "--pdb", debug), ("trace", "--trace", debug),
                             ("collectonly", "--collect-only", dry),
                             ("setupplan", "--setup-plan", dry), ("setuponly", "--setup-only", dry),
                             ("showfixtures", "--fixtures", "run it without --ralph"),
                             ("show_fixtures_per_test", "--fixtures-per-test",
                              "run it without --ralph"),
                             ("markers", "--markers", "run it without --ralph")):
        if config.getoption(flag, False):
            raise pytest.UsageError(f"pytest-ralph: {name} cannot be used with --ralph ({hint})")
    _refuse_numprocesses(config, "--ralph" if config.getoption("ralph") else "--ralph-dry-run")
    _refuse_session_flags(config, "--ralph" if config.getoption("ralph") else "--ralph-dry-run")
    settings = _positional_prd(config, get_settings(config))
    from .hookimpls import ConfigHooks, check_hook_names

    check_hook_names(config.pluginmanager)
    from ..loop.controller import Loop, run_loop
    from ..loop.records import EXIT_INTERNAL

    xml = config.getoption("xmlpath", None)
    loop = Loop(settings, rootdir=config.rootpath, inifile=config.inipath,
                keyword=config.getoption("keyword", "") or "",
                markexpr=config.getoption("markexpr", "") or "",
                junitxml=(config.invocation_params.dir / xml).resolve() if xml else None,
                deselect=tuple(config.getoption("deselect", None) or ()),
                new_run=bool(config.getoption("ralph_new")),
                pythonpath=tuple(Path(p) for p in _ini_pythonpath(config)),
                child_args=child_args(config.invocation_params.args),
                hooks=ConfigHooks(config),
                banner=(*_started_unsafely(config),
                        *settings_lines(config, settings, "pytest-ralph: settings: ")),
                loop_anchors=loop_anchors(config))
    said: list[str] = []

    def err(text: str) -> None:
        said.append(text)
        _err(text)

    dry_run = bool(config.getoption("ralph_dry_run"))
    try:
        code = run_loop(loop, dry_run=dry_run, err=err)
    except Exception:
        fd, name = tempfile.mkstemp(prefix="pytest-ralph-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        err(f"pytest-ralph: internal error: {sys.exc_info()[1]!r}; the traceback is in "
            f"{name}; please report it")
        code = EXIT_INTERNAL
    if not dry_run:
        _after_loop(config, loop, code, said)
    return code


def _after_loop(config: pytest.Config, loop: Loop, code: int, said: list[str]) -> None:
    """After ``pytest --ralph``: copy the report to ``--ralph-report PATH`` and append the
    loop's section to ``GITHUB_STEP_SUMMARY`` (:mod:`pytest_ralph.plugin.stepsummary`); a file that
    cannot be written is a warning, never a change of the exit code."""
    from ..util.redact import Redactor
    from . import stepsummary

    run, report = loop.last_run, loop.report_path
    warnings: list[str | None] = []
    wanted = config.getoption("ralph_report", None)
    if wanted and report is not None:
        try:
            text = report.read_text(encoding="utf-8")
        except OSError as exc:
            warnings.append(f"cannot read the report {report}: {exc.strerror or exc}")
        else:
            warnings.append(stepsummary.write(text, config.invocation_params.dir / wanted))
    if stepsummary.target() is not None and not os.environ.get(CONTROLLER_ENV):
        if run is not None and run.exit_code is not None:
            text = stepsummary.render_loop(run, report=report, redact=Redactor.from_env().text)
        else:
            text = stepsummary.render_loop_error(code, said, redact=Redactor.from_env().text)
        warnings.append(stepsummary.append(text))
    for warning in warnings:
        if warning:
            _err(f"pytest-ralph: warning: {warning}")


#: Options of pytest's test session that mean nothing to ``--ralph-status``,
#: ``--ralph-cancel``, ``--ralph-init`` and ``--ralph-doctor``, which run no test:
#: (argparse dest, the option's spellings). Refused when typed on the command line.
NOT_WITH_COMMANDS: tuple[tuple[str, str], ...] = (
    ("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"),
    ("maxfail", "-x/--exitfirst/--maxfail"), ("lf", "--lf/--last-failed"),
    ("failedfirst", "--ff/--failed-first"), ("newfirst", "--nf/--new-first"),
    ("stepwise", "--sw/--stepwise"), ("stepwise_skip", "--sw-skip/--stepwise-skip"),
    ("usepdb", "--pdb"), ("trace", "--trace"), ("collectonly", "--collect-only"),
    ("setupplan", "--setup-plan"), ("setuponly", "--setup-only"),
    ("showfixtures", "--fixtures"), ("show_fixtures_per_test", "--fixtures-per-test"),
    ("markers", "--markers"), ("cacheshow", "--cache-show"),
)


def _refuse_with_command(config: pytest.Config, flag: str) -> None:
    """Refuse test-session options and path arguments typed with ``flag`` (one of
    ``--ralph-status``, ``--ralph-cancel``, ``--ralph-init``, ``--ralph-doctor``): each does
    one thing and exits without running a test, so a ``-k`` or a path typed with it would be
    silently ignored. Options in ``addopts`` are meant for test runs and are not refused.

    Raises:
        pytest.UsageError: naming the option or path and what to do instead (exit 4).
    """
    if flag == "--ralph-init" and config.getoption("ralph_driver") == "claude":
        selection = [name for name, value in (
            ("-k", config.getoption("keyword", "")), ("-m", config.getoption("markexpr", "")),
            ("--deselect", config.getoption("deselect", None))) if value]
        if selection:
            raise pytest.UsageError(
                f"pytest-ralph: {' and '.join(selection)} cannot be used with --ralph-init: a "
                "Claude Code run checks every criterion of its stories; choose stories with "
                "--ralph-story ID instead")
    if flag == "--ralph-init":
        _refuse_numprocesses(config, flag)
    typed = command_line_options(config)
    for dest, name in NOT_WITH_COMMANDS:
        if getattr(typed, dest, None):
            raise pytest.UsageError(
                f"pytest-ralph: {name} cannot be used with {flag}: it runs no test (run "
                f"{flag} on its own, then pytest with {name.split('/')[0]})")
    armed = flag == "--ralph-init" and config.getoption("ralph_driver") == "claude"
    if getattr(typed, "ralph_story", None) and not armed:
        raise pytest.UsageError(
            f"pytest-ralph: --ralph-story cannot be used with {flag}: it chooses the stories "
            "of a run (`pytest --ralph --ralph-story ID`, or `pytest --ralph-init "
            "--ralph-driver claude --ralph-story ID`)")
    if getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS:
        args = [a for a in config.args if a]
        if args:
            where = ("name the PRD to create with --ralph-prd PATH; it works in the rootdir, "
                     f"{config.rootpath}") if flag == "--ralph-init" else (
                "name the state folder with --ralph-dir DIR, or run it from the project")
            raise pytest.UsageError(
                f"pytest-ralph: {flag} takes no path argument (got {' '.join(args)}): {where}")


def _command(config: pytest.Config, flag: str) -> tuple[int, str]:
    """Run ``--ralph-status``, ``--ralph-cancel``, ``--ralph-init`` or ``--ralph-doctor``;
    return ``(exit code, text)``.

    ``--ralph-init`` scaffolds the project (:mod:`pytest_ralph.commands.init`; a malformed
    configuration file is exit 4, nothing written), then, with ``--ralph-driver claude``,
    arms a Claude Code run.

    The options were checked by :func:`_refuse_with_command` first.
    """
    settings = get_settings(config)
    if flag == "--ralph-init":
        driver = config.getoption("ralph_driver")
        from ..claude.arming import MARKER
        from ..commands.init import ScaffoldError, init_keys, render, scaffold
        from ..loop.records import EXIT_USAGE

        try:
            done = scaffold(config.rootpath, config=config.inipath, state_dir=settings.dir,
                            prd=settings.prd, keys=init_keys(settings, config.rootpath),
                            ignores=[(MARKER.as_posix(), "the Claude Code arming file")]
                            if driver == "claude" else [])
        except ScaffoldError as exc:
            return EXIT_USAGE, f"pytest-ralph: --ralph-init: {exc}"
        if driver != "claude":
            return 0, render(done, config.rootpath)
        from ..claude.driver import arm

        code, armed = arm(settings, rootdir=config.rootpath,
                          inifile=config.inipath or done.config, python=sys.executable,
                          pythonpath=tuple(Path(p) for p in _ini_pythonpath(config)))
        return code, f"{render(done, config.rootpath, driver=driver)}\n{armed}"
    if flag == "--ralph-doctor":
        from ..commands.doctor import doctor

        return doctor(config.rootpath)
    from ..commands.control import cancel, status

    return cancel(settings.dir) if flag == "--ralph-cancel" else status(settings.dir)


def _refuse_numprocesses(config: pytest.Config, flag: str) -> None:
    """Refuse pytest-xdist's ``-n`` on the command line of ``--ralph`` or ``--ralph-init``: the
    controller checks nothing itself, and the check phases take ``--ralph-workers`` (an ``-n``
    in the ``addopts`` reaches them by the ini file).

    Raises:
        pytest.UsageError: ``-n N``, ``-nN``, ``--numprocesses N`` or ``--numprocesses=N``.
    """
    for arg in config.invocation_params.args:
        value = arg[2:] if arg.startswith("-n") and not arg.startswith("--") else (
            arg.partition("=")[2] if arg.startswith("--numprocesses=") else None)
        if arg in ("-n", "--numprocesses") or (value and (value.isdigit() or value in (
                "auto", "logical"))):
            raise pytest.UsageError(
                f"pytest-ralph: -n cannot be used with {flag} (the checks run in child "
                "processes: use --ralph-workers N or auto)")


#: Flags of the command line passed on to each check phase as they are.
_STRICT_FLAGS = ("--strict-markers", "--strict-config", "--strict")
_STORIES = "choose the stories to work on with --ralph-story ID or -k"
#: Options of the command line that the loop cannot honour: (argparse dest, the option's
#: spellings, why and what to do instead). Refused with ``--ralph`` and ``--ralph-dry-run``
#: when typed on the command line; in ``addopts`` or ``PYTEST_ADDOPTS`` they are meant for
#: plain ``pytest`` and the check phases do without them (docs/loop.md, "pytest's options
#: and the loop").
NOT_WITH_LOOP: tuple[tuple[str, str, str], ...] = (
    ("maxfail", "-x/--exitfirst/--maxfail", "every check phase gives each selected criterion "
     "a verdict; stop the loop sooner with --ralph-max-iterations, --ralph-breaker or "
     "--ralph-budget"),
    ("lf", "--lf/--last-failed", "each check phase checks every selected criterion afresh; "
     f"{_STORIES}, or rerun the gate's failures with plain `pytest --lf`"),
    ("failedfirst", "--ff/--failed-first", "the check phases keep the PRD's order and the loop "
     f"picks the story to work on; {_STORIES}"),
    ("newfirst", "--nf/--new-first", "the check phases keep the PRD's order and the loop picks "
     f"the story to work on; {_STORIES}"),
    ("stepwise", "--sw/--stepwise", f"a check phase never stops at a failure; {_STORIES}, or "
     "step through the gate with plain `pytest --sw`"),
    ("stepwise_skip", "--sw-skip/--stepwise-skip", "a check phase never stops at a failure; "
     f"{_STORIES}"),
    ("stepwise_reset", "--sw-reset/--stepwise-reset", "a check phase never stops at a failure; "
     f"{_STORIES}"),
    ("cacheshow", "--cache-show", "run it without --ralph"),
)


def command_line_options(config: pytest.Config) -> argparse.Namespace:
    """The options typed on the command line itself, without those of ``addopts`` and
    ``PYTEST_ADDOPTS`` (which ``config.option`` merges in): the invocation's arguments parsed
    again with pytest's parser. An empty namespace if they cannot be parsed (they were, once)."""
    parser: Any = getattr(config, "_parser", None)
    try:
        found = parser.parse_known_args(list(config.invocation_params.args))
    except Exception:  # parsed fine the first time; never fail a run over a second parse
        return argparse.Namespace()
    return found if isinstance(found, argparse.Namespace) else argparse.Namespace()


def _refuse_session_flags(config: pytest.Config, flag: str) -> None:
    """Refuse the command-line options of :data:`NOT_WITH_LOOP` with ``flag``.

    Raises:
        pytest.UsageError: naming the option, why it does not go with the loop and what to
            use instead.
    """
    typed = command_line_options(config)
    for dest, name, hint in NOT_WITH_LOOP:
        if getattr(typed, dest, None):
            raise pytest.UsageError(f"pytest-ralph: {name} cannot be used with {flag} ({hint})")


def child_args(args: Sequence[str]) -> tuple[str, ...]:
    """The options of ``args`` that each check phase's child pytest needs too: plugins
    (``-p NAME``, ``-p no:NAME``) and ini overrides (``-o KEY=VALUE``, ``--override-ini``),
    each as two arguments in their order, then the strictness flags (``--strict-markers``,
    ``--strict-config``, ``--strict``; last, so that the pairs stay pairs)."""
    out: list[str] = []
    strict: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in _STRICT_FLAGS:
            strict += [arg] if arg not in strict else []
            continue
        for short, long in (("-p", ""), ("-o", "--override-ini")):
            if arg == short or (long and arg == long):
                value = next(it, None)
                if value is not None:
                    out += [short, value]
            elif arg.startswith(short) and len(arg) > len(short):
                out += [short, arg[len(short):].removeprefix("=")]
            elif long and arg.startswith(long + "="):
                out += [short, arg[len(long) + 1:]]
    return (*out, *strict)


def _ini_pythonpath(config: pytest.Config) -> list[str]:
    """The ini ``pythonpath`` folders (pytest >= 7), or none."""
    try:
        return [str(p) for p in config.getini("pythonpath")]
    except ValueError:
        return []


def _positional_prd(config: pytest.Config, settings: Settings) -> Settings:
    """``pytest --ralph path/to/prd.json``: a single PRD file given as a path names the PRD."""
    if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        return settings
    args = [a for a in config.args if a]
    paths = [config.invocation_params.dir / a for a in args]
    if len(paths) == 1 and paths[0].suffix.lower() in PRD_FORMATS and settings.prd is None:
        sources = {**settings.sources, "prd": "command-line argument"}
        return dataclasses.replace(settings, prd=paths[0], sources=sources)
    raise pytest.UsageError(
        f"pytest-ralph: --ralph takes one PRD file as its only path argument, or none "
        f"(then --ralph-prd, ini ralph_prd or discovery decide); got {' '.join(args)}")


def _sigterm_interrupts() -> None:
    """In the loop's child: SIGTERM (the controller stopping the check phase) becomes a
    KeyboardInterrupt, so that each running check kills its own process group on the way out."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, handler)


def _out(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def _err(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _not_dumpable() -> None:
    """Make this check phase's process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, Linux):
    a program a criterion starts (the agent's code) then cannot open its ``/proc/<pid>/mem``
    or attach to it to rewrite the verdicts it holds, even as the same user."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)


def pytest_configure(config: pytest.Config) -> None:
    """Resolve settings; refuse misspelt ``pytest_ralph_*`` hooks; in the loop's child, record
    results; add the discovered PRD."""
    from .hookimpls import check_hook_names

    check_hook_names(config.pluginmanager)
    config.addinivalue_line("markers", MARKER_HELP)
    settings = get_settings(config)
    results = config.getoption("ralph_results", None)
    if results and _is_child():
        _not_dumpable()
    if results:
        if not hasattr(config, "workerinput"):  # a pytest-xdist worker reports to its controller
            config.pluginmanager.register(ResultsRecorder(Path(results), config.rootpath),
                                          "ralph-results")
        _sigterm_interrupts()
    config.pluginmanager.register(GateSummary(config), "ralph-gate-summary")
    if settings.prd is not None and not _is_child():
        wrong = _not_a_file(settings.prd)
        if wrong:
            raise pytest.UsageError(
                f"pytest-ralph: the PRD {settings.prd} (from {settings.sources.get('prd')}) "
                + ("does not exist; fix the path, or unset it to use discovery"
                   if wrong == "missing" else f"is {wrong}, not a regular file; name the "
                   "PRD's own JSON or YAML file (nothing is read from a FIFO or a device)"))
    args_source = getattr(config, "args_source", None)
    if args_source == pytest.Config.ArgsSource.ARGS and not _is_child():
        _refuse_special_prd_args(config)
    if args_source is not None and args_source != pytest.Config.ArgsSource.ARGS:
        prd = settings.prd or discover_prd(config.rootpath)
        wrong = _not_a_file(prd) if prd is not None else "missing"
        if prd is not None and wrong not in ("", "missing") and not _is_child():
            raise pytest.UsageError(
                f"pytest-ralph: the PRD {prd} (found by discovery) is {wrong}, not a regular "
                "file; replace it with the PRD's JSON or YAML file, or name another PRD with "
                "--ralph-prd")
        if prd is not None and not wrong:
            config.stash[DISCOVERED_PRD] = prd.resolve()


def _not_a_file(path: Path) -> str:
    """``""`` when ``path`` is a regular file (symbolic links followed), ``"missing"`` when
    nothing is there (or it cannot be looked at), else what it is (``"a FIFO (named
    pipe)"``, ``"a character device"``, ``"a folder"``; :func:`pytest_ralph.util.files.kind_of`)."""
    from ..util.files import kind_of

    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return "missing"
    return "" if stat.S_ISREG(mode) else kind_of(mode)


def _refuse_special_prd_args(config: pytest.Config) -> None:
    """Refuse a command-line path with a PRD suffix (``.json``, ``.yaml``...) that is a FIFO,
    a device or a socket: pytest's own walk skips such a path and says "not found", and a
    PRD is never read from one.

    Raises:
        pytest.UsageError: naming the argument and what it is.
    """
    here = config.invocation_params.dir
    for arg in config.args:
        name = arg.split("::", 1)[0]
        path = Path(name) if os.path.isabs(name) else here / name
        if path.suffix.lower() not in PRD_FORMATS:
            continue
        wrong = _not_a_file(path)
        if wrong not in ("", "missing", "a folder"):
            raise pytest.UsageError(
                f"pytest-ralph: {arg} is {wrong}, not a regular file; a PRD (or any file pytest "
                "collects) is a regular file: name the PRD's own JSON or YAML file")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """The effective pytest-ralph settings that differ from their defaults, with where each
    came from; with ``-v`` every setting (:func:`settings_lines`)."""
    return settings_lines(config, get_settings(config), "ralph: ") or None


def settings_lines(config: pytest.Config, settings: Settings, prefix: str) -> list[str]:
    """The settings for the gate's report header and the loop's first lines: one line of the
    settings that are not at their default (none when all are), or with ``-v`` a heading and
    one line per setting; each ``name = value (source)``, the source being the option, the
    environment variable, ``ini KEY (FILE)``, ``-o KEY`` or ``default``. Secrets of the
    environment are redacted (an agent command line may hold a token)."""
    from ..util.redact import Redactor

    redact = Redactor.from_env().text
    verbosity = int(config.getoption("verbose", 0) or 0)
    if verbosity > 0:
        return [f"{prefix}every setting, with where it came from:",
                *(f"  {redact(line)}" for line in describe(settings, everything=True))]
    lines = describe(settings)
    return [prefix + redact("; ".join(lines))] if lines and verbosity == 0 else []


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(
    file_path: Path, parent: pytest.Collector
) -> Generator[None, list[Any], list[Any]]:
    """Collect as a PRD, besides what other plugins and ``conftest.py`` files collect: files
    matching ini ``ralph_prd_files``, the configured PRD (``--ralph-prd``, ini ``ralph_prd``,
    ``PYTEST_RALPH_PRD``), and a ``.json``/``.jsonc``/``.yaml``/``.yml`` file named on the
    command line that nothing else collects (pytest's YAML example, ``pytest
    test_simple.yaml`` with a ``conftest.py`` collecting it, stays that conftest's)."""
    collected = yield
    if _is_prd_file(file_path, parent, taken=bool(collected)):
        return [*collected, PRDFile.from_parent(parent, path=file_path)]
    return collected


def _is_prd_file(file_path: Path, parent: pytest.Collector, *, taken: bool) -> bool:
    """Whether :func:`pytest_collect_file` collects ``file_path`` as a PRD; ``taken``: another
    plugin or ``conftest.py`` collected it."""
    config = parent.config
    if any(fnmatch.fnmatch(file_path.name, p) for p in config.getini("ralph_prd_files")):
        return True
    if file_path.suffix.lower() not in PRD_FORMATS:
        return False
    if file_path == get_settings(config).prd:
        return True
    # The loop's check phase names only its PRD (or criteria of it) on its command line.
    return parent.session.isinitpath(file_path) and (not taken or _is_child())


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand what collection found (dialects, empty PRDs) to the
    controller."""
    config = session.config
    out = getattr(config, "workeroutput", None)
    if out is not None:
        empty: list[str] = config.stash.get(EMPTY_PRDS, [])
        out[_WORKER_KEY] = {
            "dialects": {str(p): line for p, line in config.stash.get(DIALECTS, {}).items()},
            "empty": list(empty)}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the pytest-xdist controller: keep what a worker's collection found (every worker
    collects the same files, so each note is kept once)."""
    found = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if not found:
        return
    config = node.config
    config.stash.setdefault(WORKER_DIALECTS, {}).update(found["dialects"])
    notes = config.stash.setdefault(EMPTY_PRDS, [])
    notes += [n for n in found["empty"] if n not in notes]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Refuse misspelt hooks of conftest.py files loaded during collection; add the
    discovered PRD when pytest's own walk did not reach it (a hidden ``.ralph/`` folder,
    outside ``testpaths``) and ``--ignore``, ``--ignore-glob`` or a ``conftest.py``'s
    ``collect_ignore`` do not exclude it; deselect stories not named by ``--ralph-story``."""
    from .hookimpls import check_hook_names

    check_hook_names(config.pluginmanager)
    prd = config.stash.get(DISCOVERED_PRD, None)
    if prd is not None and prd not in config.stash.get(COLLECTED_PRDS, set()) and not \
            _ignored(config, prd):
        node = PRDFile.from_parent(session, path=prd)
        items.extend(session.genitems(node))
    stories = get_settings(config).story
    if not stories:
        return
    keep, drop = [], []
    for item in items:
        if isinstance(item, CriterionItem) and item.story.id not in stories:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    found = {item.story.id for item in [*keep, *drop] if isinstance(item, CriterionItem)}
    unknown = [s for s in stories if s not in found]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if found and unknown and reporter is not None and not hasattr(config, "workerinput"):
        source = get_settings(config).sources.get("story", "--ralph-story")
        reporter.write_line(
            f"pytest-ralph: no story {', '.join(map(repr, unknown))} in the collected PRDs "
            f"(from {source}); their stories: {', '.join(sorted(found)[:10])}"
            f"{', ...' if len(found) > 10 else ''}", yellow=True)


def _ignored(config: pytest.Config, path: Path) -> bool:
    """Whether the user excluded ``path`` from collection: ``pytest_ignore_collect`` says so
    for the file (``--ignore``, ``--ignore-glob``, ``collect_ignore``, another plugin), or
    ``--ignore`` / ``--ignore-glob`` name one of its folders. ``norecursedirs`` alone does not
    count: a PRD in ``.ralph/`` is collected although pytest does not walk hidden folders."""
    if config.hook.pytest_ignore_collect(collection_path=path, config=config):
        return True
    here = config.invocation_params.dir
    paths = {(here / p).resolve() for p in config.getoption("ignore", None) or []}
    globs = [str(here / g) for g in config.getoption("ignore_glob", None) or []]
    return any(folder in paths or any(fnmatch.fnmatch(str(folder), g) for g in globs)
               for folder in path.parents)


def _props(report: pytest.TestReport) -> dict[str, Any]:
    return {k: v for k, v in report.user_properties if k.startswith("ralph_")}


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
        props = _props(report)
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


def _step_summary_wanted() -> bool:
    """Whether to append to ``GITHUB_STEP_SUMMARY``: it names a file, and this process is not
    one that the loop started (a check phase, an agent's own pytest)."""
    from .stepsummary import target

    return (target() is not None and not _is_child()
            and not os.environ.get(CONTROLLER_ENV))


def _markdown_wanted(config: pytest.Config) -> bool:
    """Whether this gate process writes a Markdown summary: not on a pytest-xdist worker (the
    controller aggregates the reports), and ``--ralph-report`` or ``GITHUB_STEP_SUMMARY``."""
    if hasattr(config, "workerinput") or _is_child():
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
        props = _props(report)
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
        were collected (or a PRD failed to load), and write ``--ralph-report PATH``; a file
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
            warnings.append(stepsummary.write(text, path))
            self.report = None if warnings[-1] else path
        if (ordered or notes or self.broken) and _step_summary_wanted():
            warnings.append(stepsummary.append(text))
        said = [f"pytest-ralph: warning: {warning}" for warning in warnings if warning]
        if self.config.pluginmanager.get_plugin("terminalreporter") is None:
            for line in said:
                _err(line)
        else:
            self.warnings += said  # printed by pytest_terminal_summary, or at unconfigure

    def pytest_unconfigure(self) -> None:
        """Warnings that no terminal summary printed (pytest ended in an internal error)."""
        for line in self.warnings:
            _err(line)
        self.warnings.clear()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        """Around pytest's own summary: with many failing criteria, keep them out of pytest's
        failure sections (quadratic in the number of failures, pytest issue 13360) and print
        one line each instead; then print the per-story table."""
        tr = terminalreporter
        failed: list[Any] = tr.stats.get("failed", [])
        ours = [r for r in failed if PROP_STORY in _props(r)]
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


@pytest.fixture
def ralph_agent() -> Generator[Any, None, None]:
    """A factory of scripted agents (``pytest_ralph.testing.AgentFactory``) for testing PRDs,
    checks and prompts without a model.

    ``ralph_agent(*steps, workdir=None)`` returns a ``ScriptedAgent``: pass ``agent.command``
    to ``--ralph-agent``; step k serves the agent's k-th run, then runs do nothing (exit 0). A
    step is a callable ``fn(call) -> int | None`` run in this test process (``call.prompt``,
    ``call.iteration``, ``call.cwd``, ``call.env``), or a dict / ``Patch`` the agent applies
    itself: ``{"files": {"a.txt": "text", "old.txt": None}, "patch": "<diff>", "exit": 0,
    "stdout": "...", "stderr": "...", "sleep": 0.5}``. ``agent.calls`` lists its runs. Every
    agent is closed at teardown.
    """
    from ..testing import ralph_agent_fixture  # lazy: keep plain pytest runs fast

    yield from ralph_agent_fixture()
