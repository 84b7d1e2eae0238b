"""The ``ralph`` options and ini keys, and the options refused with them.

:func:`add_options` registers the ``--ralph*`` options (group ``ralph``) and their ``ralph_*``
ini twins. The refusals (:class:`pytest.UsageError`, exit 4) are decided here: which options
go alone (:func:`given_command`), which go only with another (:func:`loop_flag`), and the
tables of pytest's options that mean nothing to the one-shot commands
(:data:`NOT_WITH_COMMANDS`) or that the loop cannot honour (:data:`NOT_WITH_LOOP`).
:func:`child_args` picks the options each check phase's child pytest needs too.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ..loop.settings import SPECS, Settings, default_text
from ..prd.load import PRD_FILE_NAMES, PRD_FORMATS
from .stash import get_settings, is_child

#: The values of ``--ralph-hook-scope`` and ini ``ralph_hook_scope``.
HOOK_SCOPES = ("local", "project")

#: Options of pytest's cacheprovider and stepwise plugins, which the loop's check phase turns
#: off (``-p no:cacheprovider``): (spellings, takes a value).
_CACHE_OPTIONS = ((("--lf", "--last-failed"), False), (("--ff", "--failed-first"), False),
                  (("--nf", "--new-first"), False), (("--cache-clear",), False),
                  (("--lfnf", "--last-failed-no-failures"), True),
                  (("--sw", "--stepwise"), False), (("--sw-skip", "--stepwise-skip"), False),
                  (("--sw-reset", "--stepwise-reset"), False))


def add_options(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Register ``--ralph*`` options (group ``ralph``) and their ``ralph_*`` ini twins.

    In the loop's check phase, which runs without pytest's cache (``-p no:cacheprovider``),
    also accept and ignore the cache's options, so that ``addopts`` written for plain
    ``pytest`` (``--ff``, ``--lf``, ``--sw``) do not break every check."""
    group = parser.getgroup("ralph", "Ralph agent loops (pytest-ralph)")
    if is_child() and pluginmanager.is_blocked("cacheprovider"):
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
                         ".claude/settings.local.json (or, with --ralph-hook-scope project, "
                         ".claude/settings.json) and arm a run that the next Claude Code "
                         "session adopts. (default: off)")
    group.addoption("--ralph-driver", action="store", default=None, choices=("claude",),
                    help="With --ralph-init, what drives the loop: 'claude' (a Claude Code "
                         "session, through its Stop hook). Without it --ralph-init only "
                         "scaffolds (the loop is then `pytest --ralph`). (default: none)")
    group.addoption("--ralph-hook-scope", action="store", default=None,
                    choices=HOOK_SCOPES, dest="ralph_hook_scope",
                    help="With --ralph-init --ralph-driver claude, where the Stop hook goes: "
                         "'local' (.claude/settings.local.json, not committed: this "
                         "machine's interpreter) or 'project' (.claude/settings.json, shared: "
                         "a command with no path of this machine, "
                         "\"$CLAUDE_PROJECT_DIR\"/<venv>/bin/python or pytest-ralph-hook). "
                         "An install in the other file is moved. [ini ralph_hook_scope] "
                         "(default: where the hook already is, else local)")
    group.addoption("--ralph-doctor", action="store_true", default=False,
                    help="Check the Claude Code wiring: the Stop hook command in "
                         ".claude/settings.json exists and answers a sample payload. With "
                         "--ralph-agent PRESET, check that preset's CLI instead: on PATH, "
                         "its version against the proven release, every flag the preset "
                         "passes in its --help. (default: off)")
    group.addoption("--ralph-plan", action="store_true", default=False,
                    help="Print the plan of a parallel run as JSON for a CI matrix and exit: "
                         "the PRD, the waves of stories (each wave's stories depend only on "
                         "earlier waves, by dependsOn) and one entry per story with its title, "
                         "branch, wave and dependsOn. Takes the PRD as its path argument, else "
                         "--ralph-prd, ini ralph_prd or discovery. (default: off)")
    group.addoption("--ralph-merge", action="store_true", default=False,
                    help="Merge the lanes' branches given as arguments (BRANCH or "
                         "ID=BRANCH, local or origin/...) one at a time onto an integration "
                         "branch, each kept only when the gate passes its story and breaks no "
                         "criterion that passed; print one line per story, leave the "
                         "integration branch to push; exit 0 when all merged, 1 otherwise. "
                         "(default: off)")
    group.addoption("--ralph-report", action="store", default=None, metavar="PATH",
                    help="Also write a report to PATH (replaced): the gate's summary "
                         "(per story verified / claimed / failed, the failing criteria, the "
                         "exit code), or with --ralph a copy of the loop's final report; "
                         "Markdown, or a self-contained HTML page when PATH ends in .html. "
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
    parser.addini("ralph_hook_scope", "pytest-ralph: where `--ralph-init --ralph-driver "
                  "claude` installs the Claude Code Stop hook: local (.claude/settings.local."
                  "json) or project (.claude/settings.json, a portable command). (default: "
                  "where the hook already is, else local)", type="string", default="")
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


def given_command(config: pytest.Config) -> str | None:
    """The one-shot command of the command line (``--ralph-status``, ``--ralph-cancel``,
    ``--ralph-init``, ``--ralph-doctor``, ``--ralph-plan`` or ``--ralph-merge``), or ``None``.

    Raises:
        pytest.UsageError: it was given with another of them, or with ``--ralph`` or
            ``--ralph-dry-run``.
    """
    alone = ("ralph_status", "ralph_cancel", "ralph_init", "ralph_doctor", "ralph_plan",
             "ralph_merge")
    if any(config.getoption(dest) for dest in alone):
        given = [name for dest, name in (("ralph_status", "--ralph-status"),
                                         ("ralph_cancel", "--ralph-cancel"),
                                         ("ralph_init", "--ralph-init"),
                                         ("ralph_doctor", "--ralph-doctor"),
                                         ("ralph_plan", "--ralph-plan"),
                                         ("ralph_merge", "--ralph-merge"),
                                         ("ralph", "--ralph"),
                                         ("ralph_dry_run", "--ralph-dry-run"))
                 if config.getoption(dest)]
        if len(given) > 1:
            raise pytest.UsageError(
                f"pytest-ralph: {given[0]} cannot be used with {' or '.join(given[1:])} "
                "(--ralph-status, --ralph-cancel, --ralph-init, --ralph-doctor and "
                "--ralph-plan each do one thing and exit; run each on its own)")
        return given[0]
    return None


def loop_flag(config: pytest.Config) -> str | None:
    """``"--ralph"`` or ``"--ralph-dry-run"`` when the command line asks for the loop (and no
    one-shot command was given), else ``None``.

    Raises:
        pytest.UsageError: ``--ralph-driver`` without ``--ralph-init``, or ``--ralph-new``
            without ``--ralph``.
    """
    if config.getoption("ralph_driver"):
        raise pytest.UsageError("pytest-ralph: --ralph-driver goes with --ralph-init "
                                "(`pytest --ralph-init --ralph-driver claude`)")
    if config.getoption("ralph_hook_scope"):
        raise pytest.UsageError("pytest-ralph: --ralph-hook-scope goes with --ralph-init "
                                "--ralph-driver claude (`pytest --ralph-init --ralph-driver "
                                "claude --ralph-hook-scope project`)")
    if not (config.getoption("ralph") or config.getoption("ralph_dry_run")):
        if config.getoption("ralph_new"):
            raise pytest.UsageError("pytest-ralph: --ralph-new goes with --ralph (`pytest "
                                    "--ralph --ralph-new` starts a new run instead of resuming "
                                    "the last one)")
        return None
    return "--ralph" if config.getoption("ralph") else "--ralph-dry-run"


def refuse_with_loop(config: pytest.Config, flag: str) -> None:
    """Refuse the options that do not go with ``flag`` (``--ralph`` or ``--ralph-dry-run``):
    the debugging and inspection options, pytest-xdist's ``-n`` and :data:`NOT_WITH_LOOP`.

    Raises:
        pytest.UsageError: naming the option and what to do instead (exit 4).
    """
    dry = "use --ralph-dry-run to see what the loop would do"
    debug = "the loop runs the checks in child processes; debug a criterion with plain pytest"
    for dest, name, hint in (("usepdb", "--pdb", debug), ("trace", "--trace", debug),
                             ("collectonly", "--collect-only", dry),
                             ("setupplan", "--setup-plan", dry), ("setuponly", "--setup-only", dry),
                             ("showfixtures", "--fixtures", "run it without --ralph"),
                             ("show_fixtures_per_test", "--fixtures-per-test",
                              "run it without --ralph"),
                             ("markers", "--markers", "run it without --ralph")):
        if config.getoption(dest, False):
            raise pytest.UsageError(f"pytest-ralph: {name} cannot be used with --ralph ({hint})")
    _refuse_numprocesses(config, flag)
    _refuse_session_flags(config, flag)


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


def refuse_with_command(config: pytest.Config, flag: str) -> None:
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
    if config.getoption("ralph_hook_scope") and not armed:
        raise pytest.UsageError(
            f"pytest-ralph: --ralph-hook-scope cannot be used with {flag}"
            f"{' alone' if flag == '--ralph-init' else ''}: it says where `pytest "
            "--ralph-init --ralph-driver claude` installs the Claude Code Stop hook")
    if getattr(typed, "ralph_story", None) and not armed:
        raise pytest.UsageError(
            f"pytest-ralph: --ralph-story cannot be used with {flag}: it chooses the stories "
            "of a run (`pytest --ralph --ralph-story ID`, or `pytest --ralph-init "
            "--ralph-driver claude --ralph-story ID`)")
    if flag == "--ralph-plan":
        plan_prd(config)
        return
    if flag == "--ralph-merge":  # its arguments are branches
        return
    if getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS:
        args = [a for a in config.args if a]
        if args:
            where = ("name the PRD to create with --ralph-prd PATH; it works in the rootdir, "
                     f"{config.rootpath}") if flag == "--ralph-init" else (
                "name the state folder with --ralph-dir DIR, or run it from the project")
            raise pytest.UsageError(
                f"pytest-ralph: {flag} takes no path argument (got {' '.join(args)}): {where}")


def plan_prd(config: pytest.Config) -> Path | None:
    """The PRD that ``pytest --ralph-plan PRD`` names (relative to the invocation folder), or
    ``None`` when no path argument was given (then ``--ralph-prd``, ini ``ralph_prd`` or
    discovery decide).

    Raises:
        pytest.UsageError: several path arguments, one without a PRD suffix, or one given
            with ``--ralph-prd`` / ini ``ralph_prd`` naming another file.
    """
    if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        return None
    args = [a for a in config.args if a]
    if not args:
        return None
    path = config.invocation_params.dir / args[0]
    if len(args) > 1 or path.suffix.lower() not in PRD_FORMATS:
        raise pytest.UsageError(
            "pytest-ralph: --ralph-plan takes one PRD file as its only path argument, or none "
            f"(then --ralph-prd, ini ralph_prd or discovery decide); got {' '.join(args)}")
    settings = get_settings(config)
    if settings.prd is not None and Path(settings.prd).resolve() != path.resolve():
        raise pytest.UsageError(
            f"pytest-ralph: --ralph-plan was given the PRD {args[0]} and {settings.prd} (from "
            f"{settings.sources.get('prd')}); name one of them")
    return path


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


def positional_prd(config: pytest.Config, settings: Settings) -> Settings:
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
