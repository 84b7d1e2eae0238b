"""Secret redaction for agent logs, prompts, reports and the escalation dump.

A secret is the value of an environment variable whose name contains ``KEY``, ``TOKEN``,
``SECRET`` or ``PASSWORD`` (any case, e.g. ``ANTHROPIC_API_KEY``, ``GH_TOKEN``,
``DB_PASSWORD``) and whose value is at least :data:`MIN_SECRET_CHARS` characters long
(shorter values such as ``1`` or ``true`` would blank out ordinary text). Each occurrence
of such a value is replaced by ``[redacted $NAME]``.

:class:`Redactor` works on text (:meth:`Redactor.text`) and on a byte stream cut into
arbitrary chunks (:meth:`Redactor.stream`), holding back only as many bytes as the longest
secret needs, so memory stays flat for any output size.

This module does not import pytest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

#: Parts of an environment variable name that mark its value as a secret.
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")

#: Values shorter than this many characters are not treated as secrets.
MIN_SECRET_CHARS = 8


def secret_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets of ``env`` (default ``os.environ``): value -> variable name.

    When two variables hold the same value, the first name in sorted order is kept.
    """
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        if any(part in name.upper() for part in SECRET_NAME_PARTS) and len(
                value.strip()) >= MIN_SECRET_CHARS:
            out.setdefault(value, name)
    return out


class Redactor:
    """Replaces secret values with ``[redacted $NAME]``.

    Args:
        secrets: value -> variable name, as :func:`secret_values` gives.
    """

    def __init__(self, secrets: Mapping[str, str]) -> None:
        ordered = sorted(secrets, key=len, reverse=True)  # longest first: no partial leftovers
        self._names = dict(secrets)
        #: value -> variable name, as given.
        self.secrets: dict[str, str] = dict(secrets)
        self._text = re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None
        # surrogateescape: a value os.environ decoded from non-UTF-8 bytes is matched as
        # those bytes (plain UTF-8 would raise UnicodeEncodeError).
        encoded = {v.encode("utf-8", "surrogateescape"): n for v, n in secrets.items()}
        self._bnames = encoded
        self._bytes = re.compile(b"|".join(re.escape(v) for v in sorted(
            encoded, key=len, reverse=True))) if encoded else None
        #: Bytes held back between chunks: a secret may start in one chunk and end in the next.
        self.keep = max((len(v) for v in encoded), default=1) - 1
        self._carry = b""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Redactor:
        """A redactor for the secrets of ``env`` (default ``os.environ``)."""
        return cls(secret_values(env))

    @property
    def active(self) -> bool:
        """Whether there is any secret to redact."""
        return self._text is not None

    def fresh(self) -> Redactor:
        """A redactor for the same secrets with its own stream state (one per stream)."""
        return Redactor(self.secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        if self._text is None:
            return text
        return self._text.sub(lambda m: f"[redacted ${self._names[m.group(0)]}]", text)

    def stream(self, chunk: bytes) -> bytes:
        """Redact the next ``chunk`` of a byte stream; returns the bytes safe to write now.

        Bytes that could be the start of a secret are held back until the next call or
        :meth:`flush`.
        """
        if self._bytes is None:
            return chunk
        data = self._carry + chunk
        cut = max(len(data) - self.keep, 0)
        out: list[bytes] = []
        pos = 0
        for m in self._bytes.finditer(data):
            if m.start() >= cut:
                break
            out.append(data[pos:m.start()])
            out.append(f"[redacted ${self._bnames[m.group(0)]}]".encode())
            pos = m.end()
            cut = max(cut, pos)
        out.append(data[pos:cut])
        self._carry = data[cut:]
        return b"".join(out)

    def flush(self) -> bytes:
        """The bytes still held back, redacted; the stream ends here."""
        if self._bytes is None:
            rest, self._carry = self._carry, b""
            return rest
        rest, self._carry = self._carry, b""
        return self._bytes.sub(lambda m: f"[redacted ${self._bnames[m.group(0)]}]".encode(),
                               rest)

