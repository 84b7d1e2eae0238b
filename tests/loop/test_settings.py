"""Unit tests of pytest_ralph.loop.settings: precedence, sources, paths and bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.checks.base import DEFAULT_CHECK_TIMEOUT
from pytest_ralph.loop.settings import (
    SPEC_BY_NAME,
    SPECS,
    Settings,
    SettingsError,
    describe,
    resolve,
)
from pytest_ralph.prd.load import MAX_PRD_BYTES

INI_FILE = "pytest.ini"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(invocation dir, rootdir): two different folders, so the base of a path is visible."""
    root = tmp_path / "root"
    inv = root / "sub" / "here"
    inv.mkdir(parents=True)
    return inv, root


def _resolve(dirs: tuple[Path, Path], *, cli: dict[str, Any] | None = None,
             env: dict[str, str] | None = None, ini: dict[str, Any] | None = None) -> Settings:
    inv, root = dirs
    ini_values = ini or {}
    return resolve(cli=cli or {}, env=env or {}, ini=lambda key: ini_values.get(key),
                   ini_file=INI_FILE, invocation_dir=inv, rootdir=root)


def test_spec_names() -> None:
    spec = SPEC_BY_NAME["max_iterations"]
    assert spec.ini == "ralph_max_iterations"
    assert spec.env == "PYTEST_RALPH_MAX_ITERATIONS"
    assert spec.cli == "--ralph-max-iterations"
    assert SPEC_BY_NAME["agent"].env == "PYTEST_RALPH_AGENT"
    assert {s.name for s in SPECS} == set(Settings.__dataclass_fields__) - {"sources"}


def test_defaults(dirs: tuple[Path, Path]) -> None:
    _, root = dirs
    s = _resolve(dirs)
    assert s.prd is None
    assert s.agent is None
    assert s.max_iterations == 5
    assert s.breaker == 3
    assert s.agent_timeout == 1800.0
    assert s.story == ()
    assert s.strict is False
    assert s.dir == root / ".pytest_ralph"
    assert s.prompt is None
    assert s.check_timeout == DEFAULT_CHECK_TIMEOUT
    assert s.agent_errors == 3
    assert s.max_prd_bytes == MAX_PRD_BYTES
    assert set(s.sources.values()) == {"default"}
    assert set(s.sources) == {spec.name for spec in SPECS}


# name, (cli, env, ini) raw values, (cli, env, ini) expected values, default
PRECEDENCE = [
    ("max_iterations", ("7", "8", "9"), (7, 8, 9), 5),
    ("breaker", ("2", "4", "6"), (2, 4, 6), 3),
    ("agent_timeout", ("1.5", "2.5", "3.5"), (1.5, 2.5, 3.5), 1800.0),
    ("strict", (True, "yes", "true"), (True, True, True), False),
    ("story", (["US-1", "US-2"], "US-3,US-4", ["US-5"]),
     (("US-1", "US-2"), ("US-3", "US-4"), ("US-5",)), ()),
    ("agent", ("claude -p", "codex exec", "aider"), ("claude -p", "codex exec", "aider"), None),
]


@pytest.mark.parametrize(("name", "raw", "expected", "default"), PRECEDENCE,
                         ids=[p[0] for p in PRECEDENCE])
def test_precedence_cli_env_ini_default(dirs: tuple[Path, Path], name: str, raw: tuple[Any, ...],
                                        expected: tuple[Any, ...], default: Any) -> None:
    spec = SPEC_BY_NAME[name]
    cli_raw, env_raw, ini_raw = raw
    cli = {name: cli_raw}
    env = {spec.env: env_raw}
    ini = {spec.ini: ini_raw}
    every = _resolve(dirs, cli=cli, env=env, ini=ini)
    assert getattr(every, name) == expected[0]
    assert every.sources[name] == spec.cli
    no_cli = _resolve(dirs, env=env, ini=ini)
    assert getattr(no_cli, name) == expected[1]
    assert no_cli.sources[name] == f"environment variable {spec.env}"
    ini_only = _resolve(dirs, ini=ini)
    assert getattr(ini_only, name) == expected[2]
    assert ini_only.sources[name] == f"ini {spec.ini} ({INI_FILE})"
    nothing = _resolve(dirs)
    assert getattr(nothing, name) == default
    assert nothing.sources[name] == "default"


