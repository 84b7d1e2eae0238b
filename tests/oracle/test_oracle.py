"""The oracle-integrity guard: what it hashes, what it ignores, and the loop refusing to end on
an edited oracle (the tampering scenarios), plus flaky criteria re-checks."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.checks.verdicts import apply
from pytest_ralph.oracle.snapshot import (
    LOOP_CONFTESTS,
    Change,
    compare,
    snapshot,
    snapshot_from_json,
    snapshot_to_json,
)
from pytest_ralph.prd.load import load_prd
from tests.support.loop import agent_runs, report_text, run_json
from tests.support.prd import story


def prd_file(root: Path, *stories: dict[str, Any]) -> Path:
    path = root / "prd.json"
    path.write_text(json.dumps({"project": "Guard", "userStories": list(stories)}, indent=2))
    return path


def subjects(root: Path, path: Path, **kw: Any) -> set[str]:
    return set(snapshot(load_prd(path), root, **kw).digests)


def changes_after(root: Path, path: Path, edit: Callable[[], None], **kw: Any) -> list[str]:
    start = snapshot(load_prd(path), root, **kw)
    edit()
    now = snapshot(load_prd(path), root, start=start, **kw)
    return [ch.describe() for ch in compare(start, now)]


# -- what is guarded -----------------------------------------------------------------------------


def test_guards_definitions_linked_tests_schemas_modules_and_conftests(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    (tmp_path / "schema.json").write_text("{}")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "checks.py").write_text("def ok():\n    return True\n")
    path = prd_file(tmp_path, story(
        "US-1", {"pytest": "tests/test_a.py::test_a"}, {"schema": "schema.json",
                                                         "instance": "data.json"},
        {"python": "pkg.checks:ok"}, {"run": "make build"}, {"exists": "out.txt"},
        {"file": "notes.md", "contains": "x"},
        {"sql": "select 1", "db": "app.db", "expect": 1}, "Plain text"))
    got = subjects(tmp_path, path, search_path=[])
    assert {f"criterion US-1::AC{i}" for i in range(1, 9)} <= got
    assert {"file tests/test_a.py", "file schema.json", "file pkg/checks.py",
            "file conftest.py", "file tests/conftest.py"} <= got
    # What the agent is meant to change is never hashed.
    for target in ("data.json", "out.txt", "notes.md", "app.db"):
        assert f"file {target}" not in got
    # Without a -c file, every configuration file pytest would find is guarded.
    assert "pytest configuration pytest.ini" in got
    assert "pytest configuration pyproject.toml" in got


def test_each_kind_of_change_is_named(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    test = tmp_path / "tests" / "test_a.py"
    test.write_text("def test_a():\n    assert 1 == 2\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_a.py"}, {"run": "false"}))

    def edit() -> None:
        test.unlink()
        (tmp_path / "conftest.py").write_text("collect_ignore = []\n")
        data = json.loads(path.read_text())
        data["userStories"][0]["acceptanceCriteria"][1] = {"run": "true"}
        data["userStories"][0]["passes"] = True  # not part of any definition
        data["userStories"][0]["notes"] = "done!"
        path.write_text(json.dumps(data))

    assert changes_after(tmp_path, path, edit) == [
        "criterion US-1::AC2 changed", "file conftest.py added", "file tests/test_a.py deleted",
        f"{LOOP_CONFTESTS} changed: added conftest.py"]


def test_removed_and_added_criteria(tmp_path: Path) -> None:
    path = prd_file(tmp_path, story("US-1", {"run": "false"}, {"run": "true"}))

    def edit() -> None:
        data = json.loads(path.read_text())
        data["userStories"][0]["acceptanceCriteria"] = [{"run": "false"}]
        data["userStories"].append(story("US-2", {"run": "true"}))
        path.write_text(json.dumps(data))

    assert changes_after(tmp_path, path, edit) == [
        "criterion US-1::AC2 removed", "criterion US-2::AC1 added"]


def test_a_test_file_absent_at_the_start_is_the_agents_to_write(tmp_path: Path) -> None:
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_new.py"}))
    start = snapshot(load_prd(path), tmp_path)
    assert start.unguarded == ("tests/test_new.py",)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_new.py").write_text("def test_x():\n    pass\n")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now) == []
    # ... and so are the files around it: a conftest.py with fixtures for the new test, say,
    # deeper down (tests/unit/), where neither the check phase nor the loop loads it first.
    (tmp_path / "tests" / "unit").mkdir()
    (tmp_path / "tests" / "unit" / "conftest.py").write_text("")
    (tmp_path / "tests" / "__init__.py").write_text("")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now) == []
    # A test* folder's conftest.py next to the PRD is loaded by every check phase (pytest
    # loads the conftest.py of the test* folders of its argument's folder) and by the loop.
    (tmp_path / "tests" / "conftest.py").write_text("")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now) == [Change(LOOP_CONFTESTS, "changed", ("US-1::AC1",),
                                          "added tests/conftest.py")]
    (tmp_path / "tests" / "conftest.py").unlink()
    # But the conftest.py in the PRD's folder is loaded by every check (and by the loop).
    (tmp_path / "conftest.py").write_text("")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now) == [
        Change("file conftest.py", "added", ("US-1::AC1",)),
        Change(LOOP_CONFTESTS, "changed", ("US-1::AC1",), "added conftest.py")]


def test_a_folder_target_guards_its_files_and_their_names(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "unit" / "__pycache__").mkdir(parents=True)
    (tests / ".hidden").mkdir()
    (tests / "unit" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tests / "unit" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\0")
    path = prd_file(tmp_path, story("US-1", {"pytest": ["tests"]}))
    start = snapshot(load_prd(path), tmp_path)
    assert {"file tests/unit/test_a.py", "folder tests/ (files)", "file tests/conftest.py",
            "file tests/unit/conftest.py", "file tests/__init__.py",
            "file tests/unit/__init__.py", "pytest configuration tests/pytest.ini"} <= set(
        start.digests)
    assert not any("__pycache__" in s or ".hidden" in s for s in start.digests)
    # Caches, bytecode and hidden folders may change.
    (tests / "unit" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\1")
    (tests / "unit" / "__pycache__" / "other.cpython-311.pyc").write_bytes(b"\1")
    (tests / ".hidden" / "x.py").write_text("")
    assert compare(start, snapshot(load_prd(path), tmp_path, start=start)) == []
    (tests / "unit" / "conftest.py").write_text("")
    (tests / "unit" / "test_a.py").write_text("import pytest\npytestmark = pytest.mark.skip\n")
    assert [c.describe() for c in compare(start, snapshot(load_prd(path), tmp_path,
                                                           start=start))] == [
        "file tests/unit/test_a.py changed",
        "folder tests/ (files) changed: added tests/unit/conftest.py",
        "file tests/unit/conftest.py added"]


def test_any_new_file_in_a_folder_target_is_a_change(tmp_path: Path) -> None:
    # A new file in the folder can patch pytest when it is imported and flip the results of
    # the folder's other tests in the same run: it is a change, whatever its name or suffix.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    assert 1 == 2\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests"}))
    for name in ("test_b.py", "helpers/patch.py", "data.txt"):
        def add(name: str = name) -> None:
            (tmp_path / "tests" / name).parent.mkdir(exist_ok=True)
            (tmp_path / "tests" / name).write_text("import _pytest\n")

        assert changes_after(tmp_path, path, add) == [
            f"folder tests/ (files) changed: added tests/{name}"], name
        (tmp_path / "tests" / name).unlink()


def test_a_new_test_named_by_its_own_criterion_may_be_written_in_a_folder_target(
        tmp_path: Path) -> None:
    (tmp_path / "tests" / "new").mkdir(parents=True)
    (tmp_path / "tests" / "new" / "test_old.py").write_text("def test_a():\n    pass\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests"}),
                    story("US-2", {"pytest": "tests/test_new.py::test_x"},
                          {"pytest": "tests/feature"}))
    start = snapshot(load_prd(path), tmp_path)
    assert start.unguarded == ("tests/feature", "tests/test_new.py")

    def write() -> None:
        (tmp_path / "tests" / "test_new.py").write_text("def test_x():\n    pass\n")
        (tmp_path / "tests" / "feature").mkdir()
        (tmp_path / "tests" / "feature" / "test_f.py").write_text("def test_f():\n    pass\n")

    assert changes_after(tmp_path, path, write) == []
    (tmp_path / "tests" / "new" / "test_other.py").write_text("")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now) == [Change("folder tests/ (files)", "changed", ("US-1::AC1",),
                                          "added tests/new/test_other.py")]


def test_only_the_pytest_section_of_pyproject_is_guarded(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = []\n\n'
                         '[tool.pytest.ini_options]\nralph_checks = ["Docs = make docs"]\n')
    path = prd_file(tmp_path, story("US-1", "Docs"))

    def add_dependency() -> None:
        pyproject.write_text(pyproject.read_text().replace("[]", '["requests"]'))

    def remap_to_true() -> None:
        pyproject.write_text(pyproject.read_text().replace("make docs", "true"))

    assert changes_after(tmp_path, path, add_dependency, inifile=pyproject) == []
    assert changes_after(tmp_path, path, remap_to_true, inifile=pyproject) == [
        "pytest configuration pyproject.toml changed"]


def test_an_ini_files_pytest_section_is_guarded(tmp_path: Path) -> None:
    ini = tmp_path / "tox.ini"
    ini.write_text("[tox]\nenvlist = py311\n\n[pytest]\naddopts = -q\n")
    path = prd_file(tmp_path, story("US-1", {"run": "false"}))

    def edit_tox() -> None:
        ini.write_text(ini.read_text().replace("py311", "py312"))

    def edit_pytest() -> None:
        ini.write_text(ini.read_text().replace("-q", "-q -p evil"))

    assert changes_after(tmp_path, path, edit_tox, inifile=ini) == []
    assert changes_after(tmp_path, path, edit_pytest, inifile=ini) == [
        "pytest configuration tox.ini changed"]


def test_python_check_module_is_found_without_importing(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "boom.py"
    module.write_text("raise SystemExit('imported!')\ndef ok():\n    return True\n")
    path = prd_file(tmp_path, story("US-1", {"python": "pkg.boom:ok"}))

    def weaken() -> None:
        module.write_text("def ok():\n    return True\n")

    assert changes_after(tmp_path, path, weaken, search_path=[]) == [
        "file pkg/boom.py changed"]


def test_config_files_pytest_would_find_for_a_test_are_guarded(tmp_path: Path) -> None:
    # A pytest check's pytest gets no -c: it takes the first configuration file it finds
    # walking up from its arguments, so one created beside a test takes over its run.
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_a.py").write_text("def test_a():\n    pass\n")
    ini = tmp_path / "tox.ini"
    ini.write_text("[pytest]\naddopts = -q\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/sub/test_a.py"}, {"run": "true"}))
    got = subjects(tmp_path, path, inifile=ini)
    for folder in ("tests/sub/", "tests/", ""):
        for name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini",
                     "pyproject.toml", "tox.ini", "setup.cfg"):
            assert f"pytest configuration {folder}{name}" in got

    def add_ini() -> None:
        (tmp_path / "tests" / "pytest.ini").write_text("[pytest]\naddopts = -p cheatplug\n")

    def add_empty_toml() -> None:  # moves the rootdir: pytest.toml counts even when empty
        (tmp_path / "tests" / "sub" / ".pytest.toml").write_text("")

    # With -c, only the pytest check is touched: the other checks' pytest gets the -c file.
    start = snapshot(load_prd(path), tmp_path, inifile=ini)
    add_ini()
    add_empty_toml()
    assert compare(start, snapshot(load_prd(path), tmp_path, inifile=ini, start=start)) == [
        Change("pytest configuration tests/sub/.pytest.toml", "added", ("US-1::AC1",)),
        Change("pytest configuration tests/pytest.ini", "added", ("US-1::AC1",))]
    # Without -c, the ones in the PRD's folder (and up to the rootdir) touch every criterion.
    (tmp_path / "tests" / "pytest.ini").unlink()
    ini.unlink()
    start = snapshot(load_prd(path), tmp_path)
    ini.write_text("[pytest]\naddopts = -q\n")
    assert compare(start, snapshot(load_prd(path), tmp_path, start=start)) == [
        Change("pytest configuration tox.ini", "added", ("US-1::AC1", "US-1::AC2"))]


def test_a_config_file_pytest_ignores_may_appear(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_a.py"}))

    def ignored() -> None:  # no pytest section: pytest reads them as if they were not there
        (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
        (tmp_path / "tox.ini").write_text("[tox]\nenvlist = py311\n")
        (tmp_path / "tests" / "setup.cfg").write_text("[flake8]\nmax-line-length = 100\n")

    def taken() -> None:  # these move pytest's rootdir, and with it what conftest.py it loads
        (tmp_path / "tests" / "pytest.ini").write_text("")
        (tmp_path / "tests" / "pyproject.toml").write_text('[project]\nname = "x"\n')

    assert changes_after(tmp_path, path, ignored) == []
    assert changes_after(tmp_path, path, taken) == [
        "pytest configuration tests/pytest.ini added",
        "pytest configuration tests/pyproject.toml added"]
    # A pytest section added to a file that had none is a change too.
    assert changes_after(tmp_path, path, lambda: (tmp_path / "tox.ini").write_text(
        "[tox]\nenvlist = py311\n[pytest]\naddopts = -p cheatplug\n")) == [
        "pytest configuration tox.ini added"]


def test_a_pytest_toml_is_guarded_by_its_pytest_table(tmp_path: Path) -> None:
    toml = tmp_path / "tests" / "pytest.toml"
    toml.parent.mkdir()
    toml.write_text('[pytest]\naddopts = ["-q"]\n\n[other]\nx = 1\n')
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_a.py"}))

    def edit_other() -> None:
        toml.write_text(toml.read_text().replace("x = 1", "x = 2"))

    def edit_pytest() -> None:
        toml.write_text(toml.read_text().replace('"-q"', '"-p", "cheatplug"'))

    assert changes_after(tmp_path, path, edit_other) == []
    assert changes_after(tmp_path, path, edit_pytest) == [
        "pytest configuration tests/pytest.toml changed"]


def test_init_files_on_the_way_to_a_guarded_test_are_guarded(tmp_path: Path) -> None:
    # A new __init__.py changes the test modules' names and how they import, and runs code.
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "tests" / "__init__.py").write_text("")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/unit/test_a.py"}))

    def edit() -> None:
        (tmp_path / "tests" / "unit" / "__init__.py").write_text("import cheat\n")
        (tmp_path / "__init__.py").write_text("")
        (tmp_path / "tests" / "__init__.py").unlink()

    assert changes_after(tmp_path, path, edit) == [
        "file tests/unit/__init__.py added", "file tests/__init__.py deleted",
        "file __init__.py added"]


def test_a_python_check_module_cannot_be_shadowed(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "__init__.py").write_text("")
    (tmp_path / "checks" / "mod.py").write_text("def ok():\n    return False\n")
    path = prd_file(tmp_path, story("US-1", {"python": "checks.mod:ok"}))
    got = subjects(tmp_path, path, search_path=[])
    assert {"file checks/__init__.py", "file checks/mod.py", "file checks/mod/__init__.py"} <= got
    assert "file checks.py" not in got  # the package checks/ wins over it

    def shadow() -> None:  # a package wins over a module of the same name at import
        (tmp_path / "checks" / "mod").mkdir()
        (tmp_path / "checks" / "mod" / "__init__.py").write_text("def ok():\n    return True\n")

    def edit_parent() -> None:
        (tmp_path / "checks" / "__init__.py").write_text("import sys\n")

    assert changes_after(tmp_path, path, shadow, search_path=[]) == [
        "file checks/mod/__init__.py added"]
    # Now the package is what import finds: it is guarded, and mod.py no longer matters.
    got = subjects(tmp_path, path, search_path=[])
    assert "file checks/mod/__init__.py" in got
    assert "file checks/mod.py" not in got
    assert changes_after(tmp_path, path, edit_parent, search_path=[]) == [
        "file checks/__init__.py changed"]


def test_a_module_found_later_on_the_search_path_cannot_be_shadowed_from_the_rootdir(
        tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "judge.py").write_text("def ok():\n    return False\n")
    path = prd_file(tmp_path, story("US-1", {"python": "judge:ok"}))

    def shadow() -> None:
        (tmp_path / "judge.py").write_text("def ok():\n    return True\n")

    assert changes_after(tmp_path, path, shadow, search_path=[str(lib)]) == [
        "file judge.py added"]


def test_the_modules_beside_the_verifier_script_are_guarded(tmp_path: Path) -> None:
    # `python "tools dir/my judge.py"` puts "tools dir" first on sys.path: a json.py there
    # shadows the standard library.
    tools = tmp_path / "tools dir"
    tools.mkdir()
    (tools / "my judge.py").write_text("import json, helpers\n")
    (tools / "helpers.py").write_text("STRICT = True\n")
    path = prd_file(tmp_path, story("US-1", "Docs are written", {"run": "true"}))
    verifier = 'python "tools dir/my judge.py"'

    def new_json() -> None:
        (tools / "json.py").write_text("def loads(s):\n    return {'verdict': 'pass'}\n")

    def new_package() -> None:
        (tools / "json").mkdir()
        (tools / "json" / "__init__.py").write_text("")

    def edit_helper() -> None:
        (tools / "helpers.py").write_text("STRICT = False\n")

    def edit_judge() -> None:
        (tools / "my judge.py").write_text("import helpers\n")

    def other_files() -> None:
        (tools / "notes.txt").write_text("")
        (tools / "sub").mkdir()
        (tools / "sub" / "json.py").write_text("")

    for edit, detail in ((new_json, "added tools dir/json.py"),
                         (new_package, "added tools dir/json/__init__.py"),
                         (edit_helper, "changed tools dir/helpers.py")):
        assert changes_after(tmp_path, path, edit, verifier=verifier) == [
            f"folder tools dir/ (modules) changed: {detail}"], edit.__name__
    assert changes_after(tmp_path, path, edit_judge, verifier=verifier) == [
        "file tools dir/my judge.py changed"]
    assert changes_after(tmp_path, path, other_files, verifier=verifier) == []


def test_files_around_a_new_test_touch_only_the_criteria_of_guarded_tests(
        tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_old.py").write_text("def test_old():\n    pass\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_old.py"}),
                    story("US-2", {"pytest": "tests/test_new.py"}, {"run": "true"}))
    start = snapshot(load_prd(path), tmp_path)
    (tmp_path / "tests" / "test_new.py").write_text("def test_new(fixture):\n    pass\n")
    (tmp_path / "tests" / "conftest.py").write_text("import pytest\n")
    now = snapshot(load_prd(path), tmp_path, start=start)
    # tests/ is a test* folder beside the PRD: its conftest.py is loaded by every check phase,
    # so it touches every criterion there, besides the guarded test's own.
    assert compare(start, now) == [
        Change("file tests/conftest.py", "added", ("US-1::AC1",)),
        Change(LOOP_CONFTESTS, "changed", ("US-1::AC1", "US-2::AC1", "US-2::AC2"),
               "added tests/conftest.py")]


def test_standard_library_names_in_the_rootdir_are_guarded(tmp_path: Path) -> None:
    # The check phase's pytest has the rootdir first on sys.path when it imports pdb (and
    # others) late: a pdb.py there can patch pytest and pass every criterion, `run` ones too.
    (tmp_path / "types.py").write_text("X = 1\n")  # the project's own: it may stay
    path = prd_file(tmp_path, story("US-1", {"run": "false"}), story("US-2", "Docs"))
    assert "folder ./ (standard-library names)" in subjects(tmp_path, path)
    ext = f"pdb{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    for name, detail in (("code.py", "added code.py"), ("codeop.pyc", "added codeop.pyc"),
                         (ext, f"added {ext}"), ("cmd/__init__.py", "added cmd/__init__.py"),
                         ("types.py", "changed types.py")):
        def add(name: str = name) -> None:
            (tmp_path / name).parent.mkdir(exist_ok=True)
            (tmp_path / name).write_text("import _pytest\n")

        start = snapshot(load_prd(path), tmp_path)
        add()
        assert compare(start, snapshot(load_prd(path), tmp_path, start=start)) == [
            Change("folder ./ (standard-library names)", "changed", ("US-1::AC1", "US-2::AC1"),
                   detail)], name
        if name == "types.py":
            (tmp_path / name).write_text("X = 1\n")
        else:
            (tmp_path / name).unlink()

    def harmless() -> None:
        (tmp_path / "mycode.py").write_text("")  # not a standard-library name
        (tmp_path / "code.txt").write_text("")  # not a module
        # A folder without __init__.py loses at import to any module of its name: mkdocs'
        # site/ cannot shadow the standard library's site.
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "index.html").write_text("")

    assert changes_after(tmp_path, path, harmless) == []


def test_a_namespace_folder_named_after_a_missing_standard_library_module_is_a_change(
        tmp_path: Path) -> None:
    # `from _winapi import x` on Linux imports _winapi/x.py from a folder _winapi/ first on
    # sys.path: nothing else is found under that name.
    missing = next(n for n in ("_winapi", "winreg", "msvcrt", "_posixsubprocess", "grp")
                   if importlib.util.find_spec(n) is None)
    path = prd_file(tmp_path, story("US-1", {"run": "false"}))

    def add() -> None:
        (tmp_path / missing).mkdir()
        (tmp_path / missing / "anything.py").write_text("")

    assert changes_after(tmp_path, path, add) == [
        f"folder ./ (standard-library names) changed: added {missing}/"]


def test_standard_library_names_in_the_basedir_of_a_guarded_test_are_guarded(
        tmp_path: Path) -> None:
    # pytest's default `prepend` import mode puts the first folder above a test file without
    # __init__.py first on sys.path: tests/ for tests/test_a.py.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "test_b.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "suite" / "unit").mkdir(parents=True)
    (tmp_path / "suite" / "conftest.py").write_text("")
    (tmp_path / "suite" / "unit" / "test_c.py").write_text("def test_c():\n    pass\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_a.py"}, {"run": "true"},
                                    {"pytest": "pkg/sub/test_b.py"},
                                    {"pytest": "suite"}))
    start = snapshot(load_prd(path), tmp_path)
    assert start.links["folder tests/ (standard-library names)"] == {"US-1::AC1"}
    assert start.links["folder suite/unit/ (standard-library names)"] == {"US-1::AC4"}
    # suite/conftest.py is imported with suite/ first on sys.path.
    assert start.links["folder suite/ (standard-library names)"] == {"US-1::AC4"}
    # pkg/ is a package: the basedir of pkg/sub/test_b.py is the rootdir.
    assert not any(s.startswith("folder pkg") for s in start.digests)
    for name in ("tests/pdb.py", "pkg/cmd.py", "suite/unit/code.py"):
        (tmp_path / name).write_text("")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now)[0] == Change("folder tests/ (standard-library names)",
                                            "changed", ("US-1::AC1",), "added tests/pdb.py")
    assert [c.describe() for c in compare(start, now)] == [
        "folder tests/ (standard-library names) changed: added tests/pdb.py",
        "folder suite/ (files) changed: added suite/unit/code.py",
        "folder suite/unit/ (standard-library names) changed: added suite/unit/code.py"]


def test_check_targets_are_left_out_of_folder_name_lists(tmp_path: Path) -> None:
    # The agent is meant to write the target of an exists / file / schema / sql check, even
    # inside a folder a pytest check names.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "schema.json").write_text("{}")
    path = prd_file(tmp_path, story(
        "US-1", {"pytest": "tests"}, {"exists": "tests/data/sample.txt"},
        {"file": "tests/golden.txt", "contains": "x"},
        {"schema": "schema.json", "instance": "tests/out.json"},
        {"sql": "select 1", "db": "tests/app.db", "expect": 1}, {"exists": "tests/gen"}))

    def write_targets() -> None:
        (tmp_path / "tests" / "data").mkdir()
        for name in ("data/sample.txt", "golden.txt", "out.json", "app.db"):
            (tmp_path / "tests" / name).write_text("x")
        (tmp_path / "tests" / "gen").mkdir()  # in a target folder, any file but a module
        (tmp_path / "tests" / "gen" / "report.html").write_text("")

    assert changes_after(tmp_path, path, write_targets) == []

    def write_modules() -> None:  # ... but modules pytest may import are still changes
        (tmp_path / "tests" / "data" / "conftest.py").write_text("")
        (tmp_path / "tests" / "gen" / "test_evil.py").write_text("")

    assert changes_after(tmp_path, path, write_modules) == [
        "folder tests/ (files) changed: added tests/data/conftest.py, tests/gen/test_evil.py",
        "file tests/data/conftest.py added"]


def test_a_name_list_change_names_at_most_five_files(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    for name in ("old_a.py", "old_b.py"):
        (tmp_path / "tests" / name).write_text("")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests"}))

    def edit() -> None:
        for i in range(6):
            (tmp_path / "tests" / f"test_{i}.py").write_text("")
        (tmp_path / "tests" / "old_a.py").unlink()

    assert ("folder tests/ (files) changed: added tests/test_0.py, tests/test_1.py, "
            "tests/test_2.py, tests/test_3.py, tests/test_4.py, +2 more") in changes_after(
                tmp_path, path, edit)


def test_snapshot_json_keeps_name_lists_and_reads_older_snapshots(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests"}))
    start = snapshot(load_prd(path), tmp_path)
    assert start.listings["folder tests/ (files)"] == ("test_a.py",)
    data = json.loads(json.dumps(snapshot_to_json(start)))
    assert snapshot_from_json(data) == start
    del data["listings"]  # a snapshot an older version stored
    old = snapshot_from_json(data)
    assert old.listings == {}
    (tmp_path / "tests" / "test_b.py").write_text("")
    assert compare(old, snapshot(load_prd(path), tmp_path, start=old)) == [
        Change("folder tests/ (files)", "changed", ("US-1::AC1",))]


def test_apply_fails_the_touched_criteria_only() -> None:
    results = CheckResults((
        CriterionResult("p::US-1::AC1", "US-1", "AC1", "a", "run", "passed"),
        CriterionResult("p::US-1::AC2", "US-1", "AC2", "b", "run", "failed", "exit 1"),
        CriterionResult("p::US-2::AC1", "US-2", "AC1", "c", "text", "passed", claimed=True),
    ))
    out = apply(results, [Change("file tests/test_a.py", "changed", ("US-1::AC1", "US-1::AC2"))])
    a1, a2, b1 = out.criteria
    assert not a1.passed and a1.message.startswith(
        "criteria changed: file tests/test_a.py changed since the run started; expected")
    assert "--ralph-allow-criteria-edits" in a1.message
    assert not a2.passed and a2.message.endswith("the check itself also failed:\nexit 1")
    assert b1 == results.criteria[2]
    assert not out.complete
    assert "delete the files added" not in a1.message  # git checkout restores an edit


@pytest.mark.parametrize("change", [
    Change("folder tests/ (files)", "changed", ("US-1::AC1",), "added tests/test_more.py"),
    Change("file conftest.py", "added", ("US-1::AC1",))])
def test_apply_says_to_delete_what_was_added(change: Change) -> None:
    """``git checkout`` cannot restore an added file: the message says to delete it (an
    honest agent adding a regression test to a guarded folder learns why it fails)."""
    results = CheckResults((CriterionResult("p::US-1::AC1", "US-1", "AC1", "a", "pytest",
                                            "passed"),))
    (out,) = apply(results, [change]).criteria
    assert "; expected the checks that judge this criterion to stay as they were: delete the " \
           "files added there (a guarded folder takes no new file, not even a new test); " \
           "restore it" in out.message


# -- the loop: tampering never ends in exit 0 ----------------------------------------------------

FAILING_TEST = "def test_feature():\n    import feature\n    assert feature.answer() == 42\n"


def edit_prd_agent(change: str) -> str:
    """An agent body that loads prd.json, runs ``change`` on ``data``, and writes it back."""
    return ("import json, pathlib\np = pathlib.Path('prd.json')\ndata = json.loads(p.read_text())\n"
            f"{change}\np.write_text(json.dumps(data, indent=2))\n"
            "open('agent-runs.txt', 'a').write('run\\n')\n")


def write_agent(agent: Callable[[str, str], str], body: str) -> str:
    """An agent running ``body`` that counts its runs in agent-runs.txt."""
    return agent("agent.py", body + "\nopen('agent-runs.txt', 'a').write('run\\n')\n")


def test_agent_rewrites_a_run_command_to_true(pytester: pytest.Pytester,
                                              write_prd: Callable[..., Path],
                                              agent: Callable[[str, str], str]) -> None:
    prd = write_prd(story("US-001", {"text": "the build exists", "run": "test -f build.txt"}))
    cmd = agent("agent.py", edit_prd_agent(
        "data['userStories'][0]['acceptanceCriteria'][0]['run'] = 'true'\n"
        "data['userStories'][0]['passes'] = True"))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    out = result.stdout.str()
    assert result.ret == 6, out
    assert agent_runs(pytester) == 3
    result.stdout.fnmatch_lines([
        "[[]ralph iteration 1/5[]]", "*Result: no change; failing now: US-001::AC1",
        "*Criteria changed: criterion US-001::AC1 changed; not counted as progress*"])
    assert "refuses to report completion until they are restored" in out
    assert json.loads(prd.read_text())["userStories"][0]["passes"] is False
    report = report_text(pytester)
    assert "## Criteria changed" in report
    assert "| 1 | criterion US-001::AC1 | changed | US-001::AC1 |" in report
    streaks = [it["streak"] for it in run_json(pytester)["iterations"]]  # type: ignore[index]
    assert streaks == [0, 1, 2, 3]


def test_agent_deletes_a_linked_test_file(pytester: pytest.Pytester,
                                          write_prd: Callable[..., Path],
                                          agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, "import os\nos.remove('test_feature.py')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: file test_feature.py deleted*"])
    assert "| 1 | file test_feature.py | deleted | US-001::AC1 |" in report_text(pytester)


def test_agent_adds_a_skip_marker_to_a_linked_test(pytester: pytest.Pytester,
                                                   write_prd: Callable[..., Path],
                                                   agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent,
                      "import pathlib\np = pathlib.Path('test_feature.py')\n"
                      "p.write_text('import pytest\\n@pytest.mark.skip\\n' + p.read_text())")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: file test_feature.py changed*"])


def test_agent_weakens_a_linked_test_only_the_guard_catches_it(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, "import pathlib\npathlib.Path('test_feature.py')"
                                       ".write_text('def test_feature():\\n    assert True\\n')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    assert "criteria changed: file test_feature.py changed" in (
        pytester.path / ".pytest_ralph" / "progress.txt").read_text()
    # The same agent with the guard waived: the weakened test passes and the run completes.
    pytester.makepyfile(test_feature=FAILING_TEST)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-allow-criteria-edits")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*Criteria changed: file test_feature.py changed (allowed by "
        "--ralph-allow-criteria-edits)"])


def test_agent_prints_the_promise_and_does_nothing(pytester: pytest.Pytester,
                                                   write_prd: Callable[..., Path],
                                                   agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", {"text": "done", "run": "test -f done.txt"}))
    cmd = write_agent(agent, "print('All done. <promise>COMPLETE</promise>')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 6, result.stdout.str()
    assert agent_runs(pytester) == 3
    (log,) = (pytester.path / ".pytest_ralph" / "runs").glob("*/iteration-001/agent.log")
    assert "<promise>COMPLETE</promise>" in log.read_text()


def test_agent_adds_a_conftest_that_forces_passes(pytester: pytest.Pytester,
                                                  write_prd: Callable[..., Path],
                                                  agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", {"text": "done", "run": "test -f done.txt"}))
    conftest = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
                "def pytest_runtest_makereport(item, call):\n"
                "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
    cmd = write_agent(agent,
                      f"import pathlib\npathlib.Path('conftest.py').write_text({conftest!r})")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 6, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: file conftest.py added*"])


def test_agent_maps_a_text_criterion_to_true_in_a_new_ini(pytester: pytest.Pytester,
                                                          write_prd: Callable[..., Path],
                                                          agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", "Docs are written"))
    cmd = write_agent(agent, "import pathlib\npathlib.Path('pytest.ini').write_text("
                                       "'[pytest]\\nralph_checks = Docs are written = true\\n')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: pytest configuration pytest.ini added*"])


CHEATPLUG = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
             "def pytest_runtest_makereport(item, call):\n"
             "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


def test_agent_adds_a_config_file_beside_a_linked_test(pytester: pytest.Pytester,
                                                       write_prd: Callable[..., Path],
                                                       agent: Callable[[str, str], str]) -> None:
    # Without -c, tests/pytest.ini would be the first configuration file the pytest check's
    # pytest finds, and its addopts would load a plugin that forces passes.
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_feature.py").write_text(FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "tests/test_feature.py"}))
    cmd = write_agent(agent, "import pathlib\n"
                             f"pathlib.Path('cheatplug.py').write_text({CHEATPLUG!r})\n"
                             "pathlib.Path('tests/pytest.ini').write_text("
                             "'[pytest]\\naddopts = -p cheatplug\\n')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*Criteria changed: pytest configuration tests/pytest.ini added*"])
    assert "| 1 | pytest configuration tests/pytest.ini | added | US-001::AC1 |" in report_text(
        pytester)
    # Issue 20: the check is pinned to the project's configuration (-c), so even with the
    # guard waived the planted file configures nothing and the test still fails.
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-allow-criteria-edits",
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Result: no change; failing now: US-001::AC1"])


def test_restoring_the_oracle_lets_the_run_complete(pytester: pytest.Pytester,
                                                    write_prd: Callable[..., Path],
                                                    agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, """
