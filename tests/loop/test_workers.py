"""``--ralph-workers``: each check phase on pytest-xdist workers, with the results of one process.

The loop tests run ``pytest --ralph`` twice in real subprocesses, once in one process and once
with ``--ralph-workers 2``, in two copies of the same project, and compare everything the runs
leave behind that is not a time: every check's results file, run.json, the report, the
progress lines and the PRD after write-back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.checks import phase as checkrun
from pytest_ralph.checks.phase import (
    XDIST_NEEDED,
    CheckPhaseConfig,
    run_check_phase,
    workers_problem,
)
from pytest_ralph.loop.settings import SettingsError, describe, from_json, resolve, to_json
from tests.support.env import PY, clean_env
from tests.support.prd import story
from tests.support.project import Done, Project, run

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell commands")

INI_FILE = "pytest.ini"


# -- the setting ------------------------------------------------------------------------------


def _resolve(tmp_path: Path, *, cli: dict[str, Any] | None = None,
             env: dict[str, str] | None = None, ini: dict[str, Any] | None = None) -> Any:
    ini_values = ini or {}
    return resolve(cli=cli or {}, env=env or {}, ini=lambda key: ini_values.get(key),
                   ini_file=INI_FILE, invocation_dir=tmp_path, rootdir=tmp_path)


@pytest.mark.parametrize(("where", "raw", "value", "source"), [
    ("cli", "2", 2, "--ralph-workers"),
    ("cli", "auto", "auto", "--ralph-workers"),
    ("env", " AUTO ", "auto", "environment variable PYTEST_RALPH_WORKERS"),
    ("env", "256", 256, "environment variable PYTEST_RALPH_WORKERS"),
    ("ini", "1", 1, "ini ralph_workers (pytest.ini)"),
    ("ini", 8, 8, "ini ralph_workers (pytest.ini)"),  # a TOML integer (pytest >= 9.2)
])
def test_workers_from_each_source(tmp_path: Path, where: str, raw: Any, value: Any,
                                  source: str) -> None:
    where_args: dict[str, Any] = {
        "cli": {"cli": {"workers": raw}}, "env": {"env": {"PYTEST_RALPH_WORKERS": raw}},
        "ini": {"ini": {"ralph_workers": raw}}}[where]
    s = _resolve(tmp_path, **where_args)
    assert (s.workers, s.sources["workers"]) == (value, source)
    assert f"workers = {value} ({source})" in describe(s)
    # The Claude Code driver stores the settings with the run and reads them back.
    assert from_json(to_json(s), "stored").workers == value


def test_workers_default_is_unset(tmp_path: Path) -> None:
    s = _resolve(tmp_path)
    assert s.workers is None and s.sources["workers"] == "default"
    assert not [line for line in describe(s) if line.startswith("workers")]
    assert from_json(to_json(s), "stored").workers is None
    assert from_json({k: v for k, v in to_json(s).items() if k != "workers"},
                     "an older run").workers is None


_BAD_WORKERS = ["0", "257", "-1", "two", "1.5", "", "2 4", "²", True, "logical"]
_WORKERS_SOURCES = [("cli", "--ralph-workers"), ("ini", "ini ralph_workers (pytest.ini)"),
                    ("env", "environment variable PYTEST_RALPH_WORKERS")]


# An empty variable or ini value is unset (not bad), and the environment holds text only.
@pytest.mark.parametrize(("raw", "where", "source"), [
    (raw, where, source) for where, source in _WORKERS_SOURCES for raw in _BAD_WORKERS
    if not (where == "env" and (raw == "" or raw is True)) and not (where == "ini" and raw == "")])
def test_bad_workers_name_their_source(tmp_path: Path, raw: Any, where: str,
                                       source: str) -> None:
    args: dict[str, Any] = {"cli": {"cli": {"workers": raw}},
                            "env": {"env": {"PYTEST_RALPH_WORKERS": raw}},
                            "ini": {"ini": {"ralph_workers": raw}}}[where]
    with pytest.raises(SettingsError) as exc:
        _resolve(tmp_path, **args)
    assert str(exc.value) == (f"workers from {source}: expected a number of workers from 1 to "
                              f"256, or 'auto'; got {raw!r}")


def test_help_and_report_header(pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    helped = pytester.runpytest_subprocess("--help")
    out = " ".join(helped.stdout.str().split())
    assert "--ralph-workers=N|auto Run each check phase on N pytest-xdist workers" in out
    assert "[ini ralph_workers, env PYTEST_RALPH_WORKERS]" in out
    ralph_group = out.split("Ralph agent loops (pytest-ralph):", 1)[1]
    assert "--ralph-workers" in ralph_group.split("[pytest] ini-options", 1)[0]
    write_prd(story("US-1", {"text": "true", "run": "true"}))
    gate = pytester.runpytest_subprocess("prd.json", "--ralph-workers", "2")
    assert gate.ret == 0
    gate.stdout.fnmatch_lines(["ralph: workers = 2 (--ralph-workers)"])
    bad = pytester.runpytest_subprocess("prd.json", "--ralph-workers", "many")
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(["*pytest-ralph: workers from --ralph-workers: expected a number "
                              "of workers from 1 to 256, or 'auto'; got 'many'"])


# -- the child's argv -------------------------------------------------------------------------


def test_argv_passes_n_after_the_ini_and_before_the_passed_on_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    base = CheckPhaseConfig(prd=tmp_path / "prd.json", rootdir=tmp_path,
                            inifile=tmp_path / "pytest.ini", extra_args=("-p", "no:randomly"))
    assert "-n" not in base.argv(tmp_path / "r.json")
    for workers in ("3", "auto", "0"):
        argv = replace(base, workers=workers).argv(tmp_path / "r.json")
        at = argv.index("-n")
        assert argv[at + 1] == workers
        assert argv.index("-c") < at < argv.index("no:randomly")
        assert "xdist" not in argv  # found by its entry point
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    argv = replace(base, workers="2").argv(tmp_path / "r.json")
    assert argv[argv.index("pytest_ralph.plugin") + 1:][:2] == ["-p", "xdist"]
    assert "xdist" not in base.argv(tmp_path / "r.json")


def test_workers_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    assert workers_problem("", ()) == ""
    assert workers_problem("2", ("-p", "no:randomly", "-o", "x=y")) == ""
    assert "-p no:xdist" in workers_problem("auto", ("-p", "no:xdist"))
    monkeypatch.setattr(checkrun.importlib.util, "find_spec",
                        lambda name, *a: None if name == "xdist" else object())
    assert workers_problem("2", ()) == XDIST_NEEDED
    assert workers_problem("", ()) == ""


def test_without_xdist_the_loop_is_a_usage_error(pytester: pytest.Pytester,
                                                 write_prd: Callable[..., Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester puts its folder first on PYTHONPATH: this sitecustomize hides pytest-xdist the
    # way an environment without it has it (no module, no plugin entry point).
    pytester.makepyfile(sitecustomize="import sys\nsys.modules['xdist'] = None\n")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    write_prd(story("US-1", {"text": "a", "run": "test -f a.txt"}))
    result = pytester.runpytest_subprocess("-p", "pytest_ralph.plugin", "--ralph",
                                           "--ralph-agent", f"{PY} -c pass",
                                           "--ralph-workers", "2")
    assert result.ret == 4, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["pytest-ralph: --ralph-workers needs pytest-xdist: pip install "
                                 "pytest-xdist (workers = 2 from --ralph-workers)"])
    assert not (pytester.path / ".pytest_ralph" / "runs").exists()
    # Without workers the same environment runs the loop.
    pytester.makepyfile(fixer="open('a.txt', 'w').write('x')\n")
    done = pytester.runpytest_subprocess("-p", "pytest_ralph.plugin", "--ralph", "--ralph-agent",
                                         f"{PY} fixer.py")
    assert done.ret == 0, done.stdout.str() + done.stderr.str()


def test_p_no_xdist_with_workers_is_a_usage_error(pytester: pytest.Pytester,
                                                  write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-1", {"text": "a", "run": "test -f a.txt"}))
    result = pytester.runpytest_subprocess("-p", "no:xdist", "--ralph", "--ralph-agent",
                                           f"{PY} -c pass", "--ralph-workers", "2")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--ralph-workers needs pytest-xdist, which -p no:xdist turns "
                                 "off; drop one (workers = 2 from --ralph-workers)"])


@pytest.mark.parametrize("n", [["-n", "2"], ["-n4"], ["--numprocesses=auto"],
                               ["--numprocesses", "1"]])
@pytest.mark.parametrize("mode", [["--ralph"], ["--ralph-dry-run"],
                                  ["--ralph-init", "--ralph-driver", "claude"]])
def test_n_on_the_loops_command_line_is_a_usage_error(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], n: list[str],
        mode: list[str]) -> None:
    write_prd(story("US-1", {"text": "a", "run": "test -f a.txt"}))
    result = pytester.runpytest_subprocess(*mode, "--ralph-agent", f"{PY} -c pass", *n)
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*pytest-ralph: -n cannot be used with {mode[0]} (the checks "
                                 "run in child processes: use --ralph-workers N or auto)"])
    assert not (pytester.path / ".pytest_ralph").exists()
    assert not (pytester.path / ".claude").exists()


# -- one check phase --------------------------------------------------------------------------


def _phase_results(root: Path, workers: str, name: str, **config: Any) -> dict[str, Any]:
    phase = CheckPhaseConfig(prd=root / "prd.json", rootdir=root, inifile=root / "pytest.ini",
                             workers=workers, junitxml=root / f"{name}.xml", **config)
    results = run_check_phase(phase, root / name)
    assert (root / f"{name}.xml").is_file() and (root / name / "check.xml").is_file()
    data = results.to_json()
    del data["duration"]
    for c in data["criteria"]:
        del c["duration"]
    return data


def test_results_come_in_prd_order_whatever_order_the_workers_finish(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    # The first criteria take longest: the workers report them last.
    write_prd(story("US-1", *[{"text": f"c{i}", "run": f"sleep {0.2 * (5 - i)}; echo {i}; "
                                                         f"exit {i % 2}"} for i in range(5)]),
              story("US-2", {"text": "fast", "run": "true"}))
    seq = _phase_results(pytester.path, "", "seq")
    par = _phase_results(pytester.path, "3", "par")
    assert par == seq
    assert [c["nodeid"] for c in par["criteria"]] == [
        *(f"prd.json::US-1::AC{i}" for i in range(1, 6)), "prd.json::US-2::AC1"]
    assert par["exitstatus"] == 1 and par["errors"] == []
    log = (pytester.path / "par" / "check.log").read_text()
    assert "bringing up nodes" in log, log  # it did run on workers


@pytest.mark.parametrize("workers", ["", "2"])
def test_results_come_in_prd_order_when_a_plugin_shuffles_the_run(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], workers: str) -> None:
    """As pytest-randomly does: a conftest reverses the items (on every worker alike)."""
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    (pytester.path / "conftest.py").write_text(
        "def pytest_collection_modifyitems(items):\n    items.reverse()\n")
    write_prd(story("US-1", *[{"text": f"c{i}", "run": f"exit {i % 2}"} for i in range(4)]),
              story("US-2", {"text": "last", "run": "true"}))
    data = _phase_results(pytester.path, workers, f"shuffled{workers or 0}")
    assert [c["nodeid"] for c in data["criteria"]] == [
        *(f"prd.json::US-1::AC{i}" for i in range(1, 5)), "prd.json::US-2::AC1"]


def test_workers_without_plugin_autoload(pytester: pytest.Pytester,
                                         write_prd: Callable[..., Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    write_prd(story("US-1", {"text": "a", "run": "true"}, {"text": "b", "run": "false"}))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # -p pytest_ralph.plugin -p xdist
    par = _phase_results(pytester.path, "2", "par")
    assert [c["outcome"] for c in par["criteria"]] == ["passed", "failed"], par
    assert "bringing up nodes" in (pytester.path / "par" / "check.log").read_text()


def test_a_prd_that_fails_to_load_is_reported_as_in_one_process(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    good = write_prd(story("US-1", {"text": "a", "run": "true"}, {"text": "b", "run": "true"}))
    good.write_text(good.read_text().replace('"userStories"', '"userStories",', 1))
    expected = (("US-1", "AC1", "a"), ("US-1", "AC2", "b"))
    seq = _phase_results(pytester.path, "", "seq", expected=expected)
    par = _phase_results(pytester.path, "2", "par", expected=expected)
    assert par == seq
    (error,) = par["errors"]
    assert error.startswith("collection error in prd.json:\ninvalid PRD ")
    assert par["exitstatus"] == 2  # interrupted by the collection error, as in one process
    assert [(c["criterion"], c["kind"]) for c in par["criteria"]] == [("AC1", "missing"),
                                                                        ("AC2", "missing")]


def test_the_workers_do_not_import_a_pytest_py_from_the_rootdir(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    planted = pytester.path / "planted.txt"
    for name in ("pytest.py", "execnet.py", "xdist.py"):
        (pytester.path / name).write_text(
            f"open({str(planted)!r}, 'a').write({name!r} + '\\n')\n"
            "raise SystemExit('a stand-in was imported')\n")
    write_prd(story("US-1", {"text": "a", "run": "true"}, {"text": "b", "run": "false"}))
    par = _phase_results(pytester.path, "2", "par")
    assert [c["outcome"] for c in par["criteria"]] == ["passed", "failed"], par
    assert not planted.exists(), planted.read_text()


def test_a_worker_has_the_sys_path_of_a_python_m_pytest_worker(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if "RALPH" in k]:  # CI's own (the chaos records)
        monkeypatch.delenv(name)
    pytester.makepyfile(test_path="""
        import json, os, sys
        def test_path():
            with open("path.json", "w") as f:
                json.dump([sys.path, sorted(k for k in os.environ if "RALPH" in k)], f)
    """)
    (pytester.path / "extra").mkdir()
    (pytester.path / "pytest.ini").write_text("[pytest]\npythonpath = extra\n")
    found = []
    for argv in ([sys.executable, "-m", "pytest"], checkrun.pytest_command(sys.executable)):
        result = pytester.run(*argv, "-p", "no:cacheprovider", "-n", "1", "test_path.py")
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        found.append(json.loads((pytester.path / "path.json").read_text()))
    (m_path, m_env), (c_path, c_env) = found
    # pytester puts the rootdir on PYTHONPATH too: compare first occurrences.
    assert list(dict.fromkeys(c_path)) == list(dict.fromkeys(m_path))
    assert c_env == m_env == []  # the launcher's note to its workers is gone


# -- the loop ---------------------------------------------------------------------------------

#: A stateful agent: its run k applies step k of agent-steps.json ({file: text, or null to
#: delete it}), then does nothing.
AGENT = """
import json, pathlib
runs = pathlib.Path("agent-runs.txt")
n = len(runs.read_text().splitlines()) if runs.exists() else 0
runs.write_text("run\\n" * (n + 1))
steps = json.loads(pathlib.Path("agent-steps.json").read_text())
for name, text in (steps[n] if n < len(steps) else {}).items():
    path = pathlib.Path(name)
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
"""

#: Passes on calls 1, 3, 5, ... and fails on 2, 4, 6, ...: each iteration's check fails it and
#: its re-check passes it.
FLIP = """
import pathlib, sys
p = pathlib.Path("flip-count.txt")
n = int(p.read_text()) + 1 if p.exists() else 1
p.write_text(str(n))
sys.exit(0 if n % 2 else 1)
"""


def make_project(root: Path, stories: list[dict[str, Any]], steps: list[dict[str, Any]],
                 ini: str = "", files: dict[str, str] | None = None) -> Path:
    """A project folder at ``root``: the PRD of ``stories``, pytest.ini (``ini``), the agent
    that plays ``steps`` and ``files``."""
    project = Project(root)
    project.write_ini(ini)
    project.write_prd(*stories, project="Demo", branchName="ralph/demo", description="demo")
    project.write("agent.py", AGENT)
    project.write("agent-steps.json", json.dumps(steps))
    for name, text in (files or {}).items():
        project.write(name, text)
    return root


def ralph(root: Path, *args: str, **env: str) -> Done:
    """``pytest --ralph`` with the agent of :func:`make_project` in ``root``, ``env`` added to
    the loop's environment."""
    return run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
                "--ralph", "--ralph-agent", f"{PY} agent.py", *args],
               cwd=root, env=clean_env(**env), timeout=300)


