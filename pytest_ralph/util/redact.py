"""Secret redaction: what the loop writes (files, history rows, the console) never holds a
secret.

What is a secret
----------------

1. **By name**: the value of an environment variable whose name contains ``KEY``, ``TOKEN``,
   ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL`` or ``PRIVATE``
   (:data:`SECRET_NAME_PARTS`), or has ``PAT``, ``PASS`` or ``AUTH`` as one of its
   ``_``-separated parts (:data:`SECRET_NAME_WORDS`: ``GH_PAT``, ``SMTP_PASS``,
   ``NPM_AUTH``, but not ``PATH``, ``PASSTHROUGH`` or ``GIT_AUTHOR_NAME``), any case, whose
   value is at least :data:`MIN_SECRET_CHARS` characters long (shorter values such as ``1``
   or ``true`` would blank out ordinary text). Each occurrence of the value is replaced by
   ``[redacted $NAME]``.
2. **By shape**, wherever it appears, in the environment or not (a token hard-coded in a
   test and printed in a failure, say): the well-known formats of :data:`SHAPES`, each with
   its exact prefix, character set and length range and standing alone (not inside a
   longer word): GitHub tokens (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, 36 or more
   letters and digits; ``github_pat_``), Anthropic keys (``sk-ant-``), OpenAI keys (``sk-``
   and 32 or more of ``[A-Za-z0-9_-]`` holding a digit, a capital and a small letter, so
   that ``sk-learn`` or a long slug is left alone), AWS access key ids (``AKIA`` or
   ``ASIA`` and 16 capitals or digits), Slack tokens (``xoxa-``, ``xoxb-``, ``xoxp-``,
   ``xoxr-``, ``xoxs-``, ``xoxo-``) and Google API keys (``AIza`` and 35 characters). Each is
   replaced by ``[redacted <kind>]`` (``[redacted GitHub token]``), or by ``[redacted
   $NAME]`` when it is the value of an environment variable ``NAME``.
3. **The password of a URL** (``scheme://user:password@host``), wherever it appears: only
   the password is replaced (``postgres://ralph:[redacted password]@db/app``), so the URL
   stays readable; the user part goes through the other rules.

A value of *any* environment variable that holds a shape, or a URL with a password, makes
that token (or password, when it has :data:`MIN_SECRET_CHARS` characters or more) a secret
of that variable: ``GH_PAT=ghp_...`` and ``DATABASE_URL=postgres://u:pw@db/x`` are
redacted as ``[redacted $GH_PAT]`` and ``[redacted $DATABASE_URL]`` everywhere, also where
the value appears out of its shape (a password alone in a log line).

A value is also recognised as JSON and XML escape it (``"`` as ``\\"`` or ``&quot;``,
``&`` as ``&amp;``, non-ASCII as ``\\u00e9``): ``check.json``, ``check.xml`` and the history's
JSON columns are covered. A secret that is printed otherwise encoded (base64, URL-encoded,
split by other text) is not recognised.

Where it applies
----------------

:class:`Redactor` works on text (:meth:`Redactor.text`), on JSON values
(:meth:`Redactor.json`: every string, mapping keys kept), on files (:func:`redact_file`,
:func:`redact_json_file`) and on a byte stream cut into arbitrary chunks
(:meth:`Redactor.stream`), which holds back only the bytes that could still be the start of
a secret: the last ``len(longest secret) - 1`` bytes when there are environment secrets, plus
from the start of a token or URL prefix that reaches the end of the chunk (at most
:data:`MAX_SHAPE_CHARS` + 1 bytes); memory stays flat for any output size. The loop applies
it to the agent's log, prompts, ``progress.txt``, reports, the console, ``run.json``, every
text column of the history (``ralph.db``), and the check phase's ``check.log``,
``check.json``, ``check.xml`` and ``--junitxml`` copy (the child pytest writes its raw output
into a private temporary folder, mode 0700, removed when the phase ends; only redacted copies
reach the state folder).

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AnyStr

#: Parts of an environment variable name (anywhere in it) that mark its value as a secret.
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE",
                     "CREDENTIAL", "PRIVATE")

#: Words of an environment variable name (between ``_``, ``-``, ``.`` or digits) that mark its
#: value as a secret: ``GH_PAT``, ``SMTP_PASS``, ``NPM_AUTH``, not ``PATH`` or ``AUTHOR``.
SECRET_NAME_WORDS = ("PAT", "PASS", "AUTH")

#: Values shorter than this many characters are not treated as secrets by name (nor is a
#: shorter URL password outside its URL).
MIN_SECRET_CHARS = 8

#: Characters that may not appear in the user or password of a URL as recognised here
#: (ASCII whitespace, the delimiters ``/`` and ``@``, and what JSON, XML and shells quote).
_URL_STOP = r" \t\n\r\f\v/@\"<>\\`"

#: The URL password pattern: ``://``, a user (maybe empty), ``:``, the password, ``@``.
_URL = (rf"(?<=[A-Za-z0-9+.\-])://(?P<user>[^{_URL_STOP}:]{{0,128}}):"
        rf"(?P<pw>[^{_URL_STOP}]{{1,256}})@")
_URL_PARTIAL = (rf"(?<=[A-Za-z0-9+.\-])(?::|:/|://[^{_URL_STOP}:]{{0,128}}"
                rf"(?::[^{_URL_STOP}]{{0,256}})?)")
_URL_CORE = rf"://[^{_URL_STOP}:]{{0,128}}:[^{_URL_STOP}]{{1,256}}@"
_URL_CHARS = 3 + 128 + 1 + 256 + 1


@dataclass(frozen=True)
class Shape:
    """A well-known secret format.

    Attributes:
        kind: what it is, in ``[redacted <kind>]`` (``"GitHub token"``).
        pattern: the regular expression of one token (ASCII only; the same for text and
            bytes), standing alone.
        partial: a regular expression that matches every non-empty beginning of a token
            (and a whole token that more characters could extend): the stream holds back
            from where it matches up to the end of a chunk.
        chars: the most characters a token has.
        prefixes: the literal beginnings of a token (every token starts with one).
        core: a plain expression every token starts with (its prefix and the fewest body
            characters, no look-around), which Python's engine scans for quickly.
    """

    kind: str
    pattern: str
    partial: str
    chars: int
    prefixes: tuple[str, ...]
    core: str


def _token(kind: str, before: str, prefixes: tuple[str, ...], body: str, low: int, high: int,
           *, extra: str = "") -> Shape:
    """A :class:`Shape` of ``prefix + body{low,high}``, not preceded or followed by a
    character of ``before`` (a character class body); ``extra`` is a lookahead put after the
    prefix (conditions on the body)."""
    alts = "|".join(prefixes)
    begins: set[str] = set()
    for p in prefixes:
        begins.update(re.escape(p[:i]) for i in range(1, len(p)))
    partial = f"(?<![{before}])(?:{'|'.join(sorted(begins))}|(?:{alts}){body}{{0,{high}}})"
    return Shape(kind, f"(?<![{before}])(?:{alts}){extra}{body}{{{low},{high}}}(?![{before}])",
                 partial, max(len(p) for p in prefixes) + high, prefixes,
                 f"(?:{alts}){body}{{{low}}}")


#: The well-known formats redacted wherever they appear (see the module docstring).
SHAPES: tuple[Shape, ...] = (
    _token("GitHub token", "A-Za-z0-9_", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
           "[A-Za-z0-9]", 36, 251),
    _token("GitHub token", "A-Za-z0-9_", ("github_pat_",), "[A-Za-z0-9_]", 36, 244),
    _token("Anthropic key", r"A-Za-z0-9_\-", ("sk-ant-",), r"[A-Za-z0-9_\-]", 32, 248),
    _token("OpenAI key", r"A-Za-z0-9_\-", ("sk-",), r"[A-Za-z0-9_\-]", 32, 252,
           extra=(r"(?!ant-)(?=[A-Za-z0-9_\-]{0,251}[0-9])(?=[A-Za-z0-9_\-]{0,251}[A-Z])"
                  r"(?=[A-Za-z0-9_\-]{0,251}[a-z])")),
    _token("AWS access key id", "A-Za-z0-9", ("AKIA", "ASIA"), "[A-Z0-9]", 16, 16),
    _token("Slack token", r"A-Za-z0-9_\-", ("xoxa-", "xoxb-", "xoxo-", "xoxp-", "xoxr-",
                                            "xoxs-"), r"[A-Za-z0-9\-]", 10, 250),
    _token("Google API key", r"A-Za-z0-9_\-", ("AIza",), r"[A-Za-z0-9_\-]", 35, 35),
)

#: The most characters a shape match (or a URL's ``://user:password@``) spans.
MAX_SHAPE_CHARS = max(_URL_CHARS, *(s.chars for s in SHAPES))

#: The longest literal beginning of a shape (``github_pat_``).
MAX_PREFIX_CHARS = max(len(p) for s in SHAPES for p in s.prefixes)

#: The bytes a shape's prefix (or a URL's ``://``) starts with.
_FIRST_BYTES = frozenset(ord(p[0]) for s in SHAPES for p in s.prefixes) | {ord(":")}

#: What a redacted URL password says when it is no environment variable's.
URL_PASSWORD_KIND = "password"

_SHAPE_RE = re.compile("|".join(f"(?P<s{i}>{s.pattern})" for i, s in enumerate(SHAPES))
                       + f"|(?P<url>{_URL})")
_LABEL = re.compile(r"\[redacted \$([A-Za-z_][A-Za-z0-9_]*)\]")


def _is_secret_name(name: str) -> bool:
    upper = name.upper()
    if any(part in upper for part in SECRET_NAME_PARTS):
        return True
    return any(w in SECRET_NAME_WORDS for w in re.split(r"[^A-Z]+", upper))


def secret_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets of ``env`` (default ``os.environ``): value -> variable name.

    The whole value of a variable with a secret name (rule 1 of the module docstring), and
    every shaped token and URL password (of :data:`MIN_SECRET_CHARS` characters or more) in
    the value of any variable. When two variables hold the same value, the first name in
    sorted order is kept.
    """
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        if _is_secret_name(name) and len(value.strip()) >= MIN_SECRET_CHARS:
            out.setdefault(value, name)
    for name in sorted(env):
        for m in _SHAPE_RE.finditer(env[name]):
            part = m.group("pw") if m.lastgroup == "url" else m.group(0)
            if len(part) >= MIN_SECRET_CHARS:
                out.setdefault(part, name)
    return out


