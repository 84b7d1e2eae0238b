"""The ``wordcount`` kind in the gate (with and without pytest-xdist) and in the loop.

Every run is a pytest subprocess in a temporary folder. The plugin reaches it through its
``pytest11`` entry point when it is installed; when it is only importable (``PYTHONPATH``),
the tests load it with ``-p ralph_example_plugin`` and put its folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import ralph_example_plugin as plugin

from pytest_ralph import CheckResult, CriterionResult, normalize_failure

#: Whether the plugin is installed (then pytest loads it in every process by itself).
INSTALLED = any(ep.value == "ralph_example_plugin" for ep in entry_points(group="pytest11"))

#: How a pytest run loads the plugin when it is not installed.
LOAD = () if INSTALLED else ("-p", "ralph_example_plugin")

PY = shlex.quote(sys.executable)


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the pytest subprocesses import the plugin when it is not installed."""
    if not INSTALLED:
        where = str(Path(plugin.__file__).resolve().parent.parent)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (where, os.environ.get("PYTHONPATH")) if p))


def write_prd(pytester: pytest.Pytester, *criteria: Any) -> None:
    """A PRD with one story holding ``criteria``."""
    story = {"id": "US-001", "title": "Blog post", "description": "", "priority": 1,
             "passes": False, "notes": "", "acceptanceCriteria": list(criteria)}
    pytester.makefile(".json", prd=json.dumps(
        {"project": "Blog", "branchName": "ralph/blog", "description": "A blog post",
         "userStories": [story]}, indent=2))


def result(message: str, kind: str = "wordcount") -> CriterionResult:
    return CriterionResult("prd.json::US-001::AC1", "US-001", "AC1", "post", kind, "failed",
                           message)


def test_fingerprint_keeps_the_direction_where_the_builtin_sees_progress() -> None:
    before = result('post.md has 16 words; expected at least 300 (284 more); it ends: "a b."')
    after = result('post.md has 21 words; expected at least 300 (279 more); it ends: "c d."')
    assert normalize_failure(before.message) != normalize_failure(after.message)
    assert plugin.pytest_ralph_fingerprint(before) == "wordcount: too short"
    assert plugin.pytest_ralph_fingerprint(after) == "wordcount: too short"
    assert plugin.pytest_ralph_fingerprint(
        result('post.md has 950 words; expected at most 900 (50 too many); it ends: "x."')
    ) == "wordcount: too long"
    assert plugin.pytest_ralph_fingerprint(result(
        "post.md does not exist; expected a UTF-8 text file of at least 300 words")
    ) == "wordcount: missing file"
    assert plugin.pytest_ralph_fingerprint(result("exit 1", kind="run")) is None
    assert plugin.pytest_ralph_fingerprint(result("Traceback (most recent call last)")) is None


@pytest.mark.parametrize(("spec", "problems"), [
    ({"kind": "wordcount", "file": "a.md", "min": 1}, []),
    ({"kind": "wordcount", "file": "a.md", "max": 0}, []),
    ({"kind": "wordcount", "file": "a.md", "min": True, "max": 300.0},
     ["'min' must be a non-negative integer; found true",
      "'max' must be a non-negative integer; found 300.0"]),
    ({"kind": "wordcount", "file": " ", "mni": 3},
     ["unknown field 'mni' (the fields are file, min, max)",
      "'file' must be a non-empty path; found \" \"",
      "'min' and 'max' are both missing; give one or both"]),
])
def test_spec_problems(spec: dict[str, Any], problems: list[str]) -> None:
    assert plugin.spec_problems(spec) == problems


