"""Unit tests of pytest_ralph.prd.writeback: setting ``passes`` in the PRD after a check phase."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.checks.verdicts import NOTE_MAX_CHARS, story_notes, story_verdicts
from pytest_ralph.prd.dialects import Normalized, normalize
from pytest_ralph.prd.load import load_prd
from pytest_ralph.prd.positions import strip_jsonc
from pytest_ralph.prd.writeback import NOTE_PREFIX, write_back
from tests.support.env import PY
from tests.support.prd import story


def _prd(**extra: Any) -> dict[str, Any]:
    return {
        "project": "Acme",
        "branchName": "ralph/login",
        "description": "Login — ünïcode",
        "userStories": [
            {"id": "US-001", "title": "Login", "acceptanceCriteria": ["a"], "priority": 1,
             "passes": False, "notes": "", "x-owner": "ana"},
            {"id": "US-002", "title": "Logout", "acceptanceCriteria": ["b"], "priority": 2,
             "passes": True, "notes": "", "estimate": {"points": 3, "tags": ["x", 1.5, None]}},
            {"title": "No id here", "acceptanceCriteria": ["c"], "passes": False},
        ],
        **extra,
    }


def _write(path: Path, data: Any, indent: int | str | None = 2, newline: bool = True) -> str:
    text = json.dumps(data, indent=indent, ensure_ascii=False) + ("\n" if newline else "")
    path.write_text(text, encoding="utf-8")
    return text


# -- JSON in place ---------------------------------------------------------------------------


def test_sets_passes_and_returns_changed_ids(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    sidecar = tmp_path / "state" / "passes.json"
    changed = write_back(prd, {"US-001": True, "US-002": False}, sidecar)
    assert changed == ["US-001", "US-002"]
    data = json.loads(prd.read_text("utf-8"))
    assert [s.get("passes") for s in data["userStories"]] == [True, False, False]
    assert not sidecar.exists()


def test_only_changed_stories_are_returned(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    assert write_back(prd, {"US-001": True, "US-002": True}, tmp_path / "s.json") == ["US-001"]


def test_no_change_leaves_the_file_untouched(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    # Odd spacing that a rewrite would normalize: an untouched file keeps it byte for byte.
    text = '{"userStories": [ {"id": "US-001", "passes" : true} ]}'
    prd.write_text(text, encoding="utf-8")
    assert write_back(prd, {"US-001": True}, tmp_path / "s.json") == []
    assert prd.read_text("utf-8") == text


def test_unknown_ids_in_verdicts_are_ignored(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    original = _write(prd, _prd())
    assert write_back(prd, {"US-404": True}, tmp_path / "s.json") == []
    assert prd.read_text("utf-8") == original


def test_keeps_key_order_and_every_other_field(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    data = _prd(extraTop={"keep": [1, 2, {"deep": True}]}, version=3)
    _write(prd, data)
    write_back(prd, {"US-001": True}, tmp_path / "s.json")
    after = json.loads(prd.read_text("utf-8"))
    expected = json.loads(json.dumps(data))
    expected["userStories"][0]["passes"] = True
    assert after == expected
    assert list(after) == list(data)
    for before_story, after_story in zip(data["userStories"], after["userStories"], strict=True):
        assert list(after_story) == list(before_story)
    # Non-ASCII text is written as it is, not escaped.
    assert "Login — ünïcode" in prd.read_text("utf-8")


def test_missing_passes_key_is_added(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, {"userStories": [{"id": "US-001", "title": "t", "acceptanceCriteria": ["a"]}]})
    assert write_back(prd, {"US-001": False}, tmp_path / "s.json") == ["US-001"]
    assert json.loads(prd.read_text("utf-8"))["userStories"][0]["passes"] is False


def test_non_bool_passes_is_left_alone_and_the_verdict_goes_to_the_sidecar(
        tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, {"userStories": [{"id": "US-001", "passes": 1}]})
    before = prd.read_bytes()
    assert write_back(prd, {"US-001": True}, tmp_path / "s.json") == ["US-001"]
    assert prd.read_bytes() == before
    assert json.loads((tmp_path / "s.json").read_text("utf-8"))["passes"] == {"US-001": True}


@pytest.mark.parametrize("indent", [2, 4, "\t"])
@pytest.mark.parametrize("newline", [True, False])
def test_keeps_indentation_and_final_newline(tmp_path: Path, indent: int | str,
                                            newline: bool) -> None:
    prd = tmp_path / "prd.json"
    data = _prd()
    _write(prd, data, indent=indent, newline=newline)
    write_back(prd, {"US-001": True}, tmp_path / "s.json")
    data["userStories"][0]["passes"] = True
    # Byte-identical to what the same writer produces for the new data.
    assert prd.read_text("utf-8") == (json.dumps(data, indent=indent, ensure_ascii=False)
                                      + ("\n" if newline else ""))


def test_keeps_a_one_line_file_on_one_line(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd(), indent=None)
    write_back(prd, {"US-001": True}, tmp_path / "s.json")
    text = prd.read_text("utf-8")
    assert text.count("\n") == 1
    assert json.loads(text)["userStories"][0]["passes"] is True


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    prd.write_bytes(b"\xef\xbb\xbf" + json.dumps(_prd(), indent=2).encode())
    assert write_back(prd, {"US-001": True}, tmp_path / "s.json") == ["US-001"]
    assert json.loads(prd.read_text("utf-8-sig"))["userStories"][0]["passes"] is True


def test_upper_case_suffix_is_json(tmp_path: Path) -> None:
    prd = tmp_path / "PRD.JSON"
    _write(prd, _prd())
    sidecar = tmp_path / "s.json"
    assert write_back(prd, {"US-001": True}, sidecar) == ["US-001"]
    assert not sidecar.exists()


def test_no_temp_file_is_left_behind(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    write_back(prd, {"US-001": True}, tmp_path / "state" / "s.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prd.json"]


@pytest.mark.parametrize("content", [
    b"{ not json",
    b"",
    b"\xff\xfe\x00garbage",
    b'["a", "top-level array"]',
    b'{"userStories": {"US-001": {}}}',
    b"null",
])
def test_unreadable_or_shapeless_json_is_left_alone(tmp_path: Path, content: bytes) -> None:
    prd = tmp_path / "prd.json"
    prd.write_bytes(content)
    sidecar = tmp_path / "s.json"
    assert write_back(prd, {"US-001": True}, sidecar) == []
    assert prd.read_bytes() == content
    assert not sidecar.exists()


def test_missing_file_does_nothing(tmp_path: Path) -> None:
    sidecar = tmp_path / "s.json"
    assert write_back(tmp_path / "prd.json", {"US-001": True}, sidecar) == []
    assert not (tmp_path / "prd.json").exists()
    assert not sidecar.exists()


# -- sidecar formats -------------------------------------------------------------------------

JSONC = """// The PRD, with comments
{
  "project": "Acme", /* inline */
  "userStories": [
    {"id": "US-001", "acceptanceCriteria": ["a"], "passes": false}, // trailing
    {"id": "US-002", "acceptanceCriteria": ["b"], "passes": true}
  ]
}
"""

YAML = """# The PRD
project: Acme
userStories:
  - id: US-001   # first
    acceptanceCriteria: [a]
    passes: false
  - id: US-002
    acceptanceCriteria: [b]
    passes: true
