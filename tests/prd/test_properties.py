"""Property-based tests of the PRD loader (hypothesis).

- Any JSON value, written as ``.json`` or ``.yaml``, either loads into a valid PRD or
  raises :class:`~pytest_ralph.prd.load.PRDError`: never another exception, never a changed file.
- Normalization is idempotent: normalizing its own output changes nothing.
- Node ids (``<file>::<story id>::<criterion id>``) are unique, fit a pytest node id, and
  are the same every time the same file is loaded.

hypothesis is in the ``props`` extra, not ``test`` (see pyproject.toml): without it this
module is skipped, unless ``PYTEST_RALPH_PROPERTIES=required`` (as ``.ci/run`` sets),
which makes a missing hypothesis an error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

if os.environ.get("PYTEST_RALPH_PROPERTIES") == "required":
    import hypothesis
else:
    hypothesis = pytest.importorskip("hypothesis", reason="pip install -e '.[props]'")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_ralph.prd.dialects import (
    CRITERIA_KEYS,
    DONE_STATUSES,
    PRIORITY_WORDS,
    STORY_CONTAINERS,
    DialectError,
    normalize,
)
from pytest_ralph.prd.errors import PRDError
from pytest_ralph.prd.load import load_prd
from pytest_ralph.prd.model import PRD

SETTINGS = settings(max_examples=int(os.environ.get("PYTEST_RALPH_EXAMPLES", "300")),
                    deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: What an id must look like to be part of a pytest node id (the schema's rule).
NODE_ID_PART = re.compile(r"[^\s/\[\]\x00-\x1f\x7f]+")

# ---------------------------------------------------------------------------------------------
# Strategies

TEXT = st.text(max_size=12)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(TEXT, inner, max_size=4), max_leaves=25)

#: Values that look like the fields of real PRDs, in every dialect and some wrong forms.
IDS = st.none() | st.just("") | st.integers(-3, 30) | st.from_regex(r"[A-Z]{1,3}-[0-9]{1,3}",
                                                                  fullmatch=True) | TEXT
PRIORITIES = (st.none() | st.integers(-2, 12) | st.floats(-1, 20, allow_nan=False)
              | st.sampled_from([*PRIORITY_WORDS, "HIGH", "P0", "P3", "P9-later", "P10", "7",
                                 "urgent"]))
STATUSES = st.none() | st.sampled_from([*DONE_STATUSES, "open", "Done ", "todo"]) | st.integers()
CRITERIA = (st.none() | TEXT
            | st.lists(TEXT | st.none() | st.integers()
                       | st.fixed_dictionaries({"run": st.sampled_from(["true", "false", ""])})
                       | st.fixed_dictionaries({"exists": TEXT}), max_size=4))


@st.composite
def stories(draw: st.DrawFn) -> dict[str, Any]:
    story: dict[str, Any] = {}
    for key, values in (("id", IDS), ("title", TEXT | st.none()), ("description", TEXT),
                        ("priority", PRIORITIES), ("status", STATUSES),
                        ("passes", st.booleans() | st.none() | st.sampled_from(["true"])),
                        ("notes", TEXT | st.lists(TEXT, max_size=2))):
        if draw(st.booleans()):
            story[key] = draw(values)
    if draw(st.booleans()):
        story[draw(st.sampled_from(CRITERIA_KEYS))] = draw(CRITERIA)
    return story


WORDS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1,
                max_size=12).filter(str.strip)


@st.composite
def good_stories(draw: st.DrawFn, position: int) -> dict[str, Any]:
    """A story that any dialect rule accepts: its id is unique by ``position``."""
    story: dict[str, Any] = {}
    form = draw(st.sampled_from(["string", "int", "missing"]))
    if form != "missing":
        story["id"] = f"US-{position}" if form == "string" else position + 100
    story["title" if draw(st.booleans()) else "description"] = draw(WORDS)
    if draw(st.booleans()):
        key = draw(st.sampled_from(CRITERIA_KEYS))
        story[key] = draw(WORDS | st.lists(WORDS | st.fixed_dictionaries(
            {"run": st.just("true")}), max_size=3))
    if draw(st.booleans()):
        story["priority"] = draw(st.integers(0, 9) | st.floats(0, 9) | st.sampled_from(
            [*PRIORITY_WORDS, "P1", "p2", "5"]))
    done = draw(st.sampled_from(["passes", "status", "neither"]))
    if done == "passes":
        story["passes"] = draw(st.booleans())
    elif done == "status":
        story["status"] = draw(st.sampled_from([*DONE_STATUSES, "open", "in progress"]))
    return story


@st.composite
def prd_like(draw: st.DrawFn) -> Any:
    """A PRD in one of the dialects (or close to one), possibly with wrong values."""
    n = draw(st.integers(0, 5))
    items = [draw(good_stories(i) if draw(st.integers(0, 9)) else stories() | JSON)
             for i in range(n)]
    shape = draw(st.sampled_from(["array", "phases", *STORY_CONTAINERS]))
    if shape == "array":
        return items
    top: dict[str, Any] = {}
    if draw(st.booleans()):
        top[draw(st.sampled_from(["project", "projectName", "name"]))] = draw(
            TEXT | st.fixed_dictionaries({"name": TEXT}))
    if shape == "phases":
        top["phases"] = [{"name": f"phase {i}", "stories": items[i::2]} for i in range(2)]
    else:
        top[shape] = items
    return top


# ---------------------------------------------------------------------------------------------
# Helpers


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("props")


def write(folder: Path, data: Any, fmt: str) -> Path:
    path = folder / f"prd.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def load_or_error(path: Path) -> PRD | PRDError:
    """The loaded PRD, or the PRDError; any other exception fails the test."""
    before = path.read_bytes()
    try:
        result: PRD | PRDError = load_prd(path)
    except PRDError as exc:
        assert exc.problems, "a PRDError without problems"
        assert str(path) in exc.describe()
        result = exc
    assert path.read_bytes() == before, "loading changed the file"
    hypothesis.event("loaded" if isinstance(result, PRD) else "PRDError")
    return result


def node_ids(prd: PRD) -> Iterator[str]:
    for story in prd.stories:
        for criterion in story.criteria:
            yield f"{prd.path.name}::{story.id}::{criterion.id}"


def check_valid(prd: PRD) -> None:
    """What every loaded PRD holds."""
    ids = list(node_ids(prd))
    assert len(ids) == len(set(ids)), "node ids are not unique"
    for story in prd.stories:
        assert NODE_ID_PART.fullmatch(story.id), story.id
        assert story.criteria, f"story {story.id} has no criterion"
        assert story.title.strip()
        assert isinstance(story.passes, bool)
        assert story.priority is None or 0 <= story.priority <= 1_000_000
        for criterion in story.criteria:
            assert NODE_ID_PART.fullmatch(criterion.id), criterion.id
            assert criterion.story_id == story.id


# ---------------------------------------------------------------------------------------------
# Properties


@SETTINGS
@given(data=JSON, fmt=st.sampled_from(["json", "yaml"]))
def test_any_json_value_loads_or_raises_prd_error(folder: Path, data: Any, fmt: str) -> None:
    result = load_or_error(write(folder, data, fmt))
    if isinstance(result, PRD):
        check_valid(result)


@SETTINGS
@given(data=prd_like(), fmt=st.sampled_from(["json", "yaml"]))
def test_dialect_shaped_values_load_or_raise_prd_error(folder: Path, data: Any,
                                                       fmt: str) -> None:
    result = load_or_error(write(folder, data, fmt))
    if isinstance(result, PRD):
        check_valid(result)


@SETTINGS
@given(data=JSON | prd_like())
def test_normalization_is_idempotent(data: Any) -> None:
    try:
        first = normalize(data)
    except DialectError as exc:
        assert exc.problems
        return
    second = normalize(first.data)
    assert second.data == first.data
    assert second.dialect == "canonical"
    assert [o.parts for o in second.origins] == [("userStories", i)
                                                 for i in range(len(first.origins))]


@SETTINGS
@given(data=prd_like())
def test_node_ids_are_stable_across_loads(folder: Path, data: Any) -> None:
    path = write(folder, data, "json")
    first = load_or_error(path)
    second = load_or_error(path)
    if isinstance(first, PRD):
        assert isinstance(second, PRD)
        assert list(node_ids(first)) == list(node_ids(second))
        assert (first.dialect, first.dialect_notes) == (second.dialect, second.dialect_notes)
    else:
        assert isinstance(second, PRDError)
        assert first.describe() == second.describe()


@SETTINGS
@given(data=prd_like())
def test_a_loaded_prd_written_back_canonically_loads_the_same(folder: Path, data: Any) -> None:
    """The loaded model, saved in the canonical shape, loads to the same stories: what the
    dialect rules produce is itself a valid canonical PRD."""
    first = load_or_error(write(folder, data, "json"))
    if not isinstance(first, PRD):
        return
    canonical = normalize(data).data
    second = load_or_error(write(folder, canonical, "json"))
    assert isinstance(second, PRD), second
    assert second.dialect == "canonical"
    assert list(node_ids(second)) == list(node_ids(first))
    assert [(s.title, s.priority, s.passes) for s in second.stories] == [
        (s.title, s.priority, s.passes) for s in first.stories]
