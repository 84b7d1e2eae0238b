"""Malformed PRD input, exhaustively: each case gets a precise error (file, place, what was
expected, how to fix it) or a documented normalization, with no traceback, and the file is
never modified.

Each case is a small file written here. The same table runs three ways: through
:func:`pytest_ralph.prd.load.load_prd`, through plain ``pytest`` on the file (a collection
error without a traceback), and through ``pytest --ralph`` (a usage error, exit 4).
``pytest --durations=0 tests/prd/test_malformed.py`` shows how long each one takes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_ralph.prd.errors import (
    MAX_DEPTH,
    MAX_EXPANDED_VALUES,
    MAX_VALUES,
    PRDError,
    Problem,
)
from pytest_ralph.prd.load import load_prd

PRIORITY = ("expected a priority: an integer 0..1000000, a number >= 0, high/medium/low or "
            "P0..P9; found ")
STORY = '{"id": "US-1", "title": "Log in", "acceptanceCriteria": ["It works"]}'


@dataclass(frozen=True)
class Case:
    """One malformed file and the one problem it must give.

    ``message`` is a fragment of the problem's message; ``json_path``, ``line`` and
    ``column`` are exact (``None``: unknown). ``hint`` is a fragment of the hint (``""``:
    no hint is checked).
    """

    name: str
    content: bytes | str
    json_path: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str = ""


def _bomb() -> str:
    """The "billion laughs" YAML: 9 levels of 9 aliases, about 4e8 values once expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join([*lines, "userStories: []", ""])


def _nested(depth: int) -> str:
    return '{"userStories": [' + STORY[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}]}"