"""


YAML_NO_PASSES = YAML.replace("    passes: false\n", "").replace("    passes: true\n", "")
JSONC_NO_PASSES = JSONC.replace(', "passes": false', "").replace(', "passes": true', "")


@pytest.mark.parametrize(("name", "content"), [
    ("prd.jsonc", JSONC), ("prd.yaml", YAML), ("prd.yml", YAML),
])
def test_other_formats_change_only_the_passes_word(tmp_path: Path, name: str,
                                                   content: str) -> None:
    """Comments, layout and everything else stay byte for byte; no sidecar is needed."""
    prd = tmp_path / name
    prd.write_text(content, encoding="utf-8")
    sidecar = tmp_path / "state" / "passes.json"
    assert write_back(prd, {"US-001": True, "US-002": True}, sidecar) == ["US-001"]
    assert prd.read_text("utf-8") == content.replace("passes: false", "passes: true").replace(
        '"passes": false', '"passes": true')
    assert not sidecar.exists()


@pytest.mark.parametrize(("name", "content"), [("prd.yaml", YAML_NO_PASSES)])
def test_yaml_without_passes_gets_a_sidecar_and_is_not_modified(
    tmp_path: Path, name: str, content: str
) -> None:
    prd = tmp_path / name
    prd.write_text(content, encoding="utf-8")
    before = prd.stat().st_mtime_ns
    sidecar = tmp_path / "state" / "passes.json"
    changed = write_back(prd, {"US-001": True, "US-002": True}, sidecar)
    assert sorted(changed) == ["US-001", "US-002"]
    assert prd.read_text("utf-8") == content
    assert prd.stat().st_mtime_ns == before
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"US-001": True, "US-002": True}}


def test_json_edit_keeps_escapes_numbers_and_bom(tmp_path: Path) -> None:
    content = ('\ufeff{"project": "Caf\\u00e9 \\/ 1e3",\n "userStories": [{"id": "US-001", '
               '"priority": 2.50, "acceptanceCriteria": ["a"], "passes": false}]}\n')
    prd = tmp_path / "prd.json"
    prd.write_bytes(content.encode("utf-8"))
    assert write_back(prd, {"US-001": True}, tmp_path / "s.json") == ["US-001"]
    assert prd.read_bytes() == content.replace('"passes": false', '"passes": true').encode()


def test_sidecar_reports_only_changes_and_merges(tmp_path: Path) -> None:
    prd = tmp_path / "prd.yaml"
    prd.write_text(YAML_NO_PASSES, encoding="utf-8")
    sidecar = tmp_path / "passes.json"
    assert write_back(prd, {"US-001": False}, sidecar) == ["US-001"]
    assert write_back(prd, {"US-001": False}, sidecar) == []
    assert write_back(prd, {"US-001": True, "US-002": False}, sidecar) == ["US-001", "US-002"]
    assert json.loads(sidecar.read_text("utf-8"))["passes"] == {"US-001": True, "US-002": False}
    assert write_back(prd, {"US-002": False}, sidecar) == []
    # Stories not in this verdict keep their sidecar entry.
    assert json.loads(sidecar.read_text("utf-8"))["passes"] == {"US-001": True, "US-002": False}


def test_sidecar_of_another_prd_is_replaced(tmp_path: Path) -> None:
    prd = tmp_path / "prd.yaml"
    prd.write_text(YAML_NO_PASSES, encoding="utf-8")
    sidecar = tmp_path / "passes.json"
    sidecar.write_text(json.dumps({"prd": "/elsewhere/prd.yaml",
                                   "passes": {"US-001": True, "US-009": True}}), "utf-8")
    assert write_back(prd, {"US-001": True}, sidecar) == ["US-001"]
    assert json.loads(sidecar.read_text("utf-8")) == {"prd": str(prd),
                                                      "passes": {"US-001": True}}


def test_garbage_sidecar_is_replaced(tmp_path: Path) -> None:
    prd = tmp_path / "prd.yaml"
    prd.write_text(YAML_NO_PASSES, encoding="utf-8")
    sidecar = tmp_path / "passes.json"
    sidecar.write_text("{{{ nope", "utf-8")
    assert write_back(prd, {"US-002": True}, sidecar) == ["US-002"]
    assert json.loads(sidecar.read_text("utf-8"))["passes"] == {"US-002": True}


# -- story_verdicts --------------------------------------------------------------------------


def _r(story: str, crit: str, outcome: str, claimed: bool = False) -> CriterionResult:
    return CriterionResult(nodeid=f"prd.json::{story}::{crit}", story=story, criterion=crit,
                           text=crit, kind="text" if claimed else "run", outcome=outcome,
                           claimed=claimed)


def test_story_verdicts() -> None:
    results = CheckResults((
        _r("US-001", "AC1", "passed"), _r("US-001", "AC2", "failed"),
        _r("US-002", "AC1", "passed"), _r("US-002", "AC2", "passed"),
        _r("US-003", "AC1", "passed", claimed=True),
        _r("US-004", "AC1", "failed", claimed=True),
    ))
    assert story_verdicts(results) == {"US-001": False, "US-002": True, "US-003": True,
                                       "US-004": False}


def test_strict_verdicts_leave_refused_claims_alone() -> None:
    """Under --ralph-strict every claimed criterion fails: a story that fails only on those
    gets no verdict (its ``passes`` stays as the user set it); one with a failing check is
    ``False``; one whose every criterion passed is ``True``. Without strict, as before."""
    results = CheckResults((
        _r("US-001", "AC1", "failed", claimed=True), _r("US-001", "AC2", "failed", claimed=True),
        _r("US-002", "AC1", "passed"), _r("US-002", "AC2", "failed", claimed=True),
        _r("US-003", "AC1", "failed"), _r("US-003", "AC2", "failed", claimed=True),
        _r("US-004", "AC1", "passed"),
    ))
    assert story_verdicts(results, strict=True) == {"US-003": False, "US-004": True}
    assert story_verdicts(results) == {"US-001": False, "US-002": False, "US-003": False,
                                       "US-004": True}
    assert story_notes(results, strict=True) == {
        "US-001": "pytest-ralph: 0/2 criteria pass (2 claims refused by --ralph-strict; passes "
                  "left as written); failing: AC1, AC2",
        "US-002": "pytest-ralph: 1/2 criteria pass (1 claim refused by --ralph-strict; passes "
                  "left as written); failing: AC2",
        "US-003": "pytest-ralph: 0/2 criteria pass (1 claim refused by --ralph-strict); "
                  "failing: AC1, AC2",
        "US-004": "pytest-ralph: the 1 criterion passes",
    }
    assert story_notes(results)["US-001"] == "pytest-ralph: 0/2 criteria pass; failing: AC1, AC2"


def test_story_verdicts_of_nothing() -> None:
    assert story_verdicts(CheckResults(())) == {}


def test_verdicts_round_trip_through_the_file(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    results = CheckResults((_r("US-001", "AC1", "passed"), _r("US-002", "AC1", "failed")))
    assert write_back(prd, story_verdicts(results), tmp_path / "s.json") == ["US-001", "US-002"]
    data = json.loads(prd.read_text("utf-8"))
    assert {s.get("id"): s["passes"] for s in data["userStories"]} == {
        "US-001": True, "US-002": False, None: False}


def test_json_with_a_missing_passes_is_rewritten_with_every_verdict(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    prd.write_text(json.dumps({"userStories": [
        {"id": "US-001", "acceptanceCriteria": ["a"], "passes": False},
        {"id": "US-002", "acceptanceCriteria": ["b"]}]}, indent=2) + "\n", encoding="utf-8")
    assert sorted(write_back(prd, {"US-001": True, "US-002": True}, tmp_path / "s.json")) == [
        "US-001", "US-002"]
    stories = json.loads(prd.read_text("utf-8"))["userStories"]
    assert [s.get("passes") for s in stories] == [True, True]


@pytest.mark.parametrize("name", ["prd.json", "prd.jsonc"])
def test_json_without_passes_gets_it_inserted_after_the_id(tmp_path: Path, name: str) -> None:
    content = ('{\r\n "description": "caf\\u00e9", // keep\r\n "userStories": [\r\n'
               '  {"id": "A", "n": 1e5, "acceptanceCriteria": ["x"]},\r\n'
               '  {"id": "B", "acceptanceCriteria": ["y"], "passes": false}]}\r\n')
    if name == "prd.json":
        content = content.replace(" // keep", "")
    prd = tmp_path / name
    prd.write_bytes(content.encode())
    assert sorted(write_back(prd, {"A": True, "B": True}, tmp_path / "s.json")) == ["A", "B"]
    assert prd.read_bytes().decode() == content.replace(
        '{"id": "A",', '{"id": "A", "passes": true,').replace('"passes": false', '"passes": true')
    assert not (tmp_path / "s.json").exists()


# -- notes -----------------------------------------------------------------------------------

NOTE = "pytest-ralph: 1/2 criteria pass; failing: AC2"


def _age(path: Path) -> int:
    """Set the file's mtime an hour back (so that a rewrite would show) and return it."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 3_600_000_000_000))
    return path.stat().st_mtime_ns


