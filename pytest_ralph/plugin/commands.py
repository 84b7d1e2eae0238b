"""What ``pytest_cmdline_main`` takes over: the one-shot commands and the loop.

:func:`main` runs ``--ralph-status``, ``--ralph-cancel``, ``--ralph-init``, ``--ralph-doctor`` or
``--ralph-plan`` (:mod:`pytest_ralph.commands`) and prints what it says, or starts the loop for
``--ralph`` / ``--ralph-dry-run`` (:mod:`pytest_ralph.loop.controller`), like pytest-xdist's
looponfail:
:func:`make_loop` builds it from the session, :func:`run` runs it (an internal error leaves its
traceback in a crash file) and copies its report where ``--ralph-report`` and
``GITHUB_STEP_SUMMARY`` ask (:func:`after_loop`). :func:`refuse_changed_conftests` refuses, before
they load, the ``conftest.py`` files that changed since the last run's verified snapshot.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..util.env import CONTROLLER_ENV
from .options import (
    HOOK_SCOPES,
    child_args,
    command_line_options,
    given_command,
    loop_flag,
    plan_prd,
    positional_prd,
    refuse_with_command,
    refuse_with_loop,
)
from .stash import get_settings, is_child, resolve_settings, settings_lines

if TYPE_CHECKING:
    from ..loop.controller import Loop
    from ..loop.settings import Settings


def main(config: pytest.Config) -> int | None:
    """The exit code of the command or the loop that the command line asks for, or ``None``
    (a test session: pytest goes on). Never called in the loop's child.

    Raises:
        pytest.UsageError: incompatible flags (exit 4).
    """
    flag = given_command(config)
    if flag is not None:
        refuse_with_command(config, flag)
        code, text = command(config, flag)
        (err if code else out)(text)
        return code
    flag = loop_flag(config)
    if flag is None:
        return None
    refuse_with_loop(config, flag)
    settings = positional_prd(config, get_settings(config))
    if settings.parallel > 1 and flag == "--ralph":
        from .parallelrun import run_parallel

        load_every_module()
        return run_parallel(config, settings)
    return run(config, make_loop(config, settings))


def make_loop(config: pytest.Config, settings: Settings) -> Loop:
    """The loop of this session (:class:`pytest_ralph.loop.controller.Loop`): ``settings``, and
    what the session says (the rootdir and ini file, ``-k``, ``-m``, ``--deselect``,
    ``--junitxml``, ``--ralph-new``, the ini ``pythonpath``, the options each check phase needs
    too, the ``pytest_ralph_*`` hooks, the lines it prints first, ``-q``: no live status line
    nor heartbeat).

    Raises:
        pytest.UsageError: a misspelt ``pytest_ralph_*`` hook.
    """
    from .hookimpls import ConfigHooks, check_hook_names

    check_hook_names(config.pluginmanager)
    from ..loop.controller import Loop

    xml = config.getoption("xmlpath", None)
    loop = Loop(settings, rootdir=config.rootpath, inifile=config.inipath,
                keyword=config.getoption("keyword", "") or "",
                markexpr=config.getoption("markexpr", "") or "",
                junitxml=(config.invocation_params.dir / xml).resolve() if xml else None,
                deselect=tuple(config.getoption("deselect", None) or ()),
                new_run=bool(config.getoption("ralph_new")),
                pythonpath=tuple(Path(p) for p in ini_pythonpath(config)),
                child_args=child_args(config.invocation_params.args),
                hooks=ConfigHooks(config),
                banner=(*started_unsafely(config),
                        *settings_lines(config, settings, "pytest-ralph: settings: ")),
                loop_anchors=loop_anchors(config),
                quiet=config.get_verbosity() < 0)
    return loop


def load_every_module() -> None:
    """Import every module of pytest-ralph now, before the loop runs an agent.

    The controller must run only code as it was when the run started: after the first agent
    run it imports nothing more. Without this, a module imported late (the job summary's, after
    the loop) would be read from disk after the agent ran, and an agent that can write
    pytest-ralph's own files (an editable install inside the project, or site-packages with the
    sandbox off) could put code into the controller itself. Each module is imported once;
    importing one has no effect beyond defining its names."""
    import importlib
    import pkgutil

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pytest_ralph/
    for info in pkgutil.walk_packages([package], "pytest_ralph."):
        importlib.import_module(info.name)


def run(config: pytest.Config, loop: Loop) -> int:
    """Run ``loop`` (a dry run with ``--ralph-dry-run``) and return its exit code; an internal
    error is :data:`pytest_ralph.loop.controller.EXIT_INTERNAL`, with its traceback in a
    ``pytest-ralph-crash-*.txt`` file of the temporary folder. After a real run,
    :func:`after_loop`."""
    from ..loop.controller import run_loop
    from ..loop.records import EXIT_INTERNAL

    said: list[str] = []

    def keep(text: str) -> None:
        said.append(text)
        err(text)

    dry_run = bool(config.getoption("ralph_dry_run"))
    load_every_module()
    try:
        code = run_loop(loop, dry_run=dry_run, err=keep)
    except Exception:
        fd, name = tempfile.mkstemp(prefix="pytest-ralph-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        keep(f"pytest-ralph: internal error: {sys.exc_info()[1]!r}; the traceback is in "
             f"{name}; please report it")
        code = EXIT_INTERNAL
    if not dry_run:
        after_loop(config, loop, code, said)
    return code


def after_loop(config: pytest.Config, loop: Loop, code: int, said: list[str]) -> None:
    """After ``pytest --ralph``: copy the report to ``--ralph-report PATH`` (the HTML report,
    its links relative to PATH, when PATH ends in ``.html``) and append the
    loop's section to ``GITHUB_STEP_SUMMARY`` (:mod:`pytest_ralph.plugin.stepsummary`); a file that
    cannot be written is a warning, never a change of the exit code."""
    from ..util.redact import Redactor
    from . import stepsummary

    run, report = loop.last_run, loop.report_path
    warnings: list[str | None] = []
    wanted = config.getoption("ralph_report", None)
    dest = config.invocation_params.dir / wanted if wanted else None
    if dest is not None and run is not None and dest.suffix.lower() in (".html", ".htm"):
        from ..loop.report_html import render_html  # its links relative to where it goes

        html = render_html(run, dest.parent.resolve(), redact=Redactor.from_env().text)
        warnings.append(stepsummary.write(html, dest))
    elif dest is not None and report is not None:
        try:
            text = report.read_text(encoding="utf-8")
        except OSError as exc:
            warnings.append(f"cannot read the report {report}: {exc.strerror or exc}")
        else:
            warnings.append(stepsummary.write(text, dest))
    if stepsummary.target() is not None and not os.environ.get(CONTROLLER_ENV):
        if run is not None and run.exit_code is not None:
            text = stepsummary.render_loop(run, report=report, redact=Redactor.from_env().text)
        else:
            text = stepsummary.render_loop_error(code, said, redact=Redactor.from_env().text)
        warnings.append(stepsummary.append(text))
    for warning in warnings:
        if warning:
            err(f"pytest-ralph: warning: {warning}")


def command(config: pytest.Config, flag: str) -> tuple[int, str]:
    """Run ``--ralph-status``, ``--ralph-cancel``, ``--ralph-init``, ``--ralph-doctor`` or
    ``--ralph-plan``; return ``(exit code, text)``.

    ``--ralph-plan`` prints the plan of a parallel run as JSON (:mod:`pytest_ralph.commands.plan`),
    on stdout only when it exits 0.

    ``--ralph-init`` scaffolds the project (:mod:`pytest_ralph.commands.init`; a malformed
    configuration file is exit 4, nothing written), then, with ``--ralph-driver claude``,
    arms a Claude Code run. ``--ralph-doctor`` checks the Claude Code wiring
    (:mod:`pytest_ralph.commands.doctor`), or with ``--ralph-agent NAME`` typed on the command
    line the preset's CLI (:func:`agent_doctor`).

    The options were checked by :func:`pytest_ralph.plugin.options.refuse_with_command` first.
    """
    settings = get_settings(config)
    if flag == "--ralph-init":
        driver = config.getoption("ralph_driver")
        from ..claude.arming import MARKER
        from ..commands.detect import ScaffoldError
        from ..commands.init import init_keys, render, scaffold
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

        scope, bad = hook_scope(config)
        if bad:
            return EXIT_USAGE, bad
        code, armed = arm(settings, rootdir=config.rootpath,
                          inifile=config.inipath or done.config, python=sys.executable,
                          pythonpath=tuple(Path(p) for p in ini_pythonpath(config)),
                          scope=scope)
        return code, f"{render(done, config.rootpath, driver=driver)}\n{armed}"
    if flag == "--ralph-plan":
        from ..commands.plan import plan

        return plan(config.rootpath, plan_prd(config) or settings.prd,
                    max_bytes=settings.max_prd_bytes)
    if flag == "--ralph-merge":
        return merge_command(config, settings)
    if flag == "--ralph-doctor":
        if getattr(command_line_options(config), "ralph_agent", None):
            return agent_doctor(config, settings)
        from ..commands.doctor import doctor

        return doctor(config.rootpath)
    from ..commands.cancel import cancel
    from ..commands.status import has_loop_runs, status
    from ..parallel.lanerecord import cancel_parallel, status_lines

    if flag == "--ralph-cancel":
        said = cancel_parallel(settings.dir)
        return (0, said) if said is not None else cancel(settings.dir)
    lanes = status_lines(settings.dir)
    if lanes and not has_loop_runs(settings.dir):  # a parallel run's only
        return 0, "\n".join(lanes)
    code, text = status(settings.dir)
    return (code, "\n".join([text, *lanes])) if lanes else (code, text)


def merge_command(config: pytest.Config, settings: Settings) -> tuple[int, str]:
    """``--ralph-merge BRANCH...`` (:mod:`pytest_ralph.commands.merge`): the merge queue over
    the path arguments (branches); its Markdown summary goes to ``GITHUB_STEP_SUMMARY`` when
    set (a file that cannot be written is a warning). Its lines go to stdout for exit 0 and
    1 (the merges were made), to stderr for bad input."""
    from ..commands.merge import EXIT_NOT_MERGED, PREFIX, merge
    from ..loop.records import EXIT_USAGE
    from ..sandbox.bwrap import SandboxError
    from . import stepsummary
    from .parallelrun import gate_inifile, gate_sandbox

    typed = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    args = [str(a) for a in config.args if a] if typed else []
    try:  # the branches' code is agent code: the loop's sandbox rules apply to the gate
        sandbox = gate_sandbox(settings)
    except SandboxError as exc:
        return EXIT_USAGE, PREFIX + str(exc)
    top = Path(os.path.realpath(config.rootpath))
    done = merge(config.rootpath, settings.prd, args,
                 state_dir=settings.dir, max_bytes=settings.max_prd_bytes, sandbox=sandbox,
                 inifile=gate_inifile(config, top, top), strict=settings.strict)
    if stepsummary.target() is not None:
        warning = stepsummary.append(done.markdown())
        if warning:
            err(f"pytest-ralph: warning: {warning}")
    if done.code == EXIT_NOT_MERGED:
        out(done.text)
        return done.code, "pytest-ralph: --ralph-merge: not every story was merged"
    return done.code, done.text


def hook_scope(config: pytest.Config) -> tuple[str | None, str]:
    """``--ralph-hook-scope``, else ini ``ralph_hook_scope``, else ``None`` (where the hook
    is): ``(scope, "")``, or ``(None, the refusal)`` for an ini value that is no scope."""
    typed = config.getoption("ralph_hook_scope")
    if typed:
        return str(typed), ""
    value = str(config.getini("ralph_hook_scope") or "").strip()
    if not value:
        return None, ""
    if value not in HOOK_SCOPES:
        return None, (f"pytest-ralph: ralph_hook_scope = {value} in {config.inipath}: expected "
                      f"one of {', '.join(HOOK_SCOPES)} (local: .claude/settings.local.json; "
                      "project: .claude/settings.json with a portable command)")
    return value, ""


def agent_doctor(config: pytest.Config, settings: Settings) -> tuple[int, str]:
    """``--ralph-doctor --ralph-agent NAME`` (:mod:`pytest_ralph.commands.agent_doctor`): the
    preset's CLI against its proven release, with ``ralph_agent_flags`` when set; a name that
    is no preset is exit 4 (:data:`pytest_ralph.loop.records.EXIT_USAGE`) with a message."""
    from ..commands.agent_doctor import AgentDoctorUsage
    from ..commands.agent_doctor import agent_doctor as check
    from ..loop.records import EXIT_USAGE

    try:
        return check(settings.agent or "", rootdir=config.rootpath, flags=settings.agent_flags,
                     flags_source=settings.sources.get("agent_flags", "ralph_agent_flags"))
    except AgentDoctorUsage as exc:
        return EXIT_USAGE, f"pytest-ralph: {exc}"


def ini_pythonpath(config: pytest.Config) -> list[str]:
    """The ini ``pythonpath`` folders (pytest >= 7), or none."""
    try:
        return [str(p) for p in config.getini("pythonpath")]
    except ValueError:
        return []


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


def _started_as_module() -> bool:
    """Whether this process was started as ``python -m pytest`` (``__main__`` has a module
    spec; the ``pytest`` console script's has none)."""
    return getattr(sys.modules.get("__main__"), "__spec__", None) is not None


def started_unsafely(config: pytest.Config) -> list[str]:
    """A warning when the loop was started as ``python -m pytest`` without ``-P``, in the
    project: the working folder was first on ``sys.path`` before pytest and its plugins were
    imported, so a module the agent adds there (``pytest.py``, ``pluggy/``, a plugin named in
    ``addopts``) would be imported into the loop itself by the next such start.

    Read from how the process started, not from ``sys.path`` (the ini ``pythonpath`` puts the
    rootdir first there before this plugin is imported, under pytest 9.2)."""
    if not _started_as_module() or getattr(sys.flags, "safe_path", False):
        return []
    try:
        here = os.path.realpath(config.invocation_params.dir)
    except (OSError, ValueError):
        return []
    root = os.path.realpath(config.rootpath)
    if here != root and not here.startswith(root.rstrip(os.sep) + os.sep):
        return []
    return ["pytest-ralph: warning: started as `python -m pytest`, which puts the project "
            "first on sys.path before pytest and its plugins load: a module the agent writes "
            "there would run inside the next loop you start this way; start it with the "
            "`pytest` command (or `python -P -m pytest` on Python 3.11+)"]


def refuse_changed_conftests(config: pytest.Config) -> None:
    """For ``pytest --ralph``, before the first ``conftest.py`` loads: refuse the
    ``conftest.py`` files that changed since the last run's verified snapshot, unless
    ``--ralph-accept-changes`` or ``--ralph-allow-criteria-edits``
    (:func:`pytest_ralph.state.verified.check_loop_conftests`).

    Raises:
        pytest.UsageError: a changed ``conftest.py``.
    """
    ns = config.known_args_namespace
    if is_child() or not getattr(ns, "ralph", False):
        return
    from ..loop.settings import from_person
    from ..state.verified import check_loop_conftests

    try:
        settings = resolve_settings(config, ns)  # not cached: the parse is not complete
    except pytest.UsageError:
        return  # reported when the loop starts
    if from_person(settings, "accept_changes") or from_person(settings,
                                                              "allow_criteria_edits"):
        return
    why = check_loop_conftests(settings.dir, config.rootpath, loop_anchors(config))
    if why:
        raise pytest.UsageError(f"pytest-ralph: {why}")


def out(message: str) -> None:
    """Print ``message`` on stdout, at once."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def err(message: str) -> None:
    """Print ``message`` on stderr, at once."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()

