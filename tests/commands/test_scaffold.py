"""``pytest --ralph-init`` scaffolds a project (pytest_ralph/commands/init.py).

Unit tests of detection, of each pytest configuration file kind (the edits keep every other
byte), of ``.gitignore``, of idempotence and of refused input; then the command itself through
pytester; then the whole story in real subprocesses: a project with one failing test,
``--ralph-init``, ``pytest --ralph`` with a scripted agent, and the gate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.commands import init as sc
from pytest_ralph.loop.settings import resolve
from pytest_ralph.prd.load import load_prd
from pytest_ralph.testing import read_calls, write_replay
from tests.support.env import clean_env

KEYS = [("ralph_max_iterations", "5")]
BUGGY_CALC = "def add(a, b):\n    return a - b\n"
FIXED_CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_bytes(text.encode("utf-8"))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run(root: Path, keys: list[tuple[str, str]] | None = None,
        config: Path | None = None, prd: Path | None = None) -> sc.Plan:
    return sc.scaffold(root, config=config, state_dir=root / ".pytest_ralph", prd=prd,
                       keys=KEYS if keys is None else keys)


def lines(done: sc.Plan) -> list[str]:
    return [change.line() for change in done.changes]


def criteria(root: Path) -> list[Any]:
    prd = load_prd(root / "prd.json")  # valid against the schema, or this raises
    [story] = prd.stories
    assert story.id == "US-001" and story.passes is False
    data = json.loads((root / "prd.json").read_text(encoding="utf-8"))
    return list(data["userStories"][0]["acceptanceCriteria"])


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("files", "tests"), [
    ({"tests/test_a.py": ""}, ("tests",)),
    ({"tests/test_a.py": "", "tests/unit/test_b.py": ""}, ("tests",)),
    ({"test_top.py": ""}, ("test_top.py",)),
    ({"src/pkg/calc_test.py": "", "src/pkg/calc.py": ""}, ("src/pkg",)),
    ({"a/test_x.py": "", "b/c/test_y.py": ""}, ("a", "b/c")),
    ({"calc.py": "", "tests/helpers.py": ""}, ()),
    ({".venv/lib/test_hidden.py": "", "node_modules/x/test_n.py": "", "venv2/pyvenv.cfg": "",
      "venv2/lib/test_v.py": "", "build/test_b.py": ""}, ()),
    # a folder holding the PRD is replaced by its test files: a check collecting its own PRD
    # would check itself
    ({"scripts/ralph/prd.json": "{}", "scripts/test_s.py": ""}, ("scripts/test_s.py",)),
], ids=["tests-folder", "nested", "top-level-file", "underscore-test", "two-folders",
        "no-test-files", "hidden-venv-node-modules-build", "prd-folder"])
def test_detect_finds_the_test_suite(tmp_path: Path, files: dict[str, str],
                                     tests: tuple[str, ...]) -> None:
    write(tmp_path, files)
    prd = tmp_path / "scripts/ralph/prd.json" if "scripts/ralph/prd.json" in files else None
    assert sc.detect(tmp_path, prd=prd).tests == tests


def test_detect_prefers_the_configured_testpaths(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.ini": "[pytest]\ntestpaths =\n    suite\n    missing\n",
                     "suite/check_a.py": "", "tests/test_b.py": ""})
    assert sc.detect(tmp_path).tests == ("suite",)  # missing paths are left out
    write(tmp_path, {"pytest.ini": "[pytest]\ntestpaths = .\n"})  # would collect the PRD
    assert sc.detect(tmp_path, prd=tmp_path / "prd.json").tests == ("tests",)
    (tmp_path / "pytest.ini").unlink()
    write(tmp_path, {"pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["suite"]\n'})
    assert sc.detect(tmp_path).tests == ("suite",)


def test_detect_skips_the_state_folder(tmp_path: Path) -> None:
    write(tmp_path, {"state/test_x.py": ""})
    assert sc.detect(tmp_path, skip=(tmp_path / "state",)).tests == ()


@pytest.mark.parametrize(("files", "ruff", "mypy", "mypy_files"), [
    ({}, None, None, False),
    ({"pyproject.toml": "[tool.ruff]\nline-length = 99\n[tool.mypy]\nstrict = true\n"},
     "pyproject.toml [tool.ruff]", "pyproject.toml [tool.mypy]", False),
    ({"pyproject.toml": '[tool.ruff.lint]\nselect = ["E"]\n[tool.mypy]\nfiles = ["src"]\n'},
     "pyproject.toml [tool.ruff]", "pyproject.toml [tool.mypy]", True),
    ({"ruff.toml": "line-length = 99\n", "mypy.ini": "[mypy]\nfiles = src\n"},
     "ruff.toml", "mypy.ini [mypy]", True),
    ({".ruff.toml": "", ".mypy.ini": "[mypy]\nstrict = True\n"},
     ".ruff.toml", ".mypy.ini [mypy]", False),
    ({"setup.cfg": "[metadata]\nname = x\n\n[mypy]\nfiles = a.py\n"}, None, "setup.cfg [mypy]",
     True),
    ({"setup.cfg": "[mypy-yaml.*]\nignore_missing_imports = True\n",
      "pyproject.toml": "[project]\nname = 'x'\n"}, None, None, False),
], ids=["nothing", "pyproject", "pyproject-files", "own-files", "hidden-files", "setup-cfg",
        "not-configured"])
def test_detect_finds_ruff_and_mypy(tmp_path: Path, files: dict[str, str], ruff: str | None,
                                    mypy: str | None, mypy_files: bool) -> None:
    write(tmp_path, files)
    found = sc.detect(tmp_path)
    assert (found.ruff, found.mypy, found.mypy_files) == (ruff, mypy, mypy_files)


@pytest.mark.parametrize(("files", "chosen"), [
    ({}, None),
    ({"pyproject.toml": "[project]\nname = 'x'\n"}, "pyproject.toml"),
    ({"pyproject.toml": "[tool.pytest]\n", "tox.ini": "[tox]\n"}, "pyproject.toml"),
    ({"pyproject.toml": "[project]\n", "tox.ini": "[pytest]\naddopts = -q\n"}, "tox.ini"),
    ({"tox.ini": "[tox]\n", "setup.cfg": "[tool:pytest]\naddopts = -q\n"}, "setup.cfg"),
    ({"setup.cfg": "[metadata]\n"}, None),
    ({"pytest.ini": "", "pyproject.toml": "[tool.pytest.ini_options]\n"}, "pytest.ini"),
    ({".pytest.ini": "[pytest]\n", "tox.ini": "[pytest]\n"}, ".pytest.ini"),
    ({"pytest.toml": "[pytest]\n", "pytest.ini": "[pytest]\n"}, "pytest.toml"),
    ({"pyproject.toml": "[tool.pytest.ini_options]\n", "tox.ini": "[pytest]\n"},
     "pyproject.toml"),
], ids=["none", "bare-pyproject", "empty-tool-pytest", "tox", "setup-cfg", "no-section",
        "pytest-ini-first", "hidden-ini", "pytest-toml-first", "pyproject-before-tox"])
def test_find_config_picks_the_file_pytest_reads(tmp_path: Path, files: dict[str, str],
                                                 chosen: str | None) -> None:
    write(tmp_path, files)
    assert sc.find_config(tmp_path) == (tmp_path / chosen if chosen else None)


# -- the PRD -----------------------------------------------------------------------------------


def test_the_prd_checks_what_the_project_has(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_a.py": "", "pyproject.toml": "[tool.ruff]\n[tool.mypy]\n"})
    done = run(tmp_path)
    assert criteria(tmp_path) == [
        {"text": "the test suite passes", "pytest": "tests"},
        {"text": "ruff finds no problems", "run": "ruff check ."},
        {"text": "mypy finds no type errors", "run": "mypy ."}]
    assert lines(done)[0] == ("created prd.json: story US-001 with 3 criteria (pytest tests; "
                              "run ruff check .; run mypy .); edit it to describe your work")
    data = json.loads((tmp_path / "prd.json").read_text(encoding="utf-8"))
    assert data["project"] == tmp_path.name and data["branchName"].startswith("ralph/")


def test_the_prd_names_every_test_folder_and_mypy_with_its_files(tmp_path: Path) -> None:
    write(tmp_path, {"a/test_x.py": "", "b/test_y.py": "", "mypy.ini": "[mypy]\nfiles = a\n"})
    run(tmp_path)
    assert criteria(tmp_path) == [{"text": "the test suite passes", "pytest": ["a", "b"]},
                                  {"text": "mypy finds no type errors", "run": "mypy"}]


def test_without_tests_the_prd_asks_for_a_test_suite(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert criteria(tmp_path) == [{"text": "the project has a test suite in tests/ and it "
                                           "passes", "pytest": "tests"}]
    assert any("no test suite found" in note for note in done.notes)
    assert "no test suite found" in sc.render(done, tmp_path)


IMPORT_NOTE = "a `pytest` criterion runs like `python -m pytest`"


@pytest.mark.parametrize(("files", "noted"), [
    ({"calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC}, True),
    ({"calc/__init__.py": "", "tests/test_calc.py": TEST_CALC}, True),
    ({"calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC, "conftest.py": ""}, False),
    ({"calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC,
      "pytest.ini": "[pytest]\npythonpath = .\n"}, False),
    ({"calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC, "tests/__init__.py": ""}, False),
    ({"src/calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC}, False),
    ({"calc.py": BUGGY_CALC, "test_calc.py": TEST_CALC}, False),
    ({"setup.py": "", "tests/test_calc.py": TEST_CALC}, False),
], ids=["module", "package", "conftest", "pythonpath", "tests-package", "src-layout",
        "top-level-tests", "only-setup-py"])
def test_init_notes_when_bare_pytest_may_not_import_the_project(
        tmp_path: Path, files: dict[str, str], noted: bool) -> None:
    write(tmp_path, files)
    done = run(tmp_path)
    assert any(IMPORT_NOTE in note for note in done.notes) is noted, done.notes


def test_the_import_note_says_what_pytest_does(tmp_path: Path) -> None:
    """What the note claims, in real processes: in the noted layout ``python -m pytest`` (as
    a check phase runs) imports ``calc`` where a bare ``pytest`` fails, and the empty
    ``conftest.py`` it suggests makes both agree."""
    write(tmp_path, {"calc.py": FIXED_CALC, "tests/test_calc.py": TEST_CALC})
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    bare = [str(Path(sys.executable).parent / "pytest"), "-q", "-p", "no:cacheprovider",
            "tests"]
    module = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    assert subprocess.run(bare, cwd=tmp_path, env=env, capture_output=True).returncode == 2
    assert subprocess.run(module, cwd=tmp_path, env=env, capture_output=True).returncode == 0
    assert any(IMPORT_NOTE in note for note in run(tmp_path).notes)
    (tmp_path / "conftest.py").write_text("", encoding="utf-8")
    assert subprocess.run(bare, cwd=tmp_path, env=env, capture_output=True).returncode == 0


@pytest.mark.parametrize("existing", ["prd.json", "prd.yaml", ".ralph/prd.jsonc",
                                      "scripts/ralph/prd.yml"])
def test_an_existing_prd_is_never_touched(tmp_path: Path, existing: str) -> None:
    write(tmp_path, {existing: "not even valid"})
    done = run(tmp_path)
    assert (tmp_path / existing).read_text() == "not even valid"
    assert not (tmp_path / "prd.json").exists() or existing == "prd.json"
    assert lines(done)[0] == f"skipped {existing}: a PRD is already there (the loop uses it)"
    assert done.prd == existing


def test_a_configured_prd_is_written_where_it_is_configured(tmp_path: Path) -> None:
    write(tmp_path, {"prd.json": "{}"})
    done = run(tmp_path, prd=tmp_path / "work" / "plan.json")
    assert (tmp_path / "prd.json").read_text() == "{}"
    assert load_prd(tmp_path / "work" / "plan.json").stories[0].id == "US-001"
    assert lines(done)[0].startswith("created work/plan.json: story US-001")


# -- the settings, per configuration file kind -------------------------------------------------


def test_no_config_file_creates_pytest_ini(tmp_path: Path) -> None:
    done = run(tmp_path, keys=[("ralph_max_iterations", "5"), ("ralph_agent", "claude")])
    assert (tmp_path / "pytest.ini").read_text() == (
        "[pytest]\nralph_max_iterations = 5\nralph_agent = claude\n")
    assert "created pytest.ini: added ralph_max_iterations, ralph_agent to [pytest]" in \
        lines(done)
    assert done.config == tmp_path / "pytest.ini"


INI = """\
; project settings
[pytest]
addopts = -q
    -p no:cacheprovider
