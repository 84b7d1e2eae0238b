"""``pytest --ralph-merge BRANCH [BRANCH...]``: the criteria-gated merge queue over pushed lane
branches (the final job of a parallel CI workflow).

Each ``BRANCH`` is a lane's branch, local (``ralph/US-001``) or remote-tracking
(``origin/ralph/US-001``); its story is, in this order: the ``ID`` of an argument written
``ID=BRANCH``; the story whose plan branch (:func:`pytest_ralph.parallel.plan.branch_names`,
what ``--ralph-plan`` prints) the branch's name ends with; the story whose
:func:`pytest_ralph.parallel.names.lane_key` is the branch's last component (a local lane,
``ralph/<run>/<key>``). A branch that names no story of the PRD is a usage error.

The stories are merged in the plan's order (:func:`pytest_ralph.parallel.plan.waves`, each
wave by priority, as one batch: :meth:`pytest_ralph.parallel.queue.MergeQueue.merge_batch`
checks a wave once when all of it passes, else one story at a time) by
:class:`pytest_ralph.parallel.queue.MergeQueue` onto the integration
branch ``ralph/merge-<base>/integration`` (``<base>``: the first 12 hex digits of ``HEAD``,
so that running it again resumes the same queue), each checked by the gate
(:func:`pytest_ralph.parallel.gate.gate_check`). A story that depends on a given story that
was not merged is ``blocked`` and not tried; a dependency on a story not given is taken as
met (already on the base). The user's branch is never moved: the integration branch is left
for the user (or the workflow) to push, its worktree removed.

The branches come from other runners: their code is agent code, and the gate runs it. With a
sandbox that confines (``ralph_sandbox``, probed by the caller), the gate runs under
bubblewrap and may write only the integration worktree (less the PRD and the files that judge
it) and a private results folder (:func:`pytest_ralph.parallel.gate.gate_check`); without
one it runs unconfined, and the output and the job summary say so
(:func:`pytest_ralph.parallel.gate.describe_gate`).

Exit status: 0 when every story merged; 1 (:data:`EXIT_NOT_MERGED`) when one did not
(conflict, story-failed, regressed, blocked); 4 for bad input (not a git repository,
uncommitted changes, an unknown branch, a PRD error); 5 when there is no PRD.

This module does not import pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..loop.records import EXIT_NO_CRITERIA, EXIT_USAGE
from ..oracle.bytecode import TrustedBytecode
from ..parallel.gate import describe_gate, gate_around, gate_check
from ..parallel.names import lane_key
from ..parallel.plan import branch_names, check, waves
from ..parallel.queue import MergeQueue, MergeResult, QueueError
from ..parallel.worktrees import ParallelUsageError, WorktreeError, preflight
from ..prd.describe import no_prd_message
from ..prd.errors import PRDError
from ..prd.load import MAX_PRD_BYTES, discover_prd, load_prd
from ..sandbox.bwrap import Sandbox

#: The prefix of every message of the command.
PREFIX = "pytest-ralph: --ralph-merge: "

#: The exit status when a story was not merged.
EXIT_NOT_MERGED = 1


@dataclass
class MergeRun:
    """What ``--ralph-merge`` did.

    Attributes:
        code: the exit status.
        text: what to print (stdout when ``code`` is 0 or 1, else stderr).
        results: one :class:`MergeResult` per story, in merge order.
        branch: the integration branch (``""`` when it never was made).
        head: its head.
        gate: what the gate could write (:func:`pytest_ralph.parallel.gate.describe_gate`),
            ``""`` when no gate ran.
    """

    code: int
    text: str
    results: list[MergeResult] = field(default_factory=list)
    branch: str = ""
    head: str = ""
    gate: str = ""

    def markdown(self) -> str:
        """The job summary: a heading, one table row per story, the integration branch."""
        if not self.branch:
            return f"## pytest-ralph: merge queue\n\n{self.text}\n"
        rows = ["| story | branch | outcome | check |", "|---|---|---|---|"]
        rows += [f"| {r.story} | `{r.branch}` | {r.outcome} | {r.summary} |"
                 for r in self.results]
        merged = sum(1 for r in self.results if r.merged)
        gate = f"\n\n**Gate:** {self.gate}." if self.gate else ""
        return (f"## pytest-ralph: merge queue\n\n{merged} of {len(self.results)} stories "
                f"merged onto `{self.branch}` ({self.head[:12]}).{gate}\n\n"
                + "\n".join(rows) + "\n")


def _stories(args: list[str], ids: list[str]) -> list[tuple[str, str]]:
    """(story id, branch) of each argument.

    Raises:
        ValueError: an argument names no story (the message says how to name it).
    """
    plan = branch_names(ids)
    keys = {lane_key(sid): sid for sid in ids}
    out: list[tuple[str, str]] = []
    for arg in args:
        sid, sep, branch = arg.partition("=")
        if sep:
            if sid not in ids:
                raise ValueError(f"{arg!r}: {sid!r} is no story of the PRD")
            out.append((sid, branch))
            continue
        found = [s for s, b in plan.items() if arg == b or arg.endswith("/" + b)]
        found = found or [keys[k] for k in [arg.rsplit("/", 1)[-1]] if k in keys]
        if not found:
            raise ValueError(f"{arg!r} is the branch of no story of the PRD; expected a "
                             "branch of --ralph-plan (ralph/<story>) or ID=BRANCH")
        out.append((found[0], arg))
    seen = [s for s, _ in out]
    twice = sorted({s for s in seen if seen.count(s) > 1})
    if twice:
        raise ValueError(f"story {twice[0]!r} is given more than once")
    return out


def merge(rootdir: Path, prd: Path | None, args: list[str], *, state_dir: Path | None = None,
          max_bytes: int = MAX_PRD_BYTES, sandbox: Sandbox | None = None,
          inifile: Path | None = None, strict: bool = False) -> MergeRun:
    """Run the merge queue over the branches ``args`` (see the module docstring).

    Args:
        rootdir: the project folder (the pytest rootdir).
        prd: the PRD, or ``None`` to discover it.
        args: the command's arguments: ``BRANCH`` or ``ID=BRANCH`` each.
        state_dir: the state folder (default ``rootdir/.pytest_ralph``).
        max_bytes: the PRD size limit.
        sandbox: the gate's sandbox (:func:`pytest_ralph.sandbox.bwrap.probe`); ``None``:
            unconfined, said as such.
        inifile: the pytest configuration file, relative to the project folder or absolute
            (see :func:`pytest_ralph.parallel.gate.gate_check`).
        strict: ``--ralph-strict``: the gate refuses claims (claimed text criteria fail).
    """
    if not args:
        return MergeRun(EXIT_USAGE, PREFIX + "expected the lanes' branches to merge: "
                        "pytest --ralph-merge ralph/US-001 ralph/US-002 (or ID=BRANCH)")
    path = prd if prd is not None else discover_prd(rootdir)
    if path is None:
        return MergeRun(EXIT_NO_CRITERIA, PREFIX + no_prd_message(rootdir))
    try:
        loaded = load_prd(path, max_bytes=max_bytes)
        check(loaded)
        given = _stories(args, [s.id for s in loaded.stories])
        repo = preflight(rootdir, state_dir)
    except PRDError as exc:
        return MergeRun(EXIT_USAGE, PREFIX + exc.describe())
    except (ValueError, ParallelUsageError) as exc:
        return MergeRun(EXIT_USAGE, PREFIX + str(exc).replace("--ralph-parallel",
                                                              "--ralph-merge"))
    branch_of = dict(given)
    order = [s for wave in waves(loaded) for s in wave if s.id in branch_of]
    try:
        rel = Path(path).resolve().relative_to(repo.project)
    except ValueError:
        return MergeRun(EXIT_USAGE, f"{PREFIX}the PRD {path} is outside the project "
                        f"{repo.project}")
    # The gates share one bytecode folder that only this process compiles into.
    bytecode = TrustedBytecode.for_run(repo.project, confined=bool(sandbox and sandbox.confined))
    bytecode.prime_in_background(bytecode.sources_loaded_here())
    try:
        gate = gate_check(rel, sandbox=sandbox, state_dir=repo.state_dir,
                          around=gate_around(repo), inifile=inifile, bytecode=bytecode,
                          strict=strict)
        queue = MergeQueue(repo, f"merge-{repo.head[:12]}", repo.head, gate, prd=rel)
        for _, branch in given:  # every branch checked before the first merge
            queue.branch_commit(branch)
        done = {r.story: r for r in queue.results if r.merged}
        found: dict[str, MergeResult] = dict(done)
        for wave in waves(loaded):  # a wave's stories depend on none of each other
            batch: list[tuple[str, str]] = []
            for story in wave:
                if story.id not in branch_of or story.id in done:
                    continue
                waiting = [d for d in story.depends_on if d in branch_of and d not in done]
                if waiting:
                    found[story.id] = queue.block(story.id, branch_of[story.id], "waits for "
                                                  + ", ".join(waiting) + ", not merged")
                else:
                    batch.append((story.id, branch_of[story.id]))
            for (sid, _), result in zip(batch, queue.merge_batch(batch), strict=True):
                found[sid] = result
                if result.merged:
                    done[sid] = result
        lines: list[str] = []
        results: list[MergeResult] = []
        for story in order:
            result = found[story.id]
            results.append(result)
            lines.append(result.line())
            lines += [f"  {f}" for f in result.failures[:10]]
        queue.remove_worktree()
    except (QueueError, WorktreeError) as exc:
        return MergeRun(EXIT_USAGE, PREFIX + str(exc))
    finally:
        bytecode.close()
    merged = all(s.id in done for s in order)
    gate_text = describe_gate(sandbox)
    lines.append(f"integration branch: {queue.branch} ({queue.head[:12]}): push it with "
                 f"git push origin {queue.branch}")
    lines.append(f"gate: {gate_text}")
    return MergeRun(0 if merged else EXIT_NOT_MERGED, "\n".join(lines), results,
                    queue.branch, queue.head, gate_text)
