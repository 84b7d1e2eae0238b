"""The built-in implementations of the ``pytest_ralph_*`` hooks, and the bridge that lets the
loop controller call the hooks.

* :class:`BuiltinHooks` is registered as the plugin ``ralph-builtin-hooks``; each of its
  methods is a ``trylast`` implementation, so an implementation in a ``conftest.py`` or an
  installed plugin that returns a value replaces it.
* :class:`ConfigHooks` is the :class:`pytest_ralph.loop.hooks.LoopHooks` the plugin hands to
  the loop: each extension point calls its hook through ``config.hook`` and checks what comes
  back.
"""

from __future__ import annotations

import functools
import traceback
import types
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..checks.fingerprint import normalize_failure
from ..loop.hooks import HookError, LoopHooks, StopContext, StopDecision, decide_stop
from ..loop.prompt import PromptContext, build_prompt
from ..util.files import read_bytes
from .stash import get_settings

if TYPE_CHECKING:
    from ..agents.run import AgentRun
    from ..checks.base import Check
    from ..checks.results import CheckResults, CriterionResult
    from ..prd.model import PRD, Criterion, Story

#: The name :class:`BuiltinHooks` is registered under.
BUILTIN_PLUGIN = "ralph-builtin-hooks"


def _expect(hook: str, value: Any, what: str, ok: bool) -> None:
    """Raise :class:`~pytest_ralph.loop.hooks.HookError` naming ``hook`` unless ``ok``.

    Raises:
        HookError: the value is not what the hook must return.
    """
    if not ok:
        shown = repr(value)
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        raise HookError(f"a {hook} implementation returned {shown} ({type(value).__name__}); "
                        f"expected {what} or None")


def unknown_hooks(pluginmanager: pytest.PytestPluginManager) -> list[str]:
    """``"NAME (in FILE)"`` for each implemented ``pytest_ralph_*`` hook that has no
    specification (a misspelt name), in name order."""
    out = []
    for name in sorted(vars(pluginmanager.hook)):
        caller = getattr(pluginmanager.hook, name)
        if name.startswith("pytest_ralph_") and not caller.has_spec():
            where = sorted({str(getattr(impl.plugin, "__file__", impl.plugin_name))
                            for impl in caller.get_hookimpls()})
            if where:
                out.append(f"{name} (in {', '.join(where)})")
    return out


#: Misspelt hooks of conftest.py files that were registered during collection (and then
#: unregistered, so that pluggy does not end the session with an internal error), by plugin
#: manager.
_LATE: weakref.WeakKeyDictionary[pytest.PytestPluginManager, list[str]] = \
    weakref.WeakKeyDictionary()


def misspelt(plugin: object) -> list[str]:
    """The ``pytest_ralph_*`` names that ``plugin`` (a module or object) defines and that are
    not hooks."""
    from .hookspecs import HOOK_NAMES

    return sorted(name for name in dir(plugin)
                  if name.startswith("pytest_ralph_") and name not in HOOK_NAMES
                  and callable(getattr(plugin, name, None)))


def set_aside(plugin: object, manager: pytest.PytestPluginManager) -> None:
    """For ``pytest_plugin_registered``: unregister a ``conftest.py`` with a misspelt
    ``pytest_ralph_*`` hook and remember it for :func:`check_hook_names`."""
    if _conftest_dir(plugin) is None:
        return
    names = misspelt(plugin)
    if names:
        manager.unregister(plugin)
        _LATE.setdefault(manager, []).append(
            f"{', '.join(names)} (in {getattr(plugin, '__file__', plugin)})")


def check_hook_names(pluginmanager: pytest.PytestPluginManager) -> None:
    """Refuse misspelt ``pytest_ralph_*`` hook names.

    Raises:
        pytest.UsageError: a plugin or conftest.py implements a ``pytest_ralph_*`` hook that
            does not exist.
    """
    unknown = _LATE.get(pluginmanager, []) + unknown_hooks(pluginmanager)
    if unknown:
        from .hookspecs import HOOK_NAMES

        raise pytest.UsageError(
            f"pytest-ralph: unknown hook {'; '.join(unknown)}: expected one of "
            f"{', '.join(HOOK_NAMES)} (see docs/hooks.md)")