def test_check_in_process(tmp_path: Path) -> None:
    check = plugin.WordCountCheck(tmp_path / "a.md", "a.md", 1, 3)
    (tmp_path / "a.md").write_text("")
    assert check.run() == CheckResult(False, "a.md has 0 words; expected at least 1 (1 more)")
    (tmp_path / "a.md").write_text("One.")
    assert check.run() == CheckResult(True, "a.md has 1 word (1 to 3 words)")
    (tmp_path / "a.md").unlink()
    (tmp_path / "a.md").mkdir()
    assert check.run() == CheckResult(
        False, "a.md is not a file; expected a UTF-8 text file of 1 to 3 words")


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_gate(pytester: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    if xdist:
        pytest.importorskip("xdist")
    pytester.path.joinpath("post.md").write_text("# Title\n\nHello there, brave new world.\n")
    pytester.path.joinpath("latin1.md").write_bytes("Caf\xe9 au lait.".encode("latin-1"))
    write_prd(pytester,
              {"id": "ok", "kind": "wordcount", "file": "post.md", "min": 3, "max": 10},
              {"id": "exists", "exists": "post.md"},
              {"id": "short", "kind": "wordcount", "file": "post.md", "min": 300},
              {"id": "long", "kind": "wordcount", "file": "post.md", "max": 2},
              {"id": "missing", "kind": "wordcount", "file": "docs/none.md", "min": 1},
              {"id": "latin1", "kind": "wordcount", "file": "latin1.md", "min": 1},
              {"id": "bad", "kind": "wordcount", "min": -1},
              {"id": "crossed", "kind": "wordcount", "file": "post.md", "min": 9, "max": 3})
    run = pytester.runpytest_subprocess(*LOAD, *xdist, "-p", "no:cacheprovider")
    out = run.stdout.str()
    assert run.ret == 1, out
    run.assert_outcomes(passed=2, failed=6)
    for message in [
        'post.md has 6 words; expected at least 300 (294 more); it ends: "Hello there, brave '
        'new world."',
        'post.md has 6 words; expected at most 2 (4 too many); it ends: "Hello there, brave '
        'new world."',
        "docs/none.md does not exist; expected a UTF-8 text file of at least 1 word\n",
        "latin1.md is not UTF-8 text (byte 0xe9 at offset 3); expected a UTF-8 text file of "
        "at least 1 word\n",
        "malformed wordcount criterion US-001::bad ($.userStories[0].acceptanceCriteria[6]): "
        "'file' is missing; 'min' must be a non-negative integer; found -1; expected {",
        "malformed wordcount criterion US-001::crossed ($.userStories[0].acceptanceCriteria"
        "[7]): 'min' (9) is greater than 'max' (3); expected {",
    ]:
        assert message in out
    assert "Traceback" not in out and "no check for the kind" not in out


# An agent that appends one sentence of 5 words per run (the words differ from run to run,
# so the file's last sentence, which the failure message quotes, changes each time).
FEW_WORDS = """
import pathlib
path = pathlib.Path("post.md")
text = path.read_text("utf-8")
words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
n = len(text.split())
path.write_text(text + " ".join(words[(n + i) % 12] for i in range(5)) + ".\\n", "utf-8")
"""

ENOUGH_WORDS = """
import pathlib
pathlib.Path("post.md").write_text("A sentence of words. " * 80, "utf-8")
"""


def start_loop(pytester: pytest.Pytester, agent: str, *args: str) -> pytest.RunResult:
    """``pytest --ralph`` on a PRD that wants 300 words in post.md, with ``agent`` (Python
    source) as the agent. Loaded by ``-p`` on the command line, the plugin would be missing
    from the loop's check phases, which run in a child pytest: the ini loads it in both."""
    pytester.makeini("[pytest]\n" + ("" if INSTALLED else "addopts = -p ralph_example_plugin\n"))
    pytester.path.joinpath("post.md").write_text("Draft.\n")
    pytester.path.joinpath("agent.py").write_text(agent)
    write_prd(pytester, {"kind": "wordcount", "file": "post.md", "min": 300})
    return pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} agent.py", *args)


def report(pytester: pytest.Pytester) -> str:
    (path,) = (pytester.path / ".pytest_ralph" / "reports").glob("ralph-*.md")
    return path.read_text()


def test_loop_stops_on_the_breaker_when_the_agent_adds_too_few_words(
        pytester: pytest.Pytester) -> None:
    run = start_loop(pytester, FEW_WORDS)
    assert run.ret == 6, run.stdout.str()
    run.stdout.fnmatch_lines(["*identical-failure streak 3/3",
                              "pytest-ralph: breaker (exit 6) after 3 iterations*"])
    assert len(pytester.path.joinpath("post.md").read_text().split()) == 1 + 3 * 5
    assert 'post.md has 16 words; expected at least 300 (284 more); it ends: "lima alpha ' \
           'bravo charlie delta."' in report(pytester)


def test_loop_without_the_fingerprint_hook_sees_progress(pytester: pytest.Pytester) -> None:
    """The control: with the built-in fingerprint text put back (a conftest.py hook that runs
    first), each iteration looks new, and the same 3 iterations end on the iteration limit."""
    pytester.makeconftest("""
import pytest
from pytest_ralph import CheckResult, normalize_failure

@pytest.hookimpl(tryfirst=True)
def pytest_ralph_fingerprint(result):
    return normalize_failure(result.message)
""")
    run = start_loop(pytester, FEW_WORDS, "--ralph-max-iterations", "3")
    assert run.ret == 1, run.stdout.str()
    assert run.stdout.str().count("identical-failure streak 1/3") == 3
    run.stdout.fnmatch_lines(["pytest-ralph: limit (exit 1) after 3 iterations*"])


def test_loop_completes_when_the_agent_writes_enough(pytester: pytest.Pytester) -> None:
    run = start_loop(pytester, ENOUGH_WORDS)
    assert run.ret == 0, run.stdout.str()
    run.stdout.fnmatch_lines(["pytest-ralph: complete (exit 0) after 1 iteration*"])
