"""Real PRD files and the loop on dialect PRDs.

The shared corpus (``../shared/corpus/prds`` beside the repository; skipped when it is not
there) must load through :func:`pytest_ralph.prd.load.load_prd` and plain ``pytest`` with the
right number of stories and criteria, or fail saying what was found and what was
expected. The corpus files are read in place, never copied into the repository. The quirks
they show are reproduced by the small fixtures of test_dialects.py, test_writeback.py,
test_malformed.py and test_dialect_display.py; the loop test below is one more.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from pytest_ralph.prd.errors import PRDError
from pytest_ralph.prd.load import load_prd

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "prds"

#: file -> (stories, criteria, criteria made from titles, dialect rules) or an error fragment.
EXPECTED: dict[str, tuple[int, int, int, set[str]] | str] = {
    "backticked-commands.json": (24, 138, 0, set()),
    "criteria-objects-with-commands.json": (10, 36, 0, set()),
    "empty-stub.json": (0, 0, 0, set()),
    "features-with-comments.jsonc": (4, 23, 0, {"project-object", "features",
                                                "title-from-description", "steps", "status"}),
    "items-with-steps.json": (77, 430, 0, {"name", "items", "title-from-description",
                                           "steps_to_verify", "position-ids"}),
    "korean-waves.json": (8, 65, 0, {"depends_on"}),
    "large-71-stories.json": (71, 453, 0, {"projectName", "dependencies"}),
    "mixed-id-and-priority-types.json": (3, 9, 0, {"stories", "acceptance", "int-ids",
                                                   "word-priority", "status"}),
    "phases-nested-stories.json": (100, 270, 65, {"phases", "acceptance", "P-priority",
                                                  "depends_on", "title-criteria"}),
    "snarktank-example.json": (4, 17, 0, set()),
    "top-level-array.json": (8, 8, 8, {"top-level-array", "title-criteria"}),
    "yaml-acceptance-tests.yaml": "no stories found: expected an object with stories under "
                                  "userStories | stories | tasks | items | features | "
                                  "phases[].stories, or an array of stories; found keys: "
                                  "version, id, objective,",
}

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")


@needs_corpus
def test_the_corpus_is_the_one_expected() -> None:
    assert sorted(p.name for p in CORPUS.iterdir()) == sorted(EXPECTED)


@needs_corpus
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_loads_or_says_what_it_found(name: str) -> None:
    path = CORPUS / name
    before = path.read_bytes()
    expected = EXPECTED[name]
    if isinstance(expected, str):
        with pytest.raises(PRDError) as info:
            load_prd(path)
        assert [p.json_path for p in info.value.problems] == ["$"]
        assert expected in info.value.problems[0].message
        assert "acceptance_tests holds 5 criteria but no story owns them" in str(info.value)
    else:
        prd = load_prd(path)
        stories, criteria, from_titles, rules = expected
        assert len(prd.stories) == stories
        assert len(prd.criteria()) == criteria
        assert sum(c.synthesized for c in prd.criteria()) == from_titles
        assert set(prd.dialect.split("+")) - {"canonical"} == rules
        ids = [f"{s.id}::{c.id}" for s in prd.stories for c in s.criteria]
        assert len(ids) == len(set(ids))
    assert path.read_bytes() == before


@needs_corpus
@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items()
                                        if not isinstance(e, str) and e[0]))
def test_plain_pytest_collects_one_item_per_criterion(pytester: pytest.Pytester,
                                                      name: str) -> None:
    expected = EXPECTED[name]
    assert not isinstance(expected, str)
    target = pytester.path / ("prd" + Path(name).suffix)
    shutil.copyfile(CORPUS / name, target)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()
    items = [line for line in result.stdout.lines if line.startswith(target.name + "::")]
    assert len(items) == expected[1]
    if expected[3]:
        result.stdout.fnmatch_lines([f"pytest-ralph: {target.name}: dialect *"])


# ---------------------------------------------------------------------------------------------
# The loop on a dialect PRD

PHASES_YAML = """\
# a plan in phases, as agents write them
projectName: Shop
phases:
  - name: foundations
    stories:
      - title: Catalogue page
        priority: P1
        status: todo
        acceptance:
          - exists: catalogue.html
      - id: 7
        title: Basket
        priority: high
        passes: false
        steps:
          - {exists: basket.html}
  - name: later
    stories:
      - description: |
          Checkout
          with a card
        status: open
        acceptance_tests:
          - exists: checkout.html
"""

AGENT = """\
import pathlib, sys
prompt = sys.stdin.read()
for name in ("catalogue.html", "basket.html", "checkout.html"):
    if name in prompt and not pathlib.Path(name).exists():
        pathlib.Path(name).write_text("<html></html>")
        break
"""


def test_the_loop_completes_a_phases_yaml_prd_and_keeps_its_fields(
        pytester: pytest.Pytester) -> None:
    prd = pytester.path / "prd.yaml"
    prd.write_text(PHASES_YAML, encoding="utf-8")
    (pytester.path / "agent.py").write_text(AGENT, encoding="utf-8")
    agent = f"{shlex.quote(sys.executable)} agent.py"
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent,
                                           "--ralph-max-iterations", "5", "-p", "no:randomly")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "dialect " in out and "phases" in out
    # one story per iteration, lowest priority value first: P1 (1), high (1), then none
    for name in ("catalogue.html", "basket.html", "checkout.html"):
        assert (pytester.path / name).exists()
    # the file keeps every dialect field; only the one boolean `passes` changed
    assert prd.read_text("utf-8") == PHASES_YAML.replace("passes: false", "passes: true")
    assert set(load_prd(prd).dialect.split("+")) == {
        "projectName", "phases", "acceptance", "position-ids", "int-ids", "P-priority",
        "status", "word-priority", "steps", "title-from-description", "acceptance_tests"}
    # the status stories keep their status: their verdicts are in the sidecar
    sidecar = json.loads((pytester.path / ".pytest_ralph" / "passes.json").read_text("utf-8"))
    assert sidecar["passes"] == {"S1": True, "S3": True}


def test_the_prompt_of_a_status_story_says_to_set_the_status(pytester: pytest.Pytester) -> None:
    (pytester.path / "prd.json").write_text(json.dumps({"tasks": [
        {"id": "T-1", "title": "Checkout", "status": "open", "steps": ["Checkout works"]},
        {"id": "T-2", "title": "Basket", "passes": False, "steps": ["Basket works"]}]}),
        encoding="utf-8")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-dry-run", "--ralph-agent", "true",
                                           "-p", "no:randomly")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert ("check: none (text criterion, claimed by the story's `status`: this PRD has no "
            "`passes`; set the status to done, never add `passes`)") in out
    result = pytester.runpytest("-p", "no:randomly")
    result.stdout.fnmatch_lines(["*the story's `status` does not say done*"])
