"""The loop's own code cannot be changed by the agent it runs.

pytest-ralph installed from a folder of the project (an editable install of a vendored copy,
or a run on a checkout of pytest-ralph itself) puts the controller's source where the agent
works. The controller imports every module of the package before the first agent run, so an
edit of a module it would import later (the job summary's, after the loop) never runs in it;
with the sandbox on, the package folder is read-only to the agent besides.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import pytest_ralph

ROOT = Path(__file__).resolve().parents[2]

#: The agent: appends code to the vendored copy's job-summary module that, run in the
#: controller (``--ralph`` on its command line), writes ``escaped.txt``.
AGENT = """\
import pathlib, sys
target = pathlib.Path("vendor/pytest_ralph/plugin/stepsummary.py")
try:
    with target.open("a") as f:
        f.write("\\nimport sys as _s\\nif '--ralph' in _s.argv:\\n"
                "    open('escaped.txt', 'w').write('controller')\\n")
except OSError as exc:
    print("could not edit the loop's code:", exc)
    sys.exit(1)
"""


@pytest.fixture
def vendored(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a copy of pytest-ralph in ``vendor/``, first on the ``sys.path`` of
    every process the test starts."""
    vendor = pytester.path / "vendor"
    shutil.copytree(Path(pytest_ralph.__file__).parent, vendor / "pytest_ralph",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "templates", vendor / "templates")
    monkeypatch.setenv("PYTHONPATH", str(vendor))
    (pytester.path / "prd.json").write_text(json.dumps({"userStories": [
        {"id": "US-1", "title": "done", "description": "d", "priority": 1, "passes": False,
         "notes": "", "acceptanceCriteria": [{"text": "done.txt exists", "exists": "done.txt"}]}
    ]}))
    (pytester.path / "agent.py").write_text(AGENT)
    return vendor


@pytest.mark.parametrize("sandbox", ["off", "required"])
def test_an_agent_cannot_put_code_into_the_controller(pytester: pytest.Pytester, vendored: Path,
                                                      sandbox: str) -> None:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ralph", "--ralph-agent", "python agent.py",
        "--ralph-max-iterations", "2", "--ralph-sandbox", sandbox)
    out = result.stdout.str()
    assert not (pytester.path / "escaped.txt").exists(), out
    assert result.ret != 0, out
    assert "complete (exit 0)" not in out
    edited = "'--ralph' in _s.argv" in (vendored / "pytest_ralph" / "plugin" /
                                         "stepsummary.py").read_text()
    # Unconfined, the agent could edit the file, but the controller had read it already;
    # confined, the package folder is read-only to it.
    assert edited is (sandbox == "off")


WARNING = "pytest-ralph: warning: started as `python -m pytest`"


@pytest.mark.parametrize(("start", "warned"), [
    ("module", True), ("safe-module", False), ("console-script", False)])
def test_the_python_m_warning_names_only_a_python_m_start(
        pytester: pytest.Pytester, start: str, warned: bool) -> None:
    """Under ``python -m pytest`` the working folder (the project) was first on ``sys.path``
    before the plugins loaded; under ``python -P -m pytest`` or the ``pytest`` command it was
    not, even with an ini ``pythonpath = .`` that puts the rootdir first before this plugin
    is imported (pytest 9.2)."""
    import sys

    pytester.makeini("[pytest]\npythonpath = .\n")
    pytester.makepyfile(agent="open('done.txt', 'w').close()\n")
    (pytester.path / "prd.json").write_text(json.dumps({"userStories": [
        {"id": "US-1", "title": "done", "description": "d", "priority": 1, "passes": False,
         "notes": "", "acceptanceCriteria": [{"text": "done.txt exists", "exists": "done.txt"}]}
    ]}))
    args = ("-p", "no:cacheprovider", "--ralph", "--ralph-agent", "python agent.py",
            "--ralph-max-iterations", "1")
    script = Path(sys.executable).with_name("pytest")
    if start == "console-script" and not script.is_file():
        pytest.fail(f"no pytest console script beside {sys.executable}")
    argv = {"module": (sys.executable, "-m", "pytest"),
            "safe-module": (sys.executable, "-P", "-m", "pytest"),
            "console-script": (str(script),)}[start]
    result = pytester.run(*argv, *args)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (WARNING in out) is warned, out
