"""The Stop hook's fast path, in process: where it looks for the arming file and what it
refuses before importing anything heavy (the subprocess behaviour is in test_hook.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from pytest_ralph.claude import hook


def _run(data: bytes, env: dict[str, str] | None = None) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.BytesIO()
    code = hook.main(io.BytesIO(data), out, err, env or {})
    return code, out.getvalue(), err.getvalue().decode()


def test_candidates_project_dir_first_then_cwd_and_its_parents(tmp_path: Path) -> None:
    sub = tmp_path / "a" / "b"
    found = hook.candidates(str(sub), str(tmp_path / "proj"))
    assert found[:4] == [str(tmp_path / "proj"), str(sub), str(tmp_path / "a"), str(tmp_path)]
    assert found[-1] == "/" and len(found) == len(set(found))


def test_candidates_skip_relative_and_empty_values() -> None:
    assert hook.candidates("relative/dir", "") == []
    assert hook.candidates("", "also/relative") == []


def test_find_marker_finds_the_nearest_arming_file(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    marker = tmp_path / ".claude" / "pytest-ralph.local.json"
    marker.write_text("{}", encoding="utf-8")
    deep = tmp_path / "x" / "y"
    deep.mkdir(parents=True)
    assert hook.find_marker(hook.candidates(str(deep), None)) == str(marker)
    assert hook.find_marker([str(tmp_path / "x" / "y")]) is None


def test_an_oversized_payload_is_refused_with_its_reason(tmp_path: Path) -> None:
    data = b'{"session_id": "S", "cwd": "' + str(tmp_path).encode() + b'", "x": "' + \
        b"a" * hook.MAX_STDIN_BYTES + b'"}'
    code, out, err = _run(data)
    assert (code, out) == (0, b"")
    assert f"over {hook.MAX_STDIN_BYTES} bytes" in err and "the stop is allowed" in err


def test_no_arming_file_means_no_output_at_all(tmp_path: Path) -> None:
    payload = json.dumps({"session_id": "S", "cwd": str(tmp_path), "hook_event_name": "Stop"})
    assert _run(payload.encode(), {"CLAUDE_PROJECT_DIR": str(tmp_path)}) == (0, b"", "")


def test_the_controller_variable_silences_even_bad_input() -> None:
    assert _run(b"\xff\xfe garbage", {"PYTEST_RALPH_CONTROLLER": "1"}) == (0, b"", "")


def test_json_nested_too_deeply_is_refused_in_one_line(tmp_path: Path) -> None:
    for data in (b"[" * 1000 + b"]" * 1000, b'{"a":' * 1000 + b"1" + b"}" * 1000):
        code, out, err = _run(data, {"CLAUDE_PROJECT_DIR": str(tmp_path)})
        assert (code, out) == (0, b"")
        assert err == ("pytest-ralph hook: stdin holds JSON nested too deeply to read, not the "
                       "Stop payload object; the stop is allowed\n")


def test_closed_process_streams_are_not_used(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    # Python sets sys.stdin/stdout/stderr to None when the file descriptor was closed.
    monkeypatch.chdir(tmp_path)
    err = io.BytesIO()
    monkeypatch.setattr(sys, "stdin", None)
    assert hook.main(None, io.BytesIO(), err, {}) == 0
    assert err.getvalue() == b"pytest-ralph hook: stdin is closed (no Stop payload); the stop is " \
                             b"allowed\n"
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", None)
    assert hook.main(io.BytesIO(b"[" * 5000), None, None, {}) == 0


def test_a_path_longer_than_any_folder_is_not_walked() -> None:
    assert hook.candidates("/a" * (hook.MAX_PATH_CHARS // 2 + 1), "/b" * 5000) == []
    assert hook.candidates("/a" * 10, None)[0] == "/a" * 10
