"""The check phase: check every criterion in a fresh child pytest.

The controller never imports project code: each phase runs a child pytest,
``<python> -c <PYTEST_LAUNCHER> <prd> --ralph-results <file>`` (like ``python -m pytest``, see
:data:`PYTEST_LAUNCHER`), in the rootdir and reads the results file
(:mod:`pytest_ralph.checks.results`). The child's terminal output is kept in ``check.log`` and its
JUnit XML in ``check.xml`` beside the results; each item's ``ralph_story``,
``ralph_criterion`` and ``ralph_kind`` are JUnit properties. The child writes all three into
a private temporary folder (mode 0700, removed when the phase ends); the copies kept, the
``--junitxml`` copy and the results the loop goes on with are redacted
(:mod:`pytest_ralph.util.redact`): no secret of what the checks printed reaches the state folder.

Every Python process of a phase keeps its bytecode in a private folder, made for the phase
and removed after it (:func:`private_bytecode`): ``.pyc`` files planted in the project's
``__pycache__`` folders, including pytest's assertion-rewrite cache, are never loaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..oracle.bytecode import TrustedBytecode
from ..oracle.phasewatch import write_judges
from ..sandbox.bwrap import Sandbox, check_confinement, exit_status, wrap
from ..util.env import (
    CHILD_ENV,
    IMPORTS_ENV,
    JUDGES_ENV,
    PROGRESS_ENV,
    PROGRESS_PLUGIN,
    PYCACHE_ENV,
    WORKER_ROOTDIR_ENV,
)
from ..util.process import Finished, read_tail, run_in_group, supervised
from ..util.redact import Redactor, redact_file, redact_json_file
from .results import CheckResults, CriterionResult, read_results

#: Seconds the child pytest gets, after SIGTERM, to stop the commands it runs.
CHILD_GRACE_SECONDS = 10.0

#: CPython's environment variable: the folder where ``.pyc`` files are read and written
#: instead of the ``__pycache__`` folders beside the sources (``sys.pycache_prefix``).
PYCACHE_PREFIX_ENV = "PYTHONPYCACHEPREFIX"

#: Prefix of the name of a private bytecode folder (in the system's temporary folder).
PYCACHE_DIR_PREFIX = "pytest-ralph-pycache-"

#: How a pytest-xdist worker of a child pytest starts (``python -u -c XDIST_WORKER_BOOT
#: -u -c <execnet's bootstrap>``): it removes the working directory (the rootdir) from
#: ``sys.path``, then runs execnet's bootstrap as ``python -c`` would. No ``//`` in it: execnet
#: splits its specs there.
XDIST_WORKER_BOOT = """\
import os, sys
_cwd = os.path.realpath(os.getcwd())
def _other(entry):
    try:
        return os.path.realpath(entry or os.curdir) != _cwd
    except (TypeError, ValueError, OSError):
        return True