CASES = [
    Case("trailing-comma-in-array.json", '{"userStories": [' + STORY + ",\n]}",
         "$", "invalid JSON: a trailing comma before ']'", 1, 87,
         "remove the comma, or rename the file to .jsonc"),
    Case("trailing-comma-in-object.json", '{\n  "userStories": [' + STORY + '],\n}\n',
         "$", "invalid JSON: a trailing comma before '}'", 2, 89, "remove the comma"),
    Case("merge-conflict.json",
         '{\n<<<<<<< HEAD\n  "userStories": []\n=======\n  "userStories": [' + STORY
         + ']\n>>>>>>> feature\n}\n',
         "$", "unresolved git merge conflict (marker '<<<<<<< HEAD')", 2, 1,
         "keep one side of the conflict"),
    Case("merge-conflict.yaml",
         "userStories:\n<<<<<<< ours\n  - {id: A, title: a}\n=======\n  - {id: B, title: b}\n"
         ">>>>>>> theirs\n",
         "$", "unresolved git merge conflict (marker '<<<<<<< ours')", 2, 1,
         "delete the <<<<<<<, ======= and >>>>>>> lines"),
    Case("truncated-in-a-string.json", '{"userStories": [{"id": "US-1", "title": "Log',
         "$", "invalid JSON: Unterminated string", 1, 42, "ends too early: is it truncated?"),
    Case("truncated-after-a-value.json", '{"userStories": [' + STORY,
         "$", "invalid JSON: Expecting ',' delimiter", 1, 87, "ends too early"),
    Case("truncated.yaml", 'userStories:\n  - {id: A, title: "Log',
         "$", "invalid YAML: found unexpected end of stream", 2, 24, "ends too early"),
    Case("utf-16-with-bom.json", ('{"userStories": [' + STORY + "]}").encode("utf-16"),
         "$", "file is UTF-16; expected UTF-8", None, None, "save the file as UTF-8"),
    Case("utf-16-be-without-bom.yaml", "userStories: []\n".encode("utf-16-be"),
         "$", "file is UTF-16; expected UTF-8", None, None, "save the file as UTF-8"),
    Case("binary-with-nul.json", bytes(range(256)) * 3,
         "$", "expected UTF-8 text; found a NUL byte at offset 0", 1, 1, "binary file"),
    Case("binary-png.json", b"\x89PNG\r\n\x1a\n" + bytes([200, 150, 3]) * 40,
         "$", "not valid UTF-8: byte 0x89 at offset 0", 1, 1, "save the file as UTF-8"),
    Case("latin-1.yaml", "userStories:\n  - {id: A, title: caf\xe9}\n".encode("latin-1"),
         "$", "not valid UTF-8: byte 0xe9 at offset 35", 2, 23, "save the file as UTF-8"),
    Case("nested-too-deep.json", _nested(MAX_DEPTH + 10),
         ("$.userStories[0].extra" + "[0]" * (MAX_DEPTH - 3))[:77] + "...",
         f"expected at most {MAX_DEPTH} levels of nested lists and mappings; found more", 1, 1),
    Case("nested-past-the-parser.json", _nested(200_000),
         "$", "invalid JSON: nested too deeply"),
    Case("nested-past-the-parser.yaml", "userStories: " + "[" * 200_000 + "]" * 200_000,
         "$", "invalid YAML: exceeded maximum nesting depth", 1, 1013),
    Case("alias-bomb.yaml", _bomb(),
         "$", f"expected at most {MAX_EXPANDED_VALUES} (is it an alias bomb?)", None, None,
         "write the values out"),
    Case("recursive-alias.yaml", "userStories:\n  - &s {id: A, title: t, again: *s}\n",
         "$.userStories[0].again", "a YAML alias inside the value it refers to", 2, 5,
         "replace the alias"),
    Case("python-object-tag.yaml",
         'userStories:\n  - !!python/object/apply:os.system ["touch pwned"]\n',
         "$", "the tag !!python/object/apply:os.system would construct an object", 2, 5,
         "remove the tag"),
    Case("python-name-tag.yaml", "userStories: !!python/name:os.system\n",
         "$", "the tag !!python/name:os.system would construct an object", 1, 14),
    Case("binary-tag.yaml", "userStories:\n  - {id: A, title: !!binary aGVsbG8=}\n",
         "$.userStories[0].title", "found YAML binary data (!!binary)", 2, 20, "quote it as text"),
    Case("set-tag.yaml", "userStories:\n  - {id: A, title: t, acceptanceCriteria: !!set {a}}\n",
         "$.userStories[0].acceptanceCriteria", "found a YAML set (!!set)", 2, 43),
    Case("yaml-list-as-key.yaml", "userStories:\n  - {id: A, title: t, [a, b]: x}\n",
         "$", "invalid YAML: found a key that is a list or a mapping", 2, 23),
    Case("duplicate-key.json", '{"userStories": [{"id": "A", "title": "t", "id": "B"}]}',
         "$.userStories[0].id", "duplicate key 'id'", 1, 44, "keep only one of them"),
    Case("duplicate-key.yaml", "userStories: []\nuserStories: []\n",
         "$.userStories", "duplicate key 'userStories'", 2, 1),
    Case("duplicate-story-id.json", '{"userStories": [\n' + STORY + ",\n" + STORY + "\n]}",
         "$.userStories[1].id", "duplicate story id 'US-1' (first used at $.userStories[0])",
         3, 8, "give every story its own id"),
    Case("id-made-from-position-clashes.json",
         '{"tasks": [{"title": "a"}, {"id": "S1", "title": "b"}]}',
         "$.tasks[1].id", "duplicate story id 'S1' (first used at $.tasks[0], made from its "
         "position: that story has no id)", 1, 35),
    Case("duplicate-criterion-id.json",
         '{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": '
         '[{"id": "x", "run": "true"}, {"id": "x", "run": "false"}]}]}',
         "$.userStories[0].acceptanceCriteria[1]", "duplicate criterion id 'x' in story 'A'",
         1, 95),
    *[Case(f"id-with-{label}.json",
           json.dumps({"userStories": [{"id": bad, "title": "t"}]}),
           "$.userStories[0].id", f"invalid id {json.dumps(bad)}: an id may not contain "
           "whitespace, control characters, '/', '[', ']' or '::'", 1, 25)
      for label, bad in [("double-colon", "US::1"), ("slash", "US/1"), ("space", "US 1"),
                         ("newline", "US\n1"), ("tab", "US\t1")]],
    Case("id-with-zero-width-space.json", '{"userStories": [{"id": "A\u200b", "title": "t"}]}',
         "$.userStories[0].id", 'invalid id "A\\u200b": it holds an invisible character', 1, 25,
         "type the id again without it"),
    Case("criterion-number.json",
         '{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": ["ok", 42]}]}',
         "$.userStories[0].acceptanceCriteria[1]", "found number 42", 1, 73,
         "quote it as text"),
    Case("criterion-null.yaml",
         "userStories:\n  - id: A\n    title: t\n    steps: [ok, null]\n",
         "$.userStories[0].steps[1]", "found null", 4, 17),
    Case("criterion-blank.json",
         '{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": ["ok", "   "]}]}',
         "$.userStories[0].acceptanceCriteria[1]", 'found string "   "', 1, 73),
    Case("title-blank-and-no-criteria.json",
         '{"userStories": [{"id": "A", "title": "   ", "acceptanceCriteria": []}]}',
         "$.userStories[0].title", 'expected a title with text; found string "   "', 1, 39),
    Case("stories-in-two-containers.json",
         '{"userStories": [' + STORY + '], "tasks": [{"title": "b"}]}',
         "$", "expected one story container; found $.userStories, $.tasks", 1, 1),
    Case("passes-as-text.json",
         '{"userStories": [{"id": "A", "title": "t", "passes": "true"}]}',
         "$.userStories[0].passes", 'expected true or false; found string "true"', 1, 54,
         "write true without quotes"),
    Case("negative-priority.json", '{"userStories": [{"id": "A", "title": "t", "priority": -3}]}',
         "$.userStories[0].priority", PRIORITY + "number -3", 1, 56),
    Case("huge-priority.json",
         '{"userStories": [{"id": "A", "title": "t", "priority": 10000001}]}',
         "$.userStories[0].priority", PRIORITY + "number 10000001", 1, 56),
    Case("huge-float-priority.yaml", "tasks:\n  - {id: A, title: t, priority: 1.0e+300}\n",
         "$.tasks[0].priority", PRIORITY + "number 1e+300", 2, 33),
    Case("priority-of-5000-digits.json",
         '{"userStories": [{"id": "A", "title": "t", "priority": ' + "9" * 5000 + "}]}",
         "$", "a number has thousands of digits; expected an ordinary number"),
    Case("priority-word-unknown.json",
         '{"stories": [{"id": 1, "title": "t", "priority": "urgent"}]}',
         "$.stories[0].priority", PRIORITY + 'string "urgent"', 1, 50),
    Case("nan.json", '{"userStories": [{"id": "A", "title": "t", "priority": NaN}]}',
         "$", "NaN is not a JSON number; expected a finite number", 1, 56),
    Case("infinity.json", '{"userStories": [{"id": "A", "title": "t", "priority": -Infinity}]}',
         "$", "-Infinity is not a JSON number", 1, 56),
    Case("nan.yaml", "userStories:\n  - {id: A, title: t, priority: .nan}\n",
         "$.userStories[0].priority", 'found string ".nan"', 2, 33),
    Case("comments-in-json.json", '// stories\n{"userStories": []}\n',
         "$", "invalid JSON: Expecting value", 1, 1, "rename the file to .jsonc"),
    Case("empty.json", "", "$", "invalid JSON: Expecting value", 1, 1, "the file is empty"),
    Case("no-stories-anywhere.yaml",
         "version: 1\nobjective: x\nacceptance_tests:\n  - {name: a, assert: b}\n",
         "$", "no stories found: expected an object with stories under userStories | stories "
         "| tasks | items | features | phases[].stories, or an array of stories; found keys: "
         "version, objective, acceptance_tests; $.acceptance_tests holds 1 criterion but no "
         "story owns them", 1, 1, "a PRD is {"),
    Case("story-is-text.json", '{"tasks": ["write the login page"]}',
         "$.tasks[0]", 'expected a story object with a title; found string "write the login '
         'page"', 1, 12),
    Case("status-is-a-number.json", '{"tasks": [{"id": "A", "title": "t", "status": 3}]}',
         "$.tasks[0].status", "expected a string such as 'done' or 'open'; found number 3", 1, 48),
    Case("top-level-text.yaml", "just a sentence\n",
         "$", 'found string "just a sentence"', 1, 1),
    # A NUL reaching a command line or a path: refused when loaded (it once loaded, then
    # failed with a 47 KB traceback of subprocess as its failure message).
    *[Case(f"nul-in-{field}.json", '{"userStories": [{"id": "A", "title": "t", '
           '"acceptanceCriteria": [' + criterion + "]}]}",
           f"$.userStories[0].acceptanceCriteria[0].{field}",
           f"expected {what} without a NUL character (\\u0000); found string", 1, column,
           "remove the escaped NUL")
      for field, criterion, what, column in [
          ("run", '{"run": "true\\u0000 rm -rf /"}', "a shell command", 75),
          ("cwd", '{"run": "make", "cwd": "app\\u0000"}', "a folder path", 90),
          ("pytest", '{"pytest": ["tests/a.py", "tests/b\\u0000.py"]}', "node ids or paths", 78),
          ("exists", '{"exists": "src\\u0000"}', "a path", 78),
          ("file", '{"file": "log\\u0000", "contains": "ok"}', "a path", 76),
          ("db", '{"sql": "select 1", "db": "a\\u0000.db", "expect": 1}', "a path", 93),
          ("instance", '{"schema": "s.json", "instance": "i\\u0000.json"}', "a path", 100)]],
    Case("nul-in-run.yaml", 'userStories:\n  - id: A\n    title: t\n    acceptanceCriteria:\n'
         '      - run: "true\\0 rm -rf /"\n',
         "$.userStories[0].acceptanceCriteria[0].run",
         'expected a shell command without a NUL character (\\u0000); found string '
         '"true\\u0000 rm -rf /"', 5, 14, "\\0 in YAML"),
]