_TIMES = [
    (re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}"), "<run>"),
    (re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(\+00:00|Z)?"), "<time>"),
    (re.compile(r"\d{4}-\d\d-\d\d"), "<date>"),
    (re.compile(r"\b\d+\.\d+\b"), "<n>"),
]


def _normal(text: str, root: Path) -> str:
    text = text.replace(str(root), "<root>")
    for pattern, repl in _TIMES:
        text = pattern.sub(repl, text)
    return text


def left_behind(root: Path, result: Done) -> dict[str, Any]:
    """Everything a loop run left that is not a time, with the project folder as <root>."""
    (run_dir,) = (root / ".pytest_ralph" / "runs").glob("*")
    checks = {}
    for results in sorted(run_dir.glob("iteration-*/**/check.json")):
        data = json.loads(results.read_text(encoding="utf-8"))
        data.pop("duration")
        for c in data["criteria"]:
            c.pop("duration")
        checks[str(results.relative_to(run_dir))] = json.loads(_normal(json.dumps(data), root))
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    for key in ("run", "started", "finished"):
        run.pop(key)
    for it in run["iterations"]:
        if it["agent"]:
            it["agent"].pop("seconds", None)
            it["agent"].pop("duration", None)
    (report,) = (root / ".pytest_ralph" / "reports").glob("ralph-*.md")
    return {"code": result.returncode,
            # the settings line names --ralph-workers: the one thing meant to differ
            "stdout": [line for line in _normal(result.stdout, root).splitlines()
                       if not line.startswith("pytest-ralph: settings: ")],
            "checks": checks, "run": json.loads(_normal(json.dumps(run), root)),
            "report": _normal(report.read_text(encoding="utf-8"), root).splitlines(),
            "prd": (root / "prd.json").read_text(encoding="utf-8")}


def compare(tmp_path: Path, stories: list[dict[str, Any]], steps: list[dict[str, Any]],
            *args: str, ini: str = "", files: dict[str, str] | None = None,
            workers: str = "2") -> dict[str, Any]:
    """Run the same loop in one process and on ``workers`` workers; assert that they leave the
    same things behind; return those of the run on workers."""
    seq_root = make_project(tmp_path / "seq", stories, steps, ini, files)
    par_root = make_project(tmp_path / "par", stories, steps, ini, files)
    seq = ralph(seq_root, *args)
    par = ralph(par_root, *args, "--ralph-workers", workers)
    assert seq.stderr == par.stderr == "", seq.stderr + par.stderr
    a, b = left_behind(seq_root, seq), left_behind(par_root, par)
    for key in a:
        assert b[key] == a[key], key
    logs = sorted(par_root.glob(".pytest_ralph/runs/*/iteration-*/check.log"))
    assert logs and all("bringing up nodes" in log.read_text() for log in logs), (
        "the check phases did not run on workers")
    return b


def _criteria(*names: str) -> list[dict[str, str]]:
    return [{"text": f"{n} exists", "run": f"echo looking for {n}; test -f {n}"} for n in names]


STORIES = [
    story("US-001", *_criteria("a.txt"),
          {"text": "b.txt, slowly", "run": "sleep 0.4; test -f b.txt"}, priority=1),
    story("US-002", {"text": "always", "run": "true"}, *_criteria("c.txt"),
          "The docs read well", priority=2),
]
FIXES = [{"a.txt": "x"}, {"b.txt": "x"}, {"c.txt": "x"}]


def test_a_loop_on_workers_converges_exactly_as_in_one_process(tmp_path: Path) -> None:
    par = compare(tmp_path, STORIES, FIXES, "--ralph-max-iterations", "4",
                  "--junitxml", "out/junit.xml")
    assert par["code"] == 1  # the text criterion stays claimed-not-done: the limit
    assert [it["failing"] for it in par["run"]["iterations"]] == [
        ["US-001::AC1", "US-001::AC2", "US-002::AC2", "US-002::AC3"],
        ["US-001::AC2", "US-002::AC2", "US-002::AC3"],
        ["US-002::AC2", "US-002::AC3"], ["US-002::AC3"], ["US-002::AC3"]]
    base = par["checks"]["iteration-000/check.json"]
    assert [c["nodeid"] for c in base["criteria"]] == [
        "prd.json::US-001::AC1", "prd.json::US-001::AC2", "prd.json::US-002::AC1",
        "prd.json::US-002::AC2", "prd.json::US-002::AC3"]
    assert "looking for a.txt" in base["criteria"][0]["message"]
    assert [s["passes"] for s in json.loads(par["prd"])["userStories"]] == [True, False]
    assert "| US-001 | story US-001 | 0/2 | 1/2 | 2/2 ok | 2/2 ok | 2/2 ok |" in par["report"]
    xml = (tmp_path / "par" / "out" / "junit.xml").read_text()
    assert xml.count("<testcase ") == 5 and 'name="ralph_story"' in xml


def test_k_with_workers(tmp_path: Path) -> None:
    par = compare(tmp_path, STORIES, FIXES, "-k", "US-001")
    assert par["code"] == 0
    assert "  selected by -k 'US-001': 2 criteria" in par["stdout"]
    last = par["checks"][max(par["checks"])]
    assert [c["nodeid"] for c in last["criteria"]] == ["prd.json::US-001::AC1",
                                                       "prd.json::US-001::AC2"]


def test_a_broken_prd_with_workers(tmp_path: Path) -> None:
    stories = [story("US-001", *_criteria("a.txt"))]
    good = json.dumps({"project": "Demo", "branchName": "ralph/demo", "description": "demo",
                       "userStories": stories}, indent=2) + "\n"
    broken = good.replace('"userStories"', '"userStories",', 1)
    par = compare(tmp_path, stories, [{"prd.json": broken}, {"prd.json": good, "a.txt": "x"}])
    assert par["code"] == 0
    assert any(line.startswith("  Result: error: the checks could not run (invalid PRD ")
               for line in par["stdout"])
    (error,) = par["checks"]["iteration-001/check.json"]["errors"]
    assert error.startswith("collection error in prd.json:\ninvalid PRD <root>/prd.json")
    assert par["checks"]["iteration-001/check.json"]["exitstatus"] == 2


def test_a_flaky_criterion_is_rechecked_in_one_process(tmp_path: Path) -> None:
    stories = [story("US-001", {"text": "flaky service answers", "run": f"{PY} flip.py"},
                     *_criteria("never.txt"))]
    par = compare(tmp_path, stories, [], "--ralph-max-iterations", "2", files={"flip.py": FLIP})
    assert [it["flaky"] for it in par["run"]["iterations"]] == [[], ["US-001::AC1"],
                                                               ["US-001::AC1"]]
    assert "iteration-001/recheck/check.json" in par["checks"]
    (recheck,) = (tmp_path / "par").glob(".pytest_ralph/runs/*/iteration-001/recheck/check.log")
    assert "bringing up nodes" not in recheck.read_text()


# Each criterion leaves its mark, then waits for the other's: both pass only when they run at
# the same time. RALPH_WAIT bounds the wait (tenths of a second).
WAIT_FOR = ("touch {me}.mark; i=0; while [ ! -f {other}.mark ]; do i=$((i+1)); "
            '[ "$i" -gt "${{RALPH_WAIT:-600}}" ] && exit 1; sleep 0.1; done')


def test_the_criteria_run_in_parallel_and_ralph_workers_beats_addopts(tmp_path: Path) -> None:
    stories = [story("US-001", {"text": "left", "run": WAIT_FOR.format(me="left", other="right")},
                     {"text": "right", "run": WAIT_FOR.format(me="right", other="left")}),
               story("US-002", {"text": "on two workers",
                                "run": 'test "$PYTEST_XDIST_WORKER_COUNT" = 2'})]
    # addopts asks for one worker: --ralph-workers comes later on the child's command line.
    root = make_project(tmp_path / "par", stories, [], ini="addopts = -n 1\n")
    done = ralph(root, "--ralph-workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  3/3 criteria passing" in done.stdout
    assert not (root / "agent-runs.txt").exists()
    # One at a time, each waits for the other in vain (for 0.3 s here).
    for mark in root.glob("*.mark"):
        mark.unlink()
    gate = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "no:randomly", "prd.json", "-k", "US-001", "-n", "0", "-q"],
                          cwd=root, env=clean_env(RALPH_WAIT="3"), capture_output=True,
                          text=True, timeout=120, check=False)
    assert gate.returncode == 1, gate.stdout
    assert "1 failed, 1 passed" in gate.stdout, gate.stdout


