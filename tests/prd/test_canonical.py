"""The fast path of PRD loading (``pytest_ralph.prd.fastpath``) against the full path.

A file the fast path accepts must load exactly as the full path (dialect rules, JSON
Schema, duplicate ids, shape checks) loads it; a file with any problem must fall through
to the full path, which reports it. Each case below is one mutation of a canonical PRD,
loaded both ways, as JSON and as YAML.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_ralph.prd import fastpath as canonical
from pytest_ralph.prd import load as prd
from pytest_ralph.prd import validate
from pytest_ralph.prd.dialects import json_path
from pytest_ralph.prd.errors import PRDError
from pytest_ralph.prd.load import load_prd
from pytest_ralph.prd.model import PRD, Criterion, DeferredLine, Story
from pytest_ralph.prd.positions import Positions

BASE: dict[str, Any] = {
    "project": "Acme",
    "branchName": "ralph/acme",
    "description": "Login",
    "userStories": [
        {
            "id": "US-001",
            "title": "Login form",
            "description": "As a user I log in",
            "acceptanceCriteria": [
                "Typecheck passes",
                {"text": "tests pass", "run": "pytest -q", "timeout": 30, "cwd": "app"},
                {"testCommand": "make smoke"},
                {"id": "cov", "pytest": ["tests/test_a.py", "tests/test_b.py::test_x"],
                 "timeout": 2.5},
                {"pytest": "tests/test_c.py"},
                {"exists": "src/login.py"},
                {"file": "CHANGELOG.md", "contains": r"^- login\b"},
                {"file": "README.md"},
                {"sql": "select count(*) from users", "db": "app.db", "expect": [[1, "a"]]},
                {"schema": "schema.json", "instance": "data.json"},
                {"python": "app.checks:login_works", "timeout": 5},
            ],
            "priority": 1,
            "passes": False,
            "notes": "",
        },
        {
            "id": "US-002",
            "title": "Logout",
            "acceptanceCriteria": ["Logout works"],
        },
    ],
}

S0 = ("userStories", 0)
S1 = ("userStories", 1)
C0 = (*S0, "acceptanceCriteria")
MISSING = object()


def _set(data: dict[str, Any], parts: tuple[Any, ...], value: Any) -> None:
    target: Any = data
    for part in parts[:-1]:
        target = target[part]
    if value is MISSING:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value


BAD_VALUES: list[Any] = [None, "", " ", "\u200b", 0, -1, 1.5, True, [], {}, ["x"], {"a": 1}]

#: (name, [(parts, value), ...]): each a mutation of BASE.
MUTATIONS: list[tuple[str, list[tuple[tuple[Any, ...], Any]]]] = [
    ("base", []),
    *[(f"{field}={value!r}", [((*S0, field), value)])
      for field in ("id", "title", "description", "acceptanceCriteria", "priority", "passes",
                    "notes")
      for value in [*BAD_VALUES, MISSING]],
    *[(f"project={value!r}", [(("project",), value)]) for value in [*BAD_VALUES, MISSING]],
    *[(f"branchName={value!r}", [(("branchName",), value)]) for value in BAD_VALUES],
    *[(f"userStories={value!r}", [(("userStories",), value)]) for value in BAD_VALUES],
    ("projectName", [(("project",), MISSING), (("projectName",), "Acme2")]),
    ("name", [(("project",), None), (("name",), "Acme3")]),
    ("project and name", [(("name",), "Other")]),
    ("tasks too", [(("tasks",), [])]),
    ("phases too", [(("phases",), [])]),
    ("top-level extra", [(("version",), {"major": 1, "tags": ["a", None, 2.5]})]),
    ("top-level inf", [(("ratio",), float("inf"))]),
    *[(f"id {value!r}", [((*S0, "id"), value)])
      for value in ["US 1", "US/1", "US[1]", "US::1", "US-\u200b1", "US-\u00e91", "x" * 200,
                    "x" * 201, "US-1\n", 7, "US-002"]],
    *[(f"title {value!r}", [((*S0, "title"), value)])
      for value in ["\u200b\u200b", "\u00e9t\u00e9", "\t", "a\nb"]],
    *[(f"priority {value!r}", [((*S0, "priority"), value)])
      for value in [1000000, 1000001, 2.0, "high", "P1", "3", -0.5]],
    ("status", [((*S0, "status"), "done")]),
    ("status without passes", [((*S0, "passes"), MISSING), ((*S0, "status"), "done")]),
    ("steps", [((*S0, "steps"), ["a"])]),
    ("story extra", [((*S0, "dependsOn"), ["US-002"])]),
    *[(f"dependsOn {value!r}", [((*S0, "dependsOn"), value)])
      for value in [None, "US-002", " ", [], [7], ["US 2"], ["US-404"], ["US-001"], {}, 3]],
    ("dependencies", [((*S0, "dependencies"), ["US-002"])]),
    ("depends_on", [((*S0, "depends_on"), ["US-002"])]),
    ("dependsOn and depends_on", [((*S0, "dependsOn"), ["US-002"]),
                                  ((*S0, "depends_on"), ["US-001"])]),
    ("story extra nested", [((*S0, "meta"), {"a": [{"b": [1, 2, {"c": None}]}]})]),
    ("story extra deep", [((*S0, "deep"), json.loads("[" * 40 + "]" * 40))]),
    ("story extra nan", [((*S0, "score"), float("nan"))]),
    ("duplicate story id", [((*S1, "id"), "US-001")]),
    *[(f"criterion {i} = {value!r}", [((*C0, i), value)])
      for i in (0, 1) for value in ["", " ", "\u200b", "\u00e9t\u00e9", 3, None, [], {}]],
    *[(f"criterion 1 {field}={value!r}", [((*C0, 1, field), value)])
      for field in ("run", "timeout", "cwd", "text", "id")
      for value in ["", 0, -1, True, None, "x", 1e308, [], MISSING]],
    ("criterion 1 both run and testCommand", [((*C0, 1, "testCommand"), "make")]),
    ("criterion 1 two kinds", [((*C0, 1, "exists"), "x")]),
    ("criterion 1 kind", [((*C0, 1), {"kind": "wordcount", "file": "a", "min": 3})]),
    ("criterion 1 builtin kind", [((*C0, 1), {"kind": "run", "run": "x"})]),
    ("criterion 1 no check key", [((*C0, 1), {"text": "only text"})]),
    ("criterion 1 extra field", [((*C0, 1, "retries"), [1, {"a": "b"}])]),
    *[(f"pytest {value!r}", [((*C0, 3, "pytest"), value)])
      for value in ["", [], [""], ["a", 3], 3, None, ["a", "b"]]],
    *[(f"exists {value!r}", [((*C0, 5, "exists"), value)]) for value in ["", 3, None, "ok"]],
    ("exists with timeout", [((*C0, 5, "timeout"), "abc")]),
    ("exists with cwd", [((*C0, 5, "cwd"), 3)]),
    *[(f"contains {value!r}", [((*C0, 6, "contains"), value)])
      for value in ["", "(", "[a-", "ok", 3, None]],
    *[(f"sql {field} missing", [((*C0, 8, field), MISSING)]) for field in ("sql", "db", "expect")],
    ("sql expect null", [((*C0, 8, "expect"), None)]),
    ("sql expect inf", [((*C0, 8, "expect"), [float("-inf")])]),
    ("sql db empty", [((*C0, 8, "db"), "")]),
    ("schema instance missing", [((*C0, 9, "instance"), MISSING)]),
    *[(f"python {value!r}", [((*C0, 10, "python"), value)])
      for value in ["app", "app:", ":f", "1a:f", "a.b:c.d", "a:b\n", "a:b c", 3]],
    ("duplicate criterion id", [((*C0, 0), {"id": "cov", "exists": "x"})]),
    ("criterion id AC2 twice", [((*C0, 0), {"id": "AC2", "exists": "x"})]),
    ("criterion id invisible", [((*C0, 3, "id"), "c\u200bov")]),
    *[(f"timeout {value!r}", [((*C0, 1, "timeout"), value)])
      for value in [31536000, 31536001, 10**400, 1e308, 0.5]],
    *[(f"contains {value[:20]!r}", [((*C0, 6, "contains"), value)])
      for value in ["a{4294967296}", "(" * 2000 + ")" * 2000, "[[a]"]],
    # A NUL in text that reaches a command line or a path is refused; elsewhere it is text.
    *[(f"NUL in {parts[-1]} {value!r}", [((*C0, *parts), value)]) for parts, value in [
        ((1, "run"), "pytest -q\0 rm -rf /"), ((1, "cwd"), "app\0x"),
        ((2, "testCommand"), "make\0"), ((3, "pytest"), ["tests/test_a.py", "b\0.py"]),
        ((4, "pytest"), "tests/test_c\0.py"), ((5, "exists"), "src/\0"),
        ((6, "file"), "CHANGE\0LOG.md"), ((8, "db"), "app\0.db"),
        ((9, "schema"), "s\0.json"), ((9, "instance"), "\0"),
        ((10, "python"), "app\0.checks:login_works"),
        ((1, "text"), "tests\0 pass"), ((8, "sql"), "select\0 1"),
        ((6, "contains"), "a\0b")]],
]


def _write(folder: Path, data: Any, fmt: str) -> Path:
    path = folder / f"prd.{fmt}"
    if fmt == "json":
        text = json.dumps(data, indent=2, allow_nan=True)  # infinity as JSON can hold it:
        path.write_text(text.replace("Infinity", "1e999"), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True),
                        encoding="utf-8")
    return path


def _full(path: Path, monkeypatch: pytest.MonkeyPatch) -> PRD | str:
    with monkeypatch.context() as m:
        m.setattr(prd, "_fast_path_applies", lambda text, fmt: False)
        try:
            return load_prd(path)
        except PRDError as exc:
            return exc.describe()


def _fast(path: Path) -> bool:
    """Whether the fast path accepts the file."""
    text = path.read_text(encoding="utf-8")
    fmt = prd.PRD_FORMATS[path.suffix]
    try:
        data, duplicates = prd._parse(path, text, fmt)
    except PRDError:
        return False
    return (not duplicates and prd._fast_path_applies(text, fmt)
            and canonical.fast_normalize(data, prd._fast_rules()) is not None)


def _same(a: PRD, b: PRD) -> None:
    assert a == b
    for sa, sb in zip(a.stories, b.stories, strict=True):
        assert (sa.line, sa.json_path, sa.done_key) == (sb.line, sb.json_path, sb.done_key)
        for ca, cb in zip(sa.criteria, sb.criteria, strict=True):
            assert (ca.spec, ca.line, ca.json_path) == (cb.spec, cb.line, cb.json_path)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_fast_path_agrees_with_full_path(tmp_path: Path, fmt: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    accepted: list[str] = []
    refused_valid: list[str] = []
    for n, (name, changes) in enumerate(MUTATIONS):
        data = copy.deepcopy(BASE)
        try:
            for parts, value in changes:
                _set(data, parts, value)
        except (KeyError, IndexError, TypeError):
            continue
        if (fmt == "yaml" and "inf" in name) or "nan" in name:
            continue  # yaml.safe_dump writes .inf, which a PRD reads as text
        folder = tmp_path / f"{fmt}{n}"
        folder.mkdir()
        path = _write(folder, data, fmt)
        full = _full(path, monkeypatch)
        if _fast(path):
            assert isinstance(full, PRD), f"{name}: fast path accepted an invalid PRD:\n{full}"
            _same(load_prd(path), full)
            accepted.append(name)
        elif isinstance(full, PRD):
            refused_valid.append(name)
            _same(load_prd(path), full)
        else:  # invalid: load_prd reports exactly what the full path reports
            with pytest.raises(PRDError) as err:
                load_prd(path)
            assert err.value.describe() == full, name
    # not vacuous: the plain valid variants take the fast path
    for name in ["base", "description=<object", "notes=<object", "passes=<object",
                 "priority=<object", "story extra", "story extra nested",
                 "criterion 1 extra field", "top-level extra", "exists 'ok'",
                 "contains 'ok'", "python 'a.b:c.d'", "criterion 0 = 'été'"]:
        assert any(a.startswith(name) for a in accepted), (name, accepted)
    assert len(accepted) > 40, accepted
    assert refused_valid, "some valid files are dialects: the full path takes them"


def test_fast_path_keeps_the_story_claims_and_defaults(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    path = _write(tmp_path, data, "json")
    loaded = load_prd(path)
    first, second = loaded.stories
    assert (first.passes, first.done_key, first.priority) == (False, "passes", 1)
    # a story without passes, description, notes, priority: the defaults normalize gives
    assert (second.passes, second.done_key, second.description, second.notes,
            second.priority) == (False, "", "", "", None)
    assert loaded.dialect == "canonical" and loaded.dialect_notes == ()
    kinds = [c.kind for c in first.criteria]
    assert kinds == ["text", "run", "run", "pytest", "pytest", "exists", "file", "file", "sql",
                     "schema", "python"]
    run_c, alias_c, cov = first.criteria[1], first.criteria[2], first.criteria[3]
    assert (run_c.command, run_c.timeout, run_c.cwd) == ("pytest -q", 30.0, "app")
    assert (alias_c.command, alias_c.text) == ("make smoke", "make smoke")
    assert (cov.id, cov.timeout, cov.cwd) == ("cov", 2.5, None)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_timeout_or_cwd_on_a_kind_without_one_is_refused(tmp_path: Path, fmt: str) -> None:
    """Before: an exists criterion with "timeout": "abc" ended in a ValueError traceback;
    then the key was ignored. Now it is a problem of the file, placed, with a hint; both
    paths agree (the fast path takes such a criterion to the full one)."""
    data = copy.deepcopy(BASE)
    data["userStories"][0]["acceptanceCriteria"][5].update(timeout="abc", cwd=3)
    with pytest.raises(PRDError) as info:
        load_prd(_write(tmp_path, data, fmt))
    text = str(info.value)
    assert "$.userStories[0].acceptanceCriteria[5].timeout: 'timeout' does not apply to " \
           "'exists' criteria (only 'pytest', 'python' and 'run' criteria take it); expected " \
           "the keys 'id', 'text', 'exists'" in text
    assert "$.userStories[0].acceptanceCriteria[5].cwd: 'cwd' does not apply to 'exists' " \
           "criteria (only 'run' criteria take it)" in text
    assert text.count("hint: remove it") == 2


@pytest.mark.parametrize(("field", "near"), [("contians", "contains"), ("Timeout", "timeout"),
                                             ("expected", "expect"), ("instances", "instance")])
def test_a_misspelt_key_is_refused_and_a_key_of_ones_own_is_not(
        tmp_path: Path, field: str, near: str) -> None:
    """A near-miss of a check key would be ignored, and the check would pass without it
    (``{"file": "x", "contians": "re"}`` passed whenever x existed): refused, with the key
    it looks like. A key unlike any check key (``note``) is the writer's own and stays."""
    data = copy.deepcopy(BASE)
    data["userStories"][0]["acceptanceCriteria"][5][field] = 1
    with pytest.raises(PRDError) as info:
        load_prd(_write(tmp_path, data, "json"))
    assert f"acceptanceCriteria[5].{field}: unknown key {field!r} for 'exists' criteria" \
        in str(info.value)
    assert f"hint: did you mean {near!r}?" in str(info.value)
    data["userStories"][0]["acceptanceCriteria"][5] = {"exists": "src/login.py", "note": "x",
                                                        "owner": "ann"}
    crit = load_prd(_write(tmp_path, data, "json")).stories[0].criteria[5]
    assert crit.spec == {"exists": "src/login.py", "note": "x", "owner": "ann"}


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_lines_are_found_when_first_read(tmp_path: Path, fmt: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, BASE, fmt)
    composed: list[str] = []
    real = Positions._build

    def spy(self: Any) -> Any:
        if self._map is None:
            composed.append("compose")
        return real(self)

    monkeypatch.setattr(Positions, "_build", spy)
    loaded = load_prd(path)
    assert composed == []  # loading a valid file does not place anything
    story = loaded.stories[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert story.line is not None
    crit = story.criteria[5]
    assert crit.line is not None and "src/login.py" in lines[crit.line - 1 + (fmt == "json")]
    # JSON: the json module's scanner places stories and criteria; YAML: composed once
    assert composed == ([] if fmt == "json" else ["compose"])
    assert [c.line for c in story.criteria] == [
        Positions(path.read_text(encoding="utf-8"), fmt).at(c.json_path)[0]
        for c in story.criteria]
    # a pickled or copied criterion carries the line itself
    fresh = load_prd(path).stories[0].criteria[5]
    clone = pickle.loads(pickle.dumps(fresh))
    assert clone == crit and clone.line == crit.line
    assert copy.deepcopy(load_prd(path).stories[0]).line == story.line


TRICKY_JSON = (
    '// a JSONC comment with { "userStories": [ and ] \r\n'
    '{"project": "a]b}c\\\\", "x": [{"y": "}{]["}],\r\n'
    ' /* block\n comment */ "userStories" : [ {\n'
    '   "title": "t\\"[", "id": "A",\n'
    '   "acceptanceCriteria":\n\n [ "one\u2028two" , {"run": "echo \\"]\\""}\n,\n"x"],\n'
    '   "passes": false}, {"id": "B", "title": "u", "acceptanceCriteria": ["z",],\n'
    '   "passes": true},\n'
    ']}\n')


def test_json_lines_agree_with_the_general_locator(tmp_path: Path) -> None:
    for fmt, text in [("jsonc", TRICKY_JSON),
                      ("json", json.dumps(BASE, indent=1).replace("\n", "\r\n"))]:
        path = tmp_path / f"prd.{fmt}"
        path.write_text(text, encoding="utf-8", newline="")
        assert _fast(path), fmt
        loaded = load_prd(path)
        positions = Positions(path.read_text(encoding="utf-8"), fmt)
        found = [(s.json_path, s.line) for s in loaded.stories] + [
            (c.json_path, c.line) for c in loaded.criteria()]
        assert found == [(jp, positions.at(jp)[0]) for jp, _ in found], fmt
        assert all(line is not None for _, line in found)


def test_json_lines_fall_back_on_what_they_cannot_walk() -> None:
    from pytest_ralph.prd.lines import JSONLines

    asked: list[str] = []

    def fallback(jp: str) -> int:
        asked.append(jp)
        return 99

    lines = JSONLines('{"userStories": [{"acceptanceCriteria": ["a"]}]}', fallback)
    assert lines("$.userStories[0]") == 1 and lines("$.userStories[0].title") == 99
    broken = JSONLines('{"userStories": [{"acceptanceCriteria": ["a"', fallback)
    assert broken("$.userStories[0]") == 99
    assert asked == ["$.userStories[0].title", "$.userStories[0]"]


def test_deferred_line_is_a_field_like_any_other() -> None:
    found: list[str] = []

    def find(key: str) -> int:
        found.append(key)
        return 7

    crit = Criterion("US-1", 1, "AC1", "t", "text", line=DeferredLine(find, "$.x"))
    assert found == []
    assert crit == Criterion("US-1", 1, "AC1", "t", "text", line=7)
    assert crit.line == 7 and crit.line == 7 and found == ["$.x"]
    assert Criterion("US-1", 1, "AC1", "t", "text").line is None
    assert "line=7" in repr(crit)
    story = Story("US-1", "t", "", (crit,), None, False, "", 0)
    assert story.line is None and hash(story) == hash(Story("US-1", "t", "", (crit,), None,
                                                             False, "", 0))


def test_fast_rules_follow_the_schema() -> None:
    """The fast path's table of check kinds is the schema's: a schema edit that adds a
    field or a kind fails here until canonical.py follows it."""
    schema = validate.schema()
    defs = schema["$defs"]
    branches = {"run": "runCriterion", "testCommand": "runCriterion",
                "pytest": "pytestCriterion", "exists": "existsCriterion",
                "file": "fileCriterion", "sql": "sqlCriterion", "schema": "schemaCriterion",
                "python": "pythonCriterion"}
    assert set(canonical.CHECK_FIELDS) == set(validate.CHECK_KEYS) == set(branches)
    for key, branch in branches.items():
        fields = set(defs[branch]["properties"]) - {"id", "text"}
        assert canonical.CHECK_FIELDS[key] == fields, key
    refs = [b.get("$ref", "").rsplit("/", 1)[-1] for b in defs["criterion"]["anyOf"]]
    assert set(refs) - {""} == {*branches.values(), "customCriterion"}
    assert set(defs["story"]["properties"]) == canonical._STORY_KEYS
    assert set(schema["properties"]) == {"project", "branchName", "description",
                                         "userStories"}
    rules = canonical.FastRules.from_schema(schema)
    assert (rules.id_min, rules.id_max, rules.priority_min, rules.priority_max,
            rules.timeout_max) == (1, 200, 0, 1000000, 31536000)
    timeouts = {defs[b]["properties"]["timeout"]["maximum"] for b in
                ("runCriterion", "pytestCriterion", "pythonCriterion")}
    assert timeouts == {rules.timeout_max}
    assert rules.no_nul == {"run", "testCommand", "cwd", "pytest", "exists", "file", "db",
                            "schema", "instance"}


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_nul_that_would_reach_a_command_or_a_path_is_refused_on_both_paths(
        tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [(name, changes) for name, changes in MUTATIONS if name.startswith("NUL in ")]
    assert len(cases) == 14
    for n, (name, changes) in enumerate(cases):
        data = copy.deepcopy(BASE)
        for parts, value in changes:
            _set(data, parts, value)
        folder = tmp_path / str(n)
        folder.mkdir()
        path = _write(folder, data, fmt)
        field = changes[0][0][-1]
        if field in ("text", "sql", "contains"):  # not a command line or a path: text
            assert _fast(path), name
            assert isinstance(_full(path, monkeypatch), PRD), name
            continue
        assert not _fast(path), name
        with pytest.raises(PRDError) as err:
            load_prd(path)
        assert err.value.describe() == _full(path, monkeypatch)
        (problem,) = err.value.problems
        assert problem.json_path.endswith(f".{field}"), (name, problem)
        expected = ("expected 'module:function'" if field == "python"  # its own pattern
                    else "without a NUL character")
        assert expected in problem.message, (name, problem)


def test_yaml_aliases_and_repeated_keys_take_the_full_path(tmp_path: Path) -> None:
    shared = tmp_path / "prd.yaml"
    shared.write_text(
        "userStories:\n"
        "  - id: A\n    title: a\n    acceptanceCriteria: &c\n      - works\n"
        "  - id: B\n    title: b\n    acceptanceCriteria: *c\n", encoding="utf-8")
    assert not _fast(shared)
    assert [c.text for s in load_prd(shared).stories for c in s.criteria] == ["works", "works"]
    repeated = tmp_path / "dup.yaml"
    repeated.write_text("userStories:\n  - id: A\n    title: a\n    title: b\n"
                        "    acceptanceCriteria: [x]\n", encoding="utf-8")
    with pytest.raises(PRDError, match="duplicate key 'title'"):
        load_prd(repeated)
    merged = tmp_path / "merge.yaml"
    merged.write_text("base: &b {title: t, acceptanceCriteria: [x]}\n"
                      "userStories:\n  - <<: *b\n    id: A\n    title: own\n", encoding="utf-8")
    assert load_prd(merged).stories[0].title == "own"  # a merge key is not a repeated key


def test_surrogate_escapes_take_the_full_path(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text('{"userStories": [{"id": "A", "title": "t \\ud83d\\ude00", '
                    '"acceptanceCriteria": ["x"]}]}', encoding="utf-8")
    assert not _fast(path)
    assert load_prd(path).stories[0].title == "t \U0001f600"
    path.write_text('{"userStories": [{"id": "A", "title": "t \\ud83d", '
                    '"acceptanceCriteria": ["x"]}]}', encoding="utf-8")
    with pytest.raises(PRDError, match="unpaired surrogate"):
        load_prd(path)


@pytest.mark.filterwarnings("error")
def test_a_regex_that_python_cannot_compile_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    for pattern, why in [("a{4294967296}", "OverflowError"),
                         ("(" * 2000 + ")" * 2000, "nested too deeply"),
                         ("(", "missing ), unterminated subpattern")]:
        data = copy.deepcopy(BASE)
        data["userStories"][0]["acceptanceCriteria"][6]["contains"] = pattern
        with pytest.raises(PRDError) as err:
            load_prd(_write(tmp_path, data, "json"))
        (problem,) = err.value.problems
        assert problem.json_path == "$.userStories[0].acceptanceCriteria[6].contains"
        assert "which does not compile" in problem.message and why in problem.message
        assert len(problem.message) < 400
    data = copy.deepcopy(BASE)
    data["userStories"][0]["acceptanceCriteria"][6]["contains"] = "[[a]"  # a FutureWarning
    assert load_prd(_write(tmp_path, data, "json")).stories[0].criteria[6].spec["contains"]


def test_a_timeout_over_a_year_is_refused_by_the_schema(tmp_path: Path) -> None:
    for value in (31536001, 10**400):
        data = copy.deepcopy(BASE)
        data["userStories"][0]["acceptanceCriteria"][1]["timeout"] = value
        with pytest.raises(PRDError, match=r"timeout: expected a number <= 31536000"):
            load_prd(_write(tmp_path, data, "json"))


def test_yaml_aliases_shared_across_extras_or_pytest_lists_take_the_full_path(
        tmp_path: Path) -> None:
    targets = "[" + ", ".join(f"t{i}" for i in range(6000)) + "]"
    bombs = {
        "extras": "big: &b " + targets + "\n" + "".join(f"k{i}: *b\n" for i in range(20)),
        "pytest": "",
    }
    story_a = ("userStories:\n  - id: A\n    title: a\n    acceptanceCriteria:\n"
               f"      - pytest: &p {targets}\n" + "      - pytest: *p\n" * 19)
    for name, top in bombs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(top + (story_a if name == "pytest" else
                               "userStories:\n  - {id: A, title: a, acceptanceCriteria: [x]}\n"),
                        encoding="utf-8")
        assert not _fast(path), name
        with pytest.raises(PRDError, match="alias bomb"):
            load_prd(path)


@pytest.mark.parametrize(("where", "key", "near"), [
    ("story", "acceptanceCriterias", "acceptanceCriteria"), ("story", "prority", "priority"),
    ("story", "passed", "passes"), ("story", "Title", "title"),
    ("top", "branch_name", "branchName"), ("top", "user_stories", "userStories")])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_misspelt_story_or_top_level_key_is_refused(tmp_path: Path, fmt: str, where: str,
                                                      key: str, near: str) -> None:
    """A story's criteria under a misspelt key were dropped (the story's title stood in, a
    claimed text criterion); a misspelt ``passed`` was no claim at all: refused, with the
    key it looks like, on both paths. Keys of one's own (``owner``) and dialect keys stay."""
    data = copy.deepcopy(BASE)
    target = data["userStories"][0] if where == "story" else data
    if near in ("acceptanceCriteria", "userStories", "title"):
        target[key] = target.pop(near)
    else:
        target[key] = target.pop(near, "x")
    with pytest.raises(PRDError) as info:
        load_prd(_write(tmp_path, data, fmt))
    if near == "userStories":  # no stories then: the file's one problem says where they are
        assert f"hint: did you mean 'userStories' instead of {key!r}?" in str(info.value)
        return
    shown = "in a story" if where == "story" else "at the top level"
    assert f"unknown key {key!r} {shown}; expected the keys" in str(info.value)
    assert f"hint: did you mean {near!r}?" in str(info.value)


@pytest.mark.parametrize(("parts", "key", "near", "shown"), [
    (S0, "acceptanceCriterias", "acceptanceCriteria", "in a story"),
    (S0, "prority", "priority", "in a story"),
    (S0, "Title", "title", "in a story"),
    ((), "branch_name", "branchName", "at the top level"),
    ((), "projct", "project", "at the top level"),
    ((*C0, 6), "contians", "contains", "for 'file' criteria"),
    ((*C0, 1), "timout", "timeout", "for 'run' criteria")])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_misspelt_key_next_to_the_right_one_is_refused(
        tmp_path: Path, fmt: str, parts: tuple[Any, ...], key: str, near: str,
        shown: str) -> None:
    """``{"acceptanceCriterias": ["x"], "acceptanceCriteria": ["y"]}`` collected only ``y``:
    the misspelt key's value was dropped without a word because the right key was there
    too. Refused like a misspelt key alone, naming the key beside it, in JSON and YAML, on
    both paths (the fast path hands the file to the full one)."""
    data = copy.deepcopy(BASE)
    target: Any = data
    for part in parts:
        target = target[part]
    assert near in target
    target[key] = ["x"] if near == "acceptanceCriteria" else 2 if near == "priority" else "x"
    path = _write(tmp_path, data, fmt)
    assert not _fast(path)
    with pytest.raises(PRDError) as info:
        load_prd(path)
    (problem,) = info.value.problems
    assert problem.json_path == json_path((*parts, key))
    assert problem.message.startswith(f"unknown key {key!r} next to {near!r} {shown}; "
                                      "expected the keys ")
    assert problem.hint == (f"did you mean {near!r}? remove or rename it (only {near!r} is "
                            "read; this key's value is ignored)")
    assert problem.line is not None
    assert f"prd.{fmt}:{problem.line}:" in str(info.value)
    del target[key]  # without the misspelt key the same file loads
    load_prd(_write(tmp_path, data, fmt))


def test_dialect_keys_next_to_the_canonical_ones_are_not_misspellings(tmp_path: Path) -> None:
    """``depends_on`` beside ``dependsOn`` (both read by the dialect rules, which refuse
    them only when their lists differ) and a key of one's own beside a canonical one are
    no misspelling."""
    data = copy.deepcopy(BASE)
    data["userStories"][0].update(dependsOn=["US-002"], depends_on=["US-002"],
                                  priorityReason="first", notesForQA="x")
    story = load_prd(_write(tmp_path, data, "json")).stories[0]
    assert story.depends_on == ("US-002",)


def test_keys_of_ones_own_on_stories_are_kept(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["userStories"][0].update(owner="ann", dependsOn=["US-2"])
    data["sprint"] = 4
    assert load_prd(_write(tmp_path, data, "json")).stories[0].id == \
        data["userStories"][0]["id"]