@pytest.mark.parametrize("indent", [2, "\t", None])
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("bom", [False, True])
def test_notes_round_trip_on_canonical_json(tmp_path: Path, indent: int | str | None,
                                            crlf: bool, bom: bool) -> None:
    """Key order, unknown fields, indentation, BOM and CRLF: byte for byte what the same
    writer produces for the new data."""
    data = _prd(extraTop={"keep": [1, {"deep": True}]})

    def dump(d: dict[str, Any]) -> bytes:
        text = json.dumps(d, indent=indent, ensure_ascii=False) + "\n"
        return (b"\xef\xbb\xbf" if bom else b"") + (
            text.replace("\n", "\r\n") if crlf else text).encode()

    prd = tmp_path / "prd.json"
    prd.write_bytes(dump(data))
    sidecar = tmp_path / "s.json"
    changed = write_back(prd, {"US-001": True, "US-002": False}, sidecar,
                         notes={"US-001": "pytest-ralph: all 1 pass", "US-002": NOTE})
    assert changed == ["US-001", "US-002"]
    data["userStories"][0].update(passes=True, notes="pytest-ralph: all 1 pass")
    data["userStories"][1].update(passes=False, notes=NOTE)
    assert prd.read_bytes() == dump(data)
    assert not sidecar.exists()


# The human and agent text around the loop's line, with escapes and non-ASCII as written.
HUMAN = r'Caf\u00e9 — naïve \"quoted\"\n\tindented \\ backslash \/ slash'


@pytest.mark.parametrize(("before", "after"), [
    # the loop's line is replaced where it is, human lines before and after stay
    (HUMAN + r"\npytest-ralph: 0/2 criteria pass; failing: AC1, AC2\nlater 😀",
     HUMAN + r"\n" + NOTE + r"\nlater 😀"),
    # a final \r of the loop's line (CRLF inside the value) is kept
    (r"pytest-ralph: old\r\nhuman", NOTE + r"\r\nhuman"),
    # no loop line yet: appended on a new line
    (HUMAN, HUMAN + r"\n" + NOTE),
    (r"one\r\ntwo", r"one\r\ntwo\r\n" + NOTE),
    (r"ends with a newline\n", r"ends with a newline\n" + NOTE),
    # empty: the note is the whole value
    ("", NOTE),
    # only the first loop line is the loop's
    (r"pytest-ralph: a\npytest-ralph: b", NOTE + r"\npytest-ralph: b"),
])
def test_note_replaces_only_its_own_line(tmp_path: Path, before: str, after: str) -> None:
    template = ('{\n  "userStories": [\n    {\n      "id": "US-001",\n      "passes": false,\n'
                '      "notes": "%s",\n      "x-extra": [1, 2]\n    }\n  ]\n}\n')
    prd = tmp_path / "prd.json"
    prd.write_text(template % before, encoding="utf-8")
    assert write_back(prd, {"US-001": False}, tmp_path / "s.json",
                      notes={"US-001": NOTE}) == ["US-001"]
    assert prd.read_text("utf-8") == template % after
    value = json.loads(prd.read_text("utf-8"))["userStories"][0]["notes"]
    assert next(line for line in value.splitlines() if line.startswith(NOTE_PREFIX)) == NOTE
    # A second write of the same note changes nothing.
    mtime = _age(prd)
    assert write_back(prd, {"US-001": False}, tmp_path / "s.json",
                      notes={"US-001": NOTE}) == []
    assert prd.stat().st_mtime_ns == mtime


def test_human_text_survives_many_notes(tmp_path: Path) -> None:
    human = 'Ana: check the "edge" case\nBob: ünïcode ✓\\path'
    prd = tmp_path / "prd.json"
    prd.write_text(json.dumps({"userStories": [{"id": "US-001", "passes": False,
                                                "notes": human}]}), encoding="utf-8")
    for note in ["pytest-ralph: a", "pytest-ralph: b", NOTE]:
        write_back(prd, {"US-001": False}, tmp_path / "s.json", notes={"US-001": note})
    assert json.loads(prd.read_text("utf-8"))["userStories"][0]["notes"] == human + "\n" + NOTE


