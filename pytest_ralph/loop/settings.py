"""Loop settings, resolved once: command line > environment > ini > default.

Every setting has an ini name (``ralph_<name>``) and an environment variable
(``PYTEST_RALPH_<NAME>``); most have a command-line option (``--ralph-<name>``).
A bad value raises :class:`SettingsError` naming where it came from.

This module does not import pytest; :mod:`pytest_ralph.plugin` feeds it the option
values, the environment and the ini values.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks.base import DEFAULT_CHECK_TIMEOUT
from ..prd.load import MAX_PRD_BYTES
from ..prd.model import fold_text
from ..sandbox.bwrap import SANDBOX_MODES


class SettingsError(ValueError):
    """A setting has a bad value; the message names its source and what was expected."""


@dataclass(frozen=True)
class Spec:
    """How one setting is read.

    Attributes:
        name: the setting's name (``max_iterations``); ini ``ralph_<name>``, environment
            ``PYTEST_RALPH_<NAME>``.
        help: one line for ``pytest --help``.
        kind: ``str``, ``path``, ``paths`` (one path per ini line; separated by
            ``os.pathsep`` in the environment), ``int``, ``float``, ``bool``, ``list``,
            ``choice`` (one of ``choices``), ``mapping`` (``text = command`` lines) or
            ``workers`` (an integer from ``low`` to ``high``, or :data:`AUTO_WORKERS`).
        default: the value when no source sets it.
        cli: the command-line option, or ``""`` for ini/environment only.
        low, high: inclusive bounds of a number (``low`` exclusive for ``float``).
        metavar: the option's value name in ``--help`` ("" for the kind's default).
        choices: the values of a ``choice`` setting.
        ini_allowed: whether a configuration file may set it; ``False`` for a decision a
            person takes for one run (``accept_changes``): the agent can write the project's
            configuration file, so it could take it for the next run.
        zero: a ``float`` may also be 0 (which turns the setting off), below ``low``.
    """

    name: str
    help: str
    kind: str
    default: Any = None
    cli: str = ""
    low: float | None = None
    high: float | None = None
    metavar: str = ""
    choices: tuple[str, ...] = ()
    ini_allowed: bool = True
    zero: bool = False

    @property
    def ini(self) -> str:
        """The ini key."""
        return f"ralph_{self.name}"

    @property
    def env(self) -> str:
        """The environment variable."""
        return f"PYTEST_RALPH_{self.name.upper()}"

    @property
    def dest(self) -> str:
        """The argparse destination of the command-line option."""
        return self.ini


#: Values of ``gate``.
GATE_MODES = ("all", "claims")

SPECS: tuple[Spec, ...] = (
    Spec("prd", "PRD file to work on; unset: the first prd.json, prd.jsonc, prd.yaml or "
         "prd.yml in the rootdir, then .ralph/, then scripts/ralph/.", "path", None,
         "--ralph-prd"),
    Spec("agent", "Agent preset (claude, codex, aider, gemini, opencode, amp, goose, "
         "cursor-agent) or command line; {prompt_file} is replaced by the prompt file.", "str",
         None, "--ralph-agent"),
    Spec("agent_flags", "Flags that replace an agent preset's own flags (a command line "
         "after the executable; {prompt_file} allowed).", "str", None),
    Spec("max_iterations", "Stop after this many iterations (1..10000); with "
         "--ralph-parallel, per story (each lane's own count).", "int", 5,
         "--ralph-max-iterations", 1, 10000),
    Spec("breaker", "Trip the circuit breaker after this many identical failures in a row.",
         "int", 3, "--ralph-breaker", 1, 1000),
    Spec("agent_timeout", "Seconds before an agent run is killed (whole process group).",
         "float", 1800.0, "--ralph-agent-timeout", 0, 7 * 24 * 3600),
    Spec("budget", "Wall-clock seconds this run may take (agent runs, checks and rate-limit "
         "pauses); it stops with exit 1 when they are spent.", "float", None, "--ralph-budget",
         0, 365 * 24 * 3600),
    Spec("max_cost", "Stop (exit 1) once the agent runs of this run have cost this many US "
         "dollars, as the agent reports it (claude does).", "float", None, "--ralph-max-cost",
         0, 1e9, metavar="USD"),
    Spec("max_pause", "Longest pause, in seconds, after a rate-limited agent run.", "float",
         3600.0, "", 0, 7 * 24 * 3600),
    Spec("rate_limit_backoff", "Seconds to pause after a rate-limited agent run that states "
         "no reset time (capped by ralph_max_pause).", "float", 60.0, "", 0, 7 * 24 * 3600),
    Spec("story_max_iterations", "Block a story after this many iterations worked on it "
         "(the loop moves to the next story).", "int", None, "", 1, 10000),
    Spec("escalate", "Command run (through the shell) when a story is blocked or the "
         "breaker trips; it gets the state dump as JSON on stdin.", "str", None),
    Spec("parallel", "Work up to N stories at once, each in its own git worktree and branch, "
         "merged through a queue that runs the criteria (1: one story at a time in the "
         "project itself).", "int", 1, "--ralph-parallel", 1, 64, metavar="N"),
    Spec("story", "Limit the loop and the gate to this story id (repeatable).", "list", (),
         "--ralph-story"),
    Spec("strict", "Claimed text criteria fail instead of passing on the story's claim.", "bool",
         False, "--ralph-strict"),
    Spec("allow_criteria_edits", "Let the agent change the criteria and the tests, schemas "
         "and modules that check them without failing them (the oracle-integrity guard only "
         "reports the changes).", "bool", False, "--ralph-allow-criteria-edits"),
    Spec("accept_changes", "Start a new run even when the criteria or the files that judge "
         "them differ from the last run's verified snapshot (the changes become the new "
         "reference). Command line or environment only.", "bool", False,
         "--ralph-accept-changes", ini_allowed=False),
    Spec("sandbox", "Confine each agent run and each check phase with bubblewrap: 'auto' "
         "(where bwrap works), 'required' (its absence is a usage error) or 'off'.", "choice",
         "auto", "--ralph-sandbox", choices=SANDBOX_MODES),
    Spec("sandbox_writable", "More paths the sandboxed agent and check phases may write, one "
         "per line (os.pathsep between them in the environment).", "paths", ()),
    Spec("dir", "State folder, relative to the rootdir.", "path", ".pytest_ralph"),
    Spec("prompt", "Prompt template file.", "path", None),
    Spec("check_timeout", "Default seconds a `run` criterion may take.", "float",
         DEFAULT_CHECK_TIMEOUT, "", 0, 7 * 24 * 3600),
    Spec("check_batch", "Run the `pytest` criteria that share their options in one child "
         "pytest (false: one child each).", "bool", True),
    Spec("agent_errors", "End the run (exit 7) after this many agent errors in a row.", "int", 3,
         "", 1, 1000),
    Spec("max_prd_bytes", "Refuse PRD files larger than this many bytes.", "int", MAX_PRD_BYTES,
         "", 1, 2**40),
    Spec("gate", "What fails the gate: 'all' (any failing criterion) or 'claims' (only the "
         "criteria of stories that say passes: true).", "choice", "all", "--ralph-gate",
         choices=GATE_MODES),
    Spec("checks", "Commands for text criteria, one 'criterion text = shell command' per line "
         "(text matched ignoring case and spacing).", "mapping", ()),
    Spec("verifier", "Judge command for text criteria that ralph_checks does not map: gets "
         "the criterion as JSON on stdin, answers {\"verdict\": \"pass\"|\"fail\", "
         "\"evidence\": ...} on stdout.", "str", None),
    Spec("promise", "Completion promise for the Claude Code driver: besides every criterion "
         "passing, the session's final message must hold the line <promise>TEXT</promise>.",
         "str", None, "--ralph-promise", metavar="TEXT"),
    Spec("workers", "Run each check phase on N pytest-xdist workers (`-n N`), or 'auto' "
         "(xdist's -n auto: one per CPU core); unset: in one process. Needs pytest-xdist.",
         "workers", None, "--ralph-workers", 1, 256, metavar="N|auto"),
    Spec("heartbeat", "Without a terminal: print a heartbeat line at least every this many "
         "seconds while an agent or a check phase runs (0: none; -q: none).", "float", 30.0,
         "--ralph-heartbeat", 0, 24 * 3600, zero=True),
    Spec("echo", "Stream the agent's own output (secrets redacted) to the console as it "
         "comes.", "bool", False, "--ralph-echo"),
)

SPEC_BY_NAME = {s.name: s for s in SPECS}

#: The ``workers`` value that lets pytest-xdist pick the number (``-n auto``).
AUTO_WORKERS = "auto"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    """The effective loop settings (see :data:`SPECS` for meanings and defaults).

    Paths are absolute. ``sources`` maps each setting name to where its value came from.
    """

    prd: Path | None
    agent: str | None
    agent_flags: str | None
    max_iterations: int
    breaker: int
    agent_timeout: float
    budget: float | None
    max_cost: float | None
    max_pause: float
    rate_limit_backoff: float
    story_max_iterations: int | None
    escalate: str | None
    parallel: int
    story: tuple[str, ...]
    strict: bool
    allow_criteria_edits: bool
    accept_changes: bool
    sandbox: str
    sandbox_writable: tuple[Path, ...]
    dir: Path
    prompt: Path | None
    check_timeout: float
    check_batch: bool
    agent_errors: int
    max_prd_bytes: int
    gate: str
    checks: tuple[tuple[str, str], ...]
    verifier: str | None
    promise: str | None
    workers: int | str | None
    heartbeat: float
    echo: bool
    sources: dict[str, str] = field(default_factory=dict)


def resolve(
    *,
    cli: Mapping[str, Any],
    env: Mapping[str, str],
    ini: Callable[[str], Any],
    ini_file: str,
    invocation_dir: Path,
    rootdir: Path,
    overridden: Collection[str] = (),
) -> Settings:
    """Resolve every setting.

    Args:
        cli: command-line values by setting name (``None`` or missing: not given).
        env: the environment.
        ini: returns the raw ini value of an ini key, ``None``/``""``/``[]`` when unset.
        ini_file: name of the configuration file, for messages.
        invocation_dir: base of relative paths given on the command line or environment.
        rootdir: base of relative paths given in ini, and of ``dir``.
        overridden: the ini keys given with pytest's ``-o KEY=VALUE`` (their source is
            ``-o KEY``, not the ini file).

    Raises:
        SettingsError: a value is malformed or out of range; the message names its source.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in SPECS:
        raw: Any = None
        source = "default"
        base = rootdir
        if spec.cli and _given(cli.get(spec.name)):
            raw, source, base = cli[spec.name], spec.cli, invocation_dir
        elif env.get(spec.env, "").strip():
            raw, source, base = env[spec.env], f"environment variable {spec.env}", invocation_dir
        elif spec.ini_allowed:
            ini_raw = ini(spec.ini)
            if ini_raw not in (None, "", []):
                raw = ini_raw
                source = (f"-o {spec.ini}" if spec.ini in overridden else
                          f"ini {spec.ini} ({ini_file})")
        if spec.name == "dir":
            base = rootdir
        values[spec.name] = spec.default if raw is None else _convert(spec, raw, source, base)
        sources[spec.name] = source
    if values["dir"] is None:  # pragma: no cover - dir has a default
        values["dir"] = rootdir / ".pytest_ralph"
    values["dir"] = (rootdir / values["dir"]) if not Path(values["dir"]).is_absolute() else (
        Path(values["dir"]))
    return Settings(**values, sources=sources)


