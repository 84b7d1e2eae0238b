"""Unit tests of pytest_ralph.redact: which variables hold secrets, and redaction of text and
of a byte stream cut into arbitrary chunks.

The central property: for any way of cutting a byte string into chunks, the concatenation
of :meth:`Redactor.stream` over the chunks plus :meth:`Redactor.flush` equals
:meth:`Redactor.text` of the whole (hypothesis is not installed in the dev venv, so the
splits are enumerated exhaustively on small inputs and drawn from a seeded RNG on larger
ones).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

import pytest

from pytest_ralph.redact import MIN_SECRET_CHARS, SECRET_NAME_PARTS, Redactor, secret_values

# --- secret_values -----------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "ANTHROPIC_API_KEY", "api_key", "Gh_Token", "GH_TOKEN", "client_secret", "SECRET",
    "DB_PASSWORD", "password", "MONKEY_BUSINESS", "KEYS", "x_pAsSwOrD_y",
])
def test_names_containing_a_marker_in_any_case_are_secret(name: str) -> None:
    assert secret_values({name: "s3cr3t-value"}) == {"s3cr3t-value": name}


@pytest.mark.parametrize("name", ["PATH", "HOME", "USER", "PASS", "TOKN", "KY", "AUTH"])
def test_other_names_are_not_secret(name: str) -> None:
    assert secret_values({name: "s3cr3t-value"}) == {}


def test_secret_name_parts_are_the_documented_ones() -> None:
    assert SECRET_NAME_PARTS == ("KEY", "TOKEN", "SECRET", "PASSWORD")


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
    r = Redactor({})
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


def test_no_secrets_stream_is_identity_without_hold_back() -> None:
    r = Redactor({})
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