import pathlib
runs = pathlib.Path('agent-runs.txt')
n = len(runs.read_text().splitlines()) if runs.exists() else 0
test, backup = pathlib.Path('test_feature.py'), pathlib.Path('backup.txt')
if n == 0:  # first: weaken the test
    backup.write_bytes(test.read_bytes())
    test.write_text('def test_feature():\\n    assert True\\n')
else:  # then: restore it and do the work
    test.write_bytes(backup.read_bytes())
    pathlib.Path('feature.py').write_text('def answer():\\n    return 42\\n')
""")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 0, result.stdout.str()
    assert agent_runs(pytester) == 2
    report = report_text(pytester)
    assert "| 1 | file test_feature.py | changed | US-001::AC1 |" in report
    assert "Outcome: **complete**" in report


# -- flaky criteria ------------------------------------------------------------------------------

# Passes on calls 1, 3, 5, ... and fails on 2, 4, 6, ...: each iteration's first check fails
# and its re-check passes.
FLIP = """
import pathlib, sys
p = pathlib.Path('flip-count.txt')
n = int(p.read_text()) + 1 if p.exists() else 1
p.write_text(str(n))
sys.exit(0 if n % 2 else 1)
"""


def test_a_criterion_that_fails_then_passes_on_a_recheck_is_flaky(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(flip=FLIP)
    write_prd(story("US-001", {"text": "flaky service answers", "run": "python flip.py"},
                    {"text": "never", "run": "test -f never.txt"}))
    cmd = write_agent(agent, "pass")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 6, result.stdout.str()
    assert agent_runs(pytester) == 3
    result.stdout.fnmatch_lines([
        "[[]ralph iteration 1/5[]]", "*State: 1/2 passing (+0); identical-failure streak 1/3",
        "  Flaky: US-001::AC1 failed, then passed on a re-check (left out of the breaker's "
        "fingerprint)"])
    iterations = run_json(pytester)["iterations"]
    assert [it["flaky"] for it in iterations] == [[], ["US-001::AC1"], ["US-001::AC1"],  # type: ignore[index]
                                                   ["US-001::AC1"]]
    assert [it["streak"] for it in iterations] == [0, 1, 2, 3]  # type: ignore[index]
    assert "## Flaky criteria" in report_text(pytester)
    assert list((pytester.path / ".pytest_ralph" / "runs").glob(
        "*/iteration-001/recheck/check.json"))


def test_a_real_regression_is_not_flaky(pytester: pytest.Pytester,
                                        write_prd: Callable[..., Path],
                                        agent: Callable[[str, str], str]) -> None:
    pytester.path.joinpath("keep.txt").write_text("x")
    write_prd(story("US-001", {"text": "keep", "run": "test -f keep.txt"},
                    {"text": "never", "run": "test -f never.txt"}))
    cmd = write_agent(agent, "import os\nif os.path.exists('keep.txt'): "
                                       "os.remove('keep.txt')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["  Regressions: US-001::AC1 passed before and fail now"])
    assert "Flaky" not in result.stdout.str()
    iterations = run_json(pytester)["iterations"]
    assert all(it["flaky"] == [] for it in iterations)  # type: ignore[attr-defined]


def test_the_verifier_script_is_guarded_for_text_criteria(tmp_path: Path) -> None:
    judge = tmp_path / "judge.py"
    judge.write_text("print('{\"verdict\": \"fail\", \"evidence\": \"no\"}')\n")
    path = prd_file(tmp_path, story("US-1", "Docs are written", {"run": "true"}))

    def always_pass() -> None:
        judge.write_text("print('{\"verdict\": \"pass\", \"evidence\": \"sure\"}')\n")

    start = snapshot(load_prd(path), tmp_path, verifier="python judge.py --strict")
    always_pass()
    now = snapshot(load_prd(path), tmp_path, verifier="python judge.py --strict", start=start)
    assert compare(start, now) == [Change("file judge.py", "changed", ("US-1::AC1",))]


def test_a_new_run_refuses_a_weakened_oracle_the_last_run_left(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    """Issue 20: an agent weakens the test, the run stops (here at its limit; a killed
    controller leaves the same), and a new run (--ralph-new) must not take the weakened test as
    its reference: it says what changed (a diff stat) and refuses, unless the user accepts."""
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, "import pathlib\npathlib.Path('test_feature.py')"
                             ".write_text('def test_feature():\\n    assert True\\n')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    for extra in ((), ("--ralph-new",)):
        result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd, *extra)
        assert result.ret == 4, result.stdout.str() + result.stderr.str()
        result.stderr.fnmatch_lines([
            "pytest-ralph: the criteria or the files that judge them changed since the last "
            "run * (limit) started:",
            "  test_feature.py | * +* -*",
            "*if you made these changes, rerun with --ralph-accept-changes*"])
    assert len(list((pytester.path / ".pytest_ralph" / "runs").iterdir())) == 1
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-accept-changes")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "pytest-ralph: the criteria or the files that judge them changed since the last run "
        "* (limit) started, accepted (--ralph-accept-changes):",
        "  test_feature.py | *"])
    # The second run's report (by time: the two runs may straddle midnight, and the name
    # carries the date).
    _first, second = sorted((pytester.path / ".pytest_ralph" / "reports").glob("ralph-demo-*.md"),
                            key=lambda path: path.stat().st_mtime_ns)
    assert "## Warnings" in second.read_text()
    assert "accepted with --ralph-accept-changes" in second.read_text()


# Detached from the agent's process group: rewrites every check.json it can find so that all
# criteria pass.
RESULTS_FORGER = r"""
import glob, json, os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
here = os.getcwd()
end = time.time() + 40
while time.time() < end:
    for path in glob.glob(".pytest_ralph/runs/*/iteration-*/check.json") + glob.glob(
            "/tmp/pytest-ralph-results-*/check.json"):
        try:
            data = json.load(open(path))
            if here not in json.dumps(data):  # another project's run (tests run in parallel)
                continue
            if any(c["outcome"] != "passed" for c in data["criteria"]):
                for c in data["criteria"]:
                    c["outcome"] = "passed"
                json.dump(data, open(path, "w"))
        except Exception:
            pass
    time.sleep(0.005)
