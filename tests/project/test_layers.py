"""The shape of the package (docs/architecture.md): folders in layers, dependencies pointing one
way, no import circle, pytest only in the pytest layer, empty subpackage ``__init__`` files, and
the size limits. The checks read the source with :mod:`ast` (``tools/house.py``); one more test
imports each module outside the pytest layer in a fresh interpreter and looks at ``sys.modules``.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_ralph"


def _house() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house", ROOT / "tools" / "house.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("house", module)
    spec.loader.exec_module(module)
    return module


house = _house()
MODULES = house.read_package(PACKAGE)


def test_every_module_is_in_a_layer() -> None:
    folders = {m.folder for m in MODULES.values()}
    assert folders <= {*house.LAYERS, "face"}, sorted(folders)
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} \
        == set(house.LAYERS)


def test_dependencies_point_down_the_layers() -> None:
    assert house.rule_breaks(MODULES) == []


def test_no_import_circle_between_modules_or_folders() -> None:
    assert house.module_circles(MODULES) == []
    assert house.folder_circles(MODULES) == []


def test_the_size_limits_hold() -> None:
    figures = house.figures(MODULES)
    assert figures["top_level_modules"] <= 10
    assert figures["modules_over_800"] == []
    assert figures["classes_over_500"] == []
    assert figures["functions_over_120"] == []


def test_subpackage_init_files_are_empty_but_the_pytest_entry_point() -> None:
    """The Stop hook imports the package on every reply of Claude Code: a subpackage's
    ``__init__`` costs nothing. ``plugin/__init__.py`` is the pytest11 entry point
    (``pytest_ralph.plugin``, kept for existing installs): it holds the ``pytest_*`` hook
    functions and nothing else."""
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        if init.parent.name != "plugin":
            assert init.read_text("utf-8") == "", init
    tree = ast.parse((PACKAGE / "plugin" / "__init__.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.name.startswith("pytest_"), node.name
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            assert names in (["pytest_plugins"], ["__all__"]), ast.unparse(node)
        elif isinstance(node, ast.If):
            assert "TYPE_CHECKING" in ast.unparse(node.test), ast.unparse(node)
        else:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)), ast.unparse(node)


# -- the checks catch what they are for -------------------------------------------------------

def _planted(tmp_path: Path, edits: dict[str, str]) -> dict[str, object]:
    """A copy of the package with ``edits`` (module path -> text appended), read again."""
    copy = tmp_path / "pytest_ralph"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in edits.items():
        with (copy / rel).open("a", encoding="utf-8") as f:
            f.write("\n\n" + textwrap.dedent(text))
    return house.read_package(copy)  # type: ignore[no-any-return]


def test_an_upward_import_inside_a_function_breaks_the_rule(tmp_path: Path) -> None:
    modules = _planted(tmp_path, {"prd/model.py": """\
        def _planted() -> None:
            from ..loop import controller  # noqa: F401
        """})
    (line,) = house.rule_breaks(modules)
    assert "prd/model.py:" in line
    assert "prd.model -> loop.controller (prd may not import from loop" in line


def test_an_import_of_pytest_outside_the_pytest_layer_breaks_the_rule(tmp_path: Path) -> None:
    modules = _planted(tmp_path, {"checks/results.py": "import _pytest.config\n"})
    (line,) = house.rule_breaks(modules)
    assert "checks.results imports pytest (only plugin/ may)" in line


def test_an_import_under_type_checking_does_not_count(tmp_path: Path) -> None:
    modules = _planted(tmp_path, {"util/text.py": """\
        TYPE_CHECKING = False
        if TYPE_CHECKING:
            from ..loop.controller import Loop  # noqa: F401
        """})
    assert house.rule_breaks(modules) == []


def test_a_circle_closed_inside_a_function_is_found(tmp_path: Path) -> None:
    modules = _planted(tmp_path, {"util/files.py": """\
        def _planted() -> None:
            from . import text  # noqa: F401
        """, "util/text.py": """\
        def _planted() -> None:
            from . import files  # noqa: F401
        """})
    assert house.rule_breaks(modules) == []
    assert ["util.files", "util.text"] in house.module_circles(modules)
    assert ["util.files", "util.text"] not in house.module_circles(MODULES)


def test_the_house_script_exits_1_on_a_broken_rule(tmp_path: Path) -> None:
    _planted(tmp_path, {"util/redact.py": "from ..state import history  # noqa: F401\n"})
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "house.py"), "--root",
                           str(tmp_path / "pytest_ralph")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert "util.redact -> state.history (util may not import from state" in done.stdout
    clean = subprocess.run([sys.executable, str(ROOT / "tools" / "house.py")],
                           capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout
    assert "rule breaks: 0" in clean.stdout


# -- pytest stays out of everything below the pytest layer --------------------------------------

OUTSIDE_PYTEST_LAYER = sorted(f"pytest_ralph.{m.name}" if m.name != "__init__" else
                              "pytest_ralph" for m in MODULES.values()
                              if m.folder != house.PYTEST_LAYER)


@pytest.mark.parametrize("module", OUTSIDE_PYTEST_LAYER)
def test_importing_a_module_outside_the_pytest_layer_leaves_pytest_out(module: str) -> None:
    code = ("import importlib, sys\n"
            f"importlib.import_module({module!r})\n"
            "print(sorted(m for m in sys.modules\n"
            "             if m in ('pytest', '_pytest') or m.startswith(('pytest.', '_pytest.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- no private name crosses a module of parallel/ ----------------------------------------------

def _private_imports(folder: Path) -> list[str]:
    """``path:line: module.name`` for each private name (``_x``, not ``__x__``) that a module of
    ``folder`` takes from another module: ``from .m import _x``, or ``m._x`` of a module bound by
    ``from . import m`` / ``import pytest_ralph.m as m``."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        modules: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if node.module is None or alias.name[:1].islower():  # from . import m
                        modules.add(alias.asname or alias.name)
                    if alias.name.startswith("_") and not alias.name.endswith("__"):
                        found.append(f"{path.name}:{node.lineno}: {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                modules.update(a.asname for a in node.names if a.asname)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in modules and node.attr.startswith("_") and \
                    not node.attr.endswith("__"):
                found.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_of_parallel_uses_a_private_name_of_another() -> None:
    """What the lanes, the queue and the scheduler share is public and documented
    (``parallel/gitcmd.py``: git as they run it)."""
    assert _private_imports(PACKAGE / "parallel") == []


def test_the_private_name_check_finds_both_forms(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .worktrees import _git, lane_key\n"
                                   "from . import plan\n"
                                   "plan._waves(1)\nplan.waves(1)\nx = plan.__doc__\n",
                                   encoding="utf-8")
    assert _private_imports(tmp_path) == ["a.py:1: worktrees._git", "a.py:3: plan._waves"]