sys.path[:] = [p for p in sys.path if _other(p)]
_boot = sys.argv[-1]
sys.argv[:] = ["-c"]
del _cwd, _other
exec(_boot)
"""

#: Source run by ``python -c`` instead of ``python -m pytest``, with the same arguments.
#:
#: ``python -m pytest`` puts the working directory (the rootdir) first on ``sys.path`` before it
#: imports pytest, so a ``pytest.py`` or ``pytest/`` there (or ``_pytest``, ``pluggy``, or a
#: plugin such as ``pytest_ralph``) would stand in for the real one and report whatever it
#: likes. The launcher removes every ``sys.path`` entry that is the working directory, imports
#: pytest, and keeps the working directory last while pytest loads its plugins (a ``-p`` plugin
#: that lives only in the rootdir still imports); just before the first ``conftest.py`` files
#: load (hook ``pytest_load_initial_conftests``, tryfirst) it moves it to where
#: ``python -m pytest`` has it, ahead of the interpreter's own entries, so that tests and
#: conftests import rootdir modules as they would under ``python -m pytest``. When
#: ``sys.path`` had no such entry (``PYTHONSAFEPATH``, Python 3.11+) none is added, as with
#: ``-m``. ``sys.argv[0]`` is pytest's ``__main__.py``, and usage errors name
#: ``python -m pytest``; the exit status is pytest's.
#:
#: pytest-xdist workers (``-n``, from ``--ralph-workers`` or the ``addopts``) get the same
#: protection: a worker starts as ``python -c ...`` in the rootdir, which would put it first
#: on ``sys.path`` while the worker imports execnet, pytest and xdist. Each local ``popen``
#: worker of ``--tx`` (``-n N`` makes N of them) that names no interpreter of its own starts
#: with :data:`XDIST_WORKER_BOOT` instead, which removes the working directory from
#: ``sys.path``; xdist then gives the worker the launcher's ``sys.path`` as it was when xdist
#: was imported (the working directory last), so the worker loads its plugins as the launcher
#: does, and the ``pytest_load_initial_conftests`` hook of :mod:`pytest_ralph.plugin` moves
#: the working directory where the launcher put it
#: (:data:`~pytest_ralph.util.env.WORKER_ROOTDIR_ENV` says where).
#:
#: With :data:`~pytest_ralph.util.env.IMPORTS_ENV` set, the launcher appends to that file one
#: JSON line of what the process imported: ``{"path": [...], "modules": {name: file},
#: "sources": [...], "missing": [names]}``. ``"missing"`` comes from a finder appended last to
#: ``sys.meta_path``: the top-level names no other finder found, when no frame of the import
#: is a file of the project (its tests' ``try: import newmod`` or ``importorskip`` are left
#: out: the agent may be meant to write those), such as ``org`` (``copy`` tries
#: ``org.python.core``); :func:`pytest_ralph.oracle.judges.watch` guards them.
PYTEST_LAUNCHER = """\
import os, sys


class _Missing:
    # Last on sys.meta_path: asked only when no finder found a top-level module. Records the
    # names that code outside the project looked for in vain (copy tries org.python.core).
    names = set()
    roots = ()

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if path is None and fullname not in cls.names:
            frame = sys._getframe(1)
            while frame is not None:
                if cls.ours(frame.f_code.co_filename):
                    return None
                frame = frame.f_back
            cls.names.add(fullname)
        return None

    @classmethod
    def ours(cls, filename):
        if not isinstance(filename, str) or not os.path.isabs(filename):
            return False
        parts = filename.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts:
            return False
        return any(filename.startswith(root + os.sep) for root in cls.roots)


def _launch():
    cwd = os.getcwd()
    real = os.path.realpath(cwd)
    _Missing.roots = tuple(dict.fromkeys((cwd, real)))
    sys.meta_path.append(_Missing)

    def is_cwd(entry):
        try:
            return os.path.realpath(entry or os.curdir) == real
        except (TypeError, ValueError, OSError):
            return False

    kept = [p for p in sys.path if not is_cwd(p)]
    add = len(kept) < len(sys.path)
    sys.path[:] = kept
    anchor = sys.path[0] if sys.path else None
    import shlex
    import pytest
    if add:
        sys.path.append(cwd)

    def isolated(spec):
        parts = str(spec).split("//")
        if (parts[0].split("*", 1)[-1] != "popen"
                or any(p.startswith("python=") for p in parts[1:])):
            return spec
        python = shlex.join([sys.executable, "-u", "-c", WORKER_BOOT])
        return spec if "//" in python else f"{spec}//python={python}"

    class RootdirFirst:
        def pytest_addoption(self, parser):
            try:
                parser.prog = "python -m pytest"
            except Exception:
                pass

        @pytest.hookimpl(tryfirst=True)
        def pytest_load_initial_conftests(self):
            if not add:
                return
            for i in range(len(sys.path) - 1, -1, -1):
                if sys.path[i] == cwd:
                    del sys.path[i]
                    break
            at = sys.path.index(anchor) if anchor in sys.path else 0
            sys.path.insert(at, cwd)

        def pytest_configure(self, config):
            tx = getattr(config.option, "tx", None)
            if isinstance(tx, list) and tx:
                config.option.tx = [isolated(spec) for spec in tx]
                if add and config.option.tx != tx:
                    os.environ[WORKER_ENV] = "" if anchor is None else anchor

    sys.argv[0] = os.path.join(os.path.dirname(pytest.__file__), "__main__.py")
    code = pytest.main(plugins=[RootdirFirst()])
    sys.stdout.flush()
    target = os.environ.get(IMPORTS_ENV)
    if target:
        try:
            _report_imports(target)
        except Exception:
            pass
    return code


