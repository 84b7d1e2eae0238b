"""A story's ``dependsOn``: read from its canonical key and from the dialect keys
``dependencies`` (large-71-stories.json of the corpus) and ``depends_on``
(phases-nested-stories.json, korean-waves.json), normalized like the other dialect keys, its
form checked on load with the PRD error style. Whether the ids name stories and make no cycle
is the parallel run's to check (tests/parallel/test_plan.py): a plain load accepts them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.prd.dialects import normalize, source_path
from pytest_ralph.prd.errors import PRDError
from pytest_ralph.prd.load import load_prd
from tests.prd.test_dialects import check


def story(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "title": f"story {sid}", "acceptanceCriteria": ["it works"], **extra}


def write(tmp_path: Path, *stories: dict[str, Any], name: str = "prd.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"userStories": list(stories)}, indent=2) + "\n", "utf-8")
    return path


def test_depends_on_is_canonical_and_a_story_without_it_has_none(tmp_path: Path) -> None:
    path = write(tmp_path, story("US-001"), story("US-002", dependsOn=["US-001"]))
    prd = load_prd(path)
    assert prd.dialect == "canonical"
    first, second = prd.stories
    assert (first.depends_on, second.depends_on) == ((), ("US-001",))
    assert second.depends_key == "dependsOn"
    result = check({"userStories": [story("US-001"), story("US-002", dependsOn=["US-001"])]})
    assert "dependsOn" not in result.data["userStories"][0]
    assert result.data["userStories"][1]["dependsOn"] == ["US-001"]


@pytest.mark.parametrize("key", ["dependencies", "depends_on"])
def test_dialect_keys_become_depends_on(tmp_path: Path, key: str) -> None:
    data = {"userStories": [story("US-001", **{key: []}), story("US-002", **{key: ["US-001"]})]}
    result = check(data)
    assert result.dialect == key
    assert [s.get("dependsOn") for s in result.data["userStories"]] == [[], ["US-001"]]
    assert all(key not in s for s in result.data["userStories"])
    assert f"dependsOn from '{key}' for 2 stories" in result.notes
    assert source_path(("userStories", 1, "dependsOn", 0), result.origins) == \
        ("userStories", 1, key, 0)
    prd = load_prd(write(tmp_path, *data["userStories"]))
    assert prd.stories[1].depends_on == ("US-001",)
    assert prd.stories[1].depends_key == key
    assert prd.dialect == key


def test_a_single_string_is_one_id_as_for_criteria() -> None:
    result = check({"userStories": [story("US-001"), story("US-002", depends_on="US-001"),
                                    story("US-003", dependsOn="  ")]})
    deps = [s.get("dependsOn") for s in result.data["userStories"]]
    assert deps == [None, ["US-001"], []]
    assert "string-depends" in result.dialect.split("+")
    assert "single-string dependencies for 2 stories" in result.notes
    assert source_path(("userStories", 1, "dependsOn", 0), result.origins) == \
        ("userStories", 1, "depends_on")


def test_integer_ids_become_strings_as_story_ids_do() -> None:
    result = check({"stories": [{"id": 1, "title": "a"}, {"id": 2, "title": "b",
                                                           "depends_on": [1]}]})
    assert result.data["userStories"][1]["dependsOn"] == ["1"]
    assert "int-depends" in result.dialect.split("+")
    assert "integer dependency ids made strings for 1 story" in result.notes


def test_null_is_no_dependencies() -> None:
    result = check({"userStories": [story("US-001", dependsOn=None),
                                    story("US-002", dependencies=None)]})
    assert all("dependsOn" not in s and "dependencies" not in s
               for s in result.data["userStories"])


def test_the_same_list_under_two_keys_is_read_once() -> None:
    result = check({"userStories": [story("US-001"),
                                    story("US-002", dependsOn=["US-001"],
                                          depends_on=["US-001"])]})
    assert result.data["userStories"][1]["dependsOn"] == ["US-001"]
    assert "depends_on" not in result.data["userStories"][1]


def test_two_keys_with_different_lists_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, story("US-001"), story("US-002"),
                 story("US-003", dependsOn=["US-001"], dependencies=["US-002"]))
    with pytest.raises(PRDError) as info:
        load_prd(path)
    [problem] = info.value.problems
    assert problem.json_path == "$.userStories[2].dependencies"
    assert problem.message == ("expected one list of dependencies; found "
                               "$.userStories[2].dependsOn and $.userStories[2].dependencies, "
                               "which differ (keep one of them)")
    assert problem.line is not None
    assert str(path) in info.value.describe()


@pytest.mark.parametrize(("key", "value", "where", "found"), [
    ("dependsOn", {"US-001": True}, "$.userStories[1].dependsOn",
     "expected an array; found an object with keys 'US-001'"),
    ("dependencies", 3, "$.userStories[1].dependencies", "expected an array; found number 3"),
    ("depends_on", ["US-001", None], "$.userStories[1].depends_on[1]",
     "expected a string; found null"),
    ("dependsOn", ["US 001"], "$.userStories[1].dependsOn[0]", 'invalid id "US 001"'),
])
def test_a_list_of_another_form_is_refused_on_load_with_a_hint(
        tmp_path: Path, key: str, value: object, where: str, found: str) -> None:
    path = write(tmp_path, story("US-001"), story("US-002", **{key: value}))
    with pytest.raises(PRDError) as info:
        load_prd(path)
    [problem] = info.value.problems
    assert problem.json_path == where
    assert problem.message.startswith(found), problem.message
    assert problem.line is not None
    assert problem.hint.startswith('list the ids of the stories it depends on, e.g. ["US-001", '
                                   '"US-002"]')
    assert "rename the key if it means something else" in problem.hint


def test_unknown_ids_self_and_cycles_still_load(tmp_path: Path) -> None:
    """The gate (``pytest prd.json``) never fails over dependencies: the parallel run checks
    what they name."""
    path = write(tmp_path, story("US-001", dependsOn=["US-001", "US-404"]),
                 story("US-002", dependsOn=["US-003"]), story("US-003", dependsOn=["US-002"]))
    prd = load_prd(path)
    assert [s.depends_on for s in prd.stories] == [("US-001", "US-404"), ("US-003",),
                                                   ("US-002",)]


def test_a_misspelt_depends_on_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, story("US-001"), story("US-002", dependOn=["US-001"]))
    with pytest.raises(PRDError) as info:
        load_prd(path)
    [problem] = info.value.problems
    assert problem.json_path == "$.userStories[1].dependOn"
    assert problem.hint == "did you mean 'dependsOn'?"


def test_yaml_and_phases_dialect(tmp_path: Path) -> None:
    path = tmp_path / "prd.yaml"
    path.write_text("phases:\n"
                    "  - stories:\n"
                    "      - {id: US-001, title: a}\n"
                    "  - stories:\n"
                    "      - {id: US-002, title: b, depends_on: [US-001]}\n", "utf-8")
    prd = load_prd(path)
    assert prd.stories[1].depends_on == ("US-001",)
    assert prd.stories[1].json_path == "$.phases[1].stories[0]"


def test_normalizing_twice_keeps_the_dependencies() -> None:
    first = normalize({"tasks": [{"id": "a", "title": "A"},
                                 {"id": "b", "title": "B", "dependencies": "a"}]})
    again = normalize(first.data)
    assert again.dialect == "canonical"
    assert again.data == first.data
