"""Unit tests of :mod:`pytest_ralph.prd.dialects`: :func:`normalize`, :func:`source_path` and
:func:`describe`.

Every fixture is a small dict or list written here; each reproduces one quirk seen in
real PRD files (the corpus next to the repository, which the corpus test reads when present).
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pytest_ralph.prd.dialects import (
    DialectError,
    Normalized,
    Origin,
    describe,
    normalize,
    source_path,
)
from pytest_ralph.prd.positions import strip_jsonc
from pytest_ralph.prd.validate import schema

VALIDATOR = jsonschema.Draft202012Validator(schema())

TOP = ("an object with stories under userStories | stories | tasks | items | features "
       "| phases[].stories, or an array of stories")


def check(data: object, *, valid: bool = True) -> Normalized:
    """Normalize ``data`` and check the invariants every result must hold: the input is
    unchanged, there is one origin per story, normalizing the result again gives the same
    data with dialect ``canonical`` (and canonical origins), and, when ``valid``, the
    result matches the canonical schema."""
    before = copy.deepcopy(data)
    result = normalize(data)
    assert data == before, "the input was mutated"
    stories = result.data["userStories"]
    assert len(result.origins) == len(stories)
    if valid:
        VALIDATOR.validate(result.data)
    again = normalize(result.data)
    assert (again.data, again.dialect) == (result.data, "canonical")
    assert again.stories_path == "$.userStories"
    assert again.origins == tuple(Origin(("userStories", i)) for i in range(len(stories)))
    assert again.notes == (("no stories: $.userStories is empty",) if not stories else ())
    return result


def schema_error_paths(data: object) -> set[tuple[str | int, ...]]:
    """The JSON paths (as parts) where the canonical schema rejects ``data``."""
    return {tuple(error.absolute_path) for error in VALIDATOR.iter_errors(data)}


def at(data: Any, parts: tuple[str | int, ...]) -> Any:
    for part in parts:
        data = data[part]
    return data


def canonical_story(sid: str = "US-001", **extra: Any) -> dict[str, Any]:
    story: dict[str, Any] = {"id": sid, "title": "Add login", "description": "As a user...",
                             "acceptanceCriteria": ["Typecheck passes"], "priority": 1,
                             "passes": False, "notes": ""}
    story.update(extra)
    return story


def one_story(**story: Any) -> dict[str, Any]:
    return {"userStories": [story]}


# ---------------------------------------------------------------------------------------------
# Canonical


def test_canonical_file_is_unchanged() -> None:
    data = {"project": "Acme", "branchName": "ralph/login", "description": "d",
            "userStories": [canonical_story(), canonical_story("US-002", passes=True)]}
    result = check(data)
    assert result == Normalized(data, "canonical", (),
                                (Origin(("userStories", 0)), Origin(("userStories", 1))),
                                "$.userStories")
    assert result.data is not data
    assert result.data["userStories"][0] is not data["userStories"][0]


def test_canonical_defaults_filled_silently() -> None:
    result = check(one_story(id="A", title="t", acceptanceCriteria=["c"]))
    assert result.dialect == "canonical"
    assert result.notes == ()
    assert result.data == {"project": "", "branchName": "", "description": "", "userStories": [
        {"id": "A", "title": "t", "description": "", "acceptanceCriteria": ["c"],
         "passes": False, "notes": ""}]}
    # no passes and no status in the file: nothing decided passes
    assert result.origins == (Origin(("userStories", 0), done_key=""),)


def test_criterion_objects_and_extra_keys_kept_as_they_are() -> None:
    criterion = {"id": "AC-1", "text": "builds", "testCommand": "make", "passes": True,
                 "lastRun": "2025-01-01"}
    data = one_story(id="US-1", title="t", complexity="low",
                     acceptanceCriteria=[criterion, {"text": "x", "run": "true"}])
    result = check(data)
    story = result.data["userStories"][0]
    assert story["acceptanceCriteria"] == [criterion, {"text": "x", "run": "true"}]
    assert story["acceptanceCriteria"][0] is not criterion
    assert story["complexity"] == "low"
    assert result.dialect == "canonical"


def test_extra_top_level_containers_beside_user_stories_ignored() -> None:
    # like a file that keeps a "waves" index of story ids next to userStories
    data = {"project": "p", "waves": {"1": {"stories": ["W1-S1"]}},
            "userStories": [canonical_story("W1-S1")]}
    result = check(data)
    assert result.dialect == "canonical"
    assert list(result.data) == ["project", "branchName", "description", "userStories"]


def test_output_shares_nothing_with_input() -> None:
    data = {"tasks": [{"id": "a", "title": "t", "files": ["x.py"],
                       "acceptance": [{"text": "ok", "run": "true"}]}]}
    before = copy.deepcopy(data)
    story = normalize(data).data["userStories"][0]
    story["files"].append("y.py")
    story["acceptanceCriteria"][0]["run"] = "false"
    assert data == before


# ---------------------------------------------------------------------------------------------
# Where the stories are


@pytest.mark.parametrize("key", ["stories", "tasks", "items", "features"])
def test_story_containers(key: str) -> None:
    result = check({key: [canonical_story(), canonical_story("B")]})
    assert result.dialect == key
    assert result.notes == (f"stories under $.{key}",)
    assert result.data["userStories"] == [canonical_story(), canonical_story("B")]
    assert result.stories_path == f"$.{key}"
    assert result.origins == (Origin((key, 0)), Origin((key, 1)))


def test_top_level_array() -> None:
    data = [{"id": "DVB-001", "title": "Ring buffer", "priority": 1, "passes": True},
            {"id": "DVB-002", "title": "Guard", "priority": 2, "passes": False}]
    result = check(data)
    assert result.dialect == "top-level-array+title-criteria"
    assert result.notes == ("stories are the top-level array", "criteria from titles for 2 stories")
    assert [s["acceptanceCriteria"] for s in result.data["userStories"]] == [["Ring buffer"],
                                                                             ["Guard"]]
    assert result.data["project"] == ""
    assert result.stories_path == "$"
    assert result.origins == (Origin((0,), criteria_key=""), Origin((1,), criteria_key=""))


def test_phases_flattened_in_order() -> None:
    data = {"project": "dutch", "phases": [
        {"id": "p1", "stories": [{"id": "US-001", "title": "a", "acceptance": ["x"]},
                                 {"id": "US-002", "title": "b", "acceptance": ["y"]}]},
        {"id": "p2", "goal": "no stories yet"},
        {"id": "p3", "stories": [{"id": "US-003", "title": "c", "acceptance": ["z"],
                                  "priority": "P1", "status": "done"}]}]}
    result = check(data)
    assert [s["id"] for s in result.data["userStories"]] == ["US-001", "US-002", "US-003"]
    assert result.dialect == "phases+acceptance+P-priority+status"
    assert result.notes[0] == "stories under $.phases[].stories: 3 phases flattened in order"
    assert "phases" not in result.data
    assert result.stories_path == "$.phases[].stories"
    assert result.origins == (
        Origin(("phases", 0, "stories", 0), criteria_key="acceptance", done_key=""),
        Origin(("phases", 0, "stories", 1), criteria_key="acceptance", done_key=""),
        Origin(("phases", 2, "stories", 0), criteria_key="acceptance", done_key="status"))


def test_stories_in_two_containers_are_an_error() -> None:
    with pytest.raises(DialectError) as info:
        normalize({"stories": [canonical_story("A")], "tasks": [canonical_story("B")],
                   "phases": []})
    assert info.value.problems == (
        ("$", "expected one story container; found $.stories, $.tasks"),)
    with pytest.raises(DialectError, match=r"found \$.userStories, \$.phases"):
        normalize({"userStories": [canonical_story("A")],
                   "phases": [{"tasks": [canonical_story("B")]}]})


def test_an_empty_container_does_not_hide_a_full_one() -> None:
    result = check({"userStories": [], "tasks": [canonical_story("B")], "phases": []})
    assert [s["id"] for s in result.data["userStories"]] == ["B"]
    assert "stories taken from $.tasks; ignored the empty $.userStories, $.phases" in result.notes
    assert result.stories_path == "$.tasks"


def test_a_phase_may_hold_its_stories_under_any_container_key() -> None:
    result = check({"phases": [{"stories": [canonical_story("A")]},
                               {"tasks": [canonical_story("B")]}, {"name": "later"}]})
    assert [s["id"] for s in result.data["userStories"]] == ["A", "B"]
    assert [o.parts for o in result.origins] == [("phases", 0, "stories", 0),
                                                 ("phases", 1, "tasks", 0)]
    assert "stories of $.phases[1] under $.phases[1].tasks" in result.notes
    with pytest.raises(DialectError, match="expected one story container in a phase"):
        normalize({"phases": [{"stories": [canonical_story("A")],
                               "items": [canonical_story("B")]}]})


@pytest.mark.parametrize(("data", "dialect", "notes", "stories_path"), [
    ({"branchName": "ralph/feature", "userStories": []}, "canonical",
     ("no stories: $.userStories is empty",), "$.userStories"),
    ({"tasks": []}, "tasks", ("stories under $.tasks", "no stories: $.tasks is empty"),
     "$.tasks"),
    ([], "top-level-array", ("stories are the top-level array", "no stories: $ is an empty array"),
     "$"),
    ({"phases": [{"id": "p1", "stories": []}, {"id": "p2"}]}, "phases",
     ("stories under $.phases[].stories: 2 phases flattened in order",
      "no stories: no phase under $.phases has any"), "$.phases[].stories"),
    ({"phases": []}, "phases",
     ("stories under $.phases[].stories: 0 phases flattened in order",
      "no stories: no phase under $.phases has any"), "$.phases[].stories"),
])
def test_empty_container_gives_zero_stories(data: object, dialect: str, notes: tuple[str, ...],
                                            stories_path: str) -> None:
    result = check(data)
    assert result.data["userStories"] == []
    assert result.origins == ()
    assert (result.dialect, result.notes, result.stories_path) == (dialect, notes, stories_path)


def test_empty_container_keeps_the_header() -> None:
    result = check({"project": "stub", "branchName": "ralph/feature", "userStories": []})
    assert result.data == {"project": "stub", "branchName": "ralph/feature", "description": "",
                           "userStories": []}


# ---------------------------------------------------------------------------------------------
# Criteria


@pytest.mark.parametrize("key", ["acceptance", "steps", "steps_to_verify", "acceptance_tests"])
def test_criteria_keys(key: str) -> None:
    result = check(one_story(id="A", title="t", passes=False, **{key: ["one", "two"]}))
    story = result.data["userStories"][0]
    assert story["acceptanceCriteria"] == ["one", "two"]
    assert key not in story
    assert result.dialect == key
    assert result.notes == (f"criteria from '{key}' for 1 story",)
    assert result.origins == (Origin(("userStories", 0), criteria_key=key),)


def test_single_string_is_one_criterion() -> None:
    result = check(one_story(id="A", title="t", acceptance="it works"))
    assert result.data["userStories"][0]["acceptanceCriteria"] == ["it works"]
    assert "single-string criteria for 1 story" in result.notes
    assert result.origins == (Origin(("userStories", 0), criteria_key="acceptance",
                                     criteria_string=True, done_key=""),)


@pytest.mark.parametrize("criteria", [None, [], "", "MISSING"])
def test_no_criteria_becomes_the_title(criteria: object) -> None:
    story: dict[str, Any] = {"id": "A", "title": "Make it fast", "passes": True}
    if criteria != "MISSING":
        story["acceptanceCriteria"] = criteria
    result = check({"userStories": [story]})
    assert result.data["userStories"][0]["acceptanceCriteria"] == ["Make it fast"]
    assert "criteria from titles for 1 story" in result.notes
    assert "title-criteria" in result.dialect
    assert result.origins == (Origin(("userStories", 0), criteria_key=""),)


def test_other_criteria_keys_beside_the_one_used_are_kept() -> None:
    result = check(one_story(id="A", title="t", acceptance=["x"], steps=["s"]))
    story = result.data["userStories"][0]
    assert story["acceptanceCriteria"] == ["x"]
    assert story["steps"] == ["s"]
    assert result.origins[0].criteria_key == "acceptance"


@pytest.mark.parametrize("criteria", [{"x": 1}, 5, True, 1.5])
def test_criteria_of_no_known_form_kept_for_the_schema(criteria: object) -> None:
    result = check(one_story(id="A", title="t", steps=criteria), valid=False)
    story = result.data["userStories"][0]
    assert story["acceptanceCriteria"] == criteria
    assert "steps" not in story
    assert result.origins[0].criteria_key == "steps"
    assert schema_error_paths(result.data) == {("userStories", 0, "acceptanceCriteria")}


def test_criterion_items_of_no_known_form_kept_for_the_schema() -> None:
    items = ["ok", 5, None, ["x"], {"text": "no check"}, {"run": "true"}]
    result = check(one_story(id="A", title="t", acceptanceCriteria=items), valid=False)
    assert result.data["userStories"][0]["acceptanceCriteria"] == items
    assert result.dialect == "canonical"
    assert schema_error_paths(result.data) == {
        ("userStories", 0, "acceptanceCriteria", i) for i in (1, 2, 3, 4)}


# ---------------------------------------------------------------------------------------------
# Priority


@pytest.mark.parametrize(("raw", "value", "note"), [
    ("high", 1, "priority 'high' -> 1"),
    ("MEDIUM", 2, "priority 'MEDIUM' -> 2"),
    ("Low", 3, "priority 'Low' -> 3"),
    ("P0", 0, "priority 'P0' -> 0"),
    ("p9", 9, "priority 'p9' -> 9"),
    ("P0-when-scaling", 0, "priority 'P0-when-scaling' -> 0"),
    ("7", 7, "priority '7' -> 7"),
    (2.0, 2, "priority 2.0 -> 2"),
    (1.5, 1, "priority 1.5 -> 1"),
])
def test_priority_forms(raw: object, value: int, note: str) -> None:
    result = check({"userStories": [canonical_story(priority=raw)]})
    assert result.data["userStories"][0]["priority"] == value
    assert result.notes == (note,)


def test_int_priority_unchanged_and_missing_priority_left_out() -> None:
    result = check({"userStories": [canonical_story(priority=4),
                                    canonical_story("B", priority=None)]})
    first, second = result.data["userStories"]
    assert first["priority"] == 4
    assert "priority" not in second
    assert result.dialect == "canonical"


def test_priority_notes_count_stories() -> None:
    result = check({"stories": [canonical_story(str(i), priority="P2") for i in range(3)]})
    assert "priority 'P2' -> 2 (3 stories)" in result.notes


@pytest.mark.parametrize("raw", ["urgent", -1, "P10", "", True, -0.5, [1], {"level": 1}])
def test_priority_of_no_known_form_kept_for_the_schema(raw: object) -> None:
    result = check({"userStories": [canonical_story(priority=raw)]}, valid=False)
    assert result.data["userStories"][0]["priority"] == raw
    assert (result.dialect, result.notes) == ("canonical", ())
    assert schema_error_paths(result.data) == {("userStories", 0, "priority")}


# ---------------------------------------------------------------------------------------------
# Done


@pytest.mark.parametrize(("status", "done"), [
    ("done", True), ("Complete", True), ("completed", True), ("PASSED ", True),
    ("open", False), ("in-progress", False), ("", False)])
def test_status_becomes_passes(status: str, done: bool) -> None:
    story = {"id": "A", "title": "t", "acceptanceCriteria": ["c"], "status": status}
    result = check({"userStories": [story]})
    out = result.data["userStories"][0]
    assert out["passes"] is done
    assert "status" not in out
    assert result.dialect == "status"
    assert result.notes == (f"status {status!r} -> passes {str(done).lower()}",)
    assert result.origins == (Origin(("userStories", 0), done_key="status"),)


def test_passes_wins_over_status() -> None:
    story = canonical_story(passes=True, status="open")
    result = check({"userStories": [story]})
    out = result.data["userStories"][0]
    assert out["passes"] is True
    assert out["status"] == "open"  # not used: kept as another story key
    assert result.dialect == "canonical"
    assert result.origins[0].done_key == "passes"


def test_null_status_is_no_status() -> None:
    result = check(one_story(id="A", title="t", acceptanceCriteria=["c"], status=None))
    assert result.data["userStories"][0]["passes"] is False
    assert result.origins[0].done_key == ""


@pytest.mark.parametrize("passes", ["yes", "true", 1, 0, ["x"]])
def test_passes_of_no_known_form_kept_for_the_schema(passes: object) -> None:
    result = check({"userStories": [canonical_story(passes=passes)]}, valid=False)
    assert result.data["userStories"][0]["passes"] == passes
    assert result.origins[0].done_key == "passes"
    assert schema_error_paths(result.data) == {("userStories", 0, "passes")}


# ---------------------------------------------------------------------------------------------
# Ids and titles


def test_mixed_int_and_string_ids_and_word_priority() -> None:
    data = {"project": "example", "stories": [
        {"id": 1, "priority": 1, "title": "a", "acceptance": ["x"], "passes": True},
        {"id": 2, "priority": 2, "title": "b", "acceptance": ["y"], "passes": False},
        {"id": "task-3", "title": "c", "status": "open", "priority": "high",
         "acceptance": ["z"]}]}
    result = check(data)
    stories = result.data["userStories"]
    assert [s["id"] for s in stories] == ["1", "2", "task-3"]
    assert [s["priority"] for s in stories] == [1, 2, 1]
    assert [s["passes"] for s in stories] == [True, False, False]
    assert result.dialect == "stories+acceptance+int-ids+word-priority+status"
    assert result.notes == (
        "stories under $.stories", "integer ids made strings for 2 stories",
        "criteria from 'acceptance' for 3 stories", "priority 'high' -> 1 (1 story)",
        "status 'open' -> passes false (1 story)")
    assert [o.id_synthesized for o in result.origins] == [False, False, False]
    assert [o.done_key for o in result.origins] == ["passes", "passes", "status"]


def test_ids_synthesized_from_position_only_where_missing() -> None:
    data = {"items": [{"title": "a"}, {"id": "keep", "title": "b"}, {"id": None, "title": "c"},
                      {"id": "", "title": "d"}]}
    result = check(data)
    assert [s["id"] for s in result.data["userStories"]] == ["S1", "keep", "S3", "S4"]
    assert "ids synthesized from position: S1, S3, S4" in result.notes
    assert [o.id_synthesized for o in result.origins] == [True, False, True, True]


@pytest.mark.parametrize("sid", [True, False, 1.5, ["x"], {"id": "a"}])
def test_id_of_no_known_form_kept_for_the_schema(sid: object) -> None:
    result = check(one_story(id=sid, title="t", acceptanceCriteria=["c"]), valid=False)
    assert result.data["userStories"][0]["id"] == sid
    assert result.origins[0].id_synthesized is False
    assert "position-ids" not in result.dialect
    assert schema_error_paths(result.data) == {("userStories", 0, "id")}


def test_items_without_id_or_title() -> None:
    # items with only category/description/steps_to_verify/passes
    data = {"name": "app", "version": "1", "items": [
        {"category": "Auth", "description": "User can sign up\nwith email",
         "steps_to_verify": ["open page", "submit"], "passes": True},
        {"category": "Auth", "description": "User can log out", "steps_to_verify": ["click"],
         "passes": False},
        {"category": "UI", "description": "Dark mode", "steps_to_verify": ["toggle"],
         "passes": False}]}
    result = check(data)
    stories = result.data["userStories"]
    assert [(s["id"], s["title"]) for s in stories] == [
        ("S1", "User can sign up"), ("S2", "User can log out"), ("S3", "Dark mode")]
    assert stories[0]["category"] == "Auth"
    assert stories[0]["description"] == "User can sign up\nwith email"
    assert result.data["project"] == "app"
    assert result.dialect == "name+items+title-from-description+steps_to_verify+position-ids"
    assert result.notes == ("project from $.name", "stories under $.items",
                            "ids synthesized from position: S1..S3",
                            "titles from descriptions for 3 stories",
                            "criteria from 'steps_to_verify' for 3 stories")
    assert result.stories_path == "$.items"
    assert result.origins == tuple(
        Origin(("items", i), criteria_key="steps_to_verify", id_synthesized=True,
               title_key="description") for i in range(3))


def test_title_from_description_also_makes_the_criterion() -> None:
    result = check(one_story(id="A", title="  ", description="\n  Speed it up  \nbody"))
    story = result.data["userStories"][0]
    assert story["title"] == "Speed it up"
    assert story["acceptanceCriteria"] == ["Speed it up"]
    assert result.dialect == "title-from-description+title-criteria"
    assert result.origins == (Origin(("userStories", 0), criteria_key="",
                                     title_key="description", done_key=""),)


@pytest.mark.parametrize("title", [5, ["a"], {"text": "t"}, True])
def test_title_of_no_known_form_kept_for_the_schema(title: object) -> None:
    # the description is not used in its place, and no criterion is made from it
    result = check(one_story(id="A", title=title, description="From the description"),
                   valid=False)
    story = result.data["userStories"][0]
    assert story["title"] == title
    assert story["acceptanceCriteria"] == []
    assert "title-criteria" not in result.dialect
    assert result.origins[0].title_key == "title"
    assert schema_error_paths(result.data) == {("userStories", 0, "title")}


@pytest.mark.parametrize("story", [
    {"id": "A"},
    {"id": "A", "title": None, "description": "   \n"},
    {"id": "A", "description": 5},
])
def test_no_title_and_no_description_leaves_title_missing(story: dict[str, Any]) -> None:
    result = check({"userStories": [story]}, valid=False)
    out = result.data["userStories"][0]
    assert "title" not in out
    assert out["acceptanceCriteria"] == []
    assert "title-criteria" not in result.dialect
    errors = list(VALIDATOR.iter_errors(result.data))
    assert any(tuple(e.absolute_path) == ("userStories", 0) and e.validator == "required"
               and "'title'" in e.message for e in errors)


def test_blank_title_without_description_kept() -> None:
    result = check(one_story(id="A", title="", acceptanceCriteria=["c"]), valid=False)
    assert result.data["userStories"][0]["title"] == ""
    assert schema_error_paths(result.data) == {("userStories", 0, "title")}


def test_features_with_project_object_and_status() -> None:
    data = {"project": {"name": "ralph-rs", "description": "CLI"},
            "verification": {"commands": []},
            "features": [{"id": "extract", "category": "refactor", "description": "Extract it",
                          "steps": ["Create file", "Move code"], "status": "complete",
                          "notes": "pure"}]}
    result = check(data)
    assert result.data["project"] == "ralph-rs"
    assert result.data["description"] == "CLI"
    story = result.data["userStories"][0]
    assert (story["title"], story["passes"], story["notes"]) == ("Extract it", True, "pure")
    assert result.dialect == "project-object+features+title-from-description+steps+status"
    assert result.origins == (Origin(("features", 0), criteria_key="steps",
                                     title_key="description", done_key="status"),)


# ---------------------------------------------------------------------------------------------
# Text fields and the header


def test_project_name_alias() -> None:
    result = check({"projectName": "big", "userStories": [canonical_story()]})
    assert result.data["project"] == "big"
    assert result.notes == ("project from $.projectName",)


def test_list_notes_and_description_joined() -> None:
    result = check({"userStories": [canonical_story(notes=["a", "b"], description=["c", "d"])]})
    story = result.data["userStories"][0]
    assert (story["notes"], story["description"]) == ("a\nb", "c\nd")
    assert result.dialect == "list-description+list-notes"
    assert result.notes == ("description lists joined for 1 story",
                            "notes lists joined for 1 story")


@pytest.mark.parametrize(("key", "value"), [
    ("description", 5), ("description", {"a": 1}), ("notes", 3), ("notes", [1, "b"]),
    ("notes", True)])
def test_story_text_of_no_known_form_kept_for_the_schema(key: str, value: object) -> None:
    result = check({"userStories": [canonical_story(**{key: value})]}, valid=False)
    assert result.data["userStories"][0][key] == value
    assert schema_error_paths(result.data) == {("userStories", 0, key)}


@pytest.mark.parametrize(("key", "value"), [
    ("project", 5), ("project", ["a"]), ("branchName", ["x"]), ("description", 3)])
def test_header_of_no_known_form_kept_for_the_schema(key: str, value: object) -> None:
    result = check({key: value, "userStories": [canonical_story()]}, valid=False)
    assert result.data[key] == value
    assert schema_error_paths(result.data) == {(key,)}


# ---------------------------------------------------------------------------------------------
# Data of no known dialect


@pytest.mark.parametrize(("data", "problems"), [
    ("just text", [("$", f'expected {TOP}; found string "just text"')]),
    (None, [("$", f"expected {TOP}; found null")]),
    (42, [("$", f"expected {TOP}; found number 42")]),
    ({"version": 1}, [("$", f"no stories found: expected {TOP}; found keys: version")]),
    ({}, [("$", f"no stories found: expected {TOP}; found keys: none")]),
    ({"version": 1, "task_graph": [], "acceptance_tests": []},
     [("$", f"no stories found: expected {TOP}; found keys: version, task_graph, "
       "acceptance_tests; $.acceptance_tests holds 0 criteria but no story owns them (put "
       'them in a story: {"id", "title", "acceptance_tests"})')]),
    ({"name": "x", "steps": ["only one"]},
     [("$", f"no stories found: expected {TOP}; found keys: name, steps; $.steps holds 1 "
       'criterion but no story owns them (put them in a story: {"id", "title", "steps"})')]),
    ({"tasks": {"a": 1}}, [("$.tasks", "expected an array of stories; found an object with "
                            "keys 'a'")]),
    ({"userStories": None}, [("$.userStories", "expected an array of stories; found null")]),
    ({"tasks": [{"id": "a", "title": "t"}, {"id": "b", "title": "u"}, "do it"]},
     [("$.tasks[2]", 'expected a story object with a title; found string "do it"')]),
    ([1, ["x"]], [("$[0]", "expected a story object with a title; found number 1"),
                  ("$[1]", "expected a story object with a title; found an array of 1 item")]),
    ({"phases": "soon"}, [("$.phases", "expected an array of phases, each an object with a "
                           '\'stories\' array; found string "soon"')]),
    ({"phases": [["x"]]}, [("$.phases[0]", "expected a phase object with a 'stories' array; "
                            "found an array of 1 item")]),
    ({"phases": [{"stories": {"a": 1, "b": 2}}]},
     [("$.phases[0].stories", "expected an array of stories; found an object with keys "
       "'a', 'b'")]),
    (one_story(id="a", title="t", status=3),
     [("$.userStories[0].status", "expected a string such as 'done' or 'open'; found number 3")]),
    (one_story(id="a", title="t", status=True),
     [("$.userStories[0].status", "expected a string such as 'done' or 'open'; found "
       "boolean true")]),
])
def test_errors_say_what_was_expected_and_found(data: object,
                                                problems: list[tuple[str, str]]) -> None:
    before = copy.deepcopy(data)
    with pytest.raises(DialectError) as info:
        normalize(data)
    assert info.value.problems == tuple(problems)
    assert str(info.value) == "\n".join(f"{path}: {message}" for path, message in problems)
    assert data == before
    assert isinstance(info.value, ValueError)


def test_every_problem_reported_with_its_path() -> None:
    data = {"phases": [["x"], {"stories": "y"},
                       {"stories": [1, {"id": True, "title": 5, "priority": "soon",
                                        "status": []}]}]}
    with pytest.raises(DialectError) as info:
        normalize(data)
    # the id, title and priority are for the schema to judge: not problems here
    assert [path for path, _ in info.value.problems] == [
        "$.phases[0]", "$.phases[1].stories", "$.phases[2].stories[0]",
        "$.phases[2].stories[1].status"]
    assert len(str(info.value).splitlines()) == 4
    assert str(info.value).splitlines()[3] == (
        "$.phases[2].stories[1].status: expected a string such as 'done' or 'open'; "
        "found an array of 0 items")


def test_status_not_checked_when_passes_is_there() -> None:
    result = check({"userStories": [canonical_story(passes=True, status=3)]})
    assert result.data["userStories"][0]["status"] == 3


# ---------------------------------------------------------------------------------------------
# describe


@pytest.mark.parametrize(("value", "text"), [
    (None, "null"),
    (True, "boolean true"),
    (False, "boolean false"),
    (42, "number 42"),
    (-1.5, "number -1.5"),
    ("text", 'string "text"'),
    ("", 'string ""'),
    ('say "hi"', r'string "say \"hi\""'),
    ("héllo", 'string "héllo"'),
    ("x" * 60, 'string "' + "x" * 60 + '"'),
    ("x" * 61, 'string "' + "x" * 57 + '..."'),
    ([], "an array of 0 items"),
    (["a"], "an array of 1 item"),
    ([1, 2], "an array of 2 items"),
    ({}, "an empty object"),
    ({"a": 1, "b": 2}, "an object with keys 'a', 'b'"),
    ({str(i): i for i in range(10)},
     "an object with keys '0', '1', '2', '3', '4', '5', '6', '7'"),
    (datetime.date(2025, 1, 2), "date"),
])
def test_describe(value: object, text: str) -> None:
    assert describe(value) == text


# ---------------------------------------------------------------------------------------------
# Origins and source_path

#: Stories of every kind of origin, under phases.
MIXED = {"phases": [
    {"stories": [{"id": "A", "title": "t", "steps": ["one", "two"], "files": ["a", "b", "c"]}]},
    {"stories": [
        {"title": "Only a title", "passes": True},
        {"id": "C", "description": "From the description\nmore", "status": "done"},
        {"id": "D", "title": "d", "acceptance": "single"},
    ]}]}


def test_origins_of_mixed_stories() -> None:
    result = check(MIXED)
    assert result.stories_path == "$.phases[].stories"
    assert result.origins == (
        Origin(("phases", 0, "stories", 0), criteria_key="steps", done_key=""),
        Origin(("phases", 1, "stories", 0), criteria_key="", id_synthesized=True),
        Origin(("phases", 1, "stories", 1), criteria_key="", title_key="description",
               done_key="status"),
        Origin(("phases", 1, "stories", 2), criteria_key="acceptance", criteria_string=True,
               done_key=""),
    )


@pytest.mark.parametrize(("parts", "expected"), [
    # the story itself
    (("userStories", 0), ("phases", 0, "stories", 0)),
    (("userStories", 3), ("phases", 1, "stories", 2)),
    # criteria under another key: the index maps one to one
    (("userStories", 0, "acceptanceCriteria"), ("phases", 0, "stories", 0, "steps")),
    (("userStories", 0, "acceptanceCriteria", 1), ("phases", 0, "stories", 0, "steps", 1)),
    # other keys, kept or not there in the file, map to the same key
    (("userStories", 0, "id"), ("phases", 0, "stories", 0, "id")),
    (("userStories", 0, "title"), ("phases", 0, "stories", 0, "title")),
    (("userStories", 0, "passes"), ("phases", 0, "stories", 0, "passes")),
    (("userStories", 0, "files", 2), ("phases", 0, "stories", 0, "files", 2)),
    # a criterion made from the title: the title
    (("userStories", 1, "acceptanceCriteria", 0), ("phases", 1, "stories", 0, "title")),
    (("userStories", 1, "acceptanceCriteria"), ("phases", 1, "stories", 0, "title")),
    # a synthesized id: the story
    (("userStories", 1, "id"), ("phases", 1, "stories", 0)),
    (("userStories", 1, "passes"), ("phases", 1, "stories", 0, "passes")),
    # a title from the description: the description (and so its criterion too)
    (("userStories", 2, "title"), ("phases", 1, "stories", 1, "description")),
    (("userStories", 2, "acceptanceCriteria", 0), ("phases", 1, "stories", 1, "description")),
    (("userStories", 2, "id"), ("phases", 1, "stories", 1, "id")),
    # passes decided by status: the status
    (("userStories", 2, "passes"), ("phases", 1, "stories", 1, "status")),
    # a single-string criterion: the string
    (("userStories", 3, "acceptanceCriteria", 0), ("phases", 1, "stories", 2, "acceptance")),
    (("userStories", 3, "acceptanceCriteria"), ("phases", 1, "stories", 2, "acceptance")),
    # paths outside userStories, or not naming a story there: unchanged
    (("project",), ("project",)),
    (("branchName",), ("branchName",)),
    ((), ()),
    (("userStories",), ("userStories",)),
    (("userStories", "x"), ("userStories", "x")),
    # an index out of range: unchanged
    (("userStories", 4), ("userStories", 4)),
    (("userStories", 4, "title"), ("userStories", 4, "title")),
    (("userStories", -1, "id"), ("userStories", -1, "id")),
])
def test_source_path(parts: tuple[str | int, ...], expected: tuple[str | int, ...]) -> None:
    assert source_path(parts, normalize(MIXED).origins) == expected


def test_source_path_with_no_origins_is_unchanged() -> None:
    assert source_path(("userStories", 0, "title"), ()) == ("userStories", 0, "title")


def test_source_path_of_a_top_level_array() -> None:
    origins = normalize([{"id": "a", "title": "A"}, {"id": "b", "title": "B",
                                                    "acceptance": ["x", "y"]}]).origins
    assert source_path(("userStories", 0, "acceptanceCriteria", 0), origins) == (0, "title")
    assert source_path(("userStories", 1, "acceptanceCriteria", 1), origins) == (
        1, "acceptance", 1)
    assert source_path(("userStories", 1), origins) == (1,)


def test_source_path_finds_what_the_schema_rejects_in_the_file() -> None:
    data = {"tasks": [
        {"id": True, "title": "t", "steps": ["ok", 5], "priority": "urgent", "passes": "yes"},
        {"title": "u", "acceptance": "x", "notes": 7}]}
    result = check(data, valid=False)
    paths = schema_error_paths(result.data)
    assert {source_path(p, result.origins) for p in paths} == {
        ("tasks", 0, "id"), ("tasks", 0, "steps", 1), ("tasks", 0, "priority"),
        ("tasks", 0, "passes"), ("tasks", 1, "notes")}
    for p in paths:  # the value the schema rejected is the one written in the file
        assert at(data, source_path(p, result.origins)) == at(result.data, p)


# ---------------------------------------------------------------------------------------------
# The real corpus, when it sits next to the repository

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "prds"

#: file -> (stories, criteria, dialect, stories_path), or the problem message of the
#: DialectError (its path is "$") given as the start and a part it must contain.
CORPUS_EXPECTED: dict[str, tuple[int, int, str, str] | tuple[str, str]] = {
    "backticked-commands.json": (24, 138, "canonical", "$.userStories"),
    "criteria-objects-with-commands.json": (10, 36, "canonical", "$.userStories"),
    "empty-stub.json": (0, 0, "canonical", "$.userStories"),
    "features-with-comments.jsonc": (
        4, 23, "project-object+features+title-from-description+steps+status", "$.features"),
    "items-with-steps.json": (
        77, 430, "name+items+title-from-description+steps_to_verify+position-ids", "$.items"),
    "korean-waves.json": (8, 65, "depends_on", "$.userStories"),
    "large-71-stories.json": (71, 453, "projectName+dependencies", "$.userStories"),
    "mixed-id-and-priority-types.json": (
        3, 9, "stories+acceptance+int-ids+word-priority+status", "$.stories"),
    "phases-nested-stories.json": (
        100, 270, "phases+acceptance+P-priority+depends_on+title-criteria",
        "$.phases[].stories"),
    "snarktank-example.json": (4, 17, "canonical", "$.userStories"),
    "top-level-array.json": (8, 8, "top-level-array+title-criteria", "$"),
    "yaml-acceptance-tests.yaml": (f"no stories found: expected {TOP}; found keys: ",
                                   "; $.acceptance_tests holds 5 criteria but no story owns "
                                   "them"),
}


def test_corpus() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"the PRD corpus is not here: {CORPUS}")
    files = sorted(p for p in CORPUS.iterdir() if p.suffix in (".json", ".jsonc", ".yaml"))
    assert files
    for path in files:
        text = path.read_text("utf-8")
        data = yaml.safe_load(text) if path.suffix == ".yaml" else json.loads(
            strip_jsonc(text) if path.suffix == ".jsonc" else text)
        expected = CORPUS_EXPECTED.get(path.name)
        assert expected is not None, f"no expectation for {path.name}: add one"
        if len(expected) == 2:
            start, part = expected
            with pytest.raises(DialectError) as info:
                normalize(data)
            [(where, message)] = info.value.problems
            assert where == "$", path.name
            assert message.startswith(start), path.name
            assert part in message, path.name
            continue
        result = check(data)
        stories = result.data["userStories"]
        got = (len(stories), sum(len(s["acceptanceCriteria"]) for s in stories), result.dialect,
               result.stories_path)
        assert got == expected, path.name


def test_corpus_absent_skips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CORPUS", tmp_path / "none")
    with pytest.raises(pytest.skip.Exception, match="corpus is not here"):
        test_corpus()


def test_the_first_criteria_key_that_holds_criteria_is_used() -> None:
    result = check({"tasks": [{"title": "t", "acceptanceCriteria": [], "steps": ["a", "b"]}]})
    assert result.data["userStories"][0]["acceptanceCriteria"] == ["a", "b"]
    assert result.origins[0].criteria_key == "steps"
    result = check({"tasks": [{"title": "t", "acceptance": "  ", "steps": "a"}]})
    assert result.data["userStories"][0]["acceptanceCriteria"] == ["a"]
