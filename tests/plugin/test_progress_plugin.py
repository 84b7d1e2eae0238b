"""pytest_ralph.plugin.progress: a check phase child's progress lines, for the live view, and
run_check_phase handing their file to the loop."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.checks.phase import CheckPhaseConfig, run_check_phase
from pytest_ralph.loop.live import CheckProgress
from pytest_ralph.util.env import PROGRESS_ENV, PROGRESS_PLUGIN
from tests.support.prd import story


def test_the_child_writes_collected_then_one_line_per_criterion(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}, {"text": "no", "run": "false"},
                    {"text": "there", "exists": "missing.txt"}))
    path = pytester.path / "progress.jsonl"
    monkeypatch.setenv(PROGRESS_ENV, str(path))
    result = pytester.runpytest_subprocess("prd.json", "-p", PROGRESS_PLUGIN)
    assert result.ret == 1
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert records[0] == {"collected": 3}
    assert [(r["nodeid"].split("::", 1)[1], r["outcome"]) for r in records[1:]] == [
        ("US-1::AC1", "passed"), ("US-1::AC2", "failed"), ("US-1::AC3", "failed")]


def test_without_the_variable_or_with_an_unwritable_file_it_does_nothing(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}))
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert pytester.runpytest_subprocess("prd.json", "-p", PROGRESS_PLUGIN).ret == 0
    monkeypatch.setenv(PROGRESS_ENV, str(pytester.path / "no" / "such" / "folder" / "p.jsonl"))
    assert pytester.runpytest_subprocess("prd.json", "-p", PROGRESS_PLUGIN).ret == 0


def test_run_check_phase_hands_the_progress_file_over_before_the_child_starts(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    prd = write_prd(story("US-1", {"text": "ok", "run": "true"},
                          {"text": "no", "run": "false"}))
    seen: list[CheckProgress] = []
    results = run_check_phase(CheckPhaseConfig(prd=prd, rootdir=pytester.path, timeout=120),
                              pytester.path / "out", progress=lambda p: seen.append(
                                  CheckProgress(p)))
    assert [c.outcome for c in results.criteria] == ["passed", "failed"]  # verdicts as ever
    (progress,) = seen
    assert progress.path.name == "progress.jsonl"
    assert pytester.path not in progress.path.parents  # the phase's private folder


def test_a_phase_without_the_callback_loads_no_progress_plugin(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    prd = write_prd(story("US-1", {"text": "env", "run": f"test -z \"${PROGRESS_ENV}\""}))
    monkeypatch.setenv(PROGRESS_ENV, str(pytester.path / "outer.jsonl"))  # an outer loop's
    results = run_check_phase(CheckPhaseConfig(prd=prd, rootdir=pytester.path, timeout=120),
                              pytester.path / "out")
    assert [c.outcome for c in results.criteria] == ["passed"]
    assert not (pytester.path / "outer.jsonl").exists()
