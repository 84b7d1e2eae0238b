"""The modules in test folders the guarded tests import, found by reading their source
(pytest_ralph.oracle.staticimports): guarded for a ``run`` criterion's pytest too, whose
imports no report names (red-team finding: an agent edited tests/helpers.py behind `run:
python -m pytest tests/test_calc.py`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.oracle.judges import TESTS_IMPORT
from pytest_ralph.oracle.phasewatch import write_judges
from pytest_ralph.oracle.snapshot import (
    Change,
    compare,
    snapshot,
    snapshot_from_json,
    snapshot_to_json,
    with_imports,
)
from pytest_ralph.oracle.staticimports import imported_names, imported_test_modules
from pytest_ralph.prd.load import load_prd
from tests.support.prd import story

RUN = "python -m pytest -q -p no:cacheprovider tests/test_calc.py"
TEST = ("from helpers import CASES\nfrom calc import add\n\n\ndef test_add():\n"
        "    for args, want in CASES:\n        assert add(*args) == want\n")


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def prd_file(root: Path, *criteria: object) -> Path:
    path = root / "prd.json"
    path.write_text(json.dumps({"project": "Imports", "userStories": [story("US-1", *criteria)]}))
    return path


def test_imports_are_read_from_every_statement_and_a_broken_file_has_none() -> None:
    source = (b"import a.b, c\nfrom . import d\nfrom ..e import f\nfrom j import *\n"
              b"def g():\n    from h import i\n")
    assert sorted(imported_names(source)) == [
        (0, "a.b", ()), (0, "c", ()), (0, "h", ("i",)), (0, "j", ()), (1, "", ("d",)),
        (2, "e", ("f",))]
    assert imported_names(b"def (:\n") == []
    assert imported_names(b"x = 1\0\n") == []


def test_imports_resolve_to_test_folder_files_recursively(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    write(root, {
        "calc.py": "from tests.never import X\n",  # code under test: not followed
        "tests/test_a.py": "import helpers\nfrom tests.pkg import sub\nfrom calc import add\n"
                           "import os, pytest\n",
        "tests/helpers.py": "from fixtures.data import PAIRS\n",
        "tests/fixtures/__init__.py": "",
        "tests/fixtures/data.py": "from . import more\nfrom .deep.leaf import Y\n",
        "tests/fixtures/more.py": "",
        "tests/fixtures/deep/leaf.py": "",
        "tests/pkg/__init__.py": "",
        "tests/pkg/sub.py": "def (:\n",  # unparsable: found, its imports skipped
        "tests/never.py": "",
        "tests/unused.py": "",
    })
    got = imported_test_modules([root / "tests" / "test_a.py"], root, (root,))
    assert got == ["tests/fixtures/__init__.py", "tests/fixtures/data.py",
                   "tests/fixtures/deep/leaf.py", "tests/fixtures/more.py", "tests/helpers.py",
                   "tests/pkg/__init__.py", "tests/pkg/sub.py"]
    # Bounded: at most `limit` files are read (the guarded file is the first).
    assert imported_test_modules([root / "tests" / "test_a.py"], root, (root,), limit=1) == [
        "tests/helpers.py", "tests/pkg/__init__.py", "tests/pkg/sub.py"]
    # A link out of the project, or to the code under test, is not a test module.
    (root / "tests" / "linked.py").symlink_to(root / "calc.py")
    (root / "tests" / "test_b.py").write_text("import linked\n")
    assert imported_test_modules([root / "tests" / "test_b.py"], root, (root,)) == []


def test_a_run_criterions_test_helpers_are_guarded(tmp_path: Path) -> None:
    write(tmp_path, {"calc.py": "def add(a, b):\n    return a - b\n",
                     "tests/test_calc.py": TEST, "tests/helpers.py": "CASES = [((2, 3), 5)]\n",
                     "tests/unused.py": ""})
    prd = load_prd(prd_file(tmp_path, {"run": RUN}, {"run": "make docs"}))
    start = snapshot(prd, tmp_path)
    assert start.watch[TESTS_IMPORT] == ("tests/helpers.py",)
    assert start.links[TESTS_IMPORT] == {"US-1::AC1"}  # the criterion whose test imports it
    assert [i.split("\t")[0] for i in start.listings[TESTS_IMPORT]] == ["tests/helpers.py"]
    assert tmp_path / "tests" / "helpers.py" in start.judges(tmp_path)
    write_judges(tmp_path / "judges.json", start, tmp_path)
    assert str(tmp_path / "tests" / "helpers.py") in json.loads(
        (tmp_path / "judges.json").read_text())["files"]
    stored = snapshot_from_json(json.loads(json.dumps(snapshot_to_json(start))))
    assert stored == start
    # The honest work: the code under test, a new helper nobody imports.
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "tests" / "unused.py").write_text("X = 1\n")
    assert compare(stored, snapshot(prd, tmp_path, start=stored)) == []
    # The cheat: the expected values rewritten to what the wrong code returns.
    (tmp_path / "tests" / "helpers.py").write_text("CASES = [((2, 3), -1)]\n")
    assert compare(stored, snapshot(prd, tmp_path, start=stored)) == [
        Change(TESTS_IMPORT, "changed", ("US-1::AC1",), "changed tests/helpers.py")]
    (tmp_path / "tests" / "helpers.py").unlink()
    (changed,) = compare(stored, snapshot(prd, tmp_path, start=stored))
    assert changed.describe() == ("modules the tests import from test folders changed: "
                                  "removed tests/helpers.py")


def test_a_helper_the_imports_report_names_too_is_said_once(tmp_path: Path) -> None:
    write(tmp_path, {"calc.py": "", "tests/test_calc.py": TEST,
                     "tests/helpers.py": "CASES = []\n"})
    prd = load_prd(prd_file(tmp_path, {"pytest": "tests/test_calc.py"}))
    report = [{"path": [str(tmp_path / "tests"), str(tmp_path)], "modules": {},
               "sources": [str(tmp_path / "tests" / "helpers.py")]}]
    start = with_imports(snapshot(prd, tmp_path), report, tmp_path, prd=prd)
    (tmp_path / "tests" / "helpers.py").write_text("CASES = [1]\n")
    assert [c.subject for c in compare(start, snapshot(prd, tmp_path, start=start))] == [
        TESTS_IMPORT]


@pytest.mark.parametrize("case", ["target", "unguarded", "older"])
def test_what_the_agent_writes_is_left_out(tmp_path: Path, case: str) -> None:
    write(tmp_path, {"calc.py": "", "tests/test_calc.py": TEST,
                     "tests/helpers.py": "CASES = []\n"})
    if case == "target":  # a check asks the agent to write it
        prd = load_prd(prd_file(tmp_path, {"run": RUN},
                                {"file": "tests/helpers.py", "contains": "CASES"}))
        assert TESTS_IMPORT not in snapshot(prd, tmp_path).digests
    elif case == "unguarded":  # a test file a pytest check names that does not exist yet
        (tmp_path / "tests" / "test_calc.py").unlink()
        prd = load_prd(prd_file(tmp_path, {"pytest": "tests/test_calc.py"}))
        start = snapshot(prd, tmp_path)
        (tmp_path / "tests" / "test_calc.py").write_text(TEST)
        assert TESTS_IMPORT not in snapshot(prd, tmp_path, start=start).digests
    else:  # a run started by an older version: nothing new is guarded half-way
        prd = load_prd(prd_file(tmp_path, {"run": RUN}))
        data = snapshot_to_json(snapshot(prd, tmp_path))
        for key in ("digests", "links", "listings", "watch"):
            del data[key][TESTS_IMPORT]
        older = snapshot_from_json(data)
        (tmp_path / "tests" / "helpers.py").write_text("CASES = [1]\n")
        assert compare(older, snapshot(prd, tmp_path, start=older)) == []


def test_the_loop_refuses_an_agent_that_edits_a_run_criterions_helpers(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    def project() -> None:
        write(pytester.path, {"calc.py": "def add(a, b):\n    return a - b\n",
                              "tests/test_calc.py": TEST,
                              "tests/helpers.py": "CASES = [((2, 3), 5)]\n"})

    project()
    write_prd(story("US-001", {"run": RUN}))
    cheat = agent("cheat.py", "import pathlib\npathlib.Path('tests/helpers.py')"
                              ".write_text('CASES = [((2, 3), -1)]\\n')\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cheat,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()  # the limit, not complete
    result.stdout.fnmatch_lines(["*Criteria changed: modules the tests import from test "
                                 "folders changed: changed tests/helpers.py*"])
    # An honest agent, on the project as it was: fixing calc.py completes the run.
    pytester.run("rm", "-rf", ".pytest_ralph")
    project()
    fix = agent("fix.py", "import pathlib\npathlib.Path('calc.py')"
                          ".write_text('def add(a, b):\\n    return a + b\\n')\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fix,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 0, result.stdout.str()
    assert "Criteria changed" not in result.stdout.str()