# the ralph keys go after this line's section
markers =
    slow: slow tests

; coverage comes next
[coverage:run]
branch = True
"""


@pytest.mark.parametrize("name", ["pytest.ini", "tox.ini", ".pytest.ini"])
def test_ini_keys_go_at_the_end_of_the_section_and_nothing_else_moves(tmp_path: Path,
                                                                      name: str) -> None:
    write(tmp_path, {name: INI})
    done = run(tmp_path, config=tmp_path / name)
    assert (tmp_path / name).read_text() == INI.replace(
        "    slow: slow tests\n", "    slow: slow tests\nralph_max_iterations = 5\n")
    assert f"updated {name}: added ralph_max_iterations to [pytest]" in lines(done)


def test_setup_cfg_uses_tool_pytest(tmp_path: Path) -> None:
    text = "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n\n[mypy]\nstrict = True\n"
    write(tmp_path, {"setup.cfg": text})
    run(tmp_path, config=tmp_path / "setup.cfg")
    assert (tmp_path / "setup.cfg").read_text() == text.replace(
        "addopts = -q\n", "addopts = -q\nralph_max_iterations = 5\n")


def test_pytest_ini_without_a_section_gets_one(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.ini": "# nothing here yet"})
    run(tmp_path, config=tmp_path / "pytest.ini")
    assert (tmp_path / "pytest.ini").read_text() == (
        "# nothing here yet\n\n[pytest]\nralph_max_iterations = 5\n")


def test_crlf_bom_and_a_missing_final_newline_are_kept(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.ini": b"\xef\xbb\xbf[pytest]\r\naddopts = -q"})
    run(tmp_path, config=tmp_path / "pytest.ini")
    assert (tmp_path / "pytest.ini").read_bytes() == (
        b"\xef\xbb\xbf[pytest]\r\naddopts = -q\r\nralph_max_iterations = 5\r\n")


PYPROJECT = """\
# Acme: build and tools
[project]
name = "acme"   # the name
dependencies = [
    "requests>=2",  # http
]

