"""The ``pytest_ralph_*`` hooks, implemented in a ``conftest.py`` (real pytest runs)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph import StopDecision
from pytest_ralph.plugin.hookspecs import HOOK_NAMES
from pytest_ralph.prd.errors import PRDError
from pytest_ralph.prd.load import load_prd
from tests.support.env import PY
from tests.support.loop import check_records
from tests.support.prd import story

#: A conftest that adds the criterion kind "wordcount" (words in a file, at least "min").
WORDCOUNT = """
from pytest_ralph import CheckResult


class WordCount:
    def __init__(self, path, least):
        self.path, self.least = path, least

    def run(self):
        n = len(self.path.read_text().split()) if self.path.exists() else 0
        return CheckResult(n >= self.least,
                           f"{self.path.name} has {n} words; expected at least {self.least}")


def pytest_ralph_make_check(criterion, config):
    if criterion.kind == "wordcount":
        return WordCount(config.rootpath / criterion.spec["file"], criterion.spec["min"])
"""


def wordcount(file: str, least: int, **more: object) -> dict[str, object]:
    return {"kind": "wordcount", "file": file, "min": least, **more}


def conftest(pytester: pytest.Pytester, *parts: str) -> None:
    pytester.makeconftest("\n".join(textwrap.dedent(p) for p in parts))


def test_every_hook_has_a_spec_with_a_docstring() -> None:
    import pytest_ralph.plugin.hookspecs as specs

    assert set(HOOK_NAMES) == {
        "pytest_ralph_prd_loaded", "pytest_ralph_make_check", "pytest_ralph_build_prompt",
        "pytest_ralph_agent_command", "pytest_ralph_before_iteration",
        "pytest_ralph_after_iteration", "pytest_ralph_fingerprint", "pytest_ralph_should_stop"}
    for name in HOOK_NAMES:
        doc = getattr(specs, name).__doc__ or ""
        assert "fires" in doc.lower() or "fire" in doc.lower(), name
    firstresult = {n for n in HOOK_NAMES
                   if getattr(getattr(specs, n), "pytest_spec", {}).get("firstresult")}
    assert firstresult == {"pytest_ralph_make_check", "pytest_ralph_build_prompt",
                           "pytest_ralph_agent_command", "pytest_ralph_fingerprint",
                           "pytest_ralph_should_stop"}


# --- a new criterion kind ------------------------------------------------------------------


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["sequential", "xdist"])
def test_conftest_check_hook_adds_a_criterion_kind(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], workers: list[str]) -> None:
    conftest(pytester, WORDCOUNT)
    write_prd(story("US-001", wordcount("short.md", 5), wordcount("long.md", 3),
                    {"exists": "long.md"}))
    pytester.path.joinpath("short.md").write_text("two words\n")
    pytester.path.joinpath("long.md").write_text("one two three four\n")
    result = pytester.runpytest_subprocess("prd.json", "-rA", *workers)
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "FAILED prd.json::US-001::AC1 - short.md has 2 words; expected at least 5",
        "US-001: 2 verified, 0 claimed, 1 failed"])
    assert "Traceback" not in result.stdout.str()


def test_custom_kind_loads_with_its_fields(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"userStories": [story(
        "US-1", wordcount("a.md", 3, id="WC", cwd=5, timeout="x"),
        {"kind": "lint.strict", "text": "the linter is happy", "file": 7})]}))
    prd = load_prd(path)
    a, b = prd.stories[0].criteria
    assert (a.kind, a.id, a.spec) == ("wordcount", "WC", {
        "kind": "wordcount", "file": "a.md", "min": 3, "cwd": 5, "timeout": "x"})
    assert a.text == 'wordcount {"file": "a.md", "min": 3, "cwd": 5, "timeout": "x"}'
    assert (a.timeout, a.cwd, a.command) == (None, None, None)
    assert (b.kind, b.text, b.spec["file"]) == ("lint.strict", "the linter is happy", 7)


@pytest.mark.parametrize(("kind", "message", "hint"), [
    ("run", 'kind "run" is a built-in check kind; \'kind\' names a check kind that a plugin '
            "or conftest.py provides", 'write the built-in check without \'kind\', e.g. '
            '{"run": ...}'),
    ("text", 'kind "text" is a built-in check kind; \'kind\' names a check kind that a plugin '
             "or conftest.py provides", "write the built-in check without 'kind', e.g. "
             '{"text": ...}'),
    ("1st", "expected a check kind name (a letter, then letters, digits, '_', '.' or '-', at "
            'most 100 characters); found string "1st"', ""),
    ("word count", "expected a check kind name (a letter, then letters, digits, '_', '.' or "
                   "'-', at most 100 characters); found string \"word count\"", ""),
    (5, "expected a string; found number 5", ""),
])
def test_bad_kind_is_one_precise_problem(tmp_path: Path, kind: object, message: str,
                                         hint: str) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"userStories": [story("US-1", "fine", {"kind": kind})]},
                               indent=1))
    with pytest.raises(PRDError) as info:
        load_prd(path)
    (problem,) = info.value.problems
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[1].kind"
    assert problem.message == message
    assert problem.hint == hint
    assert problem.line is not None


def test_kind_without_a_plugin_fails_naming_it(pytester: pytest.Pytester,
                                               write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", {"kind": "readability", "file": "a.md", "grade": 8}))
    result = pytester.runpytest_subprocess("prd.json")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "no check for the kind 'readability' of US-001::AC1 ($.userStories[0]."
        "acceptanceCriteria[0]): no installed plugin or conftest.py returns a check for it "
        "from the pytest_ralph_make_check hook; expected a built-in kind (run, pytest, exists, "
        "file, sql, schema, python) or a plugin's. Install the plugin that provides it, or "
        "implement pytest_ralph_make_check in the conftest.py of the PRD's folder or a parent"])


def test_a_plugin_given_with_p_reaches_the_check_phase(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    """`pytest --ralph -p PLUGIN`: the controller and each check phase's child pytest load it."""
    pytester.makepyfile(wordplugin=WORDCOUNT)
    write_prd(story("US-001", wordcount("post.md", 3)))
    command = agent("writer.py", "open('post.md', 'a').write(' word')\n")
    result = pytester.runpytest_subprocess("--ralph", "-p", "wordplugin", "--ralph-agent",
                                           command, "-o", "ralph_max_iterations=4")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["  Result: no change; failing now: US-001::AC1",
                                 "pytest-ralph: complete (exit 0) after 3 iterations*"])
    assert "no check for the kind" not in result.stdout.str()