def _variants(value: str) -> set[str]:
    """``value`` as it is and as JSON and XML escape it."""
    xml_text = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    xml_attr = (xml_text.replace('"', "&quot;").replace("\n", "&#10;").replace("\r", "&#13;")
                .replace("\t", "&#09;"))
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
            xml_text, xml_attr, xml_attr.replace("&#09;", "&#9;")}


def _encode(text: str) -> bytes:
    # surrogateescape: a value os.environ decoded from non-UTF-8 bytes is matched as those
    # bytes (plain UTF-8 would raise UnicodeEncodeError).
    return text.encode("utf-8", "surrogateescape")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


class Redactor:
    """Replaces secrets with ``[redacted $NAME]`` or ``[redacted <kind>]``.

    Matching is in two steps, for speed (the agent's whole log streams through it): a plain
    regular expression (the secret values and each shape's :attr:`Shape.core`, no
    look-around, which Python's engine scans for quickly) finds where a secret may start,
    and only there the full patterns are tried. The result is that of the leftmost-first
    alternation of the values (longest first), the URL password and the shapes.

    Args:
        secrets: value -> variable name, as :func:`secret_values` gives.
        shapes: also redact the well-known shapes and URL passwords (:data:`SHAPES`) where
            they are no known value; ``False`` redacts the given values only.
    """

    def __init__(self, secrets: Mapping[str, str], *, shapes: bool = True) -> None:
        #: value -> variable name, as given.
        self.secrets: dict[str, str] = dict(secrets)
        self.shapes = shapes
        names: dict[str, str] = {}
        for value, name in secrets.items():
            for v in sorted(_variants(value)):
                if v:
                    names.setdefault(v, name)
        self._names = names
        literals = sorted(names, key=len, reverse=True)  # longest first: no partial leftovers
        lits = [re.escape(v) for v in literals]
        parts = [f"(?P<lit>{'|'.join(lits)})"] if lits else []
        shape_parts = [f"(?P<s{i}>{s.pattern})" for i, s in enumerate(SHAPES)] if shapes else []
        full = "|".join(parts + ([f"(?P<url>{_URL})"] if shapes else []) + shape_parts)
        starts = lits + ([s.core for s in SHAPES] + [_URL_CORE] if shapes else [])
        tokens = "|".join(parts + shape_parts)
        self._text = re.compile(full) if full else None
        self._text_starts = re.compile("|".join(starts)) if starts else None
        self._tokens = re.compile(tokens) if tokens else None
        self._bytes = re.compile(_encode(full)) if full else None
        self._bytes_starts = re.compile(_encode("|".join(starts))) if starts else None
        prefixes = [re.escape(p) for s in SHAPES for p in s.prefixes] + ["://"]
        self._prefix_starts = re.compile(_encode("|".join(prefixes))) if shapes else None
        self._partial = re.compile(_encode(
            "(?:" + "|".join([_URL_PARTIAL, *(s.partial for s in SHAPES)]) + r")\Z")
        ) if shapes else None
        #: Bytes always held back between chunks: an environment secret may start in one
        #: chunk and end in the next (0 without any).
        self.keep = max((len(_encode(v)) for v in names), default=1) - 1
        #: The most bytes held back for a shape that reaches the end of a chunk.
        self.shape_keep = MAX_SHAPE_CHARS + 1 if shapes else 0
        self._carry = b""
        self._ctx = b""  # the last byte passed on: what a shape's look-behind sees
        #: Whether a known secret holds a line break (then a line end does not end a secret).
        self._multiline = any(b"\n" in _encode(v) for v in names)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Redactor:
        """A redactor for the secrets of ``env`` (default ``os.environ``), and the shapes."""
        return cls(secret_values(env))

    @property
    def active(self) -> bool:
        """Whether there is anything to redact (secrets, or the shapes)."""
        return self._text is not None

    def fresh(self) -> Redactor:
        """A redactor for the same secrets with its own stream state (one per stream)."""
        return Redactor(self.secrets, shapes=self.shapes)

    # -- matching and replacing ------------------------------------------------------------

    @staticmethod
    def _find(starts: re.Pattern[AnyStr], full: re.Pattern[AnyStr], data: AnyStr,
              pos: int) -> Iterator[re.Match[AnyStr]]:
        """The matches of ``full`` in ``data`` from ``pos``, as ``full.finditer`` finds them,
        trying ``full`` only where ``starts`` matches (every match of ``full`` starts with a
        match of ``starts``)."""
        while (hint := starts.search(data, pos)) is not None:
            at = hint.start()
            found = full.match(data, at)
            if found is None:
                pos = at + 1
                continue
            yield found
            pos = found.end()

    def _label(self, value: str, kind: str) -> str:
        name = self._names.get(value)
        return f"[redacted ${name}]" if name else f"[redacted {kind}]"

    def _replacement(self, group: str, whole: str, user: str, pw: str) -> str:
        """What replaces a match of the alternative ``group`` (``lit``, ``url`` or ``s<i>``):
        ``whole`` is the matched text, ``user`` and ``pw`` a URL's parts."""
        if group == "lit":
            return f"[redacted ${self._names[whole]}]"
        if group == "url":
            shaped = None
            if self._tokens is not None:
                user = self._tokens.sub(self._replace, user)
                shaped = self._tokens.fullmatch(pw)
            label = self._replace(shaped) if shaped else self._label(pw, URL_PASSWORD_KIND)
            return f"://{user}:{label}@"
        return self._label(whole, SHAPES[int(group[1:])].kind)

    def _replace(self, m: re.Match[str]) -> str:
        url = m.lastgroup == "url"
        return self._replacement(m.lastgroup or "", m.group(0), m.group("user") if url else "",
                                 m.group("pw") if url else "")

    def _replace_bytes(self, m: re.Match[bytes]) -> bytes:
        url = m.lastgroup == "url"
        return _encode(self._replacement(m.lastgroup or "", _decode(m.group(0)),
                                         _decode(m.group("user")) if url else "",
                                         _decode(m.group("pw")) if url else ""))

    # -- text, JSON, bytes -----------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        if self._text is None or self._text_starts is None:
            return text
        out: list[str] = []
        pos = 0
        for m in self._find(self._text_starts, self._text, text, 0):
            out.append(text[pos:m.start()])
            out.append(self._replace(m))
            pos = m.end()
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

    def json(self, value: Any) -> Any:
        """``value`` (a JSON-ready value: mappings, lists, tuples, strings, numbers) with
        every string redacted; mapping keys are kept as they are, tuples become lists."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.json(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.json(v) for v in value]
        return value

    def restore(self, text: str) -> str:
        """``text`` with each ``[redacted $NAME]`` put back to the secret of ``NAME`` this
        redactor knows (a name with one secret only); other labels are left. For values the
        program itself needs again (a command stored redacted), never for writing."""
        values: dict[str, list[str]] = {}
        for value, name in self.secrets.items():
            values.setdefault(name, []).append(value)

        def back(m: re.Match[str]) -> str:
            known = values.get(m.group(1), [])
            return known[0] if len(known) == 1 else m.group(0)

        return _LABEL.sub(back, text)

    def restore_json(self, value: Any) -> Any:
        """``value`` (as :meth:`json` gives) with :meth:`restore` applied to every string."""
        if isinstance(value, str):
            return self.restore(value)
        if isinstance(value, Mapping):
            return {k: self.restore_json(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.restore_json(v) for v in value]
        return value

    def restores(self, text: str) -> bool:
        """Whether ``text`` comes back whole from :meth:`text` then :meth:`restore`: every
        secret in it is the whole value of an environment variable this redactor knows."""
        return self.restore(self.text(text)) == text

    def _held_from(self, data: bytes, lo: int) -> int | None:
        """The first place at or after ``lo`` where a shape (or a URL's ``://user:password``)
        could begin and run past the end of ``data``, or ``None``: a whole prefix followed by
        body characters up to the end, or the end itself a beginning of a prefix."""
        assert self._partial is not None and self._prefix_starts is not None
        end = len(data)
        hint = self._prefix_starts.search(data, lo)
        while hint is not None and not self._partial.match(data, hint.start()):
            hint = self._prefix_starts.search(data, hint.start() + 1)
        first = end if hint is None else hint.start()
        for at in range(max(lo, end - MAX_PREFIX_CHARS), first):
            if data[at] in _FIRST_BYTES and self._partial.match(data, at):
                return at
        return None if hint is None else first

    def stream(self, chunk: bytes) -> bytes:
        """Redact the next ``chunk`` of a byte stream; returns the bytes safe to write now.

        Bytes that could be the start of a secret are held back until the next call or
        :meth:`flush`: the last :attr:`keep` bytes, and from the first place where a shape
        could begin and reach past the chunk's end (:attr:`shape_keep` bytes at most).
        """
        if self._bytes is None or self._bytes_starts is None:
            return chunk
        data = self._ctx + self._carry + chunk
        start = len(self._ctx)
        cut = max(len(data) - self.keep, start)
        if self._partial is not None:
            held = self._held_from(data, max(start, len(data) - self.shape_keep))
            if held is not None:
                cut = min(cut, held)
        out: list[bytes] = []
        pos = start
        for m in self._find(self._bytes_starts, self._bytes, data, start):
            if m.start() >= cut:
                break
            out.append(data[pos:m.start()])
            out.append(self._replace_bytes(m))
            pos = m.end()
            cut = max(cut, pos)
        out.append(data[pos:cut])
        self._ctx = data[max(cut - 1, 0):cut]
        self._carry = data[cut:]
        return b"".join(out)

    def line_end(self) -> bytes:
        """After :meth:`stream`: the bytes held back, redacted, when they end with a line break
        and no known secret holds one (no shape or URL password does): no secret can then
        run from them into the next chunk, so they can be written now (the agent's log is
        written live, line by line). ``b""`` otherwise: they stay held back."""
        if self._multiline or not self._carry.endswith(b"\n"):
            return b""
        return self.flush()

    def flush(self) -> bytes:
        """The bytes still held back, redacted; the stream ends here (and may start again)."""
        data, start = self._ctx + self._carry, len(self._ctx)
        self._carry = self._ctx = b""
        if self._bytes is None or self._bytes_starts is None:
            return data[start:]
        out: list[bytes] = []
        pos = start
        for m in self._find(self._bytes_starts, self._bytes, data, start):
            out.append(data[pos:m.start()])
            out.append(self._replace_bytes(m))
            pos = m.end()
        out.append(data[pos:])
        return b"".join(out)


#: Bytes read at a time by :func:`redact_file`.
FILE_CHUNK_BYTES = 1 << 20


def redact_file(src: Path, dst: Path, redactor: Redactor) -> None:
    """Copy the file ``src`` to ``dst`` with its secrets redacted, streaming
    (:data:`FILE_CHUNK_BYTES` at a time, any size, any bytes). ``dst`` is written beside
    itself first and then renamed into place, so it is never half a copy; ``src`` may be
    ``dst`` (redacted in place).

    Raises:
        OSError: ``src`` cannot be read or ``dst`` written.
    """
    r = redactor.fresh()
    _write_atomically(dst, lambda out: _copy(src, out, r))


def _copy(src: Path, out: Any, r: Redactor) -> None:
    with src.open("rb") as f:
        while chunk := f.read(FILE_CHUNK_BYTES):
            out.write(r.stream(chunk))
    out.write(r.flush())


def redact_json_file(src: Path, dst: Path, redactor: Redactor) -> None:
    """Copy the JSON file ``src`` to ``dst`` with every string in it redacted
    (:meth:`Redactor.json`; written with ``indent=1``, as the loop writes its JSON). A file
    that is not UTF-8 JSON is copied as bytes by :func:`redact_file`.

    Raises:
        OSError: ``src`` cannot be read or ``dst`` written.
    """
    try:
        data = json.loads(src.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        redact_file(src, dst, redactor)
        return
    text = json.dumps(redactor.json(data), indent=1, ensure_ascii=False)
    _write_atomically(dst, lambda out: out.write(text.encode("utf-8")))


def _write_atomically(dst: Path, write: Callable[[Any], None]) -> None:
    tmp = dst.with_name(f".{dst.name}.redacting-{os.getpid()}")
    try:
        with tmp.open("wb") as out:
            write(out)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
