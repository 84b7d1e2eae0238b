"""Unit tests of the verified snapshot's file copies and diff stat (pytest_ralph.state.verified):
what a new run says changed since the last run's verified oracle. The refusal itself, end to
end, is in tests/oracle/test_oracle.py and tests/chaos."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pytest_ralph.oracle.snapshot import Change, Snapshot
from pytest_ralph.oracle.walk import ABSENT
from pytest_ralph.state.folder import COPIES
from pytest_ralph.state.verified import (
    MAX_LINES,
    changes_stat,
    keep_copies,
    weakening,
)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _snap(**digests: str) -> Snapshot:
    return Snapshot(digests=dict(digests), links={})


def _guarded(root: Path, rel: str, text: str) -> tuple[str, str]:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return f"file {rel}", _digest(text.encode())


def test_keep_copies_keeps_each_guarded_text_file_by_its_digest(tmp_path: Path) -> None:
    root, state = tmp_path / "project", tmp_path / "state"
    a_subject, a_digest = _guarded(root, "tests/test_a.py", "def test_a():\n    assert 1\n")
    c_subject, c_digest = _guarded(root, "conftest.py", "TOKEN = 's3cret-value'\n")
    outside = tmp_path / "elsewhere" / "schema.json"
    outside.parent.mkdir()
    outside.write_text('{"type": "object"}\n')
    o_digest = _digest(outside.read_bytes())
    binary = root / "data.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    big = root / "big.py"
    big.write_bytes(b"x" * (1024 * 1024 + 1))  # docs/loop.md: "a file of up to 1 MB"
    edge = root / "edge.py"
    edge.write_bytes(b"y" * 1024 * 1024)
    snap = _snap(**{a_subject: a_digest, c_subject: c_digest,
                    f"file {outside}": o_digest,
                    "file data.bin": _digest(binary.read_bytes()),
                    "file big.py": _digest(big.read_bytes()),
                    "file edge.py": _digest(edge.read_bytes()),
                    "file missing.py": "0" * 64,
                    "file gone.py": ABSENT,
                    "criterion US-1::AC1": "1" * 64,
                    "pytest configuration pytest.ini": "2" * 64})
    keep_copies(snap, root, state, redact=lambda t: t.replace("s3cret-value", "[redacted]"))
    copies = state / COPIES
    assert sorted(p.name for p in copies.iterdir()) == sorted(
        [a_digest, c_digest, o_digest, _digest(edge.read_bytes())])
    assert (copies / a_digest).read_text() == "def test_a():\n    assert 1\n"
    assert (copies / c_digest).read_text() == "TOKEN = '[redacted]'\n"
    assert (copies / o_digest).read_text() == '{"type": "object"}\n'


def test_keep_copies_keeps_an_existing_copy_and_drops_the_ones_not_named(
        tmp_path: Path) -> None:
    root, state = tmp_path / "project", tmp_path / "state"
    subject, digest = _guarded(root, "tests/test_a.py", "A = 1\n")
    copies = state / COPIES
    copies.mkdir(parents=True)
    (copies / digest).write_text("the copy an earlier run kept\n")
    (copies / ("f" * 64)).write_text("of an older snapshot\n")
    (copies / ("c" * 64)).write_text("named by a criterion's digest, not a file's\n")
    keep_copies(_snap(**{subject: digest, "criterion US-1::AC1": "c" * 64}), root, state)
    assert sorted(p.name for p in copies.iterdir()) == [digest]
    assert (copies / digest).read_text() == "the copy an earlier run kept\n"


def test_changes_stat_counts_the_lines_of_each_file_like_git_diff_stat(tmp_path: Path) -> None:
    root, state = tmp_path / "project", tmp_path / "state"
    old = "line 1\nline 2\nline 3\nkey = s3cret-value\n"
    subject, digest = _guarded(root, "tests/test_calc.py", old)
    deleted_subject, deleted_digest = _guarded(root, "tests/test_old.py", "a\nb\nc")
    before = _snap(**{subject: digest, deleted_subject: deleted_digest,
                      "file tests/conftest.py": ABSENT})

    def redact(text: str) -> str:
        return text.replace("s3cret-value", "[redacted]")

    keep_copies(before, root, state, redact=redact)
    (root / "tests/test_calc.py").write_text("line 1\nline two\nline 2b\nkey = s3cret-value\n")
    (root / "tests/test_old.py").unlink()
    (root / "tests/conftest.py").write_text("import pytest\n\n\nx = 1")
    changes = [Change(subject, "changed", ("US-1::AC1",)),
               Change(deleted_subject, "deleted", ("US-1::AC2",)),
               Change("file tests/conftest.py", "added", ("US-1::AC1",)),
               Change("criterion US-1::AC3", "changed", ("US-1::AC3",)),
               Change("folder tests/ (files)", "changed", ("US-1::AC1",),
                      detail="added tests/test_b.py")]
    assert changes_stat(changes, before, root, state, redact=redact) == [
        "tests/test_calc.py | 4 +2 -2",
        "tests/test_old.py | deleted (3 lines)",
        "tests/conftest.py | added (4 lines)",
        "criterion US-1::AC3 | changed",
        "folder tests/ (files) | changed: added tests/test_b.py",
    ]


def test_changes_stat_of_a_file_without_its_old_copy_says_changed(tmp_path: Path) -> None:
    root, state = tmp_path / "project", tmp_path / "state"
    subject, _ = _guarded(root, "tests/test_a.py", "A = 2\n")
    line = changes_stat([Change(subject, "changed", ())], _snap(**{subject: "e" * 64}), root,
                        state)
    assert line == ["tests/test_a.py | changed"]
    gone = changes_stat([Change("file tests/test_gone.py", "deleted", ())],
                        _snap(**{"file tests/test_gone.py": "e" * 64}), root, state)
    assert gone == ["tests/test_gone.py | deleted"]


def test_changes_stat_names_at_most_max_lines_then_how_many_more(tmp_path: Path) -> None:
    changes = [Change(f"criterion US-{i}::AC1", "changed", ()) for i in range(MAX_LINES + 3)]
    got = changes_stat(changes, _snap(), tmp_path, tmp_path)
    assert got[:MAX_LINES] == [f"criterion US-{i}::AC1 | changed" for i in range(MAX_LINES)]
    assert got[MAX_LINES:] == ["... 3 more"]
    exactly = changes_stat(changes[:MAX_LINES], _snap(), tmp_path, tmp_path)
    assert len(exactly) == MAX_LINES and not exactly[-1].startswith("...")
    assert MAX_LINES == 20


def test_a_new_criterion_weakens_nothing_every_other_change_does() -> None:
    added = Change("criterion US-2::AC1", "added", ("US-2::AC1",))
    others = [Change("criterion US-1::AC1", "changed", ()),
              Change("criterion US-1::AC2", "removed", ()),
              Change("file tests/test_a.py", "added", ()),
              Change("file tests/test_b.py", "deleted", ())]
    assert weakening([added, *others]) == others