def write(folder: Path, case: Case) -> Path:
    path = folder / case.name
    path.write_bytes(case.content if isinstance(case.content, bytes)
                     else case.content.encode("utf-8"))
    return path


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def the_problem(case: Case, err: PRDError) -> Problem:
    matching = [p for p in err.problems if case.message in p.message]
    assert matching, f"no problem says {case.message!r}:\n{err.describe()}"
    return matching[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_load_gives_one_precise_problem(tmp_path: Path, case: Case) -> None:
    path = write(tmp_path, case)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = snapshot(path)
    with pytest.raises(PRDError) as info:
        load_prd(path)
    problem = the_problem(case, info.value)
    assert len(info.value.problems) == 1, info.value.describe()
    assert problem.json_path == case.json_path
    assert (problem.line, problem.column) == (case.line, case.column)
    assert case.hint in problem.hint
    assert info.value.path == path
    assert str(path) in info.value.describe()
    assert snapshot(path) == before, "the file was modified"
    assert sorted(p.name for p in tmp_path.iterdir()) == [case.name], "a file was written"


def test_thousands_of_problems_are_cut_to_the_first_fifty(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text('{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": ['
                    + ", ".join(["42"] * 20_000) + "]}]}")
    with pytest.raises(PRDError) as info:
        load_prd(path)
    problems = info.value.problems
    assert len(problems) == 51
    assert problems[0].json_path == "$.userStories[0].acceptanceCriteria[0]"
    assert problems[-1].message == ("more problems than the 50 listed; fix these and load the "
                                    "file again")
    assert info.value.describe().splitlines()[0] == (
        f"invalid PRD {path}: more than 50 problems, the first shown")


def test_more_values_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text('{"userStories": [' + STORY + '], "pad": [' + "0," * MAX_VALUES + "0]}")
    with pytest.raises(PRDError) as info:
        load_prd(path)
    assert [(p.json_path, p.message, p.hint) for p in info.value.problems] == [
        ("$", f"the file holds more than {MAX_VALUES:,} values; expected a PRD under that",
         "split the PRD into several files")]


def test_over_the_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_bytes(b" " * (20 * 1024 * 1024 + 1))
    with pytest.raises(PRDError) as info:
        load_prd(path)
    assert [p.message for p in info.value.problems] == [
        "file is 20971521 bytes, over the limit of 20971520 bytes"]
    assert "ralph_max_prd_bytes" in info.value.problems[0].hint
    small = tmp_path / "small.json"
    small.write_text('{"userStories": [' + STORY + "]}")
    with pytest.raises(PRDError, match="over the limit of 10 bytes"):
        load_prd(small, max_bytes=10)


# ---------------------------------------------------------------------------------------------
# Documented normalizations of odd input: they load


@pytest.mark.parametrize(("name", "text", "field", "value"), [
    # .jsonc allows comments and trailing commas
    ("prd.jsonc", '// the plan\n{"userStories": [' + STORY + ",],}\n", "id", "US-1"),
    # an unquoted YAML date stays text, as JSON would have it
    ("prd.yaml", "userStories:\n  - {id: A, title: t, notes: 2024-05-01}\n", "notes",
     "2024-05-01"),
    # an integer id becomes a string
    ("prd.json", '{"stories": [{"id": 7, "title": "t"}]}', "id", "7"),
    # a missing or empty id is made from the position
    ("prd.json", '{"tasks": [{"id": "", "title": "t"}]}', "id", "S1"),
    # a float priority is rounded down; words and P0..P9 are mapped
    ("prd.json", '{"tasks": [{"id": "A", "title": "t", "priority": 2.7}]}', "priority", 2),
    ("prd.yaml", "tasks:\n  - {id: A, title: t, priority: HIGH}\n", "priority", 1),
    ("prd.yaml", "tasks:\n  - {id: A, title: t, priority: P0-when-scaling}\n", "priority", 0),
    # YAML keys written as plain values are text as written (YAML 1.1 reads on: as true)
    ("prd.yaml", "userStories:\n  - {id: A, title: t, on: x, 1: y, notes: n}\n", "notes", "n"),
    # YAML 1.1 number forms stay the text as written: only JSON's number forms are numbers
    ("prd.yaml", "stories:\n  - {id: 010, title: t}\n", "id", "010"),
    ("prd.yaml", "stories:\n  - {id: 0x1F, title: t}\n", "id", "0x1F"),
    ("prd.yaml", "stories:\n  - {id: A, title: 12:30}\n", "title", "12:30"),
    ("prd.yaml", "stories:\n  - {id: A, title: t, priority: 1.5e0}\n", "priority", 1),
    # YAML merge keys work
    ("prd.yaml", "base: &b {title: t}\nuserStories:\n  - {<<: *b, id: A}\n", "title", "t"),
    # a UTF-8 byte order mark is skipped
    ("prd.json", '\ufeff{"userStories": [' + STORY + "]}", "id", "US-1"),
])
def test_documented_normalizations_load(tmp_path: Path, name: str, text: str, field: str,
                                        value: object) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    before = snapshot(path)
    story = load_prd(path).stories[0]
    assert getattr(story, field) == value
    assert snapshot(path) == before


def test_empty_container_loads_with_no_stories(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text('{"branchName": "ralph/x", "userStories": []}')
    prd = load_prd(path)
    assert (prd.stories, prd.stories_path) == ((), "$.userStories")


# ---------------------------------------------------------------------------------------------
# The same table through pytest itself: no traceback, exit codes


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plain_pytest_reports_it_without_traceback(pytester: pytest.Pytester,
                                                   case: Case) -> None:
    path = write(pytester.path, case)
    before = snapshot(path)
    result = pytester.runpytest(str(path), "-p", "no:randomly")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # errors during collection
    assert f"invalid PRD {path}" in out
    assert case.message.splitlines()[0][:60] in out
    assert "Traceback" not in out
    assert snapshot(path) == before


@pytest.mark.parametrize("case", [c for c in CASES if c.name.endswith((".json", ".yaml"))][::4],
                         ids=lambda c: c.name)
def test_ralph_loop_refuses_it_as_a_usage_error(pytester: pytest.Pytester, case: Case) -> None:
    path = write(pytester.path, case)
    before = snapshot(path)
    result = pytester.runpytest("--ralph", "--ralph-prd", str(path), "--ralph-agent", "true",
                                "-p", "no:randomly")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 4
    assert f"invalid PRD {path}" in out
    assert "Traceback" not in out
    assert snapshot(path) == before
    assert not (pytester.path / ".pytest_ralph").exists() or not any(
        (pytester.path / ".pytest_ralph").rglob("report*.md"))


# ---------------------------------------------------------------------------------------------
# Found by QA: characters one cannot see, YAML 1.1 booleans, JSONC commas


@pytest.mark.parametrize("char", ["\u200b", "\u2066", "\u061c", "\u00ad", "\u009b",
                                  "\U000e0041", "\ufeff"])
def test_invisible_characters_in_ids_are_refused(tmp_path: Path, char: str) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"userStories": [
        {"id": f"A{char}", "title": "t"},
        {"id": "B", "title": "t", "acceptanceCriteria": [{"id": f"c{char}", "run": "true"}]}]}),
        encoding="utf-8")
    with pytest.raises(PRDError) as info:
        load_prd(path)
    assert [p.json_path for p in info.value.problems] == [
        "$.userStories[0].id", "$.userStories[1].acceptanceCriteria[0].id"]
    assert all("it holds an invisible character" in p.message for p in info.value.problems)