def test_precedence_for_paths(dirs: tuple[Path, Path]) -> None:
    inv, root = dirs
    cli = {"prd": "a/cli.json"}
    env = {"PYTEST_RALPH_PRD": "b/env.json"}
    ini = {"ralph_prd": "c/ini.json"}
    assert _resolve(dirs, cli=cli, env=env, ini=ini).prd == inv / "a" / "cli.json"
    assert _resolve(dirs, env=env, ini=ini).prd == inv / "b" / "env.json"
    assert _resolve(dirs, ini=ini).prd == root / "c" / "ini.json"
    assert _resolve(dirs).prd is None


def test_env_beats_ini_even_when_it_says_false(dirs: tuple[Path, Path]) -> None:
    s = _resolve(dirs, env={"PYTEST_RALPH_STRICT": "off"}, ini={"ralph_strict": "true"})
    assert s.strict is False
    assert s.sources["strict"] == "environment variable PYTEST_RALPH_STRICT"


@pytest.mark.parametrize("unset", [None, False, []])
def test_cli_values_that_mean_not_given(dirs: tuple[Path, Path], unset: Any) -> None:
    s = _resolve(dirs, cli={"strict": unset, "story": unset, "max_iterations": unset},
                 env={"PYTEST_RALPH_STRICT": "1", "PYTEST_RALPH_STORY": "US-9",
                      "PYTEST_RALPH_MAX_ITERATIONS": "2"})
    assert (s.strict, s.story, s.max_iterations) == (True, ("US-9",), 2)


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_blank_environment_variable_is_unset(dirs: tuple[Path, Path], blank: str) -> None:
    s = _resolve(dirs, env={"PYTEST_RALPH_MAX_ITERATIONS": blank},
                 ini={"ralph_max_iterations": "4"})
    assert s.max_iterations == 4
    assert s.sources["max_iterations"] == "ini ralph_max_iterations (pytest.ini)"


@pytest.mark.parametrize("unset", [None, "", []])
def test_empty_ini_value_is_unset(dirs: tuple[Path, Path], unset: Any) -> None:
    s = _resolve(dirs, ini={"ralph_max_iterations": unset, "ralph_story": unset})
    assert s.max_iterations == 5
    assert s.story == ()
    assert s.sources["max_iterations"] == "default"


def test_ini_only_settings_read_env_and_ini(dirs: tuple[Path, Path]) -> None:
    s = _resolve(dirs, env={"PYTEST_RALPH_CHECK_TIMEOUT": "12", "PYTEST_RALPH_AGENT_ERRORS": "5"},
                 ini={"ralph_max_prd_bytes": "1000", "ralph_check_timeout": "99"})
    assert s.check_timeout == 12.0
    assert s.agent_errors == 5
    assert s.max_prd_bytes == 1000
    assert s.sources["max_prd_bytes"] == "ini ralph_max_prd_bytes (pytest.ini)"
    # Settings without an option ignore a stray command-line value.
    assert _resolve(dirs, cli={"check_timeout": "1"}).check_timeout == DEFAULT_CHECK_TIMEOUT


