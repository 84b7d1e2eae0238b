"""``pytest --ralph --ralph-parallel N`` with lanes that finish together: the merge queue takes
them as one batch (merged one after another, checked once) and checks the start of the
integration branch while the agents work. Real git, real subprocesses."""

from __future__ import annotations

from pathlib import Path

from tests.parallel.test_scheduler import (
    agent,
    criteria,
    project,
    ralph,
    record,
    worktrees,
)
from tests.support.git import git, needs_git
from tests.support.prd import story

pytestmark = needs_git

#: Each lane's agent waits until every lane's agent has started (a barrier of files in
#: BARRIER), works 4 s more, then writes the files its prompt says are missing: the lanes
#: finish together.
BARRIER_AGENT = r"""
import os, re, sys, time
prompt = sys.stdin.read()
section = prompt.split("## Failing acceptance criteria", 1)[-1].split("\n## ", 1)[0]
names = list(dict.fromkeys(re.findall(r"test -f (\S+?)`", section)))
barrier = os.environ["BARRIER"]
open(os.path.join(barrier, "-".join(names) or "none"), "w").close()
deadline = time.time() + 120
while len(os.listdir(barrier)) < int(os.environ["LANES"]) and time.time() < deadline:
    time.sleep(0.05)
time.sleep(4)  # all at work together: the controller checks the start meanwhile
for name in names:
    open(name, "w").write("done\n")
"""


def test_lanes_that_finish_together_are_merged_as_one_batch(tmp_path: Path) -> None:
    stories = [story(f"US-00{i}", *criteria(f"f{i}.txt"), priority=i)
               for i in range(1, 4)]
    root = project(tmp_path, stories)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    done = ralph(root, tmp_path, "--ralph-parallel", "3", "--ralph-agent",
                 agent(tmp_path, BARRIER_AGENT), "--ralph-max-iterations", "3",
                 BARRIER=str(barrier), LANES="3")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "3/3 stories merged and verified" in out
    lines = out.splitlines()
    early = next(n for n, line in enumerate(lines) if "checking the integration branch's "
                 "start while the agents work" in line)
    first_done = next(n for n, line in enumerate(lines)
                      if "criteria pass in its worktree" in line)
    assert early < first_done, out
    # the agents finish together: at least two lanes come to the queue at once
    assert "are ready together: merged one after another, checked once" in out, out
    queue = record(root)["queue"]
    together = [q for q in queue if "checked once with" in q["text"]]
    assert len(together) >= 2, queue
    assert [q["outcome"] for q in queue] == ["merged"] * 3, queue
    # one merge commit per story on the user's branch, each story's work there
    merges = git(root, "log", "--merges", "--format=%s", "main").splitlines()
    assert sorted(m.split(" (")[0] for m in merges) == [
        f"ralph: merge story US-00{i}" for i in range(1, 4)]
    for i in range(1, 4):
        assert (root / f"f{i}.txt").read_text() == "done\n"
    assert len(worktrees(root)) == 1
    report = (root / ".pytest_ralph" / "parallel-report.md").read_text()
    assert "checked once with" in report
