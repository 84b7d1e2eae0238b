"""The merge queue's gate confined like a check phase (issue 24, red-team finding): the code on a
lane's branch is agent code, and the gate runs it.

Real git, real bubblewrap, real subprocesses. A lane's check script that only misbehaves in
the integration worktree (where the gate runs it) tries to write the user's working tree, the
repository's ``.git/config`` and ``.git/hooks``, the state folder and the home folder; after
``pytest --ralph-merge`` and after ``pytest --ralph --ralph-parallel`` none of them changed
and the story is not merged, while an honest story whose check writes a build artefact inside
the project merges and is verified. The project lives outside ``/tmp`` (private to a confined
command), as a user's does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.parallel.gate import gate_around, gate_check
from pytest_ralph.parallel.queue import MergeQueue
from pytest_ralph.parallel.worktrees import commit_all, create_lane, preflight
from pytest_ralph.sandbox.bwrap import probe
from tests.support.bwrap import require_bwrap
from tests.support.env import clean_env
from tests.support.git import git, needs_git

pytestmark = needs_git

require_bwrap()

#: The honest story's check: builds an artefact inside the project, then checks it.
BUILD = "mkdir -p build && echo built > build/artefact.txt && grep -qx built build/artefact.txt\n"

#: The hostile story's check: passes in its own lane; where the gate runs it (the integration
#: worktree) it appends to the file it is given, and passes only when that worked.
HOSTILE = """case "$PWD" in */integration*) ;; *) exit 0 ;; esac
printf 'pwned\\n' >> "$1" || exit 1
"""

#: A lane's agent (``pytest --ralph-parallel``): writes both scripts, as the branch has them.
AGENT = f"""
open("build.sh", "w").write({BUILD!r})
open("hostile.sh", "w").write({HOSTILE!r})
"""


def targets(root: Path, home: Path) -> dict[str, Path]:
    """What the hostile check tries to write, by name."""
    return {"tree": root / "pwned.txt", "config": root / ".git" / "config",
            "hook": root / ".git" / "hooks" / "x",
            "state": root / ".pytest_ralph" / "forged.txt", "home": home / ".bashrc",
            "new-in-home": home / "new-file"}


def project(base: Path) -> tuple[Path, Path]:
    """(the repository, the home folder): ``prd.json`` with an honest story US-001 (``sh
    build.sh``) and a hostile one US-002 (one ``sh hostile.sh TARGET`` criterion per target),
    committed without either script."""
    root, home = base / "repo", base / "home"
    root.mkdir()
    home.mkdir()
    (home / ".bashrc").write_text("# the user's\n")
    git(root, "init", "-q", "-b", "main")
    hostile = [{"text": f"writes {name}", "run": f"sh hostile.sh {path}"}
               for name, path in targets(root, home).items()]
    prd = {"project": "Demo", "userStories": [
        {"id": "US-001", "title": "honest", "priority": 1,
         "acceptanceCriteria": [{"text": "the build works", "run": "sh build.sh"}]},
        {"id": "US-002", "title": "hostile", "priority": 2, "acceptanceCriteria": hostile}]}
    (root / "prd.json").write_text(json.dumps(prd, indent=1) + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".pytest_ralph/\nbuild/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root, home


def snapshot(root: Path, home: Path) -> dict[str, Any]:
    """What must not change: the targets' contents and the repository's refs and config."""
    seen: dict[str, Any] = {name: path.read_bytes() if path.exists() else None
                            for name, path in targets(root, home).items()}
    seen["hooks"] = sorted(p.name for p in (root / ".git" / "hooks").iterdir())
    seen["status"] = git(root, "status", "--porcelain", "--ignored=no")
    return seen


def env(home: Path, **extra: str) -> dict[str, str]:
    return clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                     GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                     GIT_CONFIG_NOSYSTEM="1", HOME=str(home), PYTEST_RALPH_PYCACHE="",
                     **extra)


def lane_branch(root: Path, name: str, files: dict[str, str]) -> None:
    """A lane's branch at main with one commit writing ``files`` (the user stays on main)."""
    git(root, "switch", "-q", "-c", name, "main")
    for path, text in files.items():
        (root / path).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"work on {name}")
    git(root, "switch", "-q", "main")


def pytest_run(root: Path, home: Path, *args: str,
               timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env(home, GITHUB_STEP_SUMMARY=str(home.parent /
                                                                          "summary.md")),
                          text=True, capture_output=True, timeout=timeout)


def test_ralph_merge_confines_the_gate(base: Path) -> None:
    root, home = project(base)
    lane_branch(root, "ralph/US-001", {"build.sh": BUILD})
    lane_branch(root, "ralph/US-002", {"hostile.sh": HOSTILE, "build.sh": BUILD})
    (root / ".pytest_ralph").mkdir()
    before = snapshot(root, home)
    done = pytest_run(root, home, "--ralph-merge", "--ralph-sandbox", "required",
                      "ralph/US-001", "ralph/US-002")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("US-001 ralph/US-001: merged"), done.stdout
    # the gate ran the hostile checks (they failed), it did not refuse them unread
    assert lines[1].startswith("US-002 ralph/US-002: story-failed"), done.stdout
    assert "US-002::AC1" in done.stdout and "judges" not in lines[1]
    assert snapshot(root, home) == before
    assert not (root / "pwned.txt").exists() and not (home / "new-file").exists()
    assert "gate: the gate ran the lanes' code confined by bubblewrap" in done.stdout
    summary = (base / "summary.md").read_text()
    assert "**Gate:** the gate ran the lanes' code confined by bubblewrap" in summary
    integration = lines[-2].split()[2]
    assert git(root, "ls-tree", "--name-only", integration, "build.sh").strip() == "build.sh"
    assert git(root, "ls-tree", "--name-only", integration, "hostile.sh") == ""


