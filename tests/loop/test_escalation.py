"""Unit tests of pytest_ralph.loop.escalation: per-story blocking (the breaker and the iteration
limit), the state dump, and the escalation command (a real shell command)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.checks.fingerprint import failure_fingerprint, fingerprint
from pytest_ralph.loop.escalation import (
    ESCALATE_MIN_SECONDS,
    ESCALATE_TIMEOUT,
    EscalateResult,
    Step,
    StoryState,
    blocked,
    run_escalate,
    state_dump,
    story_states,
)
from pytest_ralph.util.redact import Redactor

posix_only = pytest.mark.skipif(os.name != "posix", reason="runs commands through sh")


def fail(story: str, text: str, crit: int = 0) -> tuple[str, str]:
    """One failing criterion of ``story``."""
    return (f"{story}::{crit}", text)


def step(n: int, story: str = "US-1", *failures: tuple[str, str], ran: bool = True,
         tampered: bool = False, outcome: str = "ok") -> Step:
    return Step(n, story, ran, tuple(failures), tampered, outcome)


def states(*steps: Step, breaker: int = 3, max_iterations: int | None = None
           ) -> dict[str, StoryState]:
    return story_states(steps, breaker=breaker, max_iterations=max_iterations)


# --- story_states: the breaker -------------------------------------------------------------


def test_blocked_after_breaker_identical_fingerprints() -> None:
    same = fail("US-1", "assert 1 == 2")
    st = states(step(1, "US-1", same), step(2, "US-1", same))["US-1"]
    assert st.streak == 2
    assert not st.blocked
    st = states(step(1, "US-1", same), step(2, "US-1", same), step(3, "US-1", same))["US-1"]
    assert st.streak == 3
    assert st.blocked_at == 3
    assert st.fingerprint == fingerprint([same])
    assert st.blocked == (f"the same failure of US-1::0 (fingerprint {st.fingerprint}) in 3 "
                          "iterations in a row on this story (iterations 1-3)")
    assert st.worked == [1, 2, 3]


def test_a_blocked_story_names_each_of_its_failures_with_its_own_fingerprint() -> None:
    # Not the digest of the story's set of failures, which the report shows nowhere else.
    mine = (fail("US-1", "assert 1 == 2", 1), fail("US-1", "boom", 2))
    other = fail("US-2", "elsewhere")
    st = states(*(step(n, "US-1", *mine, other) for n in (1, 2, 3)))["US-1"]
    assert st.blocked == (
        f"the same failures of US-1::1 (fingerprint {failure_fingerprint(*mine[0])}) and "
        f"US-1::2 (fingerprint {failure_fingerprint(*mine[1])}) in 3 iterations in a row on "
        "this story (iterations 1-3)")
    assert st.fingerprint == fingerprint(mine)


def test_a_story_whose_criteria_pass_has_no_fingerprint() -> None:
    st = states(step(1, "US-1", fail("US-2", "boom")))["US-1"]
    assert st.fingerprint == ""


@pytest.mark.parametrize("breaker", [1, 2, 5])
def test_breaker_count_is_the_setting(breaker: int) -> None:
    same = fail("US-1", "boom")
    steps = [step(n, "US-1", same) for n in range(1, breaker + 3)]
    st = states(*steps, breaker=breaker)["US-1"]
    assert st.blocked_at == breaker
    assert st.worked == list(range(1, breaker + 1))


def test_numbers_and_paths_in_the_failure_text_do_not_make_it_new() -> None:
    # The fingerprint normalizes durations, line numbers, temp paths...
    st = states(step(1, "US-1", fail("US-1", "failed after 1.2 s at /tmp/a/x.py:10")),
                step(2, "US-1", fail("US-1", "failed after 3.4 s at /tmp/b/x.py:99")),
                step(3, "US-1", fail("US-1", "failed after 0.1 s at /tmp/c/x.py:1")))["US-1"]
    assert st.blocked_at == 3


def test_iterations_where_the_agent_did_not_run_are_not_counted() -> None:
    same = fail("US-1", "boom")
    st = states(step(1, "US-1", same), step(2, "US-1", same, ran=False, outcome="api-error"),
                step(3, "US-1", same, ran=False, outcome="not-found"),
                step(4, "US-1", same))["US-1"]
    assert st.worked == [1, 4]
    assert st.streak == 2  # not reset either
    assert not st.blocked
    st = states(step(1, "US-1", same), step(2, "US-1", same, ran=False),
                step(3, "US-1", same), step(4, "US-1", same))["US-1"]
    assert st.blocked == (f"the same failure of US-1::0 (fingerprint {st.fingerprint}) in 3 "
                          "iterations in a row on this story (iterations 1-4)")


def test_iterations_without_a_story_are_not_counted() -> None:
    same = fail("US-1", "boom")
    result = states(step(1, "", same), step(2, "", same), step(3, "", same))
    assert result == {}


def test_a_change_in_the_failure_text_resets_the_streak() -> None:
    a, b = fail("US-1", "expected foo"), fail("US-1", "expected bar")
    st = states(step(1, "US-1", a), step(2, "US-1", a), step(3, "US-1", b),
                step(4, "US-1", b))["US-1"]
    assert st.streak == 2
    assert not st.blocked
    st = states(step(1, "US-1", a), step(2, "US-1", a), step(3, "US-1", b), step(4, "US-1", b),
                step(5, "US-1", b))["US-1"]
    assert st.blocked_at == 5
    assert "(iterations 3-5)" in st.blocked


def test_a_different_set_of_failing_criteria_resets_the_streak() -> None:
    one = fail("US-1", "boom", 0)
    two = fail("US-1", "boom", 1)
    st = states(step(1, "US-1", one), step(2, "US-1", one, two), step(3, "US-1", one))["US-1"]
    assert st.streak == 1
    assert not st.blocked


def test_a_tampered_iteration_counts_as_the_same() -> None:
    # The agent edited the oracle, so the failures changed: still no progress.
    st = states(step(1, "US-1", fail("US-1", "expected foo")),
                step(2, "US-1", fail("US-1", "something else entirely"), tampered=True),
                step(3, "US-1", fail("US-1", "yet another text"), tampered=True))["US-1"]
    assert st.streak == 3
    assert st.blocked_at == 3


def test_max_iterations_limit() -> None:
    steps = [step(n, "US-1", fail("US-1", f"failure kind {'abcdef'[n]}")) for n in range(1, 6)]
    st = states(*steps, breaker=10, max_iterations=3)["US-1"]
    assert st.streak == 1
    assert st.blocked_at == 3
    assert st.blocked == ("worked on in 3 iterations (ralph_story_max_iterations 3) and still "
                          "failing")
    assert not states(*steps, breaker=10, max_iterations=None)["US-1"].blocked


def test_max_iterations_counts_only_proper_runs() -> None:
    kinds = "abcdefgh"
    steps = [step(n, "US-1", fail("US-1", f"kind {kinds[n]}"), ran=n % 2 == 0)
             for n in range(1, 7)]
    st = states(*steps, breaker=10, max_iterations=3)["US-1"]
    assert st.worked == [2, 4, 6]
    assert st.blocked_at == 6


def test_the_breaker_wins_when_both_limits_are_reached() -> None:
    same = fail("US-1", "boom")
    st = states(step(1, "US-1", same), step(2, "US-1", same), breaker=2,
                max_iterations=2)["US-1"]
    assert st.blocked.startswith("the same failure")


def test_a_story_whose_criteria_pass_is_never_blocked() -> None:
    other = fail("US-2", "still broken")
    steps = [step(n, "US-1", other) for n in range(1, 8)]
    st = states(*steps, breaker=1, max_iterations=1)["US-1"]
    assert not st.blocked
    assert st.worked == list(range(1, 8))
    assert st.fingerprint == fingerprint([])
    assert blocked(states(*steps, breaker=1, max_iterations=1)) == {}


def test_passing_then_failing_again_is_a_new_streak() -> None:
    same = fail("US-1", "boom")
    st = states(step(1, "US-1", same), step(2, "US-1", same), step(3, "US-1"),
                step(4, "US-1", same), step(5, "US-1", same))["US-1"]
    assert st.streak == 2
    assert not st.blocked


def test_a_blocked_story_stays_blocked_while_it_fails() -> None:
    same = fail("US-1", "boom")
    steps = [step(1, "US-1", same), step(2, "US-1", same),
             step(3, "US-2", same, fail("US-2", "x")),  # another story's turn; US-1 fails
             step(4, "US-1", same)]
    st = states(*steps, breaker=2)["US-1"]
    assert st.blocked_at == 2
    assert st.worked == [1, 2]  # later iterations are not recorded on it
    assert "(iterations 1-2)" in st.blocked


def test_a_blocked_story_whose_criteria_pass_again_is_unblocked() -> None:
    same = fail("US-1", "boom")
    steps = [step(1, "US-1", same), step(2, "US-1", same),
             step(3, "US-2", fail("US-2", "x"))]  # US-2's work made US-1 pass
    st = states(*steps, breaker=2)["US-1"]
    assert (st.blocked, st.blocked_at, st.streak, st.fingerprint) == ("", 0, 0, None)
    # It regresses: worked on again, blocked again only after `breaker` more identical tries.
    again = [*steps, step(4, "US-1", same), step(5, "US-1", same)]
    st = states(*again, breaker=2)["US-1"]
    assert st.blocked_at == 5 and "(iterations 4-5)" in st.blocked
    assert states(*again[:4], breaker=2)["US-1"].blocked == ""


def test_other_stories_failures_do_not_affect_a_storys_fingerprint() -> None:
    same = fail("US-1", "boom")
    steps = [step(n, "US-1", same, fail("US-2", f"changing {'xyz'[n - 1]}"),
                  fail("US-10", f"also changing {'pqr'[n - 1]}"))
             for n in range(1, 4)]
    st = states(*steps)["US-1"]
    assert st.fingerprint == fingerprint([same])
    assert st.blocked_at == 3


def test_a_story_id_that_is_a_prefix_of_another_is_kept_apart() -> None:
    # "US-1::" must not match the criteria of "US-10".
    steps = [step(n, "US-1", fail("US-10", "boom")) for n in range(1, 5)]
    st = states(*steps, breaker=2, max_iterations=2)["US-1"]
    assert not st.blocked
    assert st.fingerprint == fingerprint([])


def test_stories_are_counted_separately_and_interleaving_does_not_reset() -> None:
    a, b = fail("US-1", "boom a"), fail("US-2", "boom b")
    steps = [step(1, "US-1", a, b), step(2, "US-2", a, b), step(3, "US-1", a, b),
             step(4, "US-2", a, b), step(5, "US-1", a, b)]
    result = states(*steps)
    assert result["US-1"].worked == [1, 3, 5]
    assert result["US-1"].blocked_at == 5
    assert "(iterations 1-5)" in result["US-1"].blocked
    assert result["US-2"].worked == [2, 4]
    assert not result["US-2"].blocked
    assert blocked(result) == {"US-1": result["US-1"].blocked}


def test_replaying_a_prefix_gives_the_same_states() -> None:
    # A resumed run recomputes from the iterations: the result depends on them alone.
    same = fail("US-1", "boom")
    steps = [step(1, "US-1", same), step(2, "US-2", same, fail("US-2", "x")),
             step(3, "US-1", same), step(4, "US-1", same),
             step(5, "US-2", same, fail("US-2", "x"))]
    assert states(*steps) == states(*steps)
    assert states(*steps[:4])["US-1"] == states(*steps)["US-1"]


def test_blocked_lists_only_blocked_stories() -> None:
    same = fail("US-1", "boom")
    result = states(step(1, "US-1", same), step(2, "US-2", fail("US-2", "x")),
                    step(3, "US-1", same), breaker=2)
    assert blocked(result) == {"US-1": result["US-1"].blocked}
    assert blocked({}) == {}


# --- state_dump ----------------------------------------------------------------------------

SECRETS = {
    "sk-live-0123456789": "API_KEY",
    'pa"ss\\word\t99': "DB_PASSWORD",  # characters JSON escapes
    "null,\n \"stories": "ODD_TOKEN",  # matches the JSON's own syntax
    "pässwörd-€-🔑": "UNI_SECRET",
}


def _story(secret: str) -> dict[str, Any]:
    return {"id": "US-1", "title": f"title {secret}", "blocked": f"why {secret}",
            "failing": [{"criterion": "US-1::0", "text": f"criterion {secret}",
                         "why": f"AssertionError: {secret}", "repeated": 3}],
            "tried": [{"iteration": 2, "agent": f"agent `x` exit 1 {secret}",
                       "outcome": "exit-nonzero", "passing": 0, "total": 1}],
            "last_diff": f" a.py | 2 +- {secret}"}


def _dump(redact: Any, secret: str = "s", report: Path | None = None) -> str:
    return state_dump(event="story-blocked", run_id=f"run-{secret}",
                      prd=Path(f"/p/{secret}/prd.json"), rootdir=Path(f"/root/{secret}"),
                      reason=f"reason {secret}", stories=[_story(secret), _story("plain")],
                      report=report, redact=redact)


def _leaves(v: Any) -> list[Any]:
    """The scalars of a loaded JSON value."""
    if isinstance(v, dict):
        return [x for item in v.values() for x in _leaves(item)]
    if isinstance(v, list):
        return [x for item in v for x in _leaves(item)]
    return [v]


def test_state_dump_shape() -> None:
    dump = _dump(lambda s: s, report=Path("/r/report.md"))
    data = json.loads(dump)
    assert list(data) == ["version", "event", "run", "prd", "rootdir", "reason", "report",
                          "stories"]
    assert data["version"] == 1
    assert data["event"] == "story-blocked"
    assert data["run"] == "run-s"
    assert data["prd"] == str(Path("/p/s/prd.json"))
    assert data["rootdir"] == str(Path("/root/s"))
    assert data["reason"] == "reason s"
    assert data["report"] == str(Path("/r/report.md"))
    assert data["stories"] == [_story("s"), _story("plain")]
    assert json.loads(_dump(lambda s: s))["report"] is None


def test_state_dump_redacts_every_string_value() -> None:
    seen: list[str] = []

    def mark(s: str) -> str:
        seen.append(s)
        return f"<{s}>"

    data = json.loads(_dump(mark))
    strings = [v for v in _leaves(data) if isinstance(v, str)]
    assert len(strings) == len(seen) == 5 + 2 * 9
    assert all(s.startswith("<") and s.endswith(">") for s in strings)
    assert data["version"] == 1  # non-strings left alone
    assert data["stories"][0]["failing"][0]["repeated"] == 3
    assert "<version>" not in data  # keys are the schema's names


@pytest.mark.parametrize("secret", list(SECRETS))
def test_state_dump_hides_secrets_and_stays_valid_json(secret: str) -> None:
    r = Redactor(SECRETS)
    dump = _dump(r.text, secret)
    data = json.loads(dump)  # still one valid JSON object
    assert not [v for v in _leaves(data) if isinstance(v, str) and secret in v]
    if SECRETS[secret] != "ODD_TOKEN":  # (that one is also the dump's own syntax)
        assert secret not in dump
        assert json.dumps(secret, ensure_ascii=False)[1:-1] not in dump  # nor escaped
    name = SECRETS[secret]
    assert data["reason"] == f"reason [redacted ${name}]"
    assert data["run"] == f"run-[redacted ${name}]"
    assert data["stories"][0]["failing"][0]["why"] == f"AssertionError: [redacted ${name}]"
    assert dump.count(f"[redacted ${name}]") == 4 + 6
    assert data["stories"][1] == _story("plain")


def test_state_dump_keeps_non_ascii_readable() -> None:
    dump = _dump(lambda s: s, "ünïcödé")
    assert "ünïcödé" in dump  # ensure_ascii=False
    assert json.loads(dump)["reason"] == "reason ünïcödé"


# --- run_escalate --------------------------------------------------------------------------


@posix_only
def test_escalate_gets_the_dump_on_stdin(tmp_path: Path) -> None:
    dump = _dump(Redactor(SECRETS).text, "sk-live-0123456789")
    out = tmp_path / "got.json"
    log = tmp_path / "escalate.log"
    res = run_escalate(f"cat > {out}; echo event=$PYTEST_RALPH_EVENT; pwd; echo err >&2",
                       dump, cwd=tmp_path, log_path=log, env={"PYTEST_RALPH_EVENT": "breaker"},
                       timeout=30)
    assert isinstance(res, EscalateResult)
    assert res.ok
    assert res.log_path == log
    assert res.summary == f"escalation command `cat > {out}; echo event=$PYTEST_RALPH_EVENT; " \
                          f"pwd; echo err >&2` ran (log {log})"
    assert out.read_bytes() == dump.encode("utf-8")
    assert json.loads(out.read_text("utf-8"))["version"] == 1
    lines = log.read_text().splitlines()
    assert lines[0] == "event=breaker"
    assert Path(lines[1]).resolve() == tmp_path.resolve()
    assert lines[2] == "err"


@posix_only
def test_escalate_with_a_large_dump_that_the_command_ignores(tmp_path: Path) -> None:
    dump = json.dumps({"version": 1, "pad": "x" * 2_000_000})
    res = run_escalate("exit 0", dump, cwd=tmp_path, log_path=tmp_path / "l.log", timeout=30)
    assert res.ok


@posix_only
def test_escalate_nonzero_exit(tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    res = run_escalate("echo nope; exit 3", "{}", cwd=tmp_path, log_path=log, timeout=30)
    assert not res.ok
    assert res.summary == f"escalation command `echo nope; exit 3` failed with exit 3 (log {log})"
    assert log.read_text() == "nope\n"


@posix_only
def test_escalate_timeout_kills_and_returns(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    start = time.monotonic()
    res = run_escalate("sleep 30", "{}", cwd=tmp_path, log_path=log, timeout=1)
    took = time.monotonic() - start
    assert not res.ok
    assert res.summary == f"escalation command `sleep 30` timed out after 1 s (log {log})"
    assert took < 10


@posix_only
def test_escalate_missing_command(tmp_path: Path) -> None:
    log = tmp_path / "m.log"
    res = run_escalate("pytest-ralph-no-such-command-xyz", "{}", cwd=tmp_path, log_path=log,
                       timeout=30)
    assert not res.ok
    assert "failed with exit 127" in res.summary
    assert "pytest-ralph-no-such-command-xyz" in log.read_text()


def test_escalate_that_cannot_start_does_not_raise(tmp_path: Path) -> None:
    res = run_escalate("true", "{}", cwd=tmp_path / "missing-dir", log_path=tmp_path / "x.log",
                       timeout=30)
    assert not res.ok
    assert "could not start" in res.summary
    res = run_escalate("true", "{}", cwd=tmp_path, log_path=tmp_path / "no" / "x.log",
                       timeout=30)
    assert not res.ok
    assert "could not start" in res.summary


@posix_only
def test_escalate_dump_with_a_lone_surrogate_does_not_raise(tmp_path: Path) -> None:
    # A non-UTF-8 path decoded by os.fsdecode holds lone surrogates; the dump keeps them
    # (ensure_ascii=False), and encoding it must not raise.
    odd = os.fsdecode(b"/tmp/caf\xe9")
    dump = state_dump(event="breaker", run_id="r", prd=Path(odd), rootdir=Path(odd),
                      reason="r", stories=[], report=None, redact=lambda s: s)
    out = tmp_path / "got.json"
    res = run_escalate(f"cat > {out}", dump, cwd=tmp_path, log_path=tmp_path / "s.log",
                       timeout=30)
    assert res.ok
    assert json.loads(out.read_bytes().decode("utf-8"))["version"] == 1


@posix_only
def test_escalate_extra_env_is_added_to_the_environment(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_RALPH_TEST_INHERITED", "inherited")
    log = tmp_path / "v.log"
    res = run_escalate(f"{sys.executable} -c \"import os; print(os.environ["
                       "'PYTEST_RALPH_TEST_INHERITED'], os.environ['EXTRA'])\"", "{}",
                       cwd=tmp_path, log_path=log, env={"EXTRA": "added"}, timeout=30)
    assert res.ok, log.read_text()
    assert log.read_text().split() == ["inherited", "added"]
    assert "EXTRA" not in os.environ  # the loop's own environment is left as it was


# --- the escalation command's log ----------------------------------------------------------

#: Writes to stdout and stderr (unbuffered, in order): a secret on each, then a secret that
#: straddles the 1 MiB boundary at which the log is redacted, then a last line.
NOISY = r"""
import os, sys
secret = sys.argv[1]
os.write(1, f"out {secret} done\n".encode())
os.write(2, f"err {secret}\n".encode())
os.write(1, b"x" * (2**20 - 30) + secret.encode() + b"\nend\n")
sys.exit(int(sys.argv[2]))
"""

ESC_SECRET = "sk-live-0123456789"


def _noisy(tmp_path: Path, code: int = 0) -> str:
    script = tmp_path / "noisy.py"
    script.write_text(NOISY, encoding="utf-8")
    return f"{sys.executable} {script} {ESC_SECRET} {code}"


def _expected_log(name: str) -> bytes:
    mark = f"[redacted ${name}]".encode()
    return (b"out " + mark + b" done\nerr " + mark + b"\n" + b"x" * (2**20 - 30) + mark
            + b"\nend\n")


@posix_only
@pytest.mark.parametrize("code", [0, 3])
def test_escalate_log_holds_the_output_with_secrets_redacted(tmp_path: Path,
                                                              code: int) -> None:
    log = tmp_path / "run" / "escalate.log"
    log.parent.mkdir()
    res = run_escalate(_noisy(tmp_path, code), "{}", cwd=tmp_path, log_path=log, timeout=60,
                       redact=Redactor({ESC_SECRET: "API_KEY"}))
    assert res.ok is (code == 0), res.summary
    data = log.read_bytes()
    assert ESC_SECRET.encode() not in data
    assert data == _expected_log("API_KEY")
    assert sorted(p.name for p in log.parent.iterdir()) == ["escalate.log"]  # no leftover


@posix_only
def test_escalate_log_of_a_timed_out_command_is_redacted(tmp_path: Path) -> None:
    log = tmp_path / "escalate.log"
    res = run_escalate(f"echo before {ESC_SECRET}; sleep 30", "{}", cwd=tmp_path,
                       log_path=log, timeout=1, redact=Redactor({ESC_SECRET: "GH_TOKEN"}))
    assert not res.ok and "timed out" in res.summary
    assert log.read_bytes() == b"before [redacted $GH_TOKEN]\n"


@posix_only
@pytest.mark.parametrize("redact", [None, Redactor({})], ids=["none", "no-secrets"])
def test_escalate_log_without_secrets_to_redact_is_the_output(tmp_path: Path,
                                                              redact: Redactor | None) -> None:
    log = tmp_path / "escalate.log"
    res = run_escalate(_noisy(tmp_path), "{}", cwd=tmp_path, log_path=log, timeout=60,
                       redact=redact)
    assert res.ok, res.summary
    assert log.read_bytes() == _expected_log("API_KEY").replace(
        b"[redacted $API_KEY]", ESC_SECRET.encode())


@posix_only
def test_escalate_log_redacts_with_a_fresh_stream(tmp_path: Path) -> None:
    # A redactor that already holds back the start of a secret from another stream must not
    # leak those bytes into this log.
    redact = Redactor({ESC_SECRET: "API_KEY"})
    assert redact.stream(b"prefix sk-live-") == b""  # all held back
    log = tmp_path / "escalate.log"
    res = run_escalate(_noisy(tmp_path), "{}", cwd=tmp_path, log_path=log, timeout=60,
                       redact=redact)
    assert res.ok, res.summary
    assert log.read_bytes() == _expected_log("API_KEY")


class _FailingRedactor(Redactor):
    """A redactor whose stream fails (as a full disk would) once it has written a chunk."""

    def fresh(self) -> Redactor:
        return _FailingRedactor(self.secrets)

    def stream(self, chunk: bytes) -> bytes:
        if getattr(self, "_written", False):
            raise OSError(28, "No space left on device")
        self._written = True
        return super().stream(chunk)


@posix_only
def test_escalate_log_whose_redaction_fails_leaves_no_partial_copy(tmp_path: Path) -> None:
    log = tmp_path / "run" / "escalate.log"
    log.parent.mkdir()
    res = run_escalate(_noisy(tmp_path), "{}", cwd=tmp_path, log_path=log, timeout=60,
                       redact=_FailingRedactor({ESC_SECRET: "API_KEY"}))
    assert res.ok, res.summary  # the command's own outcome; never raises
    assert sorted(p.name for p in log.parent.iterdir()) == ["escalate.log"]


@posix_only
def test_escalate_command_that_deletes_its_log_does_not_raise(tmp_path: Path) -> None:
    log = tmp_path / "escalate.log"
    res = run_escalate(f"rm {log}; echo {ESC_SECRET}", "{}", cwd=tmp_path, log_path=log,
                       timeout=60, redact=Redactor({ESC_SECRET: "API_KEY"}))
    assert res.ok, res.summary
    # The command's output goes to a private folder first: the log it tried to delete is
    # written afterwards, redacted, and nothing else is left beside it.
    assert ESC_SECRET not in log.read_text() and "[redacted $API_KEY]" in log.read_text()
    assert list(tmp_path.iterdir()) == [log]


def test_the_documented_timeouts_are_the_ones_used() -> None:
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "loop.md").read_text(
        "utf-8").split())
    assert f"its {ESCALATE_TIMEOUT:g}-second timeout" in doc
    assert f"(but at least {ESCALATE_MIN_SECONDS:g} s)" in doc
    assert run_escalate.__kwdefaults__["timeout"] == ESCALATE_TIMEOUT


def test_a_first_iteration_that_changed_the_criteria_starts_the_count_at_one() -> None:
    result = states(step(1, "US-1", fail("US-1", "x"), tampered=True), breaker=2)
    st = result["US-1"]
    assert (st.streak, st.blocked, st.blocked_at, st.worked) == (1, "", 0, [1])
    result = states(step(1, "US-1", fail("US-1", "x"), tampered=True),
                    step(2, "US-1", fail("US-1", "y"), tampered=True), breaker=2)
    assert (result["US-1"].streak, result["US-1"].blocked_at) == (2, 2)


@posix_only
def test_escalate_log_is_the_whole_output_with_secrets_redacted(tmp_path: Path) -> None:
    token = "ghp_" + "Zq8" * 12
    secret = "tok-" + "x9Y" * 8
    log = tmp_path / "e.log"
    lines = [f"line {i} {token} {secret}" for i in range(3000)]  # more than one read
    script = tmp_path / "print.py"
    script.write_text("import sys\n" + "".join(f"print({line!r})\n" for line in lines)
                      + f"sys.stderr.write('err ' + {secret!r} + '\\n')\n")
    res = run_escalate(f"{sys.executable} -u {script}", "{}", cwd=tmp_path, log_path=log,
                       timeout=60, redact=Redactor({secret: "MY_TOKEN"}))
    assert res.ok, log.read_text()
    want = [f"line {i} [redacted GitHub token] [redacted $MY_TOKEN]" for i in range(3000)]
    assert log.read_text().splitlines() == [*want, "err [redacted $MY_TOKEN]"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.log", "print.py"]


@posix_only
def test_escalate_log_without_a_redactor_is_kept_as_printed(tmp_path: Path) -> None:
    # redact=None is documented as "kept as printed": not even the well-known shapes are
    # replaced (the loop always passes its own redactor: test_agent_outcomes.py).
    token = "ghp_" + "Zq8" * 12
    log = tmp_path / "escalate.log"
    res = run_escalate(f"echo {token}", "{}", cwd=tmp_path, log_path=log, timeout=60)
    assert res.ok, res.summary
    assert log.read_text() == f"{token}\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/$$/fd")
def test_escalate_command_that_swaps_its_private_folder_for_a_link_does_not_make_it_raise(
        tmp_path: Path) -> None:
    # The command finds the private folder of its raw log through its own stdout and puts a
    # symbolic link to another folder in its place: the escalation still returns a result
    # (it never raises for a command), and nothing is removed through the link.
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file.txt").write_text("mine")
    where = tmp_path / "where"
    log = tmp_path / "escalate.log"
    command = (f'd="$(dirname "$(readlink /proc/$$/fd/1)")"; echo "$d" > {where}; '
               f'rm -rf "$d"; ln -s {keep} "$d"; echo gone')
    try:
        res = run_escalate(command, "{}", cwd=tmp_path, log_path=log, timeout=60)
        assert res.ok and "ran" in res.summary, res.summary
        assert log.is_file()
        assert (keep / "file.txt").read_text() == "mine"
    finally:
        link = Path(where.read_text().strip())
        if link.is_symlink():
            link.unlink()
