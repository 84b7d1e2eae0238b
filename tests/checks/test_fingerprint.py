"""Unit tests of pytest_ralph.checks.fingerprint: failure normalization and fingerprints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pytest_ralph.checks.fingerprint import (
    failure_fingerprint,
    failure_fingerprints,
    fingerprint,
    normalize_failure,
    same_failures,
    stored_fingerprint,
)

# -- normalize_failure ----------------------------------------------------------------------


@pytest.mark.parametrize("stamp", [
    "2024-05-01T12:34:56",
    "2024-05-01T12:34:56.789Z",
    "2024-05-01 12:34:56+02:00",
    "2024-05-01T12:34:56.123456-0700",
    "2024-05-01T12:34",
])
def test_iso_timestamps_become_time(stamp: str) -> None:
    assert normalize_failure(f"[{stamp}] request failed") == "[<time>] request failed"


def test_clock_times_become_time() -> None:
    assert normalize_failure("at 09:15:02 the job died") == "at <time> the job died"
    assert normalize_failure("at 23:59:59.999 the job died") == "at <time> the job died"


def test_memory_addresses_become_addr() -> None:
    assert normalize_failure("<Foo object at 0x7f3a2b1c9d40>") == "<Foo object at <addr>>"
    assert normalize_failure("ptr 0xDEADBEEF") == "ptr <addr>"


def test_long_hex_becomes_hex_but_short_words_stay() -> None:
    assert normalize_failure("commit 3f9a1c0b7e2d5a4f9e8d differs") == "commit <hex> differs"
    # Short hex-looking words are ordinary words.
    assert normalize_failure("deadbeef cafe added") == "deadbeef cafe added"


def test_posix_temp_path_becomes_path() -> None:
    text = 'File "/tmp/pytest-of-x/pytest-3/abc/file.py", line 12, in test_it'
    assert normalize_failure(text) == 'File "<path>", line <n>, in test_it'


def test_windows_temp_path_becomes_path() -> None:
    text = r"cannot open C:\Users\x\AppData\Local\Temp\y\data.json: denied"
    assert normalize_failure(text) == "cannot open <path>: denied"
    assert normalize_failure("see C:/Users/x/out.txt") == "see <path>"


def test_home_and_project_paths_become_path() -> None:
    assert normalize_failure("rootdir: /home/alice/src/acme") == "rootdir: <path>"
    assert normalize_failure("x is /Users/bob/proj/x.py!") == "x is <path>!"


def test_relative_paths_are_kept() -> None:
    # A relative path names the file that fails: it is substantive, not noise.
    assert normalize_failure("tests/test_x.py::test_login FAILED") == (
        "tests/test_x.py::test_login FAILED")
    assert normalize_failure("src/app/models.py") == "src/app/models.py"
    assert normalize_failure("./scripts/check.sh") == "./scripts/check.sh"
    # ... but the line number after it is a number.
    assert normalize_failure("tests/test_x.py:12: AssertionError") == (
        "tests/test_x.py:<n>: AssertionError")


@pytest.mark.parametrize(("text", "expected"), [
    ("1 failed, 2 passed in 0.12s", "<n> failed, <n> passed in <n>s"),
    ("==== 3 failed in 12.50s ====", "==== <n> failed in <n>s ===="),
    ("process 48213 exited", "process <n> exited"),
    ("line 7", "line <n>"),
])
def test_numbers_become_n(text: str, expected: str) -> None:
    assert normalize_failure(text) == expected


def test_digits_inside_identifiers_are_numbers_too() -> None:
    # The contract normalizes every number away, including digits that are part of a
    # name; a failure moving from test_case_1 to test_case_2 keeps its fingerprint.
    assert normalize_failure("test_case_1") == normalize_failure("test_case_2") == "test_case_<n>"


def test_words_and_punctuation_are_kept_and_blanks_folded() -> None:
    text = "E       AssertionError: expected 'admin'\t\tgot 'guest'   "
    assert normalize_failure(text) == "E AssertionError: expected 'admin' got 'guest'"


def test_newlines_are_kept() -> None:
    assert normalize_failure("first line\nsecond line") == "first line\nsecond line"


def test_a_realistic_failure_keeps_nothing_volatile() -> None:
    text = ("2025-01-02T03:04:05Z FAILED tests/test_login.py::test_ok - assert 401 == 200\n"
            'File "/tmp/pytest-of-ci/pytest-17/test_ok0/app.py", line 88\n'
            "<Response at 0x10f2e4a90> after 0.0321s (pid 5123)")
    out = normalize_failure(text)
    assert not re.search(r"\d", out.replace("<n>", ""))
    assert "/tmp" not in out
    assert "0x" not in out
    assert "tests/test_login.py::test_ok" in out
    assert "FAILED" in out
    assert "Response" in out


# -- fingerprint ----------------------------------------------------------------------------


def test_fingerprint_is_16_hex_digits() -> None:
    fp = fingerprint([("US-001::AC1", "boom")])
    assert re.fullmatch(r"[0-9a-f]{16}", fp)


def test_fingerprint_is_order_insensitive() -> None:
    a = [("US-001::AC1", "boom"), ("US-002::AC1", "bang")]
    assert fingerprint(a) == fingerprint(list(reversed(a)))


def test_fingerprint_is_duplicate_insensitive() -> None:
    a = [("US-001::AC1", "boom"), ("US-002::AC1", "bang")]
    assert fingerprint(a + a[:1]) == fingerprint(a)


def test_fingerprint_accepts_any_iterable() -> None:
    pairs = [("US-001::AC1", "boom")]
    assert fingerprint(iter(pairs)) == fingerprint(pairs)


def test_fingerprint_differs_by_criterion_key() -> None:
    assert fingerprint([("US-001::AC1", "boom")]) != fingerprint([("US-001::AC2", "boom")])


def test_fingerprint_differs_by_substantive_text() -> None:
    assert (fingerprint([("US-001::AC1", "AssertionError: expected admin")])
            != fingerprint([("US-001::AC1", "AssertionError: expected guest")]))
    assert (fingerprint([("US-001::AC1", "FAILED tests/test_a.py")])
            != fingerprint([("US-001::AC1", "FAILED tests/test_b.py")]))


def test_fingerprint_differs_when_a_failure_is_added_or_fixed() -> None:
    one = [("US-001::AC1", "boom")]
    two = [*one, ("US-001::AC2", "boom")]
    assert fingerprint(one) != fingerprint(two)


def test_fingerprint_key_and_text_do_not_run_together() -> None:
    # ("a", "bc") and ("ab", "c") must not collide.
    assert fingerprint([("a", "bc")]) != fingerprint([("ab", "c")])


def test_fingerprint_equal_when_only_volatile_details_differ() -> None:
    first = [("US-001::AC1",
              'File "/tmp/pytest-of-a/pytest-3/x0/app.py", line 10\n'
              "<Obj at 0x7f00aa> failed in 0.12s at 2024-01-01T10:00:00Z")]
    second = [("US-001::AC1",
               'File "/tmp/pytest-of-b/pytest-41/y7/app.py", line 12\n'
               "<Obj at 0x55ffbb> failed in 3.40s at 2025-12-31T23:59:59Z")]
    assert fingerprint(first) == fingerprint(second)


def test_fingerprint_equal_across_blank_runs() -> None:
    assert fingerprint([("k", "a   b\t c ")]) == fingerprint([("k", "a b c")])


def test_nothing_failing_has_no_fingerprint() -> None:
    # A passing check has no fingerprint (it used to get the digest of nothing).
    assert fingerprint([]) == fingerprint(()) == ""
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint([("US-001::AC1", "")]))


# -- one failure, one fingerprint --------------------------------------------------------


def test_a_failure_has_the_fingerprint_of_a_check_that_failed_only_so() -> None:
    # The report's table, its "Failing criteria" section, the Blocked reason and the
    # breaker's stop reason show the same digits for one unchanged failure.
    text = 'File "/tmp/x/app.py", line 10: assert 401 == 200'
    one = failure_fingerprint("US-001::AC1", text)
    assert one == fingerprint([("US-001::AC1", text)])
    assert one == failure_fingerprint("US-001::AC1", normalize_failure(text), normalize=False)
    assert one == fingerprint([("US-001::AC1", normalize_failure(text))], normalize=False)
    # With another failure beside it, the set's digest differs, the failure's does not.
    both = [("US-001::AC1", text), ("US-002::AC1", "boom")]
    assert fingerprint(both) != one
    assert dict(failure_fingerprints(both))["US-001::AC1"] == one


def test_failure_fingerprints_keep_the_order_and_each_failure_once() -> None:
    pairs = [("US-002::AC1", "b"), ("US-001::AC1", "a"), ("US-002::AC1", "b"),
             ("<check>", "error one"), ("<check>", "error two")]
    got = failure_fingerprints(pairs)
    assert [k for k, _ in got] == ["US-002::AC1", "US-001::AC1", "<check>", "<check>"]
    assert got[0] == ("US-002::AC1", failure_fingerprint("US-002::AC1", "b"))
    assert got[2][1] != got[3][1]
    assert failure_fingerprints([]) == []


def test_same_failures_names_each_failure_with_its_fingerprint() -> None:
    assert same_failures([("US-1::AC1", "aaaa")]) == (
        "the same failure of US-1::AC1 (fingerprint aaaa)")
    assert same_failures([("US-1::AC1", "aaaa"), ("<check>", "bbbb")]) == (
        "the same failures of US-1::AC1 (fingerprint aaaa) and the check phase "
        "(fingerprint bbbb)")
    five = [(f"US-1::AC{i}", f"f{i}") for i in range(1, 6)]
    assert same_failures(five) == (
        "the same failures of US-1::AC1 (fingerprint f1), US-1::AC2 (fingerprint f2), "
        "US-1::AC3 (fingerprint f3) and 2 more")
    assert same_failures([]) == "the same failures"


def test_a_stored_digest_of_nothing_reads_as_no_fingerprint() -> None:
    # A history written before a passing check had no fingerprint holds the digest of
    # nothing: a resumed run reads it as "", what it computes now for the same check.
    assert stored_fingerprint("e3b0c44298fc1c14") == "" == fingerprint([])
    assert stored_fingerprint("6ec48a28491fd48b") == "6ec48a28491fd48b"
    assert stored_fingerprint("") == ""


# -- stable across processes -------------------------------------------------------------

#: Many failures, so that a set of them iterates in an order that depends on the string hash
#: seed: a fingerprint that followed that order would differ from one process to the next.
MANY = [(f"US-{i % 7:03d}::AC{i}", f"AssertionError: case {chr(97 + i % 26)}{i} at 0x{i:x}ff")
        for i in range(40)]

CHILD = """
import json, sys
from pytest_ralph.checks.fingerprint import fingerprint
pairs = [tuple(p) for p in json.loads(sys.argv[1])]
print(json.dumps([fingerprint(pairs), fingerprint(reversed(pairs)), fingerprint(set(pairs)),
                  fingerprint(pairs, normalize=False), fingerprint([])]))
