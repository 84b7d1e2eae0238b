"""The fixtures ``ralph_prd``, ``ralph_story`` and ``ralph_loop`` (the pytest layer over
:mod:`pytest_ralph.prd.load` and :mod:`pytest_ralph.loop.controller`), and ``ralph_agent``
(the scripted agents of :mod:`pytest_ralph.testing`).

``ralph_db`` lives in :mod:`pytest_ralph.plugin.dbfixture`.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pytest

from ..prd.model import PRD, Story
from .stash import get_settings

#: The PRD a session's ``ralph_prd`` fixture loaded, by path (loaded once per session).
_PRDS = pytest.StashKey[dict[Path, PRD]]()


def _prd_path(config: pytest.Config) -> Path | None:
    """The PRD of the session: ``--ralph-prd`` / ini ``ralph_prd`` / the environment, else
    the one discovery finds in the rootdir."""
    from ..prd.load import discover_prd

    return get_settings(config).prd or discover_prd(config.rootpath)


def load_session_prd(config: pytest.Config, path: Path | None = None) -> PRD:
    """The validated PRD at ``path`` (default: the session's PRD), loaded once per session.

    Raises:
        pytest.fail.Exception: no PRD is configured or found, or it is invalid (the message
            lists every problem, without a traceback).
    """
    from ..prd.errors import PRDError
    from ..prd.load import PRD_FILE_NAMES, load_prd

    path = path or _prd_path(config)
    if path is None:
        pytest.fail(f"ralph_prd: no PRD found: set --ralph-prd PATH or ini ralph_prd, or put "
                    f"one of {', '.join(PRD_FILE_NAMES)} in {config.rootpath}", pytrace=False)
    cache = config.stash.setdefault(_PRDS, {})
    key = path.resolve()
    if key not in cache:
        try:
            prd = load_prd(path, max_bytes=get_settings(config).max_prd_bytes)
            config.hook.pytest_ralph_prd_loaded(prd=prd, config=config)
        except PRDError as exc:
            pytest.fail(f"ralph_prd: {exc.describe()}", pytrace=False)
        cache[key] = prd
    return cache[key]


@pytest.fixture
def ralph_prd(request: pytest.FixtureRequest) -> PRD:
    """The session's PRD, loaded and validated (:class:`pytest_ralph.PRD`: ``path``,
    ``project``, ``stories`` (:class:`pytest_ralph.Story` each), ``criteria()``,
    ``story(id)``, ``ordered_stories()``).

    Which PRD: ``--ralph-prd`` / ini ``ralph_prd`` / ``PYTEST_RALPH_PRD``, else the first of
    ``prd.json``, ``prd.jsonc``, ``prd.yaml``, ``prd.yml`` in the rootdir (then in ``.ralph/``
    and ``scripts/ralph/``). Loaded once per session; the ``pytest_ralph_prd_loaded`` hook
    fires then. Override the fixture in a ``conftest.py`` to use another file.

    Fails the test (at setup, without a traceback) when there is no PRD or it is invalid.
    """
    return load_session_prd(request.config)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``ralph_story``: a test that uses it and does not
    parametrize it itself runs once per story of the session's PRD, with the story id as the
    test id. No PRD, or an invalid one: a single test that fails at setup with the reason."""
    if "ralph_story" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "ralph_story" in names:
            return
    # Parametrized by another pytest_generate_tests (a conftest's) before this one.
    if any("ralph_story" in call.params for call in getattr(metafunc, "_calls", ())):
        return
    from ..prd.errors import PRDError
    from ..prd.load import load_prd

    path = _prd_path(metafunc.config)
    ids: list[str] = []
    if path is not None:
        try:
            ids = [s.id for s in load_prd(path).stories]
        except (PRDError, OSError):
            ids = []
    if ids:
        metafunc.parametrize("ralph_story", ids, indirect=True, ids=ids)


