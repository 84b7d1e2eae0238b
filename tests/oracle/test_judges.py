"""What the checks import, guarded (pytest_ralph.oracle.judges), the last run's verified snapshot
(pytest_ralph.state.verified), the loop's own imports (pytest_ralph.oracle.importguard) and git's
configuration (pytest_ralph.loop.gitdiff.config_digest): issue 20, unit level."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.checks.phase import pytest_command, read_imports
from pytest_ralph.loop.gitdiff import config_digest, tree_snapshot
from pytest_ralph.oracle.importguard import ProjectImports, guarded
from pytest_ralph.oracle.judges import (
    ENVIRONMENT,
    SHADOWS,
    TEST_MODULES,
    TESTS_IMPORT,
    in_test_folder,
    installed_names,
    site_folders,
    take,
    watch,
)
from pytest_ralph.oracle.phasewatch import write_judges
from pytest_ralph.oracle.snapshot import (
    Change,
    compare,
    loop_conftests,
    snapshot,
    snapshot_from_json,
    snapshot_to_json,
    with_imports,
)
from pytest_ralph.oracle.sources import run_pytest_targets
from pytest_ralph.prd.load import load_prd
from pytest_ralph.state.verified import changes_stat, check_loop_conftests, keep_copies, weakening
from pytest_ralph.util.env import IMPORTS_ENV
from tests.support.env import clean_env
from tests.support.loop import report_text
from tests.support.prd import story


def _prd(root: Path, *criteria: object) -> Path:
    path = root / "prd.json"
    path.write_text(json.dumps({"userStories": [story("US-1", *criteria)]}))
    return path


def _imports(root: Path, site: Path) -> list[dict[str, object]]:
    """A check process that had tests/, then the rootdir, then ``site`` on sys.path, and
    imported calc (from the rootdir) and yaml (from site)."""
    return [{"path": [str(root / "tests"), str(root), str(site)],
             "modules": {"calc": str(root / "calc.py"), "yaml": str(site / "yaml" /
                                                                    "__init__.py")},
             "sources": [str(site / "yaml" / "__init__.py")]}]


def test_installed_names_are_the_top_level_modules_and_packages_of_a_site(
        tmp_path: Path) -> None:
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    for name in ("plain.py", "compiled.pyc", "windowed.pyw", "fast.cpython-311-x86_64-linux-gnu.so",
                 "win.cp311-win_amd64.pyd", "README.txt", "not-a-name.py", "typing_extensions.py",
                 "easy-install.pth"):
        (site_dir / name).write_text("")
    (site_dir / "pkg").mkdir()
    (site_dir / "pkg" / "__init__.py").write_text("")
    (site_dir / "nspkg").mkdir()  # no __init__.py: its own distribution names it
    (site_dir / "pkg-1.0.dist-info").mkdir()
    got = installed_names([str(tmp_path / "missing"), str(site_dir)])
    assert got == {"plain", "compiled", "windowed", "fast", "win", "typing_extensions", "pkg"}


def test_site_folders_are_this_environments_site_packages(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    import site
    import sysconfig
    found = site_folders()
    assert os.path.realpath(sysconfig.get_paths()["purelib"]) in found
    assert len(found) == len(set(found)) and all(os.path.isabs(f) for f in found)
    user = tmp_path / "user-site"
    user.mkdir()
    monkeypatch.setattr(site, "USER_SITE", str(user))
    assert str(user) not in site_folders()  # not on sys.path
    monkeypatch.syspath_prepend(str(user))
    assert str(user.resolve()) in site_folders()


def test_site_folders_take_purelib_platlib_and_the_site_modules_list(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A distribution's Python whose platlib (lib64) is not its purelib, and whose site module
    # lists one more folder; empty or missing paths are left out, duplicates said once.
    import site
    import sysconfig
    pure, plat, extra = (tmp_path / n for n in ("lib", "lib64", "dist-packages"))
    for folder in (pure, plat, extra):
        folder.mkdir()
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"purelib": str(pure),
                                                         "platlib": str(plat)})
    monkeypatch.setattr(site, "getsitepackages",
                        lambda: [str(extra), "", str(tmp_path / "missing"), str(pure)])
    monkeypatch.setattr(site, "USER_SITE", None)
    monkeypatch.chdir(tmp_path)
    assert site_folders() == [str(pure), str(plat), str(extra)]


def test_watch_guards_the_project_folders_before_each_module_and_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pytest_ralph.oracle import judges
    monkeypatch.setattr(judges, "site_folders", list)  # only the site the imports name
    root, site_dir = tmp_path / "project", tmp_path / "site"
    for folder in (root / "tests", root / "src" / "pkg", site_dir / "attrs", site_dir / "ns"):
        folder.mkdir(parents=True)
    (tmp_path / "eggs.zip").write_text("")
    for path in (site_dir / "yaml.py", site_dir / "attrs" / "__init__.py", root / "calc.py"):
        path.write_text("")
    sep = os.sep
    imports: list[dict[str, object]] = [
        {"path": [str(root / "tests"), str(root), 42, str(site_dir), str(tmp_path / "eggs.zip"),
                  str(tmp_path / "missing"), str(root / "src")],
         "modules": {"yaml": str(site_dir / "yaml.py"), "calc": str(root / "calc.py"),
                     "attrs": str(site_dir / "attrs" / "__init__.py"),
                     "ns": str(site_dir / "ns") + sep, "frozen": None, 7: "x"},
         "sources": [str(site_dir / "yaml.py"), str(root / "calc.py"), "relative.py", 3]},
    ]
    got = watch(imports, root, extra_folders=[root / "src" / "pkg", tmp_path / "outside"])
    # (src comes after the folder each module was found in: it shadows none of them, only the
    # installed names; an entry that is no folder is no site)
    assert got == {
        f"folder ./{SHADOWS}": ("attrs", "ns", "yaml"),
        f"folder src/{SHADOWS}": ("attrs", "yaml"),
        f"folder src/pkg/{SHADOWS}": ("attrs", "yaml"),
        f"folder tests/{SHADOWS}": ("attrs", "calc", "ns", "yaml"),
        ENVIRONMENT: (str(site_dir) + sep, str(site_dir / "yaml.py")),
    }


def test_watch_leaves_to_the_agent_a_name_the_checks_import_from_the_project(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # An installed copy of the project's own package: imported from the project, so the
    # agent may edit it there; the installed names still guard the folders before it.
    from pytest_ralph.oracle import judges
    monkeypatch.setattr(judges, "site_folders", list)
    root, site_dir = tmp_path / "project", tmp_path / "site"
    (root / "app").mkdir(parents=True)
    (root / "app" / "__init__.py").write_text("")
    site_dir.mkdir()
    for name in ("app.py", "yaml.py"):
        (site_dir / name).write_text("")
    got = watch([{"path": [str(root), str(site_dir)],
                  "modules": {"app": str(root / "app" / "__init__.py")}}], root)
    assert got[f"folder ./{SHADOWS}"] == ("yaml",)


def test_a_package_folder_shadows_only_with_an_init_module(tmp_path: Path) -> None:
    for folder, init in (("yaml", "__init__.py"), ("attrs", "__init__.pyc"),
                         ("rpds", "__init__.cpython-311-x86_64-linux-gnu.so"),
                         ("win", "__init__.pyd"), ("notes", "__init__.txt"),
                         ("other", "__init__.py")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / init).write_text("x")
    (tmp_path / "yaml" / "helper.py").write_text("x")  # not what import takes for yaml
    _digest, listing = take(f"folder ./{SHADOWS}", ["yaml", "attrs", "rpds", "win", "notes"],
                            tmp_path)
    assert [item.split("\t")[0] for item in listing] == [
        "attrs/__init__.pyc", "rpds/__init__.cpython-311-x86_64-linux-gnu.so",
        "win/__init__.pyd", "yaml/__init__.py"]


def test_a_module_planted_before_the_one_imported_is_a_change(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b): return a - b\n")
    site = tmp_path / "site"
    (site / "yaml").mkdir(parents=True)
    (site / "yaml" / "__init__.py").write_text("")
    found = watch(_imports(root, site), root)
    tests_subject = f"folder tests/{SHADOWS}"
    assert "calc" in found[tests_subject] and "yaml" in found[tests_subject]
    assert "calc" not in found.get(f"folder ./{SHADOWS}", ())  # the project's own, there
    assert "yaml" in found[f"folder ./{SHADOWS}"]
    before = {s: take(s, p, root) for s, p in found.items() if s != ENVIRONMENT}
    (root / "calc.py").write_text("def add(a, b): return a + b\n")  # the agent's work
    assert {s: take(s, p, root) for s, p in found.items() if s != ENVIRONMENT} == before
    (root / "tests" / "calc.py").write_text("def add(a, b): return 3\n")  # a stand-in
    (root / "yaml").mkdir()
    (root / "yaml" / "__init__.py").write_text("PATCH = 1\n")
    after = {s: take(s, p, root) for s, p in found.items() if s != ENVIRONMENT}
    assert after[tests_subject][1] != before[tests_subject][1]
    assert [n.split("\t")[0] for n in after[tests_subject][1]] == ["calc.py"]
    assert [n.split("\t")[0] for n in after[f"folder ./{SHADOWS}"][1]] == ["yaml/__init__.py"]
    # A namespace folder never wins over a module found later on the path: not a change.
    (root / "tests" / "yaml").mkdir()
    assert take(tests_subject, found[tests_subject], root)[0] == after[tests_subject][0]


def test_the_environment_digest_sees_edits_pth_files_and_entry_points(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    site = tmp_path / "site"
    (site / "yaml").mkdir(parents=True)
    module = site / "yaml" / "__init__.py"
    module.write_text("")
    params = (str(module), str(site) + os.sep)
    digest, _ = take(ENVIRONMENT, params, root)
    (site / "evil.pth").write_text("import os\n")
    d2, listing = take(ENVIRONMENT, params, root)
    assert d2 != digest and any(item.startswith(str(site / "evil.pth")) for item in listing)
    (site / "evil.pth").unlink()
    dist = site / "plug-1.0.dist-info"
    dist.mkdir()
    (dist / "entry_points.txt").write_text("[pytest11]\nplug = plug\n")
    assert take(ENVIRONMENT, params, root)[0] not in (digest, d2)
    (dist / "entry_points.txt").unlink()
    dist.rmdir()
    assert take(ENVIRONMENT, params, root)[0] == digest
    module.write_text("PATCHED = True\n")
    assert take(ENVIRONMENT, params, root)[0] != digest


def test_the_environment_listing_names_each_file_that_can_run_code_at_startup(
        tmp_path: Path) -> None:
    site_dir = tmp_path / "site"
    (site_dir / "plug-1.0.dist-info").mkdir(parents=True)
    (site_dir / "plug-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\n")
    (site_dir / "bare-1.0.dist-info").mkdir()  # no entry points
    (site_dir / "old-0.1.egg-info").mkdir()
    (site_dir / "old-0.1.egg-info" / "entry_points.txt").write_text("[pytest11]\n")
    for name in ("b.pth", "a.pth", "dev.egg-link", "sitecustomize.py", "usercustomize.py",
                 "yaml.py", "notes.txt"):
        (site_dir / name).write_text(name)
    module = site_dir / "yaml.py"
    missing = tmp_path / "gone.py"
    _digest, listing = take(ENVIRONMENT, [str(module), str(missing), str(site_dir) + os.sep,
                                          str(tmp_path / "no-site") + os.sep], tmp_path)
    names = [item.split("\t") for item in listing]
    assert [n for n, _ in names] == sorted([
        str(module), str(missing), str(tmp_path / "no-site") + os.sep,
        *(str(site_dir / n) for n in ("a.pth", "b.pth", "dev.egg-link", "sitecustomize.py",
                                      "usercustomize.py")),
        str(site_dir / "plug-1.0.dist-info" / "entry_points.txt"),
        str(site_dir / "old-0.1.egg-info" / "entry_points.txt")])
    digests = dict(names)
    assert digests[str(missing)] == "absent" and digests[str(tmp_path / "no-site") + os.sep] == (
        "absent")
    assert digests[str(site_dir / "a.pth")] == hashlib.sha256(b"a.pth").hexdigest()[:16]


def test_take_knows_its_subjects_only(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "yaml.py").write_text("")
    assert [i.split("\t")[0] for i in take(f"folder sub/{SHADOWS}", ["yaml"], tmp_path)[1]] == [
        "yaml.py"]
    assert take(f"folder nowhere/{SHADOWS}", ["yaml"], tmp_path) == ("absent", ())
    (tmp_path / "file").write_text("")
    assert take(f"folder file/{SHADOWS}", ["yaml"], tmp_path) == ("absent", ())
    for other in ("file tests/test_a.py", f"file sub{SHADOWS}"):
        with pytest.raises(ValueError, match=r"not a subject of pytest_ralph\.oracle\.judges"):
            take(other, [], tmp_path)


def test_with_imports_links_every_criterion_and_survives_a_retake(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("")
    site = tmp_path / "site"
    (site / "yaml").mkdir(parents=True)
    (site / "yaml" / "__init__.py").write_text("")
    prd = load_prd(_prd(root, {"run": "true"}, {"exists": "x"}))
    start = with_imports(snapshot(prd, root), _imports(root, site), root)
    assert start.links[f"folder tests/{SHADOWS}"] == {"US-1::AC1", "US-1::AC2"}
    assert compare(start, snapshot(prd, root, start=start)) == []
    (root / "tests" / "calc.py").write_text("")
    (changed,) = compare(start, snapshot(prd, root, start=start))
    assert changed == Change(f"folder tests/{SHADOWS}", "changed", ("US-1::AC1", "US-1::AC2"),
                             "added tests/calc.py")


def test_run_commands_that_start_pytest_are_read(tmp_path: Path) -> None:
    assert run_pytest_targets("python -m pytest -q -k x tests/test_a.py::t", tmp_path) == [
        (tmp_path, ["tests/test_a.py::t"])]
    assert run_pytest_targets("cd sub && env A=1 pytest", tmp_path) == [(tmp_path / "sub", [])]
    assert run_pytest_targets("ruff check src && timeout 60 py.test -p x t", tmp_path) == [
        (tmp_path, ["t"])]
    assert run_pytest_targets("python app.py --pytest", tmp_path) == []
    assert run_pytest_targets("pytest 'unbalanced", tmp_path) == []


def test_a_run_command_s_tests_and_what_is_above_the_project_are_guarded(
        tmp_path: Path) -> None:
    root = tmp_path / "work" / "p"
    (root / "tests" / "unit").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text("def test_a(): assert 0\n")
    prd = load_prd(_prd(root, {"run": "python -m pytest -q"}))
    start = snapshot(prd, root)
    assert start.digests["file tests/test_a.py"] != "absent"
    (root / "tests" / "unit" / "conftest.py").write_text("")  # a new plugin, deep down
    (tmp_path / "work" / "pytest.ini").write_text("[pytest]\naddopts = -p x\n")  # above
    (tmp_path / "work" / "setup.py").write_text("")  # pytest's rootdir marker
    subjects = {c.subject for c in compare(start, snapshot(prd, root, start=start))}
    assert {"file tests/unit/conftest.py",
            f"pytest configuration {tmp_path / 'work' / 'pytest.ini'}",
            f"file {tmp_path / 'work' / 'setup.py'}"} <= subjects
    (root / "tests" / "test_b.py").write_text("def test_b(): pass\n")  # new tests are fine
    assert "file tests/test_b.py" not in {
        c.subject for c in compare(start, snapshot(prd, root, start=start))}


def test_the_loops_own_conftests_are_listed_as_pytest_finds_them(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "tests" / "deep").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "conftest.py").write_text("")
    (root / "src" / "conftest.py").write_text("")
    (root / "tests" / "deep" / "conftest.py").write_text("")
    _, listing = loop_conftests(root)
    assert [n.split("\t")[0] for n in listing] == ["conftest.py"]
    (root / "tests" / "conftest.py").write_text("")  # a test* folder of the rootdir: loaded
    _, listing = loop_conftests(root, [root / "src"])
    assert [n.split("\t")[0] for n in listing] == ["conftest.py", "src/conftest.py",
                                                  "tests/conftest.py"]


def test_the_next_loop_refuses_conftests_that_changed(pytester: pytest.Pytester) -> None:
    """Before pytest loads them: a conftest.py added since the last run's start."""
    pytester.makefile(".json", prd=json.dumps({"userStories": [story(
        "US-1", {"text": "t", "exists": "never.txt"})]}))
    agent = pytester.path / "agent.py"
    agent.write_text("")
    first = pytester.runpytest_subprocess("--ralph", "--ralph-agent",
                                          f"{sys.executable} {agent}",
                                          "--ralph-max-iterations", "1")
    assert first.ret == 1, first.stdout.str()
    state = pytester.path / ".pytest_ralph"
    assert check_loop_conftests(state, pytester.path, ()) == ""
    (pytester.path / "conftest.py").write_text("raise SystemExit('ran in the loop')\n")
    why = check_loop_conftests(state, pytester.path, ())
    assert "a conftest.py that `pytest --ralph` loads changed since the last run" in why
    assert "added conftest.py" in why
    second = pytester.runpytest_subprocess("--ralph", "--ralph-agent",
                                           f"{sys.executable} {agent}")
    assert second.ret == 4
    second.stderr.fnmatch_lines(["*a conftest.py that `pytest --ralph` loads changed*"])
    assert "ran in the loop" not in second.stdout.str() + second.stderr.str()


