"""An example pytest-ralph plugin: the ``wordcount`` criterion kind.

``{"kind": "wordcount", "file": "docs/post.md", "min": 300, "max": 900}`` passes when the file
(relative to the rootdir) holds ``min`` (default 0) to ``max`` (default: no limit) words; one
of them is required. A word is a run of non-blank characters with a letter or digit in it.
:func:`pytest_ralph_make_check` checks such criteria; :func:`pytest_ralph_fingerprint` keeps
only the direction of their failures ("too short"...) in the loop's failure fingerprint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ralph import CheckResult

if TYPE_CHECKING:
    import pytest

    from pytest_ralph import Check, Criterion, CriterionResult

KIND = "wordcount"
#: The fields of a ``wordcount`` criterion's spec (``id`` and ``text`` are not in it).
FIELDS = ("kind", "file", "min", "max")
#: A word: non-blank characters with at least one letter or digit.
WORD = re.compile(r"\S*\w\S*")
#: Words of the file's last sentence quoted in a failure message.
ENDING_WORDS = 12

#: A phrase of the failure messages -> the fingerprint text of that failure.
DIRECTIONS = {
    "does not exist": "missing file", "is not a file": "not a file",
    "is not UTF-8 text": "not UTF-8", "cannot read": "unreadable",
    "malformed wordcount criterion": "malformed criterion",
    "expected at least": "too short", "expected at most": "too long",
}


def _words(n: int) -> str:
    return f"{n} word{'' if n == 1 else 's'}"


def _ending(text: str) -> str:
    """``'; it ends: "<last sentence>"'`` (at most :data:`ENDING_WORDS` words), or ``""``."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text.strip()) if s.strip()]
    if not sentences:
        return ""
    words = sentences[-1].split()
    cut = "..." if len(words) > ENDING_WORDS else ""
    return f'; it ends: "{cut}{" ".join(words[-ENDING_WORDS:])}"'


@dataclass(frozen=True)
class WordCountCheck:
    """The check of a well-formed ``wordcount`` criterion: ``path`` (absolute; ``shown`` as
    the PRD names it) must hold ``minimum`` to ``maximum`` (``None``: no limit) words."""

    path: Path
    shown: str
    minimum: int
    maximum: int | None

    def run(self) -> CheckResult:
        """Returns: a :class:`pytest_ralph.CheckResult`, passed when the word count is within
        the bounds, else saying what was expected and what was found. Never raises."""
        low, high = self.minimum, self.maximum
        wanted = (f"at least {_words(low)}" if high is None else f"at most {_words(high)}"
                  if low == 0 else f"{low} to {_words(high)}")
        expected = f"expected a UTF-8 text file of {wanted}"
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return CheckResult(False, f"{self.shown} does not exist; {expected}")
        except (IsADirectoryError, NotADirectoryError):
            return CheckResult(False, f"{self.shown} is not a file; {expected}")
        except UnicodeDecodeError as exc:
            return CheckResult(False, f"{self.shown} is not UTF-8 text (byte 0x"
                                      f"{exc.object[exc.start]:02x} at offset {exc.start}); "
                                      f"{expected}")
        except OSError as exc:
            return CheckResult(False, f"cannot read {self.shown}: {exc.strerror or exc}; "
                                      f"{expected}")
        n = len(WORD.findall(text))
        if n < low:
            return CheckResult(False, f"{self.shown} has {_words(n)}; expected at least {low} "
                                      f"({low - n} more){_ending(text)}")
        if high is not None and n > high:
            return CheckResult(False, f"{self.shown} has {_words(n)}; expected at most {high} "
                                      f"({n - high} too many){_ending(text)}")
        return CheckResult(True, f"{self.shown} has {_words(n)} ({wanted})")


@dataclass(frozen=True)
class FailingCheck:
    """A check that always fails with ``message`` (a malformed criterion)."""

    message: str

    def run(self) -> CheckResult:
        """Returns: a failing :class:`pytest_ralph.CheckResult` with the message."""
        return CheckResult(False, self.message)


def _is_count(value: Any) -> bool:
    """Whether ``value`` is a non-negative int (``true`` and ``300.0`` are not)."""
    return type(value) is int and value >= 0


def spec_problems(spec: dict[str, Any]) -> list[str]:
    """What is wrong with a ``wordcount`` criterion's fields (:attr:`pytest_ralph.Criterion.spec`).

    Returns:
        One sentence per problem; an empty list when the fields are well-formed.
    """
    problems = []
    unknown = [k for k in spec if k not in FIELDS]
    if unknown:
        problems.append(f"unknown field {', '.join(map(repr, unknown))} (the fields are "
                        f"{', '.join(FIELDS[1:])})")
    file = spec.get("file")
    if "file" not in spec:
        problems.append("'file' is missing")
    elif not isinstance(file, str) or not file.strip():
        problems.append(f"'file' must be a non-empty path; found {json.dumps(file)}")
    for name in ("min", "max"):
        if name in spec and not _is_count(spec[name]):
            problems.append(f"'{name}' must be a non-negative integer; found "
                            f"{json.dumps(spec[name])}")
    if "min" not in spec and "max" not in spec:
        problems.append("'min' and 'max' are both missing; give one or both")
    low, high = spec.get("min", 0), spec.get("max")
    if _is_count(low) and _is_count(high) and low > high:
        problems.append(f"'min' ({low}) is greater than 'max' ({high})")
    return problems


def pytest_ralph_make_check(criterion: Criterion, config: pytest.Config) -> Check | None:
    """Hook ``pytest_ralph_make_check``: the check of a ``wordcount`` criterion.

    Args:
        criterion: the criterion about to be checked.
        config: the pytest config; the file is relative to ``config.rootpath``.

    Returns:
        A :class:`WordCountCheck`, or a :class:`FailingCheck` naming the criterion (key and
        JSON path) when its fields are malformed; ``None`` for any other kind.
    """
    if criterion.kind != KIND:
        return None
    spec = criterion.spec
    problems = spec_problems(spec)
    if problems:
        return FailingCheck(
            f"malformed wordcount criterion {criterion.key} ({criterion.json_path}): "
            f"{'; '.join(problems)}; expected "
            '{"kind": "wordcount", "file": "<path>", "min": <words>, "max": <words>}')
    return WordCountCheck(config.rootpath / spec["file"], spec["file"], spec.get("min", 0),
                          spec.get("max"))


def pytest_ralph_fingerprint(result: CriterionResult) -> str | None:
    """Hook ``pytest_ralph_fingerprint``: a failing ``wordcount`` criterion's direction only.

    The message names the count and the file's last sentence, which change whenever the agent
    adds words; the direction does not, so an agent that adds a few words per iteration and
    stays short trips the identical-failure circuit breaker.

    Args:
        result: the failing criterion's result.

    Returns:
        ``"wordcount: too short"``, ``"wordcount: too long"``, ``"wordcount: missing file"``...
        for a message this plugin wrote; ``None`` for any other kind or message (the
        built-in fingerprint text is used).
    """
    if result.kind != KIND:
        return None
    found = [(at, direction) for phrase, direction in DIRECTIONS.items()
             if (at := result.message.find(phrase)) >= 0]
    return f"{KIND}: {min(found)[1]}" if found else None
