"""ini `ralph_verifier`: a judge command for text criteria, a JSON document on stdin and a
JSON verdict on stdout; malformed answers fail; precedence over claims, not over ralph_checks."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from pytest_ralph.checks.verifier import git_state
from tests.support.env import PY
from tests.support.git import git, needs_git
from tests.support.prd import story

Writer = Callable[..., Path]

# Judges by the text: "good" passes, anything else fails; logs each text it was asked about.
JUDGE = """
import json, sys
data = json.load(sys.stdin)
text = data["criterion"]["text"]
with open("judged.log", "a", encoding="utf-8") as log:
    log.write(text + "\\n")
verdict = "pass" if "good" in text else "fail"
print(json.dumps({"verdict": verdict, "evidence": f"{verdict}: read {text!r}\\nsecond line"}))
"""

# Writes its whole stdin to input-<criterion id>.json, then passes.
DUMP = """
import json, sys
raw = sys.stdin.buffer.read()
data = json.loads(raw.decode("utf-8"))
with open(f"input-{data['criterion']['id']}.json", "wb") as f:
    f.write(raw)
print(json.dumps({"verdict": "pass", "evidence": "dumped"}))
"""


@pytest.fixture
def verifier(pytester: pytest.Pytester) -> Callable[..., None]:
    """verifier(body, **ini) writes judge.py and configures it as ini ralph_verifier (plus any
    other ralph_* ini keys given)."""

    def configure(body: str, **ini: str) -> None:
        (pytester.path / "judge.py").write_text(body, encoding="utf-8")
        lines = [f"ralph_verifier = {PY} judge.py"] + [f"ralph_{k} = {v}" for k, v in ini.items()]
        pytester.makeini("[pytest]\n" + "\n".join(lines) + "\n")

    return configure


def judged(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "judged.log"
    return log.read_text("utf-8").splitlines() if log.exists() else []


@pytest.mark.parametrize("workers", [[], ["-n", "2", "-p", "xdist"]])
def test_verdicts_decide_text_criteria_and_are_not_claims(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None],
        workers: list[str]) -> None:
    # The story claims passes: true, so a claimed criterion would pass: the verdict decides.
    write_prd(story("US-1", "a good page", "a broken page", {"run": "true"}, passes=True))
    verifier(JUDGE)
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "FAILED prd.json::US-1::AC2" in out
    result.stdout.fnmatch_lines_random([
        "the verifier judged this criterion failed: fail: read 'a broken page'",
        "second line",
        "US-1: 2 verified, 0 claimed, 1 failed",
        "judged passed by the verifier (1): criterion -- evidence",
        "  US-1::AC1: a good page -- pass: read 'a good page'"])
    assert "claimed, not verified" not in out
    assert sorted(judged(pytester)) == ["a broken page", "a good page"]  # not the `run` one


def test_kind_claim_and_evidence_reach_junit_and_the_loop_results(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "a good page", "a broken page", {"run": "true"}))
    verifier(JUDGE)
    results = pytester.path / "results.json"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=junit.xml",
                                           "--ralph-results", str(results))
    result.assert_outcomes(passed=2, failed=1)
    props = {}
    for case in ElementTree.parse(pytester.path / "junit.xml").getroot().iter("testcase"):
        found = [(p.get("name"), p.get("value")) for p in case.iter("property")]
        names = [n for n, _ in found]
        assert names.count("ralph_kind") == 1, found  # replaced, not added
        props[case.get("name")] = dict(found)
    assert props["AC1"]["ralph_kind"] == "verifier"
    assert props["AC1"]["ralph_claimed"] == "False"
    assert props["AC1"]["ralph_message"].startswith(
        "the verifier judged this criterion passed: pass: read 'a good page'")
    assert props["AC3"]["ralph_kind"] == "run"
    data = json.loads(results.read_text("utf-8"))
    by_id = {c["criterion"]: c for c in data["criteria"]}
    assert [by_id[i]["kind"] for i in ("AC1", "AC2", "AC3")] == ["verifier", "verifier", "run"]
    assert by_id["AC1"]["outcome"] == "passed" and not by_id["AC1"]["claimed"]
    assert by_id["AC1"]["message"].startswith("the verifier judged this criterion passed: ")
    assert by_id["AC2"]["outcome"] == "failed" and not by_id["AC2"]["claimed"]
    assert by_id["AC2"]["message"].startswith(
        "the verifier judged this criterion failed: fail: read 'a broken page'")


def test_the_loop_prompt_says_the_verifier_judges_and_shows_its_evidence(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "a broken page"))
    verifier(JUDGE)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", "true",
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str() + result.stderr.str()  # the iteration limit
    [prompt] = (pytester.path / ".pytest_ralph" / "runs").glob("*/iteration-001/prompt.md")
    text = prompt.read_text("utf-8")
    assert "check: judged by the verifier command (ini ralph_verifier); see its evidence" in text
    assert "the verifier judged this criterion failed: fail: read 'a broken page'" in text
    assert "claimed by the story" not in text


BAD_ANSWERS = [
    pytest.param('print("looks fine to me")',
                 ["stdout is not valid JSON (Expecting value", "looks fine to me"], id="not-json"),
    pytest.param("", ["nothing on stdout", "stdout: (none)"], id="empty"),
    pytest.param('print(json.dumps({"verdict": "ok", "evidence": "e"}))',
                 ['"verdict" is "ok" (it must be "pass" or "fail")'], id="bad-verdict"),
    pytest.param('print(json.dumps({"verdict": "PASS", "evidence": "e"}))',
                 ['"verdict" is "PASS"'], id="verdict-is-case-sensitive"),
    pytest.param('print(json.dumps({"evidence": "e"}))', ['no "verdict"'], id="no-verdict"),
    pytest.param('print(json.dumps({"verdict": "pass"}))',
                 ['no "evidence" (it must be a non-empty string)'], id="no-evidence"),
    pytest.param('print(json.dumps({"verdict": "pass", "evidence": "  "}))',
                 ['"evidence" is "  " (it must be a non-empty string)'], id="blank-evidence"),
    pytest.param('print(json.dumps({"verdict": "pass", "evidence": 42}))',
                 ['"evidence" is 42'], id="evidence-not-a-string"),
    pytest.param('print(json.dumps({"verdict": "pass", "evidence": "e"})); print("done")',
                 ["stdout is text after the JSON value (Extra data", "done"], id="trailing-junk"),
    pytest.param('print("Sure! " + json.dumps({"verdict": "pass", "evidence": "e"}))',
                 ["stdout is not valid JSON", 'Sure! {"verdict": "pass"'], id="leading-junk"),
    pytest.param('print(json.dumps([{"verdict": "pass", "evidence": "e"}]))',
                 ["stdout is a JSON list, not an object"], id="array"),
    pytest.param('sys.stdout.buffer.write(b\'{"verdict": "pass", "evidence": "\\xff"}\')',
                 ["stdout is not UTF-8 (invalid start byte at byte 33)"], id="not-utf8"),
    pytest.param('print(json.dumps({"verdict": "pass", "evidence": "e"}))\n'
                 'print("model overloaded", file=sys.stderr); sys.exit(3)',
                 ["exit status 3;", "stderr (last lines):", "model overloaded"],
                 id="non-zero-exit"),
    pytest.param("os.kill(os.getpid(), 9)", ["killed by signal 9"], id="killed"),
    pytest.param('print(\'{"verdict": "fail", "evidence": "e", "verdict": "pass"}\')',
                 ['stdout has the key "verdict" twice in one object (an ambiguous answer)'],
                 id="duplicate-key"),
    pytest.param('print(\'{"verdict": "pass", "evidence": "e", "extra": {"a": 1, "a": 2}}\')',
                 ['stdout has the key "a" twice in one object'], id="nested-duplicate-key"),
    pytest.param('print(\'{"verdict": "pass", "evidence": "e", "score": NaN}\')',
                 ["stdout has NaN, which is not JSON"], id="nan"),
    pytest.param('print(\'{"verdict": "pass", "evidence": "e", "score": -Infinity}\')',
                 ["stdout has -Infinity, which is not JSON"], id="infinity"),
]


@pytest.mark.parametrize(("body", "expected"), BAD_ANSWERS)
def test_a_malformed_answer_fails_and_shows_what_was_expected(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None], body: str,
        expected: list[str]) -> None:
    write_prd(story("US-1", "the page is good", passes=True))
    verifier("import json, os, sys\nsys.stdin.read()\n" + body + "\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert (f"bad answer from the verifier `{PY} judge.py` (from ini ralph_verifier (tox.ini)):"
            in out), out
    assert ('expected exit status 0 and exactly one JSON object on stdout: {"verdict": "pass" | '
            '"fail", "evidence": "<non-empty string>"}') in out
    for text in expected:
        assert text in out, (text, out)
    assert "Traceback" not in out
    assert "US-1: 0 verified, 0 claimed, 1 failed" in out


def test_a_long_answer_is_cut_to_its_tail(pytester: pytest.Pytester, write_prd: Writer,
                                          verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "the page is good"))
    verifier("import sys\nsys.stdin.read()\nfor i in range(5000):\n    print(f'line {i}')\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "line 4999" in out
    assert "\nline 0\n" not in out and "...\n" in out  # only the last 4000 bytes


def test_a_verifier_past_the_check_timeout_fails_with_its_group_killed(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "the page is good", passes=True))
    verifier("import time\nprint('thinking', flush=True)\ntime.sleep(60)\n", check_timeout="0.5")
    start = time.monotonic()
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert time.monotonic() - start < 30
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*no exit within the timeout of 0.5 s (process group killed); expected exit status 0*",
        "stdout (last lines):", "thinking"])


@pytest.mark.parametrize(("command", "found"), [
    ("no-such-judge-xyz --strictly", "executable 'no-such-judge-xyz' not found on PATH"),
    ("./missing-judge.py", "executable './missing-judge.py' not found (relative paths start "
                           "at the rootdir"),
])
def test_a_missing_verifier_fails_each_text_criterion_naming_command_and_source(
        pytester: pytest.Pytester, write_prd: Writer, command: str, found: str) -> None:
    write_prd(story("US-1", "the page is good", "the docs are good", {"run": "true"},
                    passes=True))
    pytester.makeini(f"[pytest]\nralph_verifier = {command}\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    # One failure section per criterion (the short summary repeats it in full under CI=true).
    sections = "\n".join(ln for ln in out.splitlines() if not ln.startswith("FAILED "))
    assert sections.count(f"cannot run the verifier `{command}` (from ini ralph_verifier "
                          f"(tox.ini)): {found}") == 2, out
    assert "Traceback" not in out


def test_the_environment_variable_names_itself_as_the_source(
        pytester: pytest.Pytester, write_prd: Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-1", "the page is good"))
    monkeypatch.setenv("PYTEST_RALPH_VERIFIER", "no-such-judge-xyz")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert ("cannot run the verifier `no-such-judge-xyz` (from environment variable "
            "PYTEST_RALPH_VERIFIER): executable 'no-such-judge-xyz' not found on PATH"
            in result.stdout.str())


def test_unbalanced_quotes_fail_without_running_anything(pytester: pytest.Pytester,
                                                         write_prd: Writer) -> None:
    write_prd(story("US-1", "the page is good"))
    pytester.makeini("[pytest]\nralph_verifier = judge 'unclosed\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert ("cannot split the verifier `judge 'unclosed` (from ini ralph_verifier (tox.ini)): "
            "No closing quotation; expected a command line with balanced quotes"
            in result.stdout.str())


def test_stdin_is_the_documented_json_outside_a_git_repository(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))  # no repo above
    criteria: list[Any] = [{"id": "cli", "text": "the CLI says hello", "run": "true"},
                           "Le résumé est lisible ✓", {"exists": "prd.json"}]
    us1 = story("US-1", *criteria, priority=3, title="Résumé")
    us1["notes"] = "see the style guide"
    prd = write_prd(us1, story("US-2", "a good page"))
    verifier(DUMP)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    got = json.loads((pytester.path / "input-AC2.json").read_text("utf-8"))
    assert got == {
        "version": 1,
        "criterion": {"id": "AC2", "text": "Le résumé est lisible ✓", "index": 2},
        "story": {"id": "US-1", "title": "Résumé", "description": "about US-1",
                  "acceptanceCriteria": criteria, "priority": 3, "passes": False,
                  "notes": "see the style guide"},
        "prd": str(prd.absolute()),
        "repository": {"root": str(pytester.path),
                       "git": {"head": None, "status": None, "diff_stat": None}},
    }
    assert not (pytester.path / "input-cli.json").exists()  # a `run` criterion: no verifier
    assert not (pytester.path / "input-AC3.json").exists()
    other = json.loads((pytester.path / "input-AC1.json").read_text("utf-8"))
    assert other["story"]["id"] == "US-2" and other["criterion"]["index"] == 1


def test_a_story_without_criteria_is_judged_on_its_title(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", title="Export works"))
    verifier(DUMP)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    got = json.loads((pytester.path / "input-AC1.json").read_text("utf-8"))
    assert got["criterion"] == {"id": "AC1", "text": "Export works", "index": 1}
    assert got["story"]["acceptanceCriteria"] == []  # as in the PRD


@needs_git
def test_stdin_describes_the_git_state_inside_a_repository(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "the page is good"))
    verifier(DUMP)
    (pytester.path / "tracked.txt").write_text("one\n")

    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "first")
    head = git(pytester.path, "rev-parse", "HEAD").strip()
    (pytester.path / "tracked.txt").write_text("one\ntwo\n")
    (pytester.path / "new.txt").write_text("new\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    state = json.loads((pytester.path / "input-AC1.json").read_text("utf-8"))["repository"]
    assert state["root"] == str(pytester.path)
    assert state["git"]["head"] == head
    assert " M tracked.txt\n" in state["git"]["status"]
    assert "?? new.txt\n" in state["git"]["status"]
    assert "tracked.txt | 1 +" in state["git"]["diff_stat"]
    assert "1 file changed, 1 insertion(+)" in state["git"]["diff_stat"]
    cut = git_state(pytester.path, max_bytes=20)
    assert cut["head"] == head
    assert cut["status"] is not None and cut["status"].endswith(
        "[... cut: more than 20 bytes]\n")
    assert len(cut["status"].encode()) <= 20 + len("[... cut: more than 20 bytes]\n")


@needs_git
def test_a_repository_without_commits_has_a_status_but_no_head(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.txt").write_text("a\n")
    assert git_state(tmp_path) == {"head": None, "status": "?? a.txt\n", "diff_stat": None}


def test_ralph_checks_comes_first_and_strict_does_not_touch_verdicts(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "Typecheck passes", "Lint is clean", "a good page"))
    verifier(JUDGE, checks="\n    typecheck passes = false\n    lint is clean = true")
    result = pytester.runpytest("-rA", "-p", "no:cacheprovider", "--ralph-strict")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines_random([
        "FAILED prd.json::US-1::AC1*", "*exit status 1, expected exit status 0: `false`*",
        "PASSED prd.json::US-1::AC2", "PASSED prd.json::US-1::AC3",
        "US-1: 2 verified, 0 claimed, 1 failed"])
    assert "--ralph-strict refuses claims" not in result.stdout.str()
    assert judged(pytester) == ["a good page"]  # mapped criteria never reach the verifier


def test_without_a_verifier_the_same_text_is_claimed(pytester: pytest.Pytester,
                                                     write_prd: Writer) -> None:
    write_prd(story("US-1", "a good page", passes=True))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "US-1: 0 verified, 1 claimed, 0 failed" in result.stdout.str()


def test_the_claims_gate_keeps_the_verdict_and_its_kind(
        pytester: pytest.Pytester, write_prd: Writer, verifier: Callable[..., None]) -> None:
    write_prd(story("US-1", "a broken page", passes=True), story("US-2", "a broken form"))
    verifier(JUDGE, gate="claims")
    result = pytester.runpytest("-p", "no:cacheprovider", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1, xfailed=1)
    assert ("story US-1 claims passes: true, but criterion US-1::AC1 fails: the verifier judged "
            "this criterion failed: fail: read 'a broken page'") in result.stdout.str()
    kinds = [p.get("value") for p in ElementTree.parse(pytester.path / "junit.xml").iter(
        "property") if p.get("name") == "ralph_kind"]
    assert kinds == ["verifier", "verifier"]


def test_the_verifier_runs_in_the_rootdir_with_argv_not_a_shell(
        pytester: pytest.Pytester, write_prd: Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-1", "the page is good"))
    (pytester.path / "judge.py").write_text(
        "import json, os, sys\nsys.stdin.read()\n"
        "print(json.dumps({'verdict': 'pass', 'evidence': repr([os.getcwd(), sys.argv[1:]])}))\n")
    # `$HOME` and `;` stay literal: no shell expands or splits them.
    pytester.makeini(f"[pytest]\nralph_verifier = {PY} judge.py '$HOME; echo hi' \"two words\"\n")
    monkeypatch.chdir(pytester.mkdir("sub"))  # started elsewhere: still runs in the rootdir
    result = pytester.runpytest("-rA", "-p", "no:cacheprovider", str(pytester.path / "prd.json"))
    result.assert_outcomes(passed=1)
    expected = repr([str(pytester.path), ["$HOME; echo hi", "two words"]])
    assert f"US-1::AC1: the page is good -- {expected}" in result.stdout.str()


def test_the_dry_run_prompt_says_how_each_text_criterion_is_decided(
        pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-1", "Docs are written", "The page looks good"))
    pytester.makeini(f"[pytest]\nralph_verifier = {PY} judge.py\n"
                     "ralph_checks = Docs are written = test -f docs.md\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", "true", "--ralph-dry-run")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    out = result.stdout.str()
    assert "check: the command ini ralph_checks maps this text to" in out
    assert "check: judged by the verifier command (ini ralph_verifier)" in out
    assert "claimed by the story" not in out
    assert not (pytester.path / "judged.log").exists()  # a dry run judges nothing
