"""``pytest --ralph-doctor --ralph-agent NAME``: check a preset against the CLI installed here.

A preset (:mod:`pytest_ralph.agents.presets`) was written for, and proven with, one release of
its CLI (:data:`pytest_ralph.agents.proven.PROVEN`); CLIs rename and drop flags between
releases. This check, in order, prints one line per finding in the doctor's convention
(``ok:``, ``problem: ... (fix)``, ``warning:``, ``skipped:``; see
:mod:`pytest_ralph.commands.doctor`):

1. an unverified preset (:data:`pytest_ralph.agents.proven.UNVERIFIED`: amp, goose,
   cursor-agent) says so, with what is known of it and what was not checked (a warning);
2. the preset's executable is on ``PATH`` (a problem with the install command when not;
   the other checks are then skipped);
3. ``EXE --version``: the version it prints, compared with the proven release (newer or
   older is a warning, never a problem);
4. ``EXE --help``, or the subcommand's help when the flags start with one (``codex exec
   --help``, ``opencode run --help``, ``goose run --help``): every flag of the argv the loop
   would run (the preset's, or ini ``ralph_agent_flags``) is listed there, and a value the
   help restricts to a list of choices (yargs ``[choices: ...]``, commander ``(choices:
   ...)``, clap ``[possible values: ...]``, argparse ``{a,b}``) is one of them. Each flag
   missing is a problem with a fix hint; a flag known to work though the help omits it
   (:data:`HIDDEN_FLAGS`) is a warning.

The exit code is 1 when any line is a problem, else 0. Each CLI call runs in its own process
group with an empty stdin, ``NO_COLOR=1`` and a timeout (:data:`CLI_TIMEOUT`), killed with its
children when it runs over. The help formats were read from codex-cli 0.171.0 (clap),
gemini 0.61.0 and opencode 1.18.33 (yargs) and aider 0.86.2 (argparse).

Imports only the standard library and pytest-ralph modules that do not import pytest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..agents.presets import PRESETS, Preset, resolve_agent
from ..agents.proven import PROVEN, UNVERIFIED
from ..agents.run import AgentCommandError
from ..util.process import run_in_group
from ..util.text import plural
from .doctor import DoctorReport

__all__ = ["CLI_TIMEOUT", "HIDDEN_FLAGS", "AgentDoctorUsage", "CliOutput", "agent_doctor",
           "flags_in", "help_argv", "missing_flags", "parse_version", "run_cli"]

#: Seconds one ``--version`` or ``--help`` call may take before its process group is killed.
CLI_TIMEOUT = 20.0

#: Flags that work though the CLI's ``--help`` does not list them: preset name -> flag ->
#: what was observed (a warning instead of a problem).
HIDDEN_FLAGS: dict[str, dict[str, str]] = {
    "amp": {"--dangerously-allow-all": "it works on @sourcegraph/amp though its --help does "
                                       "not list it (observed for issue 23)"},
}

# ANSI escape sequences (colours, cursor moves) some CLIs print despite NO_COLOR.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
# A version number: 0.61.0, 2.1.328, 1.18.33-beta.1.
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+)(?:[-+][0-9A-Za-z.-]+)?(?![\w.])")
# Characters of a failing call's output shown in a problem line.
_TAIL_CHARS = 300


class AgentDoctorUsage(ValueError):
    """``--ralph-agent`` names no preset (a command line, or a name that does not exist), or
    ``ralph_agent_flags`` cannot be split; the message says what is expected."""


@dataclass(frozen=True)
class CliOutput:
    """One run of a CLI by :func:`run_cli`.

    Attributes:
        returncode: the exit status (negative: killed by that signal); ``None`` when it timed
            out and was killed.
        text: stdout and stderr, interleaved, decoded as UTF-8 (bad bytes replaced), ANSI
            escape sequences removed.
        seconds: wall-clock time it took, in seconds.
    """

    returncode: int | None
    text: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        """It ran longer than its timeout and was killed."""
        return self.returncode is None


def run_cli(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
            timeout: float = CLI_TIMEOUT) -> CliOutput:
    """Run ``argv`` (a CLI's ``--version`` or ``--help``) in its own process group.

    Args:
        argv: the command, its executable an absolute path.
        cwd: its working folder.
        env: its environment; ``NO_COLOR=1`` is added.
        timeout: seconds before its whole process group is killed.

    Returns:
        A :class:`CliOutput`.

    Raises:
        OSError: the executable cannot be started.
    """
    with tempfile.TemporaryFile() as out:
        done = run_in_group(list(argv), cwd=cwd, output=out, timeout=timeout,
                            env={**env, "NO_COLOR": "1"}, grace=0.5)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return CliOutput(done.returncode, _ANSI.sub("", text), done.duration)


def parse_version(text: str) -> str | None:
    """The first version number in a ``--version`` output, e.g. ``"0.171.0"`` from
    ``codex-cli 0.171.0``, ``"2.1.328"`` from ``2.1.328 (Claude Code)``; ``None`` if none."""
    found = _VERSION.search(text)
    return found.group(1) if found else None


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def help_argv(executable: str, flags: Sequence[str]) -> list[str]:
    """The command whose output lists ``flags``: ``[executable, SUB, "--help"]`` when the
    flags start with a subcommand (a first word that is no option and no placeholder, as
    ``exec`` in ``codex exec --json ...``), else ``[executable, "--help"]``."""
    first = flags[0] if flags else ""
    if first and not first.startswith("-") and "{" not in first:
        return [executable, first, "--help"]
    return [executable, "--help"]


def flags_in(flags: Sequence[str]) -> list[tuple[str, str | None]]:
    """The options of an argv tail, each with the value written after it.

    Args:
        flags: the arguments after the executable (``["exec", "--json", "-"]``).

    Returns:
        ``(option, value)`` pairs in order, each option once: ``--name=value`` gives
        ``("--name", "value")``; ``--name`` followed by a word that is no option gives that
        word as its value (it may be a positional: a value only counts where the help lists
        choices); ``-`` and ``--`` are not options.
    """
    out: dict[str, str | None] = {}
    for i, arg in enumerate(flags):
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            after = flags[i + 1] if i + 1 < len(flags) else ""
            value = after if after and not after.startswith("-") else ""
        out.setdefault(name, value or None)
    return list(out.items())


def _token(flag: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])")


def _entry(help_text: str, flag: str) -> str:
    """The help's entry of ``flag``: the option line that names it and the indented lines
    after it, up to the next option or section; ``""`` when no option line names it."""
    lines = help_text.splitlines()
    token = _token(flag)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("-") and token.search(line):
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or (
                    lines[end][0].isspace() and not lines[end].lstrip().startswith("-"))):
                end += 1
            return "\n".join(lines[i:end])
    return ""


def _choices(entry: str, flag: str) -> list[str] | None:
    """The values an option's help entry allows, or ``None`` when it lists none."""
    found = re.search(r"\[choices:\s*([^\]]*)\]", entry)
    if found:
        return [c.strip().strip("\"'") for c in found.group(1).split(",") if c.strip()]
    found = re.search(r"\(choices:\s*([^)]*)\)", entry)  # commander (Claude Code)
    if found:
        return [c.strip().strip("\"'") for c in found.group(1).split(",") if c.strip()]
    found = re.search(r"\[possible values:\s*([^\]]*)\]", entry)
    if found:
        return [c.strip() for c in found.group(1).split(",") if c.strip()]
    found = re.search(re.escape(flag) + r"[ =]\{([^}]*)\}", entry)
    if found:
        return [c.strip() for c in found.group(1).split(",") if c.strip()]
    return None


def missing_flags(help_text: str, flags: Sequence[str]) -> list[tuple[str, str]]:
    """What of ``flags`` the help text does not show.

    Args:
        help_text: the CLI's ``--help`` output.
        flags: the arguments after the executable.

    Returns:
        ``(flag as written, why)`` pairs: an option whose name appears nowhere in the help
        as an option word (``"not in the help"``), or whose value is not among the choices
        its entry lists (``"the help lists the values a, b"``).
    """
    out: list[tuple[str, str]] = []
    for name, value in flags_in(flags):
        if not _token(name).search(help_text):
            out.append((name, "not in the help"))
            continue
        allowed = _choices(_entry(help_text, name), name)
        if value is not None and allowed and value not in allowed:
            out.append((f"{name} {value}", f"the help lists the values {', '.join(allowed)}"))
    return out


def _resolve(name: str, flags: str | None) -> tuple[Preset, list[str]]:
    """The preset called ``name`` and the argv the loop would run for it.

    Raises:
        AgentDoctorUsage: no such preset, or unsplittable ``flags``.
    """
    preset = PRESETS.get(name.strip().lower())
    names = ", ".join(PRESETS)
    if preset is None:
        what = "a command line" if len(name.split()) > 1 or os.sep in name else "no preset"
        raise AgentDoctorUsage(
            f"--ralph-doctor --ralph-agent takes a preset name ({names}); {name!r} is {what}. "
            "The drift check compares a preset's flags with its CLI's --help; for a command "
            "line of your own, run its --help by hand")
    try:
        argv, _ = resolve_agent(preset.name, flags)
    except AgentCommandError as exc:
        raise AgentDoctorUsage(str(exc)) from None
    return preset, argv


def agent_doctor(name: str, *, rootdir: Path, flags: str | None = None,
                 flags_source: str = "ini ralph_agent_flags",
                 env: Mapping[str, str] | None = None,
                 timeout: float = CLI_TIMEOUT) -> tuple[int, str]:
    """Check preset ``name`` against the CLI on ``PATH`` (see the module docstring).

    Args:
        name: the preset's name, any case (``"gemini"``).
        rootdir: the project folder: the CLI calls run there.
        flags: ``ralph_agent_flags``: a command-line fragment that replaces the preset's
            flags, or ``None``/``""`` for the preset's own.
        flags_source: where ``flags`` came from, for the fix hints (``"ini ralph_agent_flags
            (pytest.ini)"``).
        env: the environment whose ``PATH`` is searched and that the CLI calls get
            (default: this process's).
        timeout: seconds each CLI call may take (default :data:`CLI_TIMEOUT`).

    Returns:
        ``(exit code, text)``: 1 when any line is a problem, else 0; the text is a header
        line, one line per check and a summary line.

    Raises:
        AgentDoctorUsage: ``name`` is no preset, or ``flags`` cannot be split.
    """
    preset, argv = _resolve(name, flags)
    environ = dict(os.environ if env is None else env)
    rep = DoctorReport()
    rep.lines.append(f"pytest-ralph doctor: agent preset {preset.name}, argv {json.dumps(argv)}")
    pin = PROVEN.get(preset.name)
    if pin is None:
        rep.warning(f"the {preset.name} preset is unverified: {UNVERIFIED.get(preset.name, '')} "
                    "Not checked: its output reader, exit codes and error and rate-limit "
                    "records, which no run of the real CLI has shown; the checks below cover "
                    "only what its --version and --help show")
    found = shutil.which(preset.executable, path=environ.get("PATH", os.defpath))
    if found is None:
        how = (f"install the proven release: `{pin.install_command}`" if pin else
               f"see {preset.docs[0]} for how to install it")
        rep.problem(f"`{preset.executable}` is not on PATH, so `pytest --ralph --ralph-agent "
                    f"{preset.name}` cannot start it", how)
        rep.skipped(f"its version and flags ({preset.executable} is not installed)")
        return _summary(rep, preset)
    rep.ok(f"`{preset.executable}` is on PATH: {found}")
    _check_version(rep, preset, found, rootdir, environ, timeout)
    _check_flags(rep, preset, found, argv[1:], bool(flags), flags_source, rootdir, environ,
                 timeout)
    return _summary(rep, preset)


def _summary(rep: DoctorReport, preset: Preset) -> tuple[int, str]:
    if rep.problems:
        rep.lines.append(f"pytest-ralph: {plural(rep.problems, 'problem')} found; `pytest "
                         f"--ralph --ralph-agent {preset.name}` fails or misreads the CLI "
                         "until they are fixed")
        return 1, "\n".join(rep.lines)
    rep.lines.append(f"pytest-ralph: all {plural(rep.checks, 'check')} ok")
    return 0, "\n".join(rep.lines)


def _call(rep: DoctorReport, argv: list[str], rootdir: Path, env: Mapping[str, str],
          timeout: float) -> CliOutput | None:
    """Run ``argv``; a start failure or a timeout is a problem line and gives ``None``."""
    shown = " ".join([Path(argv[0]).name, *argv[1:]])
    try:
        run = run_cli(argv, cwd=rootdir, env=env, timeout=timeout)
    except OSError as exc:
        rep.problem(f"cannot run `{shown}`: {exc.strerror or exc}",
                    "check that the file is an executable program")
        return None
    if run.timed_out:
        rep.problem(f"`{shown}` did not finish within {timeout:g} s and was killed",
                    "run it by hand to see where it waits (a login prompt, an update)")
        return None
    return run


def _check_version(rep: DoctorReport, preset: Preset, exe: str, rootdir: Path,
                   env: Mapping[str, str], timeout: float) -> None:
    """Check 3: ``EXE --version`` against the proven release."""
    run = _call(rep, [exe, "--version"], rootdir, env, timeout)
    if run is None:
        return
    version = parse_version(run.text) if run.returncode == 0 else None
    if version is None:
        rep.warning(f"`{preset.executable} --version` exited {run.returncode} without a "
                    f"version number: {_clip(run.text)}")
        return
    pin = PROVEN.get(preset.name)
    if pin is None:
        rep.ok(f"`{preset.executable} --version`: {version} (no release is proven for this "
               "preset)")
        return
    if _key(version) == _key(pin.version):
        rep.ok(f"`{preset.executable} --version`: {version}, the release the {preset.name} "
               "preset was proven with")
        return
    rep.ok(f"`{preset.executable} --version`: {version}")
    side = "newer" if _key(version) > _key(pin.version) else "older"
    rep.warning(f"{preset.executable} {version} is {side} than {pin.version}, the release the "
                f"{preset.name} preset was proven with: its flags are checked below, but its "
                f"output and error records may differ (`{pin.install_command}` installs the "
                "proven release)")


def _check_flags(rep: DoctorReport, preset: Preset, exe: str, flags: Sequence[str],
                 overridden: bool, source: str, rootdir: Path, env: Mapping[str, str],
                 timeout: float) -> None:
    """Check 4: every flag of the argv against the CLI's (or its subcommand's) help."""
    argv = help_argv(exe, flags)
    shown = " ".join([preset.executable, *argv[1:]])
    run = _call(rep, argv, rootdir, env, timeout)
    if run is None:
        rep.skipped(f"the preset's flags (`{shown}` gave no help to read)")
        return
    if run.returncode != 0 or not run.text.strip():
        said = f": {_clip(run.text)}" if run.text.strip() else " and printed nothing"
        rep.problem(f"`{shown}` exited {run.returncode}{said}",
                    f"run `{shown}` by hand; a subcommand the CLI no longer has means the "
                    "preset needs new flags (ini ralph_agent_flags)")
        rep.skipped("the preset's flags (no help to read)")
        return
    names = [name for name, _ in flags_in(flags)]
    missing = missing_flags(run.text, flags)
    hidden = HIDDEN_FLAGS.get(preset.name, {}) if not overridden else {}
    pin = PROVEN.get(preset.name)
    for flag, why in missing:
        if flag in hidden and why == "not in the help":
            rep.warning(f"`{flag}` is not in `{shown}`, but {hidden[flag]}")
            continue
        if overridden:
            fix = f"change ralph_agent_flags (from {source}) to flags `{shown}` lists"
        elif pin is not None:
            fix = (f"the preset was proven with {preset.executable} {pin.version}: "
                   f"`{pin.install_command}` installs it, or set ini ralph_agent_flags to "
                   "flags this release accepts")
        else:
            fix = ("set ini ralph_agent_flags to flags this release accepts (the preset is "
                   "unverified)")
        values = why.removeprefix("the help lists the values ")
        said = (f"is not in `{shown}`: the CLI may have renamed or dropped it"
                if why == "not in the help" else f"is not allowed: `{shown}` lists only {values}")
        rep.problem(f"`{flag}` {said}", fix)
    bad = {flag.split(" ")[0] for flag, _ in missing}
    good = [n for n in names if n not in bad]
    whose = "ralph_agent_flags" if overridden else f"the {preset.name} preset's"
    chosen = [f"{name} {value}" for name, value in flags_in(flags)
              if name not in bad and value is not None
              and _choices(_entry(run.text, name), name)]
    among = f" (values among the listed choices: {', '.join(chosen)})" if chosen else ""
    if not missing:
        rep.ok(f"every flag of {whose} argv is in `{shown}`: {', '.join(names) or 'none'}"
               f"{among}")
    elif good:
        rep.ok(f"in `{shown}`: {', '.join(good)}{among}")


def _clip(text: str) -> str:
    """The end of a CLI's output, on one line, as a repr."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= _TAIL_CHARS else "..." + flat[-_TAIL_CHARS:])