[tool.pytest.ini_options]
# how pytest runs
addopts = "-q"     # quiet
testpaths = [
  "tests",  # only these
]

# ruff: lint settings
[tool.ruff]
line-length   =   99
"""


def test_pyproject_keeps_every_byte_outside_the_added_keys(tmp_path: Path) -> None:
    write(tmp_path, {"pyproject.toml": PYPROJECT, "tests/test_a.py": ""})
    done = run(tmp_path, config=tmp_path / "pyproject.toml",
               keys=[("ralph_max_iterations", "5"), ("ralph_agent", 'my "agent" --x')])
    assert (tmp_path / "pyproject.toml").read_text() == PYPROJECT.replace(
        '  "tests",  # only these\n]\n',
        '  "tests",  # only these\n]\nralph_max_iterations = "5"\n'
        'ralph_agent = "my \\"agent\\" --x"\n')
    assert "updated pyproject.toml: added ralph_max_iterations, ralph_agent to " \
           "[tool.pytest.ini_options]" in lines(done)
    assert criteria(tmp_path)[1] == {"text": "ruff finds no problems", "run": "ruff check ."}


def test_pyproject_native_tool_pytest_table(tmp_path: Path) -> None:
    text = '[tool.pytest]\nminversion = "9.0"\n\n[tool.mypy]\nstrict = true\n'
    write(tmp_path, {"pyproject.toml": text})
    run(tmp_path, config=tmp_path / "pyproject.toml")
    assert (tmp_path / "pyproject.toml").read_text() == text.replace(
        '"9.0"\n', '"9.0"\nralph_max_iterations = "5"\n')


@pytest.mark.parametrize("text", ['[project]\nname = "x"\n', '[project]\nname = "x"',
                                  "", "# only a comment\n"])
def test_pyproject_without_pytest_settings_gets_ini_options(tmp_path: Path, text: str) -> None:
    write(tmp_path, {"pyproject.toml": text})
    done = run(tmp_path, config=tmp_path / "pyproject.toml")
    sep = "" if not text.strip() else ("\n" if text.endswith("\n") else "\n\n")
    assert (tmp_path / "pyproject.toml").read_text() == (
        f'{text}{sep}[tool.pytest.ini_options]\nralph_max_iterations = "5"\n')
    assert "updated pyproject.toml: added ralph_max_iterations to [tool.pytest.ini_options]" \
        in lines(done)


def test_pyproject_with_crlf_keeps_its_newlines(tmp_path: Path) -> None:
    text = '[tool.pytest.ini_options]\r\naddopts = "-q"\r\n\r\n[tool.ruff]\r\nx = 1'
    write(tmp_path, {"pyproject.toml": text})
    run(tmp_path, config=tmp_path / "pyproject.toml")
    assert (tmp_path / "pyproject.toml").read_bytes() == text.replace(
        '"-q"\r\n', '"-q"\r\nralph_max_iterations = "5"\r\n').encode()


def test_pytest_toml_uses_its_pytest_table(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.toml": '[pytest]\naddopts = ["-q"]\n'})
    run(tmp_path, config=tmp_path / "pytest.toml")
    assert (tmp_path / "pytest.toml").read_text() == (
        '[pytest]\naddopts = ["-q"]\nralph_max_iterations = "5"\n')


def test_a_key_already_set_is_never_overwritten(tmp_path: Path) -> None:
    ini = "[pytest]\nralph_max_iterations = 12\n"
    write(tmp_path, {"pytest.ini": ini})
    done = run(tmp_path, config=tmp_path / "pytest.ini",
               keys=[("ralph_max_iterations", "5"), ("ralph_agent", "claude")])
    assert (tmp_path / "pytest.ini").read_text() == ini + "ralph_agent = claude\n"
    assert ("updated pytest.ini: added ralph_agent to [pytest] (ralph_max_iterations already "
            "set in [pytest])") in lines(done)
    toml = '[tool.pytest.ini_options]\nralph_max_iterations = "12"\n'
    write(tmp_path, {"pyproject.toml": toml})
    done = run(tmp_path, config=tmp_path / "pyproject.toml")
    assert (tmp_path / "pyproject.toml").read_text() == toml
    assert ("skipped pyproject.toml: ralph_max_iterations already set in "
            "[tool.pytest.ini_options]") in lines(done)


# -- .gitignore --------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "after", "says"), [
    (None, ".pytest_ralph/\n", "created .gitignore: ignores .pytest_ralph/ (the state folder)"),
    ("*.pyc", "*.pyc\n.pytest_ralph/\n", "updated .gitignore: added .pytest_ralph/ (the state "
                                         "folder)"),
    ("*.pyc\r\n", "*.pyc\r\n.pytest_ralph/\r\n", "updated .gitignore: added .pytest_ralph/"),
    ("/.pytest_ralph\n", "/.pytest_ralph\n", "skipped .gitignore: .pytest_ralph/ is already "
                                             "ignored"),
    ("x\n.pytest_ralph/*\n", "x\n.pytest_ralph/*\n", "skipped .gitignore"),
], ids=["missing", "no-final-newline", "crlf", "anchored", "star"])
def test_gitignore(tmp_path: Path, before: str | None, after: str, says: str) -> None:
    if before is not None:
        write(tmp_path, {".gitignore": before})
    done = run(tmp_path)
    assert (tmp_path / ".gitignore").read_bytes() == after.encode()
    assert any(line.startswith(says) for line in lines(done)), lines(done)


def test_gitignore_names_a_custom_state_folder_and_skips_one_outside(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    sc.scaffold(root, config=None, state_dir=root / "var" / "ralph", keys=KEYS)
    assert (root / ".gitignore").read_text() == "var/ralph/\n"
    other = tmp_path / "other"
    other.mkdir()
    done = sc.scaffold(other, config=None, state_dir=tmp_path / "state", keys=KEYS)
    assert not (other / ".gitignore").exists()
    assert f"skipped .gitignore: the state folder {tmp_path / 'state'} is outside the " \
           "rootdir" in lines(done)


# -- idempotence and refused input -------------------------------------------------------------


@pytest.mark.parametrize("files", [
    {"tests/test_a.py": ""},
    {"pyproject.toml": PYPROJECT, "tests/test_a.py": ""},
    {"tox.ini": INI.replace("[pytest]", "[tox]\n\n[pytest]"), ".gitignore": "x"},
], ids=["empty", "pyproject", "tox"])
def test_a_second_run_changes_nothing(tmp_path: Path, files: dict[str, str]) -> None:
    write(tmp_path, files)
    config = sc.find_config(tmp_path)
    first = run(tmp_path, config=config)
    assert first.writes
    after = tree(tmp_path)
    second = run(tmp_path, config=config)
    assert tree(tmp_path) == after
    assert not second.writes
    assert all(change.action == "skipped" for change in second.changes), lines(second)
    assert sc.render(second, tmp_path).endswith(
        "nothing to do: every file and value is already there")


@pytest.mark.parametrize(("files", "config", "where", "says"), [
    ({"pyproject.toml": '[project]\nname = "x"\nversion = \n'}, "pyproject.toml",
     "pyproject.toml:3:10", "not valid TOML: Unexpected character"),
    ({"pytest.ini": "[pytest]\naddopts = -q\nthis is not a key\n"}, "pytest.ini", "pytest.ini:3",
     "expected `key = value`, a [section] header, a comment or an indented continuation "
     "line; found 'this is not a key'"),
    ({"pytest.ini": "addopts = -q\n[pytest]\n"}, "pytest.ini", "pytest.ini:1",
     "`addopts = -q` comes before any [section] header"),
    ({"tox.ini": "[pytest\n"}, "tox.ini", "tox.ini:1", "expected a section header"),
    # not pytest's file, but read to find mypy and ruff
    ({"pytest.ini": "[pytest]\n", "setup.cfg": "[mypy]\n= 1\n"}, "pytest.ini", "setup.cfg:2",
     "expected `key = value`"),
    ({"pytest.ini": "[pytest]\n", "pyproject.toml": "[tool.ruff\n"}, "pytest.ini",
     "pyproject.toml:1:10", "not valid TOML"),
    ({"pytest.ini": b"[pytest]\naddopts = caf\xe9\n"}, "pytest.ini", "pytest.ini:2",
     "not UTF-8 text"),
    ({"pyproject.toml": "[tool.pytest]\nini_options = { addopts = '-q' }\n"}, "pyproject.toml",
     "pyproject.toml", "[tool.pytest.ini_options] is not a plain table (an inline table or one "
     "split across the file); add these lines to it by hand: ralph_max_iterations = \"5\""),
], ids=["toml-syntax", "ini-line", "key-before-section", "unclosed-header", "setup-cfg",
        "other-toml", "not-utf8", "inline-table"])
def test_malformed_files_are_named_and_nothing_is_written(
        tmp_path: Path, files: dict[str, str | bytes], config: str, where: str,
        says: str) -> None:
    write(tmp_path, files)
    before = tree(tmp_path)
    with pytest.raises(sc.ScaffoldError) as info:
        run(tmp_path, config=tmp_path / config)
    assert str(info.value).startswith(f"{tmp_path / where}: "), str(info.value)
    assert says in str(info.value)
    assert tree(tmp_path) == before


def test_init_keys(tmp_path: Path) -> None:
    def settings(cli: dict[str, Any], env: dict[str, str]) -> Any:
        return resolve(cli=cli, env=env, ini=lambda key: None, ini_file="pytest.ini",
                       invocation_dir=tmp_path, rootdir=tmp_path)

    assert sc.init_keys(settings({}, {})) == [("ralph_max_iterations", "5")]
    assert sc.init_keys(settings({"agent": "claude", "max_iterations": "8"}, {})) == [
        ("ralph_max_iterations", "8"), ("ralph_agent", "claude")]
    # an agent from the environment is this shell's, not the project's
    assert sc.init_keys(settings({}, {"PYTEST_RALPH_AGENT": "codex"})) == [
        ("ralph_max_iterations", "5")]
    # a PRD named on the command line goes in the settings, unless discovery finds it anyway
    assert sc.init_keys(settings({"prd": "docs/prd.json"}, {}), tmp_path) == [
        ("ralph_max_iterations", "5"), ("ralph_prd", "docs/prd.json")]
    assert sc.init_keys(settings({"prd": "prd.json"}, {}), tmp_path) == [
        ("ralph_max_iterations", "5")]
    assert sc.init_keys(settings({}, {"PYTEST_RALPH_PRD": "a/prd.json"}), tmp_path) == [
        ("ralph_max_iterations", "5")]


def test_init_keys_never_write_an_agent_command_that_holds_a_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_TOKEN", "tok-" + "q7W" * 8)
    for agent in ("mycli --token tok-" + "q7W" * 8, "mycli --pat ghp_" + "Zq8" * 12):
        settings = resolve(cli={"agent": agent}, env={}, ini=lambda key: None,
                           ini_file="pytest.ini", invocation_dir=tmp_path, rootdir=tmp_path)
        assert sc.init_keys(settings) == [("ralph_max_iterations", "5")]


def test_init_with_ralph_prd_makes_a_prd_the_loop_finds(pytester: pytest.Pytester) -> None:
    write(pytester.path, {"calc.py": FIXED_CALC, "tests/test_calc.py": TEST_CALC,
                          "conftest.py": ""})
    result = pytester.runpytest("--ralph-init", "--ralph-prd", "plans/prd.json")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["  created plans/prd.json: *",
                                 "  created pytest.ini: added ralph_max_iterations, ralph_prd *"])
    assert "ralph_prd = plans/prd.json" in (pytester.path / "pytest.ini").read_text()
    dry = pytester.runpytest_subprocess("--ralph-dry-run", "--ralph-agent", "true")
    assert dry.ret == 0, dry.stdout.str() + dry.stderr.str()
    assert "plans/prd.json" in dry.stdout.str()


# -- the command -------------------------------------------------------------------------------


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("PYTEST_RALPH_", "CLAUDE_")) or name == "PYTEST_ADDOPTS":
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean")
def test_ralph_init_scaffolds_then_says_everything_was_skipped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(calc=BUGGY_CALC)
    write(pytester.path, {"tests/test_calc.py": TEST_CALC})
    result = pytester.runpytest("--ralph-init")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([
        f"pytest-ralph: --ralph-init in {pytester.path}",
        "  created prd.json: story US-001 with 1 criterion (pytest tests); edit it *",
        "  created pytest.ini: added ralph_max_iterations to [pytest]",
        "  created .gitignore: ignores .pytest_ralph/ (the state folder)",
        "next: describe your work in prd.json, check it with `pytest prd.json` *"])
    assert (pytester.path / "pytest.ini").read_text() == "[pytest]\nralph_max_iterations = 5\n"
    after = tree(pytester.path)

    again = pytester.runpytest("--ralph-init")
    assert again.ret == 0
    again.stdout.fnmatch_lines([
        "  skipped prd.json: a PRD is already there (the loop uses it)",
        "  skipped pytest.ini: ralph_max_iterations already set in [pytest]",
        "  skipped .gitignore: .pytest_ralph/ is already ignored",
        "nothing to do: every file and value is already there"])
    assert tree(pytester.path) == after


@pytest.mark.usefixtures("clean")
def test_ralph_init_edits_the_pyproject_pytest_reads(pytester: pytest.Pytester) -> None:
    write(pytester.path, {"pyproject.toml": PYPROJECT, "tests/test_a.py": "def test(): pass\n"})
    result = pytester.runpytest("--ralph-init", "--ralph-agent", "claude")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (pytester.path / "pyproject.toml").read_text() == PYPROJECT.replace(
        '  "tests",  # only these\n]\n',
        '  "tests",  # only these\n]\nralph_max_iterations = "5"\nralph_agent = "claude"\n')
    assert not (pytester.path / "pytest.ini").exists()
    result.stdout.fnmatch_lines(["  updated pyproject.toml: added ralph_max_iterations, "
                                 "ralph_agent to [tool.pytest.ini_options]"])


@pytest.mark.parametrize(("files", "edited"), [
    ({"pyproject.toml": "[project]\nname = 'x'\n", "tox.ini": "[tox]\n\n[pytest]\n"}, "tox.ini"),
    ({"pyproject.toml": "[project]\nname = 'x'\n", "setup.cfg": "[tool:pytest]\n"},
     "setup.cfg"),
    ({"pyproject.toml": "[project]\nname = 'x'\n", "tox.ini": "[tox]\n"}, "pyproject.toml"),
    pytest.param({"pytest.toml": "[pytest]\n", "tox.ini": "[pytest]\n"}, "pytest.toml",
                 marks=pytest.mark.skipif(pytest.version_tuple < (9,),
                                          reason="pytest.toml is read from pytest 9 on")),
], ids=["tox", "setup-cfg", "bare-pyproject", "pytest-toml"])
@pytest.mark.usefixtures("clean")
def test_ralph_init_edits_the_file_pytest_chose(pytester: pytest.Pytester,
                                                files: dict[str, str], edited: str) -> None:
    write(pytester.path, files)
    result = pytester.runpytest("--ralph-init")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert sc.find_config(pytester.path) == pytester.path / edited
    for name, text in files.items():
        now = (pytester.path / name).read_text()
        assert (now != text) == (name == edited), (name, now)
    assert "ralph_max_iterations" in (pytester.path / edited).read_text()
    assert not (pytester.path / "pytest.ini").exists()


@pytest.mark.usefixtures("clean")
def test_ralph_init_refuses_a_malformed_file_and_writes_nothing(
        pytester: pytest.Pytester) -> None:
    # mypy.ini is read by --ralph-init only (pytest reports a broken file of its own itself)
    write(pytester.path, {"mypy.ini": "[mypy]\nstrict\n", "tests/test_a.py": ""})
    before = tree(pytester.path)
    result = pytester.runpytest("--ralph-init")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"pytest-ralph: --ralph-init: {pytester.path / 'mypy.ini'}:2: "
                                 "expected `key = value`, *; found 'strict'"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert tree(pytester.path) == before


@pytest.mark.usefixtures("clean")
def test_ralph_init_refuses_n(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--ralph-init", "-n", "2")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*-n cannot be used with --ralph-init*"])
    assert not (pytester.path / "prd.json").exists()


@pytest.mark.usefixtures("clean")
def test_ralph_init_with_the_claude_driver_scaffolds_and_arms(pytester: pytest.Pytester) -> None:
    write(pytester.path, {"calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC})
    result = pytester.runpytest_subprocess("--ralph-init", "--ralph-driver", "claude")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["  created prd.json: story US-001 *",
                                 "  created pytest.ini: *", "*armed run * on *prd.json*"])
    settings = json.loads((pytester.path / ".claude" / "settings.local.json").read_text())
    assert "pytest_ralph.hook" in json.dumps(settings["hooks"]["Stop"])


# -- the whole story, in real subprocesses -----------------------------------------------------


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *args],
                          cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell checks")
def test_init_then_the_loop_then_the_gate(tmp_path: Path) -> None:
    """The transcript of the README: one failing test, ``--ralph-init``, a loop with a
    scripted agent that fixes the code, then the gate."""
    project = tmp_path / "calc"
    write(project, {"calc.py": BUGGY_CALC, "tests/test_calc.py": TEST_CALC})
    failing = _pytest(project)
    assert failing.returncode == 1, failing.stdout

    init = _pytest(project, "--ralph-init")
    assert init.returncode == 0, init.stdout + init.stderr
    assert "created prd.json: story US-001 with 1 criterion (pytest tests)" in init.stdout
    assert criteria(project) == [{"text": "the test suite passes", "pytest": "tests"}]

    gate = _pytest(project, "prd.json")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "prd.json::US-001::AC1" in gate.stdout

    # Outside the project, in a folder of its own: a sandboxed agent may write its command's
    # folder (the replay's call log), never one that holds the project.
    script = tmp_path / "agent" / "agent-script.json"
    script.parent.mkdir()
    agent = write_replay(script, [{"stdout": "fixing add\n", "files": {"calc.py": FIXED_CALC}}])
    loop = _pytest(project, "--ralph", "--ralph-agent", agent)
    assert loop.returncode == 0, loop.stdout + loop.stderr
    assert [call.iteration for call in read_calls(script)] == [1]
    assert "the test suite passes" in read_calls(script)[0].prompt
    assert (project / "calc.py").read_text() == FIXED_CALC

    gate = _pytest(project, "prd.json")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert json.loads((project / "prd.json").read_text())["userStories"][0]["passes"] is True
    assert _pytest(project, "--ralph-init").stdout.rstrip().endswith(
        "nothing to do: every file and value is already there")


def test_more_gitignore_entries_and_the_claude_next_step(tmp_path: Path) -> None:
    """With ``--ralph-driver claude`` the arming file is ignored too, in the same edit, and
    the next step is the Claude Code session, not ``pytest --ralph`` (refused while armed)."""
    (tmp_path / ".gitignore").write_text("*.pyc", encoding="utf-8")
    arming = [(".claude/pytest-ralph.local.json", "the Claude Code arming file")]
    done = sc.scaffold(tmp_path, config=None, state_dir=tmp_path / ".pytest_ralph",
                       keys=KEYS, ignores=arming)
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == \
        "*.pyc\n.pytest_ralph/\n.claude/pytest-ralph.local.json\n"
    assert "  updated .gitignore: added .pytest_ralph/ (the state folder), " \
           ".claude/pytest-ralph.local.json (the Claude Code arming file)" in \
           sc.render(done, tmp_path, driver="claude").splitlines()
    assert "then start Claude Code in this folder (below)" in sc.render(done, tmp_path,
                                                                       driver="claude")
    assert "pytest --ralph --ralph-agent" in sc.render(done, tmp_path)
    again = sc.scaffold(tmp_path, config=None, state_dir=tmp_path / ".pytest_ralph",
                        keys=KEYS, ignores=arming)
    assert "  skipped .gitignore: .pytest_ralph/, .claude/pytest-ralph.local.json are already " \
           "ignored" in sc.render(again, tmp_path).splitlines()


def test_an_existing_prd_that_does_not_load_is_kept_and_noted(tmp_path: Path) -> None:
    bad = '{"userStories": [{"id": "US-1", "passes": "yes"}]'  # truncated
    write(tmp_path, {"prd.json": bad})
    done = run(tmp_path)
    assert (tmp_path / "prd.json").read_text(encoding="utf-8") == bad
    (note,) = [n for n in done.notes if "does not load" in n]
    assert note.startswith("prd.json does not load (1 problem; the first: ")
    assert note.endswith("fix it before the gate or the loop: `pytest prd.json` lists every "
                         "problem")


@pytest.mark.usefixtures("clean")
def test_ralph_init_next_line_says_what_the_claude_preset_runs_unattended(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--ralph-init")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    [line] = [x for x in result.stdout.lines if x.startswith("next: ")]
    assert line.endswith(
        "`pytest --ralph --ralph-agent claude` (or another agent); it runs claude with "
        "`--dangerously-skip-permissions`, which lets it approve every tool (edit any file, run "
        "any command) without asking: the loop's sandbox confines it to the project folder "
        "where bubblewrap works (`--ralph-sandbox required` insists; off, nothing confines "
        "it), and `pytest --ralph-doctor --ralph-agent claude` checks the CLI first"), line