def test_the_claude_code_driver_stores_and_applies_workers(tmp_path: Path) -> None:
    stories = [story("US-001", {"text": "on two workers",
                                "run": 'test "$PYTEST_XDIST_WORKER_COUNT" = 2'},
                     *_criteria("a.txt"))]
    root = make_project(tmp_path / "proj", stories, [])
    env = clean_env()
    armed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p",
                            "no:cacheprovider", "--ralph-init", "--ralph-driver", "claude",
                            "--ralph-workers", "2"], cwd=root, env=env, capture_output=True,
                           text=True, timeout=180, check=False)
    assert armed.returncode == 0, armed.stdout + armed.stderr
    assert "1/2 criteria passing" in armed.stdout + armed.stderr
    (run_dir,) = (root / ".pytest_ralph" / "runs").glob("*")
    base = json.loads((run_dir / "iteration-000" / "check.json").read_text())
    assert [c["outcome"] for c in base["criteria"]] == ["passed", "failed"]
    (root / "a.txt").write_text("x")
    payload = {"session_id": "S1", "cwd": str(root), "hook_event_name": "Stop",
               "stop_hook_active": False}
    stop = subprocess.run([sys.executable, "-m", "pytest_ralph.hook"],
                          input=json.dumps(payload), cwd=root, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert stop.returncode == 0, stop.stderr
    assert "complete after 1 iteration" in stop.stdout, stop.stdout + stop.stderr
    assert "bringing up nodes" in (run_dir / "iteration-001" / "check.log").read_text()


def test_the_loop_start_and_dry_run_with_workers(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", [story("US-001", *_criteria("a.txt"))], [])
    dry = ralph(root, "--ralph-dry-run", "--ralph-workers", "auto")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    bad = ralph(root, "--ralph-workers", "0")
    assert bad.returncode == 4
    assert ("pytest-ralph: workers from --ralph-workers: expected a number of workers from 1 "
            "to 256, or 'auto'; got '0'") in bad.stderr
