"""tools/mutants.py, the mutation tests of the modules that decide "complete" (``tox -e
mutants``): its operators, and a whole run on a small project whose tests look at the module
only through child processes (as the loop's tests do), so that a mutant the children did not
see would survive."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "mutants.py"

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="the tool needs tomllib")


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants_tool"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SAMPLE = '''\
"""Docstring: never mutated."""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from os import PathLike
__all__ = ["f"]


def f(x: int, items: list[str], flag: bool = True) -> str:
    """Docstring."""
    if x >= 2 and flag:
        items.append("big")
    total = x + 1
    total += 2
    while not flag:
        break
    if "a" in items:
        raise ValueError(f"bad {x}")
    return items[-x] + str(total) + items[:x][0] if x > 0 else None
'''


def test_every_operator_and_nothing_in_docstrings_or_annotations(tool: ModuleType) -> None:
    mutants = tool.mutants_of(SAMPLE, "pkg/sample.py")
    ops = {m.operator for m in mutants}
    assert ops == {"compare", "bool", "not", "negate", "arith", "unary", "constant", "string",
                   "return", "remove", "call", "slice"}, ops
    afters = {(m.line, m.before, m.after) for m in mutants}
    assert (11, "x >= 2", "x > 2") in afters
    assert (11, "x >= 2 and flag", "x >= 2 or flag") in afters
    assert (11, "2", "3") in afters
    assert (12, 'items.append("big")', "pass") in afters
    assert (12, '"big"', "''") in afters
    assert (13, "x + 1", "x - 1") in afters
    assert (14, "total += 2", "total -= 2") in afters
    assert (15, "not flag", "flag") in afters
    assert (17, '"a" in items', "'a' not in items") in afters
    assert (18, 'f"bad {x}"', "''") in afters
    assert any(m.after == "return None" for m in mutants)
    assert (19, "-x", "x") in afters and (19, "-x", "-x + 1") in afters
    assert (19, "x", "x + 1") in afters  # the slice bound
    assert (19, "str(total)", "total") in afters
    assert (9, "True", "False") in afters  # a default value
    lines = {m.line for m in mutants}
    assert lines <= set(range(9, 20)), lines  # docstrings, imports, TYPE_CHECKING, __all__
    assert 10 not in lines  # the function's docstring


def test_mutants_compile_keep_line_numbers_and_are_deterministic(tool: ModuleType) -> None:
    first = tool.mutants_of(SAMPLE, "pkg/sample.py")
    assert [m.source for m in first] == [m.source for m in tool.mutants_of(SAMPLE,
                                                                            "pkg/sample.py")]
    assert len({m.source for m in first}) == len(first)  # no duplicates
    for m in first:
        assert m.source != SAMPLE
        assert m.source.count("\n") == SAMPLE.count("\n"), m.describe()
        ast.parse(m.source)
        # Only the named line changed (multi-line nodes keep their line count).
        changed = [i for i, (a, b) in enumerate(zip(SAMPLE.splitlines(),
                                                    m.source.splitlines(), strict=True), 1)
                   if a != b]
        assert changed and changed[0] == m.line, m.describe()
    idents = [m.ident for m in first]
    assert len(set(idents)) == len(idents)
    assert all(re.fullmatch(r"\d+\.\d+", i) for i in idents)


def test_functions_limit_the_mutants(tool: ModuleType) -> None:
    source = "def a():\n    return 1\n\n\nclass B:\n    def c(self):\n        return 2\n"
    assert {m.function for m in tool.mutants_of(source, "m.py")} == {"a", "B.c"}
    assert {m.function for m in tool.mutants_of(source, "m.py", ["B.c"])} == {"B.c"}
    assert {m.function for m in tool.mutants_of(source, "m.py", ["B"])} == {"B.c"}


# --- a whole run --------------------------------------------------------------------------

CALC = '''\
def clamp(x, hi):
    if x > hi:
        return hi
    return x


def label(n):
    return "many" if n > 1 else "one"
'''

#: Tests that see the module only through a child process started outside the project.
TESTS = '''\
import subprocess, sys, tempfile


def child(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), check=True)
    return done.stdout.split()


def test_clamp():
    assert child("from calcpkg.calc import clamp; print(clamp(5, 3), clamp(2, 3), "
                 "clamp(3, 3))") == ["3", "2", "3"]
'''


def _project(tmp_path: Path, equivalent: str = "") -> tuple[Path, Path]:
    proj = tmp_path / "proj"
    (proj / "calcpkg").mkdir(parents=True)
    (proj / "calcpkg" / "__init__.py").write_text("", encoding="utf-8")
    (proj / "calcpkg" / "calc.py").write_text(CALC, encoding="utf-8")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_calc.py").write_text(TESTS, encoding="utf-8")
    config = tmp_path / "mutants.toml"
    config.write_text(textwrap.dedent('''\
        timeout_floor = 60.0
        [[target]]
        path = "calcpkg/calc.py"
        fast = ["tests/test_calc.py"]
        ''') + equivalent, encoding="utf-8")
    return proj, config


def _run(proj: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The original project on PYTHONPATH stands for the installed package: the children must
    # import the mutant all the same.
    env = {**os.environ, "PYTHONPATH": str(proj)}
    return subprocess.run([sys.executable, str(TOOL), "--root", str(proj), "--config",
                           str(config), "--nice", "0", *args], capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def test_a_run_kills_what_child_processes_see_and_lists_the_survivors(tmp_path: Path) -> None:
    proj, config = _project(tmp_path, textwrap.dedent('''\
        [[target.equivalent]]
        mutant = "clamp: `x > hi` -> `x >= hi`"
        why = "at x == hi both branches return the same value"
        '''))
    done = _run(proj, config)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr  # survivors left unexplained
    lines = [line for line in out.splitlines() if " mutants tested: " in line]
    assert len(lines) == 1, out
    m = re.fullmatch(r"calcpkg/calc\.py: (\d+) of (\d+) mutants tested: (\d+) killed \(0 by "
                     r"timeout\), 1 equivalent, (\d+) survived; score ([\d.]+)% of the "
                     r"non-equivalent; \d+ s", lines[0])
    assert m, lines[0]
    tested, total, killed, survived = map(int, m.groups()[:4])
    assert tested == total == killed + 1 + survived
    # Every other mutant of clamp is killed (through the child processes); label's survive.
    survivors = re.findall(r"^  SURVIVED (calcpkg/calc\.py:(\d+) (\w+): .*)$", out, re.M)
    assert survivors and {s[2] for s in survivors} == {"label"}, out
    assert len(survivors) == survived
    assert killed == 3, out  # clamp's negated test and its two returns
    assert f"--config {config}" in out and "--only 8." in out
    assert "equivalent  fast" in out or re.search(r"2\.\d equivalent", out), out
    # The kept results make a rerun instant and the same.
    again = _run(proj, config)
    assert again.returncode == 1
    rerun = [x for x in again.stdout.splitlines() if " mutants tested: " in x]
    assert [x.rsplit(";", 1)[0] for x in rerun] == [x.rsplit(";", 1)[0] for x in lines]
    assert "passes unmutated" not in again.stdout  # nothing re-run
    # --only and --diff test one mutant and show it.
    one = _run(proj, config, "--only", "2.2", "--diff", "--fresh")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "1 of " in one.stdout and "-    if x > hi:\n+    if (x >= hi):" in one.stdout


def test_every_survivor_judged_equivalent_exits_0(tmp_path: Path) -> None:
    proj, config = _project(tmp_path)
    listed = _run(proj, config, "--list")
    assert listed.returncode == 0, listed.stderr
    keys = re.findall(r"^ +8\.\d+ (label: .*) \[\w+\]$", listed.stdout, re.M)
    assert keys, listed.stdout
    entries = "".join(f'[[target.equivalent]]\nmutant = {_toml(k)}\nwhy = "no test"\n'
                      for k in keys)
    config.write_text(config.read_text(encoding="utf-8") + entries, encoding="utf-8")
    done = _run(proj, config, "--only", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(keys)} equivalent, 0 survived; score 100.0%" in done.stdout


def _toml(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize(("text", "message"), [
    ('[[target]]\npath = "calcpkg/calc.py"\n', "target[0].fast: expected a list of pytest"),
    ('[[target]]\npath = "calcpkg/calc.py"\nfast = ["t"]\n[[target.equivalent]]\n'
     'mutant = "x"\n', "equivalent[0]: expected `mutant`"),
    ("x = [", "not valid TOML"),
    ("", "no [[target]]"),
])
def test_a_bad_configuration_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    proj, config = _project(tmp_path)
    config.write_text(text, encoding="utf-8")
    done = _run(proj, config)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_tier_that_fails_without_a_mutant_is_a_setup_error(tmp_path: Path) -> None:
    proj, config = _project(tmp_path)
    (proj / "tests" / "test_calc.py").write_text("def test_no():\n    assert False\n",
                                                  encoding="utf-8")
    done = _run(proj, config)
    assert done.returncode == 2
    assert "the fast tier fails without any mutant" in done.stderr, done.stderr


def test_the_project_configuration_names_existing_modules_and_tests() -> None:
    import tomllib

    data = tomllib.loads((ROOT / "tools" / "mutants.toml").read_text(encoding="utf-8"))
    for target in data["target"]:
        assert (ROOT / target["path"]).is_file(), target["path"]
        for tier in ("fast", "slow"):
            for arg in target.get(tier, []):
                if arg.startswith("tests/"):
                    assert (ROOT / arg.split("::")[0]).exists(), arg  # a file or a folder
        for eq in target.get("equivalent", []):
            assert eq["why"].strip(), eq