def test_a_note_is_made_one_line_with_the_prefix(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    write_back(prd, {}, tmp_path / "s.json", notes={"US-001": "two\nlines"})
    assert json.loads(prd.read_text("utf-8"))["userStories"][0]["notes"] == (
        "pytest-ralph: two lines")


def test_a_note_only_change_counts_as_changed(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    assert write_back(prd, {"US-001": False}, tmp_path / "s.json",
                      notes={"US-001": NOTE}) == ["US-001"]
    assert write_back(prd, {"US-001": False}, tmp_path / "s.json",
                      notes={"US-001": NOTE}) == []


@pytest.mark.parametrize("name", ["prd.json", "prd.jsonc"])
def test_missing_notes_key_is_inserted_after_passes(tmp_path: Path, name: str) -> None:
    content = ('{\r\n "userStories": [\r\n'
               '  {"id": "A", "passes": false, "acceptanceCriteria": ["x"], "title": "t"},'
               ' // keep\r\n'
               '  {"id": "B", "acceptanceCriteria": ["y"], "title": "t"},\r\n'
               '  {"id": "C", "passes": true, "acceptanceCriteria": ["z"], "title": "t"}\r\n'
               ' ]\r\n}\r\n')
    if name == "prd.json":
        content = content.replace(" // keep", "")
    prd = tmp_path / name
    prd.write_bytes(content.encode())
    notes = {"A": "pytest-ralph: a \"q\" é", "B": "pytest-ralph: b", "C": "pytest-ralph: c"}
    assert write_back(prd, {"A": True, "B": True, "C": True}, tmp_path / "s.json",
                      notes=notes) == ["A", "B", "C"]
    assert prd.read_bytes().decode() == content.replace(
        '"passes": false,', '"passes": true, "notes": "pytest-ralph: a \\"q\\" é",').replace(
        '{"id": "B",', '{"id": "B", "passes": true, "notes": "pytest-ralph: b",').replace(
        '"passes": true, "acc', '"passes": true, "notes": "pytest-ralph: c", "acc')
    assert not (tmp_path / "s.json").exists()
    assert [s.notes for s in load_prd(prd).stories] == list(notes.values())


@pytest.mark.parametrize("value", ["null", "3", '["a"]', '{"k": "v"}', "true"])
def test_non_string_notes_go_to_the_sidecar(tmp_path: Path, value: str) -> None:
    content = '{"userStories": [{"id": "US-001", "passes": false, "notes": ' + value + "}]}\n"
    prd = tmp_path / "prd.json"
    prd.write_text(content, encoding="utf-8")
    sidecar = tmp_path / "state" / "passes.json"
    assert write_back(prd, {"US-001": True}, sidecar, notes={"US-001": NOTE}) == ["US-001"]
    # passes is still written into the file; notes is not touched
    assert prd.read_text("utf-8") == content.replace('"passes": false', '"passes": true')
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {}, "notes": {"US-001": NOTE}}
    assert write_back(prd, {"US-001": True}, sidecar, notes={"US-001": NOTE}) == []


@pytest.mark.parametrize("name", ["prd.json", "prd.jsonc"])
def test_escaped_surrogate_pairs_do_not_send_the_edit_to_the_sidecar(tmp_path: Path,
                                                                      name: str) -> None:
    """An emoji written as a JSON surrogate pair escape ("\\ud83d\\ude00"), before and
    after the edited literals: ``passes`` and the note are still edited in place."""
    content = ('{"project": "\\ud83d\\ude00",\n "userStories": [\n'
               '  {"id": "US-001", "title": "t", "description": "caf\\ud83d\\ude00 \\\\ud83d",\n'
               '   "acceptanceCriteria": ["\\uD83D\\uDE00\\ud83d\\ude01"], "passes": false,\n'
               '   "notes": "human \\ud83d\\ude00\\npytest-ralph: old", "x": "\\ud83d\\ude00"},\n'
               '  {"id": "US-002", "title": "\\ud83d\\ude00", "acceptanceCriteria": [],'
               ' "passes": true}\n'
               ']}\n')
    prd = tmp_path / name
    prd.write_bytes(content.encode("utf-8"))
    sidecar = tmp_path / ".pytest_ralph" / "passes.json"
    assert write_back(prd, {"US-001": True, "US-002": True}, sidecar,
                      notes={"US-001": NOTE, "US-002": NOTE}) == ["US-001", "US-002"]
    assert prd.read_bytes() == content.replace(
        '"passes": false', '"passes": true').replace(
        "pytest-ralph: old", NOTE).replace(
        '"passes": true}', f'"passes": true, "notes": "{NOTE}"}}').encode("utf-8")
    assert not sidecar.exists()
    story = load_prd(prd).stories[0]
    assert (story.description, story.passes) == ("caf\U0001f600 \\ud83d", True)
    assert story.notes == "human \U0001f600\n" + NOTE


def test_a_repeated_notes_key_goes_to_the_sidecar(tmp_path: Path) -> None:
    content = '{"userStories": [{"id": "US-001", "notes": "a", "passes": true, "notes": "b"}]}'
    prd = tmp_path / "prd.json"
    prd.write_text(content, encoding="utf-8")
    sidecar = tmp_path / "s.json"
    assert write_back(prd, {"US-001": True}, sidecar, notes={"US-001": NOTE}) == ["US-001"]
    assert prd.read_text("utf-8") == content
    assert json.loads(sidecar.read_text("utf-8"))["notes"] == {"US-001": NOTE}


JSONC_NOTES = """// The PRD, with comments
{
  "project": "Acme", /* inline */
  "userStories": [
    {
      "id": "US-001", // first
      "passes": false,
      /* the humans' notes */
      "notes": "keep this // not a comment",
    },
    {"id": "US-002", "passes": true}, // trailing
  ],
}
"""


def test_jsonc_notes_keep_comments(tmp_path: Path) -> None:
    prd = tmp_path / "prd.jsonc"
    prd.write_text(JSONC_NOTES, encoding="utf-8")
    notes = {"US-001": NOTE, "US-002": "pytest-ralph: all 2 criteria pass"}
    assert write_back(prd, {"US-001": False, "US-002": True}, tmp_path / "s.json",
                      notes=notes) == ["US-001", "US-002"]
    assert prd.read_text("utf-8") == JSONC_NOTES.replace(
        '"keep this // not a comment"', f'"keep this // not a comment\\n{NOTE}"').replace(
        '"passes": true}', '"passes": true, "notes": "pytest-ralph: all 2 criteria pass"}')
    assert not (tmp_path / "s.json").exists()


YAML_NOTES = """# The PRD
userStories:
  - id: US-001   # first
    acceptanceCriteria: [a]
    passes: false
    notes: |
      human text
      pytest-ralph: old
  - id: US-002
    acceptanceCriteria: [b]
"""


@pytest.mark.parametrize("name", ["prd.yaml", "prd.yml"])
def test_yaml_notes_go_to_the_sidecar_only(tmp_path: Path, name: str) -> None:
    prd = tmp_path / name
    prd.write_text(YAML_NOTES, encoding="utf-8")
    sidecar = tmp_path / "state" / "passes.json"
    notes = {"US-001": NOTE, "US-002": "pytest-ralph: the 1 criterion passes"}
    assert write_back(prd, {"US-001": True, "US-002": True}, sidecar,
                      notes=notes) == ["US-001", "US-002"]
    # Only the passes word changed; the notes block is as it was.
    assert prd.read_text("utf-8") == YAML_NOTES.replace("passes: false", "passes: true")
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"US-002": True}, "notes": notes}
    # Nothing new: neither file is written again.
    mtimes = _age(prd), _age(sidecar)
    assert write_back(prd, {"US-001": True, "US-002": True}, sidecar, notes=notes) == []
    assert (prd.stat().st_mtime_ns, sidecar.stat().st_mtime_ns) == mtimes


def test_old_sidecar_without_notes_is_read_and_kept(tmp_path: Path) -> None:
    prd = tmp_path / "prd.yaml"
    prd.write_text(YAML_NO_PASSES, encoding="utf-8")
    sidecar = tmp_path / "passes.json"
    sidecar.write_text(json.dumps({"prd": str(prd), "passes": {"US-001": True}}), "utf-8")
    assert write_back(prd, {"US-001": True}, sidecar, notes={"US-001": NOTE}) == ["US-001"]
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"US-001": True}, "notes": {"US-001": NOTE}}


def test_unchanged_results_write_nothing(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    results = CheckResults((_r("US-001", "AC1", "passed"), _r("US-002", "AC1", "failed")))
    sidecar = tmp_path / "s.json"
    assert write_back(prd, story_verdicts(results), sidecar,
                      notes=story_notes(results)) == ["US-001", "US-002"]
    before = prd.read_bytes()
    mtime = _age(prd)
    # The same results again (other durations): same notes, no write.
    again = CheckResults(tuple(
        CriterionResult(**{**c.__dict__, "duration": 9.5}) for c in results.criteria),
        duration=42.0)
    assert write_back(prd, story_verdicts(again), sidecar, notes=story_notes(again)) == []
    assert prd.read_bytes() == before
    assert prd.stat().st_mtime_ns == mtime
    assert not sidecar.exists()


@pytest.mark.parametrize("content", [b"{ not json", b"", b'{"userStories": {}}'])
def test_notes_are_not_written_into_an_unparsable_file(tmp_path: Path, content: bytes) -> None:
    prd = tmp_path / "prd.json"
    prd.write_bytes(content)
    sidecar = tmp_path / "s.json"
    assert write_back(prd, {"US-001": True}, sidecar, notes={"US-001": NOTE}) == []
    assert prd.read_bytes() == content
    assert not sidecar.exists()


# -- story_notes -----------------------------------------------------------------------------


def test_story_notes() -> None:
    results = CheckResults((
        _r("US-001", "AC1", "passed"), _r("US-001", "AC2", "failed"),
        _r("US-001", "AC3", "failed"),
        _r("US-002", "AC1", "passed"), _r("US-002", "AC2", "passed", claimed=True),
        _r("US-002", "login", "passed"),
        _r("US-003", "AC1", "passed"),
        _r("US-004", "AC1", "passed", claimed=True), _r("US-004", "AC2", "failed"),
    ))
    assert story_notes(results) == {
        "US-001": "pytest-ralph: 1/3 criteria pass; failing: AC2, AC3",
        "US-002": "pytest-ralph: all 3 criteria pass (1 claimed, not verified)",
        "US-003": "pytest-ralph: the 1 criterion passes",
        "US-004": "pytest-ralph: 1/2 criteria pass (1 claimed, not verified); failing: AC2",
    }
    assert story_notes(CheckResults(())) == {}


def test_story_notes_are_bounded() -> None:
    results = CheckResults(tuple(_r("US-001", f"check-{i:03}", "failed") for i in range(100)))
    note = story_notes(results)["US-001"]
    assert len(note) <= NOTE_MAX_CHARS
    assert note.startswith("pytest-ralph: 0/100 criteria pass; failing: check-000, check-001, ")
    shown = note.split("failing: ")[1].split(", ")
    assert shown[-1] == f"+{100 - (len(shown) - 1)} more"
    assert "\n" not in note
    # An id too long to show at all: the count instead.
    long = story_notes(CheckResults((_r("US-001", "x" * 300, "failed"),)))["US-001"]
    assert long == "pytest-ralph: 0/1 criteria pass; failing: 1 criterion"


def test_story_notes_skip_partly_checked_stories(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"userStories": [
        {"id": "US-001", "title": "t", "acceptanceCriteria": ["a", "b"]},
        {"id": "US-002", "title": "t", "acceptanceCriteria": ["c"]}]}), encoding="utf-8")
    results = CheckResults((_r("US-001", "AC1", "passed"), _r("US-002", "AC1", "failed")))
    prd = load_prd(path)
    assert story_notes(results, prd) == {"US-002": "pytest-ralph: 0/1 criteria pass; failing: AC1"}
    assert set(story_notes(results, prd)) == set(story_verdicts(results, prd))