os._exit(0)
"""


def test_a_background_process_forging_the_results_does_not_complete_the_run(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", {"text": "done", "run": "test -f done.txt"}))
    cmd = write_agent(agent, RESULTS_FORGER)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    assert not (pytester.path / "done.txt").exists()


# A pdb.py in the rootdir: pytest imports pdb when it configures itself, after the rootdir is
# first on sys.path, so this one patches every test report to "passed" in the check phase.
PDB_CHEAT = """
from _pytest.reports import TestReport
_make = TestReport.from_item_and_call.__func__
def _passed(cls, item, call):
    report = _make(cls, item, call)
    report.outcome, report.longrepr = 'passed', None
    return report
TestReport.from_item_and_call = classmethod(_passed)
def set_trace(*args, **kwargs):
    pass
class Pdb:
    pass
"""


def test_agent_shadows_a_standard_library_module_pytest_imports_late(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", {"text": "the build exists", "run": "test -f build.txt"}))
    cmd = write_agent(agent, f"import pathlib\npathlib.Path('pdb.py').write_text({PDB_CHEAT!r})")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*Criteria changed: folder ./ (standard-library names) changed: added pdb.py*"])
    assert ("| 1 | folder ./ (standard-library names) | changed: added pdb.py | US-001::AC1 |"
            in report_text(pytester))
    # The cheat is real: with the guard waived, the `run` criterion "passes" and the run ends.
    (pytester.path / "pdb.py").unlink()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-allow-criteria-edits")
    assert result.ret == 0, result.stdout.str()
    assert not (pytester.path / "build.txt").exists()


# Plants, where a check phase's PYTHONPYCACHEPREFIX would find it (the shared folder, and
# any run's own folder it can see in the temporary folder), bytecode for the installed
# _pytest/reports.py: the real source's size and modification time in the header, and a
# patch that makes every test report pass. Issue 20: this completed runs, and later an
# unrelated project's.
PYC_POISON = r"""
import glob, importlib.util, marshal, os, struct, sys, tempfile
import _pytest.reports as reports
source = reports.__file__
st = os.stat(source)
header = importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF,
                                                    st.st_size & 0xFFFFFFFF)
