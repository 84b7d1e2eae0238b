"""Unit tests of pytest_ralph.writeback: setting ``passes`` in the PRD after a check phase."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.results import CheckResults, CriterionResult
from pytest_ralph.writeback import story_verdicts, write_back


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
