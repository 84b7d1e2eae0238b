"""Check kinds `pytest`, `exists`, `file` (+ `contains`), `sql`, `schema` and `python`: pass,
fail, bad fields."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.prd import story

Writer = Callable[..., Path]

LINKED_TESTS = """
import pytest
def test_ok(): pass
def test_bad(): assert 1 == 2
@pytest.mark.skip
def test_skip(): pass
"""

# (criterion, passes?, text expected in the failure)
CASES: list[tuple[dict[str, object], bool, str]] = [
    ({"pytest": "tests/test_a.py::test_ok"}, True, ""),
    ({"pytest": ["tests/test_a.py::test_ok", "tests/test_a.py::test_bad"]}, False,
     "1 failed, 1 passed (pytest exit 1); expected all selected tests pass and at least one "
     "runs"),
    ({"pytest": "tests/test_a.py::test_skip"}, False, "the selected test was skipped"),
    ({"pytest": "tests/test_a.py::test_gone"}, False,
     "pytest exit 4 (usage error: not found: "),
    ({"pytest": "tests/nowhere"}, False,
     "pytest exit 4 (usage error: file or directory not found: tests/nowhere); expected"),
    ({"pytest": "broken/test_b.py"}, False,
     "pytest exit 2 (interrupted or collection errors: broken/test_b.py - "
     "ModuleNotFoundError: No module named 'nosuchmodule'); expected"),
    ({"pytest": "tests/test_a.py", "text": "k in addopts cannot narrow it"}, False, "1 failed"),
    ({"exists": "tests"}, True, ""),
    ({"exists": "missing.txt"}, False, "nothing at `missing.txt`; expected a file or folder"),
    ({"file": "notes.md", "contains": "^version: \\d+\\.\\d+$"}, True, ""),
    ({"file": "notes.md", "contains": "^version: 2"}, False,
     "no match for /^version: 2/ in `notes.md` (2 lines)"),
    ({"file": "tests"}, False, "`tests` is a folder; expected a regular file"),
    ({"sql": "SELECT count(*) FROM users", "db": "app.db", "expect": 2}, True, ""),
    ({"sql": "SELECT name FROM users ORDER BY name", "db": "app.db", "expect": ["ann", "bob"]},
     True, ""),
    ({"sql": "SELECT count(*) FROM users WHERE active", "db": "app.db", "expect": 2}, False,
     "`SELECT count(*) FROM users WHERE active` on `app.db` gave 1; expected 2"),
    ({"sql": "SELECT * FROM nope", "db": "app.db", "expect": 0}, False,
     "failed: no such table: nope; expected a result equal to 0"),
    ({"sql": "DELETE FROM users", "db": "app.db", "expect": 0}, False,
     "attempt to write a readonly database"),
    ({"sql": "SELECT 1", "db": "gone.db", "expect": 1}, False, "no database at `gone.db`"),
    ({"schema": "config.schema.json", "instance": "config.yaml"}, True, ""),
    ({"schema": "config.schema.json", "instance": "bad-config.json"}, False,
     "`bad-config.json` does not match `config.schema.json`: 1 problem; expected none"),
    ({"schema": "ref.schema.json", "instance": "config.yaml"}, True, ""),
    ({"schema": "ref.schema.json", "instance": "bad-config.json"}, False,
     "`bad-config.json` does not match `ref.schema.json`: 1 problem; expected none"),
    ({"schema": "remote.schema.json", "instance": "config.yaml"}, False,
     "`remote.schema.json`: cannot resolve the $ref 'https://example.invalid/port.json': "
     "https://example.invalid/port.json is not a local file; expected a reference inside the "
     "schema or to a JSON or YAML file next to it (remote references are not fetched)"),
    ({"python": "checks:ok"}, True, ""),
    ({"python": "checks:returns_false"}, False, "`checks:returns_false()` returned False"),
    ({"python": "checks:raises"}, False, "`checks:raises()` raised ValueError: no login page"),
    ({"python": "checks:missing"}, False, "cannot import `checks:missing`: AttributeError"),
]


@pytest.fixture
def kinds_project(pytester: pytest.Pytester, write_prd: Writer) -> Path:
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_a.py").write_text(LINKED_TESTS)
    pytester.mkdir("broken")
    (pytester.path / "broken" / "test_b.py").write_text("import nosuchmodule\n")
    (pytester.path / "notes.md").write_text("# Notes\nversion: 1.2\n")
    with contextlib.closing(sqlite3.connect(pytester.path / "app.db")) as db:
        db.executescript("CREATE TABLE users (name TEXT, active INT);"
                         "INSERT INTO users VALUES ('bob', 1), ('ann', 0);")
    (pytester.path / "config.schema.json").write_text(json.dumps(
        {"type": "object", "required": ["port"], "properties": {"port": {"type": "integer"}}}))
    (pytester.path / "config.yaml").write_text("port: 8080\n")
    (pytester.path / "defs").mkdir()
    (pytester.path / "defs" / "port.yaml").write_text("type: integer\n")
    (pytester.path / "ref.schema.json").write_text(json.dumps(
        {"type": "object", "required": ["port"], "properties": {"port": {"$ref":
                                                                         "defs/port.yaml"}}}))
    (pytester.path / "remote.schema.json").write_text(json.dumps(
        {"properties": {"port": {"$ref": "https://example.invalid/port.json"}}}))
    (pytester.path / "bad-config.json").write_text('{"port": "eighty"}')
    (pytester.path / "checks.py").write_text(
        "def ok():\n    return None\n"
        "def returns_false():\n    return False\n"
        "def raises():\n    raise ValueError('no login page')\n")
    # addopts that would hide failures or select nothing must not change a `pytest` check.
    pytester.makeini("[pytest]\naddopts = -k test_ok -x\n")
    return write_prd(story("US-1", *[c for c, _, _ in CASES]))


@pytest.mark.parametrize("workers", [[], ["-n", "2", "-p", "xdist"]])
def test_each_kind_passes_and_fails_as_it_should(pytester: pytest.Pytester, kinds_project: Path,
                                                 workers: list[str]) -> None:
    # The gate itself is the user's run: undo the -x of addopts for it.
    result = pytester.runpytest_subprocess("prd.json", "-rA", "-k", "", "--maxfail=0", *workers)
    out = result.stdout.str()
    for i, (criterion, passes, message) in enumerate(CASES, start=1):
        nodeid = f"prd.json::US-1::AC{i}"
        assert f"{'PASSED' if passes else 'FAILED'} {nodeid}" in out, (criterion, out)
        if message:
            assert message in out, (criterion, message)
    result.assert_outcomes(passed=sum(p for _, p, _ in CASES),
                           failed=sum(not p for _, p, _ in CASES))


@pytest.mark.parametrize(("criterion", "expected"), [
    ({"pytest": []}, "$.userStories[0].acceptanceCriteria[0].pytest: expected"),
    ({"pytest": 3}, "$.userStories[0].acceptanceCriteria[0].pytest: expected"),
    ({"exists": ""}, "$.userStories[0].acceptanceCriteria[0].exists: expected a non-empty "
                     "string"),
    ({"file": "a.txt", "contains": "("}, "$.userStories[0].acceptanceCriteria[0].contains: "
                                         "expected a regular expression"),
    ({"run": "true", "pytest": "tests"}, "a criterion has several check kinds ('run', "
                                         "'pytest'); expected exactly one"),
    ({"pytest": "tests", "timeout": "soon"}, "$.userStories[0].acceptanceCriteria[0].timeout: "
                                             "expected a number"),
    ({"sql": "SELECT 1", "db": "a.db"}, "missing required key 'expect'"),
    ({"schema": "s.json"}, "missing required key 'instance'"),
    ({"fiel": "x"}, "hint: did you mean 'file' instead of 'fiel'?"),
    ({"python": "not a target"}, "$.userStories[0].acceptanceCriteria[0].python: expected "
                                 "'module:function'"),
])
def test_bad_fields_are_precise_collection_errors(pytester: pytest.Pytester,
                                                  criterion: dict[str, object],
                                                  expected: str) -> None:
    (pytester.path / "prd.json").write_text(json.dumps(
        {"userStories": [{"id": "US-1", "title": "t", "acceptanceCriteria": [criterion]}]},
        indent=1))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert expected in out, out
    assert "Traceback" not in out


def test_the_prompt_names_each_kind_of_check(pytester: pytest.Pytester,
                                             kinds_project: Path) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-dry-run", "--ralph-agent", "true")
    assert result.ret == 0
    result.stdout.fnmatch_lines_random([
        "  check: these tests must run and pass: `pytest tests/test_a.py::test_ok`",
        "  check: `missing.txt` must exist",
        "  check: file `notes.md` must exist and match /^version: 2/"])


def test_a_database_is_never_modified(pytester: pytest.Pytester, write_prd: Writer) -> None:
    with contextlib.closing(sqlite3.connect(pytester.path / "app.db")) as db:
        db.executescript("CREATE TABLE t (x INT); INSERT INTO t VALUES (1);")
    before = (pytester.path / "app.db").read_bytes()
    write_prd(story("US-1", {"sql": "UPDATE t SET x = 2", "db": "app.db", "expect": []}))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert (pytester.path / "app.db").read_bytes() == before


def test_ralph_checks_maps_text_criteria_to_commands(pytester: pytest.Pytester,
                                                     write_prd: Writer) -> None:
    write_prd(story("US-1", "Typecheck  passes", "Lint is clean", "Docs written", passes=True))
    pytester.makeini("[pytest]\nralph_checks =\n    typecheck passes = test -f typed.marker\n"
                     "    LINT IS CLEAN = true\n")
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines_random([
        "exit status 1, expected exit status 0: `test -f typed.marker`",
        "FAILED prd.json::US-1::AC1*", "PASSED prd.json::US-1::AC2",
        "US-1: 1 verified, 1 claimed, 1 failed"])


@pytest.mark.parametrize("line", ["no separator here", "= only a command", "text only ="])
def test_ralph_checks_bad_line_names_the_source(pytester: pytest.Pytester, write_prd: Writer,
                                                line: str) -> None:
    write_prd(story("US-1", "Docs written"))
    pytester.makeini(f"[pytest]\nralph_checks =\n    a = true\n    {line}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*checks from ini ralph_checks (tox.ini), line 2: expected "
                                 f"'criterion text = command'; got '{line}'*"])


@pytest.mark.parametrize(("kind", "target", "passes"), [
    ("file", "README.md", True), ("file", "README.md/", True), ("exists", "README.md/.", True),
    ("exists", "./README.md", True), ("exists", "docs/../README.md", True),
    ("file", "docs/", False), ("exists", "docs//", True), ("exists", "missing.md", False),
])
def test_paths_are_read_as_pathlib_reads_them(tmp_path: Path, kind: str, target: str,
                                              passes: bool) -> None:
    from pytest_ralph.checks.registry import make_check
    from pytest_ralph.prd.model import Criterion, Story

    (tmp_path / "README.md").write_text("# x\n")
    (tmp_path / "docs").mkdir()
    crit = Criterion("US-1", 1, "AC1", "t", kind, spec={kind: target})
    check = make_check(crit, Story("US-1", "t", "", (crit,), None, False, "", 0),
                       rootdir=tmp_path, strict=False, default_timeout=5.0, text_checks={},
                       verifier=None, verifier_source="", prd=None)
    assert check.run().passed is passes


def test_a_schema_check_never_fetches_a_remote_ref(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonschema's deprecated fallback would open a remote ``$ref`` with urllib: with our
    registry, nothing is opened, and a missing local file is named."""
    import urllib.request

    from pytest_ralph.checks.files import SchemaCheck

    opened: list[object] = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: opened.append(a))
    (tmp_path / "s.json").write_text(json.dumps({"anyOf": [
        {"$ref": "http://example.invalid/a.json"}, {"$ref": "missing.json"}]}))
    (tmp_path / "i.json").write_text("1")
    result = SchemaCheck(tmp_path / "s.json", tmp_path / "i.json", ("s.json", "i.json")).run()
    assert not result.passed and opened == []
    assert "http://example.invalid/a.json is not a local file" in result.message
    (tmp_path / "s.json").write_text(json.dumps({"$ref": "missing.json"}))
    result = SchemaCheck(tmp_path / "s.json", tmp_path / "i.json", ("s.json", "i.json")).run()
    assert f"cannot load {tmp_path / 'missing.json'}: " in result.message
