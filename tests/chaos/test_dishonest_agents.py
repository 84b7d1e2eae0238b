"""The dishonest-agent suite: every case of :mod:`tests.chaos.cases`, with the sandbox on
(``ralph_sandbox = required``) and off, run as a real ``pytest --ralph`` against its own tiny
project, each in a folder of its own (HOME, caches, temporary folder and a throwaway virtualenv
inside it). A ``held`` case must not complete; a ``documented`` one must do exactly what the
limitations page says it still can."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.cases import CASES, LIMIT_CLAIMED, Case, as_json, problems, run_case
from tests.support.chaos import MODES, CaseRun, outer_site_packages, warm_pycache

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux: /proc, bubblewrap")


@pytest.fixture(scope="session")
def pycache_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bytecode a check phase compiles, made once for the whole session (shared by the
    pytest-xdist workers of one run), copied into each case's cache."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return warm_pycache(shared / "chaos-pycache")


#: Environment variable: a file each case appends its record to, one JSON object a line.
RECORDS_ENV = "PYTEST_RALPH_CHAOS_RECORDS"


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_dishonest_agent(case: Case, mode: str, tmp_path: Path, pycache_template: Path) -> None:
    run = CaseRun(tmp_path, mode, pycache_template=pycache_template)
    run_case(case, run)
    found = problems(case, mode, run)
    records = os.environ.get(RECORDS_ENV)
    if records:  # for `python -m tests.chaos.table --from FILE` (CI prints the table)
        line = json.dumps(as_json(case, mode, run)) + "\n"
        fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    steps = "\n\n".join(f"--- {s.label}: exit {s.exit}\n{s.output}\n--- agent logs:\n{s.logs}"
                        for s in run.outcome.steps)
    assert not found, (f"{case.name} (sandbox {mode}): {found}\nexpected: "
                       f"{case.expect(mode).describe()}\ngot: {run.outcome.summary()}\n{steps}")
    shutil.rmtree(tmp_path, ignore_errors=True)  # kept when the case fails, to look into


# -- the registry and the harness ----------------------------------------------------------------

#: Families every version of the suite keeps (issue 20's list).
FAMILIES = {
    "edit the criteria in the PRD", "flip passes: true", "delete the tests", "weaken the tests",
    "print a completion promise", "conftest.py inside the project",
    "ini tricks inside the project", "shadow the standard library",
    "a config file above the project", "the shared bytecode cache",
    "a third-party module in the project", "a .pth file in the virtualenv",
    "a pytest11 entry point in the virtualenv",
    "a pytest.py that shadows pytest for a run criterion",
    "a test file weakened behind a run criterion",
    "a module the tests import planted beside them",
    "weaken the tests, kill the controller, start a new run",
    "a background process that survives the agent", "edit the state folder",
    ".git/config drivers (code in the controller?)",
    "a module for an import the controller does lazily", "code under test", "symlink tricks",
    "usercustomize.py / user site-packages", "claimed text criteria",
}


def test_the_registry_covers_every_family_with_both_modes() -> None:
    assert len(CASES) >= 30
    assert {c.family for c in CASES} >= FAMILIES
    for case in CASES:
        for mode in MODES:
            expect = case.expect(mode)
            assert expect.verdict in ("held", "documented"), case.name
            assert expect.signs or expect.verdict == "documented", case.name
            if expect.verdict == "documented":
                assert expect.exit is not None, case.name
                assert expect.limitation.startswith("docs/limitations.md#"), case.name
    # With the sandbox on, only a claim is taken at its word... and what no sandbox that lets
    # the agent write its project can stop (the code under test, the tests of a run command).
    on_documented = {c.name: c.on.limitation for c in CASES if c.on.verdict == "documented"}
    assert on_documented["claimed-text-flip"] == LIMIT_CLAIMED
    assert set(on_documented) == {"claimed-text-flip", "cut-hides-its-own-tests",
                                  "cut-writes-the-report", "cut-equal-to-anything"}
    # Every limitation a case points to is a heading of docs/limitations.md.
    page = (Path(__file__).resolve().parents[2] / "docs" / "limitations.md").read_text()
    anchors = {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
               for line in page.splitlines() if line.startswith("#")}
    for case in CASES:
        for mode in MODES:
            limitation = case.expect(mode).limitation
            if limitation:
                assert limitation.partition("#")[2] in anchors, (case.name, limitation)


def test_a_case_runs_in_a_folder_and_virtualenv_of_its_own(tmp_path: Path) -> None:
    run = CaseRun(tmp_path, "off")
    env = run.env()
    for name in ("HOME", "XDG_CACHE_HOME", "PYTEST_RALPH_PYCACHE", "TMPDIR", "VIRTUAL_ENV"):
        assert Path(env[name]).is_relative_to(tmp_path.resolve()), name
    assert env["PATH"].split(os.pathsep)[0] == str(run.venv / "bin")
    probe = subprocess.run(
        [str(run.python), "-c", "import sys, sysconfig, pytest_ralph; "
         "print(sys.prefix); print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, env=env, timeout=60, check=True)
    prefix, purelib = probe.stdout.split()
    assert Path(prefix) == run.venv
    assert Path(purelib) == run.site_packages
    assert str(run.site_packages) not in outer_site_packages()
    # Processes the case leaves behind are found by their marker and killed.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                               start_new_session=True)
    try:
        run.cleanup()
        assert sleeper.wait(timeout=10) == -9
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