def test_the_diff_stat_of_a_changed_oracle(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    test = root / "test_a.py"
    test.write_text("def test_a():\n    x = 1\n    assert x == 2\n")
    prd = load_prd(_prd(root, {"pytest": "test_a.py"}))
    state = root / ".pytest_ralph"
    before = snapshot(prd, root)
    keep_copies(before, root, state)
    test.write_text("def test_a():\n    x = 1\n    assert True\n")
    (root / "conftest.py").write_text("a = 1\nb = 2\n")
    changes = weakening(compare(before, snapshot(prd, root, start=before)))
    stat = changes_stat(changes, before, root, state)
    assert "test_a.py | 2 +1 -1" in stat
    assert "conftest.py | added (2 lines)" in stat
    assert weakening([Change("criterion US-2::AC1", "added", ())]) == []


def test_the_loop_imports_nothing_from_the_project(tmp_path: Path) -> None:
    (tmp_path / "json_planted_mod.py").write_text("VALUE = 'planted'\n")
    (tmp_path / "sqlite3").mkdir()
    (tmp_path / "sqlite3" / "__init__.py").write_text("raise SystemExit('planted')\n")
    code = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
sys.modules.pop("sqlite3", None)
from pytest_ralph.oracle.importguard import guarded
with guarded(__import__("pathlib").Path({str(tmp_path)!r})) as finder:
    import sqlite3
    print("sqlite3 from", sqlite3.__file__)
    try:
        import json_planted_mod
    except ImportError as exc:
        print("refused:", exc)
    print(finder.refused)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert str(tmp_path) not in done.stdout.splitlines()[0]
    assert "refused: pytest-ralph: the loop does not import 'json_planted_mod' from the project" \
        in done.stdout
    assert isinstance(ProjectImports(tmp_path).refused, list)
    with guarded(tmp_path) as finder:
        assert sys.meta_path[0] is finder
    assert finder not in sys.meta_path


def test_git_runs_only_while_its_configuration_is_unchanged(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("a\n")
    trust = config_digest(tmp_path)
    assert tree_snapshot(tmp_path, trust) is not None
    marker = tmp_path / "ran"
    with (tmp_path / ".git" / "config").open("a") as f:
        f.write(f'[filter "x"]\n\tclean = sh -c "touch {marker}; cat"\n')
    (tmp_path / ".gitattributes").write_text("* filter=x\n")
    assert config_digest(tmp_path) != trust
    assert tree_snapshot(tmp_path, trust) is None
    assert not marker.exists()  # the agent's filter never ran


# -- the modules the tests import from test folders (helpers) ------------------------------------

CALC_TEST = """\
from {helpers} import CASES
from calc import add


def test_add():
    for args, expected in CASES:
        assert add(*args) == expected
"""

#: The helpers the test takes its expected values from, and a module they import in turn.
HELPERS = "from {fixtures} import PAIRS\nCASES = [(pair, sum(pair)) for pair in PAIRS]\n"
FIXTURES = "PAIRS = [(2, 2), (1, 5)]\n"


def _calc_project(root: Path, layout: str) -> None:
    """A project whose ``add`` is wrong and whose test takes its cases from
    ``tests/helpers.py`` (which imports ``tests/fixtures/data.py``): imported as ``helpers``
    (``tests/`` first on ``sys.path``, no ``__init__.py``) or, with ``layout == "package"``, as
    ``tests.helpers``. ``pkg/mod.py`` is code under test beside ``pkg/tests/``."""
    package = layout == "package"
    (root / "tests" / "fixtures").mkdir(parents=True)
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("from pkg.mod import ZERO\n\ndef add(a, b):\n"
                                  "    return ZERO\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("from pkg.tests.util import NOTHING\nZERO = NOTHING\n")
    (root / "pkg" / "tests" / "__init__.py").write_text("")
    (root / "pkg" / "tests" / "util.py").write_text("NOTHING = 0\n")
    (root / "tests" / "fixtures" / "__init__.py").write_text("")
    (root / "tests" / "fixtures" / "data.py").write_text(FIXTURES)
    (root / "tests" / "helpers.py").write_text(HELPERS.format(
        fixtures="tests.fixtures.data" if package else "fixtures.data"))
    (root / "tests" / "test_calc.py").write_text(CALC_TEST.format(
        helpers="tests.helpers" if package else "helpers"))
    if package:
        (root / "tests" / "__init__.py").write_text("")


def _real_imports(root: Path, report: Path) -> tuple[dict[str, object], ...]:
    """The imports report of a real child pytest started as a check phase starts it (the
    launcher, the rootdir first on ``sys.path``) on ``tests/test_calc.py``."""
    done = subprocess.run([*pytest_command(sys.executable), "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "tests/test_calc.py"],
                          cwd=root, env=clean_env(**{IMPORTS_ENV: str(report)}),
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # add is wrong: 1 failed
    imports = read_imports(report)
    assert imports, done.stdout + done.stderr
    return imports


@pytest.mark.parametrize("rel, guarded_", [
    ("tests/helpers.py", True), ("tests/__init__.py", True), ("tests/fixtures/data.py", True),
    ("test/util.py", True), ("testing/data.py", True), ("pkg/tests/util.py", True),
    ("calc.py", False), ("src/calc.py", False), ("pkg/mod.py", False), ("test_calc.py", False),
    ("src/pkg/testlike_name.py", False), (".venv/lib/python3.12/site-packages/tests/a.py", False),
    ("venv/lib/dist-packages/testfixtures/a.py", False)])
def test_a_test_folder_is_one_of_the_folders_of_the_path(rel: str, guarded_: bool) -> None:
    assert in_test_folder(rel) is guarded_


@pytest.mark.parametrize("layout", ["plain", "package"])
def test_the_helpers_a_real_check_imports_from_test_folders_are_guarded(
        tmp_path: Path, layout: str) -> None:
    root = tmp_path / "p"
    root.mkdir()
    _calc_project(root, layout)
    prd = load_prd(_prd(root, {"text": "add works", "pytest": "tests/test_calc.py::test_add"}))
    imports = _real_imports(root, tmp_path / "imports.jsonl")
    found = watch(imports, root)
    assert {"tests/helpers.py", "tests/fixtures/data.py", "tests/test_calc.py",
            "pkg/tests/util.py"} <= set(found[TEST_MODULES])
    assert not {"calc.py", "pkg/mod.py", "pkg/__init__.py"} & set(found[TEST_MODULES])
    start = with_imports(snapshot(prd, root), imports, root, folders=(root,))
    # The test file and the __init__.py files are guarded as files already, and what the
    # test imports from tests/ (read from its source) is: said once. What only the code
    # under test imports (pkg/mod.py -> pkg/tests/util.py) is found in the report alone.
    assert start.watch[TESTS_IMPORT] == (
        "tests/fixtures/__init__.py", "tests/fixtures/data.py", "tests/helpers.py")
    assert start.watch[TEST_MODULES] == ("pkg/tests/__init__.py", "pkg/tests/util.py")
    assert start.links[TEST_MODULES] == start.links[TESTS_IMPORT] == {"US-1::AC1"}
    assert [i.split("\t")[0] for i in start.listings[TEST_MODULES]] == list(
        start.watch[TEST_MODULES])
    assert root / "tests" / "helpers.py" in start.judges(root)
    assert root / "calc.py" not in start.judges(root)
    write_judges(tmp_path / "judges.json", start, root)  # watched while a check phase runs
    watched = json.loads((tmp_path / "judges.json").read_text())["files"]
    assert str(root / "tests" / "helpers.py") in watched and str(root / "calc.py") not in watched
    # Kept in the run's history as JSON: the retake from the stored snapshot sees the same.
    stored = snapshot_from_json(json.loads(json.dumps(snapshot_to_json(start))))
    assert stored == start
    # The agent's work: the code under test, beside the test folders too.
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "pkg" / "mod.py").write_text("ZERO = 0\n")
    assert compare(stored, snapshot(prd, root, start=stored)) == []
    # The cheat: the expected values rewritten to what the wrong code returns.
    (root / "tests" / "helpers.py").write_text("CASES = [((2, 2), 0)]\n")
    (changed,) = compare(stored, snapshot(prd, root, start=stored))
    assert changed == Change(TESTS_IMPORT, "changed", ("US-1::AC1",), "changed tests/helpers.py")
    assert changed.describe() == (
        "modules the tests import from test folders changed: changed tests/helpers.py")
    (root / "tests" / "fixtures" / "data.py").unlink()
    (changed,) = compare(stored, snapshot(prd, root, start=stored))
    assert changed.detail == "removed tests/fixtures/data.py; changed tests/helpers.py"
    # What only the imports report found: a helper of the code under test in pkg/tests/.
    (root / "tests" / "helpers.py").write_text(HELPERS.format(
        fixtures="tests.fixtures.data" if layout == "package" else "fixtures.data"))
    (root / "tests" / "fixtures" / "data.py").write_text(FIXTURES)
    (root / "pkg" / "tests" / "util.py").write_text("NOTHING = 1\n")
    assert [c.describe() for c in compare(stored, snapshot(prd, root, start=stored))] == [
        "modules the checks import from test folders changed: changed pkg/tests/util.py"]


def test_a_hand_written_report_guards_only_the_project_s_test_folders(tmp_path: Path) -> None:
    root, site_dir = tmp_path / "p", tmp_path / "site"
    files = [root / "calc.py", root / "tests" / "helpers.py", root / "src" / "app" / "core.py",
             root / ".venv" / "lib" / "site-packages" / "tests" / "x.py", site_dir / "yaml.py"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    (root / "tests" / "link.py").symlink_to(root / "calc.py")  # the code under test, really
    got = watch([{"path": [str(root), str(site_dir)], "modules": {},
                  "sources": [*map(str, files), str(root / "tests" / "link.py"),
                              "tests/relative.py"]}], root)
    assert got[TEST_MODULES] == ("tests/helpers.py",)
    assert str(site_dir / "yaml.py") in got[ENVIRONMENT]
    assert TEST_MODULES not in watch([{"path": [str(root)], "modules": {},
                                       "sources": [str(root / "calc.py")]}], root)
    # A module a check's target names is the agent's to write, in a test folder too.
    (root / "tests" / "gen").mkdir()
    (root / "tests" / "gen" / "made.py").write_text("")
    prd = load_prd(_prd(root, {"file": "tests/helpers.py", "contains": "CASES"},
                        {"exists": "./tests/gen/"}))
    report = [{"path": [str(root)], "modules": {}, "sources": [
        str(root / "tests" / "helpers.py"), str(root / "tests" / "gen" / "made.py")]}]
    assert TEST_MODULES in watch(report, root)
    assert TEST_MODULES not in with_imports(snapshot(prd, root), report, root, prd=prd).watch
    (root / "tests" / "gone.py").write_text("")
    params = ("tests/helpers.py", "tests/gone.py")
    digest, listing = take(TEST_MODULES, params, root)
    assert [i.split("\t")[0] for i in listing] == ["tests/gone.py", "tests/helpers.py"]
    (root / "tests" / "gone.py").unlink()  # a deleted helper: out of the listing, a change
    after, listing = take(TEST_MODULES, params, root)
    assert [i.split("\t")[0] for i in listing] == ["tests/helpers.py"] and after != digest


def test_the_loop_refuses_an_agent_that_edits_the_helpers_the_tests_import(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    _calc_project(pytester.path, "plain")
    write_prd(story("US-001", {"text": "add works", "pytest": "tests/test_calc.py::test_add"}))
    cheat = agent("cheat.py", "import pathlib\npathlib.Path('tests/helpers.py')"
                              ".write_text('CASES = [((2, 2), 0)]\\n')\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cheat,
                                           "--ralph-max-iterations", "1")
    out = result.stdout.str()
    assert result.ret == 1, out  # the limit, not complete
    result.stdout.fnmatch_lines(["*Criteria changed: modules the tests import from "
                                 "test folders changed: changed tests/helpers.py*"])
    assert "restore it" in (pytester.path / ".pytest_ralph" / "progress.txt").read_text()
    assert ("| 1 | modules the tests import from test folders | changed: changed "
            "tests/helpers.py | US-001::AC1 |") in report_text(pytester)
    # An honest agent, on the project as it was: fixing calc.py completes the run.
    shutil.rmtree(pytester.path / ".pytest_ralph")
    for rel in ("tests", "pkg", "calc.py"):
        target = pytester.path / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    _calc_project(pytester.path, "plain")
    fix = agent("fix.py", "import pathlib\npathlib.Path('calc.py')"
                          ".write_text('def add(a, b):\\n    return a + b\\n')\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fix,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 0, result.stdout.str()
    assert "Criteria changed" not in result.stdout.str()