def test_text_of_invisible_characters_only_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"userStories": [
        {"id": "A", "title": "\u200b", "acceptanceCriteria": ["ok", "\u200b\u200c"]}]}))
    with pytest.raises(PRDError) as info:
        load_prd(path)
    assert [(p.json_path, p.message) for p in info.value.problems] == [
        ("$.userStories[0].title", 'expected a title with text; found "\\u200b"'),
        ("$.userStories[0].acceptanceCriteria[1]",
         'expected a criterion with visible text; found "\\u200b\\u200c"')]


def test_yaml_booleans_are_json_forms_only(tmp_path: Path) -> None:
    path = tmp_path / "prd.yaml"
    path.write_text("userStories:\n  - {id: yes, title: No, passes: True, notes: =,"
                    " acceptanceCriteria: [off]}\n")
    story = load_prd(path).stories[0]
    assert (story.id, story.title, story.passes, story.notes) == ("yes", "No", True, "=")
    assert [c.text for c in story.criteria] == ["off"]
    path.write_text("userStories:\n  - {id: A, title: t, passes: yes}\n")
    with pytest.raises(PRDError, match='expected true or false; found string "yes"'):
        load_prd(path)


@pytest.mark.parametrize(("text", "column"), [
    ('{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": [,]}]}', 67),
    ('{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": ["x",,]}]}', 71),
])
def test_jsonc_commas_after_no_value_are_errors(tmp_path: Path, text: str, column: int) -> None:
    path = tmp_path / "prd.jsonc"
    path.write_text(text)
    with pytest.raises(PRDError) as info:
        load_prd(path)
    problem = info.value.problems[0]
    assert (problem.message, problem.line, problem.column) == (
        "invalid JSON: Expecting value", 1, column)


def test_a_large_yaml_file_of_millions_of_values_is_refused_before_it_is_built(
        tmp_path: Path) -> None:
    path = tmp_path / "prd.yaml"
    path.write_text("userStories: []\nmeta: [" + "0," * (MAX_VALUES + 5) + "0]\n")
    with pytest.raises(PRDError) as info:
        load_prd(path)
    assert [p.message for p in info.value.problems] == [
        f"the file holds more than {MAX_VALUES:,} values; expected a PRD under that"]
