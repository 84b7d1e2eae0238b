"""Unit tests of :mod:`pytest_ralph.parallel.plan`: which stories may run together.

Every PRD is a real file loaded with :func:`pytest_ralph.prd.load.load_prd`; branch names are
judged by git itself (``git check-ref-format``); the corpus next to the repository is planned
when it is there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.parallel.plan import (
    branch_name,
    branch_names,
    check,
    dependency_problems,
    matrix,
    ready,
    stuck,
    waves,
)
from pytest_ralph.prd.errors import PRDError
from pytest_ralph.prd.load import load_prd
from pytest_ralph.prd.model import PRD

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "prds"


def story(sid: str, *deps: str, priority: int | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": sid, "title": f"story {sid}", "acceptanceCriteria": ["done"]}
    if deps:
        out["dependsOn"] = list(deps)
    if priority is not None:
        out["priority"] = priority
    return {**out, **extra}


def load(tmp_path: Path, *stories: dict[str, Any]) -> PRD:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"userStories": list(stories)}, indent=2) + "\n", "utf-8")
    return load_prd(path)


def ids(stories: list[Any]) -> list[str]:
    return [s.id for s in stories]


def wave_ids(prd: PRD, done: tuple[str, ...] = ()) -> list[list[str]]:
    return [ids(w) for w in waves(prd, done)]


# ---------------------------------------------------------------------------------------------
# Refused dependencies


def test_an_unknown_id_is_named_with_the_known_ones_and_a_close_match(tmp_path: Path) -> None:
    prd = load(tmp_path, story("US-001"), story("US-002", "US-01"))
    with pytest.raises(PRDError) as info:
        check(prd)
    [problem] = info.value.problems
    assert problem.json_path == "$.userStories[1].dependsOn"
    assert problem.message == ("story 'US-002' depends on 'US-01', which is no story of this "
                               "PRD; expected one of its story ids (US-001, US-002)")
    assert problem.hint.startswith("did you mean 'US-001'? fix the id, or remove it")
    line = prd.path.read_text("utf-8").splitlines().index('    {', 3) + 1  # the story's "{"
    assert problem.line == prd.stories[1].line == line
    text = info.value.describe()
    assert text.startswith(f"invalid PRD {prd.path}: 1 problem")
    assert f"{prd.path}:{line}: $.userStories[1].dependsOn: story 'US-002'" in text


def test_the_known_ids_are_shortened(tmp_path: Path) -> None:
    stories = [story(f"S{n:02}") for n in range(1, 26)]
    prd = load(tmp_path, *stories, story("X", "nope"))
    [problem] = dependency_problems(prd)
    assert "(S01, S02, S03, S04, S05, S06, S07, S08, S09, S10, ... and 16 more)" in \
        problem.message
    assert problem.hint.startswith("fix the id")


def test_a_story_depending_on_itself(tmp_path: Path) -> None:
    prd = load(tmp_path, story("US-001", "US-001"))
    [problem] = dependency_problems(prd)
    assert problem.json_path == "$.userStories[0].dependsOn"
    assert problem.message == ("story 'US-001' depends on itself; expected the ids of other "
                               "stories")
    assert problem.hint == "remove 'US-001' from its dependsOn"


def test_a_cycle_is_named(tmp_path: Path) -> None:
    prd = load(tmp_path, story("US-001", "US-003"), story("US-002"), story("US-003", "US-001"))
    with pytest.raises(PRDError) as info:
        check(prd)
    [problem] = info.value.problems
    assert problem.json_path == "$.userStories[0].dependsOn"
    assert problem.message == ("dependency cycle: US-001 -> US-003 -> US-001; expected "
                               "dependencies that end (no story of a cycle could ever start)")
    assert problem.hint == "remove one of these dependencies"
    assert problem.line == prd.stories[0].line == 3


def test_a_longer_cycle_and_the_stories_tied_in_it(tmp_path: Path) -> None:
    prd = load(tmp_path, story("A", "B"), story("B", "C"), story("C", "A", "D"),
               story("D", "C"), story("E", "A"))
    [problem] = dependency_problems(prd)
    assert "dependency cycle: A -> B -> C -> A;" in problem.message
    assert problem.hint == ("remove one of these dependencies (4 stories wait on each other: "
                            "A, B, C, D)")


def test_each_cycle_is_one_problem_and_every_problem_is_listed(tmp_path: Path) -> None:
    prd = load(tmp_path, story("A", "B"), story("B", "A"), story("C", "D", "Z"),
               story("D", "C"), story("E", "E"))
    with pytest.raises(PRDError) as info:
        check(prd)
    messages = [p.message for p in info.value.problems]
    assert messages == [  # in file order of the stories they are reported at
        "dependency cycle: A -> B -> A; expected dependencies that end (no story of a cycle "
        "could ever start)",
        "story 'C' depends on 'Z', which is no story of this PRD; expected one of its story ids "
        "(A, B, C, D, E)",
        "dependency cycle: C -> D -> C; expected dependencies that end (no story of a cycle "
        "could ever start)",
        "story 'E' depends on itself; expected the ids of other stories",
    ]


def test_problems_name_the_dialect_key_where_it_is_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"phases": [{"stories": [
        {"id": "US-001", "title": "a", "depends_on": ["US-009"]}]}]}, indent=2), "utf-8")
    [problem] = dependency_problems(load_prd(path))
    assert problem.json_path == "$.phases[0].stories[0].depends_on"


def test_a_long_chain_is_checked_without_recursion(tmp_path: Path) -> None:
    n = 3000
    prd = load(tmp_path, *[story(f"S{i}", *([f"S{i - 1}"] if i else [])) for i in range(n)],
               )
    assert dependency_problems(prd) == []
    assert len(waves(prd)) == n
    cyclic = load(tmp_path, *[story(f"S{i}", f"S{(i - 1) % n}") for i in range(n)])
    [problem] = dependency_problems(cyclic)
    assert problem.message.startswith("dependency cycle: S0 -> S2999 -> S2998")
    assert problem.message.count("->") == n


def test_the_planner_refuses_what_check_refuses(tmp_path: Path) -> None:
    prd = load(tmp_path, story("A", "B"), story("B", "A"))
    for call in (lambda: ready(prd), lambda: waves(prd), lambda: stuck(prd, ()),
                 lambda: matrix(prd, tmp_path)):
        with pytest.raises(PRDError, match="dependency cycle: A -> B -> A"):
            call()


# ---------------------------------------------------------------------------------------------
# Waves and the stories ready to start


def test_independent_stories_are_one_wave_in_priority_order(tmp_path: Path) -> None:
    prd = load(tmp_path, story("US-001", priority=3), story("US-002"),
               story("US-003", priority=1), story("US-004", priority=3))
    assert wave_ids(prd) == [["US-003", "US-001", "US-004", "US-002"]]
    assert ids(ready(prd)) == ["US-003", "US-001", "US-004", "US-002"]


def test_a_chain_is_sequential(tmp_path: Path) -> None:
    prd = load(tmp_path, story("US-003", "US-002", priority=1), story("US-002", "US-001"),
               story("US-001", priority=9))
    assert wave_ids(prd) == [["US-001"], ["US-002"], ["US-003"]]
    assert ids(ready(prd)) == ["US-001"]
    assert ids(ready(prd, running={"US-001"})) == []
    assert ids(ready(prd, merged={"US-001"})) == ["US-002"]
    assert ids(ready(prd, merged={"US-001", "US-002"})) == ["US-003"]
    assert ids(ready(prd, merged={"US-001", "US-002", "US-003"})) == []


def test_a_diamond(tmp_path: Path) -> None:
    prd = load(tmp_path, story("top"), story("left", "top", priority=2),
               story("right", "top", priority=1), story("bottom", "left", "right"))
    assert wave_ids(prd) == [["top"], ["right", "left"], ["bottom"]]
    assert ids(ready(prd, merged={"top"})) == ["right", "left"]
    assert ids(ready(prd, merged={"top", "left"}, running={"right"})) == []
    assert ids(ready(prd, merged={"top", "left", "right"})) == ["bottom"]


def test_a_story_waits_for_its_own_dependencies_only(tmp_path: Path) -> None:
    """A wave is a bound, not a barrier: B2 may start as soon as A1 is merged, while A2 still
    runs."""
    prd = load(tmp_path, story("A1"), story("A2"), story("B1", "A2"), story("B2", "A1"))
    assert wave_ids(prd) == [["A1", "A2"], ["B1", "B2"]]
    assert ids(ready(prd, merged={"A1"}, running={"A2"})) == ["B2"]


def test_waves_leave_out_what_is_done(tmp_path: Path) -> None:
    prd = load(tmp_path, story("a"), story("b", "a"), story("c", "b"), story("d"))
    assert wave_ids(prd, ("a",)) == [["b", "d"], ["c"]]
    assert wave_ids(prd, ("a", "b", "c", "d")) == []


def test_a_blocked_story_is_not_ready_and_holds_back_those_after_it(tmp_path: Path) -> None:
    prd = load(tmp_path, story("a"), story("b", "a"), story("c", "b"), story("d"),
               story("e", "d", "c"))
    assert ids(ready(prd, blocked={"a"})) == ["d"]
    assert stuck(prd, {"a"}) == {"b": "a", "c": "a", "e": "a"}
    assert stuck(prd, {"d"}) == {"e": "d"}
    assert stuck(prd, set()) == {}


def test_passes_true_is_planned_too(tmp_path: Path) -> None:
    """``passes: true`` is the story's claim: only a check says which criteria pass."""
    prd = load(tmp_path, story("a", passes=True), story("b", "a"))
    assert wave_ids(prd) == [["a"], ["b"]]
    assert ids(ready(prd)) == ["a"]


