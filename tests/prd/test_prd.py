"""Unit tests of :func:`pytest_ralph.prd.load.load_prd` and its helpers.

Every fixture file is written by the test itself into ``tmp_path``. Expected positions are
computed from the fixture text with :func:`where`, so a line/column assertion always names
the exact place in the file the message must point at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_ralph.prd.errors import PRDError, Problem
from pytest_ralph.prd.load import MAX_PRD_BYTES, discover_prd, load_prd
from pytest_ralph.prd.model import PRD, Criterion
from pytest_ralph.prd.positions import strip_jsonc
from pytest_ralph.prd.validate import schema

CRITERION_EXPECTED = (
    "expected a criterion: a non-empty string, or an object with one check key "
    "('run', 'testCommand', 'pytest', 'exists', 'file', 'sql', 'schema', 'python'); found "
)
ID_RULE = "an id may not contain whitespace, control characters, '/', '[', ']' or '::'"
TOP = ("an object with stories under userStories | stories | tasks | items | features | "
       "phases[].stories, or an array of stories")


# ---------------------------------------------------------------------------------------------
# Helpers


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    """Write ``content`` byte for byte (no newline translation) and return the path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def where(text: str, needle: str, nth: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the ``nth`` occurrence of ``needle`` in ``text``."""
    pos = -1
    for _ in range(nth):
        pos = text.index(needle, pos + 1)
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def fail(path: Path, **kwargs: int) -> PRDError:
    """Load ``path`` expecting a :class:`PRDError`, and return it."""
    with pytest.raises(PRDError) as info:
        load_prd(path, **kwargs)
    return info.value


def one(err: PRDError) -> Problem:
    """The only problem of ``err``."""
    assert len(err.problems) == 1, err.describe()
    return err.problems[0]


def criteria_json(*criteria: object) -> str:
    """One story whose criterion ``i`` (0-based) is alone on line ``i + 2``, at column 3."""
    rows = ",\n".join("  " + json.dumps(c) for c in criteria)
    return (
        '{"userStories": [{"id": "US-1", "title": "t", "acceptanceCriteria": [\n'
        + rows
        + "\n]}]}\n"
    )


def story_json(*criteria: object, **extra: object) -> str:
    """A one-story JSON PRD (one key per line) with the given criteria."""
    story = {"id": "US-1", "title": "Story one", "acceptanceCriteria": list(criteria), **extra}
    return json.dumps({"userStories": [story]}, indent=2)


# ---------------------------------------------------------------------------------------------
# Valid files in every format

CANONICAL_JSON = """\
{
  "project": "Acme Login",
  "branchName": "ralph/login",
  "description": "Login feature",
  "userStories": [
    {
      "id": "US-001",
      "title": "Login form",
      "description": "As a user I log in",
      "acceptanceCriteria": [
        "Typecheck passes",
        {"text": "login works", "run": "pytest -q tests/test_login.py", "timeout": 30,
         "cwd": "app"},
        {"id": "smoke", "testCommand": "make smoke"}
      ],
      "priority": 2,
      "passes": false,
      "notes": "remember the CSRF token"
    },
    {"id": "US-002", "title": "Logout", "acceptanceCriteria": [], "priority": 1, "passes": true}
  ]
}
"""

CANONICAL_JSONC = """\
// The PRD of the login feature.
{
  "project": "Acme Login", // trailing comment
  "branchName": "ralph/login",
  /* a block comment
     over two lines, with "quotes" and a , comma */
  "description": "Login feature",
  "userStories": [
    {
      "id": "US-001",
      "title": "Login form",
      "description": "As a user I log in",
      "acceptanceCriteria": [
        "Typecheck passes",
        {"text": "login works", "run": "pytest -q tests/test_login.py", "timeout": 30,
         "cwd": "app"},
        {"id": "smoke", "testCommand": "make smoke",}, // trailing comma in an object
      ],
      "priority": 2,
      "passes": false,
      "notes": "remember the CSRF token",
    },
    {"id": "US-002", "title": "Logout", "acceptanceCriteria": [], "priority": 1, "passes": true},
  ],
}
"""

CANONICAL_YAML = """\
project: Acme Login
branchName: ralph/login
description: Login feature
userStories:
  - id: US-001
    title: Login form
    description: As a user I log in
    acceptanceCriteria:
      - Typecheck passes
      - {text: login works, run: pytest -q tests/test_login.py, timeout: 30, cwd: app}
      - id: smoke
        testCommand: make smoke
    priority: 2
    passes: false
    notes: remember the CSRF token
  - {id: US-002, title: Logout, acceptanceCriteria: [], priority: 1, passes: true}
"""


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [
        ("prd.json", CANONICAL_JSON, "json"),
        ("prd.jsonc", CANONICAL_JSONC, "jsonc"),
        ("prd.yaml", CANONICAL_YAML, "yaml"),
        ("prd.yml", CANONICAL_YAML, "yaml"),
    ],
)
def test_canonical_prd_loads_in_every_format(
    tmp_path: Path, name: str, text: str, fmt: str
) -> None:
    path = write(tmp_path, name, text)
    prd = load_prd(path)

    assert prd.path == path.absolute()
    assert prd.format == fmt
    assert (prd.project, prd.branch_name, prd.description) == (
        "Acme Login",
        "ralph/login",
        "Login feature",
    )
    assert [s.id for s in prd.stories] == ["US-001", "US-002"]
    assert len(prd.criteria()) == 4

    first, second = prd.stories
    assert (first.title, first.description, first.notes) == (
        "Login form",
        "As a user I log in",
        "remember the CSRF token",
    )
    assert (first.priority, first.passes, first.position) == (2, False, 0)
    assert (second.priority, second.passes, second.position) == (1, True, 1)
    assert first.json_path == "$.userStories[0]"
    assert first.line == where(text, "id: US-001" if fmt == "yaml" else '{\n      "id"')[0]

    text_c, run_c, alias_c = first.criteria
    assert [c.id for c in first.criteria] == ["AC1", "AC2", "smoke"]
    assert [c.index for c in first.criteria] == [1, 2, 3]
    assert [c.key for c in first.criteria] == ["US-001::AC1", "US-001::AC2", "US-001::smoke"]
    assert all(c.story_id == "US-001" for c in first.criteria)

    assert (text_c.kind, text_c.text, text_c.command) == ("text", "Typecheck passes", None)
    assert text_c.json_path == "$.userStories[0].acceptanceCriteria[0]"
    assert text_c.line == where(text, "Typecheck passes")[0]

    assert run_c.kind == "run"
    assert (run_c.text, run_c.command) == ("login works", "pytest -q tests/test_login.py")
    assert run_c.timeout == 30.0
    assert isinstance(run_c.timeout, float)
    assert run_c.cwd == "app"
    assert run_c.line == where(text, "login works")[0]

    # testCommand is an alias of run; without a text the command is the headline
    assert (alias_c.kind, alias_c.command, alias_c.text) == ("run", "make smoke", "make smoke")
    assert (alias_c.timeout, alias_c.cwd) == (None, None)
    assert not alias_c.synthesized

    # empty acceptanceCriteria: one synthesized text criterion, the title
    (synth,) = second.criteria
    assert synth == Criterion(
        "US-002",
        1,
        "AC1",
        "Logout",
        "text",
        json_path="$.userStories[1].title",
        line=where(text, "Logout")[0],
        synthesized=True,
    )
    assert synth.key == "US-002::AC1"

    assert [s.id for s in prd.ordered_stories()] == ["US-002", "US-001"]
    assert prd.story("US-002") is second
    assert prd.story("US-404") is None
    assert prd.topic == "acme-login"


def test_product_example_is_valid(tmp_path: Path) -> None:
    text = """{
  "project": "Acme", "branchName": "ralph/login", "description": "...",
  "userStories": [
    {"id": "US-001", "title": "...", "description": "...",
     "acceptanceCriteria": ["Typecheck passes",
                            {"text": "login works", "run": "pytest -q tests/test_login.py"}],
     "priority": 1, "passes": false, "notes": ""}
  ]
}"""
    prd = load_prd(write(tmp_path, "prd.json", text))
    assert [(c.key, c.kind) for c in prd.criteria()] == [
        ("US-001::AC1", "text"),
        ("US-001::AC2", "run"),
    ]


def test_criterion_ids_by_position_explicit_id_replaces_only_its_own(tmp_path: Path) -> None:
    text = story_json("a", {"id": "login", "run": "true"}, "c", {"run": "false"})
    prd = load_prd(write(tmp_path, "prd.json", text))
    (story,) = prd.stories
    assert [c.id for c in story.criteria] == ["AC1", "login", "AC3", "AC4"]
    assert [c.index for c in story.criteria] == [1, 2, 3, 4]
    assert [c.kind for c in story.criteria] == ["text", "run", "text", "run"]


def test_ordered_stories_priority_then_file_order_missing_last(tmp_path: Path) -> None:
    stories: list[dict[str, Any]] = [
        {"id": "none-a", "title": "t", "acceptanceCriteria": ["x"]},
        {"id": "p3", "title": "t", "acceptanceCriteria": ["x"], "priority": 3},
        {"id": "p1-a", "title": "t", "acceptanceCriteria": ["x"], "priority": 1},
        {"id": "none-b", "title": "t", "acceptanceCriteria": ["x"]},
        {"id": "p1-b", "title": "t", "acceptanceCriteria": ["x"], "priority": 1},
        {"id": "p0", "title": "t", "acceptanceCriteria": ["x"], "priority": 0},
    ]
    prd = load_prd(write(tmp_path, "prd.json", json.dumps({"userStories": stories})))
    assert [s.id for s in prd.stories] == [s["id"] for s in stories]  # file order kept
    assert [s.id for s in prd.ordered_stories()] == ["p0", "p1-a", "p1-b", "p3", "none-a", "none-b"]
    none_a = prd.story("none-a")
    assert none_a is not None
    assert none_a.priority is None


@pytest.mark.parametrize(
    ("top", "stem", "topic"),
    [
        ({"project": "Acme Login!", "branchName": "ralph/x"}, "prd", "acme-login"),
        ({"project": "", "branchName": "ralph/Login_V2"}, "prd", "ralph-login-v2"),
        ({}, "My PRD", "my-prd"),
        ({"project": "!!!"}, "prd", "prd"),
        ({"project": "x" * 100}, "prd", "x" * 60),
    ],
)
def test_topic_slug(tmp_path: Path, top: dict[str, str], stem: str, topic: str) -> None:
    path = write(tmp_path, f"{stem}.json", json.dumps({**top, "userStories": []}))
    assert load_prd(path).topic == topic


def test_empty_user_stories_loads_with_zero_stories(tmp_path: Path) -> None:
    prd = load_prd(write(tmp_path, "prd.yaml", "project: Empty\nuserStories: []\n"))
    assert isinstance(prd, PRD)
    assert prd.stories == ()
    assert prd.criteria() == []
    assert prd.ordered_stories() == []


def test_suffix_is_case_insensitive(tmp_path: Path) -> None:
    prd = load_prd(write(tmp_path, "PRD.YML", "userStories: []\n"))
    assert prd.format == "yaml"


def test_yaml_recursive_alias_is_refused_where_it_recurses(tmp_path: Path) -> None:
    text = "extra: &loop [*loop]\nuserStories:\n  - {id: US-1, title: t, acceptanceCriteria: [1]}\n"
    problem = one(fail(write(tmp_path, "prd.yaml", text)))
    assert problem.json_path == "$.extra[0]"
    assert problem.message == ("expected values that end; found a YAML alias inside the value "
                               "it refers to (it repeats forever)")
    assert (problem.line, problem.column) == where(text, "&loop")


# ---------------------------------------------------------------------------------------------
# Encodings and line endings


def test_utf8_bom_is_accepted_and_positions_ignore_it(tmp_path: Path) -> None:
    text = '{"userStories": [{"id": "US-1", "title": "Caf\u00e9", "acceptanceCriteria": [7]}]}'
    ok = write(tmp_path, "ok.json", b"\xef\xbb\xbf" + story_json("x").encode())
    assert [c.key for c in load_prd(ok).criteria()] == ["US-1::AC1"]

    bad = write(tmp_path, "bad.json", b"\xef\xbb\xbf" + text.encode())
    problem = one(fail(bad))
    assert (problem.line, problem.column) == where(text, "7]")

    yml = write(tmp_path, "prd.yaml", b"\xef\xbb\xbfuserStories: []\n")
    assert load_prd(yml).stories == ()


@pytest.mark.parametrize("name", ["prd.json", "prd.jsonc", "prd.yaml"])
def test_crlf_line_endings_keep_lines(tmp_path: Path, name: str) -> None:
    if name == "prd.yaml":
        text = (
            "userStories:\n  - id: US-1\n    title: t\n    acceptanceCriteria:\n"
            "      - first\n      - second\n      - 42\n"
        )
    else:
        text = story_json("first", "second", 42)
    crlf = text.replace("\n", "\r\n")
    problem = one(fail(write(tmp_path, name, crlf)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[2]"
    assert (problem.line, problem.column) == where(text, "42")

    good = crlf.replace("42", '"third"' if name != "prd.yaml" else "third")
    prd = load_prd(write(tmp_path, name, good))
    assert [c.line for c in prd.criteria()] == [
        where(text, "first")[0],
        where(text, "second")[0],
        where(text, "42")[0],
    ]
    assert prd.criteria()[0].text == "first"  # no stray \r in values


@pytest.mark.parametrize(
    "raw",
    [
        '{"userStories": []}'.encode("utf-16"),  # with BOM
        b"\xfe\xff" + '{"userStories": []}'.encode("utf-16-be"),
        '{"userStories": []}'.encode("utf-16-le"),  # no BOM
        "userStories: []\n".encode("utf-16-be"),  # no BOM
    ],
)
def test_utf16_file_is_a_clear_error(tmp_path: Path, raw: bytes) -> None:
    path = write(tmp_path, "prd.json", raw)
    problem = one(fail(path))
    assert problem == Problem("$", "file is UTF-16; expected UTF-8", hint="save the file as UTF-8")
    assert fail(path).describe() == (
        f"invalid PRD {path}: 1 problem\n"
        f"  {path}: $: file is UTF-16; expected UTF-8\n"
        "    hint: save the file as UTF-8"
    )


def test_invalid_utf8_reports_line_and_column(tmp_path: Path) -> None:
    raw = b'{\n  "project": "caf\xc3\xa9 \xff",\n  "userStories": []\n}\n'
    problem = one(fail(write(tmp_path, "prd.json", raw)))
    assert problem.json_path == "$"
    assert problem.message == "not valid UTF-8: byte 0xff at offset 22"
    assert (problem.line, problem.column) == (2, 20)  # column counts characters, not bytes
    assert problem.hint == "save the file as UTF-8"


def test_json_line_separator_in_string_does_not_shift_lines(tmp_path: Path) -> None:
    # YAML (used for positions) breaks lines at U+2028 / U+0085; JSON does not.
    text = story_json("a\u2028b\u0085c\x7f", 42)
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert (problem.line, problem.column) == where(text, "42")


# A template with the escapes {esc} on line 1 (description), before the first error on line 2
# (title), after it (notes), and before the second error on line 3 (priority).
SURROGATE_TEMPLATE = (
    '{"description": "{esc}", "userStories": [\n'
    '  {"id": "US-1", "title": "t {esc}", "acceptanceCriteria": ["x"], "passes": "yes", '
    '"notes": "{esc}",\n'
    '   "description": "{esc}", "priority": "p"}\n'
    "]}\n"
)


@pytest.mark.parametrize(("escapes", "value"), [
    # an escaped surrogate pair (one emoji), in lower and upper case
    (r"caf\ud83d\ude00", "caf\U0001f600"),
    (r"caf\uD83D\uDE00", "caf\U0001f600"),
    # two adjacent pairs
    (r"\ud83d\ude00\udbff\udfff", "\U0001f600\U0010ffff"),
    # an escaped backslash, then "ud83d...": text, not an escape
    (r"\\ud83d\\ude00", "\\ud83d\\ude00"),
    # an escaped backslash, then a pair; two escaped backslashes, then "u..." as text
    (r"\\\ud83d\ude00 \\\\ud83d", "\\\U0001f600 \\\\ud83d"),
])
@pytest.mark.parametrize("name", ["prd.json", "prd.jsonc"])
def test_escaped_surrogate_pairs_keep_positions(tmp_path: Path, name: str, escapes: str,
                                                value: str) -> None:
    """libyaml (which gives the positions) refuses "\\ud83d" escapes: positions survive them."""
    text = SURROGATE_TEMPLATE.replace("{esc}", escapes)
    assert json.loads(text)["description"] == value
    err = fail(write(tmp_path, name, text))
    assert [(p.json_path, p.line, p.column) for p in err.problems] == [
        ("$.userStories[0].passes", *where(text, '"yes"')),
        ("$.userStories[0].priority", *where(text, '"p"')),
    ]
    # the exact places, counted by hand for the first case (12-character pair before them)
    if escapes == r"caf\ud83d\ude00":
        assert [(p.line, p.column) for p in err.problems] == [(2, 87), (3, 50)]

    # and once valid, the model has the text and the lines
    good = write(tmp_path, "good" + name[3:], text.replace('"yes"', "true").replace('"p"', "1"))
    story = load_prd(good).stories[0]
    assert (story.title, story.description, story.notes) == (f"t {value}", value, value)
    assert (story.line, story.criteria[0].line) == (2, 2)


def test_keys_with_escaped_surrogate_pairs_keep_their_names(tmp_path: Path) -> None:
    # two different emoji keys (and an "XX" key) are not duplicates of each other; the real
    # duplicate after them is reported at its place
    text = ('{"x-\\ud83d\\ude00": 1, "x-\\ud83d\\ude01": 2, "x-XX": 3, "userStories": [],\n'
            ' "x-\\ud83d\\ude00": 4}\n')
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert (problem.json_path, problem.message) == (
        '$["x-\\ud83d\\ude00"]', "duplicate key 'x-\U0001f600'")
    assert (problem.line, problem.column) == (2, 2)


def test_unpaired_surrogate_escape_is_still_refused_with_its_position(tmp_path: Path) -> None:
    text = '{"userStories": [\n  {"id": "US-1", "title": "t\\ud83d", "acceptanceCriteria": []}]}'
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].title"
    assert problem.message.startswith("expected text; found a string with an unpaired surrogate")
    assert (problem.line, problem.column) == where(text, '"t\\ud83d"') == (2, 27)


@pytest.mark.parametrize(("name", "text"), [
    ("prd.json", '{"description": "caf\U0001f600",\n "userStories": [{"id": "A", "title": '
     '"t\U0001f600", "acceptanceCriteria": ["x"], "passes": "yes"}]}\n'),
    ("prd.yaml", 'description: "caf\\U0001F600"\nuserStories:\n- {id: A, title: "t\\U0001f600", '
     "acceptanceCriteria: [x], passes: \"yes\"}\n"),
    ("prd.yaml", "description: caf\U0001f600\nuserStories:\n- {id: A, title: t\U0001f600, "
     'acceptanceCriteria: [x], passes: "yes"}\n'),
])
def test_emoji_written_as_such_or_as_yaml_escapes_keep_positions(tmp_path: Path, name: str,
                                                                 text: str) -> None:
    problem = one(fail(write(tmp_path, name, text)))
    assert problem.json_path == "$.userStories[0].passes"
    assert (problem.line, problem.column) == where(text, '"yes"')
    good = write(tmp_path, "good" + name[3:], text.replace('"yes"', "true"))
    prd = load_prd(good)
    assert (prd.description, prd.stories[0].title) == ("caf\U0001f600", "t\U0001f600")


# ---------------------------------------------------------------------------------------------
# Invalid JSON / YAML syntax


def test_trailing_comma_in_json_gives_position_and_jsonc_hint(tmp_path: Path) -> None:
    text = '{\n  "userStories": [\n    "x",\n  ]\n}\n'
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$"
    assert problem.message == ("invalid JSON: a trailing comma before ']'; expected another "
                               "value after a comma")
    assert (problem.line, problem.column) == (3, 8)
    assert problem.hint == "remove the comma, or rename the file to .jsonc (which allows it)"


def test_trailing_comma_in_json_object(tmp_path: Path) -> None:
    text = '{\n  "userStories": [],\n}\n'
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.message == ("invalid JSON: a trailing comma before '}'; expected another "
                               "value after a comma")
    assert (problem.line, problem.column) == (2, 20)
    assert ".jsonc" in problem.hint


@pytest.mark.parametrize(
    "text",
    [
        '// header\n{"userStories": []}\n',
        '{\n  "userStories": [] // why\n}\n',
        '{\n  "userStories": [], /* block */\n  "project": "x"\n}\n',
        '{\n  "project": "x", // after a comma\n  "userStories": []\n}\n',
    ],
)
def test_comments_in_json_give_hint(tmp_path: Path, text: str) -> None:
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.message.startswith("invalid JSON: ")
    start = text.index("/")
    assert (problem.line, problem.column) == where(text, text[start : start + 2])
    assert problem.hint == (
        "comments are not allowed in .json: remove them, or rename the file to .jsonc"
    )
    # the same text is a valid .jsonc file
    assert load_prd(write(tmp_path, "prd.jsonc", text)).stories == ()


def test_truncated_json(tmp_path: Path) -> None:
    text = '{\n  "userStories": [\n    {"id": "US-1",'
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$"
    assert problem.message == "invalid JSON: Expecting property name enclosed in double quotes"
    assert (problem.line, problem.column) == (3, len('    {"id": "US-1",') + 1)
    assert problem.hint == "the file ends too early: is it truncated?"  # not "trailing comma"


def test_empty_json_file(tmp_path: Path) -> None:
    problem = one(fail(write(tmp_path, "prd.json", " \n")))
    assert problem.message == "invalid JSON: Expecting value"
    assert (problem.line, problem.column) == (2, 1)
    assert problem.hint == "the file is empty; expected an object with a 'userStories' array"


def test_double_comma_is_not_called_a_trailing_comma(tmp_path: Path) -> None:
    text = '{"userStories": [], "project": "x",, "branchName": "y"}'
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.message == "invalid JSON: Expecting property name enclosed in double quotes"
    line, column = where(text, ",,")
    assert (problem.line, problem.column) == (line, column + 1)
    assert problem.hint == ""


def test_truncated_jsonc_and_yaml(tmp_path: Path) -> None:
    problem = one(fail(write(tmp_path, "prd.jsonc", '{"userStories": [ // open\n')))
    assert problem.message == "invalid JSON: Expecting value"
    assert (problem.line, problem.column) == (2, 1)
    assert problem.hint == "the file ends too early: is it truncated?"

    text = "userStories:\n  - id: US-1\n    title: [unclosed\n"
    problem = one(fail(write(tmp_path, "prd.yaml", text)))
    assert problem.json_path == "$"
    assert problem.message.startswith("invalid YAML: ")
    assert problem.line == 4


def test_invalid_yaml_reports_line_and_column(tmp_path: Path) -> None:
    text = "userStories:\n  - id: US-1\n    title: a: b\n"
    problem = one(fail(write(tmp_path, "prd.yaml", text)))
    assert problem.json_path == "$"
    # the wording differs between libyaml and pure-Python PyYAML; the position does not
    assert problem.message.startswith("invalid YAML: mapping values are not allowed ")
    assert (problem.line, problem.column) == (3, 13)


# ---------------------------------------------------------------------------------------------
# Schema problems


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    text = """{
  "userStories": [
    {"id": "US 1", "title": "a", "acceptanceCriteria": ["x"]},
    {"id": "US-2", "acceptanceCriteria": ["x"]},
    {"id": "US-3", "title": "c", "acceptanceCriteria": ["x"], "priority": "urgent"}
  ]
}
"""
    path = write(tmp_path, "prd.json", text)
    err = fail(path)
    assert [(p.json_path, p.line, p.column) for p in err.problems] == [
        ("$.userStories[0].id", *where(text, '"US 1"')),
        ("$.userStories[1]", *where(text, '{"id": "US-2"')),
        ("$.userStories[2].priority", *where(text, '"urgent"')),
    ]
    assert [p.message for p in err.problems] == [
        f'invalid id "US 1": {ID_RULE} (it becomes part of a pytest node id)',
        "missing required key 'title'",
        "expected a priority: an integer 0..1000000, a number >= 0, high/medium/low or P0..P9; "
        'found string "urgent"',
    ]
    lines = err.describe().splitlines()
    assert lines == [
        f"invalid PRD {path}: 3 problems",
        f'  {path}:3:12: $.userStories[0].id: invalid id "US 1": {ID_RULE} '
        "(it becomes part of a pytest node id)",
        f"  {path}:4:5: $.userStories[1]: missing required key 'title'",
        f"  {path}:5:75: $.userStories[2].priority: expected a priority: an integer 0..1000000, "
        'a number >= 0, high/medium/low or P0..P9; found string "urgent"',
    ]
    assert str(err) == err.describe()


def test_all_problems_reported_at_once_yaml(tmp_path: Path) -> None:
    text = """userStories:
  - id: US-1
    title: a
    acceptanceCriteria: [x, null]
  - id: US-2
    title: ""
    acceptanceCriteria: [x]
    passes: "true"
"""
    err = fail(write(tmp_path, "prd.yaml", text))
    assert [(p.json_path, p.line, p.column) for p in err.problems] == [
        ("$.userStories[0].acceptanceCriteria[1]", *where(text, "null")),
        ("$.userStories[1].title", *where(text, '""')),
        ("$.userStories[1].passes", *where(text, '"true"')),
    ]


def test_two_bad_fields_of_a_run_criterion_are_both_reported(tmp_path: Path) -> None:
    text = story_json("ok", {"run": "x", "timeout": "5", "cwd": ""})
    err = fail(write(tmp_path, "prd.json", text))
    assert [p.json_path for p in err.problems] == [
        "$.userStories[0].acceptanceCriteria[1].timeout",
        "$.userStories[0].acceptanceCriteria[1].cwd",
    ]
    assert [p.message for p in err.problems] == [
        'expected a number; found string "5"',
        'expected a non-empty string; found string ""',
    ]
    assert [(p.line, p.column) for p in err.problems] == [where(text, '"5"'), where(text, '""')]


@pytest.mark.parametrize(
    ("criterion", "found", "hint"),
    [
        (42, "number 42", "quote it as text"),
        (1.5, "number 1.5", "quote it as text"),
        (None, "null", ""),
        (True, "boolean true", "quote it as text"),  # YAML `- yes`
        ("", 'string ""', ""),
        (["a"], "an array of 1 item", ""),
    ],
)
def test_criterion_not_a_string_nor_object(
    tmp_path: Path, criterion: object, found: str, hint: str
) -> None:
    text = criteria_json("fine", criterion)
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[1]"
    assert problem.message == CRITERION_EXPECTED + found
    assert problem.hint == hint
    assert (problem.line, problem.column) == (3, 3)


@pytest.mark.parametrize(
    ("criterion", "found"),
    [
        ({"cmd": "x"}, "an object with keys 'cmd'"),
        ({"text": "only text", "timeout": 3}, "an object with keys 'text', 'timeout'"),
        ({}, "an empty object"),
    ],
)
def test_criterion_object_without_check_key(
    tmp_path: Path, criterion: dict[str, object], found: str
) -> None:
    text = criteria_json("fine", criterion)
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[1]"
    assert problem.message == (
        "expected a criterion: a string, or an object with one check key "
        "('run', 'testCommand', 'pytest', 'exists', 'file', 'sql', 'schema', 'python') or "
        f"with the 'kind' of a plugin's check; found {found}"
    )
    assert problem.hint == "write the criterion as text, or add a check key such as 'run'"
    assert (problem.line, problem.column) == (3, 3)


def test_criterion_with_both_run_and_test_command(tmp_path: Path) -> None:
    text = criteria_json({"run": "a", "testCommand": "b"})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[0]"
    assert problem.message == (
        "a criterion has both 'run' and 'testCommand' (aliases); expected one of them"
    )
    assert problem.hint == "keep 'run'"
    assert (problem.line, problem.column) == (2, 3)


def test_every_problem_of_one_criterion_object(tmp_path: Path) -> None:
    text = criteria_json({"run": "a", "testCommand": "b", "timeout": "5", "id": "x y"})
    err = fail(write(tmp_path, "prd.json", text))
    assert sorted((p.json_path, p.message) for p in err.problems) == [
        (
            "$.userStories[0].acceptanceCriteria[0]",
            "a criterion has both 'run' and 'testCommand' (aliases); expected one of them",
        ),
        (
            "$.userStories[0].acceptanceCriteria[0].id",
            f'invalid id "x y": {ID_RULE} (it becomes part of a pytest node id)',
        ),
        ("$.userStories[0].acceptanceCriteria[0].timeout", 'expected a number; found string "5"'),
    ]
    assert [(p.line, p.column) for p in err.problems] == [
        (2, 3),
        where(text, '"5"'),
        where(text, '"x y"'),
    ]


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        ("5", 'expected a number; found string "5"'),
        (True, "expected a number; found boolean true"),
        (None, "expected a number; found null"),
        (0, "expected a number > 0; found 0"),
        (-1.5, "expected a number > 0; found -1.5"),
    ],
)
def test_run_criterion_bad_timeout_points_at_timeout(
    tmp_path: Path, timeout: object, message: str
) -> None:
    text = story_json({"text": "t", "run": "make test", "timeout": timeout})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[0].timeout"
    assert problem.message == message
    line, column = where(text, '"timeout": ')
    assert (problem.line, problem.column) == (line, column + len('"timeout": '))


def test_run_criterion_bad_timeout_yaml(tmp_path: Path) -> None:
    text = (
        "userStories:\n  - id: US-1\n    title: t\n    acceptanceCriteria:\n"
        "      - run: make test\n        timeout: soon\n"
    )
    problem = one(fail(write(tmp_path, "prd.yaml", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[0].timeout"
    assert problem.message == 'expected a number; found string "soon"'
    assert (problem.line, problem.column) == where(text, "soon")


@pytest.mark.parametrize("bad_id", ["US::1", "US/1", "US 1", "US\n1", "US-1\n", "US[1]"])
def test_story_id_must_fit_a_node_id(tmp_path: Path, bad_id: str) -> None:
    text = json.dumps(
        {
            "userStories": [
                {"id": "ok", "title": "t", "acceptanceCriteria": []},
                {"id": bad_id, "title": "t", "acceptanceCriteria": []},
            ]
        }
    )
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[1].id"
    if bad_id:
        assert problem.message == (
            f"invalid id {json.dumps(bad_id)}: {ID_RULE} (it becomes part of a pytest node id)"
        )
    else:
        assert problem.message == 'expected a non-empty string; found string ""'
    assert (problem.line, problem.column) == where(text, json.dumps(bad_id))


@pytest.mark.parametrize("bad_id", ["a::b", "a/b", "a b", "a\nb"])
def test_criterion_id_must_fit_a_node_id(tmp_path: Path, bad_id: str) -> None:
    text = story_json({"id": bad_id, "run": "true"})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[0].id"
    assert problem.message.startswith(f"invalid id {json.dumps(bad_id)}: {ID_RULE}")
    assert (problem.line, problem.column) == where(text, json.dumps(bad_id))


def test_ids_with_single_colon_dot_and_unicode_are_fine(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "userStories": [
                {
                    "id": "US:1.a\u00e9",
                    "title": "t",
                    "acceptanceCriteria": [{"id": "c-1_x", "run": "x"}],
                },
            ]
        }
    )
    assert [c.key for c in load_prd(write(tmp_path, "prd.json", text)).criteria()] == [
        "US:1.a\u00e9::c-1_x"
    ]


@pytest.mark.parametrize(
    ("value", "hint"),
    [("true", "write true without quotes"), ("False", "write false without quotes"), ("yes", "")],
)
def test_passes_as_string_is_an_error_with_hint(tmp_path: Path, value: str, hint: str) -> None:
    text = story_json("x", passes=value)
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].passes"
    assert problem.message == f"expected true or false; found string {json.dumps(value)}"
    assert problem.hint == hint
    assert (problem.line, problem.column) == where(text, json.dumps(value))


def test_missing_and_empty_title(tmp_path: Path) -> None:
    text = json.dumps({"userStories": [{"id": "A", "acceptanceCriteria": []}]}, indent=2)
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert (problem.json_path, problem.message) == (
        "$.userStories[0]",
        "missing required key 'title'",
    )
    assert (problem.line, problem.column) == where(text, "{", 2)

    text = json.dumps({"userStories": [{"id": "A", "title": "", "acceptanceCriteria": []}]})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert (problem.json_path, problem.message) == (
        "$.userStories[0].title",
        'expected a title with text; found string ""',
    )
    text = json.dumps({"userStories": [{"id": "A", "title": " \t", "acceptanceCriteria": []}]})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.message == 'expected a title with text; found string " \\t"'


def test_missing_user_stories_and_wrong_types(tmp_path: Path) -> None:
    problem = one(fail(write(tmp_path, "prd.json", '{"project": "x"}')))
    assert (problem.json_path, problem.message) == ("$", f"no stories found: expected {TOP}; "
                                                    "found keys: project")
    assert (problem.line, problem.column) == (1, 1)

    problem = one(fail(write(tmp_path, "prd.json", '{"userStories": {"id": "US-1"}}')))
    assert problem.json_path == "$.userStories"
    assert problem.message == "expected an array of stories; found an object with keys 'id'"
    assert (problem.line, problem.column) == (1, 17)

    text = '{"userStories": [{"id": 7.5, "title": "t", "acceptanceCriteria": {"run": "x"}}]}'
    err = fail(write(tmp_path, "prd.json", text))
    assert [(p.json_path, p.message) for p in err.problems] == [
        ("$.userStories[0].id", "expected a string; found number 7.5"),
        ("$.userStories[0].acceptanceCriteria", "expected an array; found an object with keys "
         "'run'"),
    ]


@pytest.mark.parametrize(
    ("name", "text", "found", "position"),
    [
        ("prd.json", '"userStories"', 'string "userStories"', (1, 1)),
        ("prd.json", "\n  42", "number 42", (2, 3)),
        ("prd.yaml", "just text\n", 'string "just text"', (1, 1)),
        ("prd.yaml", "", "null", (None, None)),
        ("prd.yaml", "# only a comment\n", "null", (None, None)),
    ],
)
def test_top_level_must_be_an_object(
    tmp_path: Path, name: str, text: str, found: str, position: tuple[int | None, int | None]
) -> None:
    problem = one(fail(write(tmp_path, name, text)))
    assert problem.json_path == "$"
    assert problem.message == f"expected {TOP}; found {found}"
    assert (problem.line, problem.column) == position


# ---------------------------------------------------------------------------------------------
# Duplicates


def test_duplicate_story_ids_name_both_places(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "userStories": [
                {"id": "US-1", "title": "a", "acceptanceCriteria": []},
                {"id": "US-2", "title": "b", "acceptanceCriteria": []},
                {"id": "US-1", "title": "c", "acceptanceCriteria": []},
            ]
        },
        indent=2,
    )
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[2].id"
    assert problem.message == "duplicate story id 'US-1' (first used at $.userStories[0])"
    assert (problem.line, problem.column) == where(text, '"US-1"', 2)
    assert problem.hint == "give every story its own id"


def test_duplicate_explicit_criterion_ids(tmp_path: Path) -> None:
    text = story_json({"id": "smoke", "run": "a"}, "b", {"id": "smoke", "run": "c"})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[2]"
    assert problem.message == (
        "duplicate criterion id 'smoke' in story 'US-1' "
        "(also $.userStories[0].acceptanceCriteria[0])"
    )
    assert problem.line == where(text, '"smoke"', 2)[0] - 1  # the criterion's opening brace
    assert problem.hint == "give the criterion its own 'id'"


def test_explicit_id_colliding_with_positional_id(tmp_path: Path) -> None:
    text = story_json("first", {"id": "AC1", "run": "x"})
    problem = one(fail(write(tmp_path, "prd.json", text)))
    assert problem.json_path == "$.userStories[0].acceptanceCriteria[1]"
    assert problem.message.startswith("duplicate criterion id 'AC1' in story 'US-1'")


def test_same_criterion_id_in_different_stories_is_fine(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "userStories": [
                {"id": "A", "title": "a", "acceptanceCriteria": [{"id": "smoke", "run": "x"}]},
                {"id": "B", "title": "b", "acceptanceCriteria": [{"id": "smoke", "run": "x"}]},
            ]
        }
    )
    assert [c.key for c in load_prd(write(tmp_path, "prd.json", text)).criteria()] == [
        "A::smoke",
        "B::smoke",
    ]


def test_duplicate_keys_json(tmp_path: Path) -> None:
    text = (
        '{\n  "project": "a",\n  "userStories": [\n'
        '    {"id": "US-1", "title": "t", "title": "u", "acceptanceCriteria": []}\n'
        '  ],\n  "project": "b"\n}\n'
    )
    err = fail(write(tmp_path, "prd.json", text))
    assert [(p.json_path, p.message, p.line, p.column) for p in err.problems] == [
        ("$.userStories[0].title", "duplicate key 'title'", *where(text, '"title"', 2)),
        ("$.project", "duplicate key 'project'", *where(text, '"project"', 2)),
    ]
    assert all(p.hint == "keep only one of them" for p in err.problems)


def test_duplicate_keys_jsonc(tmp_path: Path) -> None:
    text = '{\n  // c\n  "userStories": [],\n  "userStories": [],\n}\n'
    problem = one(fail(write(tmp_path, "prd.jsonc", text)))
    assert (problem.json_path, problem.message) == ("$.userStories", "duplicate key 'userStories'")
    assert (problem.line, problem.column) == where(text, '"userStories"', 2)


def test_duplicate_keys_yaml(tmp_path: Path) -> None:
    text = (
        "project: a\nuserStories:\n  - id: US-1\n    title: t\n    acceptanceCriteria: []\n"
        "    id: US-2\nproject: b\n"
    )
    err = fail(write(tmp_path, "prd.yaml", text))
    assert [(p.json_path, p.message, p.line, p.column) for p in err.problems] == [
        ("$.userStories[0].id", "duplicate key 'id'", *where(text, "id:", 2)),
        ("$.project", "duplicate key 'project'", *where(text, "project", 2)),
    ]


def test_duplicate_keys_reported_even_without_positions(tmp_path: Path) -> None:
    # a key longer than YAML's 1024-character simple-key limit: positions are unknown
    long_key = "k" * 1100
    text = json.dumps({"userStories": [], long_key: 1}).replace("}", f', "{long_key}": 2}}')
    err = fail(write(tmp_path, "prd.json", text))
    assert [p.message for p in err.problems] == [f"duplicate key {long_key!r} in an object"]


# ---------------------------------------------------------------------------------------------
# The file itself


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    err = fail(path)
    assert one(err) == Problem("$", "file not found")
    assert err.path == path
    assert err.describe() == f"invalid PRD {path}: 1 problem\n  {path}: $: file not found"


def test_relative_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "prd.yml", "userStories: []\n")
    monkeypatch.chdir(tmp_path)
    assert load_prd("prd.yml").path == tmp_path / "prd.yml"
    assert fail(Path("nope.json")).path == tmp_path / "nope.json"


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "prd.json").mkdir()
    assert one(fail(tmp_path / "prd.json")) == Problem("$", "expected a file, found a directory")


@pytest.mark.parametrize("name", ["prd.toml", "prd", "prd.json.bak"])
def test_unknown_suffix(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, '{"userStories": []}')
    suffix = Path(name).suffix
    assert one(fail(path)) == Problem(
        "$", f"unknown PRD file type {suffix!r}", hint="use one of .json, .jsonc, .yaml, .yml"
    )


def test_file_over_max_bytes(tmp_path: Path) -> None:
    text = '{"userStories": []}'
    path = write(tmp_path, "prd.json", text)
    size = len(text)
    assert load_prd(path, max_bytes=size).stories == ()  # exactly at the limit is fine
    problem = one(fail(path, max_bytes=size - 1))
    assert problem.json_path == "$"
    assert problem.message == f"file is {size} bytes, over the limit of {size - 1} bytes"
    assert "ralph_max_prd_bytes" in problem.hint
    assert MAX_PRD_BYTES == 20 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# PRDError and Problem formatting


def test_describe_header_and_entries(tmp_path: Path) -> None:
    text = story_json(1, None)
    path = write(tmp_path, "prd.json", text)
    err = fail(path)
    lines = err.describe().splitlines()
    assert lines[0] == f"invalid PRD {path}: 2 problems"
    line1, col1 = where(text, "1,")
    assert lines[1] == (
        f"  {path}:{line1}:{col1}: $.userStories[0].acceptanceCriteria[0]: "
        f"{CRITERION_EXPECTED}number 1"
    )
    assert lines[2] == "    hint: quote it as text"
    line2, col2 = where(text, "null")
    assert lines[3] == (
        f"  {path}:{line2}:{col2}: $.userStories[0].acceptanceCriteria[1]: {CRITERION_EXPECTED}null"
    )
    assert len(lines) == 4


def test_problem_format_leaves_out_unknown_parts() -> None:
    assert Problem("$.a", "bad", 3, 5, "fix it").format("f.json") == (
        "f.json:3:5: $.a: bad\n    hint: fix it"
    )
    assert Problem("$.a", "bad", 3).format("f.json") == "f.json:3: $.a: bad"
    assert Problem("$", "bad").format(Path("f.json")) == "f.json: $: bad"


def test_prd_error_is_an_exception_with_header() -> None:
    err = PRDError("x.json", [])
    assert isinstance(err, Exception)
    assert err.describe() == "invalid PRD x.json: 0 problems"
    err = PRDError("x.json", [Problem("$", "m")])
    assert str(err).splitlines()[0] == "invalid PRD x.json: 1 problem"


# ---------------------------------------------------------------------------------------------
# strip_jsonc


def test_strip_jsonc_keeps_positions() -> None:
    text = (
        "{ // line comment, with a comma,\n"
        '  "a": "http://x/*not*/", /* block\n'
        '  spanning */ "b": [1, 2,],\r\n'
        '  "c": "quote \\" // still a string",\n'
        "}"
    )
    out = strip_jsonc(text)
    assert len(out) == len(text)
    assert [i for i, ch in enumerate(out) if ch in "\r\n"] == [
        i for i, ch in enumerate(text) if ch in "\r\n"
    ]
    # every character is either kept or blanked to a space
    assert all(o == t or o == " " for o, t in zip(out, text, strict=True))
    assert json.loads(out) == {
        "a": "http://x/*not*/",
        "b": [1, 2],
        "c": 'quote " // still a string',
    }
    assert out.index('"b"') == text.index('"b"')
    assert '"http://x/*not*/"' in out
    assert "line comment" not in out
    assert "spanning" not in out


def test_strip_jsonc_trailing_commas() -> None:
    assert strip_jsonc("[1,2,]") == "[1,2 ]"
    assert strip_jsonc('{"a":1 , }') == '{"a":1   }'
    assert strip_jsonc("[1, // c\n]") == "[1      \n]"
    assert strip_jsonc("[1, /* c */ ]") == "[1          ]"
    assert strip_jsonc('[",]", 1]') == '[",]", 1]'
    assert strip_jsonc("[1, 2]") == "[1, 2]"


def test_strip_jsonc_leaves_an_unterminated_block_comment_for_the_parser(tmp_path: Path) -> None:
    assert strip_jsonc('{"a": 1,} /* open\nx') == '{"a": 1 } /* open\nx'
    problem = one(fail(write(tmp_path, "prd.jsonc", '{"userStories": []} /* cut')))
    assert problem.hint == "a /* comment that never ends (no */): is the file truncated?"


def test_strip_jsonc_keeps_commas_that_follow_no_value() -> None:
    assert strip_jsonc("[,]") == "[,]"
    assert strip_jsonc("[1,,]") == "[1,,]"
    assert strip_jsonc('{"a": [1, ], }') == '{"a": [1  ]  }'


def test_jsonc_positions_match_the_original(tmp_path: Path) -> None:
    text = (
        '{ /* a */ "userStories": [ // c\n'
        '  {"id": "US-1", /* x */ "title": "t" "acceptanceCriteria": []}\n]}\n'
    )
    problem = one(fail(write(tmp_path, "prd.jsonc", text)))
    assert problem.message == "invalid JSON: Expecting ',' delimiter"
    assert (problem.line, problem.column) == where(text, '"acceptanceCriteria"')

    text = (
        '{ /* a */ "userStories": [ // c\n'
        '  {"id": "US-1", /* x */ "title": 5, "acceptanceCriteria": [],\n}]}\n'
    )
    problem = one(fail(write(tmp_path, "prd.jsonc", text)))
    assert problem.json_path == "$.userStories[0].title"
    assert (problem.line, problem.column) == where(text, "5")


# ---------------------------------------------------------------------------------------------
# discover_prd


MINIMAL = '{"userStories": []}'


def test_discover_prd_order(tmp_path: Path) -> None:
    assert discover_prd(tmp_path) is None

    write(tmp_path, "scripts/ralph/prd.json", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / "scripts/ralph/prd.json"

    write(tmp_path, ".ralph/prd.yml", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / ".ralph/prd.yml"

    write(tmp_path, ".ralph/prd.jsonc", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / ".ralph/prd.jsonc"

    write(tmp_path, "prd.yaml", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / "prd.yaml"

    write(tmp_path, "prd.jsonc", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / "prd.jsonc"

    write(tmp_path, "prd.json", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / "prd.json"


def test_discover_prd_json_before_yaml_in_one_folder(tmp_path: Path) -> None:
    for name in ("prd.yml", "prd.yaml", "prd.jsonc", "prd.json"):
        write(tmp_path, f".ralph/{name}", MINIMAL)
    assert discover_prd(tmp_path) == tmp_path / ".ralph/prd.json"


def test_discover_prd_skips_directories_and_other_names(tmp_path: Path) -> None:
    (tmp_path / "prd.json").mkdir()
    write(tmp_path, "PRD.md", "# not a PRD")
    write(tmp_path, "ralph/prd.json", MINIMAL)  # not a searched folder
    assert discover_prd(tmp_path) is None
    write(tmp_path, "scripts/ralph/prd.yaml", MINIMAL)
    found = discover_prd(tmp_path)
    assert found == tmp_path / "scripts/ralph/prd.yaml"
    assert found is not None
    assert found.is_absolute()


# ---------------------------------------------------------------------------------------------
# The schema


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema()["required"] == ["userStories"]


def test_schema_agrees_with_the_loader() -> None:
    validator = jsonschema.Draft202012Validator(schema())
    good = {
        "userStories": [
            {
                "id": "US-1",
                "title": "t",
                "acceptanceCriteria": [
                    "text",
                    {"run": "x", "timeout": 1.5, "cwd": "d", "id": "c", "text": "h"},
                    {"testCommand": "y"},
                ],
            }
        ]
    }
    assert list(validator.iter_errors(good)) == []
    bad: dict[str, Any]
    for bad in (
        {"userStories": [{"id": "US-1\n", "title": "t", "acceptanceCriteria": []}]},
        {
            "userStories": [
                {
                    "id": "US-1",
                    "title": "t",
                    "acceptanceCriteria": [{"run": "x", "testCommand": "y"}],
                }
            ]
        },
        {"stories": []},
    ):
        assert not validator.is_valid(bad), bad


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ('{"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": ["x"], "priority": '
     + "9" * 5000 + "}]}", ".json",
     "$: invalid JSON: a number has thousands of digits; expected an ordinary number"),
    ("userStories:\n- id: A\n  title: t\n  acceptanceCriteria: [x]\n  priority: " + "9" * 5000,
     ".yaml", "$: invalid YAML: a number has thousands of digits; expected an ordinary number"),
    ('{"userStories": [{"id": "A\\ud800", "title": "t", "acceptanceCriteria": ["x"]}]}', ".json",
     "$.userStories[0].id: expected text; found a string with an unpaired surrogate escape"),
    ('{"userStories": [{"id": "A\\u0000B", "title": "t", "acceptanceCriteria": ["x"]}]}',
     ".json", '$.userStories[0].id: invalid id "A\\u0000B": an id may not contain whitespace, '
     "control characters"),
])
def test_input_that_python_cannot_handle_is_a_precise_error(tmp_path: Path, content: str,
                                                            suffix: str, message: str) -> None:
    path = tmp_path / f"prd{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PRDError) as info:
        load_prd(path)
    assert message in info.value.describe()


def test_topic_slug_drops_accents() -> None:
    from pytest_ralph.prd.model import slugify

    assert slugify("Café Déjà-vu 🚀") == "cafe-deja-vu"
    assert slugify("🚀🚀") == ""


def test_a_python_criterions_timeout_must_be_a_positive_number(tmp_path: Path) -> None:
    text = story_json("ok", {"python": "checks:ok", "timeout": "5"})
    err = fail(write(tmp_path, "prd.json", text))
    assert [(p.json_path, p.message) for p in err.problems] == [
        ("$.userStories[0].acceptanceCriteria[1].timeout", 'expected a number; found string "5"')]
    ok = write(tmp_path, "ok.json", story_json("ok", {"python": "checks:ok", "timeout": 2.5}))
    assert load_prd(ok).stories[0].criteria[1].timeout == 2.5