@pytest.mark.parametrize(("raw", "value"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
def test_bool_words(dirs: tuple[Path, Path], raw: str, value: bool) -> None:
    assert _resolve(dirs, ini={"ralph_strict": raw}).strict is value


def test_list_splits_on_commas_and_blanks_and_drops_repeats(dirs: tuple[Path, Path]) -> None:
    s = _resolve(dirs, env={"PYTEST_RALPH_STORY": "US-2, US-1  US-2,,US-3"})
    assert s.story == ("US-2", "US-1", "US-3")
    s = _resolve(dirs, cli={"story": ["US-1", " US-1 ", "US-4"]})
    assert s.story == ("US-1", "US-4")
    # an ini list (pytest gives its lines) splits on commas too, as the environment does
    s = _resolve(dirs, ini={"ralph_story": ["US-1,US-2", "US-3"]})
    assert s.story == ("US-1", "US-2", "US-3")


def test_str_is_stripped(dirs: tuple[Path, Path]) -> None:
    assert _resolve(dirs, env={"PYTEST_RALPH_AGENT": "  claude -p  "}).agent == "claude -p"


def test_numbers_are_typed(dirs: tuple[Path, Path]) -> None:
    s = _resolve(dirs, cli={"max_iterations": " 10000 ", "agent_timeout": "1e1"})
    assert s.max_iterations == 10000
    assert type(s.max_iterations) is int
    assert s.agent_timeout == 10.0
    assert type(s.agent_timeout) is float


def test_bounds_are_inclusive(dirs: tuple[Path, Path]) -> None:
    assert _resolve(dirs, cli={"max_iterations": "1"}).max_iterations == 1
    assert _resolve(dirs, cli={"breaker": "1000"}).breaker == 1000
    assert _resolve(dirs, cli={"agent_timeout": "604800"}).agent_timeout == 604800.0
    assert _resolve(dirs, cli={"agent_timeout": "0.01"}).agent_timeout == 0.01


# -- paths -----------------------------------------------------------------------------------


def test_relative_paths_from_cli_and_env_are_against_the_invocation_dir(
    dirs: tuple[Path, Path]
) -> None:
    inv, _ = dirs
    assert _resolve(dirs, cli={"prd": "docs/prd.json"}).prd == inv / "docs" / "prd.json"
    assert _resolve(dirs, env={"PYTEST_RALPH_PROMPT": "p.md"}).prompt == inv / "p.md"


def test_relative_paths_from_ini_are_against_the_rootdir(dirs: tuple[Path, Path]) -> None:
    _, root = dirs
    s = _resolve(dirs, ini={"ralph_prd": "docs/prd.json", "ralph_prompt": "tpl/p.md"})
    assert s.prd == root / "docs" / "prd.json"
    assert s.prompt == root / "tpl" / "p.md"


@pytest.mark.parametrize("where", ["env", "ini"])
def test_dir_is_always_against_the_rootdir(dirs: tuple[Path, Path], where: str) -> None:
    _, root = dirs
    if where == "env":
        s = _resolve(dirs, env={"PYTEST_RALPH_DIR": "state/ralph"})
    else:
        s = _resolve(dirs, ini={"ralph_dir": "state/ralph"})
    assert s.dir == root / "state" / "ralph"


def test_absolute_paths_are_kept(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "prd.json"
    assert _resolve(dirs, cli={"prd": str(target)}).prd == target
    assert _resolve(dirs, ini={"ralph_dir": str(tmp_path / "st")}).dir == tmp_path / "st"


def test_home_is_expanded(dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                          tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _resolve(dirs, ini={"ralph_prd": "~/prd.json"}).prd == tmp_path / "home" / "prd.json"


def test_paths_are_absolute(dirs: tuple[Path, Path]) -> None:
    s = _resolve(dirs, cli={"prd": "x.json"}, ini={"ralph_prompt": "p.md", "ralph_dir": "d"})
    assert s.prd is not None and s.prd.is_absolute()
    assert s.prompt is not None and s.prompt.is_absolute()
    assert s.dir.is_absolute()


# -- bad values ------------------------------------------------------------------------------

BAD = [
    # (where, name, raw, source text, expected text)
    ("env", "agent_timeout", "abc", "environment variable PYTEST_RALPH_AGENT_TIMEOUT",
     "a number of seconds > 0 and <= 604800"),
    ("ini", "breaker", "0", "ini ralph_breaker (pytest.ini)", "an integer from 1 to 1000"),
    ("cli", "max_iterations", "0", "--ralph-max-iterations", "an integer from 1 to 10000"),
    ("cli", "max_iterations", 0, "--ralph-max-iterations", "an integer from 1 to 10000"),
    ("cli", "max_iterations", "10001", "--ralph-max-iterations", "an integer from 1 to 10000"),
    ("env", "max_iterations", "-1", "environment variable PYTEST_RALPH_MAX_ITERATIONS",
     "an integer from 1 to 10000"),
    ("ini", "max_iterations", "2.5", "ini ralph_max_iterations (pytest.ini)",
     "an integer from 1 to 10000"),
    ("ini", "max_iterations", "inf", "ini ralph_max_iterations (pytest.ini)",
     "an integer from 1 to 10000"),
    ("ini", "max_iterations", "unbounded", "ini ralph_max_iterations (pytest.ini)",
     "an integer from 1 to 10000"),
    ("cli", "agent_timeout", "nan", "--ralph-agent-timeout", "a number of seconds > 0"),
    ("cli", "agent_timeout", "NaN", "--ralph-agent-timeout", "a number of seconds > 0"),
    ("cli", "agent_timeout", "inf", "--ralph-agent-timeout", "a number of seconds > 0"),
    ("cli", "agent_timeout", "-inf", "--ralph-agent-timeout", "a number of seconds > 0"),
    ("cli", "agent_timeout", "-5", "--ralph-agent-timeout", "a number of seconds > 0"),
    ("cli", "agent_timeout", "0", "--ralph-agent-timeout", "a number of seconds > 0"),
    ("cli", "agent_timeout", 0.0, "--ralph-agent-timeout", "a number of seconds > 0"),
    ("env", "agent_timeout", "604801", "environment variable PYTEST_RALPH_AGENT_TIMEOUT",
     "<= 604800"),
    ("ini", "check_timeout", "-1", "ini ralph_check_timeout (pytest.ini)",
     "a number of seconds > 0"),
    ("env", "agent_errors", "0", "environment variable PYTEST_RALPH_AGENT_ERRORS",
     "an integer from 1 to 1000"),
    ("ini", "max_prd_bytes", "0", "ini ralph_max_prd_bytes (pytest.ini)", "an integer from 1"),
    ("env", "strict", "maybe", "environment variable PYTEST_RALPH_STRICT", "true or false"),
    ("cli", "agent", "", "--ralph-agent", "a non-empty string"),
    ("cli", "agent", "   ", "--ralph-agent", "a non-empty string"),
    ("cli", "prd", "  ", "--ralph-prd", "a path"),
    ("ini", "dir", "  ", "ini ralph_dir (pytest.ini)", "a path"),
    ("cli", "story", [" ", ""], "--ralph-story", "one or more story ids"),
    ("env", "story", ",,", "environment variable PYTEST_RALPH_STORY", "one or more story ids"),
]


@pytest.mark.parametrize(("where", "name", "raw", "source", "expected"), BAD,
                         ids=[f"{b[0]}-{b[1]}-{b[2]!r}" for b in BAD])
def test_bad_values_name_their_source(dirs: tuple[Path, Path], where: str, name: str, raw: Any,
                                      source: str, expected: str) -> None:
    spec = SPEC_BY_NAME[name]
    kw: dict[str, Any] = {
        "cli": {"cli": {name: raw}}, "env": {"env": {spec.env: raw}},
        "ini": {"ini": {spec.ini: raw}}}[where]
    with pytest.raises(SettingsError) as info:
        _resolve(dirs, **kw)
    message = str(info.value)
    assert message.startswith(f"{name} from {source}: expected ")
    assert expected in message
    assert f"got {raw!r}" in message


def test_a_bad_lower_source_is_not_read_when_a_higher_one_is_set(dirs: tuple[Path, Path]) -> None:
    s = _resolve(dirs, cli={"max_iterations": "3"}, env={"PYTEST_RALPH_MAX_ITERATIONS": "0"},
                 ini={"ralph_max_iterations": "junk"})
    assert s.max_iterations == 3


def test_settings_error_is_a_value_error() -> None:
    assert issubclass(SettingsError, ValueError)


# -- describe --------------------------------------------------------------------------------


def test_describe_defaults_is_empty(dirs: tuple[Path, Path]) -> None:
    assert describe(_resolve(dirs)) == []


def test_describe_lists_only_set_values_with_sources(dirs: tuple[Path, Path]) -> None:
    _, root = dirs
    s = _resolve(dirs, cli={"max_iterations": "7"}, env={"PYTEST_RALPH_AGENT": "claude -p"},
                 ini={"ralph_dir": "state"})
    assert describe(s) == [
        "agent = claude -p (environment variable PYTEST_RALPH_AGENT)",
        "max_iterations = 7 (--ralph-max-iterations)",
        f"dir = {root / 'state'} (ini ralph_dir (pytest.ini))",
    ]