def _report_imports(target):
    import json
    modules, sources = {}, []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            sources.append(os.path.abspath(path))
        if "." in name or module is None:
            continue
        if isinstance(path, str):
            modules[name] = os.path.abspath(path)
        else:
            portions = list(getattr(module, "__path__", None) or ())
            if portions and isinstance(portions[0], str):
                modules[name] = os.path.join(os.path.abspath(portions[0]), "")
    entries = [os.path.abspath(p or os.curdir) for p in sys.path if isinstance(p, str)]
    missing = sorted(n for n in _Missing.names if n not in sys.modules)
    line = json.dumps({"path": entries, "modules": modules, "sources": sources,
                       "missing": missing}) + "\\n"
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)
"""
PYTEST_LAUNCHER += f"""

WORKER_BOOT = {XDIST_WORKER_BOOT!r}
WORKER_ENV = {WORKER_ROOTDIR_ENV!r}
IMPORTS_ENV = {IMPORTS_ENV!r}

sys.exit(_launch())
"""


def pytest_command(python: str) -> list[str]:
    """The argv that starts a child pytest with ``python`` (arguments follow), like
    ``python -m pytest`` but without letting the working directory shadow pytest or its
    plugins (see :data:`PYTEST_LAUNCHER`)."""
    return [python, "-c", PYTEST_LAUNCHER]


#: The usage error of ``workers`` without pytest-xdist.
XDIST_NEEDED = "--ralph-workers needs pytest-xdist: pip install pytest-xdist"


def xdist_installed() -> bool:
    """Whether pytest-xdist can be imported (the child pytest runs with the same interpreter
    as the controller); nothing is imported."""
    try:
        return importlib.util.find_spec("xdist") is not None
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        return False


def workers_problem(workers: str, plugin_args: Sequence[str]) -> str:
    """Why the check phases cannot run on ``workers`` pytest-xdist workers, or ``""``.

    Args:
        workers: the ``-n`` value (``""``: none asked for, never a problem).
        plugin_args: the command line's ``-p`` options passed on to the child (``-p`` and
            its value, as :func:`pytest_ralph.plugin.options.child_args` gives them).
    """
    if not workers:
        return ""
    if not xdist_installed():
        return XDIST_NEEDED
    pairs = zip(plugin_args[::2], plugin_args[1::2], strict=False)
    if any(flag == "-p" and value.strip() in ("no:xdist", "no:xdist.plugin")
           for flag, value in pairs):
        return "--ralph-workers needs pytest-xdist, which -p no:xdist turns off; drop one"
    return ""


def shared_bytecode_dir() -> Path | None:
    """The folder the check phases of every loop run keep Python bytecode in:
    ``$PYTEST_RALPH_PYCACHE``, else ``$XDG_CACHE_HOME/pytest-ralph/pycache`` (``~/.cache``
    without ``XDG_CACHE_HOME``), made with mode 0700 on first use.

    Sharing it spares each run compiling pytest, its plugins and their dependencies again
    (about a second on two CPUs); bytecode of the project's own files never survives from one
    phase to the next (:func:`run_check_phase` removes it first), so a planted ``.pyc`` of
    project code is never loaded. Bytecode of installed packages is shared, as the packages
    themselves are.

    Returns:
        The folder (absolute, symlinks resolved), or ``None`` when ``$PYTEST_RALPH_PYCACHE``
        is empty, the path is relative (a relative ``$XDG_CACHE_HOME`` or ``HOME`` too), or the
        folder cannot be made or written (or is not ours): the run then uses a temporary folder
        of its own.
    """
    chosen = os.environ.get(PYCACHE_ENV)
    if chosen == "":
        return None
    if chosen is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        chosen = os.path.join(base, "pytest-ralph", "pycache")
    folder = Path(chosen).expanduser()
    if not folder.is_absolute():  # the child phase runs elsewhere: it would mean another folder
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = folder.resolve()
        info = folder.stat()
        if (hasattr(os, "getuid") and info.st_uid != os.getuid()) or not os.access(
                folder, os.W_OK | os.X_OK):
            return None
    except OSError:
        return None
    return folder


def forget_project_bytecode(pycache: Path, rootdir: Path) -> None:
    """Remove, from the bytecode folder ``pycache``, the bytecode of every file under
    ``rootdir`` (``PYTHONPYCACHEPREFIX`` mirrors source paths below the prefix)."""
    root = rootdir.resolve()
    shutil.rmtree(pycache / root.relative_to(root.anchor), ignore_errors=True)


def private_bytecode(env: dict[str, str], prefix: str) -> None:
    """Make the Python processes started with ``env`` keep their bytecode in the folder
    ``prefix``, never in (or from) ``__pycache__`` folders: set :data:`PYCACHE_PREFIX_ENV`, and
    drop ``PYTHONDONTWRITEBYTECODE`` so that the private folder works as a cache (nothing is
    written into the project either way). Changes ``env`` in place."""
    env[PYCACHE_PREFIX_ENV] = prefix
    env.pop("PYTHONDONTWRITEBYTECODE", None)


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
        keyword: the ``-k`` expression to select criteria ("" selects all; it also
            overrides a ``-k`` in the user's ``addopts``).
        markexpr: the ``-m`` expression, likewise.
        deselect: node id prefixes to deselect (``--deselect``).
        junitxml: where a copy of each phase's JUnit XML goes (the last one stays), or
            ``None``. Every phase also keeps its own as ``check.xml`` in its folder.
        expected: the criteria every phase must report, as (story id, criterion id, text);
            one that is missing counts as failing (removed, renamed or deselected).
        extra_args: more arguments for the child pytest.
        nodeids: check only these criteria (node ids, absolute PRD path first) instead of
            the whole PRD; empty: the whole PRD.
        pycache: the private bytecode folder to use (the loop keeps one per run, outside the
            project, so that the phases after the first do not compile the installed packages
            again; the bytecode of the project's own files is removed before each phase);
            ``None``: a fresh one per phase, removed after it.
        workers: the pytest-xdist ``-n`` value (``"4"``, ``"auto"``, ``"0"`` for none), passed
            after the user's ``addopts`` so that it wins over an ``-n`` there; ``""``: no
            ``-n`` (the ``addopts`` decide).
        sandbox: the loop's sandbox: a confining one runs the phase under bubblewrap
            (:func:`pytest_ralph.sandbox.bwrap.check_confinement`); otherwise the phase runs under
            the supervisor (:func:`pytest_ralph.util.process.supervised`). ``None``: unconfined and
            unsupervised (the gate's own checks).
        state_dir: the loop's state folder (read-only to a confined phase).
        judges: the files and folders that judge the agent's work (the PRD, the guarded
            tests, conftest and configuration files), read-only to a confined phase.
        bytecode: the loop's bytecode folder (:class:`pytest_ralph.oracle.bytecode.
            TrustedBytecode`), made ready before the phase; it replaces ``pycache``.
        report_imports: ask the phase's processes what they imported
            (:data:`~pytest_ralph.util.env.IMPORTS_ENV`;
            :attr:`pytest_ralph.checks.results.CheckResults.imports`).
        oracle: the run's :class:`pytest_ralph.oracle.snapshot.Snapshot`: its judges are watched
            while the phase runs (:mod:`pytest_ralph.oracle.phasewatch`); ``None``: not watched.
        around: more paths read-only to a confined phase, bound around the project (which
            stays writable inside them): the merge queue's gate gives the user's working tree
            and the repository's ``.git`` folder, which hold its integration worktree.
        drop_env: environment variables the child does not get (the gate drops
            ``GITHUB_STEP_SUMMARY``: the job summary is the merge command's).
    """

    prd: Path
    rootdir: Path
    inifile: Path | None = None
    stories: tuple[str, ...] = ()
    strict: bool = False
    timeout: float = 3600.0
    python: str = sys.executable
    keyword: str = ""
    markexpr: str = ""
    deselect: tuple[str, ...] = ()
    junitxml: Path | None = None
    expected: tuple[tuple[str, str, str], ...] = ()
    extra_args: tuple[str, ...] = ()
    nodeids: tuple[str, ...] = ()
    pycache: Path | None = None
    workers: str = ""
    sandbox: Sandbox | None = None
    state_dir: Path | None = None
    judges: tuple[Path, ...] = ()
    bytecode: TrustedBytecode | None = None
    report_imports: bool = False
    oracle: Any = None
    around: tuple[Path, ...] = ()
    drop_env: tuple[str, ...] = ()

    def argv(self, results_path: Path, junit_path: Path | None = None,
             empty_ini: Path | None = None) -> list[str]:
        """The child pytest's argv (started by :func:`pytest_command`).

        The child is pinned to the project: ``--rootdir`` (the working directory, the
        rootdir), ``-c`` (the controller's configuration file, or ``empty_ini`` when it had
        none: a configuration file above the project can then not be picked up) and
        ``--confcutdir`` (no ``conftest.py`` above the rootdir is loaded)."""
        argv = [*pytest_command(self.python), *(self.nodeids or [str(self.prd)]),
                "--ralph-results", str(results_path),
                # "." (the child runs in the rootdir): pytest expands $VARS in --rootdir.
                "--rootdir", ".", "--confcutdir", ".", "-p", "no:cacheprovider", "-q",
                "--no-header",
                # Whatever the user's addopts say: select by -k/-m only as asked, never stop
                # early (-x), so that every criterion gets a verdict.
                "-k", self.keyword, "-m", self.markexpr, "--maxfail=0"]
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            argv += ["-p", "pytest_ralph.plugin"]
            if self.workers:
                argv += ["-p", "xdist"]
        if self.workers:
            # On the command line, after the ini's addopts and PYTEST_ADDOPTS: this -n wins.
            argv += ["-n", self.workers]
        if self.inifile is not None:
            argv += ["-c", str(self.inifile)]
        elif empty_ini is not None:
            argv += ["-c", str(empty_ini)]
        for story in self.stories:
            argv += ["--ralph-story", story]
        if self.strict:
            argv.append("--ralph-strict")
        for prefix in self.deselect:
            argv += ["--deselect", prefix]
        if junit_path is not None:
            argv.append(f"--junitxml={junit_path}")
        return argv + list(self.extra_args)