@pytest.fixture
def ralph_story(request: pytest.FixtureRequest, ralph_prd: PRD) -> Story:
    """One user story of the session's PRD (:class:`pytest_ralph.Story`: ``id``, ``title``,
    ``description``, ``criteria``, ``priority``, ``passes``, ``notes``); a test that uses it
    runs once per story, with the story ids as test ids. Choose stories by parametrizing it
    yourself: ``@pytest.mark.parametrize("ralph_story", ["US-001"], indirect=True)``.

    An unknown id fails the test at setup naming the PRD's stories.
    """
    story_id = getattr(request, "param", None)
    if story_id is None and not ralph_prd.stories:
        pytest.fail(f"ralph_story: {ralph_prd.path} has no user stories", pytrace=False)
    if story_id is None:
        if len(ralph_prd.stories) == 1:
            return ralph_prd.stories[0]
        pytest.fail(f"ralph_story: {ralph_prd.path} has {len(ralph_prd.stories)} stories and "
                    "none was chosen: parametrize it, e.g. @pytest.mark.parametrize("
                    "\"ralph_story\", [\"US-001\"], indirect=True)", pytrace=False)
    story = ralph_prd.story(str(story_id))
    if story is None:
        pytest.fail(f"ralph_story: no story {story_id!r} in {ralph_prd.path} (its stories: "
                    f"{', '.join(s.id for s in ralph_prd.stories) or 'none'})", pytrace=False)
    return story


