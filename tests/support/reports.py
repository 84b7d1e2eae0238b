"""Runs made up for the report tests: :func:`made_run` builds a :class:`RunRecord` of any
size (stories passing one after another), with hostile failure messages when asked."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

from pytest_ralph.agents.run import AgentRun
from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.loop.records import IterationRecord, RunRecord
from pytest_ralph.loop.settings import resolve
from pytest_ralph.prd.model import PRD, Criterion, Story
from pytest_ralph.state.folder import RunDir

T0 = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)

#: A failure message that tries to break out of the page: a script, the end of the style
#: element, an attribute, an event handler, a terminal escape.
HOSTILE = ('E   assert "<script>document.title=\'PWNED\'</script>" == 1\n'
           "</style><style>body{display:none}</style>\n"
           '"><img src=x onerror="document.title=\'PWNED\'">\x1b[31m red &amp; done')


def made_run(root: Path, iterations: int, stories: int, criteria: int = 2,
             hostile: bool = False) -> RunRecord:
    """A run of ``iterations`` iterations on ``stories`` stories of ``criteria`` criteria
    each; story ``k`` passes from iteration ``(k + 1) * iterations // stories`` on (the last
    one never, so the run ends at its limit with failures). Each iteration has a folder with
    a ``prompt.md`` and an ``agent.log`` under ``root/.pytest_ralph/runs/...``."""
    ids = [f"US-{k + 1:03d}" for k in range(stories)]
    prd_stories = tuple(
        Story(sid, f"Story {sid} <b>title</b>" if hostile else f"Story {sid}", "",
              tuple(Criterion(sid, i, f"AC{i}", f"criterion {i} of {sid}", "run",
                              command="true") for i in range(1, criteria + 1)),
              k + 1, False, "", k) for k, sid in enumerate(ids))
    prd = PRD(root / "prd.json", "json", "Big <run>" if hostile else "Big run", "ralph/big",
              "", prd_stories)
    settings = dataclasses.replace(
        resolve(cli={}, env={}, ini=lambda key: None, ini_file="pytest.ini",
                invocation_dir=root, rootdir=root), max_iterations=iterations)
    run_dir = RunDir(root / ".pytest_ralph" / "runs" / "20260304-050607-abcdef")
    run = RunRecord(prd=prd, settings=settings, argv=["agent", "{prompt_file}"],
                    run_dir=run_dir, started=T0, finished=T0 + dt.timedelta(hours=2))
    passes_at = {sid: ((k + 1) * iterations // stories if k < stories - 1 else iterations + 1)
                 for k, sid in enumerate(ids)}
    message = HOSTILE if hostile else "E   assert 0 == 1\nexit status 1"
    for n in range(iterations + 1):
        folder = run_dir.path / f"iteration-{n:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prompt.md").write_text(f"prompt of iteration {n}\n", encoding="utf-8")
        results = tuple(
            CriterionResult(f"prd.json::{sid}::AC{i}", sid, f"AC{i}", f"criterion {i} of {sid}",
                            "run", "passed" if n >= passes_at[sid] else "failed",
                            "" if n >= passes_at[sid] else message, False)
            for sid in ids for i in range(1, criteria + 1))
        agent = None
        story = ""
        if n:
            (folder / "agent.log").write_text(f"agent log {n}\n", encoding="utf-8")
            story = next((sid for sid in ids if passes_at[sid] >= n), ids[-1])
            agent = AgentRun(("agent", str(folder / "prompt.md")), "ok", 0, 1.5,
                             folder / "agent.log", "", cost_usd=0.01)
        run.iterations.append(IterationRecord(n, CheckResults(results), agent, story, 0, 0,
                                              T0 + dt.timedelta(seconds=30 * n), folder))
    run.status, run.exit_code = "limit", 1
    run.reason = f"the iteration limit ({iterations}) was reached with criteria failing"
    return run