def from_person(settings: Settings, name: str) -> bool:
    """Whether the setting ``name`` is on and came from the command line or the environment,
    not from a configuration file (which the agent can write): a waiver of the guard counts
    only from there."""
    source = settings.sources.get(name, "default")
    return bool(getattr(settings, name)) and (source.startswith(("--", "environment")))


def to_json(settings: Settings) -> dict[str, Any]:
    """The settings as a JSON-ready dict by setting name (paths as text, tuples as lists), as
    the run history stores them."""
    out: dict[str, Any] = {}
    for spec in SPECS:
        value = getattr(settings, spec.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v
                     for v in value]
        out[spec.name] = value
    return out


def from_json(data: Mapping[str, Any], source: str) -> Settings:
    """Settings rebuilt from :func:`to_json` output (a run's stored settings). A setting
    missing from ``data`` (stored by an older version) takes its default.

    Args:
        data: setting name -> JSON value.
        source: where they came from, for :attr:`Settings.sources` (``"run 2026...
            armed settings"``).

    Raises:
        SettingsError: a value of the wrong type or out of range.
    """
    values: dict[str, Any] = {}
    for spec in SPECS:
        raw = data.get(spec.name)
        if raw is None or (spec.kind in ("list", "mapping", "paths") and not raw):
            values[spec.name] = spec.default
        elif spec.kind == "mapping":
            values[spec.name] = tuple((str(k), str(v)) for k, v in raw)
        elif spec.kind == "path":
            values[spec.name] = Path(str(raw))
        elif spec.kind == "paths":
            values[spec.name] = tuple(Path(str(x)) for x in raw)
        else:
            values[spec.name] = _convert(spec, raw, source, Path.cwd())
    if values["dir"] is None:
        raise SettingsError(f"dir from {source}: expected a path; got nothing")
    return Settings(**values, sources={spec.name: source for spec in SPECS})


