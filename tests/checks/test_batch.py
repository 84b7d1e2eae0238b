"""Batched ``pytest`` criteria (pytest_ralph/checks/batch.py, pytest_ralph/plugin/batching.py):
one child pytest for the criteria that share their options, every verdict as with one child
per criterion, every defence kept; real check phases, real child pytest runs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.checks.batch import batching_supported, run_batch
from pytest_ralph.checks.phase import CheckPhaseConfig, run_check_phase
from pytest_ralph.checks.pytest_kind import PytestCheck, pin_args
from tests.support.chaos import PATCH_REPORTS, REWRITE_JUNIT, SWALLOW_CALLS
from tests.support.loop import finish, ralph, run_json
from tests.support.prd import story

#: These tests count the child pytest runs of batches: pytest 8 runs none
#: (tests/checks/test_batch_attacks.py shows it, under pytest 8 too).
pytestmark = pytest.mark.skipif(not batching_supported(), reason="batches need pytest 9")

pytest_plugins = ["pytester"]

#: A conftest.py line that counts the child pytest runs of checks (only they have a probe token).
COUNT_RUNS = textwrap.dedent("""\
    import os
    def pytest_sessionstart(session):
        if os.environ.get("PYTEST_RALPH_PROBE"):
            with open(os.path.join(str(session.config.rootpath), "runs.log"), "a") as f:
                f.write(f"{os.getpid()}\\n")
""")

#: A conftest.py hook that gives the criterion ``OTHER`` a check in another working directory.
OTHER_CWD = textwrap.dedent("""\
    def pytest_ralph_make_check(criterion, story, prd_path, config):
        if criterion.id == "OTHER":
            from pytest_ralph.checks.pytest_kind import PytestCheck, pin_args
            return PytestCheck(("test_o.py",), config.rootpath / "other", 600.0,
                               pin_args(config.rootpath, config.inipath))
        return None