# -- the loop --------------------------------------------------------------------------------


def test_the_loop_writes_notes_into_the_prd(pytester: pytest.Pytester,
                                            write_prd: Callable[..., Path]) -> None:
    (pytester.path / "a.txt").write_text("x")
    human = story("US-001", {"text": "a.txt exists", "run": "test -f a.txt"},
                  {"text": "never.txt exists", "run": "test -f never.txt"})
    human["notes"] = 'Ana: "never.txt" is hard\nsee ticket #12'
    claimed = story("US-002", "It feels fast", passes=True)
    path = write_prd(human, claimed)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    stories = json.loads(path.read_text())["userStories"]
    assert [s["notes"] for s in stories] == [
        'Ana: "never.txt" is hard\nsee ticket #12\n'
        "pytest-ralph: 1/2 criteria pass; failing: AC2",
        "pytest-ralph: the 1 criterion passes (1 claimed, not verified)"]
    assert [s["passes"] for s in stories] == [False, True]
    assert not (pytester.path / ".pytest_ralph" / "passes.json").exists()


STRICT_PRD = """{
  "project": "Claims",
  "userStories": [
    {"id": "US-001", "title": "Claimed and done", "acceptanceCriteria": ["Typecheck passes",
      "Verify in browser"], "priority": 1,
     "passes": true, "notes": "done by Ana"},
    {"id": "US-002", "title": "Claimed, not done", "acceptanceCriteria": ["It feels fast"],
     "priority": 2,
     "passes": false, "notes": ""},
    {"id": "US-003", "title": "Checked", "acceptanceCriteria": [
      {"text": "a.txt exists", "run": "test -f a.txt"}], "priority": 3,
     "passes": false, "notes": ""},
    {"id": "US-004", "title": "Checked and claimed", "acceptanceCriteria": [
      {"text": "never.txt exists", "run": "test -f never.txt"}, "Docs written"], "priority": 4,
     "passes": true, "notes": ""},
    {"id": "US-005", "title": "No claim at all", "acceptanceCriteria": ["Looks right"],
     "priority": 5}
  ]
}
"""


def test_strict_loop_leaves_the_users_claims_as_written(pytester: pytest.Pytester) -> None:
    """``pytest --ralph --ralph-strict`` used to write ``"passes": false`` into every story
    (each claimed criterion fails under strict mode), wiping the user's claims. Now a story
    no check found wrong keeps its claim byte for byte (US-001's ``true``, US-002's
    ``false``, US-005 gets no ``passes`` inserted); one that truly passed is written
    ``true`` (US-003, once the agent made ``a.txt``), one with a failing check ``false``
    (US-004); the loop's note and the report say why the claimed criteria failed."""
    path = pytester.path / "prd.json"
    path.write_text(STRICT_PRD, encoding="utf-8")
    agent = f"{PY} -c \"open('a.txt', 'w').write('x')\""
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent, "--ralph-strict",
                                           "--ralph-max-iterations", "2")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "limit (exit 1) after 2 iterations" in out
    after = path.read_text(encoding="utf-8")
    before_lines, after_lines = STRICT_PRD.splitlines(), after.splitlines()
    assert len(after_lines) == len(before_lines)
    changed = {i: (b, a) for i, (b, a) in enumerate(zip(before_lines, after_lines, strict=True))
               if b != a}
    # Every other line is byte for byte as written; in the changed ones, US-001's and US-002's
    # claims are as written and only the loop's note was added.
    assert sorted(changed) == [5, 8, 11, 14, 15]
    assert changed[5][1] == ('     "passes": true, "notes": "done by Ana\\npytest-ralph: 0/2 '
                             'criteria pass (2 claims refused by --ralph-strict; passes left as '
                             'written); failing: AC1, AC2"},')
    assert changed[8][1] == ('     "passes": false, "notes": "pytest-ralph: 0/1 criteria pass '
                             '(1 claim refused by --ralph-strict; passes left as written); '
                             'failing: AC1"},')
    assert changed[11][1] == ('     "passes": true, "notes": "pytest-ralph: the 1 criterion '
                              'passes"},')
    assert changed[14][1].startswith('     "passes": false, "notes": "pytest-ralph: 0/2 '
                                     'criteria pass (1 claim refused by --ralph-strict); ')
    # US-005 has no passes to keep and none is added: only the note, after its id literal.
    assert changed[15][1] == ('    {"id": "US-005", "notes": "pytest-ralph: 0/1 criteria pass '
                              '(1 claim refused by --ralph-strict; passes left as written); '
                              'failing: AC1", "title": "No claim at all", '
                              '"acceptanceCriteria": ["Looks right"],')
    stories = {s["id"]: s for s in json.loads(after)["userStories"]}
    assert {k: s.get("passes") for k, s in stories.items()} == {
        "US-001": True, "US-002": False, "US-003": True, "US-004": False, "US-005": None}
    (report,) = (pytester.path / ".pytest_ralph" / "reports").glob("ralph-*.md")
    text = report.read_text(encoding="utf-8")
    section = text[text.index("## Claims refused (--ralph-strict)"):]
    assert "write-back left each story's claim as it was written" in section
    assert "- US-001::AC1: Typecheck passes (the story's `passes` says done)" in section
    assert "- US-002::AC1: It feels fast (the story's `passes` does not say done)" in section
    assert "- US-004::AC2: Docs written" in section
    assert "US-003" not in section.split("\n## ")[0]


# -- dialects --------------------------------------------------------------------------------
# Each dialect is a small PRD written inline. A test writes verdicts and notes keyed by the
# normalized ids, then asserts the exact bytes of the file, the sidecar, and that the file
# still normalizes to the same dialect with every other field as it was.

NOTE_OK = "pytest-ralph: all 2 criteria pass"


def _parse(path: Path) -> Any:
    text = path.read_bytes().decode("utf-8-sig")
    if path.suffix in (".yaml", ".yml"):
        return yaml.safe_load(text)
    return json.loads(strip_jsonc(text) if path.suffix == ".jsonc" else text)


def _dialect_write(tmp_path: Path, name: str, content: str, verdicts: dict[str, bool],
                   notes: dict[str, str] | None = None,
                   ) -> tuple[Path, Path, list[str], Normalized]:
    """Write ``content`` to ``name``, write back; return (prd, sidecar, changed, the
    normalized data of the file before)."""
    prd = tmp_path / name
    prd.write_bytes(content.encode("utf-8"))
    before = normalize(_parse(prd))
    sidecar = tmp_path / "state" / "passes.json"
    changed = write_back(prd, verdicts, sidecar, notes=notes)
    return prd, sidecar, changed, before