def test_child_args_keeps_plugins_and_ini_overrides() -> None:
    from pytest_ralph.plugin.options import child_args

    assert child_args(["--ralph", "-p", "a", "-pb", "-p", "no:c", "-o", "x=1", "-k", "p",
                       "--override-ini=y=2", "--override-ini", "z=3", "-oW=4", "-q"]) == (
        "-p", "a", "-p", "b", "-p", "no:c", "-o", "x=1", "-o", "y=2", "-o", "z=3", "-o", "W=4")


def test_check_hook_can_replace_a_built_in_kind(pytester: pytest.Pytester,
                                                write_prd: Callable[..., Path]) -> None:
    """The built-in implementation is trylast: a conftest's answer wins; its None does not."""
    conftest(pytester, """
        from pytest_ralph import CheckResult

        class Always:
            def run(self):
                return CheckResult(True, "the conftest said so")

        def pytest_ralph_make_check(criterion):
            if criterion.kind == "exists" and criterion.spec["exists"] == "ghost.txt":
                return Always()
            return None
        """)
    write_prd(story("US-001", {"exists": "ghost.txt"}, {"exists": "real.txt"}))
    result = pytester.runpytest_subprocess("prd.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED prd.json::US-001::AC2 - *real.txt*"])


@pytest.mark.parametrize(("body", "message"), [
    ("return 42", "pytest_ralph_make_check returned 42 for US-001::AC1 (kind 'wordcount'); "
                  "expected an object with a run() method that returns a "
                  "pytest_ralph.CheckResult, or None"),
    ("return Bad()", "the check Bad that pytest_ralph_make_check made for US-001::AC1 "
                     "returned True from run(); expected a pytest_ralph.CheckResult(passed, "
                     "message)"),
])
def test_check_hook_returning_the_wrong_thing_fails_the_criterion(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], body: str,
        message: str) -> None:
    conftest(pytester, f"""
        class Bad:
            def run(self):
                return True

        def pytest_ralph_make_check(criterion):
            {body}
        """)
    write_prd(story("US-001", wordcount("a.md", 1)))
    result = pytester.runpytest_subprocess("prd.json")
    assert result.ret == 1
    result.stdout.fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize("args", [["prd.json"], ["--ralph", "--ralph-agent", f"{PY} -c pass"],
                                  ["--ralph-dry-run", "--ralph-agent", f"{PY} -c pass"]])