""")

TESTS = {
    "tests/test_pass1.py": "def test_a():\n    pass\n\ndef test_b():\n    assert 1\n",
    "tests/test_pass2.py": "def test_c():\n    pass\n",
    "tests/test_fail.py": "def test_ok():\n    pass\n\ndef test_bad():\n    assert 2 + 2 == 5\n",
    "tests/test_skip.py": "import pytest\n\ndef test_s():\n    pytest.skip('later')\n",
    "tests/test_desel.py": "def test_d():\n    pass\n",
    "tests/test_broken.py": "import no_such_module_here\n\ndef test_x():\n    pass\n",
    "tests/test_param.py": ("import pytest\n\n@pytest.mark.parametrize('x', [1, 2, 3])\n"
                            "def test_p(x):\n    assert x != 3\n"),
    "tests/test_cls.py": "class TestK:\n    def test_m(self):\n        pass\n",
    "tests/pkg/test_one.py": "def test_1():\n    pass\n",
    "tests/pkg/test_two.py": "def test_2():\n    pass\n",
    "tests/mixed/test_good.py": "def test_g():\n    pass\n",
    "tests/mixed/test_worse.py": "def test_w():\n    assert False, 'mixed folder fails'\n",
    "tests/empty/test_nothing.py": "# no test yet\n",
    "other/test_o.py": "def test_o():\n    pass\n",
    "tests/test_klass.py": ("class TestBad:\n    pytestmark = 5\n\n    def test_never(self):\n"
                            "        pass\n\n\ndef test_fine():\n    pass\n"),
}

#: (criterion id, spec, passes): the PRD of the comparison.
CRITERIA: list[tuple[str, dict[str, Any], bool]] = [
    ("PASS", {"pytest": "tests/test_pass1.py"}, True),
    ("TWO", {"pytest": ["tests/test_pass1.py::test_a", "tests/test_pass2.py"]}, True),
    ("FAIL", {"pytest": "tests/test_fail.py"}, False),
    ("ONEOK", {"pytest": "tests/test_fail.py::test_ok"}, True),
    ("SKIP", {"pytest": "tests/test_skip.py"}, False),
    ("DESEL", {"pytest": "tests/test_desel.py::test_d"}, False),
    ("BROKEN", {"pytest": "tests/test_broken.py"}, False),
    ("NOID", {"pytest": "tests/test_pass2.py::test_nope"}, False),
    ("NOFILE", {"pytest": "tests/test_gone.py"}, False),
    ("PARAM", {"pytest": "tests/test_param.py::test_p"}, False),
    ("PARAM1", {"pytest": ["tests/test_param.py::test_p[1]", "tests/test_param.py::test_p[2]"]},
     True),
    ("CLASS", {"pytest": "tests/test_cls.py::TestK"}, True),
    ("DIR", {"pytest": "tests/pkg"}, True),
    ("MIXED", {"pytest": "tests/mixed/"}, False),
    ("EMPTY", {"pytest": "tests/empty/test_nothing.py"}, False),
    ("KBAD", {"pytest": "tests/test_klass.py::TestBad"}, False),
    ("KFINE", {"pytest": "tests/test_klass.py::test_fine"}, True),
    ("TIMED", {"pytest": "tests/test_pass2.py", "timeout": 120}, True),
    ("OTHER", {"pytest": "other/test_o.py"}, True),
]


def _project(root: Path, criteria: list[tuple[str, dict[str, Any], bool]] = CRITERIA,
             tests: dict[str, str] | None = None, ini: str = "", conftest: str = "") -> None:
    for name, text in (tests or TESTS).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "pytest.ini").write_text(
        "[pytest]\naddopts = --deselect tests/test_desel.py::test_d\n" + ini)
    (root / "conftest.py").write_text(COUNT_RUNS + OTHER_CWD + conftest)
    stories = [story("US-1", *[{"id": cid, "text": f"criterion {cid}", **spec}
                               for cid, spec, _ in criteria])]
    (root / "prd.json").write_text(json.dumps({"project": "p", "userStories": stories}))


def _phase(root: Path, *, batch: bool, workers: str = "",
           extra: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    """criterion id -> (outcome, what was found) of one check phase; the runs are counted
    in ``runs.log`` (removed first)."""
    (root / "runs.log").unlink(missing_ok=True)
    name = f"phase-{'b' if batch else 'u'}{workers}"
    phase = CheckPhaseConfig(prd=root / "prd.json", rootdir=root, inifile=root / "pytest.ini",
                             workers=workers,
                             extra_args=("-o", f"ralph_check_batch={str(batch).lower()}",
                                         *extra))
    results = run_check_phase(phase, root / name)
    assert results.errors == (), results.errors
    return {c.criterion: (c.outcome, c.message.split("; expected")[0])
            for c in results.criteria}


def _runs(root: Path) -> int:
    path = root / "runs.log"
    return len(path.read_text().split()) if path.exists() else 0


@pytest.mark.parametrize("workers", ["", "2"], ids=["one-process", "two-workers"])
def test_a_batched_check_phase_gives_every_criterion_the_verdict_of_one_child_each(
        tmp_path: Path, workers: str) -> None:
    _project(tmp_path)
    single = _phase(tmp_path, batch=False)
    unbatched_runs = _runs(tmp_path)
    batched = _phase(tmp_path, batch=True, workers=workers)
    batched_runs = _runs(tmp_path)
    assert batched == single
    assert {cid: outcome == "passed" for cid, (outcome, _) in batched.items()} == \
        {cid: passes for cid, _, passes in CRITERIA}
    # The words each failure says, as one child of its own says them.
    assert single["FAIL"][1] == "1 failed, 1 passed (pytest exit 1)"
    assert single["SKIP"][1] == "the selected test was skipped"
    assert single["DESEL"][1].startswith("no test ran (pytest exit 5")
    assert single["BROKEN"][1].startswith("pytest exit 2 (interrupted or collection errors: "
                                          "tests/test_broken.py - ModuleNotFoundError")
    assert single["NOID"][1].startswith("pytest exit 4 (usage error: not found: ")
    assert single["PARAM"][1] == "1 failed, 2 passed (pytest exit 1)"
    assert single["MIXED"][1] == "1 failed, 1 passed (pytest exit 1)"
    assert unbatched_runs == len(CRITERIA)
    # In one process: one batch, and one child each for what cannot be batched (an own
    # timeout, another cwd) or needs pytest's own words (no test of it reported).
    if not workers:
        # the batch; TIMED, OTHER; NOFILE, DESEL, NOID, EMPTY; BROKEN, KBAD (a collection
        # error concerns them: each gets its own child)
        assert batched_runs == 1 + 2 + 4 + 2, batched_runs
    else:
        assert batched_runs < unbatched_runs, batched_runs


def test_a_failure_message_carries_its_own_failures_only(tmp_path: Path) -> None:
    _project(tmp_path)
    root = tmp_path
    pin = pin_args(root, root / "pytest.ini")
    checks = [PytestCheck(("tests/test_fail.py",), root, 600.0, pin),
              PytestCheck(("tests/mixed",), root, 600.0, pin),
              PytestCheck(("tests/test_pass1.py",), root, 600.0, pin)]
    fail, mixed, ok = run_batch(checks)
    assert ok.passed and not fail.passed and not mixed.passed
    assert "assert 2 + 2 == 5" in fail.message and "mixed folder fails" not in fail.message
    assert "mixed folder fails" in mixed.message and "2 + 2" not in mixed.message
    assert "tests/test_fail.py::test_bad" in fail.message
    assert "probe" not in fail.message + mixed.message


def test_a_collection_error_fails_only_the_criteria_of_its_file(tmp_path: Path) -> None:
    _project(tmp_path)
    pin = pin_args(tmp_path, tmp_path / "pytest.ini")
    checks = [PytestCheck((t,), tmp_path, 600.0, pin) for t in
              ("tests/test_broken.py", "tests", "tests/test_pass1.py", "tests/pkg")]
    broken, everything, ok, folder = run_batch(checks)
    # The batch, then one child each for the two criteria the collection error may concern
    # (its mangled name is not attributed more closely): "tests" too may hold the file.
    assert _runs(tmp_path) == 3
    assert not broken.passed and not everything.passed and ok.passed and folder.passed
    for result in (broken, everything):
        assert "(interrupted or collection errors: tests/test_broken.py - ModuleNotFoundError: " \
               "No module named 'no_such_module_here')" in result.message, result.message


def test_a_node_id_that_does_not_exist_gets_pytests_words_and_the_rest_is_batched(
        tmp_path: Path) -> None:
    tests = {"tests/test_a.py": "def test_a():\n    pass\n",
             "tests/test_b.py": "def test_b():\n    assert False\n"}
    _project(tmp_path, tests=tests)
    pin = pin_args(tmp_path, tmp_path / "pytest.ini")
    checks = [PytestCheck((t,), tmp_path, 600.0, pin) for t in
              ("tests/test_a.py::test_a", "tests/test_a.py::test_gone",
               "tests/test_b.py::test_nope", "tests/test_b.py::test_b")]
    a, gone, nope, b = run_batch(checks)
    assert a.passed and not gone.passed and not nope.passed and not b.passed
    assert f"pytest exit 4 (usage error: not found: {tmp_path}/tests/test_a.py::test_gone)" \
        in gone.message
    assert f"not found: {tmp_path}/tests/test_b.py::test_nope" in nope.message
    assert "1 failed, 0 passed (pytest exit 1)" in b.message
    # the batch (exit 4), the two criteria alone, the batch again without them
    assert _runs(tmp_path) == 4
    # A missing node id in a file another criterion names whole: pytest says nothing of
    # it in the batch; no test of that criterion is reported, so it runs alone.
    (tmp_path / "runs.log").unlink()
    whole = [PytestCheck((t,), tmp_path, 600.0, pin) for t in
             ("tests/test_a.py", "tests/test_a.py::test_gone")]
    a, gone = run_batch(whole)
    assert a.passed and f"not found: {tmp_path}/tests/test_a.py::test_gone" in gone.message
    assert _runs(tmp_path) == 2


@pytest.mark.parametrize("cheat", [PATCH_REPORTS, SWALLOW_CALLS, REWRITE_JUNIT],
                         ids=["patch-reports", "swallow-calls", "rewrite-junit"])
def test_a_cheat_in_one_criterions_code_fails_the_whole_batch(tmp_path: Path,
                                                               cheat: str) -> None:
    tests = {"tests/test_honest.py": "def test_h():\n    pass\n",
             "tests/test_also.py": "def test_also():\n    pass\n",
             "calc.py": cheat + "def add(a, b):\n    return a - b\n",
             "tests/test_calc.py": "from calc import add\n\ndef test_add():\n"
                                   "    assert add(2, 3) == 5\n"}
    criteria = [("HONEST", {"pytest": "tests/test_honest.py"}, True),
                ("CALC", {"pytest": "tests/test_calc.py"}, False),
                ("ALSO", {"pytest": "tests/test_also.py"}, True)]
    _project(tmp_path, criteria=criteria, tests=tests, ini="pythonpath = .\n")
    batched = _phase(tmp_path, batch=True)
    assert _runs(tmp_path) == 1
    assert all(outcome == "failed" for outcome, _ in batched.values()), batched
    said = " ".join(found for _, found in batched.values())
    assert "code loaded by the tests" in said, said
    # Without batching the honest criteria pass: only the cheat's own criterion fails.
    single = _phase(tmp_path, batch=False)
    assert single["HONEST"][0] == single["ALSO"][0] == "passed"
    assert single["CALC"][0] == "failed"


def test_k_selecting_one_criterion_runs_only_its_tests(tmp_path: Path) -> None:
    _project(tmp_path)
    phase = CheckPhaseConfig(prd=tmp_path / "prd.json", rootdir=tmp_path,
                             inifile=tmp_path / "pytest.ini", keyword="FAIL")
    results = run_check_phase(phase, tmp_path / "k")
    assert [(c.criterion, c.outcome) for c in results.criteria] == [("FAIL", "failed")]
    assert _runs(tmp_path) == 1
    assert "1 failed, 1 passed" in results.criteria[0].message


def test_ralph_check_batch_false_runs_one_child_per_criterion(tmp_path: Path) -> None:
    criteria = [(f"C{i}", {"pytest": "tests/test_pass1.py"}, True) for i in range(3)]
    _project(tmp_path, criteria=criteria, ini="ralph_check_batch = false\n")
    phase = CheckPhaseConfig(prd=tmp_path / "prd.json", rootdir=tmp_path,
                             inifile=tmp_path / "pytest.ini")
    results = run_check_phase(phase, tmp_path / "off")
    assert [c.outcome for c in results.criteria] == ["passed"] * 3
    assert _runs(tmp_path) == 3
    (tmp_path / "runs.log").unlink()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the default: batched
    results = run_check_phase(phase, tmp_path / "on")
    assert [c.outcome for c in results.criteria] == ["passed"] * 3
    assert _runs(tmp_path) == 1


def test_a_bad_ralph_check_batch_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester.path, criteria=[("A", {"pytest": "tests/test_pass1.py"}, True)])
    (pytester.path / "pytest.ini").write_text("[pytest]\nralph_check_batch = maybe\n")
    result = pytester.runpytest_subprocess("prd.json", "-p", "no:cacheprovider")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 4, out
    assert "ralph_check_batch" in out and "Traceback" not in out, out


def test_an_exit_status_the_outcomes_do_not_explain_falls_back_to_one_child_each(
        tmp_path: Path) -> None:
    """A conftest that turns every session's exit status to 3: not attributable, so each
    criterion runs alone (and fails as it would alone), never a pass."""
    criteria = [(f"C{i}", {"pytest": "tests/test_pass1.py"}, False) for i in range(3)]
    _project(tmp_path, criteria=criteria, conftest=textwrap.dedent("""\
        import pytest
        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(session):
            if os.environ.get("PYTEST_RALPH_PROBE"):
                session.exitstatus = 3
    """))
    batched = _phase(tmp_path, batch=True)
    assert _runs(tmp_path) == 1 + 3
    assert batched == _phase(tmp_path, batch=False)
    assert all(outcome == "failed" for outcome, _ in batched.values())


def test_a_testcase_whose_node_id_is_forged_falls_back_to_one_child_each(
        tmp_path: Path) -> None:
    """A fixture that records a second node id on every test: the batch cannot tell whose
    each outcome is, so each criterion runs alone."""
    criteria = [("A", {"pytest": "tests/test_pass1.py"}, True),
                ("B", {"pytest": "tests/test_fail.py"}, False)]
    _project(tmp_path, criteria=criteria, conftest=textwrap.dedent("""\
        import pytest
        @pytest.fixture(autouse=True)
        def _forge(record_property):
            record_property("pytest_ralph_nodeid", "tests/test_pass1.py::test_a")
    """))
    batched = _phase(tmp_path, batch=True)
    assert _runs(tmp_path) == 1 + 2
    assert batched == _phase(tmp_path, batch=False)
    assert batched["A"][0] == "passed" and batched["B"][0] == "failed"


def test_run_batch_refuses_checks_that_do_not_share_their_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must share their cwd, pin options and timeout"):
        run_batch([PytestCheck(("a",), tmp_path, 1.0), PytestCheck(("a",), tmp_path, 2.0)])


#: A test that fails at every second run (a counter file in the rootdir).
FLIP_TEST = textwrap.dedent("""\
    import pathlib
    def test_flip():
        p = pathlib.Path("flip-count.txt")
        n = int(p.read_text()) + 1 if p.exists() else 1
        p.write_text(str(n))
        assert n % 2, f"run {n}"
""")


def test_the_flaky_recheck_applies_to_a_batched_criterion(pytester: pytest.Pytester) -> None:
    """Baseline: the batch passes FLIP (run 1); iteration 1 fails it (run 2); the re-check
    passes it (run 3): flaky, as with one child per criterion."""
    tests = {"tests/test_flip.py": FLIP_TEST, "tests/test_ok.py": "def test_ok():\n    pass\n",
             "tests/test_never.py": "def test_never():\n    assert False\n",
             "agent.py": "pass\n"}
    criteria = [("FLIP", {"pytest": "tests/test_flip.py"}, True),
                ("OK", {"pytest": "tests/test_ok.py"}, True),
                ("NEVER", {"pytest": "tests/test_never.py"}, False)]
    _project(pytester.path, criteria=criteria, tests=tests)
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", f"{sys.executable} agent.py",
                             "--ralph-max-iterations", "1"))
    assert code == 1, out
    iterations = run_json(pytester)["iterations"]
    assert [it["flaky"] for it in iterations] == [[], ["US-1::FLIP"]], iterations
    assert (pytester.path / "flip-count.txt").read_text() == "3"
    assert _runs(pytester.path) == 1 + 1 + 1  # baseline batch, iteration batch, re-check
