"""Unit tests of :func:`pytest_ralph.dialects.normalize`.

Every fixture is a small dict or list written here; each reproduces one quirk seen in
real PRD files (the corpus next to the repository, which the last test reads when present).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pytest_ralph.dialects import DialectError, Normalized, normalize
from pytest_ralph.prd import schema, strip_jsonc


def check(data: object) -> Normalized:
    """Normalize ``data`` and check the invariants every result must hold: the input is
    unchanged, the output matches the canonical schema, and normalizing it again is a no-op."""
    before = copy.deepcopy(data)
    result = normalize(data)
    assert data == before, "the input was mutated"
    jsonschema.Draft202012Validator(schema()).validate(result.data)
    again = normalize(result.data)
    assert again == Normalized(result.data, "canonical", ())
    return result


def canonical_story(sid: str = "US-001", **extra: Any) -> dict[str, Any]:
    story: dict[str, Any] = {"id": sid, "title": "Add login", "description": "As a user...",
                             "acceptanceCriteria": ["Typecheck passes"], "priority": 1,
                             "passes": False, "notes": ""}
    story.update(extra)
    return story


# ---------------------------------------------------------------------------------------------
# Canonical


def test_canonical_file_is_unchanged() -> None:
    data = {"project": "Acme", "branchName": "ralph/login", "description": "d",
            "userStories": [canonical_story(), canonical_story("US-002", passes=True)]}
    result = check(data)
    assert result == Normalized(data, "canonical", ())
    assert result.data is not data
    assert result.data["userStories"][0] is not data["userStories"][0]


def test_canonical_defaults_filled_silently() -> None:
    result = check({"userStories": [{"id": "A", "title": "t", "acceptanceCriteria": ["c"]}]})
    assert result.dialect == "canonical"
    assert result.notes == ()
    assert result.data == {"project": "", "branchName": "", "description": "", "userStories": [
        {"id": "A", "title": "t", "description": "", "acceptanceCriteria": ["c"],
         "passes": False, "notes": ""}]}


def test_criterion_objects_and_extra_keys_kept_as_they_are() -> None:
    criterion = {"id": "AC-1", "text": "builds", "testCommand": "make", "passes": True,
                 "lastRun": "2025-01-01"}
    data = {"userStories": [{"id": "US-1", "title": "t", "complexity": "low",
                             "acceptanceCriteria": [criterion, {"text": "x", "run": "true"}]}]}
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


# ---------------------------------------------------------------------------------------------
# Where the stories are


@pytest.mark.parametrize("key", ["stories", "tasks", "items", "features"])
def test_story_containers(key: str) -> None:
    result = check({key: [canonical_story()]})
    assert result.dialect == key
    assert result.notes == (f"stories under $.{key}",)
    assert result.data["userStories"] == [canonical_story()]


def test_top_level_array() -> None:
    data = [{"id": "DVB-001", "title": "Ring buffer", "priority": 1, "passes": True},
            {"id": "DVB-002", "title": "Guard", "priority": 2, "passes": False}]
    result = check(data)
    assert result.dialect == "top-level-array+title-criteria"
    assert result.notes == ("stories are the top-level array", "criteria from titles for 2 stories")
    assert [s["acceptanceCriteria"] for s in result.data["userStories"]] == [["Ring buffer"],
                                                                             ["Guard"]]
    assert result.data["project"] == ""


def test_phases_flattened_in_order() -> None:
    data = {"project": "dutch", "phases": [
        {"id": "p1", "stories": [{"id": "US-001", "title": "a", "acceptance": ["x"]},
                                 {"id": "US-002", "title": "b", "acceptance": ["y"]}]},
        {"id": "p2", "goal": "no stories yet"},
        {"id": "p3", "stories": [{"id": "US-003", "title": "c", "acceptance": ["z"]}]}]}
    result = check(data)
    assert [s["id"] for s in result.data["userStories"]] == ["US-001", "US-002", "US-003"]
    assert result.dialect == "phases+acceptance"
    assert result.notes[0] == "stories under $.phases[].stories: 3 phases flattened in order"
    assert "phases" not in result.data


def test_first_container_wins_and_says_so() -> None:
    result = check({"stories": [canonical_story("A")], "tasks": [canonical_story("B")]})
    assert [s["id"] for s in result.data["userStories"]] == ["A"]
    assert "stories taken from $.stories; ignored $.tasks" in result.notes


# ---------------------------------------------------------------------------------------------
# Criteria


@pytest.mark.parametrize("key", ["acceptance", "steps", "steps_to_verify", "acceptance_tests"])
def test_criteria_keys(key: str) -> None:
    result = check({"userStories": [{"id": "A", "title": "t", key: ["one", "two"]}]})
    story = result.data["userStories"][0]
    assert story["acceptanceCriteria"] == ["one", "two"]
    assert key not in story
    assert result.dialect == key
    assert result.notes == (f"criteria from '{key}' for 1 story",)


def test_single_string_is_one_criterion() -> None:
    result = check({"userStories": [{"id": "A", "title": "t", "acceptance": "it works"}]})
    assert result.data["userStories"][0]["acceptanceCriteria"] == ["it works"]
    assert "single-string criteria for 1 story" in result.notes


@pytest.mark.parametrize("criteria", [None, [], "", "MISSING"])
def test_no_criteria_becomes_the_title(criteria: object) -> None:
    story: dict[str, Any] = {"id": "A", "title": "Make it fast"}
    if criteria != "MISSING":
        story["acceptanceCriteria"] = criteria
    result = check({"userStories": [story]})
    assert result.data["userStories"][0]["acceptanceCriteria"] == ["Make it fast"]
    assert "criteria from titles for 1 story" in result.notes
    assert "title-criteria" in result.dialect


# ---------------------------------------------------------------------------------------------
# Priority, done, ids, titles, header


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


def test_passes_wins_over_status() -> None:
    story = canonical_story(passes=True, status="open")
    result = check({"userStories": [story]})
    assert result.data["userStories"][0]["passes"] is True
    assert result.dialect == "canonical"


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
    assert result.dialect == "stories+int-ids+acceptance+word-priority+status"
    assert result.notes == (
        "stories under $.stories", "integer ids made strings for 2 stories",
        "criteria from 'acceptance' for 3 stories", "priority 'high' -> 1 (1 story)",
        "status 'open' -> passes false (1 story)")


def test_ids_synthesized_from_position_only_where_missing() -> None:
    data = {"items": [{"title": "a"}, {"id": "keep", "title": "b"}, {"id": None, "title": "c"},
                      {"id": "", "title": "d"}]}
    result = check(data)
    assert [s["id"] for s in result.data["userStories"]] == ["S1", "keep", "S3", "S4"]
    assert "ids synthesized from position: S1, S3, S4" in result.notes


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
    assert result.data["project"] == "app"
    assert result.notes == ("project from $.name", "stories under $.items",
                            "ids synthesized from position: S1..S3",
                            "titles from descriptions for 3 stories",
                            "criteria from 'steps_to_verify' for 3 stories")


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


def test_project_name_alias() -> None:
    result = check({"projectName": "big", "userStories": [canonical_story()]})
    assert result.data["project"] == "big"
    assert result.notes == ("project from $.projectName",)


def test_list_notes_joined() -> None:
    result = check({"userStories": [canonical_story(notes=["a", "b"])]})
    assert result.data["userStories"][0]["notes"] == "a\nb"


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(("data", "message"), [
    ({"branchName": "ralph/feature", "userStories": []},
     "no stories: $.userStories is empty; expected at least one story"),
    ([], "no stories: $ is an empty array; expected at least one story"),
    ({"phases": [{"id": "p1", "stories": []}]},
     "no stories: no phase under $.phases has any; expected at least one story"),
    ({"version": 1, "task_graph": [], "acceptance_tests": []},
     "no stories found: expected an object with stories under userStories | stories | tasks "
     "| items | features | phases[].stories, or an array of stories; found keys: version, "
     "task_graph, acceptance_tests"),
    ("just text", "$ is a string; expected an object with stories under"),
    (None, "$ is null; expected"),
    ({"tasks": {"a": 1}}, "$.tasks is an object; expected an array of stories"),
    ({"tasks": [{"id": "a", "title": "t"}, {"id": "b", "title": "u"}, "do it"]},
     "$.tasks[2] is a string; expected a story object"),
    ({"phases": "soon"}, "$.phases is a string; expected an array of phases"),
    ({"phases": [["x"]]}, "$.phases[0] is an array; expected a phase object"),
    ({"userStories": [{"id": "a"}]}, "$.userStories[0] has no title; expected a non-empty"),
    ({"userStories": [{"id": True, "title": "t"}]},
     "$.userStories[0].id is a boolean (true); expected a string or an integer"),
    ({"userStories": [canonical_story(priority="urgent")]},
     "$.userStories[0].priority is a string 'urgent'; expected an integer >= 0, a number, "
     "high/medium/low or P0..P9"),
    ({"userStories": [canonical_story(priority=-1)]}, "$.userStories[0].priority is a number"),
    ({"userStories": [canonical_story(priority="P10")]}, "priority is a string 'P10'"),
    ({"userStories": [canonical_story(passes="yes")]},
     "$.userStories[0].passes is a string; expected true or false"),
    ({"userStories": [{"id": "a", "title": "t", "status": 3}]},
     "$.userStories[0].status is a number (3); expected a string"),
    ({"userStories": [{"id": "a", "title": "t", "steps": {"x": 1}}]},
     "$.userStories[0].steps is an object; expected an array of criteria"),
    ({"userStories": [{"id": "a", "title": "t", "acceptanceCriteria": ["ok", 5]}]},
     "$.userStories[0].acceptanceCriteria[1] is a number (5); expected a string or a "
     "criterion object"),
    ({"project": 5, "userStories": [canonical_story()]},
     "$.project is a number (5); expected a string"),
])
def test_errors_say_what_was_found_and_expected(data: object, message: str) -> None:
    before = copy.deepcopy(data)
    with pytest.raises(DialectError) as info:
        normalize(data)
    assert message in str(info.value)
    assert data == before
    assert isinstance(info.value, ValueError)


def test_every_problem_reported_with_its_path() -> None:
    data = {"tasks": ["a", {"id": "b", "title": "t", "priority": "soon"}, 3]}
    with pytest.raises(DialectError) as info:
        normalize(data)
    assert [path for path, _ in info.value.problems] == [
        "$.tasks[0]", "$.tasks[1].priority", "$.tasks[2]"]
    assert len(str(info.value).splitlines()) == 3


# ---------------------------------------------------------------------------------------------
# The real corpus, when it sits next to the repository

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "prds"

#: file -> (stories, criteria, dialect), or the start of the DialectError message.
CORPUS_EXPECTED: dict[str, tuple[int, int, str] | str] = {
    "backticked-commands.json": (24, 138, "canonical"),
    "criteria-objects-with-commands.json": (10, 36, "canonical"),
    "empty-stub.json": "no stories: $.userStories is empty",
    "features-with-comments.jsonc": (
        4, 23, "project-object+features+title-from-description+steps+status"),
    "items-with-steps.json": (
        77, 430, "name+items+position-ids+title-from-description+steps_to_verify"),
    "korean-waves.json": (8, 65, "canonical"),
    "large-71-stories.json": (71, 453, "projectName"),
    "mixed-id-and-priority-types.json": (
        3, 9, "stories+int-ids+acceptance+word-priority+status"),
    "phases-nested-stories.json": (100, 270, "phases+acceptance+P-priority+title-criteria"),
    "snarktank-example.json": (4, 17, "canonical"),
    "top-level-array.json": (8, 8, "top-level-array+title-criteria"),
    "yaml-acceptance-tests.yaml": "no stories found: expected an object with stories",
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
        if isinstance(expected, str):
            with pytest.raises(DialectError, match="^" + expected.replace("$", r"\$")):
                normalize(data)
            continue
        result = check(data)
        stories = result.data["userStories"]
        got = (len(stories), sum(len(s["acceptanceCriteria"]) for s in stories), result.dialect)
        assert got == expected, path.name


def test_corpus_absent_skips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CORPUS", tmp_path / "none")
    with pytest.raises(pytest.skip.Exception, match="corpus is not here"):
        test_corpus()


def test_output_shares_nothing_with_input() -> None:
    data = {"tasks": [{"id": "a", "title": "t", "files": ["x.py"],
                       "acceptance": [{"text": "ok", "run": "true"}]}]}
    before = copy.deepcopy(data)
    story = normalize(data).data["userStories"][0]
    story["files"].append("y.py")
    story["acceptanceCriteria"][0]["run"] = "false"
    assert data == before
