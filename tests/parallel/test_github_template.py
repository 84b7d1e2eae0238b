"""The GitHub Actions workflow of parallel stories, ``templates/github/ralph-parallel.yml``, run
without GitHub.

The template is parsed with PyYAML and its jobs are run by :class:`Runner`, a stand-in for a
GitHub-hosted runner: each runner has its own folder, its own ``HOME`` (so no git
configuration of this machine applies) and its own ``RUNNER_TEMP``, and every runner's
checkout is a separate ``git clone`` of one local bare repository, ``origin.git``, which
plays the GitHub repository. The steps run in the template's order; each ``run:`` script is
the template's own text, run with ``bash -e`` (as GitHub runs ``bash`` steps) and the
environment GitHub would give it: the workflow's, the job's and the step's ``env:`` (their
``${{ }}`` expressions evaluated by :func:`evaluate` from the dispatch's inputs, the matrix
entry, ``needs.<job>.outputs``, ``steps.<id>.outputs``, ``runner.temp`` and empty secrets),
plus ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` files, ``RUNNER_TEMP``,
``GITHUB_RUN_ID``, ``GITHUB_WORKSPACE``. A step's outputs are read back from its
``GITHUB_OUTPUT`` file, and the job's ``outputs:`` are evaluated from them, so the lanes'
matrix is what the plan step printed: ``strategy.matrix`` is evaluated
(``fromJSON(needs.plan.outputs.matrix)``) and each entry of its ``include`` runs the lane job
on a runner of its own. ``if:`` of jobs and steps is evaluated too (``always()``, ``!=``,
``==``, ``&&``, ``||``).

Steps that use an action are replaced by their local equivalent (:data:`LOCAL_ACTIONS`):

================================  =========================================================
``actions/checkout``              ``git clone`` of ``origin.git`` into the runner's
                                  workspace, on the dispatch's branch (all history: the
                                  local clone has no ``fetch-depth``)
``actions/setup-python``          nothing: the steps' ``python`` is this test run's
                                  interpreter (first on ``PATH``)
``actions/upload-artifact``       the ``with.path`` folder copied to
                                  ``artifacts/<with.name>`` (a name used twice fails, as
                                  upload-artifact v4+ does)
================================  =========================================================

Every ``run:`` step runs for real except that ``python -m pip`` does nothing (no network on
the test machine; pytest-ralph is installed in the interpreter already): ``PATH`` starts with
a ``python`` that records pip's arguments and runs this interpreter for everything else. The
agent is a scripted agent (:mod:`pytest_ralph.testing`) whose steps write the story's file,
found from the lane's ``RALPH_STORY``, the variable the template's loop step sets.

:data:`NOT_RUN` lists the ``run:`` steps no test here runs, with why;
``test_every_run_step_is_run_or_listed`` makes sure each ``run:`` step of the template is in
one of the two, so that the template cannot drift from what is tested.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_ralph.testing import AgentCall, AgentFactory, Patch
from tests.support.env import clean_env
from tests.support.git import git, needs_git

pytestmark = [needs_git, pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "templates" / "github" / "ralph-parallel.yml"

#: ``(job, step name)`` of the ``run:`` steps that no test of this module runs, and why.
NOT_RUN: dict[tuple[str, str], str] = {}

#: The ``run:`` steps the tests of this module ran, ``(job, step name)``, in this process
#: (the end-to-end test checks its own list; this one is for the report).
RAN: set[tuple[str, str]] = set()

_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||!|\(|\)|,)"
                    r"|(?P<num>\d+)|(?P<name>[A-Za-z_][\w.-]*))")


def load_template() -> dict[Any, Any]:
    data = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def run_steps(workflow: Mapping[Any, Any]) -> list[tuple[str, str]]:
    """``(job, step name)`` of every ``run:`` step of ``workflow``, in order; a ``run:`` step
    without a name fails (the name is how tests and NOT_RUN refer to it)."""
    out = []
    for job_id, job in workflow["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                assert step.get("name"), f"job {job_id}: a run: step without a name: {step}"
                out.append((job_id, step["name"]))
    return out


# -- the expressions ---------------------------------------------------------------------------


def evaluate(expr: str, ctx: Mapping[str, Any]) -> Any:
    """The value of a GitHub Actions expression (the text inside ``${{ }}``), for the part
    of the language the template uses: context paths (``inputs.prd``, ``matrix.story``,
    ``needs.plan.outputs.matrix``, ``runner.temp``, ...), strings in single quotes, numbers,
    ``==``, ``!=`` (strings compared as GitHub does for strings), ``!``, ``&&``, ``||``,
    parentheses, ``always()``, ``success()``, ``failure()`` and ``fromJSON(x)``.

    Raises:
        AssertionError: anything else, or a path that names nothing (GitHub would give ``''``
            for a missing property; the template should not rely on one, except for
            ``secrets``, which are ``''`` here).
    """
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        assert m and m.end() > pos, f"unsupported expression {expr!r} at {expr[pos:]!r}"
        kind = m.lastgroup
        assert kind is not None
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(expr) and expr[pos].isspace():
            pos += 1
    at = 0

    def peek() -> str | None:
        return tokens[at][1] if at < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal at
        assert at < len(tokens), f"unexpected end of {expr!r}"
        at += 1
        return tokens[at - 1]

    def lookup(path: str) -> Any:
        head, *rest = path.split(".")
        if head == "secrets":
            return ""
        assert head in ctx, f"{expr!r}: no context {head!r} here"
        value = ctx[head]
        for n, part in enumerate(rest):
            if n and rest[n - 1] == "outputs" and isinstance(value, Mapping):
                return value.get(part, "")  # an output a step did not write is ''
            assert isinstance(value, Mapping) and part in value, f"{expr!r}: {path} is not set"
            value = value[part]
        return value

    def primary() -> Any:
        kind, text = take()
        if text == "(":
            value = either()
            assert take()[1] == ")", expr
            return value
        if text == "!":
            return not primary()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return int(text)
        assert kind == "name", f"unsupported expression {expr!r}"
        if peek() == "(":
            take()
            args = []
            while peek() != ")":
                args.append(either())
                if peek() == ",":
                    take()
            take()
            if text in ("always", "success", "failure", "cancelled"):
                return ctx["status"][text]
            assert text == "fromJSON" and len(args) == 1, f"unsupported function in {expr!r}"
            return json.loads(args[0])
        return lookup(text)

    def comparison() -> Any:
        left = primary()
        while peek() in ("==", "!="):
            op = take()[1]
            right = primary()
            same = str(left).lower() == str(right).lower()
            left = same if op == "==" else not same
        return left

    def both() -> Any:
        left = comparison()
        while peek() == "&&":
            take()
            right = comparison()
            left = left and right
        return left

    def either() -> Any:
        left = both()
        while peek() == "||":
            take()
            right = both()
            left = left or right
        return left

    value = either()
    assert at == len(tokens), f"unsupported expression {expr!r}"
    return value


def render(value: Any, ctx: Mapping[str, Any]) -> Any:
    """``value`` with its ``${{ }}`` evaluated: a string that is one expression becomes its
    value (as for ``strategy.matrix``), else each expression is put in as text."""
    if not isinstance(value, str):
        return value
    whole = _EXPR.fullmatch(value.strip())
    if whole:
        return evaluate(whole.group(1), ctx)
    return _EXPR.sub(lambda m: str(evaluate(m.group(1), ctx)), value)


def condition(step_or_job: Mapping[str, Any], ctx: Mapping[str, Any]) -> bool:
    """Whether GitHub runs the step (or job): its ``if:``, which is ``success()`` when absent
    and implies ``success() &&`` unless it calls a status function."""
    text = step_or_job.get("if")
    if text is None:
        return bool(ctx["status"]["success"])
    text = str(text)
    inner = _EXPR.fullmatch(text.strip())
    text = inner.group(1) if inner else text
    if not re.search(r"\b(always|success|failure|cancelled)\(", text):
        text = f"success() && ({text})"
    return bool(evaluate(text, ctx))


def read_outputs(path: Path) -> dict[str, str]:
    """The outputs a step wrote to its ``GITHUB_OUTPUT`` file: ``name=value`` lines and
    ``name<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = iter(path.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body = []
            for more in lines:
                if more == delimiter:
                    break
                body.append(more)
            out[name] = "\n".join(body)
        elif line:
            name, _, value = line.partition("=")
            out[name] = value
    return out


# -- the runners -------------------------------------------------------------------------------


@dataclass
class Job:
    """What a job did: ``ok`` (every step that ran succeeded), its evaluated ``outputs``,
    each step's ``(name, exit code, stdout + stderr)``, the steps' job summary text."""

    ok: bool
    outputs: dict[str, Any]
    steps: list[tuple[str, int, str]] = field(default_factory=list)
    summary: str = ""

    def log(self) -> str:
        return "\n".join(f"--- {name}: exit {code}\n{out}" for name, code, out in self.steps)


@dataclass
class GitHub:
    """The stand-in for GitHub: the bare repository ``origin``, the dispatch's ``inputs`` and
    branch, the run id, the artifacts folder and the run's folder (one subfolder per runner).
    """

    root: Path
    origin: Path
    inputs: dict[str, str]
    ref: str = "main"
    run_id: str = "4242"
    runners: int = 0
    ran: list[tuple[str, str]] = field(default_factory=list)

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def run_job(self, workflow: Mapping[Any, Any], job_id: str, *,
                needs: Mapping[str, Job] | None = None,
                matrix: Mapping[str, Any] | None = None) -> Job:
        """Run job ``job_id`` of ``workflow`` on a new runner (one matrix entry of it, when
        ``matrix`` is given) and return what it did."""
        self.runners += 1
        runner = self.root / f"runner-{self.runners}"
        home, temp, bin_dir = runner / "home", runner / "temp", runner / "bin"
        for folder in (home, temp, bin_dir):
            folder.mkdir(parents=True)
        workspace = runner / "work"
        shim = bin_dir / "python"
        shim.write_text("#!/bin/sh\n"
                        'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then '
                        f'echo "$*" >> {runner / "pip.log"}; exit 0; fi\n'
                        f'exec {sys.executable} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
        job = workflow["jobs"][job_id]
        needs_ctx = {name: {"outputs": done.outputs,
                            "result": "success" if done.ok else "failure"}
                     for name, done in (needs or {}).items()}
        ctx: dict[str, Any] = {
            "inputs": self.inputs, "matrix": dict(matrix or {}), "needs": needs_ctx,
            "steps": {}, "runner": {"temp": str(temp), "os": "Linux"},
            "github": {"run_id": self.run_id, "ref_name": self.ref,
                       "workspace": str(workspace)},
            "env": {}, "status": {"always": True, "success": True, "failure": False,
                                  "cancelled": False}}
        env_base = clean_env(drop=("PYTEST_", "GITHUB_", "GIT_", "CLAUDE_", "RALPH_"),
                             names=(), bytecode=True, HOME=str(home), GIT_CONFIG_NOSYSTEM="1",
                             RUNNER_TEMP=str(temp), GITHUB_RUN_ID=self.run_id,
                             GITHUB_WORKSPACE=str(workspace), GITHUB_REF_NAME=self.ref,
                             GITHUB_ACTIONS="true", CI="true",
                             PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
        for scope in (workflow.get("env") or {}, job.get("env") or {}):
            for name, value in scope.items():
                ctx["env"][name] = str(render(value, ctx))
        summary = runner / "step_summary.md"
        summary.touch()
        result = Job(ok=True, outputs={})
        for n, step in enumerate(job["steps"]):
            name = step.get("name") or step.get("uses") or f"step {n}"
            if not condition(step, ctx):
                result.steps.append((name, -1, "skipped"))
                continue
            if "uses" in step:
                action = step["uses"].split("@")[0]
                assert action in LOCAL_ACTIONS, f"no local equivalent of {step['uses']}"
                with_ = {k: render(v, ctx) for k, v in (step.get("with") or {}).items()}
                code, out = LOCAL_ACTIONS[action](self, workspace, with_)
            else:
                env = {**env_base, **ctx["env"]}
                env.update({k: str(render(v, ctx)) for k, v in (step.get("env") or {}).items()})
                output = runner / f"output-{n}"
                output.touch()
                env.update(GITHUB_OUTPUT=str(output), GITHUB_STEP_SUMMARY=str(summary))
                assert "${{" not in step["run"], f"{job_id}/{name}: run: holds an expression"
                done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=workspace,
                                      env=env, capture_output=True, text=True, timeout=600)
                code, out = done.returncode, done.stdout + done.stderr
                self.ran.append((job_id, name))
                RAN.add((job_id, name))
                if "id" in step:
                    ctx["steps"][step["id"]] = {"outputs": read_outputs(output)}
            result.steps.append((name, code, out))
            if code != 0:
                result.ok = False
                ctx["status"].update(success=False, failure=True)
        result.outputs = {k: render(v, ctx) for k, v in (job.get("outputs") or {}).items()}
        result.summary = summary.read_text(encoding="utf-8")
        return result


def _checkout(gh: GitHub, workspace: Path, with_: Mapping[str, Any]) -> tuple[int, str]:
    done = subprocess.run(["git", "clone", "-q", "--branch", gh.ref, str(gh.origin),
                           str(workspace)], capture_output=True, text=True,
                          env=clean_env(drop=("GIT_",), names=(), GIT_CONFIG_NOSYSTEM="1",
                                        HOME=str(workspace.parent / "home")))
    return done.returncode, done.stdout + done.stderr


def _setup_python(gh: GitHub, workspace: Path, with_: Mapping[str, Any]) -> tuple[int, str]:
    return 0, f"python {with_.get('python-version')}: this test run's interpreter"


def _upload_artifact(gh: GitHub, workspace: Path, with_: Mapping[str, Any]) -> tuple[int, str]:
    source = Path(str(with_["path"]))
    source = source if source.is_absolute() else workspace / source
    target = gh.artifacts / str(with_["name"])
    if target.exists():
        return 1, f"an artifact named {with_['name']} exists already"
    if not source.exists():
        return 0, f"no files at {source}"  # if-no-files-found: warn
    shutil.copytree(source, target)
    return 0, f"uploaded {source} as {with_['name']}"


#: The local equivalent of each action the template uses (see the module docstring).
LOCAL_ACTIONS: dict[str, Callable[[GitHub, Path, Mapping[str, Any]], tuple[int, str]]] = {
    "actions/checkout": _checkout,
    "actions/setup-python": _setup_python,
    "actions/upload-artifact": _upload_artifact,
}


# -- the project -------------------------------------------------------------------------------


def story_of(sid: str, *deps: str) -> dict[str, Any]:
    """A story whose one criterion is that ``<sid>.txt`` says ``done <sid>``."""
    out: dict[str, Any] = {
        "id": sid, "title": f"story {sid}", "priority": int(sid.split("-")[1]),
        "passes": False,
        "acceptanceCriteria": [{"text": f"{sid}.txt says done", "file": f"{sid}.txt",
                                "contains": f"done {sid}"}]}
    if deps:
        out["dependsOn"] = list(deps)
    return out


def make_origin(root: Path, stories: list[dict[str, Any]]) -> Path:
    """A bare repository ``origin.git`` under ``root`` whose ``main`` holds ``prd.json`` (one
    key a line, so that lanes that flip different stories' ``passes`` merge cleanly)."""
    seed = root / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "prd.json").write_text(json.dumps({"project": "Lanes", "userStories": stories},
                                              indent=2) + "\n", encoding="utf-8")
    (seed / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n", encoding="utf-8")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "the PRD")
    origin = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(origin))
    git(seed, "push", "-q", str(origin), "main")
    return origin


def story_agent(ralph_agent: AgentFactory, runs: int) -> str:
    """The command of a scripted agent that, in each of its ``runs`` runs, writes the file of
    the lane's story (``RALPH_STORY``, set by the template's loop step)."""

    def work(call: AgentCall) -> Patch:
        sid = call.env["RALPH_STORY"]
        return Patch(files={f"{sid}.txt": f"done {sid}\n"}, stdout=f"did {sid}")

    return ralph_agent(*[work] * runs).command


@pytest.fixture
def github(tmp_path: Path) -> Iterator[Callable[..., GitHub]]:
    def make(stories: list[dict[str, Any]], **inputs: str) -> GitHub:
        origin = make_origin(tmp_path, stories)
        return GitHub(root=tmp_path, origin=origin,
                      inputs={"prd": "prd.json", "agent": "", "max_iterations": "3",
                              "wave": "0", **inputs})

    yield make


def remote_branches(origin: Path) -> dict[str, str]:
    refs = git(origin, "for-each-ref", "--format=%(refname:short) %(objectname)",
               "refs/heads/")
    return dict(line.split(" ", 1) for line in refs.splitlines())


def gate(origin: Path, branch: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Clone ``branch`` of ``origin`` into ``folder`` and run plain ``pytest prd.json`` there."""
    git(folder.parent, "clone", "-q", "--branch", branch, str(origin), str(folder))
    return subprocess.run([sys.executable, "-m", "pytest", "prd.json", "-p", "no:cacheprovider",
                           *args], cwd=folder, capture_output=True, text=True, timeout=300,
                          env=clean_env(drop=("PYTEST_", "GITHUB_"), names=()))


# -- the tests ---------------------------------------------------------------------------------


def test_the_template_is_a_dispatched_workflow_of_plan_lane_jobs() -> None:
    data = load_template()
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"workflow_dispatch"}
    assert {"prd", "agent", "max_iterations", "wave"} <= set(triggers["workflow_dispatch"]
                                                             ["inputs"])
    jobs = data["jobs"]
    assert jobs["lane"]["needs"] == "plan"
    assert jobs["lane"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["lane"]["strategy"]["fail-fast"] is False
    assert data["permissions"] == {"contents": "write"}
    for job_id, job in jobs.items():
        for step in job["steps"]:
            if "uses" in step:
                assert step["uses"].split("@")[0] in LOCAL_ACTIONS, (job_id, step["uses"])
                assert re.fullmatch(r"[\w/-]+@v\d+", step["uses"]), step["uses"]
            else:
                assert "${{" not in step["run"], f"{job_id}/{step['name']}: use env: instead"
    uploads = [s for s in jobs["lane"]["steps"] if "uses" in s and "upload" in s["uses"]]
    assert [s["if"] for s in uploads] == ["always()"]
    assert "${{ matrix.story }}" in uploads[0]["with"]["name"]


def test_every_run_step_is_run_or_listed() -> None:
    """Each ``run:`` step of the template is run by ``test_the_workflow_runs_to_pushed_lanes``
    (which checks that it ran every step not in NOT_RUN) or is in NOT_RUN with a reason, and
    NOT_RUN names only steps that exist."""
    steps = run_steps(load_template())
    assert len(set(steps)) == len(steps), "two run: steps of one job share a name"
    assert set(NOT_RUN) <= set(steps), set(NOT_RUN) - set(steps)
    assert all(why.strip() for why in NOT_RUN.values())


def test_the_expressions_are_evaluated_as_github_does() -> None:
    ctx = {"inputs": {"wave": "0"}, "needs": {"plan": {"outputs": {"count": "2",
                                                                  "matrix": '{"include": []}'}}},
           "status": {"always": True, "success": False, "failure": True, "cancelled": False}}
    assert evaluate("needs.plan.outputs.count != '0'", ctx) is True
    assert evaluate("fromJSON(needs.plan.outputs.matrix)", ctx) == {"include": []}
    assert condition({"if": "always()"}, ctx) is True
    assert condition({}, ctx) is False
    assert condition({"if": "needs.plan.outputs.count != '0'"}, ctx) is False
    assert render("a-${{ inputs.wave }}-b", ctx) == "a-0-b"
    with pytest.raises(AssertionError, match="unsupported"):
        evaluate("contains(inputs.wave, '0')", ctx)


def test_the_workflow_runs_to_pushed_lanes(github: Callable[..., GitHub],
                                            ralph_agent: AgentFactory, tmp_path: Path) -> None:
    """Wave 0 of a PRD of three stories (US-3 depends on US-1): the plan job's matrix has the
    two lanes US-1 and US-2; each lane, on its own clone, runs the loop with the scripted
    agent, pushes ``ralph/<story>`` with its story done and uploads its state folder."""
    gh = github([story_of("US-1"), story_of("US-2"), story_of("US-3", "US-1")])
    gh.inputs["agent"] = story_agent(ralph_agent, runs=4)
    workflow = load_template()

    plan = gh.run_job(workflow, "plan")
    assert plan.ok, plan.log()
    assert plan.outputs["count"] == "2"
    assert plan.outputs["branches"] == "ralph/US-1 ralph/US-2"
    assert "| 1 | US-3 |" in plan.summary and "| 0 (this run) | US-1, US-2 |" in plan.summary
    lane_job = workflow["jobs"]["lane"]
    ctx = {"needs": {"plan": {"outputs": plan.outputs, "result": "success"}},
           "status": {"always": True, "success": True, "failure": False, "cancelled": False}}
    assert condition(lane_job, ctx)
    matrix = render(lane_job["strategy"]["matrix"], ctx)
    assert [entry["story"] for entry in matrix["include"]] == ["US-1", "US-2"]

    lanes = {entry["story"]: gh.run_job(workflow, "lane", needs={"plan": plan}, matrix=entry)
             for entry in matrix["include"]}
    for sid, lane in lanes.items():
        assert lane.ok, f"lane {sid}:\n{lane.log()}"
        assert f"Pushed `ralph/{sid}`" in lane.summary
        assert "### pytest-ralph loop:" in lane.summary
        state = gh.artifacts / f"ralph-state-{sid}"
        assert (state / "runs").is_dir(), sorted(p.name for p in state.iterdir())
    branches = remote_branches(gh.origin)
    assert {"main", "ralph/US-1", "ralph/US-2"} <= set(branches)
    for sid in ("US-1", "US-2"):
        other = "US-2" if sid == "US-1" else "US-1"
        done = gate(gh.origin, f"ralph/{sid}", tmp_path / f"check-{sid}", "--ralph-story", sid)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not (tmp_path / f"check-{sid}" / f"{other}.txt").exists()
    merge_job = workflow["jobs"]["merge"]
    ctx["needs"]["lane"] = {"outputs": {}, "result": "success"}
    assert condition(merge_job, ctx)
    merge = gh.run_job(workflow, "merge", needs={"plan": plan, "lane": lanes["US-1"]})
    assert merge.ok, merge.log()
    (integration,) = [b for b in remote_branches(gh.origin) if b.endswith("/integration")]
    assert f"Pushed `{integration}`" in merge.summary
    done = gate(gh.origin, integration, tmp_path / "merged", "--ralph-story", "US-1",
                "--ralph-story", "US-2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"US-1.txt", "US-2.txt"} <= {p.name for p in (tmp_path / "merged").iterdir()}
    expected = [s for s in run_steps(workflow) if s not in NOT_RUN]
    assert sorted(set(gh.ran)) == sorted(expected)


def test_a_wave_out_of_the_plan_fails_the_plan_job(github: Callable[..., GitHub]) -> None:
    gh = github([story_of("US-1")], wave="3")
    plan = gh.run_job(load_template(), "plan")
    assert not plan.ok
    assert "::error::the input wave is '3'; expected 0 to 0 (the plan has 1 waves)" in plan.log()


def test_a_lane_whose_branch_exists_on_origin_says_what_to_do(
        github: Callable[..., GitHub], ralph_agent: AgentFactory) -> None:
    """A branch left by an earlier run is not overwritten: the push step fails with an error
    annotation naming the branch and how to delete it; the state folder is still uploaded."""
    gh = github([story_of("US-1")])
    gh.inputs["agent"] = story_agent(ralph_agent, runs=2)
    workflow = load_template()
    plan = gh.run_job(workflow, "plan")
    seed = gh.root / "seed"
    (seed / "old.txt").write_text("earlier\n", encoding="utf-8")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "an earlier lane")
    git(seed, "push", "-q", str(gh.origin), "HEAD:refs/heads/ralph/US-1")
    before = remote_branches(gh.origin)["ralph/US-1"]
    (entry,) = json.loads(plan.outputs["matrix"])["include"]
    lane = gh.run_job(workflow, "lane", needs={"plan": plan}, matrix=entry)
    assert not lane.ok
    assert "::error::cannot push ralph/US-1: a branch of that name is on origin" in lane.log()
    assert remote_branches(gh.origin)["ralph/US-1"] == before
    assert (gh.artifacts / "ralph-state-US-1").is_dir()


def test_the_template_ships_in_the_package() -> None:
    from pytest_ralph.loop.prompt import template_path

    assert template_path("github/ralph-parallel.yml").read_bytes() == TEMPLATE.read_bytes()


def test_a_later_wave_plans_only_its_stories(github: Callable[..., GitHub]) -> None:
    gh = github([story_of("US-1"), story_of("US-2"), story_of("US-3", "US-1")], wave="1")
    plan = gh.run_job(load_template(), "plan")
    assert plan.ok, plan.log()
    assert (plan.outputs["count"], plan.outputs["branches"]) == ("1", "ralph/US-3")
    assert json.loads(plan.outputs["matrix"]) == {"include": [
        {"story": "US-3", "title": "story US-3", "branch": "ralph/US-3", "wave": 1,
         "dependsOn": ["US-1"]}]}
    assert "| 1 (this run) | US-3 |" in plan.summary


def test_a_lane_that_does_not_finish_still_pushes_its_work(
        github: Callable[..., GitHub], ralph_agent: AgentFactory, tmp_path: Path) -> None:
    """An agent that writes the wrong text: the loop step fails the job after its one
    iteration, and the push and upload steps (``if: always()``) still keep what it did."""
    gh = github([story_of("US-1")], max_iterations="1")
    gh.inputs["agent"] = ralph_agent({"files": {"US-1.txt": "not yet\n"}}).command
    workflow = load_template()
    plan = gh.run_job(workflow, "plan")
    (entry,) = json.loads(plan.outputs["matrix"])["include"]
    lane = gh.run_job(workflow, "lane", needs={"plan": plan}, matrix=entry)
    assert not lane.ok
    codes = {name: code for name, code, _ in lane.steps}
    assert codes["Run the loop on the story"] != 0
    assert codes["Commit and push the lane's branch"] == 0, lane.log()
    assert (gh.artifacts / "ralph-state-US-1" / "runs").is_dir()
    done = gate(gh.origin, "ralph/US-1", tmp_path / "check")
    assert done.returncode == 1
    assert (tmp_path / "check" / "US-1.txt").read_text(encoding="utf-8") == "not yet\n"
