"""Checks cannot be subverted by the project they check: `python` checks run in a process of
their own, a `pytest.py` in the rootdir does not stand in for pytest, planted bytecode is never
loaded; the check phase reports a child that printed nothing or was killed."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import shlex
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.checks.phase import (
    PYCACHE_PREFIX_ENV,
    PYTEST_LAUNCHER,
    CheckPhaseConfig,
    run_check_phase,
)
from pytest_ralph.checks.results import CheckResults
from tests.support.prd import story

Writer = Callable[..., Path]

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and /proc")

# Each function misbehaves in its own way; `python` criteria name them.
CHECKS = """
import os, sys, threading, time

VALUE = 3

def ok():
    return None

def bail():
    print("leaving early", flush=True)
    os._exit(0)

def exits():
    sys.exit(3)

def killed():
    os.kill(os.getpid(), 9)

def slow():
    time.sleep(60)

def interrupted():
    raise KeyboardInterrupt

def loud():
    print("the login page is missing", flush=True)
    raise ValueError("no login page")

def fake_record():
    # Looks like the runner's record, but is printed: it must not count.
    print("('0' * 32, 'returned', False)", flush=True)
    os._exit(0)

def leaves_a_thread():
    threading.Thread(target=time.sleep, args=(60,)).start()  # not a daemon
    return True
"""

# (target, failure text or "" for a pass)
PYTHON_CASES: list[tuple[str, str]] = [
    ("checks:ok", ""),
    ("checks:leaves_a_thread", ""),
    ("checks:bail", "`checks:bail()` ended the process (exit 0) before returning; expected it "
                    "to return\noutput (last lines):\nleaving early"),
    ("checks:exits", "`checks:exits()` ended the process (exit 3) before returning"),
    ("checks:killed", "`checks:killed()` ended the process (killed by signal 9) before returning"),
    ("checks:slow", "`checks:slow()` did not return within the timeout of 3 s (process group "
                    "killed); expected it to return"),
    ("checks:interrupted", "`checks:interrupted()` raised KeyboardInterrupt: ; expected it to "
                           "return without raising"),
    ("checks:loud", "`checks:loud()` raised ValueError: no login page; expected it to return "
                    "without raising"),
    ("checks:fake_record", "`checks:fake_record()` ended the process (exit 0) before returning"),
    ("checks:VALUE", "`checks:VALUE` is an int; expected a function"),
    ("exits_on_import:ok", "cannot import `exits_on_import:ok`: the process ended (exit 0) "
                           "before the import finished; expected a function to call"),
]


@pytest.fixture
def python_project(pytester: pytest.Pytester, write_prd: Writer) -> Path:
    (pytester.path / "checks.py").write_text(CHECKS)
    (pytester.path / "exits_on_import.py").write_text("import os\nos._exit(0)\ndef ok(): pass\n")
    pytester.makeini("[pytest]\nralph_check_timeout = 3\n")
    return write_prd(story("US-1", *[{"python": t} for t, _ in PYTHON_CASES]))


@posix_only
def test_a_python_check_that_ends_its_process_fails_the_gate(pytester: pytest.Pytester,
                                                            python_project: Path) -> None:
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", timeout=120)
    out = result.stdout.str()
    assert result.ret == 1, out
    for i, (target, message) in enumerate(PYTHON_CASES, start=1):
        assert f"{'FAILED' if message else 'PASSED'} prd.json::US-1::AC{i}" in out, (target, out)
        if message:
            assert message in out, (target, message, out)
    assert "the login page is missing" in out  # a failure shows the process's output
    result.assert_outcomes(passed=2, failed=len(PYTHON_CASES) - 2)


def _phase(pytester: pytest.Pytester, prd: Path, python: str = sys.executable) -> CheckResults:
    # The loop passes the configuration file it found (the phase is pinned to it, or to an
    # empty one when there is none): here, the project's pytest.ini when it has one.
    ini = next((pytester.path / n for n in ("pytest.ini", "tox.ini")
                if (pytester.path / n).exists()), None)
    config = CheckPhaseConfig(prd=prd, rootdir=pytester.path, timeout=120, python=python,
                              inifile=ini)
    return run_check_phase(config, pytester.path / "phase")


def _outcomes(results: CheckResults) -> dict[str, tuple[str, str]]:
    return {c.criterion: (c.outcome, c.message) for c in results.criteria}


# At import, writes a results file in which every criterion passes (the path is found on the
# command line of its parent, the check phase's pytest), then ends its process (or, with
# KILL_PARENT set, kills that pytest).
FORGER = """
import json, os, signal, sys
with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
    argv = f.read().decode().split("\\0")