patch = (
    "\n_real = TestReport.from_item_and_call\n"
    "def _passed(item, call):\n"
    "    report = _real(item, call)\n"
    "    report.outcome = 'passed'\n"
    "    report.longrepr = None\n"
    "    return report\n"
    "TestReport.from_item_and_call = staticmethod(_passed)\n")
code = open(source).read() + patch
name = os.path.basename(source)[:-3] + "." + sys.implementation.cache_tag + ".pyc"
runs = glob.glob(os.path.join(tempfile.gettempdir(), "pytest-ralph-*"))
folders = [os.environ.get("PYTEST_RALPH_PYCACHE", "")] + runs
for prefix in [f for f in folders if f]:
    target = prefix + os.path.dirname(source) + "/" + name
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(header + marshal.dumps(compile(code, source, "exec")))
        print("poisoned", target)
    except OSError as exc:
        print("could not poison", target, exc.strerror)
"""


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_bytecode_planted_for_an_installed_module_is_never_loaded(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str], sandbox: str,
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the loop writes the bytecode the check phases load: confined, the agent cannot
    write the shared folder; unconfined, the run's own folder is checked before each phase
    and the shared one is never read.

    The run's temporary folder is one of this test's own: the cheat poisons every
    ``pytest-ralph-*`` folder it finds there, and in ``/tmp`` it would poison the private
    bytecode folders of the other tests' check processes that run at the same time (seen
    once in CI: a skipped test of another worker ran and was reported passed)."""
    shared = tmp_path_factory.mktemp("shared-bytecode")
    tmp = tmp_path_factory.mktemp("tmp")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(shared))
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, PYC_POISON)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2",
                                           "-o", f"ralph_sandbox={sandbox}")
    assert result.ret == 1, result.stdout.str()
    logs = "".join(p.read_text() for p in pytester.path.rglob("agent.log"))
    assert "poisoned " in logs, logs  # the cheat wrote somewhere, and it was never loaded
    planted = [p for p in shared.rglob("reports.*.pyc") if b"_passed" in p.read_bytes()]
    if sandbox == "required":  # the agent's /tmp is its own: nothing reached the real folder
        assert planted == []
    else:  # unconfined, it reached the run's own folder, and that was never loaded either
        assert f"poisoned {tmp}/pytest-ralph-" in logs, logs
    # Nothing of the project's own is kept in the shared folder either.
    root = pytester.path.resolve()
    assert not (shared / root.relative_to(root.anchor)).exists()


def test_standard_library_names_in_ini_pythonpath_are_guarded(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    pytester.mkdir("src")
    pytester.makeini("[pytest]\npythonpath = src\n")
    write_prd(story("US-001", {"text": "done", "run": "test -f done.txt"}))
    cmd = write_agent(agent, "import pathlib\npathlib.Path('src/pdb.py').write_text('')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: folder src/ (standard-library names) "
                                 "changed: added src/pdb.py*"])