def scan_conftests(folder: Path, rootdir: Path) -> list[str]:
    """Misspelt ``pytest_ralph_*`` functions defined in the ``conftest.py`` files of
    ``folder`` and its parents up to ``rootdir``, read without importing them (the loop
    controller does not load a subfolder's conftest.py): ``"NAME (in FILE)"`` each."""
    import ast

    from .hookspecs import HOOK_NAMES

    out = []
    folder = folder.resolve()
    root = rootdir.resolve()
    chain = [folder, *folder.parents] if folder.is_relative_to(root) else [folder]
    for d in chain:
        path = d / "conftest.py"
        try:  # never blocks on a FIFO; a conftest.py over 16 MiB is not looked at
            tree = ast.parse(read_bytes(path, 16 * 1024 * 1024), str(path))
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            names = sorted(n.name for n in tree.body
                           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and n.name.startswith("pytest_ralph_") and n.name not in HOOK_NAMES)
            if names:
                out.append(f"{', '.join(names)} (in {path})")
        if d == root:
            break
    return out


def _conftest_dir(plugin: object) -> Path | None:
    """The folder of a ``conftest.py`` plugin, or ``None`` for any other plugin."""
    file = getattr(plugin, "__file__", None) if isinstance(plugin, types.ModuleType) else None
    return Path(file).parent if file and Path(file).name == "conftest.py" else None


_OWN = str(Path(__file__).resolve().parents[1])


def _raised(hook: str, exc: Exception) -> HookError:
    """A :class:`~pytest_ralph.loop.hooks.HookError` saying that an implementation of
    ``hook`` raised ``exc``, and where (the innermost frame outside pytest-ralph)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<")
              and not str(Path(f.filename).resolve()).startswith(_OWN)] or \
        traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames \
        else ""
    return HookError(f"a {hook} implementation raised {type(exc).__name__}: {exc}{where}")


def _check_factory(config: pytest.Config) -> Callable[..., Check]:
    """:func:`pytest_ralph.checks.registry.make_check` with this session's settings filled in."""
    from ..checks.pytest_kind import pin_args
    from ..checks.registry import make_check

    settings = get_settings(config)
    return functools.partial(
        make_check, rootdir=config.rootpath, strict=settings.strict,
        pin=pin_args(config.rootpath, config.inipath),
        default_timeout=settings.check_timeout, text_checks=dict(settings.checks),
        verifier=settings.verifier,
        verifier_source=settings.sources.get("verifier", "ini ralph_verifier"))


#: The session's :func:`_check_factory`, made on first use.
_CHECK_FACTORY = pytest.StashKey["Callable[..., Check]"]()


class BuiltinHooks:
    """pytest-ralph's own behaviour, as ``trylast`` hook implementations."""

    @pytest.hookimpl(trylast=True)
    def pytest_ralph_make_check(self, criterion: Criterion, story: Story, prd_path: Path,
                                config: pytest.Config) -> Check:
        """The built-in check kinds (:func:`pytest_ralph.checks.registry.make_check`) with the
        session's settings."""
        factory = config.stash.get(_CHECK_FACTORY, None)
        if factory is None:
            factory = config.stash[_CHECK_FACTORY] = _check_factory(config)
        return factory(criterion, story, prd=prd_path)

    @pytest.hookimpl(trylast=True)
    def pytest_ralph_build_prompt(self, context: PromptContext, template: str) -> str:
        """The template filled in by :func:`pytest_ralph.loop.prompt.build_prompt`."""
        return build_prompt(template, context)

    @pytest.hookimpl(trylast=True)
    def pytest_ralph_agent_command(self, argv: list[str]) -> list[str]:
        """The configured agent argv, unchanged."""
        return argv

    @pytest.hookimpl(trylast=True)
    def pytest_ralph_fingerprint(self, result: CriterionResult) -> str:
        """The failure message, normalized
        (:func:`pytest_ralph.checks.fingerprint.normalize_failure`)."""
        return normalize_failure(result.message)

    @pytest.hookimpl(trylast=True)
    def pytest_ralph_should_stop(self, context: StopContext) -> StopDecision:
        """Agent-error limit, all stories blocked, identical-failure circuit breaker
        (:func:`pytest_ralph.loop.hooks.decide_stop`)."""
        return decide_stop(context)