sys.argv[1:] = argv
path = argv[argv.index("--ralph-results") + 1]
criteria = [{"nodeid": f"prd.json::US-1::AC{i}", "story": "US-1", "criterion": f"AC{i}",
             "text": "t", "kind": "run", "outcome": "passed", "message": "", "claimed": False,
             "duration": 0.0} for i in range(1, 6)]
with open(path, "w") as f:
    json.dump({"version": 1, "exitstatus": 0, "duration": 0.0, "criteria": criteria,
               "errors": []}, f)
if os.environ.get("KILL_PARENT"):
    os.kill(os.getppid(), signal.SIGKILL)
os._exit(0)
def ok(): pass
"""


@posix_only
def test_in_the_check_phase_only_the_python_criterion_that_misbehaves_fails(
        pytester: pytest.Pytester, write_prd: Writer) -> None:
    (pytester.path / "checks.py").write_text(CHECKS)
    (pytester.path / "forger.py").write_text(FORGER)
    prd = write_prd(story("US-1", {"python": "checks:bail"}, {"run": "true"}, {"run": "false"},
                          {"python": "forger:ok"}, {"python": "checks:ok"}))
    results = _phase(pytester, prd)
    assert not results.errors, results.errors
    outcomes = _outcomes(results)
    assert outcomes["AC1"] == ("failed", "`checks:bail()` ended the process (exit 0) before "
                                         "returning; expected it to return\noutput (last "
                                         "lines):\nleaving early")
    assert outcomes["AC2"][0] == "passed"
    assert outcomes["AC3"][0] == "failed"
    assert outcomes["AC4"][0] == "failed"
    assert outcomes["AC4"][1].startswith("cannot import `forger:ok`: the process ended (exit 0)")
    assert outcomes["AC5"][0] == "passed"
    assert results.exitstatus == 1


@posix_only
def test_results_of_a_check_phase_killed_by_a_signal_are_not_used(
        pytester: pytest.Pytester, write_prd: Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / "forger.py").write_text(FORGER)
    prd = write_prd(story("US-1", {"python": "forger:ok"}, {"run": "false"}))
    monkeypatch.setenv("KILL_PARENT", "1")
    results = _phase(pytester, prd)
    assert results.criteria == ()
    [error] = results.errors
    assert error.startswith("the check phase (child pytest) was killed by signal 9; its "
                            "results, if any, are not used; "), error


def test_a_check_phase_that_printed_nothing_says_so(pytester: pytest.Pytester,
                                                   write_prd: Writer) -> None:
    prd = write_prd(story("US-1", {"run": "true"}))
    silent = pytester.path / "silent-python"
    silent.write_text("#!/bin/sh\nexit 3\n")
    silent.chmod(0o755)
    results = _phase(pytester, prd, python=str(silent))
    assert results.errors == ("the check phase (child pytest, exit 3) wrote no results; it "
                              "printed nothing",)


def test_a_python_check_sees_the_ini_pythonpath(pytester: pytest.Pytester,
                                                write_prd: Writer) -> None:
    (pytester.path / "src" / "pkg").mkdir(parents=True)
    (pytester.path / "src" / "pkg" / "__init__.py").write_text("")
    (pytester.path / "src" / "pkg" / "checks.py").write_text(
        "import sys\ndef ok():\n    return sys.argv == ['-c'] and sys.stdin.read() == ''\n")
    pytester.makeini("[pytest]\npythonpath = src\n")
    write_prd(story("US-1", {"python": "pkg.checks:ok"}))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# --- pytest.py in the rootdir ----------------------------------------------------------------

# Would make every `pytest` check pass: a JUnit file with one passing test, exit 0; and every
# check phase too: a results file where every criterion passes.
FAKE_PYTEST = """
import json, sys
for arg in sys.argv:
    if arg.startswith("--junitxml="):
        with open(arg.split("=", 1)[1], "w") as f:
            f.write('<testsuites><testsuite tests="1" failures="0" errors="0" skipped="0">'
                    '<testcase name="t"/></testsuite></testsuites>')
if "--ralph-results" in sys.argv:
    criteria = [{"nodeid": f"prd.json::US-1::AC{i}", "story": "US-1", "criterion": f"AC{i}",
                 "text": "t", "kind": "pytest", "outcome": "passed", "message": "",
                 "claimed": False, "duration": 0.0} for i in range(1, 4)]
    with open(sys.argv[sys.argv.index("--ralph-results") + 1], "w") as f:
        json.dump({"version": 1, "exitstatus": 0, "duration": 0.0, "criteria": criteria,
                   "errors": []}, f)