def _assert_rules(normalized: Normalized, *rules: str) -> None:
    """The fixture is the dialect it is meant to be (the rules, in any order)."""
    assert sorted(normalized.dialect.split("+")) == sorted(rules)


def _assert_same_dialect(prd: Path, before: Normalized, passes: dict[str, bool],
                         notes: dict[str, str]) -> None:
    """The file normalizes to the dialect it had, with the same stories and origins, and
    only ``passes`` / ``notes`` changed as given (by normalized id)."""
    after = normalize(_parse(prd))
    assert after.dialect == before.dialect
    assert after.stories_path == before.stories_path
    assert [o.parts for o in after.origins] == [o.parts for o in before.origins]
    assert [(o.criteria_key, o.id_synthesized, o.title_key) for o in after.origins] == [
        (o.criteria_key, o.id_synthesized, o.title_key) for o in before.origins]
    expected = json.loads(json.dumps(before.data))
    for s in expected["userStories"]:
        s["passes"] = passes.get(s["id"], s["passes"])
        s["notes"] = notes.get(s["id"], s["notes"])
    assert after.data == expected


def _assert_second_write_is_a_no_op(prd: Path, sidecar: Path, verdicts: dict[str, bool],
                                    notes: dict[str, str] | None = None) -> None:
    mtimes = _age(prd), (_age(sidecar) if sidecar.exists() else None)
    before = prd.read_bytes(), (sidecar.read_bytes() if sidecar.exists() else None)
    assert write_back(prd, verdicts, sidecar, notes=notes) == []
    assert (prd.stat().st_mtime_ns, sidecar.stat().st_mtime_ns if sidecar.exists() else None
            ) == mtimes
    assert (prd.read_bytes(), sidecar.read_bytes() if sidecar.exists() else None) == before


TASKS_STATUS = """{
  "project": "Shop",
  "tasks": [
    {"id": "T-1", "title": "Cart", "steps": ["add an item", {"text": "cart", "run": "true"}],
     "status": "done", "estimate": 3},
    {"id": "T-2", "title": "Checkout", "steps": ["pay"], "status": "todo", "notes": ""}
  ]
}
"""


def test_tasks_with_status_keep_the_status_and_verdicts_go_to_the_sidecar(
        tmp_path: Path) -> None:
    verdicts = {"T-1": False, "T-2": True}
    notes = {"T-1": NOTE, "T-2": NOTE_OK}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.json", TASKS_STATUS,
                                                   verdicts, notes)
    _assert_rules(before, "tasks", "steps", "status")
    assert changed == ["T-1", "T-2"]
    assert prd.read_text("utf-8") == TASKS_STATUS.replace(
        '{"id": "T-1",', f'{{"id": "T-1", "notes": "{NOTE}",').replace(
        '"notes": ""', f'"notes": "{NOTE_OK}"')
    # status is what says done: no passes was added to shadow it
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"T-1": False, "T-2": True}}
    _assert_same_dialect(prd, before, {}, notes)
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


def test_a_status_story_without_notes_is_not_touched(tmp_path: Path) -> None:
    prd, sidecar, changed, _ = _dialect_write(tmp_path, "prd.json", TASKS_STATUS,
                                              {"T-1": True, "T-2": False})
    assert changed == ["T-1", "T-2"]
    assert prd.read_text("utf-8") == TASKS_STATUS
    assert json.loads(sidecar.read_text("utf-8"))["passes"] == {"T-1": True, "T-2": False}


FEATURES_JSONC = (
    "// 기능 목록: features, with comments\r\n"
    "{\r\n"
    '  "project": "앱", /* 이름 */\r\n'
    '  "features": [\r\n'
    "    // 첫 번째 기능\r\n"
    '    {"id": "F-1", "title": "로그인", "steps": ["로그인 화면이 보인다"],'
    ' "status": "in_progress"}, // trailing\r\n'
    '    {"id": "F-2", "title": "로그아웃", "steps": ["버튼 // not a comment"],'
    ' "status": "done", "notes": "사람의 메모",},\r\n'
    "  ],\r\n"
    "}")  # CRLF, trailing commas and no final newline


def test_features_jsonc_keep_comments_korean_text_and_status(tmp_path: Path) -> None:
    verdicts = {"F-1": True, "F-2": True}
    notes = {"F-1": "pytest-ralph: 로그인 ok", "F-2": NOTE_OK}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.jsonc", FEATURES_JSONC,
                                                   verdicts, notes)
    _assert_rules(before, "features", "steps", "status")
    assert changed == ["F-1", "F-2"]
    assert prd.read_bytes() == FEATURES_JSONC.replace(
        '{"id": "F-1",', '{"id": "F-1", "notes": "pytest-ralph: 로그인 ok",').replace(
        '"사람의 메모"', f'"사람의 메모\\n{NOTE_OK}"').encode("utf-8")
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"F-1": True, "F-2": True}}
    _assert_same_dialect(prd, before, {}, {"F-1": notes["F-1"], "F-2": "사람의 메모\n" + NOTE_OK})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


PHASES = """{
  "project": "Big",
  "phases": [
    {"name": "Phase 1", "stories": [
      {"id": "P1-1", "title": "Schema", "priority": "P0", "acceptanceCriteria": ["a"],
       "passes": false}
    ]},
    {"name": "Phase 2", "stories": [
      {"id": "P2-1", "title": "API", "priority": "P1-when-scaling",
       "acceptanceCriteria": ["b"], "passes": true, "notes": "keep me"},
      {"id": "P2-2", "title": "UI", "priority": "P2", "acceptanceCriteria": ["c"]}
    ]}
  ]
}"""


def test_phases_with_p_priorities_get_passes_in_place(tmp_path: Path) -> None:
    verdicts = {"P1-1": True, "P2-1": True, "P2-2": False}
    notes = {"P1-1": NOTE_OK, "P2-1": NOTE_OK, "P2-2": NOTE}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.json", PHASES,
                                                   verdicts, notes)
    _assert_rules(before, "phases", "P-priority")
    assert changed == ["P1-1", "P2-1", "P2-2"]
    assert prd.read_text("utf-8") == """{
  "project": "Big",
  "phases": [
    {"name": "Phase 1", "stories": [
      {"id": "P1-1", "title": "Schema", "priority": "P0", "acceptanceCriteria": ["a"],
       "passes": true, "notes": "pytest-ralph: all 2 criteria pass"}
    ]},
    {"name": "Phase 2", "stories": [
      {"id": "P2-1", "title": "API", "priority": "P1-when-scaling",
       "acceptanceCriteria": ["b"], "passes": true, "notes": "keep me\\npytest-ralph: all 2 \
criteria pass"},
      {"id": "P2-2", "passes": false, "notes": "pytest-ralph: 1/2 criteria pass; failing: AC2", \
"title": "UI", "priority": "P2", "acceptanceCriteria": ["c"]}
    ]}
  ]
}"""
    assert not sidecar.exists()
    _assert_same_dialect(prd, before, verdicts,
                         {**notes, "P2-1": "keep me\n" + NOTE_OK})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


TOP_LEVEL_ARRAY = """[
  {"title": "First", "acceptanceCriteria": ["a"], "passes": false},
  {"title": "Second", "acceptanceCriteria": ["b"]},
  {"title": "Third", "acceptanceCriteria": ["c"], "passes": true, "notes": "n"}
]"""