def run_check_phase(config: CheckPhaseConfig, out_dir: Path, *,
                    progress: Callable[[Path], None] | None = None) -> CheckResults:
    """Check every criterion in a child pytest; keep ``check.json``, ``check.log`` and
    ``check.xml`` in ``out_dir``, redacted, and return the results redacted
    (:meth:`pytest_ralph.checks.results.CheckResults.redacted`).

    The child, and every process it starts, keeps its bytecode in a fresh private folder
    that is removed when the phase ends (:func:`private_bytecode`).

    A child that dies, times out, is killed by a signal or writes no results gives a
    :class:`CheckResults` whose ``errors`` say so: a broken check phase is a failure, never
    a pass. Results found after the child was killed by a signal are not used: something
    else may have written them.

    ``progress``, when given, is called with the path of a JSON-lines file the child writes
    its progress to as it checks (:mod:`pytest_ralph.plugin.progress`), before the child
    starts: for the live view only, never for a verdict (the code under test can write it).

    Raises:
        KeyboardInterrupt: after the child's process group has been killed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "check.log"
    for name in ("check.json", "check.xml"):
        (out_dir / name).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in config.drop_env}
    env[CHILD_ENV] = "1"
    env.pop(IMPORTS_ENV, None)
    folder = config.bytecode.folder if config.bytecode is not None else config.pycache
    if config.bytecode is not None:
        config.bytecode.ready()
    elif config.pycache is not None:
        # The folder outlives the phase: bytecode of the project's own files must not, or the
        # agent could swap it between two checks (the installed packages' may stay).
        forget_project_bytecode(config.pycache, config.rootdir)
    start = time.monotonic()
    # The child writes its results and JUnit XML into a private folder (mode 0700) outside
    # the project, not into the state folder the agent can write to; copies are kept in
    # ``out_dir`` for people.
    with (contextlib.nullcontext(str(folder)) if folder is not None else
          tempfile.TemporaryDirectory(prefix=PYCACHE_DIR_PREFIX,
                                      ignore_cleanup_errors=True)) as pycache, \
            tempfile.TemporaryDirectory(prefix="pytest-ralph-results-",
                                        ignore_cleanup_errors=True) as private, \
            (Path(private) / log_path.name).open("w+b") as log:
        results_path = Path(private) / "check.json"
        junit_path = Path(private) / "check.xml"
        imports_path = Path(private) / "imports.jsonl"
        if config.report_imports:
            env[IMPORTS_ENV] = str(imports_path)
        env.pop(JUDGES_ENV, None)
        if config.oracle is not None:
            write_judges(Path(private) / "judges.json", config.oracle, config.rootdir)
            env[JUDGES_ENV] = str(Path(private) / "judges.json")
        empty_ini = None
        if config.inifile is None:
            empty_ini = Path(private) / "pytest.ini"
            empty_ini.write_text(EMPTY_INI, encoding="utf-8")
        argv = config.argv(results_path, junit_path, empty_ini)
        env.pop(PROGRESS_ENV, None)
        if progress is not None:  # display only (see pytest_ralph.plugin.progress)
            progress_path = Path(private) / "progress.jsonl"
            progress_path.touch()
            env[PROGRESS_ENV] = str(progress_path)
            argv += ["-p", PROGRESS_PLUGIN]
            progress(progress_path)
        private_bytecode(env, pycache)
        argv = confined_argv(config, argv, Path(private), Path(pycache))
        redactor = Redactor.from_env()
        try:
            # The child stops its own checks' process groups on SIGTERM: give it time to.
            finished = run_in_group(argv, cwd=config.rootdir, output=log,
                                    timeout=config.timeout, env=env, grace=CHILD_GRACE_SECONDS,
                                    watchdog=True)
            if config.sandbox is not None and config.sandbox.confined:
                finished = replace(finished, returncode=exit_status(finished.returncode))
        finally:  # what people read: redacted copies, also of an interrupted phase
            for path, copy in ((results_path, redact_json_file), (junit_path, redact_file),
                               (Path(log.name), redact_file)):
                if path.is_file():
                    with contextlib.suppress(OSError):
                        copy(path, out_dir / path.name, redactor)
        tail = read_tail(log, 3000).rstrip()
        results = _read(config, finished, results_path, junit_path, tail, log_path
                        ).redacted(redactor.text)
        # The exit status that counts is the one the child really had, not its file's.
        results = replace(results, exitstatus=finished.returncode
                          if finished.returncode is not None else -1)
        if config.report_imports:
            results = replace(results, imports=read_imports(imports_path))
    return replace(with_missing(results, config.expected), duration=time.monotonic() - start)


#: The configuration file a check phase gets with ``-c`` when the project has none: an
#: empty pytest section (pytest's defaults), so that no file above the project is used.
EMPTY_INI = ("# pytest-ralph: the project has no pytest configuration file; the check phase "
             "uses this empty one so that none above the project is used.\n[pytest]\n")


#: Largest imports report read, in bytes.
IMPORTS_MAX_BYTES = 64 * 1024 * 1024


def read_imports(path: Path) -> tuple[dict[str, Any], ...]:
    """The imports report of a check phase (:data:`~pytest_ralph.util.env.IMPORTS_ENV`): one
    dict per process that wrote a well-formed line, in order; empty when the file is missing or
    too large. Each is ``{"path": [...], "modules": {name: file}, "sources": [...],
    "missing": [names]}``: ``"missing"`` (the top-level names that code outside the project
    imported and no finder found) is always a list of strings here, empty when the process
    did not report it (an older launcher) or reported something else."""
    try:
        if path.stat().st_size > IMPORTS_MAX_BYTES:
            return ()
        text = path.read_text("utf-8", errors="surrogateescape")
    except OSError:
        return ()
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if (isinstance(item, dict) and isinstance(item.get("path"), list)
                and isinstance(item.get("modules"), dict)):
            missing = item.get("missing", [])
            item["missing"] = ([n for n in missing if isinstance(n, str)]
                               if isinstance(missing, list) else [])
            out.append(item)
    return tuple(out)


def confined_argv(config: CheckPhaseConfig, argv: list[str], private: Path,
                  pycache: Path | None) -> list[str]:
    """``argv`` of a check phase run under the loop's sandbox when it confines (the phase
    may write the project less its judges, and ``private``, its results folder), else under
    the supervisor; unchanged without a sandbox (the gate's own checks)."""
    if config.sandbox is None:
        return argv
    if not config.sandbox.confined:
        return supervised(argv, cwd=config.rootdir)
    confinement = check_confinement(
        config.sandbox, project=config.rootdir, state_dir=config.state_dir or
        config.rootdir / ".pytest_ralph", results=private,
        judges=(config.prd, *config.judges), pycache=pycache, around=config.around)
    return wrap(config.sandbox, argv, confinement)


def _read(config: CheckPhaseConfig, finished: Finished, results_path: Path, junit_path: Path,
          tail: str, log_path: Path) -> CheckResults:
    """The results of a finished child, distrusting any that disagree with how it ended."""
    code = finished.returncode if finished.returncode is not None else -1
    output = f"its output ends:\n{tail}" if tail else "it printed nothing"
    if finished.timed_out:
        results = CheckResults((), (f"the check phase took longer than {config.timeout:g} s and "
                                    f"was killed; see {log_path}",), -1)
    elif code < 0:
        results = CheckResults((), (f"the check phase (child pytest) was killed by signal "
                                    f"{-code}; its results, if any, are not used; {output}",),
                               code)
    else:
        try:
            results = read_results(results_path)
        except ValueError:
            results = CheckResults((), (f"the check phase (child pytest, exit {code}) wrote no "
                                        f"results; {output}",), code)
        if code != 0 and results.complete:  # pytest exits 0 when every criterion passes
            results = CheckResults((), (f"the check phase's results say every criterion "
                                        f"passed, but the child pytest exited {code}: they are "
                                        f"not used (something else may have written them); "
                                        f"{output}",), code)
    if config.junitxml is not None and junit_path.is_file():
        with contextlib.suppress(OSError):
            config.junitxml.parent.mkdir(parents=True, exist_ok=True)
            redact_file(junit_path, config.junitxml, Redactor.from_env())
    if not config.prd.is_file():
        results = replace(results, errors=(*results.errors, f"the PRD {config.prd} does not exist "
                                           "any more (deleted or moved); expected it in place"))
    return results


#: Failure text of an expected criterion that a check phase did not report.
MISSING_MESSAGE = ("not checked: this criterion was in the PRD when the run started, but the "
                   "check did not report it (story or criterion removed or renamed, the PRD "
                   "deleted, or deselected by an option such as -k, -m or --deselect); expected "
                   "every criterion to be checked")


def with_missing(results: CheckResults,
                 expected: Sequence[tuple[str, str, str]]) -> CheckResults:
    """``results`` plus a failing result for each expected (story, criterion, text) it lacks."""
    seen = {c.key for c in results.criteria}
    missing = [CriterionResult(nodeid="", story=s, criterion=c, text=t, kind="missing",
                               outcome="failed", message=MISSING_MESSAGE)
               for s, c, t in expected if f"{s}::{c}" not in seen]
    if not missing:
        return results
    return replace(results, criteria=(*results.criteria, *missing))