def _given(value: Any) -> bool:
    """Whether a command-line value was given: not ``None``, an unset ``store_true`` flag
    (``False``) or an empty ``append`` list. ``0`` is a value (and refused where out of range)."""
    if value is None or value is False:
        return False
    return not (isinstance(value, (list, tuple)) and not value)


def _convert(spec: Spec, raw: Any, source: str, base: Path) -> Any:
    def bad(expected: str) -> SettingsError:
        return SettingsError(f"{spec.ini.replace('ralph_', '')} from {source}: expected "
                             f"{expected}; got {raw!r}")

    if spec.kind == "str":
        text = str(raw).strip()
        if not text:
            raise bad("a non-empty string")
        return text
    if spec.kind == "path":
        text = str(raw).strip()
        if not text:
            raise bad("a path")
        p = Path(text).expanduser()
        return p if p.is_absolute() else base / p
    if spec.kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise bad("true or false")
    if spec.kind == "choice":
        text = str(raw).strip().lower()
        if text not in spec.choices:
            raise bad(" or ".join(repr(m) for m in spec.choices))
        return text
    if spec.kind == "paths":
        items = raw if isinstance(raw, (list, tuple)) else (
            str(raw).split(os.pathsep) if source.startswith("environment") else
            str(raw).splitlines())
        out_paths: list[Path] = []
        for item in (str(x).strip() for x in items):
            if not item or item.startswith("#"):
                continue
            if "\0" in item:
                raise bad("paths without NUL characters")
            p = Path(item).expanduser()
            out_paths.append(p if p.is_absolute() else base / p)
        return tuple(dict.fromkeys(out_paths))
    if spec.kind == "workers":
        text = str(raw).strip().lower()
        if text == AUTO_WORKERS:
            return AUTO_WORKERS
        if isinstance(raw, bool) or not (text.isascii() and text.isdigit()) or not (
                (spec.low or 1) <= int(text) <= (spec.high or 1)):
            raise bad(f"a number of workers from {int(spec.low or 1)} to {int(spec.high or 1)}, "
                      f"or {AUTO_WORKERS!r}")
        return int(text)
    if spec.kind == "mapping":
        lines = raw if isinstance(raw, (list, tuple)) else str(raw).splitlines()
        pairs: dict[str, str] = {}
        for n, line in enumerate((str(x).strip() for x in lines), start=1):
            if not line or line.startswith("#"):
                continue
            sep = " = " if " = " in line else "="
            text, found, command = line.partition(sep)
            if not found or not text.strip() or not command.strip():
                raise SettingsError(f"{spec.name} from {source}, line {n}: expected "
                                    f"'criterion text = command'; got {line!r}")
            pairs[fold_text(text)] = command.strip()
        return tuple(pairs.items())
    if spec.kind == "list":
        # commas or whitespace separate ids, from every source alike (an ini list's lines
        # too: `ralph_story = US-1,US-2` is two stories, as PYTEST_RALPH_STORY=US-1,US-2 is)
        items = [part for item in (raw if isinstance(raw, (list, tuple)) else [raw])
                 for part in str(item).replace(",", " ").split()]
        out = tuple(dict.fromkeys(items))
        if not out:
            raise bad("one or more story ids")
        return out
    low, high = spec.low or 0, spec.high or 0
    unit = "US dollars" if spec.metavar == "USD" else "seconds"
    expected = (f"an integer from {int(low)} to {int(high)}" if spec.kind == "int" else
                f"a number of {unit} > {low:g} and <= {high:g}"
                + (" (or 0 for off)" if spec.zero else ""))
    try:
        number: float = int(str(raw).strip()) if spec.kind == "int" else float(str(raw).strip())
    except ValueError:
        raise bad(expected) from None
    too_low = number < low if spec.kind == "int" else not (
        number > low or (spec.zero and number == 0))  # NaN is too low
    if too_low or number > high:
        raise bad(expected)
    return number