def test_misspelt_hook_is_refused_at_start(pytester: pytest.Pytester,
                                           write_prd: Callable[..., Path],
                                           args: list[str]) -> None:
    conftest(pytester, "def pytest_ralph_make_chek(criterion):\n    return None\n")
    write_prd(story("US-001", {"exists": "a"}))
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 4, result.stdout.str()
    result.stderr.fnmatch_lines([
        "ERROR: pytest-ralph: unknown hook pytest_ralph_make_chek (in *conftest.py): expected "
        "one of pytest_ralph_prd_loaded, pytest_ralph_make_check, *"])
    assert not (pytester.path / ".pytest_ralph").exists()  # no agent ran


@pytest.mark.parametrize("args", [[], ["sub/prd.json"],
                                  ["--ralph", "--ralph-prd", "sub/prd.json", "--ralph-agent",
                                   "touch AGENT-RAN"]])
def test_misspelt_hook_in_a_subfolder_conftest_is_refused(
        pytester: pytest.Pytester, args: list[str]) -> None:
    """A conftest.py that pytest loads during collection, or that the loop controller does not
    load at all, is still refused with a usage error, before any agent runs."""
    sub = pytester.mkdir("sub")
    (sub / "conftest.py").write_text("def pytest_ralph_make_checks(criterion):\n    pass\n")
    (sub / "prd.json").write_text(json.dumps({"userStories": [story("US-1", {"exists": "a"})]}))
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 4, result.stdout.str() + result.stderr.str()
    assert "pytest-ralph: unknown hook pytest_ralph_make_checks (in " \
           f"{sub / 'conftest.py'}): expected one of" in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "AGENT-RAN").exists()


#: A conftest.py in tests/ that claims the kind "mine".
MINE = """
from pytest_ralph import CheckResult

class Yes:
    def run(self):
        return CheckResult(True, "tests/conftest.py says yes")

def pytest_ralph_make_check(criterion):
    if criterion.kind == "mine":
        return Yes()
"""


@pytest.mark.parametrize("args", [[], ["prd.json"], ["-n", "2"]])
def test_a_conftest_applies_only_to_prd_files_under_its_folder(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], args: list[str]) -> None:
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "conftest.py").write_text(textwrap.dedent(MINE))
    (pytester.path / "tests" / "test_a.py").write_text("def test_ok():\n    pass\n")
    write_prd(story("US-001", {"kind": "mine"}))
    sub = pytester.mkdir("tests/sub")
    (sub / "prd.json").write_text(json.dumps({"userStories": [story("SUB-1", {"kind": "mine"})]}))
    result = pytester.runpytest_subprocess(*args, "-rA")
    result.stdout.fnmatch_lines_random([
        "FAILED prd.json::US-001::AC1 - no check for the kind 'mine' *"])
    if args == ["prd.json"]:  # tests/ is not collected: its conftest.py is not even loaded
        return
    result.stdout.fnmatch_lines_random(["PASSED tests/sub/prd.json::SUB-1::AC1"])
    result.stdout.fnmatch_lines([
        "*pytest_ralph_make_check in the conftest.py of the PRD's folder or a parent (*tests"
        "/conftest.py implements pytest_ralph_make_check, but a conftest.py applies only to "
        f"files in its folder and below; move it to {pytester.path}/conftest.py or a parent "
        "folder's)"])