# ---------------------------------------------------------------------------------------------
# Branch names


def _valid_branch(name: str) -> bool:
    git = shutil.which("git")
    assert git is not None
    return subprocess.run([git, "check-ref-format", "--branch", name], capture_output=True,
                          check=False).returncode == 0


@pytest.mark.parametrize(("sid", "expected"), [
    ("US-001", "ralph/US-001"),
    ("W1-S1", "ralph/W1-S1"),
    ("a.b_c-1", "ralph/a.b_c-1"),
])
def test_plain_ids_are_their_own_branch(sid: str, expected: str) -> None:
    assert branch_name(sid) == expected
    assert _valid_branch(expected)


@pytest.mark.parametrize("sid", ["US..1", "US~1", "US^1", "US:1", "US?1", "US*1", "US\\1",
                                 "US-1.lock", "x.lock.lock", ".hidden", "trailing.", "@{1}",
                                 "-dash", "été", "故事-1", "US 1", "a@{b", "..", "~", "@",
                                 "x" * 200])
def test_other_ids_become_valid_deterministic_branches(sid: str) -> None:
    name = branch_name(sid)
    assert _valid_branch(name), name
    assert name == branch_name(sid)
    assert name.startswith("ralph/")
    assert len(name) <= len("ralph/") + 64
    assert not name.endswith(".lock")
    assert name != f"ralph/{sid}"


