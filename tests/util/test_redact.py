"""Unit tests of pytest_ralph.util.redact: which variables hold secrets, and redaction of text and
of a byte stream cut into arbitrary chunks.

The central property: for any way of cutting a byte string into chunks, the concatenation
of :meth:`Redactor.stream` over the chunks plus :meth:`Redactor.flush` equals
:meth:`Redactor.text` of the whole (hypothesis is not installed in the dev venv, so the
splits are enumerated exhaustively on small inputs and drawn from a seeded RNG on larger
ones).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from xml.etree import ElementTree

import pytest

from pytest_ralph.util import redact
from pytest_ralph.util.redact import (
    MIN_SECRET_CHARS,
    SECRET_NAME_PARTS,
    SECRET_NAME_WORDS,
    Redactor,
    secret_values,
)

# --- secret_values -----------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "ANTHROPIC_API_KEY", "api_key", "Gh_Token", "GH_TOKEN", "client_secret", "SECRET",
    "DB_PASSWORD", "password", "MONKEY_BUSINESS", "KEYS", "x_pAsSwOrD_y",
])
def test_names_containing_a_marker_in_any_case_are_secret(name: str) -> None:
    assert secret_values({name: "s3cr3t-value"}) == {"s3cr3t-value": name}


@pytest.mark.parametrize("name", [
    "GH_PAT", "pat", "SMTP_PASS", "pass", "NPM_AUTH", "auth_header", "GOOGLE_CREDENTIALS",
    "AWS_CREDENTIAL_FILE", "SSH_PRIVATE", "GPG_PASSPHRASE", "DB_PASSWD", "X2_PAT_Y",
    "DEPLOY-PASS"])
def test_new_name_parts_and_words_are_secret(name: str) -> None:
    assert secret_values({name: "s3cr3t-value"}) == {"s3cr3t-value": name}


@pytest.mark.parametrize("name", ["PATH", "PYTHONPATH", "HOME", "USER", "TOKN", "KY",
                                  "PASSTHROUGH", "COMPASS", "GIT_AUTHOR_NAME", "AUTHOR",
                                  "XAUTHORITY", "PATTERN", "SPATIAL", "BYPASS_CACHE"])
def test_other_names_are_not_secret(name: str) -> None:
    assert secret_values({name: "s3cr3t-value"}) == {}


def test_secret_name_parts_are_the_documented_ones() -> None:
    assert SECRET_NAME_PARTS == ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE",
                                 "CREDENTIAL", "PRIVATE")
    assert SECRET_NAME_WORDS == ("PAT", "PASS", "AUTH")


def test_values_shorter_than_min_secret_chars_are_ignored() -> None:
    short = "x" * (MIN_SECRET_CHARS - 1)
    exact = "y" * MIN_SECRET_CHARS
    assert secret_values({"A_KEY": short, "B_KEY": exact}) == {exact: "B_KEY"}


@pytest.mark.parametrize("value", ["", "1", "true", "  ab  ", " " * 20, "\t\n abc \n\t  "])
def test_short_or_blank_values_are_ignored(value: str) -> None:
    assert secret_values({"GH_TOKEN": value}) == {}


def test_length_is_counted_without_surrounding_blanks_but_the_value_is_kept_whole() -> None:
    value = "  abcdefgh  "
    assert secret_values({"GH_TOKEN": value}) == {value: "GH_TOKEN"}


def test_duplicate_values_keep_the_first_name_in_sorted_order() -> None:
    env = {"Z_TOKEN": "same-value-1", "A_KEY": "same-value-1", "M_SECRET": "same-value-1",
           "B_PASSWORD": "other-value"}
    assert secret_values(env) == {"same-value-1": "A_KEY", "other-value": "B_PASSWORD"}


def test_default_is_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_RALPH_TEST_TOKEN", "from-the-environment")
    monkeypatch.setenv("PYTEST_RALPH_TEST_PLAIN", "not-a-secret-value")
    found = secret_values()
    assert found["from-the-environment"] == "PYTEST_RALPH_TEST_TOKEN"
    assert "not-a-secret-value" not in found
    assert Redactor.from_env().text("x from-the-environment y") == (
        "x [redacted $PYTEST_RALPH_TEST_TOKEN] y")


def test_from_env_takes_a_mapping() -> None:
    r = Redactor.from_env({"GH_TOKEN": "ghp_0123456789", "PATH": "/usr/bin:/bin"})
    assert r.active
    assert r.secrets == {"ghp_0123456789": "GH_TOKEN"}


def test_non_utf8_environment_value_is_matched_as_its_bytes() -> None:
    # os.environ decodes undecodable bytes with surrogateescape; the redactor must not
    # raise UnicodeEncodeError on such a value, and must match the original bytes.
    raw = b"abc\xff\xfedefghij"
    value = raw.decode("utf-8", "surrogateescape")
    r = Redactor.from_env({"ODD_KEY": value})
    assert r.stream(b"<" + raw + b">") + r.flush() == b"<[redacted $ODD_KEY]>"
    assert r.text(f"<{value}>") == "<[redacted $ODD_KEY]>"


# --- Redactor.text -------------------------------------------------------------------------


def test_text_replaces_every_occurrence_with_the_variable_name() -> None:
    r = Redactor({"hunter2hunter2": "DB_PASSWORD", "ghp_abcdefgh": "GH_TOKEN"})
    assert r.text("pw=hunter2hunter2 tok=ghp_abcdefgh again hunter2hunter2") == (
        "pw=[redacted $DB_PASSWORD] tok=[redacted $GH_TOKEN] again [redacted $DB_PASSWORD]")


def test_text_prefers_the_longest_secret() -> None:
    r = Redactor({"abcdefgh": "SHORT_KEY", "abcdefghijkl": "LONG_KEY"})
    assert r.text("abcdefghijkl abcdefghij") == (
        "[redacted $LONG_KEY] [redacted $SHORT_KEY]ij")


def test_text_escapes_regex_metacharacters() -> None:
    r = Redactor({"a.b*c+d?(e)[f]|g\\h$": "WEIRD_SECRET"})
    assert r.text("xa.b*c+d?(e)[f]|g\\h$y") == "x[redacted $WEIRD_SECRET]y"
    assert r.text("aXbbbcdde)[f]|g\\h$") == "aXbbbcdde)[f]|g\\h$"


def test_unicode_secret_in_text() -> None:
    r = Redactor({"pässwörd€🔑ü": "UNI_PASSWORD"})
    assert r.text("→pässwörd€🔑ü←") == "→[redacted $UNI_PASSWORD]←"


def test_no_secrets_text_is_identity() -> None:
    r = Redactor({}, shapes=False)
    assert not r.active
    text = "anything at all, even [redacted $X]"
    assert r.text(text) is text


# --- Redactor.stream and flush -------------------------------------------------------------


def _streamed(r: Redactor, chunks: Sequence[bytes]) -> bytes:
    out = [r.stream(c) for c in chunks]
    out.append(r.flush())
    return b"".join(out)


def _cut(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def _all_splits(data: bytes) -> Iterator[list[bytes]]:
    """Every way of cutting ``data`` into non-empty chunks (2 ** (len - 1) of them)."""
    n = len(data)
    for mask in range(1 << max(n - 1, 0)):
        yield _cut(data, [i + 1 for i in range(n - 1) if mask >> i & 1])


def _expected(secrets: dict[str, str], data: bytes) -> bytes:
    return Redactor(secrets).text(data.decode("utf-8")).encode("utf-8")


#: Secrets chosen to be awkward: B has A as a prefix, C has A as a suffix, D overlaps A's
#: tail, E is a run of one letter (overlapping occurrences), F is the longest.
AWKWARD = {
    "abcdefgh": "A_KEY",
    "abcdefghijkl": "B_TOKEN",
    "qqabcdefgh": "C_SECRET",
    "efghmnop": "D_PASSWORD",
    "zzzzzzzz": "E_KEY",
    "0123456789abcdefghijklmnopqrstuv": "F_TOKEN",
}

#: A text holding all of them in awkward arrangements.
AWKWARD_TEXT = (
    b"<abcdefghijkl|qqabcdefgh|abcdefghmnop|zzzzzzzzzzz|abcdefghij|"
    b"0123456789abcdefghijklmnopqrstuv|abcdefgabcdefgh|qqabcdefghijkl>"
)


def test_awkward_text_reference() -> None:
    # Pin text() itself so the stream comparisons below compare against the right thing.
    assert Redactor(AWKWARD).text(AWKWARD_TEXT.decode()) == (
        "<[redacted $B_TOKEN]|[redacted $C_SECRET]|[redacted $A_KEY]mnop|"
        "[redacted $E_KEY]zzz|[redacted $A_KEY]ij|[redacted $F_TOKEN]|"
        "abcdefg[redacted $A_KEY]|[redacted $C_SECRET]ijkl>")


def test_stream_in_one_chunk_equals_text() -> None:
    assert _streamed(Redactor(AWKWARD), [AWKWARD_TEXT]) == _expected(AWKWARD, AWKWARD_TEXT)


def test_stream_chunk_size_one() -> None:
    chunks = [AWKWARD_TEXT[i:i + 1] for i in range(len(AWKWARD_TEXT))]
    assert _streamed(Redactor(AWKWARD), chunks) == _expected(AWKWARD, AWKWARD_TEXT)


@pytest.mark.parametrize("size", [2, 3, 5, 7, 8, 9, 11, 12, 13, 31, 32, 33, 64])
def test_stream_fixed_chunk_sizes(size: int) -> None:
    chunks = [AWKWARD_TEXT[i:i + size] for i in range(0, len(AWKWARD_TEXT), size)]
    assert _streamed(Redactor(AWKWARD), chunks) == _expected(AWKWARD, AWKWARD_TEXT)


def test_stream_every_split_into_up_to_three_chunks_and_secrets_over_three_chunks() -> None:
    # All 1-, 2- and 3-chunk splits of the awkward text (every secret also lands split over
    # three chunks in some of them), plus empty chunks at every cut.
    data = AWKWARD_TEXT
    want = _expected(AWKWARD, data)
    n = len(data)
    checked = 0
    for k in (0, 1, 2):
        for cuts in itertools.combinations(range(1, n), k):
            r = Redactor(AWKWARD)
            assert _streamed(r, _cut(data, cuts)) == want, cuts
            checked += 1
    for cut in range(n + 1):
        assert _streamed(Redactor(AWKWARD), [b"", data[:cut], b"", data[cut:], b""]) == want
    assert checked == 1 + (n - 1) + (n - 1) * (n - 2) // 2


def test_a_secret_split_over_three_chunks() -> None:
    r = Redactor({"0123456789abcdefghijklmnopqrstuv": "F_TOKEN"})
    out = [r.stream(b"head 0123456789"), r.stream(b"abcdefghij"),
           r.stream(b"klmnopqrstuv tail")]
    out.append(r.flush())
    assert b"".join(out) == b"head [redacted $F_TOKEN] tail"
    assert b"0123" not in out[0]  # the start of the secret was held back


@pytest.mark.parametrize("data", [
    b"abcdefghijkl",  # B, with A as its prefix
    b"xqqabcdefghy",  # C, with A as its suffix
    b"abcdefghmnop",  # A then D would overlap: A wins (leftmost)
    b"zzzzzzzzzzzz",  # overlapping occurrences of E
    b"qqabcdefghij",  # C then B's tail
    b"abcdefgabcdefgh",  # a false start, then A
])
def test_stream_every_split_of_short_texts(data: bytes) -> None:
    want = _expected(AWKWARD, data)
    for chunks in _all_splits(data):
        assert _streamed(Redactor(AWKWARD), chunks) == want, chunks


def test_stream_random_texts_and_random_splits() -> None:
    # Small alphabet, so secrets, their prefixes and overlaps occur often.
    rng = random.Random(20240611)
    for _ in range(1500):
        secrets: dict[str, str] = {}
        for i in range(rng.randint(1, 4)):
            secrets.setdefault("".join(rng.choice("ab") for _ in range(rng.randint(1, 6))),
                               f"S{i}_KEY")
        if rng.random() < 0.5:  # one secret a prefix / suffix of another
            base = rng.choice(list(secrets))
            secrets.setdefault(base + rng.choice(["a", "b", "ab"]), "PRE_KEY")
            secrets.setdefault(rng.choice(["a", "b", "ba"]) + base, "SUF_KEY")
        data = "".join(rng.choice("aab") for _ in range(rng.randint(0, 40))).encode()
        want = _expected(secrets, data)
        cuts = sorted(rng.sample(range(1, len(data)), min(rng.randint(0, 8),
                                                          max(len(data) - 1, 0))))
        r = Redactor(secrets)
        assert _streamed(r, _cut(data, cuts)) == want, (secrets, data, cuts)
        r = Redactor(secrets)
        assert _streamed(r, [data[i:i + 1] for i in range(len(data))]) == want


def test_stream_unicode_secrets_split_inside_characters() -> None:
    secrets = {"pässwörd€🔑ü": "UNI_PASSWORD", "🔑🔑🔑🔑🔑🔑🔑🔑": "EMOJI_TOKEN",
               "ünïcödé-ünïcödé": "UNI_KEY"}
    text = "→pässwörd€🔑ü←🔑🔑🔑🔑🔑🔑🔑🔑🔑|ünïcödé-ünïcödé-ünïcödé|pässwörd€🔑"
    data = text.encode("utf-8")
    want = Redactor(secrets).text(text).encode("utf-8")
    assert want.count(b"[redacted $") == 3  # the last one lacks its final "ü"
    assert want.endswith("|pässwörd€🔑".encode())
    for size in range(1, 12):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        assert _streamed(Redactor(secrets), chunks) == want, size
    for cut1, cut2 in itertools.combinations(range(1, len(data)), 2):
        assert _streamed(Redactor(secrets), _cut(data, [cut1, cut2])) == want


def test_flush_ends_the_stream_and_resets() -> None:
    r = Redactor({"abcdefgh": "A_KEY"})
    assert r.stream(b"xx abcdefg") == b"xx "  # "abcdefg" could start the secret
    assert r.flush() == b"abcdefg"  # the stream ended: it never did
    assert r.flush() == b""
    assert r.stream(b"habcdefgh") + r.flush() == b"h[redacted $A_KEY]"


def test_flush_redacts_a_secret_at_the_very_end() -> None:
    r = Redactor({"abcdefgh": "A_KEY", "abcdefghijkl": "B_TOKEN"})
    out = r.stream(b"end: abcdefgh")
    assert out == b"en"  # keep = 11 bytes held back: A could still become B
    assert r.flush() == b"d: [redacted $A_KEY]"


def test_fresh_has_the_same_secrets_and_its_own_state() -> None:
    r = Redactor(AWKWARD)
    r.stream(b"abcdef")
    f = r.fresh()
    assert f.secrets == r.secrets
    assert f.flush() == b""
    assert r.flush() == b"abcdef"


def test_a_redactor_keeps_the_secrets_it_was_made_with() -> None:
    # The mapping it was given may change afterwards (the loop builds it from the
    # environment): the redactor and every fresh one of it redact what it was given.
    given = {"hunter2hunter2": "DB_PASSWORD"}
    r = Redactor(given, shapes=False)
    given.clear()
    given["other-value-1"] = "OTHER_TOKEN"
    for each in (r, r.fresh()):
        assert each.text("pw hunter2hunter2 other-value-1") == (
            "pw [redacted $DB_PASSWORD] other-value-1")


def test_stream_sees_the_byte_before_a_chunk_a_shape_starts() -> None:
    # Without environment secrets nothing is held back between chunks, but a shape's
    # "standing alone" still sees the byte the last chunk ended with.
    token = b"ghp_" + b"aB3" * 12
    r = Redactor({})
    assert r.stream(b"word") + r.stream(token + b" end") + r.flush() == b"word" + token + b" end"
    r = Redactor({})
    assert r.stream(b"word ") + r.stream(token) + r.flush() == b"word [redacted GitHub token]"


def test_no_secrets_stream_is_identity_without_hold_back() -> None:
    r = Redactor({}, shapes=False)
    for chunk in (b"a", b"", b"\xff\xfe partial utf-8 \xe2\x82", b"x" * 100_000):
        assert r.stream(chunk) is chunk
    assert r.flush() == b""


def test_hold_back_is_bounded_by_the_longest_secret() -> None:
    r = Redactor(AWKWARD)
    longest = max(len(s.encode()) for s in AWKWARD)
    assert r.keep == longest - 1
    rng = random.Random(7)
    total_in = 0
    total_out = 0
    for _ in range(2000):
        chunk = bytes(rng.choice(b"abcdefghqz \n") for _ in range(rng.randint(0, 300)))
        out = r.stream(chunk)
        total_in += len(chunk)
        total_out += len(out)
        assert len(r._carry) <= r.keep  # never more than keep bytes held between calls
    assert total_out + len(r.flush()) >= total_in - r.keep


def test_big_chunk_without_secrets_is_passed_on_except_the_tail() -> None:
    r = Redactor({"abcdefgh": "A_KEY"})
    chunk = b"x" * 5_000_000
    out = r.stream(chunk)
    assert len(out) == len(chunk) - r.keep
    assert len(r._carry) == r.keep
    assert out + r.flush() == chunk


def test_held_back_bytes_never_grow_with_stream_length() -> None:
    r = Redactor({"abcdefgh": "A_KEY"})
    held = set()
    for i in range(10_000):
        r.stream(b"abcdefg"[: i % 8])  # a prefix of the secret again and again
        held.add(len(r._carry))
    assert max(held) <= r.keep


# --- secrets recognised by the shape of their value ----------------------------------------

_RNG = random.Random(2026)
_B62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _rand(n: int, alphabet: str = _B62) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


GH_CLASSIC = "ghp_" + _rand(36)
GH_FINE = "github_pat_" + _rand(22) + "_" + _rand(59)
ANTHROPIC = "sk-ant-api03-" + _rand(93, _B62 + "-_") + "AA"
OPENAI_OLD = "sk-" + _rand(20) + "T3BlbkFJ" + _rand(20)
OPENAI_PROJ = "sk-proj-" + _rand(120, _B62 + "-_") + "A1a"
AWS = "AKIA" + _rand(16, _B62[:26] + "0123456789")
AWS_STS = "ASIA" + _rand(16, _B62[:26] + "0123456789")
SLACK = "xoxb-123456789012-1234567890123-" + _rand(24)
GOOGLE = "AIza" + _rand(35, _B62 + "-_")


@pytest.mark.parametrize(("token", "kind"), [
    (GH_CLASSIC, "GitHub token"), ("gho_" + _rand(36), "GitHub token"),
    ("ghu_" + _rand(36), "GitHub token"), ("ghs_" + _rand(36), "GitHub token"),
    ("ghr_" + _rand(36), "GitHub token"), (GH_FINE, "GitHub token"),
    (ANTHROPIC, "Anthropic key"), (OPENAI_OLD, "OpenAI key"), (OPENAI_PROJ, "OpenAI key"),
    (AWS, "AWS access key id"), (AWS_STS, "AWS access key id"), (SLACK, "Slack token"),
    ("xoxp-" + _rand(40, _B62 + "-"), "Slack token"), (GOOGLE, "Google API key"),
], ids=["ghp", "gho", "ghu", "ghs", "ghr", "github_pat", "sk-ant", "sk-old", "sk-proj", "AKIA",
        "ASIA", "xoxb", "xoxp", "AIza"])
def test_well_known_shapes_are_redacted_in_any_text(token: str, kind: str) -> None:
    r = Redactor({})
    for before, after in [("", ""), ("token=", "\n"), ('{"key": "', '"}'), ("(", ")"),
                          ("Bearer ", " end"), ("'", "',")]:
        assert r.text(f"{before}{token}{after}") == f"{before}[redacted {kind}]{after}"


@pytest.mark.parametrize("text", [
    "sk-learn", "scikit-learn", "task-123", "risk-free", "sk-" + "a" * 40,
    "sk-this-is-a-very-long-slug-of-a-package-name", "disk-" + _rand(40),
    "ghp_" + _rand(35), "xghp_" + _rand(36), "ghp_" + _rand(36) + "_more",
    "ghx_" + _rand(36), "github_pat_short", "AKIA" + _rand(15, "ABCDEFGH234567"),
    "AKIA" + _rand(17, "ABCDEFGH234567"), "akia" + _rand(16, "abcdefgh234567"),
    "XAKIA" + _rand(16, "ABCDEFGH234567"), "AIza" + _rand(34), "AIza" + _rand(36),
    "xoxb-123", "xoxq-1234567890-abcdefghij", "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "0f9c1c57-3d6b-4f5e-9a43-5a1a2b3c4d5e", "https://user@example.com/x",
    "http://localhost:8000/x", "git@github.com:org/repo.git", "ssh://git@host:22/repo",
    "mailto:ann@example.com", "https://example.com/a?b=c:d@e", "C:\\Users\\ann",
    "see https://example.com: then user@host", "time 12:30:45@UTC",
    "[redacted $GH_TOKEN] and postgres://u:[redacted $DB_URL]@db/x",
    "eyJhbGciOiJIUzI1NiJ9" + _rand(40),
], ids=lambda t: t[:24])
def test_near_misses_are_left_alone(text: str) -> None:
    assert Redactor({}).text(text) == text


@pytest.mark.parametrize(("prefix", "low", "high", "kind"), [
    ("ghp_", 36, 251, "GitHub token"), ("github_pat_", 36, 244, "GitHub token"),
    ("sk-ant-", 32, 248, "Anthropic key"), ("sk-", 32, 252, "OpenAI key"),
    ("AKIA", 16, 16, "AWS access key id"), ("xoxb-", 10, 250, "Slack token"),
    ("AIza", 35, 35, "Google API key"),
])
def test_each_shape_has_exactly_its_length_range(prefix: str, low: int, high: int,
                                                 kind: str) -> None:
    # A body of the fewest and of the most characters is a token; one fewer or one more is
    # not (standing alone, it is some other word).
    unit = "AB3" if prefix == "AKIA" else "aB3"
    r = Redactor({})
    for n in (low, high):
        token = prefix + (unit * n)[:n]
        assert r.text(f"x {token} y") == f"x [redacted {kind}] y", n
    for n in (low - 1, high + 1):
        text = f"x {prefix}{(unit * n)[:n]} y"
        assert r.text(text) == text, n


@pytest.mark.parametrize(("url", "shown"), [
    ("postgres://ralph:hunter2-long@db.example:5432/app",
     "postgres://ralph:[redacted password]@db.example:5432/app"),
    ("redis://:s3@cache:6379/0", "redis://:[redacted password]@cache:6379/0"),
    ("mysql+pymysql://app:p%40ss;w0rd!@10.0.0.2/db",
     "mysql+pymysql://app:[redacted password]@10.0.0.2/db"),
    ("amqp://guest:guest@localhost//", "amqp://guest:[redacted password]@localhost//"),
    (f"https://x-access-token:{GH_CLASSIC}@github.com/o/r.git",
     "https://x-access-token:[redacted GitHub token]@github.com/o/r.git"),
    (f"https://{GH_CLASSIC}:x-oauth-basic@github.com/o/r",
     "https://[redacted GitHub token]:[redacted password]@github.com/o/r"),
])
def test_only_the_password_of_a_url_is_redacted(url: str, shown: str) -> None:
    r = Redactor({})
    assert r.text(url) == shown
    assert r.text(f"DATABASE_URL='{url}' next") == f"DATABASE_URL='{shown}' next"


def test_shapes_off_redacts_the_given_values_only() -> None:
    r = Redactor({"hunter2hunter2": "DB_PASSWORD"}, shapes=False)
    text = f"{GH_CLASSIC} postgres://u:pw@h hunter2hunter2"
    assert r.text(text) == f"{GH_CLASSIC} postgres://u:pw@h [redacted $DB_PASSWORD]"


# --- secret_values: shapes in the environment ----------------------------------------------


def test_a_shaped_value_is_a_secret_of_its_variable_whatever_its_name() -> None:
    env = {"GH_X": GH_CLASSIC, "UPLOADER": AWS, "LLM": ANTHROPIC, "HOME": "/home/ann",
           "HEADER": f"Authorization: Bearer {OPENAI_PROJ}"}
    assert secret_values(env) == {GH_CLASSIC: "GH_X", AWS: "UPLOADER", ANTHROPIC: "LLM",
                                  OPENAI_PROJ: "HEADER"}
    r = Redactor.from_env(env)
    assert r.text(f"a {GH_CLASSIC} b {OPENAI_PROJ}") == "a [redacted $GH_X] b [redacted $HEADER]"


def test_the_password_of_a_url_in_the_environment_is_its_secret() -> None:
    env = {"DATABASE_URL": "postgres://u:hunter2-long@db/x", "SHORT_URL": "redis://:pw@r/0",
           "PLAIN_URL": "https://example.com/x"}
    assert secret_values(env) == {"hunter2-long": "DATABASE_URL"}
    r = Redactor.from_env(env)
    # In its URL (only the password), alone, and in another URL.
    assert r.text("postgres://u:hunter2-long@db/x") == "postgres://u:[redacted $DATABASE_URL]@db/x"
    assert r.text("connecting with hunter2-long") == "connecting with [redacted $DATABASE_URL]"
    assert r.text("redis://:pw@r/0 https://example.com/x") == (
        "redis://:[redacted password]@r/0 https://example.com/x")
    assert r.text("pw alone stays") == "pw alone stays"  # a short password only in its URL


def test_a_value_with_a_secret_name_is_redacted_whole_before_its_parts() -> None:
    env = {"DB_PASSWORD_URL": "postgres://u:hunter2-long@db/x"}
    assert secret_values(env) == {"postgres://u:hunter2-long@db/x": "DB_PASSWORD_URL",
                                  "hunter2-long": "DB_PASSWORD_URL"}
    assert Redactor.from_env(env).text("url postgres://u:hunter2-long@db/x") == (
        "url [redacted $DB_PASSWORD_URL]")


def test_a_url_password_known_from_the_environment_is_named_in_another_url() -> None:
    r = Redactor.from_env({"DATABASE_URL": "postgres://app:longpassword1@db/x"})
    assert r.text("mysql://admin:longpassword1@other:3306/y") == (
        "mysql://admin:[redacted $DATABASE_URL]@other:3306/y")


def test_a_value_shared_by_two_variables_is_named_after_the_first_in_sorted_order() -> None:
    token = "ghp_" + "aB3" * 12
    env = {"Z_DEPLOY": token, "A_DEPLOY": token, "M_URL": "postgres://u:longpassword1@db/x",
           "B_URL": "postgres://u:longpassword1@db/x"}
    assert secret_values(env) == {token: "A_DEPLOY", "longpassword1": "B_URL"}


# --- escaped forms, JSON values, restore ---------------------------------------------------


def test_a_secret_is_found_as_json_and_xml_escape_it() -> None:
    value = 'pa"ss&<w\\ord>é\tx'
    r = Redactor({value: "ODD_PASSWORD"}, shapes=False)
    label = "[redacted $ODD_PASSWORD]"
    assert r.text(json.dumps({"m": value})) == json.dumps({"m": label})
    assert r.text(json.dumps({"m": value}, ensure_ascii=False)) == json.dumps({"m": label})
    xml_text = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert r.text(f"<a>{xml_text}</a>") == f"<a>{label}</a>"
    attr = xml_text.replace('"', "&quot;").replace("\t", "&#09;")
    assert r.text(f'<f message="{attr}"/>') == f'<f message="{label}"/>'


def test_a_multi_line_secret_is_found_in_an_xml_attribute() -> None:
    # A private key in an environment variable, printed in a failure: a JUnit file holds it
    # in an attribute, its line ends and tabs escaped as character references.
    value = "-----BEGIN KEY-----\r\nMIIEvQ\tIBADAN\nBgkqhk\n-----END KEY-----"
    r = Redactor({value: "PRIVATE_KEY"}, shapes=False)
    xml = ElementTree.tostring(ElementTree.Element("failure", message=f"got {value}!"),
                               encoding="unicode")
    assert "&#10;" in xml and "&#13;" in xml and "&#09;" in xml
    assert r.text(xml) == '<failure message="got [redacted $PRIVATE_KEY]!" />'


def test_json_redacts_every_string_and_keeps_keys() -> None:
    r = Redactor({"hunter2hunter2": "DB_PASSWORD"})
    value = {"hunter2hunter2": ["x hunter2hunter2", ("t", GH_CLASSIC)], "n": 3, "b": None,
             "d": {"k": f"k={AWS}"}}
    assert r.json(value) == {"hunter2hunter2": ["x [redacted $DB_PASSWORD]",
                                                ["t", "[redacted GitHub token]"]],
                             "n": 3, "b": None, "d": {"k": "k=[redacted AWS access key id]"}}


def test_restore_puts_back_what_an_environment_variable_holds() -> None:
    env = {"GH_TOKEN": "tok-" + _rand(20), "DATABASE_URL": "postgres://u:hunter2-long@db/x"}
    r = Redactor.from_env(env)
    command = f"notify --token {env['GH_TOKEN']} --db {env['DATABASE_URL']}"
    stored = r.text(command)
    assert env["GH_TOKEN"] not in stored and "hunter2-long" not in stored
    assert r.restore(stored) == command
    assert r.restores(command)
    assert r.restore_json({"escalate": stored, "checks": [["a", stored]]}) == {
        "escalate": command, "checks": [["a", command]]}
    # A secret of no variable cannot come back; neither can a name the redactor lacks.
    assert not r.restores(f"notify {GH_CLASSIC}")
    assert r.restore("[redacted $NOT_SET] [redacted GitHub token]") == (
        "[redacted $NOT_SET] [redacted GitHub token]")


# --- the stream with shapes ----------------------------------------------------------------


#: Pieces of text that make shapes, near shapes and environment secrets meet and overlap.
PIECES = ["ghp_", "gh", "github_pat_", "sk-", "sk-ant-", "AKIA", "ASIA", "AIza", "xoxb-",
          "://", "u:", "pw", "@", "/", " ", "\n", "-", "_", "Zz9", "aB3" * 12, "Q1w" * 11,
          "A1B2C3D4E5F6G7H8", "hunter2-long", "x", ":", "é€"]
STREAM_SECRETS = {"hunter2-long": "DATABASE_URL", "Zz9aB3aB3": "A_KEY"}


def test_stream_with_shapes_equals_text_for_random_texts_and_splits() -> None:
    rng = random.Random(20261201)
    for _ in range(1500):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))
        data = text.encode()
        r = Redactor(STREAM_SECRETS)
        want = r.text(text).encode()
        cuts = sorted(rng.sample(range(1, len(data)), min(rng.randint(0, 10),
                                                          max(len(data) - 1, 0))))
        assert _streamed(r.fresh(), _cut(data, cuts)) == want, (text, cuts)
        if len(data) < 200:
            assert _streamed(r.fresh(), [data[i:i + 1] for i in range(len(data))]) == want


@pytest.mark.parametrize("text", [
    f"pat {GH_CLASSIC} end", f"{GH_FINE}", "url postgres://ralph:hunter2-long@db/x.",
    f"{AWS}{AWS}", f"x{AWS} {AWS}", f"{OPENAI_PROJ}\n{ANTHROPIC}", f"AIza {GOOGLE}",
    f"redis://:{GH_CLASSIC}@h", "ends with a prefix ghp_", "ends with gh", "ends with ://u:p",
])
def test_stream_every_split_in_two_and_three_with_shapes(text: str) -> None:
    data = text.encode()
    r = Redactor(STREAM_SECRETS)
    want = r.text(text).encode()
    for k in (1, 2):
        for cuts in itertools.combinations(range(1, len(data)), k):
            if k == 2 and cuts[0] % 7:  # every 3-chunk split would be slow: a sample
                continue
            assert _streamed(r.fresh(), _cut(data, cuts)) == want, cuts


def test_stream_holds_back_a_shape_that_reaches_the_end_of_the_chunk() -> None:
    r = Redactor({})
    assert r.stream(b"plain text, nothing to hold.\n") == b"plain text, nothing to hold.\n"
    assert r.stream(b"token " + GH_CLASSIC[:20].encode()) == b"token "
    assert r.stream(GH_CLASSIC[20:].encode() + b" done\n") == b"[redacted GitHub token] done\n"
    assert r.stream(b"a url https://u:pass") == b"a url https"  # the password may go on
    assert r.stream(b"word@host/\n") == b"://u:[redacted password]@host/\n"
    assert r.stream(b"ends in g") == b"ends in "  # "g" may start "ghp_"
    assert r.flush() == b"g"


def test_held_back_bytes_stay_bounded_with_shapes() -> None:
    r = Redactor({"abcdefgh": "A_KEY"})
    limit = max(r.keep, r.shape_keep)
    sent, got = [], []
    for i in range(3000):
        # A token prefix followed by body characters for ever: too long to be a token.
        chunk = b"ghp_" if i == 0 else b"aB3"[: i % 4]
        sent.append(chunk)
        got.append(r.stream(chunk))
        assert len(r._carry) <= limit
    got.append(r.flush())
    assert b"".join(got) == b"".join(sent)


def test_stream_is_fast_enough_for_big_agent_logs() -> None:
    line = (b'{"type":"assistant","message":{"content":[{"type":"text","text":"Editing '
            b'src/app.py: see https://example.com/docs?x=1 and task-123"}]}}\n')
    data = line * (8_000_000 // len(line))
    r = Redactor({"hunter2-long": "DATABASE_URL"})
    import time

    start = time.perf_counter()
    out = b"".join(r.stream(data[i:i + 65536]) for i in range(0, len(data), 65536))
    out += r.flush()
    took = time.perf_counter() - start
    assert out == data
    assert took < 20, f"8 MB took {took:.1f} s"  # about 0.2 s on one core


# --- files ---------------------------------------------------------------------------------


def test_redact_file_streams_any_size_and_secrets_across_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "FILE_CHUNK_BYTES", 7)
    src = tmp_path / "raw.log"
    src.write_bytes(b"\xff\xfe " + f"a {GH_CLASSIC} b hunter2-long c".encode() * 50)
    dst = tmp_path / "out" / "check.log"
    dst.parent.mkdir()
    r = Redactor(STREAM_SECRETS)
    redact.redact_file(src, dst, r)
    assert dst.read_bytes() == b"\xff\xfe " + (
        b"a [redacted GitHub token] b [redacted $DATABASE_URL] c" * 50)
    assert sorted(p.name for p in dst.parent.iterdir()) == ["check.log"]
    redact.redact_file(src, src, r)  # in place
    assert src.read_bytes() == dst.read_bytes()


def test_redact_json_file_keeps_it_valid_json(tmp_path: Path) -> None:
    data = {"criteria": [{"message": "x://u:pw", "text": "c@d"},
                         {"message": f"token {GH_CLASSIC}", "hunter2-long": "hunter2-long"}],
            "errors": ["postgres://u:hunter2-long@db/x"]}
    src = tmp_path / "check.json"
    src.write_text(json.dumps(data, separators=(",", ":")))  # compact: "pw","text":"c@d"
    dst = tmp_path / "copy.json"
    redact.redact_json_file(src, dst, Redactor(STREAM_SECRETS))
    assert json.loads(dst.read_text()) == {
        "criteria": [{"message": "x://u:pw", "text": "c@d"},
                     {"message": "token [redacted GitHub token]",
                      "hunter2-long": "[redacted $DATABASE_URL]"}],
        "errors": ["postgres://u:[redacted $DATABASE_URL]@db/x"]}


def test_redact_json_file_copies_a_broken_file_as_redacted_bytes(tmp_path: Path) -> None:
    src = tmp_path / "check.json"
    src.write_bytes(b'{"half": "hunter2-long ' + GH_CLASSIC.encode())
    dst = tmp_path / "copy.json"
    redact.redact_json_file(src, dst, Redactor(STREAM_SECRETS))
    assert dst.read_bytes() == b'{"half": "[redacted $DATABASE_URL] [redacted GitHub token]'