def test_ralph_merge_with_the_sandbox_off_says_the_gate_ran_unconfined(base: Path) -> None:
    root, home = project(base)
    lane_branch(root, "ralph/US-001", {"build.sh": BUILD})
    done = pytest_run(root, home, "--ralph-merge", "--ralph-sandbox", "off", "ralph/US-001")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("gate: the gate ran the lanes' code UNCONFINED (ralph_sandbox = off from "
            "--ralph-sandbox)") in done.stdout
    assert "**Gate:** the gate ran the lanes' code UNCONFINED" in (
        base / "summary.md").read_text()


def test_ralph_merge_requiring_a_missing_bubblewrap_is_refused(base: Path) -> None:
    root, home = project(base)
    lane_branch(root, "ralph/US-001", {"build.sh": BUILD})
    bin_dir = base / "nobwrap"
    bin_dir.mkdir()
    for tool in ("sh", "git"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    head = git(root, "rev-parse", "main")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--ralph-merge", "--ralph-sandbox", "required", "ralph/US-001"],
                          cwd=root, env=env(home, PATH=str(bin_dir)), text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr
    assert ("pytest-ralph: --ralph-merge: ralph_sandbox = required from --ralph-sandbox, but "
            "the gate (the lanes' code) cannot be confined: bwrap is not installed"
            ) in done.stderr
    assert "Traceback" not in done.stderr
    assert git(root, "branch", "--list", "ralph/merge-*") == ""  # no queue was made
    assert git(root, "rev-parse", "main") == head


def test_the_integration_worktree_is_writable_inside_the_confined_gate(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worktree lives in the state folder, which is read-only to the gate: bound around it,
    the worktree stays writable, less the PRD."""
    root, home = project(base)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = preflight(root)
    made = create_lane(repo, "20261203-gate", "US-001", repo.head)
    # passes only when the build artefact is written and the PRD is not writable
    (made.path / "build.sh").write_text(BUILD.strip() + " && ! (echo x >> prd.json)\n")
    assert commit_all(made, "build, and try the PRD") is not None
    gate = gate_check(Path("prd.json"), sandbox=probe("required"), state_dir=repo.state_dir,
                      around=gate_around(repo), inifile=Path("pytest.ini"))
    queue = MergeQueue(repo, "20261203-gate", repo.head, gate, prd=Path("prd.json"))
    result = queue.merge("US-001", made.branch)
    assert result.outcome == "merged", result
    assert queue.verify().verified("US-001")
    assert (queue.project / "prd.json").read_text() == (root / "prd.json").read_text()
    # unconfined, the same check fails: it can write the PRD
    loose = gate_check(Path("prd.json"), sandbox=probe("off"), state_dir=repo.state_dir)
    assert not loose(queue.project).verified("US-001")
    queue.remove_worktree()


def test_ralph_parallel_confines_the_gate(base: Path) -> None:
    root, home = project(base)
    (base / "agent.py").write_text(AGENT)
    (root / ".pytest_ralph").mkdir()
    before = snapshot(root, home)
    done = pytest_run(root, home, "--ralph", "--ralph-parallel", "2", "--ralph-sandbox",
                      "required", "--ralph-agent", f"{sys.executable} {base / 'agent.py'}",
                      "--ralph-max-iterations", "2", timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert ("pytest-ralph: merge queue: the gate runs the lanes' code confined by bubblewrap"
            in out)
    assert "pytest-ralph: queue: US-001 merged and verified" in out
    assert "US-002 merged and verified" not in out
    after = snapshot(root, home)
    after["status"] = before["status"]  # the run leaves its report: compared below
    assert after == before
    assert not (root / "pwned.txt").exists() and not (home / "new-file").exists()
    report = (root / ".pytest_ralph" / "parallel-report.md").read_text()
    assert "- Gate: the gate runs the lanes' code confined by bubblewrap" in report
    data = json.loads((root / ".pytest_ralph" / "parallel.json").read_text())
    assert data["stories"]["US-001"]["phase"] == "merged"
    assert data["stories"]["US-002"]["phase"] != "merged"


def test_ralph_parallel_requiring_a_missing_bubblewrap_is_refused(base: Path) -> None:
    root, home = project(base)
    bin_dir = base / "nobwrap"
    bin_dir.mkdir()
    for tool in ("sh", "git"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ralph",
                           "--ralph-parallel", "2", "--ralph-sandbox", "required",
                           "--ralph-agent", "true"],
                          cwd=root, env=env(home, PATH=str(bin_dir)), text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr
    assert ("pytest-ralph: --ralph-parallel: ralph_sandbox = required from --ralph-sandbox, "
            "but the gate (the lanes' code) cannot be confined: bwrap is not installed"
            ) in done.stderr
    assert "Traceback" not in done.stderr
    assert not (root / ".pytest_ralph" / "parallel.json").exists()  # no lane started
    assert git(root, "worktree", "list").count("\n") == 1