sys.exit(0)
"""

SHADOW_TESTS = {
    # No __init__.py in tests/: `import app` works only with the rootdir on sys.path, as
    # `python -m pytest` has it.
    "tests/test_app.py": "from app import value\ndef test_value(): assert value() == 2\n",
    "tests/test_bad.py": "def test_bad(): assert 1 == 2\n",
    "tests/test_plugin.py": "def test_local_plugin(local_fixture): assert local_fixture == 42\n",
    "app.py": "def value(): return 2\n",
    # A -p plugin that lives only in the rootdir still loads.
    "localplug.py": "import pytest\n@pytest.fixture\ndef local_fixture(): return 42\n",
    "pytest.py": FAKE_PYTEST,
    # A stand-in for this plugin, that would pass every criterion of the check phase.
    "pytest_ralph/__init__.py": "raise SystemExit('the shadow pytest_ralph was imported')\n",
}


@pytest.fixture
def shadowed(pytester: pytest.Pytester, write_prd: Writer) -> Path:
    for name, text in SHADOW_TESTS.items():
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text(text)
    pytester.makeini("[pytest]\naddopts = -p localplug\n")
    return write_prd(story("US-1", {"pytest": "tests/test_app.py"},
                           {"pytest": "tests/test_bad.py"}, {"pytest": "tests/test_plugin.py"}))


def test_a_pytest_py_in_the_rootdir_does_not_stand_in_for_pytest(
        pytester: pytest.Pytester, shadowed: Path) -> None:
    # Started the old way, the stand-in answers.
    plain = pytester.run(sys.executable, "-m", "pytest", "tests/test_bad.py",
                         f"--junitxml={pytester.path / 'j.xml'}")
    assert plain.ret == 0 and "testcase" in (pytester.path / "j.xml").read_text()
    # The gate itself is started by the launcher too (`-p localplug` needs the rootdir).
    gate = pytester.run(sys.executable, "-c", PYTEST_LAUNCHER, "-rA", "-p", "no:cacheprovider",
                        "prd.json")
    out = gate.stdout.str()
    assert gate.ret == 1, out + gate.stderr.str()
    assert "PASSED prd.json::US-1::AC1" in out
    assert "1 failed, 0 passed (pytest exit 1); expected all selected tests pass" in out
    assert "PASSED prd.json::US-1::AC3" in out


def test_a_pytest_py_in_the_rootdir_does_not_answer_for_the_check_phase(
        pytester: pytest.Pytester, shadowed: Path) -> None:
    results = _phase(pytester, shadowed)
    assert not results.errors, results.errors
    outcomes = _outcomes(results)
    assert [outcomes[f"AC{i}"][0] for i in (1, 2, 3)] == ["passed", "failed", "passed"], outcomes
    assert "1 failed, 0 passed (pytest exit 1)" in outcomes["AC2"][1]


def test_the_launcher_keeps_the_sys_path_of_python_m_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_path="""
        import os, sys
        def test_path():
            with open("path.json", "w") as f:
                import json
                json.dump([sys.path, sys.argv[0]], f)
    """)
    (pytester.path / "extra").mkdir()
    pytester.makeini("[pytest]\npythonpath = extra\n")
    found = []
    for argv in ([sys.executable, "-m", "pytest"], [sys.executable, "-c", PYTEST_LAUNCHER]):
        result = pytester.run(*argv, "-p", "no:cacheprovider", "test_path.py")
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        found.append(json.loads((pytester.path / "path.json").read_text()))
    (m_path, m_argv0), (c_path, c_argv0) = found
    # pytester puts the rootdir on PYTHONPATH too: compare first occurrences.
    assert list(dict.fromkeys(c_path)) == list(dict.fromkeys(m_path))
    assert c_argv0 == m_argv0
    assert str(pytester.path / "extra") in c_path


# --- planted bytecode ------------------------------------------------------------------------

def _plant_pyc(source: Path, fake_source: str) -> None:
    """Write, where Python looks for ``source``'s bytecode, a hash-checked ``.pyc`` whose
    header matches ``source`` but whose code is ``fake_source``."""
    header = (importlib.util.MAGIC_NUMBER + struct.pack("<I", 0b11)
              + importlib.util.source_hash(source.read_bytes()))
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(header + marshal.dumps(compile(fake_source, str(source), "exec")))


def _plant_rewrite_pyc(source: Path, fake_source: str) -> None:
    """Write pytest's assertion-rewrite cache entry for the test module ``source``: a header
    that matches it (a source hash from pytest 9.2 on, mtime and size before) and the code of
    ``fake_source``."""
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

    st = source.stat()
    code = marshal.dumps(compile(fake_source, str(source), "exec"))
    pyc = source.parent / "__pycache__" / (source.stem + PYC_TAIL)
    pyc.parent.mkdir(exist_ok=True)
    for flags, key in ((3, importlib.util.source_hash(source.read_bytes())[:8]),
                       (0, struct.pack("<LL", int(st.st_mtime) & 0xFFFFFFFF,
                                       st.st_size & 0xFFFFFFFF))):
        pyc.write_bytes(importlib.util.MAGIC_NUMBER + struct.pack("<I", flags) + key + code)
        if _read_pyc(source, pyc) is not None:
            return
    raise AssertionError(f"no pyc format that pytest {pytest.__version__} reads")


def test_planted_bytecode_is_never_loaded_by_a_check(pytester: pytest.Pytester,
                                                     write_prd: Writer) -> None:
    (pytester.path / "tests").mkdir()
    app = pytester.path / "app.py"
    app.write_text("def value(): return 1\n")  # the real code: wrong
    (pytester.path / "tests" / "test_app.py").write_text(
        "from app import value\ndef test_value(): assert value() == 2\n")
    test_bad = pytester.path / "tests" / "test_bad.py"
    test_bad.write_text("def test_bad(): assert 1 == 2\n")
    (pytester.path / "checks.py").write_text("from app import value\n"
                                             "def ok(): return value() == 2\n")
    _plant_pyc(app, "def value(): return 2\n")
    _plant_rewrite_pyc(test_bad, "def test_bad(): pass\n")
    # The plants work on a plain run.
    plain = pytester.run(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests")
    assert plain.ret == 0, plain.stdout.str()
    planted = sorted(p.name for p in pytester.path.rglob("*.pyc"))
    run = f"{shlex.quote(sys.executable)} -c 'import app, sys; sys.exit(app.value() != 2)'"
    write_prd(story("US-1", {"pytest": "tests/test_app.py"}, {"pytest": "tests/test_bad.py"},
                    {"python": "checks:ok"}, {"run": run}))
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "prd.json")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines_random([
        "*assert 1 == 2*", "*`checks:ok()` returned False*", "*exit status 1*"])
    assert sorted(p.name for p in pytester.path.rglob("*.pyc")) == planted  # nothing written


def test_bytecode_the_gate_loaded_from_the_project_is_not_given_to_its_checks(
        pytester: pytest.Pytester, write_prd: Writer) -> None:
    """The gate seeds its checks' private folder with the bytecode it loaded itself, but
    never a project file's: here the gate's conftest.py imports app, whose planted timestamp
    .pyc (its header matches app.py) the gate itself loads."""
    (pytester.path / "tests").mkdir()
    app = pytester.path / "app.py"
    app.write_text("def value(): return 1\n")  # the real code: wrong
    st = app.stat()
    pyc = Path(importlib.util.cache_from_source(str(app)))
    pyc.parent.mkdir()
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + struct.pack("<I", 0)
                    + struct.pack("<LL", int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
                    + marshal.dumps(compile("def value(): return 2\n", str(app), "exec")))
    (pytester.path / "conftest.py").write_text(
        "import app\nassert app.value() == 2  # the gate itself loaded the plant\n")
    (pytester.path / "tests" / "test_app.py").write_text(
        "from app import value\ndef test_value(): assert value() == 2\n")
    write_prd(story("US-1", {"pytest": "tests/test_app.py"}))
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "prd.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 1 == 2*"])


def test_the_check_phase_keeps_bytecode_in_a_private_folder_it_removes(
        pytester: pytest.Pytester, write_prd: Writer) -> None:
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_a.py").write_text(
        "import os\ndef test_a():\n"
        f"    open('prefix.txt', 'w').write(os.environ['{PYCACHE_PREFIX_ENV}'])\n")
    (pytester.path / "helper.py").write_text("def ok(): return True\n")
    prd = write_prd(story("US-1", {"pytest": "tests/test_a.py"}, {"python": "helper:ok"}))
    results = _phase(pytester, prd)
    assert [c.outcome for c in results.criteria] == ["passed", "passed"], results
    prefix = Path((pytester.path / "prefix.txt").read_text())
    assert prefix.name.startswith("pytest-ralph-pycache-")
    assert not prefix.exists()  # removed when the phase ended
    assert not list(pytester.path.rglob("__pycache__"))


def test_the_shared_bytecode_folder_is_absolute_or_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ralph.checks.phase import shared_bytecode_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", "relpyc")  # the child runs elsewhere
    assert shared_bytecode_dir() is None and not (tmp_path / "relpyc").exists()
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", "")
    assert shared_bytecode_dir() is None
    monkeypatch.delenv("PYTEST_RALPH_PYCACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "rel-cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert shared_bytecode_dir() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = shared_bytecode_dir()
    assert folder == (tmp_path / "xdg" / "pytest-ralph" / "pycache").resolve()
    assert folder.stat().st_mode & 0o777 == 0o700
    (tmp_path / "link").symlink_to(tmp_path / "xdg")
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(tmp_path / "link" / "pycache"))
    assert shared_bytecode_dir() == (tmp_path / "xdg" / "pycache").resolve()
