"""Unit tests of pytest_ralph.writeback: setting ``passes`` in the PRD after a check phase."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.prd import load_prd
from pytest_ralph.results import CheckResults, CriterionResult
from pytest_ralph.writeback import (
    NOTE_MAX_CHARS,
    NOTE_PREFIX,
    story_notes,
    story_verdicts,
    write_back,
)

from .conftest import PY, story


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
    b'{"stories": [{"id": "US-001", "passes": false}]}',
    b'{"userStories": {"US-001": {}}}',
    b"null",
])
def test_unreadable_or_non_canonical_json_is_left_alone(tmp_path: Path, content: bytes) -> None:
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
