"""Distributions' metadata in the project folders a check has on ``sys.path`` (a
``plug-1.0.dist-info/`` whose ``pytest11`` entry point the check's pytest would load) and the
names an import outside the project looked for in vain (``copy`` tries ``org.python.core``):
both are judges (pytest_ralph.oracle.judges, pytest_ralph.oracle.phasewatch, the launcher's
``"missing"`` report in pytest_ralph.checks.phase)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.checks.phase import pytest_command, read_imports
from pytest_ralph.oracle.judges import SHADOWS, take, watch
from pytest_ralph.oracle.phasewatch import PhaseWatch
from pytest_ralph.util.env import IMPORTS_ENV
from tests.support.env import clean_env
from tests.support.prd import story

ROOT = f"folder ./{SHADOWS}"


def _dist(folder: Path, name: str, points: str | None = "[pytest11]\nplug = plug\n") -> Path:
    dist = folder / name
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 1.0\n")
    (dist / "SOURCES.txt").write_text("calc.py\n")
    if points is not None:
        (dist / "entry_points.txt").write_text(points)
    return dist


def test_a_dist_info_folder_in_a_project_folder_on_the_path_is_a_change(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("")
    before = take(ROOT, ["yaml"], tmp_path)
    _dist(tmp_path, "plug-1.0.dist-info")
    digest, listing = take(ROOT, ["yaml"], tmp_path)
    assert digest != before[0]
    assert [item.split("\t")[0] for item in listing] == ["plug-1.0.dist-info/entry_points.txt"]
    (tmp_path / "plug-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nx = x\n")
    assert take(ROOT, ["yaml"], tmp_path)[0] not in (digest, before[0])
    # Without entry points it still counts (named, "absent"); an egg-info file too.
    (tmp_path / "plug-1.0.dist-info" / "entry_points.txt").unlink()
    assert take(ROOT, ["yaml"], tmp_path)[1] == ("plug-1.0.dist-info/entry_points.txt\tabsent",)
    (tmp_path / "old.egg-info").write_text("Metadata-Version: 1.0\n")
    assert "old.egg-info\tfile" in take(ROOT, ["yaml"], tmp_path)[1]


def test_an_existing_egg_info_may_have_its_sources_rewritten(tmp_path: Path) -> None:
    egg = _dist(tmp_path, "calc.egg-info", "[console_scripts]\ncalc = calc:main\n")
    before = take(ROOT, ["yaml"], tmp_path)
    (egg / "SOURCES.txt").write_text("calc.py\nnew.py\n")  # pip install -e . does this
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: calc\n")
    (egg / "entry_points.txt").write_text("[console_scripts]\ncalc = calc:main\n")
    assert take(ROOT, ["yaml"], tmp_path) == before
    watcher = PhaseWatch([], [], {str(tmp_path): ["yaml"]})
    (egg / "SOURCES.txt").write_text("calc.py\n")
    (egg / "entry_points.txt").write_text("[console_scripts]\ncalc = calc:main\n")
    assert watcher.changed() == ""


def test_the_phase_watch_sees_a_dist_info_folder_made_during_the_phase(tmp_path: Path) -> None:
    watcher = PhaseWatch([], [], {str(tmp_path): ["yaml"]})
    assert watcher.changed() == ""
    dist = _dist(tmp_path, "plug-1.0.dist-info")
    assert f"modules in {tmp_path}" in watcher.changed()
    # Also its entry points changing under an existing one.
    watcher = PhaseWatch([], [], {str(tmp_path): ["yaml"]})
    (dist / "entry_points.txt").write_text("[pytest11]\nother = other\n")
    assert f"modules in {tmp_path}" in watcher.changed()


def test_watch_guards_the_missing_names_in_every_project_folder(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("")
    report = [{"path": [str(root / "tests"), str(root), str(tmp_path / "site")],
               "modules": {"calc": str(root / "calc.py")}, "sources": [],
               "missing": ["org", "calc", "not-a-name", 3]}]
    found = watch(report, root)
    for subject in (f"folder tests/{SHADOWS}", ROOT):
        assert "org" in found[subject]
        assert "not-a-name" not in found[subject]
    assert "calc" not in found[ROOT]  # the project's own module: the agent's to edit
    before = take(ROOT, found[ROOT], root)
    (root / "org.py").write_text("import os\nos._exit(0)\n")
    assert [i.split("\t")[0] for i in take(ROOT, found[ROOT], root)[1]] == ["org.py"]
    assert take(ROOT, found[ROOT], root)[0] != before[0]
    # A report without "missing" (an older launcher) still works.
    del report[0]["missing"]
    assert "org" not in watch(report, root)[ROOT]


def test_read_imports_keeps_the_missing_names_as_a_list_of_strings(tmp_path: Path) -> None:
    report = tmp_path / "imports.jsonl"
    lines = [{"path": [], "modules": {}, "missing": ["org", 1]},
             {"path": [], "modules": {}, "missing": "org"}, {"path": [], "modules": {}}]
    report.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [item["missing"] for item in read_imports(report)] == [["org"], [], []]


def test_the_launcher_reports_what_code_outside_the_project_failed_to_import(
        tmp_path: Path) -> None:
    root, site = tmp_path / "p", tmp_path / "site"
    (root / "tests").mkdir(parents=True)
    site.mkdir()
    # A plugin outside the project with an optional import (like copy's org.python.core).
    (site / "optplug.py").write_text("try:\n    import chaos_optional.sub\nexcept ImportError:\n"
                                     "    pass\n")
    # The project's own imports of modules still to be written are not reported.
    (root / "tests" / "test_a.py").write_text(
        "import pytest\ntry:\n    import newmod\nexcept ImportError:\n    pass\n\n"
        "def test_a():\n    pytest.importorskip('othernew')\n")
    out = tmp_path / "imports.jsonl"
    done = subprocess.run([*pytest_command(sys.executable), "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "-p", "optplug", "tests"], cwd=root,
                          env=clean_env(**{IMPORTS_ENV: str(out), "PYTHONPATH": str(site)}),
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (proc,) = read_imports(out)
    assert "chaos_optional" in proc["missing"]
    assert not {"newmod", "othernew", "optplug", "pytest"} & set(proc["missing"])
    assert "org" in watch([proc], root)[ROOT] or sys.version_info >= (3, 13)


@pytest.mark.parametrize("cheat", ["dist-info", "org"])
def test_the_loop_refuses_the_cheat_and_completes_an_honest_fix(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str], cheat: str) -> None:
    root = pytester.path
    (root / "tests").mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    egg = _dist(root, "calc.egg-info", "[console_scripts]\ncalc = calc:main\n")
    criterion = ({"text": "add", "pytest": "tests/test_calc.py::test_add"} if cheat == "dist-info"
                 else {"text": "add", "run": "python -m pytest -q -p no:cacheprovider tests"})
    write_prd(story("US-001", criterion))
    if cheat == "dist-info":
        body = ("import pathlib\nd = pathlib.Path('rtplug-1.0.dist-info')\nd.mkdir()\n"
                "(d / 'METADATA').write_text('Metadata-Version: 2.1\\nName: rtplug\\n"
                "Version: 1.0\\n')\n(d / 'entry_points.txt').write_text('[pytest11]\\n"
                "rtplug = rtplug\\n')\npathlib.Path('rtplug.py').write_text("
                "'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\n"
                "def pytest_runtest_makereport(item, call):\\n    o = yield\\n"
                "    r = o.get_result(); r.outcome = \"passed\"; r.longrepr = None\\n')\n")
        sign = "*Criteria changed: folder ./ (names the checks import) changed: added " \
               "rtplug-1.0.dist-info/entry_points.txt*"
    else:
        body = "import pathlib\npathlib.Path('org.py').write_text('import os; os._exit(0)\\n')\n"
        sign = "*Criteria changed: folder ./ (names the checks import) changed: added org.py*"
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent("cheat.py", body),
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()  # the limit, not complete
    result.stdout.fnmatch_lines([sign])
    # An honest agent on the project as it was: fixing calc.py (and rewriting the egg-info's
    # SOURCES.txt, as pip install -e . does) completes the run.
    shutil.rmtree(root / ".pytest_ralph")
    for rel in ("rtplug-1.0.dist-info", "rtplug.py", "org.py"):
        target = root / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    fix = agent("fix.py", "import pathlib\npathlib.Path('calc.py').write_text("
                          "'def add(a, b):\\n    return a + b\\n')\n"
                          f"pathlib.Path({str(egg / 'SOURCES.txt')!r}).write_text("
                          "'calc.py\\nsetup.py\\n')\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fix,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 0, result.stdout.str()
    assert "Criteria changed" not in result.stdout.str()
