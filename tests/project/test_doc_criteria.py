"""``docs/criteria.md`` documents every check kind of this version.

The kinds come from the code (:data:`pytest_ralph.prd.load.CHECK_KEYS`, the schema's criterion
branches, :data:`pytest_ralph.prd.model.CRITERION_KINDS`), so a new kind or a new key of a kind
fails here until the page has a section for it that names the key. The page's examples are
run by ``tests/project/test_docs.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.prd.model import CRITERION_KINDS
from pytest_ralph.prd.validate import CHECK_KEYS, CUSTOM_BRANCH, schema

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "criteria.md"

#: Keys every check object has, documented once, in this section.
COMMON_KEYS = ("id", "text")
COMMON_SECTION = "Keys every check object has"


def _sections() -> dict[str, str]:
    """The page's ``## `` sections: heading -> text up to the next ``## `` heading."""
    parts = re.split(r"^## ", PAGE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {head.strip(): body for head, _, body in (p.partition("\n") for p in parts[1:])}


def _kind_section(kind: str) -> str:
    """The section whose heading's first code span is ``kind`` (``## `run` (alias ...)``)."""
    for heading, body in _sections().items():
        first = re.search(r"`([^`]+)`", heading)
        if first and first.group(1) == kind:
            return body
    pytest.fail(f"docs/criteria.md has no section for the check kind {kind!r}: add one "
                f"headed ## `{kind}`")


def _branch(index: int) -> dict[str, Any]:
    """The schema definition of the criterion ``anyOf`` branch ``index``."""
    s = schema()
    ref = s["$defs"]["criterion"]["anyOf"][index]["$ref"]
    return s["$defs"][ref.rsplit("/", 1)[-1]]  # type: ignore[no-any-return]


#: Built-in kind -> its check keys (``run``: ``run`` and ``testCommand``) and schema branch.
KINDS: dict[str, tuple[list[str], int]] = {}
for _key, (_kind, _index) in CHECK_KEYS.items():
    KINDS.setdefault(_kind, ([], _index))[0].append(_key)


def test_the_kinds_are_those_of_the_model() -> None:
    assert set(KINDS) == set(CRITERION_KINDS) - {"text"}
    assert len(KINDS) >= 7


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_builtin_kind_has_a_section_naming_its_keys(kind: str) -> None:
    keys, index = KINDS[kind]
    section = _kind_section(kind)
    documented = set(_branch(index)["properties"]) - set(COMMON_KEYS)
    assert set(keys) <= documented  # the schema branch is the kind's
    for key in sorted(documented):
        assert f"`{key}`" in section, f"the section of {kind!r} does not mention its key {key!r}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_table_of_kinds_links_every_kind(kind: str) -> None:
    assert f"[`{kind}`](#" in _sections()["The kinds"], kind


def test_plugin_kinds_and_text_criteria_have_sections() -> None:
    custom = _kind_section("kind")
    for key in set(_branch(CUSTOM_BRANCH)["properties"]) - set(COMMON_KEYS):
        assert f"`{key}`" in custom, key
    text = _sections()["Text criteria"]
    for word in ("ralph_checks", "ralph_verifier", "--ralph-strict", "claimed"):
        assert word in text, word


def test_the_common_keys_are_documented() -> None:
    section = _sections()[COMMON_SECTION]
    for key in COMMON_KEYS:
        assert f"`{key}`" in section, key
    for index in {i for _, i in KINDS.values()} | {CUSTOM_BRANCH}:
        assert set(COMMON_KEYS) <= set(_branch(index)["properties"])