@dataclass
class LoopResult:
    """What a programmatic loop (:meth:`RalphLoop.run`) did.

    Attributes:
        exit_code: the loop's exit code (0 complete, 1 limit, 2 interrupted, 3 internal
            error or a hook failed, 4 usage, 5 no criteria, 6 circuit breaker, 7 agent
            errors).
        status: the run's status (``complete``, ``limit``, ``breaker``, ``agent-error``,
            ...), or ``""`` when the run never started (exit 4 or 5).
        reason: the stop reason, or the error message of a run that never started.
        iterations: agent iterations run (the baseline check not counted).
        output: everything the loop printed (progress blocks, the final line).
        run: the run record (:class:`pytest_ralph.loop.records.RunRecord`), or ``None``.
        report: the path of the final report, or ``None``.
        state_dir: the state folder of the run.
    """

    exit_code: int
    status: str
    reason: str
    iterations: int
    output: str
    run: Any = None
    report: Path | None = None
    state_dir: Path | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every criterion passed (exit 0)."""
        return self.exit_code == 0

    @property
    def failing(self) -> list[str]:
        """Keys (``story::criterion``) of the criteria failing at the last check."""
        if self.run is None or not self.run.iterations:
            return []
        return [c.key for c in self.run.last.results.failing]

    @property
    def passing(self) -> list[str]:
        """Keys of the criteria passing at the last check."""
        if self.run is None or not self.run.iterations:
            return []
        return [c.key for c in self.run.last.results.passing]

    @property
    def stories(self) -> list[str]:
        """The story each agent iteration worked on, in order (``""`` for none)."""
        if self.run is None:
            return []
        return [it.story for it in self.run.iterations[1:]]

    def prompts(self) -> list[str]:
        """The prompt of each agent iteration, in order (read from the state folder)."""
        from ..state.folder import PROMPT_FILE

        if self.run is None:
            return []
        out = []
        for it in self.run.iterations[1:]:
            path = it.folder / PROMPT_FILE
            out.append(path.read_text("utf-8") if path.is_file() else "")
        return out


class _Tee(io.StringIO):
    """Keeps what is written and copies it to ``echo`` (pytest's captured stdout)."""

    def __init__(self, echo: TextIO) -> None:
        super().__init__()
        self.echo = echo

    def write(self, text: str) -> int:
        self.echo.write(text)
        return super().write(text)

    def flush(self) -> None:
        self.echo.flush()


class RalphLoop:
    """A Ralph loop run from inside a test: configure it, run it, inspect the result.

    Made by the ``ralph_loop`` fixture. Settings are the names of ``pytest --help``'s
    ``--ralph-*`` options with ``_`` for ``-`` (``agent``, ``max_iterations``, ``breaker``,
    ``story``, ``strict``, ``agent_timeout``, ``dir``...), as values or strings.

    Args:
        config: the test session's config (its ``pytest_ralph_*`` hooks apply to the loop).
        rootdir: the project the agent and the checks run in.
        state_dir: the default state folder (a temporary folder of the test).
        settings: initial settings.
    """

    def __init__(self, config: pytest.Config, rootdir: Path, state_dir: Path,
                 **settings: Any) -> None:
        self.config = config
        self.rootdir = rootdir
        self.state_dir = state_dir
        self.settings: dict[str, Any] = {}
        self.configure(**settings)

    def configure(self, **settings: Any) -> RalphLoop:
        """Set or change settings (see the class docstring); returns ``self``.

        ``prd`` may also be a dict (the PRD itself, written as ``prd.json`` into the state
        folder's parent), ``agent`` a list of arguments (quoted for you).

        Raises:
            pytest.UsageError: an unknown setting name.
        """
        from ..loop.settings import SPECS

        names = {spec.name for spec in SPECS}
        for name, value in settings.items():
            if value is None:  # not given
                self.settings.pop(name, None)
                continue
            if name not in names:
                raise pytest.UsageError(
                    f"ralph_loop: unknown setting {name!r}; expected one of "
                    f"{', '.join(sorted(names))}")
            if name == "agent" and isinstance(value, (list, tuple)):
                import shlex

                value = shlex.join(str(v) for v in value)
            if name == "prd" and not isinstance(value, (dict, str, os.PathLike)):
                raise pytest.UsageError(f"ralph_loop: prd: expected a path or a dict (the PRD "
                                        f"itself); got {value!r}")
            if name == "prd" and isinstance(value, dict):
                path = self.state_dir.parent / "prd.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(value, indent=2) + "\n", "utf-8")
                value = path
            self.settings[name] = value
        return self

    def _resolved(self) -> Any:
        """The settings: the keyword arguments, then (same rootdir only) the environment and
        the session's ini, then the defaults.

        Raises:
            pytest.UsageError: a bad value (the message names the setting).
        """
        from ..loop.settings import SPECS, SettingsError, resolve

        same_root = self.rootdir.resolve() == self.config.rootpath.resolve()
        given = {"dir": str(self.state_dir), **self.settings}
        cli: dict[str, Any] = {}
        ini: dict[str, Any] = {}
        for spec in SPECS:
            if spec.name not in given:
                continue
            value = given[spec.name]
            if spec.kind == "list":
                value = [value] if isinstance(value, str) else [str(v) for v in value]
            elif spec.kind == "mapping":
                value = [f"{k} = {v}" for k, v in dict(value).items()]
            elif spec.kind == "paths":
                value = [str(value)] if isinstance(value, (str, Path)) else [str(v) for v in
                                                                            value]
            elif not isinstance(value, bool):
                value = str(value)
            # Settings without a command-line option go in as ini values (paths then start
            # at the rootdir), and the environment may not override them.
            (cli if spec.cli else ini)[spec.ini if not spec.cli else spec.name] = value
        shadowed = {spec.env for spec in SPECS if spec.ini in ini}
        env = {k: v for k, v in os.environ.items() if k not in shadowed} if same_root else {}

        def ini_value(name: str) -> Any:
            if name in ini:
                return ini[name]
            return self.config.getini(name) if same_root else None

        try:
            return resolve(cli=cli, env=env, ini=ini_value, ini_file="ralph_loop",
                           invocation_dir=self.rootdir, rootdir=self.rootdir)
        except SettingsError as exc:
            message = str(exc)
            for spec in SPECS:  # name the keyword argument, not the option it stands for
                if spec.name in self.settings:
                    message = message.replace(f"from {spec.cli}:", f"from ralph_loop("
                                              f"{spec.name}=...):").replace(
                        f"from ini {spec.ini} (ralph_loop):", f"from ralph_loop("
                        f"{spec.name}=...):")
            raise pytest.UsageError(f"ralph_loop: {message}") from None

    def _loop(self, out: TextIO) -> Any:
        from ..loop.controller import Loop
        from .hookimpls import ConfigHooks

        same_root = self.rootdir.resolve() == self.config.rootpath.resolve()
        inifile = self.config.inipath if same_root else next(
            (p for p in (self.rootdir / "pytest.ini",) if p.is_file()), None)
        return Loop(self._resolved(), rootdir=self.rootdir, inifile=inifile, out=out,
                    hooks=ConfigHooks(self.config))

    def run(self) -> LoopResult:
        """Run the loop to a stop condition (real agent runs, real check phases).

        The progress is printed as it goes (shown by pytest for a failing test, or with
        ``-s``) and kept in :attr:`LoopResult.output`.
        """
        from ..loop.controller import run_loop
        from ..state.folder import REPORTS_DIR

        out = _Tee(sys.stdout)
        errors: list[str] = []
        loop = self._loop(out)
        code = run_loop(loop, dry_run=False, err=errors.append)
        run = loop.last_run
        reports = sorted((loop.settings.dir / REPORTS_DIR).glob("*.md"),
                         key=lambda p: p.stat().st_mtime)
        return LoopResult(
            exit_code=code, status=run.status if run else "",
            reason=run.reason if run else "\n".join(errors),
            iterations=max(len(run.iterations) - 1, 0) if run else 0, output=out.getvalue(),
            run=run, report=reports[-1] if reports and run else None,
            state_dir=loop.settings.dir, errors=errors)

    def dry_run(self) -> str:
        """What ``pytest --ralph-dry-run`` prints: the agent argv and the first prompt.

        Raises:
            AssertionError: the loop could not be set up (its message is the reason).
        """
        from ..loop.controller import run_loop

        out = io.StringIO()
        errors: list[str] = []
        code = run_loop(self._loop(out), dry_run=True, err=errors.append)
        assert code == 0, "\n".join(errors)
        return out.getvalue()

    def until(self, *targets: str, agent: str | Sequence[str] | None = None,
              **settings: Any) -> LoopResult:
        """Fix until these tests pass: run the loop on a one-story PRD whose only criterion is
        ``pytest TARGETS`` (node ids or paths, relative to the rootdir).

        Raises:
            pytest.UsageError: no target.
        """
        if not targets:
            raise pytest.UsageError("ralph_loop.until: expected at least one node id or path")
        prd = {"project": "until " + " ".join(targets), "userStories": [{
            "id": "FIX", "title": f"make {' '.join(targets)} pass", "priority": 1,
            "passes": False,
            "acceptanceCriteria": [{"pytest": list(targets),
                                    "text": f"pytest {' '.join(targets)} passes"}]}]}
        if agent is not None:
            settings["agent"] = agent
        return self.configure(prd=prd, **settings).run()


@pytest.fixture
def ralph_loop(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A factory of programmatic Ralph loops: ``ralph_loop(rootdir=None, **settings) ->
    RalphLoop``; ``.run() -> LoopResult`` (``exit_code``, ``status``, ``iterations``,
    ``failing``, ``passing``, ``output``, ``report``), ``.until("tests/test_x.py::test_y")``
    runs the agent until those tests pass, ``.dry_run()`` shows the first prompt. Settings are
    the ``--ralph-*`` option names with ``_`` (``agent``, ``max_iterations``, ``prd``...).

    ``loop = ralph_loop(agent=[sys.executable, "agent.py"], max_iterations=5)``, then
    ``result = loop.run()`` (:class:`pytest_ralph.plugin.fixtures.LoopResult`: ``exit_code``,
    ``status``, ``reason``, ``iterations``, ``failing``, ``passing``, ``stories``,
    ``prompts()``, ``output``, ``report``); or ``loop.until("tests/test_x.py::test_y")`` to
    fix until those tests pass; ``loop.dry_run()`` for the first prompt.

    Settings are the ``--ralph-*`` option names with ``_`` (``prd``, ``agent``,
    ``max_iterations``, ``breaker``, ``story``...); ``rootdir=`` names the project (default:
    the session's rootdir, whose ini settings, environment and ``conftest.py`` hooks then
    apply; with another rootdir, only the given settings and the defaults). The state folder
    defaults to a temporary folder of the test.
    """
    def make(rootdir: Path | str | None = None, **settings: Any) -> RalphLoop:
        root = Path(rootdir).resolve() if rootdir is not None else request.config.rootpath
        return RalphLoop(request.config, root, tmp_path / "ralph-state", **settings)

    return make


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