def test_top_level_array_without_ids_is_matched_by_synthesized_ids(tmp_path: Path) -> None:
    verdicts = {"S1": True, "S2": True, "S3": True}
    notes = {"S1": NOTE_OK, "S2": NOTE_OK, "S3": NOTE_OK}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.json", TOP_LEVEL_ARRAY,
                                                   verdicts, notes)
    _assert_rules(before, "top-level-array", "position-ids")
    assert changed == ["S1", "S2", "S3"]
    # S1: passes and a new note after it; S2 has no id to anchor at: sidecar; S3: in place
    assert prd.read_text("utf-8") == TOP_LEVEL_ARRAY.replace(
        '"passes": false}', f'"passes": true, "notes": "{NOTE_OK}"}}').replace(
        '"notes": "n"', f'"notes": "n\\n{NOTE_OK}"')
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"S2": True}, "notes": {"S2": NOTE_OK}}
    _assert_same_dialect(prd, before, {"S1": True},
                         {"S1": NOTE_OK, "S3": "n\n" + NOTE_OK})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


ITEMS = """{"items": [
  {"description": "Export CSV\\nwith headers", "steps_to_verify": ["csv exists"],
   "passes": false},
  {"description": "Import", "steps_to_verify": "one string step", "status": "pending"}
]}
"""


def test_items_without_ids_or_titles(tmp_path: Path) -> None:
    verdicts = {"S1": True, "S2": True}
    notes = {"S1": NOTE_OK, "S2": NOTE_OK}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.json", ITEMS, verdicts,
                                                   notes)
    _assert_rules(before, "items", "position-ids", "title-from-description", "steps_to_verify",
                  "string-criteria", "status")
    assert changed == ["S1", "S2"]
    assert prd.read_text("utf-8") == ITEMS.replace(
        '"passes": false}', f'"passes": true, "notes": "{NOTE_OK}"}}')
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"S2": True}, "notes": {"S2": NOTE_OK}}
    _assert_same_dialect(prd, before, {"S1": True}, {"S1": NOTE_OK})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


INT_IDS = """{
  "stories": [
    {"id": 1, "title": "A", "acceptance": ["x"]},
    {"id": 2, "title": "B", "acceptance": ["y"], "passes": true},
    {"id": -10, "title": "C", "acceptance": "z", "notes": ["line one", "line two"]}
  ]
}
"""


@pytest.mark.parametrize("name", ["prd.json", "prd.jsonc"])
def test_stories_with_int_ids_anchor_at_the_number(tmp_path: Path, name: str) -> None:
    verdicts = {"1": True, "2": False, "-10": True}
    notes = {"1": NOTE_OK, "2": NOTE, "-10": NOTE_OK}
    prd, sidecar, changed, before = _dialect_write(tmp_path, name, INT_IDS, verdicts, notes)
    _assert_rules(before, "stories", "int-ids", "acceptance", "string-criteria", "list-notes")
    assert changed == ["1", "2", "-10"]
    assert prd.read_text("utf-8") == INT_IDS.replace(
        '"id": 1,', f'"id": 1, "passes": true, "notes": "{NOTE_OK}",').replace(
        '"passes": true}', f'"passes": false, "notes": "{NOTE}"}}').replace(
        '"id": -10,', '"id": -10, "passes": true,')
    # a list of notes (a dialect) is never edited
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {}, "notes": {"-10": NOTE_OK}}
    _assert_same_dialect(prd, before, verdicts, {"1": NOTE_OK, "2": NOTE})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


YAML_TASKS = """# tasks, YAML
project: Tools
tasks:
  - id: T-1   # first
    title: Build
    steps:
      - it builds
    passes: false
  - title: No id
    steps: [it runs]
  - id: T-3
    title: Status
    steps: [x]
    status: done
    notes: human
"""


def test_yaml_tasks_with_passes(tmp_path: Path) -> None:
    verdicts = {"T-1": True, "S2": False, "T-3": False}
    notes = {"T-1": NOTE_OK, "T-3": NOTE}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.yaml", YAML_TASKS,
                                                   verdicts, notes)
    _assert_rules(before, "tasks", "position-ids", "steps", "status")
    assert changed == ["T-1", "S2", "T-3"]
    assert prd.read_text("utf-8") == YAML_TASKS.replace("passes: false", "passes: true")
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"S2": False, "T-3": False}, "notes": notes}
    _assert_same_dialect(prd, before, {"T-1": True}, {})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts, notes)


RULES = """{"tasks": [
  {"id": "A", "title": "bool passes", "steps": ["a"], "passes": false},
  {"id": "B", "title": "status", "steps": ["b"], "status": "open"},
  {"id": "C", "title": "neither, string id", "steps": ["c"]},
  {"id": 4, "title": "neither, int id", "steps": ["d"]},
  {"title": "neither, no id", "steps": ["e"]},
  {"id": "", "title": "empty id", "steps": ["f"]},
  {"id": "G", "title": "null passes", "steps": ["g"], "passes": null},
  {"id": "H", "title": "null status", "steps": ["h"], "status": null}
]}"""


def test_passes_is_written_where_possible_and_to_the_sidecar_otherwise(
        tmp_path: Path) -> None:
    verdicts = {"A": True, "B": True, "C": True, "4": True, "S5": True, "S6": True,
                "G": True, "H": True}
    prd, sidecar, changed, before = _dialect_write(tmp_path, "prd.json", RULES, verdicts)
    assert changed == list(verdicts)
    assert prd.read_text("utf-8") == RULES.replace('"passes": false', '"passes": true').replace(
        '"id": "C",', '"id": "C", "passes": true,').replace(
        '"id": 4,', '"id": 4, "passes": true,')
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"B": True, "S5": True, "S6": True, "G": True, "H": True}}
    _assert_same_dialect(prd, before, {"A": True, "C": True, "4": True}, {})
    _assert_second_write_is_a_no_op(prd, sidecar, verdicts)


def test_unknown_normalized_ids_and_raw_ids_of_synthesized_stories_are_ignored(
        tmp_path: Path) -> None:
    prd, sidecar, changed, _ = _dialect_write(tmp_path, "prd.json", TOP_LEVEL_ARRAY,
                                              {"S9": True, "0": True, "First": True})
    assert changed == []
    assert prd.read_text("utf-8") == TOP_LEVEL_ARRAY
    assert not sidecar.exists()


def test_a_repeated_id_key_is_no_anchor(tmp_path: Path) -> None:
    content = '{"tasks": [{"id": "A", "title": "t", "steps": ["a"], "id": "A"}]}'
    prd, sidecar, changed, _ = _dialect_write(tmp_path, "prd.json", content, {"A": True},
                                              {"A": NOTE})
    assert changed == ["A"]
    assert prd.read_text("utf-8") == content
    assert json.loads(sidecar.read_text("utf-8")) == {
        "prd": str(prd), "passes": {"A": True}, "notes": {"A": NOTE}}


@pytest.mark.parametrize("content", [
    '{"tasks": "not a list"}',
    '{"tasks": [1, 2]}',
    '{"phases": [{"stories": {"id": "A"}}]}',
    '{"tasks": [{"id": "A", "title": "t", "steps": ["a"], "status": 3}]}',
    '"just a string"',
])
def test_shapes_no_dialect_describes_are_left_alone(tmp_path: Path, content: str) -> None:
    prd = tmp_path / "prd.json"
    prd.write_text(content, encoding="utf-8")
    sidecar = tmp_path / "s.json"
    assert write_back(prd, {"A": True, "S1": True}, sidecar, notes={"A": NOTE}) == []
    assert prd.read_text("utf-8") == content
    assert not sidecar.exists()


def test_stories_with_ids_that_are_not_strings_or_integers_are_not_matched(
        tmp_path: Path) -> None:
    content = ('[{"id": {"no": "object ids"}, "title": "t", "passes": false},\n'
               ' {"id": 1.5, "title": "u", "passes": false},\n'
               ' {"id": true, "title": "v", "passes": false},\n'
               ' {"id": "ok", "title": "w", "passes": false}]')
    prd, sidecar, changed, _ = _dialect_write(tmp_path, "prd.json", content,
                                              {"1.5": True, "True": True, "ok": True})
    assert changed == ["ok"]
    assert prd.read_text("utf-8") == content.replace(
        '"w", "passes": false', '"w", "passes": true')
    assert not sidecar.exists()


