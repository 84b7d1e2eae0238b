"""``docs/loop.md``, the reference of ``pytest --ralph``, stays complete.

These tests fail when an option the plugin registers (``--ralph*``), an ini key
(``ralph_*``) or a setting's environment variable (``PYTEST_RALPH_*``) is missing from the
page, when a setting's row in the settings table names the wrong twins or default, and when
an exit code the loop can return is missing from the table under "## Exit codes". The page's
examples themselves are run by ``tests/project/test_docs.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_ralph.commands.control
import pytest_ralph.loop.controller
import pytest_ralph.loop.hooks
from pytest_ralph.loop.settings import SPECS, Spec, shown_value

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "loop.md"


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(heading: str) -> str:
    """The text of the ``## heading`` section of the page, up to the next ``## ``."""
    text = _text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _registered(pytester: pytest.Pytester) -> tuple[set[str], set[str]]:
    """The ``--ralph*`` option strings and ``ralph_*`` ini keys pytest's parser holds once
    the plugin is loaded (hidden options included)."""
    config = pytester.parseconfig()
    parser = config._parser
    options: set[str] = set()
    for group in [*parser._groups, parser._anonymous]:
        for option in group.options:
            options.update(n for n in option.names() if n.startswith("--ralph"))
    inis = {name for name in parser._inidict if name.startswith("ralph_")}
    return options, inis


def test_the_parser_is_read(pytester: pytest.Pytester) -> None:
    """A guard for the tests below: they would pass on nothing if the parser's internals
    changed."""
    options, inis = _registered(pytester)
    assert {"--ralph", "--ralph-agent", "--ralph-status"} <= options
    assert {"ralph_agent", "ralph_max_iterations", "ralph_prd_files"} <= inis


def test_every_ralph_option_is_documented(pytester: pytest.Pytester) -> None:
    options, _ = _registered(pytester)
    text = _text()
    missing = sorted(o for o in options if not re.search(rf"`{re.escape(o)}[ `]", text))
    assert not missing, f"options missing from docs/loop.md: {missing}"


def test_every_ralph_ini_key_is_documented(pytester: pytest.Pytester) -> None:
    _, inis = _registered(pytester)
    text = _text()
    missing = sorted(k for k in inis if f"`{k}`" not in text)
    assert not missing, f"ini keys missing from docs/loop.md: {missing}"


def test_help_lists_nothing_the_page_does_not() -> None:
    """The same from ``pytest --help`` output, the way a user sees the options and keys."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True,
                          text=True, env=env, timeout=120, cwd=PAGE.parent)
    assert done.returncode == 0, done.stderr
    options = set(re.findall(r"(?<![\w-])(--ralph(?:-[a-z]+)*)", done.stdout))
    inis = set(re.findall(r"^  (ralph_\w+) \(", done.stdout, re.MULTILINE))
    assert "--ralph-agent" in options and "ralph_agent" in inis
    text = _text()
    assert sorted(o for o in options if f"`{o}" not in text) == []
    assert sorted(k for k in inis if f"`{k}`" not in text) == []


def _row(spec: Spec) -> str:
    """The settings table's row of ``spec``."""
    if spec.ini_allowed:
        rows = [line for line in _section("Settings").splitlines()
                if line.startswith("|") and f"| `{spec.ini}`" in line]
    else:  # a row of its own, keyed by its option: it has no ini key
        rows = [line for line in _section("Settings").splitlines()
                if line.startswith(f"| `{spec.cli}`") and "| none: " in line]
    assert len(rows) == 1, f"{spec.ini}: expected one row in the settings table, got {rows}"
    return rows[0]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_every_setting_has_its_row(spec: Spec) -> None:
    row = _row(spec)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert f"`{spec.env}`" in row, f"{spec.ini}: its environment variable {spec.env}"
    if spec.cli:
        assert cells[0].startswith(f"`{spec.cli}"), f"{spec.ini}: its option {spec.cli}"
    else:
        assert cells[0] == "", f"{spec.ini} has no command-line option"
    if spec.default not in (None, ()):
        assert shown_value(spec.default) in row, f"{spec.ini}: default {spec.default!r}"


def _loop_exit_codes() -> set[int]:
    """Every exit code the loop and the commands beside it can return, from the constants."""
    codes = {v for k, v in vars(pytest_ralph.loop.controller).items()
             if k.startswith("EXIT_") and isinstance(v, int)}
    codes |= set(pytest_ralph.loop.hooks.STOP_STATUSES.values())
    codes.add(pytest_ralph.commands.control.EXIT_HISTORY_ERROR)
    return codes


def test_every_exit_code_is_in_the_table() -> None:
    codes = _loop_exit_codes()
    assert codes >= {0, 1, 2, 3, 4, 5, 6, 7}
    rows = {int(m.group(1)): m.group(0) for m in
            re.finditer(r"^\| (\d+) \|.*$", _section("Exit codes"), re.MULTILINE)}
    missing = sorted(codes - set(rows))
    assert not missing, f"exit codes missing from the table of docs/loop.md: {missing}"
    for code in codes - {3}:  # the loop's column names its status, but for the internal error
        loop_cell = rows[code].strip("|").split("|")[2]
        assert loop_cell.strip() not in ("", "-"), f"exit {code}: the loop's column is empty"


def test_every_run_status_is_named() -> None:
    from pytest_ralph.state.records import RESUMABLE

    text = _text()
    for status in ("running", "complete", "limit", "breaker", "agent-error", "interrupted",
                   "cancelled", "crashed", "no-criteria", *RESUMABLE):
        assert f"`{status}`" in text, status


def test_every_preset_and_outcome_is_documented() -> None:
    from pytest_ralph.agents.presets import PRESETS
    from pytest_ralph.agents.run import OUTCOMES

    presets = _section("Agents")
    for name, preset in PRESETS.items():
        argv = " ".join(preset.argv())
        assert f"| `{name}` | `{argv}` |" in presets, name
    for outcome in OUTCOMES:
        assert f"| `{outcome}` |" in presets, outcome