class ConfigHooks(LoopHooks):
    """The loop's extension points, each asking its ``pytest_ralph_*`` hook.

    Args:
        config: the pytest config whose plugin manager holds the hooks.

    Raises (from each method):
        HookError: an implementation raised, or returned a value of the wrong type.
        PRDError: a ``pytest_ralph_prd_loaded`` implementation refused the PRD.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.hook = config.hook
        #: The PRD's folder once the PRD is loaded: conftest.py files elsewhere do not apply.
        self.scope: Path | None = None
        self._callers: dict[str, Any] = {}

    def _caller(self, name: str) -> Any:
        """The hook ``name`` as the PRD's folder sees it: every plugin, and the conftest.py
        files of that folder and its parents (as pytest scopes conftest hooks by folder)."""
        if self.scope is None:
            return getattr(self.hook, name)
        if name not in self._callers:  # once per hook: the fingerprint hook is called often
            pm = self.config.pluginmanager
            remove = [p for p in pm.get_plugins() if (d := _conftest_dir(p)) is not None
                      and not self.scope.is_relative_to(d)]
            self._callers[name] = (pm.subset_hook_caller(name, remove) if remove
                                   else getattr(self.hook, name))
        return self._callers[name]

    def _call(self, name: str, **kwargs: Any) -> Any:
        """Call the hook ``name`` with ``kwargs`` and the config.

        Raises:
            HookError: an implementation raised (a :class:`~pytest_ralph.prd.load.PRDError` from
                ``pytest_ralph_prd_loaded`` passes through).
        """
        from ..prd.errors import PRDError

        try:
            return self._caller(name)(**kwargs, config=self.config)
        except PRDError:
            raise
        except Exception as exc:
            raise _raised(name, exc) from exc

    def prd_loaded(self, prd: PRD) -> None:
        """``pytest_ralph_prd_loaded``; from now on the hooks are those of the PRD's folder.

        Raises:
            LoopUsageError: a conftest.py of the PRD's folder or a parent has a misspelt
                ``pytest_ralph_*`` hook.
        """
        self.scope = prd.path.resolve().parent
        self._callers.clear()
        unknown = scan_conftests(self.scope, self.config.rootpath)
        if unknown:
            from ..loop.records import LoopUsageError
            from .hookspecs import HOOK_NAMES

            raise LoopUsageError(f"unknown hook {'; '.join(unknown)}: expected one of "
                                 f"{', '.join(HOOK_NAMES)} (see docs/hooks.md)")
        self._call("pytest_ralph_prd_loaded", prd=prd)

    def build_prompt(self, template: str, context: PromptContext) -> str:
        """``pytest_ralph_build_prompt``."""
        text = self._call("pytest_ralph_build_prompt", context=context, template=template)
        _expect("pytest_ralph_build_prompt", text, "a str", isinstance(text, str))
        return str(text)

    def agent_command(self, argv: list[str], iteration: int, story: Story | None) -> list[str]:
        """``pytest_ralph_agent_command``."""
        out = self._call("pytest_ralph_agent_command", argv=argv, iteration=iteration,
                         story=story)
        _expect("pytest_ralph_agent_command", out, "a non-empty list of str",
                isinstance(out, (list, tuple)) and bool(out)
                and all(isinstance(a, str) for a in out))
        return list(out)

    def before_iteration(self, iteration: int, story: Story | None, prompt: str,
                         argv: list[str]) -> None:
        """``pytest_ralph_before_iteration``."""
        self._call("pytest_ralph_before_iteration", iteration=iteration, story=story,
                   prompt=prompt, argv=argv)

    def after_iteration(self, iteration: int, results: CheckResults, agent: AgentRun,
                        story: str) -> None:
        """``pytest_ralph_after_iteration``."""
        self._call("pytest_ralph_after_iteration", iteration=iteration, results=results,
                   agent=agent, story=story)

    def failure_fingerprint(self, result: CriterionResult) -> str:
        """``pytest_ralph_fingerprint``."""
        text = self._call("pytest_ralph_fingerprint", result=result)
        _expect("pytest_ralph_fingerprint", text, "a str", isinstance(text, str))
        return str(text)

    def should_stop(self, context: StopContext) -> StopDecision:
        """``pytest_ralph_should_stop``."""
        decision = self._call("pytest_ralph_should_stop", context=context)
        _expect("pytest_ralph_should_stop", decision, "a pytest_ralph.StopDecision",
                isinstance(decision, StopDecision))
        assert isinstance(decision, StopDecision)
        return decision