"""


def _child(seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(MANY)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got: list[str] = json.loads(done.stdout)
    return got


def test_fingerprints_are_the_same_in_every_process_whatever_the_hash_seed() -> None:
    # The loop compares the fingerprint of each iteration with the one of the iteration
    # before, which a resumed run (another process) reads back from ralph.db; the Stop hook
    # computes each iteration's in a process of its own.
    here = [fingerprint(MANY), fingerprint(reversed(MANY)), fingerprint(set(MANY)),
            fingerprint(MANY, normalize=False), fingerprint([])]
    assert here[0] == here[1] == here[2] != here[3]
    for seed in ("0", "1", "2", "3", "4242"):
        assert _child(seed) == here, f"PYTHONHASHSEED={seed}"


def test_fingerprint_values_do_not_change_between_versions() -> None:
    # Fingerprints are stored in the run history (ralph.db) and compared by a resumed run,
    # perhaps of a newer pytest-ralph: the digest of given failures is part of the format.
    # SHA-256 of b"US-001::AC1\0boom\0\0", the pairs in sorted order, each key and text
    # ended by a NUL and each pair by another.
    assert fingerprint([("US-001::AC1", "boom")]) == "6ec48a28491fd48b"
    assert fingerprint([("US-001::AC1", "boom"), ("US-002::AC1", "bang")]) == "9ae8ee3cde94cf74"
