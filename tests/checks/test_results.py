"""Unit tests of pytest_ralph.checks.results: the check-results file and CheckResults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ralph.checks.fingerprint import fingerprint
from pytest_ralph.checks.results import (
    RESULTS_VERSION,
    CheckResults,
    CriterionResult,
    atomic_write_text,
    read_results,
    write_results,
)


def _r(story: str, crit: str, outcome: str = "passed", message: str = "", **kw: object
       ) -> CriterionResult:
    return CriterionResult(nodeid=f"prd.json::{story}::{crit}", story=story, criterion=crit,
                           text=f"text of {crit}", kind="run", outcome=outcome, message=message,
                           **kw)  # type: ignore[arg-type]


CRITERIA = (
    _r("US-001", "AC1", duration=0.25),
    _r("US-001", "login-ok", "failed", "E   assert 401 == 200\nünïcode ✓", duration=1.5),
    _r("US-002", "AC1", "passed", "claimed, not verified", claimed=True),
)


# -- write_results / read_results ------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    write_results(path, CRITERIA, ["collection error: boom"], 1, extra={"prd": "/p/prd.json"})
    results = read_results(path)
    assert results.criteria == CRITERIA
    assert results.errors == ("collection error: boom",)
    assert results.exitstatus == 1
    assert results.fingerprint == CheckResults(CRITERIA, ("collection error: boom",)).fingerprint


def test_file_format(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    write_results(path, CRITERIA[:1], [], 0, extra={"prd": "/p/prd.json"})
    data = json.loads(path.read_text("utf-8"))
    assert data["version"] == RESULTS_VERSION == 1
    assert data["exitstatus"] == 0
    assert data["prd"] == "/p/prd.json"
    assert data["errors"] == []
    assert data["criteria"] == [{
        "nodeid": "prd.json::US-001::AC1", "story": "US-001", "criterion": "AC1",
        "text": "text of AC1", "kind": "run", "outcome": "passed", "message": "",
        "claimed": False, "duration": 0.25}]


def test_written_as_utf8_without_escapes(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    write_results(path, CRITERIA, [], 1)
    assert "ünïcode ✓" in path.read_text("utf-8")


def test_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    write_results(path, CRITERIA, [], 1)
    write_results(path, (), ["only an error"], 2)
    assert read_results(path).errors == ("only an error",)
    assert read_results(path).criteria == ()
    assert [p.name for p in tmp_path.iterdir()] == ["check.json"]


def test_unknown_fields_of_a_criterion_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    entry = {"nodeid": "n", "story": "S1", "criterion": "AC1", "text": "t", "kind": "run",
             "outcome": "failed", "message": "m", "future_field": [1, 2]}
    path.write_text(json.dumps({"version": 1, "criteria": [entry]}), "utf-8")
    results = read_results(path)
    assert results.criteria == (CriterionResult("n", "S1", "AC1", "t", "run", "failed", "m"),)
    assert results.errors == ()
    assert results.exitstatus == -1
    assert results.duration == 0.0


@pytest.mark.parametrize(("content", "expected"), [
    (None, "cannot read check results"),
    (b"", "cannot read check results"),
    (b"{ garbage", "cannot read check results"),
    (b"\xff\xfe not utf-8", "cannot read check results"),
    (b'{"version": 2, "criteria": []}', "unknown format"),
    (b'{"criteria": []}', "unknown format"),
    (b'[1, 2, 3]', "unknown format"),
    (b'"version 1"', "unknown format"),
    (b'{"version": 1}', "unknown format"),
    (b'{"version": 1, "criteria": [42]}', "unknown format"),
    (b'{"version": 1, "criteria": [{"nodeid": "n"}]}', "unknown format"),
    (b'{"version": 1, "criteria": [], "exitstatus": "x"}', "unknown format"),
])
def test_read_results_errors(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "check.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=expected) as info:
        read_results(path)
    assert str(path) in str(info.value)


# -- CheckResults ----------------------------------------------------------------------------


def test_passing_and_failing() -> None:
    results = CheckResults(CRITERIA)
    assert [c.criterion for c in results.passing] == ["AC1", "AC1"]
    assert [c.key for c in results.failing] == ["US-001::login-ok"]


def test_criterion_result_key_and_passed() -> None:
    assert CRITERIA[1].key == "US-001::login-ok"
    assert CRITERIA[0].passed is True
    assert CRITERIA[1].passed is False
    assert _r("S", "A", "skipped").passed is False  # anything but "passed" is not a pass


def test_complete() -> None:
    good = (_r("US-001", "AC1"), _r("US-002", "AC1"))
    assert CheckResults(good).complete is True
    assert CheckResults(good, ("child pytest crashed",)).complete is False
    assert CheckResults(()).complete is False
    assert CheckResults((), ("no results",)).complete is False
    assert CheckResults((*good, _r("US-003", "AC1", "failed"))).complete is False


def test_failures_include_errors() -> None:
    results = CheckResults(CRITERIA, ("child died",))
    assert results.failures() == [("US-001::login-ok", "E   assert 401 == 200\nünïcode ✓"),
                                  ("<check>", "child died")]
    assert results.fingerprint == fingerprint(results.failures())


def test_fingerprint_ignores_passing_criteria() -> None:
    failing = (_r("US-001", "AC2", "failed", "boom"),)
    assert (CheckResults(failing).fingerprint
            == CheckResults((_r("US-001", "AC1"), *failing)).fingerprint)
    assert CheckResults(failing).fingerprint != CheckResults(()).fingerprint


def test_by_story_keeps_collection_order() -> None:
    results = CheckResults((_r("B", "AC1"), _r("A", "AC1"), _r("B", "AC2")))
    grouped = results.by_story()
    assert list(grouped) == ["B", "A"]
    assert [c.criterion for c in grouped["B"]] == ["AC1", "AC2"]


def test_to_json_merges_extra() -> None:
    data = CheckResults(CRITERIA[:1], (), 0, 1.5, extra={"prd": "x"}).to_json()
    assert data["version"] == 1
    assert data["duration"] == 1.5
    assert data["prd"] == "x"
    assert len(data["criteria"]) == 1


def test_atomic_write_text(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    atomic_write_text(path, "first ✓")
    atomic_write_text(path, "second")
    assert path.read_text("utf-8") == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
