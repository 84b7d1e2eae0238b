"""Unit tests of pytest_ralph.claude.payload: Stop hook stdin parsing, the final reply read from
the payload or the end of the transcript, completion-promise matching and the hook's stdout.

Every fixture is written here, small, and reproduces one quirk seen in real Stop hook payloads
and transcripts (modern/minimal/camelCase payloads, merge-conflict markers, mojibake, Windows
paths with spaces, BOM, lagging transcripts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.claude import payload as sp
from pytest_ralph.claude.payload import (
    MAX_REASON_CHARS,
    TRUNCATION_MARKER,
    StopPayload,
    allow,
    block,
    bound_text,
    find_promise,
    last_message,
    last_transcript_message,
    parse_payload,
)

SID = "0b5e7c1a-1111-4222-8333-944445555666"


def _payload(obj: object) -> bytes:
    return json.dumps(obj).encode("utf-8")


# --- parse_payload: one test per payload shape -------------------------------------------


def test_full_modern_payload() -> None:
    p = parse_payload(_payload({
        "session_id": SID, "transcript_path": "/home/u/.claude/projects/p/t.jsonl",
        "cwd": "/home/u/p", "prompt_id": "pid-1", "permission_mode": "bypassPermissions",
        "effort": {"level": "medium"}, "hook_event_name": "Stop", "stop_hook_active": False,
        "last_assistant_message": "All good.", "background_tasks": [], "session_crons": [],
    }))
    assert p == StopPayload(
        session_id=SID, transcript_path="/home/u/.claude/projects/p/t.jsonl", cwd="/home/u/p",
        hook_event_name="Stop", stop_hook_active=False, last_assistant_message="All good.",
        permission_mode="bypassPermissions", prompt_id="pid-1",
    )
    assert p.problems == () and p.is_stop


def test_minimal_three_field_payload() -> None:
    p = parse_payload(_payload({"session_id": SID, "transcript_path": "/t.jsonl", "cwd": "/p"}))
    assert (p.session_id, p.transcript_path, p.cwd) == (SID, "/t.jsonl", "/p")
    assert p.hook_event_name is None and p.is_stop and not p.stop_hook_active
    assert p.last_assistant_message is None and p.problems == ()


def test_camel_case_payload_of_another_cli() -> None:
    p = parse_payload(_payload({
        "hookEventName": "stop", "sessionId": SID, "cwd": "/home/u/p",
        "workspaceRoot": "/home/u/p/", "transcriptPath": "/home/u/.x/sessions/%2Fp/updates.jsonl",
        "promptId": "pid-2", "reason": "end_turn",
    }))
    assert p.session_id == SID and p.hook_event_name == "stop" and p.is_stop
    assert p.transcript_path == "/home/u/.x/sessions/%2Fp/updates.jsonl"
    assert p.prompt_id == "pid-2" and p.problems == ()


def test_snake_case_wins_over_camel_case() -> None:
    p = parse_payload(_payload({"session_id": "a", "sessionId": "b", "stopHookActive": True}))
    assert p.session_id == "a" and p.stop_hook_active


def test_stop_hook_active_true() -> None:
    p = parse_payload(_payload({"session_id": SID, "hook_event_name": "Stop",
                                "stop_hook_active": True, "last_assistant_message": "Done."}))
    assert p.stop_hook_active is True and p.problems == ()


def test_stop_failure_event_is_not_a_stop() -> None:
    assert not parse_payload(_payload({"hook_event_name": "StopFailure"})).is_stop


def test_merge_conflict_markers_are_invalid_json() -> None:
    data = (b'[\n  {\n<<<<<<< HEAD\n    "session_id": "x",\n=======\n    "session_id": "y",\n'
            b'>>>>>>> origin/fix\n    "cwd": "/p"\n  }\n]')
    p = parse_payload(data)
    assert p.session_id is None
    assert len(p.problems) == 1 and p.problems[0].startswith("stdin is not valid JSON")


@pytest.mark.parametrize("data", [b"", b"   \n", b"\xef\xbb\xbf"])
def test_empty_stdin(data: bytes) -> None:
    p = parse_payload(data)
    assert p == StopPayload(problems=("stdin is empty: no Stop hook payload",))


@pytest.mark.parametrize(("data", "what"), [
    (b'[{"session_id": "x"}]', "an array"), (b'"Stop"', "a string"), (b"5", "a number"),
    (b"null", "null"),
])
def test_json_that_is_not_an_object(data: bytes, what: str) -> None:
    p = parse_payload(data)
    assert p.session_id is None and p.problems == (f"stdin JSON is {what}, expected an object",)


def test_wrong_types_become_problems() -> None:
    p = parse_payload(_payload({"session_id": 5, "stop_hook_active": "true", "cwd": ["x"],
                                "transcript_path": None}))
    assert p.session_id is None and p.cwd is None and p.transcript_path is None
    assert p.stop_hook_active is True
    assert len(p.problems) == 3
    assert "session_id: expected a string, got a number 5" in p.problems[0]
    assert any("stop_hook_active" in problem for problem in p.problems)


def test_stop_hook_active_of_another_type_reads_false() -> None:
    p = parse_payload(_payload({"stop_hook_active": 1}))
    assert p.stop_hook_active is False and "read as false" in p.problems[0]


@pytest.mark.parametrize("sid", ["", "   ", "\t\n"])
def test_blank_session_id_counts_as_missing(sid: str) -> None:
    p = parse_payload(_payload({"session_id": sid, "sessionId": "other"}))
    assert p.session_id is None and p.problems == ("session_id is empty: treated as missing",)


def test_mojibake_text_is_kept_verbatim() -> None:
    original = "Le déploiement est prêt \u2014 vérifie <promise>FINI</promise>"
    mojibake = original.encode("utf-8").decode("cp1252", errors="replace")
    p = parse_payload(_payload({"session_id": SID, "last_assistant_message": mojibake}))
    assert p.last_assistant_message == mojibake and p.problems == ()


def test_invalid_utf8_bytes_are_replaced() -> None:
    data = '{"session_id": "s", "last_assistant_message": "d\u00e9j\u00e0"}'.encode("cp1252")
    p = parse_payload(data)
    assert p.session_id == "s" and p.last_assistant_message == "d\ufffdj\ufffd"
    assert len(p.problems) == 1 and "not valid UTF-8" in p.problems[0]


def test_windows_paths_with_spaces() -> None:
    tpath = "C:\\Users\\someone\\.claude\\projects\\C--x\\My Session.jsonl"
    cwd = "C:\\Users\\someone\\CLAUDE CODE\\my project"
    p = parse_payload(_payload({"session_id": SID, "transcript_path": tpath, "cwd": cwd,
                                "hook_event_name": "Stop", "stop_hook_active": False}))
    assert (p.transcript_path, p.cwd, p.problems) == (tpath, cwd, ())
    assert last_message(p) is None  # not found on POSIX, no crash


def test_bom_is_stripped() -> None:
    p = parse_payload(b"\xef\xbb\xbf" + _payload({"session_id": SID}))
    assert p.session_id == SID and p.problems == ()


# --- transcript reading --------------------------------------------------------------------


def _assistant(*blocks: dict[str, Any], sidechain: bool = False) -> dict[str, Any]:
    return {"type": "assistant", "isSidechain": sidechain,
            "message": {"role": "assistant", "content": list(blocks)}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
THINKING = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
USER_PROMPT = {"type": "user", "message": {"role": "user", "content": "go on"}}
TOOL_RESULT = {"type": "user", "message": {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}}
SYSTEM = {"type": "system", "subtype": "turn_duration", "durationMs": 5}


def _write_jsonl(path: Path, *records: object, tail: bytes = b"") -> str:
    lines = [json.dumps(r).encode() if not isinstance(r, bytes) else r for r in records]
    path.write_bytes(b"\n".join(lines) + b"\n" + tail)
    return str(path)


def test_transcript_last_assistant_text(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "t.jsonl", USER_PROMPT, _assistant(THINKING), _assistant(TOOL_USE),
        TOOL_RESULT, _assistant(_text("first")), _assistant(THINKING),
        _assistant(_text("Final\n<promise>DONE</promise>"), _text("tail")),
        {"type": "attachment", "attachment": {}}, SYSTEM, {"type": "file-history-snapshot"},
    )
    assert last_transcript_message(path) == "Final\n<promise>DONE</promise>\ntail"
    assert last_message(StopPayload(transcript_path=path)) == (
        "Final\n<promise>DONE</promise>\ntail")


def test_payload_message_is_preferred_over_transcript(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", _assistant(_text("from file")))
    payload = StopPayload(transcript_path=path, last_assistant_message="from payload")
    assert last_message(payload) == "from payload"


def test_transcript_trailing_garbage_lines(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "t.jsonl", _assistant(_text("answer")), b"not json", b"[1, 2]", b"",
        b"\xff\xfe\x00garbage", tail=b'{"type": "assistant", "message": {"content": [{"ty',
    )
    assert last_transcript_message(path) == "answer"


def test_transcript_last_record_tool_use_only_goes_further_back(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", _assistant(_text("said this")),
                        _assistant(THINKING), _assistant(TOOL_USE), _assistant(_text("   ")))
    assert last_transcript_message(path) == "said this"


def test_transcript_sidechain_records_are_skipped(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", _assistant(_text("main")),
                        _assistant(_text("sub-agent"), sidechain=True))
    assert last_transcript_message(path) == "main"


def test_transcript_plain_string_content(tmp_path: Path) -> None:
    record = {"type": "assistant", "message": {"content": "plain"}}
    assert last_transcript_message(_write_jsonl(tmp_path / "t.jsonl", record)) == "plain"


@pytest.mark.parametrize("last", [USER_PROMPT, TOOL_RESULT])
def test_lagging_transcript_ending_with_user_record(tmp_path: Path, last: object) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", _assistant(_text("previous turn")), last, SYSTEM)
    assert last_transcript_message(path) is None


def test_missing_and_unreadable_transcript(tmp_path: Path) -> None:
    assert last_transcript_message(str(tmp_path / "nope.jsonl")) is None
    assert last_transcript_message(str(tmp_path)) is None  # a directory
    assert last_transcript_message("bad\x00path") is None
    assert last_message(StopPayload()) is None


def test_file_without_final_newline_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(_assistant(_text("a"))).encode() + b"\r\n"
                     + json.dumps(_assistant(_text("b"))).encode())
    assert last_transcript_message(str(path)) == "b"


def test_lines_longer_than_a_block(tmp_path: Path) -> None:
    big = "x" * (3 * sp._BLOCK_BYTES) + "\u00e9\U0001f600"
    path = _write_jsonl(tmp_path / "t.jsonl", _assistant(_text(big)), SYSTEM, SYSTEM)
    assert last_transcript_message(path) == big


class _CountingFile:
    def __init__(self, file: Any, counter: list[int]) -> None:
        self._file, self._counter = file, counter

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._file.read(size)
        self._counter.append(len(data))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> _CountingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def test_huge_transcript_is_read_only_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as file:
        # An early answer that must NOT be reached, then ~50 MB (sparse) of one huge line.
        file.write(json.dumps(_assistant(_text("EARLY"))).encode() + b"\n")
        file.truncate(50 * 1024 * 1024)
        file.seek(0, 2)
        file.write(b"\n" + json.dumps(_assistant(_text("late"))).encode() + b"\n")
        filler = json.dumps(SYSTEM).encode() + b"\n"
        file.write(filler * (5 * 1024 * 1024 // len(filler)))  # ~5 MB with no answer
    reads: list[int] = []

    def counting_open(*args: Any, **kwargs: Any) -> _CountingFile:
        return _CountingFile(open(*args, **kwargs), reads)

    monkeypatch.setattr(sp, "open", counting_open, raising=False)
    bound = 4 * 1024 * 1024
    assert last_transcript_message(str(path), max_bytes=bound) is None
    assert 0 < sum(reads) <= bound
    reads.clear()
    assert last_transcript_message(str(path), max_bytes=6 * 1024 * 1024) == "late"
    assert sum(reads) <= 6 * 1024 * 1024


# --- find_promise --------------------------------------------------------------------------


@pytest.mark.parametrize(("message", "promise"), [
    ("<promise>ALL DONE</promise>", "ALL DONE"),
    ("Work finished.\n\n<promise>ALL DONE</promise>\n", "ALL DONE"),
    ("  <promise>ALL  DONE</promise>  ", "ALL DONE"),
    ("<promise>ALL DONE</promise>", "  ALL\tDONE "),
    ("<promise>I\n  will achieve 95%+</promise>", "I\nwill   achieve 95%+"),
    ("<promise>I will achieve 95%+</promise>", "I\n  will achieve 95%+"),
    ("Done.\r\n<promise>直到找不到任何可以优化的点</promise>\r\n", "直到找不到任何可以优化的点"),
    ("<promise>x</promise> no\n<promise>ALL DONE</promise>", "ALL DONE"),
])
def test_promise_found(message: str, promise: str) -> None:
    assert find_promise(message, promise)


@pytest.mark.parametrize(("message", "promise"), [
    ("ALL DONE", "ALL DONE"),
    ("I said <promise>ALL DONE</promise>", "ALL DONE"),
    ("<promise>ALL DONE</promise> as asked", "ALL DONE"),
    ("`<promise>ALL DONE</promise>`", "ALL DONE"),
    ('"<promise>ALL DONE</promise>"', "ALL DONE"),
    ("> <promise>ALL DONE</promise>", "ALL DONE"),
    ("Output <promise>ALL DONE</promise> only when it is true.", "ALL DONE"),
    ("<promise>ALL DONE</promise>", "ALL DONE!"),
    ("<promise>all done</promise>", "ALL DONE"),
    ("<promise> ALL DONE </promise>", "ALL DONE"),
    ("<PROMISE>ALL DONE</PROMISE>", "ALL DONE"),
    ("<promise>ALL DONE", "ALL DONE"),
    ("<promise></promise>", ""),
    ("<promise> </promise>", " \n "),
    ("anything", ""),
    ("", "ALL DONE"),
])
def test_promise_not_found(message: str, promise: str) -> None:
    assert not find_promise(message, promise)


# --- block / allow -------------------------------------------------------------------------


def test_block_round_trips_with_exact_keys() -> None:
    out = block("Keep going.", "iteration 2/10")
    assert json.loads(out) == {"decision": "block", "reason": "Keep going.",
                               "systemMessage": "iteration 2/10"}
    assert "\n" not in out


def test_block_feeds_special_text_back_verbatim() -> None:
    reason = ('---\nline "quoted" \\ back\n$(rm -rf /) `x`\nEOF\n<<EOF\n---\n'
              'tab\there \u00e9\U0001f600 \u2028 \x00 end')
    out = block(reason, "msg with 'quotes'")
    assert json.loads(out)["reason"] == reason
    assert json.loads(out)["systemMessage"] == "msg with 'quotes'"
    out.encode("utf-8")  # printable as UTF-8


def test_block_bounds_the_reason() -> None:
    reason = "a" * 50_000
    data = json.loads(block(reason, "s"))
    assert data["reason"].endswith(TRUNCATION_MARKER) and data["reason"].startswith("aaa")
    assert len(data["reason"]) == MAX_REASON_CHARS


@pytest.mark.parametrize("prefix", [MAX_REASON_CHARS - len(TRUNCATION_MARKER) - 1,
                                    MAX_REASON_CHARS - len(TRUNCATION_MARKER) - 2])
def test_emoji_at_the_cut_point_is_never_split(prefix: int) -> None:
    reason = "a" * prefix + "\U0001f600" * 5000
    cut = json.loads(block(reason, "s"))["reason"]
    body = cut[: -len(TRUNCATION_MARKER)]
    assert cut.endswith(TRUNCATION_MARKER)
    assert body.rstrip("\U0001f600") == "a" * prefix
    units = len(cut.encode("utf-16-le")) // 2
    assert MAX_REASON_CHARS - 1 <= units <= MAX_REASON_CHARS
    cut.encode("utf-8")  # no lone surrogate


def test_bound_text_keeps_short_text_and_replaces_lone_surrogates() -> None:
    assert bound_text("short") == "short"
    assert bound_text("x" * MAX_REASON_CHARS) == "x" * MAX_REASON_CHARS
    assert bound_text("bad \ud83d end") == "bad \ufffd end"
    json.loads(block("bad \ud83d", "\udc00")).__repr__().encode("utf-8")


def test_allow() -> None:
    assert allow() == "" and allow(None) == "" and allow("") == ""
    assert json.loads(allow("Ralph loop finished: <promise> seen")) == {
        "systemMessage": "Ralph loop finished: <promise> seen"}
    assert len(json.loads(allow("m" * 20_000))["systemMessage"]) == MAX_REASON_CHARS


# --- import cost -----------------------------------------------------------------------------


def test_import_pulls_in_no_heavy_dependency() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest_ralph.claude.payload"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    imported = {line.split("|")[-1].strip().split(".")[0]
                for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "pytest_ralph" in imported
    assert not imported & {"pytest", "_pytest", "jsonschema", "yaml", "pluggy"}


@pytest.mark.parametrize("message", [
    "Here is what the instructions say:\n```\n<promise>ALL DONE</promise>\n```",
    "```text\n<promise>ALL DONE</promise>\n",  # an unclosed fence runs to the end
    "~~~~\n<promise>ALL DONE</promise>\n~~~\nstill inside\n",  # a shorter fence does not close
    "   ```\n<promise>ALL DONE</promise>\n   ```",
])
def test_a_tag_inside_a_fenced_code_block_is_a_quote(message: str) -> None:
    assert not find_promise(message, "ALL DONE")


def test_a_tag_after_a_closed_fence_counts() -> None:
    message = "```python\nprint('x')\n```\nAll criteria pass.\n<promise>ALL DONE</promise>\n"
    assert find_promise(message, "ALL DONE")


def test_a_fifo_as_transcript_gives_no_message_without_hanging(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    assert last_transcript_message(str(fifo)) is None
    assert last_transcript_message(str(tmp_path)) is None  # a folder


def test_json_nested_too_deeply_is_a_problem_not_an_error() -> None:
    payload = parse_payload(b"[" * 100_000 + b"]" * 100_000)
    assert payload.problems == ("stdin holds JSON nested too deeply to read, not a Stop payload "
                                "object",)
    assert payload.session_id is None


def test_a_session_id_with_an_unpaired_surrogate_counts_as_missing() -> None:
    payload = parse_payload(b'{"session_id": "ab\\ud800cd", "cwd": "/p"}')
    assert payload.session_id is None and payload.cwd == "/p"
    assert payload.problems == ("session_id holds an unpaired surrogate escape: treated as "
                                "missing",)


def test_a_transcript_line_nested_too_deeply_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    record = {"type": "assistant", "message": {"content": [{"type": "text", "text": "done"}]}}
    path.write_text(json.dumps(record) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n"
                    + '{"type": "x", "deep": ' + "{\"a\":" * 50_000 + "1" + "}" * 50_001 + "\n",
                    encoding="utf-8")
    assert last_transcript_message(str(path)) == "done"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX device files")
def test_special_transcripts_give_no_message_without_hanging() -> None:
    assert last_transcript_message("/dev/zero") is None  # endless: refused before a read
    assert last_transcript_message("/dev/null") is None
    assert last_transcript_message("/tmp\0x") is None