def test_branches_stay_unique() -> None:
    names = branch_names(["US 1", "US-1", "US:1", "US/1"])
    assert len(set(names.values())) == len(names)
    assert names["US-1"] == "ralph/US-1"
    assert names["US 1"] != names["US:1"]
    crafted = branch_name("US 1").removeprefix("ralph/")
    clash = branch_names(["US 1", crafted])
    assert clash == {"US 1": f"ralph/{crafted}", crafted: f"ralph/{crafted}-2"}


# ---------------------------------------------------------------------------------------------
# The matrix, and the corpus


def test_matrix_shape(tmp_path: Path) -> None:
    prd = load(tmp_path, story("US-001"), story("US-002", priority=1),
               story("US-003", "US-001", "US-002"))
    plan = matrix(prd, tmp_path)
    assert plan == {
        "prd": "prd.json",
        "waves": [["US-002", "US-001"], ["US-003"]],
        "include": [
            {"story": "US-002", "title": "story US-002", "branch": "ralph/US-002", "wave": 0,
             "dependsOn": []},
            {"story": "US-001", "title": "story US-001", "branch": "ralph/US-001", "wave": 0,
             "dependsOn": []},
            {"story": "US-003", "title": "story US-003", "branch": "ralph/US-003", "wave": 1,
             "dependsOn": ["US-001", "US-002"]},
        ],
    }
    assert json.loads(json.dumps(plan)) == plan
    outside = matrix(prd, tmp_path / "elsewhere")
    assert outside["prd"] == prd.path.as_posix()


needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")


@needs_corpus
def test_the_large_corpus_prd_plans_and_follows_its_dependencies() -> None:
    prd = load_prd(CORPUS / "large-71-stories.json")
    assert dependency_problems(prd) == []
    planned = waves(prd)
    assert sum(len(w) for w in planned) == 71
    assert [len(w) for w in planned] == [9, 10, 11, 9, 10, 9, 7, 5, 1]
    wave_of = {s.id: n for n, w in enumerate(planned) for s in w}
    for s in prd.stories:
        assert all(wave_of[d] < wave_of[s.id] for d in s.depends_on), s.id
    assert prd.story("US-002") is not None and prd.story("US-002").depends_on == ("US-001",)
    plan = matrix(prd, CORPUS)
    assert len({e["branch"] for e in plan["include"]}) == 71


@needs_corpus
@pytest.mark.parametrize(("name", "sizes"), [
    ("phases-nested-stories.json", [67, 2, 4, 3, 3, 2, 1, 7, 6, 4, 1]),
    ("korean-waves.json", [6, 2]),
])
def test_the_other_corpus_prds_with_dependencies_plan(name: str, sizes: list[int]) -> None:
    prd = load_prd(CORPUS / name)
    assert [len(w) for w in waves(prd)] == sizes


@needs_corpus
def test_the_korean_waves_are_its_declared_waves() -> None:
    """korean-waves.json also groups its stories under a top-level ``waves`` with
    ``depends_on_wave``: that grouping is not read, and the stories' own ``depends_on`` give
    the same waves."""
    prd = load_prd(CORPUS / "korean-waves.json")
    declared = json.loads((CORPUS / "korean-waves.json").read_text("utf-8"))["waves"]
    assert wave_ids(prd) == [declared["1"]["stories"], declared["2"]["stories"]]