@pytest.mark.parametrize("value", ['"no way"', '"true"', "1", "null"])
def test_a_passes_that_is_not_a_boolean_is_not_edited(tmp_path: Path, value: str) -> None:
    content = f'tasks:\n  - id: A\n    title: t\n    passes: {value.strip(chr(34))}\n'
    if value == '"true"':
        content = content.replace("passes: true", "passes: 'true'")
    prd, sidecar, changed, _ = _dialect_write(tmp_path, "prd.yaml", content, {"A": True})
    assert changed == ["A"]
    assert prd.read_text("utf-8") == content
    assert json.loads(sidecar.read_text("utf-8"))["passes"] == {"A": True}


LOOP_JSONC = """// a tasks dialect, with comments
{
  "tasks": [
    {"id": 7, "title": "a.txt", "steps": [{"text": "a.txt exists", "run": "test -f a.txt"}]},
    {"title": "b.txt", "steps": [{"text": "b.txt exists", "run": "test -f b.txt"}]},
    {"id": "T-3", "title": "c.txt", "steps": [{"text": "never", "run": "test -f c.txt"}],
     "status": "in progress"}, // keep
  ],
}
"""


def test_the_loop_writes_back_into_a_dialect_prd(pytester: pytest.Pytester) -> None:
    (pytester.path / "a.txt").write_text("x")
    (pytester.path / "b.txt").write_text("x")
    prd = pytester.path / "prd.jsonc"
    prd.write_text(LOOP_JSONC, encoding="utf-8")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    ok = "pytest-ralph: the 1 criterion passes"
    failing = "pytest-ralph: 0/1 criteria pass; failing: AC1"
    assert prd.read_text("utf-8") == LOOP_JSONC.replace(
        '"id": 7,', f'"id": 7, "passes": true, "notes": "{ok}",').replace(
        '"id": "T-3",', f'"id": "T-3", "notes": "{failing}",')
    sidecar = json.loads((pytester.path / ".pytest_ralph" / "passes.json").read_text("utf-8"))
    assert sidecar == {"prd": str(prd), "passes": {"S2": True, "T-3": False},
                       "notes": {"S2": ok}}


# ---------------------------------------------------------------------------------------------
# Characters that some parsers count as line breaks and others do not


@pytest.mark.parametrize(("name", "text"), [
    # a lone CR in JSON whitespace: json counts lines at \n only, YAML's composer also at \r
    ("prd.json", '{"userStories": [\n  {"id": "A", "title": "t",\r "acceptanceCriteria": '
                 '["x"],\n   "passes": false,\n   "urgent": false}\n]}\n'),
    ("prd.jsonc", '{"userStories": [ // plan\r  {"id": "A", "title": "t\\u2028",\r\r'
                  '"passes": false, "urgent": false,}]}'),
    # LS, PS and NEL in YAML text: line breaks for YAML 1.1, not for an editor
    ("prd.yaml", 'userStories:\n  - id: A\n    title: "Copy\u2028pasted\u2029and\x85more"\n'
                 "    passes: false\n    urgent: no\n"),
])
def test_odd_line_breaks_do_not_move_the_edit(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    sidecar = tmp_path / "passes.json"
    assert write_back(path, {"A": True}, sidecar) == ["A"]
    after = path.read_bytes().decode("utf-8")
    word = "false"
    assert after == text.replace(f"passes: {word}", "passes: true").replace(
        f'"passes": {word}', '"passes": true')
    assert load_prd(path).stories[0].passes is True


# -- the file itself: mode, owner, links, crashes --------------------------------------------


def _verdicts(prd: Path) -> list[Any]:
    return [s.get("passes") for s in json.loads(prd.read_text("utf-8"))["userStories"]]


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes and owners")
def test_write_back_keeps_the_mode_and_the_owner(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    prd.chmod(0o640)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(prd, *owner)
    assert write_back(prd, {"US-001": True}, tmp_path / "state" / "s.json") == ["US-001"]
    st = prd.stat()
    assert (oct(st.st_mode & 0o7777), (st.st_uid, st.st_gid)) == (oct(0o640), owner)
    assert _verdicts(prd) == [True, True, False]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prd.json"]  # no temporary file


@pytest.mark.skipif(os.name == "nt", reason="POSIX hard and symbolic links")
def test_write_back_keeps_hard_links_and_symbolic_links(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd())
    prd.chmod(0o640)
    other = tmp_path / "copy-of-prd.json"
    os.link(prd, other)
    inode = prd.stat().st_ino
    state = tmp_path / "state"
    assert write_back(prd, {"US-001": True}, state / "s.json") == ["US-001"]
    assert prd.stat().st_ino == inode and prd.stat().st_nlink == 2
    assert other.read_bytes() == prd.read_bytes() and _verdicts(other) == [True, True, False]
    assert oct(prd.stat().st_mode & 0o7777) == oct(0o640)
    assert not list(state.glob("*.before-write-back"))  # the copy is gone once written
    # Shorter than before: cut to its length, no padding left.
    before = prd.read_text("utf-8")
    assert write_back(prd, {"US-001": False}, state / "s.json") == ["US-001"]
    assert prd.read_text("utf-8") == before.replace('"passes": true', '"passes": false', 1)
    # A symbolic link stays a link; the file it names is written.
    link = tmp_path / "link.json"
    link.symlink_to(prd.name)
    assert write_back(link, {"US-001": True}, state / "s.json") == ["US-001"]
    assert link.is_symlink() and _verdicts(other) == [True, True, False]


@pytest.mark.skipif(os.name == "nt", reason="POSIX hard links")
def test_an_in_place_write_that_fails_keeps_the_old_content(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prd = tmp_path / "prd.json"
    old = _write(prd, _prd()).encode()
    os.link(prd, tmp_path / "other.json")
    real_pwrite = os.pwrite
    calls: list[int] = []

    def full_disk(fd: int, data: Any, offset: int) -> int:  # a disk that fills up halfway
        calls.append(len(data))
        if len(calls) == 1:
            real_pwrite(fd, bytes(data[:len(data) // 2]), offset)
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_back(prd, {"US-001": True}, tmp_path / "state" / "s.json")
    assert prd.read_bytes() == old and len(calls) == 2  # written back whole
    assert not list((tmp_path / "state").glob("*.before-write-back"))


@pytest.mark.skipif(os.name == "nt", reason="POSIX hard links")
def test_a_crash_between_writing_and_cutting_leaves_a_valid_prd_and_a_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prd = tmp_path / "prd.json"
    _write(prd, _prd(), indent=4)
    os.link(prd, tmp_path / "other.json")
    state = tmp_path / "state"
    write_back(prd, {"US-001": False}, state / "s.json",
               notes={"US-001": "pytest-ralph: 0/1 criteria pass; failing: AC1"})
    longer = prd.read_bytes()

    class Killed(BaseException):
        pass

    def killed(fd: int, length: int) -> None:  # the process dies right after the write
        raise Killed

    monkeypatch.setattr(os, "ftruncate", killed)
    with pytest.raises(Killed):
        write_back(prd, {"US-001": True}, state / "s.json",
                   notes={"US-001": "pytest-ralph: the 1 criterion passes"})
    text = prd.read_text("utf-8")
    assert len(text.encode()) == len(longer) and text.endswith("   ")  # padded, not cut
    assert _verdicts(prd) == [True, True, False]  # the new content, valid JSON
    assert "the 1 criterion passes" in text
    (copy,) = state.glob("*.before-write-back")
    assert copy.read_bytes() == longer  # and the old content, kept until the write is done