def test_the_loop_sees_the_hooks_the_gate_sees(pytester: pytest.Pytester,
                                               write_prd: Callable[..., Path]) -> None:
    """tests/conftest.py is loaded by the controller (testpaths) but does not apply to the
    root PRD: its loop hooks are not asked either."""
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "conftest.py").write_text(textwrap.dedent(MINE) + textwrap.dedent(
        """
        def pytest_ralph_build_prompt(context):
            return "FROM TESTS CONFTEST"
        """))
    write_prd(story("US-001", {"kind": "mine"}))
    result = pytester.runpytest_subprocess("--ralph-dry-run", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 0
    assert "FROM TESTS CONFTEST" not in result.stdout.str()
    (pytester.path / "conftest.py").write_text((pytester.path / "tests" / "conftest.py")
                                               .read_text())
    (pytester.path / "tests" / "conftest.py").unlink()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["pytest-ralph: complete (exit 0) after 0 iterations*"])


def test_dry_run_redacts_secrets_from_the_hooked_prompt(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_API_KEY", "supersecretvalue123")
    conftest(pytester, """
        import os

        def pytest_ralph_build_prompt(context):
            return "the key is " + os.environ["DEMO_API_KEY"]

        def pytest_ralph_agent_command(argv):
            return [*argv, os.environ["DEMO_API_KEY"]]
        """)
    write_prd(story("US-001", {"exists": "a"}))
    result = pytester.runpytest_subprocess("--ralph-dry-run", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 0
    out = result.stdout.str()
    assert "supersecretvalue123" not in out
    assert "the key is [redacted $DEMO_API_KEY]" in out


def test_prd_loaded_fires_on_collection_and_can_refuse(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    conftest(pytester, """
        from pytest_ralph import PRDError, Problem

        def pytest_ralph_prd_loaded(prd, config):
            print(f"LOADED {prd.path.name} {len(prd.stories)}")
            if any(not s.description for s in prd.stories):
                raise PRDError(prd.path, [Problem("$.userStories", "every story needs a "
                                                  "description (house rule)")])
        """)
    write_prd(story("US-001", {"exists": "a"}))
    result = pytester.runpytest_subprocess("prd.json", "-s")
    result.stdout.fnmatch_lines(["LOADED prd.json 1*"])
    data = json.loads((pytester.path / "prd.json").read_text())
    data["userStories"][0]["description"] = ""
    (pytester.path / "prd.json").write_text(json.dumps(data))
    result = pytester.runpytest_subprocess("prd.json")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*every story needs a description (house rule)*"])
    assert "Traceback" not in result.stdout.str()
    loop = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert loop.ret == 4
    loop.stderr.fnmatch_lines(["*every story needs a description (house rule)*"])


# --- the loop's hooks ------------------------------------------------------------------------

#: A conftest that logs every controller hook to hooks.log and changes the prompt and argv.
LOGGING = """
import json
from pathlib import Path

def log(config, *parts):
    with open(Path(config.rootpath) / "hooks.log", "a") as f:
        f.write(" ".join(str(p) for p in parts) + "\\n")

def pytest_ralph_prd_loaded(prd, config):
    log(config, "prd_loaded", prd.path.name)

def pytest_ralph_build_prompt(context, template, config):
    failing = ",".join(r.key for r in context.results.failing)
    return f"CUSTOM iteration {context.iteration}; failing {failing}"

def pytest_ralph_agent_command(argv, iteration, story, config):
    return [*argv, "--iteration", str(iteration), story.id if story else "-"]

def pytest_ralph_before_iteration(iteration, story, prompt, argv, config):
    log(config, "before", iteration, story.id, prompt, argv[-3:])

def pytest_ralph_after_iteration(iteration, results, agent, story, config):
    log(config, "after", iteration, story, agent.outcome, len(results.failing))
"""

#: An agent that makes the next missing file of a.txt, b.txt, c.txt and records its argv.
MAKER = """
import sys
from pathlib import Path

with open("argv.log", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
for name in ("a.txt", "b.txt", "c.txt"):
    if not Path(name).exists():
        Path(name).write_text("x")
        break
"""


def test_loop_hooks_fire_in_order_and_change_prompt_and_argv(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    conftest(pytester, LOGGING)
    write_prd(story("US-001", {"exists": "a.txt"}, {"exists": "b.txt"}))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent("maker.py", MAKER))
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    log = (pytester.path / "hooks.log").read_text().splitlines()
    # The controller loads the PRD once; each check phase's child pytest collects it too.
    assert [ln for ln in log if not ln.startswith("prd_loaded")] == [
        "before 1 US-001 CUSTOM iteration 1; failing US-001::AC1,US-001::AC2 "
        "['--iteration', '1', 'US-001']",
        "after 1 US-001 ok 1",
        "before 2 US-001 CUSTOM iteration 2; failing US-001::AC2 ['--iteration', '2', 'US-001']",
        "after 2 US-001 ok 0"]
    assert log[0] == "prd_loaded prd.json"
    assert log.count("prd_loaded prd.json") == 4  # the controller, then 3 check phases
    assert (pytester.path / "argv.log").read_text().splitlines() == [
        "--iteration 1 US-001", "--iteration 2 US-001"]
    prompts = sorted((pytester.path / ".pytest_ralph" / "runs").glob("*/iteration-*/prompt.md"))
    assert [p.read_text() for p in prompts] == [
        "CUSTOM iteration 1; failing US-001::AC1,US-001::AC2",
        "CUSTOM iteration 2; failing US-001::AC2"]


def test_dry_run_uses_the_prompt_and_command_hooks(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    conftest(pytester, LOGGING)
    write_prd(story("US-001", {"exists": "a.txt"}))
    result = pytester.runpytest_subprocess("--ralph-dry-run", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines([
        '*"-c", "pass", "--iteration", "1", "US-001"]',
        "CUSTOM iteration 1; failing US-001::AC1"])


#: An agent that writes a failure message that differs every time, in words (no numbers).
RESTLESS = """
import random
from pathlib import Path
Path("mood.txt").write_text(random.choice(["calm", "busy", "grumpy", "sleepy", "eager"]) +
                            "-" + "".join(random.choice("abcdefgh") for _ in range(12)))
"""


def _mood_prd(write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", {"run": "cat mood.txt; exit 1", "text": "the mood is right"}))


def test_fingerprint_hook_lets_the_breaker_see_the_same_failure(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    _mood_prd(write_prd)
    command = agent("restless.py", RESTLESS)
    plain = pytester.runpytest_subprocess("--ralph", "--ralph-agent", command,
                                          "--ralph-max-iterations", "4")
    assert plain.ret == 1, plain.stdout.str()  # every failure looks new: no breaker
    conftest(pytester, """
        def pytest_ralph_fingerprint(result):
            if result.criterion == "AC1":
                return "the mood is wrong"
        """)
    tripped = pytester.runpytest_subprocess("--ralph", "--ralph-agent", command,
                                            "--ralph-max-iterations", "4", "--ralph-new",
                                            "--ralph-accept-changes")
    assert tripped.ret == 6, tripped.stdout.str()
    tripped.stdout.fnmatch_lines(["*identical-failure streak 3/3",
                                  "pytest-ralph: breaker (exit 6) after 3 iterations*"])


def test_stop_hook_can_stop_early_and_can_keep_going(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", {"exists": "never.txt"}))
    conftest(pytester, """
        from pytest_ralph import StopDecision

        def pytest_ralph_should_stop(context):
            if context.iteration == 2:
                return StopDecision(True, f"house rule: two tries at most (streak "
                                          f"{context.streak}/{context.breaker})")
        """)
    stopped = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert stopped.ret == 1, stopped.stdout.str() + check_records(pytester)
    stopped.stdout.fnmatch_lines(["pytest-ralph: limit (exit 1) after 2 iterations: house "
                                  "rule: two tries at most (streak 2/3)"])
    conftest(pytester, """
        from pytest_ralph import GO_ON

        def pytest_ralph_should_stop(context):
            return GO_ON  # never give up: only the iteration limit ends the run
        """)
    # The conftest.py judges the criteria: changed since the last run, it must be accepted.
    kept = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                         "--ralph-new", "--ralph-max-iterations", "4",
                                         "--ralph-accept-changes")
    assert kept.ret == 1, kept.stdout.str() + check_records(pytester)
    kept.stdout.fnmatch_lines(["*identical-failure streak 3/3",
                               "  Blocked: US-001: the same failure * no story left to work on",
                               "[[]ralph iteration 4/4[]]",
                               "pytest-ralph: limit (exit 1) after 4 iterations: stopped at "
                               "the iteration limit (4)*"])


def test_stop_decision_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="expected one of limit, breaker, agent-error"):
        StopDecision(True, "x", status="done")
    with pytest.raises(ValueError, match="escalate 'bogus': expected one of '', 'breaker', "
                                         "'all-blocked'"):
        StopDecision(True, "x", escalate="bogus")
    with pytest.raises(ValueError, match="expected stop to be True or False and reason a str"):
        StopDecision(True, 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected stop to be True or False"):
        StopDecision("yes", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a reason"):
        StopDecision(True, " ")
    assert StopDecision(True, "x", "breaker").exit_code == 6


@pytest.mark.parametrize(("hook", "body", "message"), [
    ("pytest_ralph_build_prompt(context)", "return 42",
     "a pytest_ralph_build_prompt implementation returned 42 (int); expected a str or None"),
    ("pytest_ralph_agent_command(argv)", "return []",
     "a pytest_ralph_agent_command implementation returned [] (list); expected a non-empty "
     "list of str or None"),
    ("pytest_ralph_should_stop(context)", "return True",
     "a pytest_ralph_should_stop implementation returned True (bool); expected a "
     "pytest_ralph.StopDecision or None"),
    ("pytest_ralph_after_iteration(iteration)", "raise RuntimeError('disk full')",
     "a pytest_ralph_after_iteration implementation raised RuntimeError: disk full at "
     "*conftest.py:2 in pytest_ralph_after_iteration"),
    ("pytest_ralph_should_stop(context)", "return __import__('pytest_ralph').StopDecision("
                                          "True, 'x', 'done')",
     "a pytest_ralph_should_stop implementation raised ValueError: StopDecision status 'done': "
     "expected one of limit, breaker, agent-error at *conftest.py:2 in "
     "pytest_ralph_should_stop"),
])
def test_a_failing_loop_hook_ends_the_run_as_crashed_and_resumes(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], hook: str, body: str,
        message: str) -> None:
    write_prd(story("US-001", {"exists": "never.txt"}))
    conftest(pytester, f"""

        def {hook}:
            {body}
        """)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 3, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([f"pytest-ralph: crashed (exit 3) after * iteration*: "
                                 f"{message}; fix it, then `pytest --ralph` resumes this run (with "
                                 "--ralph-allow-criteria-edits when the fix is in a conftest.py)"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    # conftest.py is guarded like the criteria: fixing it needs --ralph-allow-criteria-edits.
    (pytester.path / "conftest.py").unlink()
    resumed = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                            "--ralph-allow-criteria-edits")
    assert resumed.ret == 6, resumed.stdout.str()
    resumed.stdout.fnmatch_lines(["pytest-ralph: resuming run * (crashed) after *"])