def describe(settings: Settings, *, everything: bool = False) -> list[str]:
    """One ``name = value (source)`` line per setting that is not at its default, or with
    ``everything`` per setting (``(default)`` as the source of those at their default).

    Values are shown as a user would write them: ``true``/``false``, story ids separated by
    spaces, the number of ``checks`` lines; unset as what it means (``all stories``)."""
    out = []
    for spec in SPECS:
        source = settings.sources.get(spec.name, "default")
        if source != "default" or everything:
            value = getattr(settings, spec.name)
            shown = (_UNSET_MEANS.get(spec.name, "none") if value in (None, ()) else
                     shown_value(value))
            out.append(f"{spec.name} = {shown} ({source})")
    return out


def shown_value(value: Any) -> str:
    """A setting's value as text for the report header and ``--help``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        if not value:
            return "none"
        if isinstance(value[0], tuple):  # the checks mapping: (text, command) pairs
            return f"{len(value)} line{'s' if len(value) != 1 else ''}"
        return " ".join(str(v) for v in value)
    return str(value)


#: What an unset setting means, for ``--help``, where ``none`` would not say it.
_UNSET_MEANS = {
    "prd": "discovered",
    "agent": "none, --ralph needs one",
    "agent_flags": "the preset's own",
    "prompt": "the bundled prompt.md",
    "story": "all stories",
    "verifier": "none, text criteria pass on their story's claim",
    "workers": "none, one process",
}


def default_text(spec: Spec) -> str:
    """The ``(default: ...)`` that ends a setting's help in ``pytest --help``."""
    if spec.name in _UNSET_MEANS:
        return f"(default: {_UNSET_MEANS[spec.name]})"
    return f"(default: {shown_value(spec.default)})"
