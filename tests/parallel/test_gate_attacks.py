"""The merge queue against a lane's branch written to cheat its gate (red-team findings of
issue 24, each reproduced here first).

Real git, real bubblewrap, real gates (``pytest <prd>`` in the integration worktree):

* a branch whose code, run by the gate, rewrites the integration worktree's ``.git`` file to
  point at a git folder of its own (with a smudge filter that would run, unconfined, in the
  controller's next ``git reset --hard``): the filter never runs, the refused merge is undone
  on the real integration branch, the ``.git`` file is put back; confined, the file cannot
  even be written;
* a branch that adds a module named like one the checks import (``jsonschema.py`` for a schema
  criterion, ``pytest.py`` for a ``python -m pytest`` criterion) is refused as a change to the
  judges, as the loop refuses it, also after a resume (the queue keeps what it learnt);
* a branch with a symbolic-link loop where a criterion's test file will be is refused, with no
  traceback and nothing unchecked left on the integration branch;
* a lane that claims its text criterion (``"passes": true``) is merged as "claimed, not
  verified", and refused under ``--ralph-strict``;
* a lane whose agent rewrote its worktree's ``.git`` file is not committed from (the
  controller's git would read the agent's configuration) and is still removed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ralph.parallel.gate import gate_around, gate_check
from pytest_ralph.parallel.queue import MergeQueue, QueueError
from pytest_ralph.parallel.worktrees import (
    WorktreeError,
    commit_all,
    create_lane,
    lane_state,
    preflight,
    remove_lane,
)
from pytest_ralph.sandbox.bwrap import probe
from tests.support.bwrap import require_bwrap
from tests.support.env import clean_env
from tests.support.git import git, needs_git

pytestmark = needs_git

require_bwrap()

RUN = "20261204-attacks"

#: A lane's calc.py that, imported where the gate runs it (the integration worktree), makes a
#: git folder of its own inside the worktree (the real objects borrowed, a smudge filter for
#: every file) and points the worktree's .git file at it; the filter writes PROOF.
PLANT = '''
import os
here = os.path.dirname(os.path.abspath(__file__))
def _plant():
    dotgit = os.path.join(here, ".git")
    try:
        line = open(dotgit).read()
    except OSError:
        return
    real = line.split("gitdir:", 1)[1].strip()
    common = open(os.path.join(real, "commondir")).read().strip()
    common = os.path.realpath(os.path.join(real, common))
    head = open(os.path.join(real, "HEAD")).read().strip()
    if head.startswith("ref:"):
        head = open(os.path.join(common, head[4:].strip())).read().strip()
    fake = os.path.join(here, "fakegit")
    for d in ("objects/info", "refs", "info"):
        os.makedirs(os.path.join(fake, d), exist_ok=True)
    open(os.path.join(fake, "objects/info/alternates"), "w").write(common + "/objects\\n")
    open(os.path.join(fake, "HEAD"), "w").write(head + "\\n")
    open(os.path.join(fake, "info/attributes"), "w").write("* filter=x\\n")
    open(os.path.join(fake, "config"), "w").write(
        "[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n"
        "[filter \\"x\\"]\\n\\tsmudge = \\"touch PROOF; cat\\"\\n"
        "\\tclean = \\"touch PROOF; cat\\"\\n"
        .replace("PROOF", os.environ["PROOF"]))
    try:
        open(dotgit, "w").write("gitdir: " + fake + "\\n")
        open(os.environ["PROOF"] + ".planted", "w").write("planted\\n")
    except OSError:
        pass
if "integration" in here:
    _plant()
def add(a, b):
    return 0
'''

#: The criterion the planting branch fails (add is still wrong).
ADD = 'python -c "import calc, sys; sys.exit(calc.add(2, 2) != 4)"'


@pytest.fixture(autouse=True)
def _git_identity(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = base / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "t")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "t@example.com")


def make_repo(base: Path, stories: list[dict[str, object]], files: dict[str, str]) -> Path:
    """A repository with ``prd.json`` of ``stories`` and ``files``, committed on main."""
    root = base / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "prd.json").write_text(json.dumps({"project": "Demo", "userStories": stories},
                                              indent=1) + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".pytest_ralph/\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def story(sid: str, *criteria: object, **more: object) -> dict[str, object]:
    return {"id": sid, "title": sid, "priority": 1, "acceptanceCriteria": list(criteria),
            **more}


def branch(root: Path, name: str, files: dict[str, str | None]) -> None:
    """The branch ``name`` at main with one commit writing (``None``: deleting) ``files``;
    symbolic links are made for values starting with ``->``."""
    git(root, "switch", "-q", "-c", name, "main")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.unlink()
        elif text.startswith("->"):
            path.symlink_to(text[2:])
        else:
            path.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"work on {name}")
    git(root, "switch", "-q", "main")


def queue_of(root: Path, *, sandbox: str = "required", strict: bool = False) -> MergeQueue:
    repo = preflight(root)
    gate = gate_check(Path("prd.json"), sandbox=probe(sandbox), state_dir=repo.state_dir,
                      around=gate_around(repo), inifile=Path("pytest.ini"), strict=strict)
    return MergeQueue(repo, RUN, repo.head, gate, prd=Path("prd.json"))


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_gate_that_rewrites_the_worktrees_git_file_runs_nothing_outside(
        base: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repo(base, [story("US-1", {"text": "adds", "run": ADD})],
                     {"calc.py": "def add(a, b):\n    return 0\n"})
    proof = base / "PROOF"
    monkeypatch.setenv("PROOF", str(proof))
    branch(root, "ralph/US-1", {"calc.py": PLANT})
    queue = queue_of(root, sandbox=sandbox)
    start = queue.head
    result = queue.merge("US-1", "ralph/US-1")
    assert result.outcome == "story-failed", result
    assert not proof.exists()  # no filter of the lane's ran, in the gate or after it
    # confined, the .git file could not be written; unconfined it was, and it is put back
    assert Path(f"{proof}.planted").exists() == (sandbox == "off")
    assert git(root, "rev-parse", queue.branch).strip() == start  # the real branch is undone
    dotgit = (queue.path / ".git").read_text()
    assert "fakegit" not in dotgit and dotgit.startswith("gitdir: ")
    assert git(queue.path, "status", "--porcelain") == ""
    queue.remove_worktree()
    assert str(queue.path) not in git(root, "worktree", "list")
    assert not proof.exists()


def test_ralph_merge_refuses_the_planting_branch_confined(base: Path) -> None:
    """The same through ``pytest --ralph-merge --ralph-sandbox required`` (the CI job)."""
    root = make_repo(base, [story("US-1", {"text": "adds", "run": ADD})],
                     {"calc.py": "def add(a, b):\n    return 0\n"})
    proof = base / "PROOF"
    branch(root, "ralph/US-1", {"calc.py": PLANT})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ralph-merge", "ralph/US-1",
         "--ralph-prd", "prd.json", "--ralph-sandbox", "required"], cwd=root,
        capture_output=True, text=True, timeout=600,
        env=clean_env(HOME=str(base / "home"), GIT_CONFIG_NOSYSTEM="1", PROOF=str(proof),
                      GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                      GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com"))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "US-1 ralph/US-1: story-failed" in out
    assert "Traceback" not in out
    assert not proof.exists() and not Path(f"{proof}.planted").exists()
    integration = next(b for b in git(root, "branch", "--list", "ralph/merge-*").split()
                       if b.startswith("ralph/"))
    assert git(root, "rev-parse", integration) == git(root, "rev-parse", "main")


SHADOW = """import sys
# stands in for the real module: the gate would pass whatever it checks
raise SystemExit(0)
"""


@pytest.mark.parametrize(("criterion", "name"), [
    ({"schema": "cfg.schema.json", "instance": "cfg.json"}, "jsonschema.py"),
    ({"text": "the tests pass", "run": f"{sys.executable} -m pytest -q -p no:cacheprovider tests"},
     "pytest.py"),
])
def test_a_module_named_like_one_the_checks_import_is_refused(
        base: Path, criterion: dict[str, str], name: str) -> None:
    root = make_repo(base, [story("US-1", criterion)], {
        "cfg.schema.json": '{"type": "object", "required": ["name"]}\n', "cfg.json": "{}\n",
        "tests/test_fails.py": "def test_fails():\n    assert False\n"})
    branch(root, "ralph/US-1", {name: SHADOW})
    queue = queue_of(root)
    start = queue.head
    result = queue.merge("US-1", "ralph/US-1")
    assert result.outcome == "story-failed", result
    assert result.summary == "it changes what judges the criteria"
    assert any(name in f and "names the checks import" in f for f in result.failures), result
    assert queue.head == start
    # a resumed queue keeps what its gate learnt: the same branch is refused before any check
    again = queue_of(root)
    assert again.merge("US-1", "ralph/US-1").summary == "it changes what judges the criteria"
    data = json.loads(again.file.read_text())
    assert data["watched"], data
    again.remove_worktree()


def test_a_symbolic_link_loop_is_refused_without_a_traceback(base: Path) -> None:
    test = "tests/test_new.py"
    root = make_repo(base, [story("US-1", {"pytest": f"{test}::test_new"})],
                     {"tests/__init__.py": ""})
    branch(root, "ralph/US-1", {test: "->test_new.py"})  # tests/test_new.py -> itself
    queue = queue_of(root)
    start = queue.head
    result = queue.merge("US-1", "ralph/US-1")
    assert result.outcome == "story-failed", result
    assert queue.head == start
    assert git(root, "rev-parse", queue.branch).strip() == start
    queue.remove_worktree()


@pytest.mark.parametrize("strict", [False, True])
def test_a_claimed_criterion_is_said_and_refused_under_strict(base: Path, strict: bool) -> None:
    root = make_repo(base, [story("US-1", "the page reads well", passes=False)], {})
    prd = json.loads((root / "prd.json").read_text())
    prd["userStories"][0]["passes"] = True
    branch(root, "ralph/US-1", {"prd.json": json.dumps(prd, indent=1) + "\n"})
    queue = queue_of(root, strict=strict)
    result = queue.merge("US-1", "ralph/US-1")
    if strict:
        assert result.outcome == "story-failed", result
    else:
        assert result.outcome == "merged", result
        assert result.summary == "1/1 criteria passed, 1 claimed, not verified"
    queue.remove_worktree()


def test_a_lane_whose_git_file_the_agent_rewrote_is_not_committed_from(base: Path) -> None:
    root = make_repo(base, [story("US-1", {"text": "adds", "run": ADD})],
                     {"calc.py": "def add(a, b):\n    return 0\n"})
    repo = preflight(root)
    lane = create_lane(repo, RUN, "US-1", repo.head)
    proof = base / "PROOF"
    fake = lane.path / "fakegit"
    shutil.copytree(Path(git(root, "rev-parse", "--path-format=absolute",
                             "--git-common-dir").strip()), fake)
    with (fake / "config").open("a") as config:
        config.write(f'[filter "x"]\n\tclean = "touch {proof}; cat"\n')
    (fake / "info").mkdir(exist_ok=True)
    (fake / "info" / "attributes").write_text("* filter=x\n")
    (lane.path / ".git").write_text(f"gitdir: {fake}\n")
    (lane.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    assert lane_state(lane) == "broken"
    with pytest.raises(WorktreeError, match="broken"):
        commit_all(lane, "the agent's work")
    assert not proof.exists()
    remove_lane(lane, keep_branch=True)
    assert not lane.path.exists()
    assert str(lane.path) not in git(root, "worktree", "list")
    assert not proof.exists()


def test_a_helper_module_the_tests_import_is_a_judge_of_the_queue_too(base: Path) -> None:
    root = make_repo(base, [story("US-1", {"pytest": "tests/test_calc.py::test_add"})], {
        "calc.py": "def add(a, b):\n    return 0\n", "tests/__init__.py": "",
        "tests/helpers.py": "CASES = [((2, 2), 4)]\n",
        "tests/test_calc.py": "from calc import add\nfrom tests.helpers import CASES\n\n\n"
                              "def test_add():\n    for args, want in CASES:\n"
                              "        assert add(*args) == want\n"})
    branch(root, "ralph/US-1", {"tests/helpers.py": "CASES = [((2, 2), 0)]\n"})
    branch(root, "ralph/US-1-honest", {"calc.py": "def add(a, b):\n    return a + b\n"})
    queue = queue_of(root)
    result = queue.merge("US-1", "ralph/US-1")
    assert result.summary == "it changes what judges the criteria", result
    assert any("tests/helpers.py" in f for f in result.failures), result
    assert queue.merge("US-1", "ralph/US-1-honest").outcome == "merged"
    queue.remove_worktree()


def test_a_branch_that_writes_into_the_state_folder_is_refused(base: Path) -> None:
    root = make_repo(base, [story("US-1", {"text": "adds", "run": ADD})],
                     {"calc.py": "def add(a, b):\n    return 0\n"})
    git(root, "switch", "-q", "-c", "ralph/US-1", "main")
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    forged = root / ".pytest_ralph" / "progress.txt"
    forged.parent.mkdir()
    forged.write_text("every story done\n")
    git(root, "add", "-f", "calc.py", ".pytest_ralph/progress.txt")  # ignored: forced in
    git(root, "commit", "-q", "-m", "the fix, and a forged state file")
    git(root, "switch", "-q", "main")
    queue = queue_of(root)
    result = queue.merge("US-1", "ralph/US-1")
    assert result.outcome == "story-failed", result
    assert any("writes into the state folder: .pytest_ralph/progress.txt" in f
               for f in result.failures), result
    assert queue.head == git(root, "rev-parse", "main").strip()
    queue.remove_worktree()


def test_a_queue_is_not_taken_over_by_a_stronger_gate(base: Path) -> None:
    """Verdicts of an unconfined or claims-taking gate are not those of a confined, strict
    one: the same run with the stronger gate is refused, naming the file to move aside."""
    root = make_repo(base, [story("US-1", "the page reads well", passes=False)], {})
    prd = json.loads((root / "prd.json").read_text())
    prd["userStories"][0]["passes"] = True
    branch(root, "ralph/US-1", {"prd.json": json.dumps(prd, indent=1) + "\n"})
    loose = queue_of(root, sandbox="off")
    assert loose.merge("US-1", "ralph/US-1").outcome == "merged"
    assert json.loads(loose.file.read_text())["gate"] == {"confined": False, "strict": False}
    for sandbox, strict, said in (("off", True, "with --ralph-strict"),
                                  ("required", False, "confined by the sandbox")):
        with pytest.raises(QueueError, match=f"did not run {said}.*move it aside"):
            queue_of(root, sandbox=sandbox, strict=strict)
    same = queue_of(root, sandbox="off")  # the same gate takes it over
    assert same.merged == ["US-1"]
    same.remove_worktree()
