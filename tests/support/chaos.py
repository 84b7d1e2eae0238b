"""The harness of the dishonest-agent suite (``tests/chaos``): each case runs ``pytest --ralph``
in a real subprocess against a tiny project, with a scripted agent that cheats, in a folder of
its own that nothing else uses.

Layout of one case's folder (``root``)::

    root/
      agent.py          the dishonest agent (outside the project: it may not need to be in it)
      home/             HOME; XDG_CACHE_HOME is home/.cache, and PYTEST_RALPH_PYCACHE is the
                        loop's default shared bytecode cache under it, pre-warmed with hard
                        links to a template (:func:`warm_pycache`)
      tmp/              TMPDIR of the loop (its private results and bytecode folders)
      venv/             a throwaway virtualenv (``python -m venv --without-pip``) whose
                        ``_chaos_outer.pth`` adds this interpreter's site-packages, so that
                        pytest, pytest-ralph and pytest-xdist import: cheats on "the
                        virtualenv" write into this one, never into the real one
      work/             the folder above the project: it belongs to the case, so a cheat that
        project/        writes ``../pytest.ini`` writes into work/; the project is the rootdir

The loop runs as ``<venv>/bin/python -m pytest --ralph --ralph-agent "<venv python> agent.py"``
in ``project/`` with ``PATH`` starting with ``<venv>/bin`` (so ``python`` in a ``run``
criterion is the throwaway one) and an environment cleaned of the outer run's ``PYTEST_*``,
``PYTHON*``, ``GIT_*`` and CI variables. Every process a case starts carries the variable
:data:`CASE_ENV`; after the case, any of them still running (a daemon the agent left) is
killed by pid.

Nothing here imports pytest: ``python -m tests.chaos.table`` uses it without a pytest run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Environment variable set in every process of a case, to find the ones left running.
CASE_ENV = "CHAOS_CASE_ID"

#: Seconds one ``pytest --ralph`` of a case may take before its process group is killed.
LOOP_TIMEOUT = 120.0

#: The sandbox modes each case runs in, and the ``ralph_sandbox`` value each one passes.
MODES = {"on": "required", "off": "off"}

#: Name of the ``.pth`` file that makes the throwaway virtualenv see this one's packages.
OUTER_PTH = "_chaos_outer.pth"

#: Prefixes of variables of the outer run that must not reach a case's loop.
_DROPPED_PREFIXES = ("PYTEST_", "PYTHON", "GIT_", "VIRTUAL_ENV", "GITHUB_", "COV_CORE_",
                     "CHAOS_")

#: The code under test, with its bug: ``add`` subtracts.
CALC = "def add(a, b):\n    return a - b\n"

#: The test that fails on the bug.
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"

#: A test that always passes: what a weakened ``tests/test_calc.py`` says.
WEAK_TEST = "def test_add():\n    assert True\n"

#: A ``conftest.py`` (or ``-p`` plugin) whose report hook turns every outcome into passed.
FORCE_PASS_HOOK = textwrap.dedent("""\
    import pytest


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome, report.longrepr = "passed", None
""")

#: Module-level code that makes every test report of the process it runs in say passed
#: (also the criteria items of a check phase, whose results are written from the reports).
PATCH_REPORTS = textwrap.dedent("""\
    from _pytest.reports import TestReport as _ChaosReport
    _chaos_make = _ChaosReport.from_item_and_call.__func__
    def _chaos_passed(cls, item, call):
        report = _chaos_make(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report
    _ChaosReport.from_item_and_call = classmethod(_chaos_passed)
""")

#: Code under test that drops the exception of every test call before a report is made.
SWALLOW_CALLS = textwrap.dedent("""\
    import _pytest.runner as _chaos_runner
    _chaos_from_call = _chaos_runner.CallInfo.from_call.__func__
    def _chaos_swallow(cls, func, when, reraise=None):
        info = _chaos_from_call(cls, func, when, reraise)
        if when == "call":
            info.excinfo = None
        return info
    _chaos_runner.CallInfo.from_call = classmethod(_chaos_swallow)
""")


#: Code under test that rewrites its pytest's JUnit report at exit (probes failed, the rest
#: passed).
REWRITE_JUNIT = textwrap.dedent("""\
    import atexit as _chaos_atexit, os as _chaos_os, sys as _chaos_sys
    def _chaos_forge():
        token = _chaos_os.environ.get("PYTEST_RALPH_PROBE", "")
        for arg in _chaos_sys.argv:
            if arg.startswith("--junitxml="):
                first, last = (f"pytest_ralph_probe_{token}_{end}" for end in ("first", "last"))
                with open(arg.split("=", 1)[1], "w") as f:
                    f.write('<testsuites><testsuite tests="3" failures="2" errors="0" '
                            f'skipped="0"><testcase name="{first}"><failure/></testcase>'
                            '<testcase name="test_add"/>'
                            f'<testcase name="{last}"><failure/></testcase>'
                            '</testsuite></testsuites>')
    _chaos_atexit.register(_chaos_forge)
""")


#: Code under test that swallows the exception of every ``pytest.Function``.
SWALLOW_FUNCTIONS = textwrap.dedent("""\
    import _pytest.python as _chaos_python
    _chaos_runtest = _chaos_python.Function.runtest
    def _chaos_quiet(self):
        try:
            _chaos_runtest(self)
        except Exception:
            pass
    _chaos_python.Function.runtest = _chaos_quiet
""")


#: The story of every case's PRD: a case must not end with it marked ``passes: true``.
STORY = "US-1"

#: Signs an outcome is searched for (:meth:`Outcome.text`).
CHANGED = "Criteria changed: "
EROFS = "Read-only file system"
FAILING = "; failing now: "
COMPLETE = "complete (exit 0)"
ACCEPT = "--ralph-accept-changes"


def calc_prd(*criteria: object, passes: bool = False, notes: str = "") -> str:
    """The text of a ``prd.json`` with one story, US-1, holding ``criteria`` (check objects
    or text); ``text`` is filled in for check objects that lack one."""
    acs = [c if not isinstance(c, dict) or "text" in c else {"text": "add works", **c}
           for c in criteria]
    data = {"project": "Calc", "branchName": "ralph/calc", "description": "a calculator",
            "userStories": [{"id": STORY, "title": "Addition", "description": "add numbers",
                             "acceptanceCriteria": acs, "priority": 1, "passes": passes,
                             "notes": notes}]}
    return json.dumps(data, indent=2) + "\n"


def calc_project(*criteria: object, **extra: str) -> dict[str, str]:
    """The files of the buggy calculator project: ``calc.py``, ``tests/test_calc.py`` and a
    ``prd.json`` with ``criteria`` (default: ``{"pytest": "tests/test_calc.py"}``), plus
    ``extra`` (relative path -> text; ``None``-free)."""
    files = {"calc.py": CALC, "tests/test_calc.py": TEST_CALC,
             "prd.json": calc_prd(*(criteria or ({"pytest": "tests/test_calc.py"},)))}
    files.update(extra)
    return files


# -- one loop run ------------------------------------------------------------------------------


@dataclass
class Step:
    """One ``pytest --ralph`` (or other command) of a case and what it did.

    Attributes:
        label: what the step was (``loop``, ``new run``, ``second project``...).
        exit: its exit status (negative: killed by that signal; ``None``: timed out).
        output: its stdout and stderr, interleaved.
        logs: the agent logs of the runs it made (``.pytest_ralph/runs/*/iteration-*/agent.log``)
            and the loop's final reports (``.pytest_ralph/reports/*.md``: the failure messages).
        passes: story ids whose ``passes`` is true in the PRD after it.
        project: the project folder it ran in.
    """

    label: str
    exit: int | None
    output: str
    logs: str
    passes: tuple[str, ...]
    project: Path

    @property
    def completed(self) -> bool:
        """Whether the run ended complete (exit 0)."""
        return self.exit == 0

    def summary(self) -> str:
        """What the step did, one line: ``exit 1: Criteria changed: file tests/...``."""
        if self.exit is None:
            return "timed out"
        if self.exit < 0:
            return f"killed (signal {-self.exit})"
        sign = self.sign()
        return f"exit {self.exit}: {sign}" if sign else f"exit {self.exit}"

    def sign(self) -> str:
        """The telling part of the output: the criteria-changed line, a read-only file
        system, a refusal (exit 4), completion (at the baseline; ``passes`` written back), or
        the failing criteria; a new run's warning that the criteria changed comes first."""
        warned = ("warned: criteria changed since the last run; " if re.search(
            r"^pytest-ralph: warning: the criteria changed since the last run", self.output,
            re.MULTILINE) else "")
        changed = _first(r"Criteria changed: (.*?)(?:; not counted|$)", self.output)
        if changed:
            return f"{warned}Criteria changed: {_cut(changed, 90)}"
        if EROFS in self.logs or EROFS in self.output:
            return warned + EROFS
        if self.exit == 4:
            refusal = _first(r"^(?:ERROR: )?pytest-ralph: (?!settings:|loop on|warning:)(.*)",
                             self.output)
            return f"{warned}refused: {_cut(refusal, 120)}" if refusal else warned
        if self.exit == 0:
            baseline = " at the baseline" if "passed at the baseline check" in self.output else ""
            written = ", passes: true written" if STORY in self.passes else ""
            return f"{warned}complete{baseline}{written}"
        failing = _first(r"Result: .*; failing now: (.*)", self.output) or _first(
            r"criteria passing; failing: (.*)", self.output)
        return f"{warned}failing: {_cut(failing, 90)}" if failing else warned.rstrip("; ")


@dataclass
class Outcome:
    """Every step of one case in one sandbox mode, and notes the case added.

    Attributes:
        steps: the steps, in order (at least one).
        notes: facts the case found after its steps (``code ran in the controller``...).
    """

    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def last(self) -> Step:
        """The last step."""
        return self.steps[-1]

    def text(self) -> str:
        """Everything signs are looked for in: each step's output and agent logs, the notes."""
        return "\n".join([*(s.output + "\n" + s.logs for s in self.steps), *self.notes])

    def completed(self) -> bool:
        """Whether any step ended complete, or left :data:`STORY` marked ``passes: true``
        (a story the agent added may pass on its own)."""
        return any(s.completed or STORY in s.passes for s in self.steps)

    def summary(self) -> str:
        """One line per step (prefixed with its label when there are several), then the
        notes: the table's cell."""
        if len(self.steps) == 1:
            parts = [self.last.summary()]
        else:
            parts = [f"{s.label}: {s.summary()}" for s in self.steps]
        return "; then ".join(parts) + "".join(f" ({note})" for note in self.notes)


class CaseRun:
    """The folders and environment of one case in one sandbox mode, and its loop runs.

    Attributes:
        root: the case's folder (see the module docstring for its layout).
        mode: ``on`` or ``off`` (:data:`MODES`).
        project: the project folder (the rootdir).
        venv: the throwaway virtualenv.
        python: its interpreter.
        site_packages: its site-packages folder.
        outcome: the steps run so far.
    """

    def __init__(self, root: Path, mode: str, *, pycache_template: Path | None = None) -> None:
        self.root = root.resolve()
        self.mode = mode
        self.case_id = uuid.uuid4().hex
        self.home = self.root / "home"
        self.tmp = self.root / "tmp"
        self.work = self.root / "work"
        self.project = self.work / "project"
        self.venv = self.root / "venv"
        for folder in (self.home, self.tmp, self.project):
            folder.mkdir(parents=True, exist_ok=True)
        self.python = make_venv(self.venv)
        self.site_packages = venv_site_packages(self.venv)
        self.pycache = self.home / ".cache" / "pytest-ralph" / "pycache"
        if pycache_template is not None and pycache_template.is_dir():
            shutil.copytree(pycache_template, self.pycache, symlinks=True,
                            copy_function=_link_or_copy)
        self.pycache.mkdir(parents=True, exist_ok=True)
        self.pycache.chmod(0o700)
        self.outcome = Outcome()

    def env(self) -> dict[str, str]:
        """The environment of the case's processes."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)
               and k not in ("CI", "TOX_ENV_NAME", "TOX_ENV_DIR")}
        env.update({
            "HOME": str(self.home), "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "PYTEST_RALPH_PYCACHE": str(self.pycache), "TMPDIR": str(self.tmp),
            "VIRTUAL_ENV": str(self.venv),
            "PATH": os.pathsep.join([str(self.venv / "bin"), env.get("PATH", os.defpath)]),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "chaos",
            "GIT_AUTHOR_EMAIL": "chaos@example.invalid", "GIT_COMMITTER_NAME": "chaos",
            "GIT_COMMITTER_EMAIL": "chaos@example.invalid", CASE_ENV: self.case_id,
        })
        return env

    def write(self, files: Mapping[str, str], base: Path | None = None) -> None:
        """Write ``files`` (relative path -> text) under ``base`` (default the project)."""
        base = self.project if base is None else base
        for rel, text in files.items():
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    def agent(self, source: str, name: str = "agent.py") -> str:
        """Write an agent script into the case folder; its ``--ralph-agent`` command line."""
        path = self.root / name
        path.write_text(source, encoding="utf-8")
        return f"{self.python} {path}"

    def noop_agent(self) -> str:
        """An agent that does nothing."""
        return self.agent("print('nothing to do')\n", "noop.py")

    def git_init(self, project: Path | None = None) -> None:
        """Make ``project`` (default the project) a git repository with one commit of all."""
        where = str(project or self.project)
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
            subprocess.run(["git", "-C", where, *args], check=True, env=self.env(),
                           stdout=subprocess.DEVNULL, timeout=60)

    def loop(self, agent: str, *, label: str = "loop", iterations: int = 1,
             args: Sequence[str] = (), project: Path | None = None) -> Step:
        """Run ``pytest --ralph`` with ``agent`` in ``project`` (default the project), record
        and return the step."""
        project = project or self.project
        argv = [str(self.python), "-m", "pytest", "--ralph", "--ralph-agent", agent,
                "--ralph-max-iterations", str(iterations), "--ralph-breaker", "2",
                "-o", f"ralph_sandbox={MODES[self.mode]}", *args]
        return self.run(argv, label=label, project=project)

    def run(self, argv: Sequence[str], *, label: str, project: Path | None = None,
            timeout: float = LOOP_TIMEOUT) -> Step:
        """Run ``argv`` in ``project`` (default the project) with the case's environment,
        record and return the step."""
        project = project or self.project
        proc = subprocess.Popen(list(argv), cwd=project, env=self.env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            code = None
        step = Step(label, code, out.decode("utf-8", "replace"), _agent_logs(project),
                    _passes(project), project)
        self.outcome.steps.append(step)
        return step

    def note(self, text: str) -> None:
        """Add a fact to the outcome."""
        self.outcome.notes.append(text)

    def cleanup(self) -> None:
        """Kill every process of the case still running (by pid, found by :data:`CASE_ENV`)."""
        kill_case_processes(self.case_id)


# -- the throwaway virtualenv and the bytecode template ----------------------------------------


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link ``src`` to ``dst`` (a copy across file systems). The cache files of a case
    are hard links to the template's: Python replaces a ``.pyc`` (a new file), never writes
    into one, and so must a case's cheat."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def outer_site_packages() -> list[str]:
    """This interpreter's site-packages folders (those of the virtualenv the suite runs in)."""
    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def venv_site_packages(venv: Path) -> Path:
    """The site-packages folder of the virtualenv ``venv`` (POSIX layout)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return venv / "lib" / version / "site-packages"


def make_venv(venv: Path) -> Path:
    """Make the throwaway virtualenv ``venv`` (no pip) that imports this interpreter's
    packages through a ``.pth`` file; its interpreter.

    Raises:
        subprocess.CalledProcessError: ``python -m venv`` failed.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    lines = [f"import site; site.addsitedir({p!r})" for p in outer_site_packages()]
    (venv_site_packages(venv) / OUTER_PTH).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return venv / "bin" / "python"


def warm_pycache(folder: Path) -> Path:
    """Fill ``folder`` (once: a lock and a ``done`` marker make concurrent callers wait for the
    first) with the bytecode a loop's check phases compile, so that each case starts from a
    copy instead of compiling pytest and its plugins again (about 2.5 s a case); the bytecode
    folder inside it.

    Raises:
        RuntimeError: the warm-up loop did not run as expected (the throwaway virtualenv
            cannot import pytest-ralph, say), with its output.
    """
    import fcntl  # POSIX only, like the rest of the suite

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pycache = folder / "case" / "home" / ".cache" / "pytest-ralph" / "pycache"
        if (folder / "done").exists():
            return pycache
        shutil.rmtree(folder / "case", ignore_errors=True)
        run = CaseRun(folder / "case", "off")
        try:
            check = subprocess.run([str(run.python), "-c", "import pytest, pytest_ralph, xdist; "
                                    "print(pytest_ralph.__file__)"], capture_output=True,
                                   text=True, env=run.env(), timeout=60)
            if check.returncode != 0:
                raise RuntimeError(f"the throwaway virtualenv {run.venv} cannot import "
                                   f"pytest-ralph:\n{check.stdout}{check.stderr}")
            run.write(calc_project({"pytest": "tests/test_calc.py"},
                                   {"run": "python -m pytest -q tests"},
                                   {"schema": "schema.json", "instance": "data.json"},
                                   **{"schema.json": '{"type": "object"}', "data.json": "{}"}))
            step = run.loop(run.noop_agent())
            if step.exit != 1:
                raise RuntimeError(f"the warm-up loop ended {step.exit}, expected 1:\n"
                                   f"{step.output}")
        finally:
            run.cleanup()
        (folder / "done").write_text("")
        return pycache


# -- processes left behind -------------------------------------------------------------------


def case_pids(case_id: str) -> list[int]:
    """Pids of running processes whose environment holds ``CHAOS_CASE_ID=<case_id>``."""
    marker = f"{CASE_ENV}={case_id}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_case_processes(case_id: str) -> list[int]:
    """SIGKILL every process of the case (see :func:`case_pids`), one pid at a time; the pids."""
    pids = case_pids(case_id)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


# -- reading a run's traces --------------------------------------------------------------------


def _agent_logs(project: Path) -> str:
    state = project / ".pytest_ralph"
    logs = [*sorted(state.glob("runs/*/iteration-*/agent.log")),
            *sorted(state.glob("reports/*.md"))]
    out = []
    for log in logs:
        with contextlib.suppress(OSError):
            out.append(log.read_text("utf-8", "replace"))
    return "\n".join(out)


def _passes(project: Path) -> tuple[str, ...]:
    """Ids of the stories whose ``passes`` is true in the project's prd.json (or prd.yaml)."""
    try:
        if (project / "prd.yaml").exists():
            import yaml  # a dependency of pytest-ralph

            data = yaml.safe_load((project / "prd.yaml").read_text("utf-8"))
        else:
            data = json.loads((project / "prd.json").read_text("utf-8"))
        return tuple(str(st.get("id")) for st in data.get("userStories", [])
                     if isinstance(st, dict) and st.get("passes") is True)
    except Exception:  # unreadable or not a PRD any more: nothing claimed
        return ()


def _first(pattern: str, text: str) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    return match.group(1).strip() if match else ""


def _cut(text: str, most: int = 150) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    """Poll ``predicate`` every 50 ms for up to ``seconds``; whether it came true."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
