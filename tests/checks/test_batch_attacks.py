"""A batched check phase against a dishonest agent (and honest tests it must not misread).

Each case is a project the agent could leave behind; the gate ``pytest prd.json`` runs it
batched (the default) and with ``-o ralph_check_batch=false`` (one child per criterion), each
on a fresh copy, and every criterion must get the same verdict both ways. Found by a red team
of issue 22: before the fixes each case below made the batched gate pass a criterion whose
tests fail on their own (or fail one that passes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SESSION_DB = ("import pytest\n\n@pytest.fixture(scope='session')\n"
              "def db():\n    yield 1\n    raise RuntimeError('connection leaked')\n")

#: Code under test that, called by B's failing test, renames its JUnit testcase to the first
#: probe's name (the token is in its environment).
RENAME_TO_PROBE = """\
import inspect, os
def value():
    from _pytest.junitxml import xml_key
    from pytest_ralph.checks.pytest_kind import probe_names
    token = os.environ.get('PYTEST_RALPH_PROBE', '')
    for f in inspect.stack():
        item = f.frame.f_locals.get('pyfuncitem')
        if item is not None:
            xml = item.config.stash.get(xml_key, None)
            if xml is not None and token:
                xml.node_reporter(item.nodeid).add_attribute('name', probe_names(token)[0])
            break
    return 41
"""

#: Code under test that, called by B's failing test, points the path property the probe
#: plugin gave its test at A's file.
MOVE_PATH_PROPERTY = """\
import inspect
def value():
    for f in inspect.stack():
        item = f.frame.f_locals.get('pyfuncitem')
        if item is not None:
            item.user_properties[:] = [
                (k, v.replace('test_b.py', 'test_a.py') if k == 'pytest_ralph_path' else v)
                for k, v in item.user_properties]
            break
    return 41
"""

B_WITH_APP = ("import app\n\ndef test_ok():\n    pass\n\n"
              "def test_bad():\n    assert app.value() == 42\n")

B_OK_BAD = "def test_ok():\n    pass\n\ndef test_bad():\n    assert False\n"

DESELECT_BAD = ("def pytest_collection_modifyitems(config, items):\n"
                "    bad = [i for i in items if i.name == 'test_bad']\n"
                "    if bad:\n"
                "        config.hook.pytest_deselected(items=bad)\n"
                "        items[:] = [i for i in items if i not in bad]\n")

#: id -> (files, criteria (a pytest target, or a whole criterion), symbolic links, options).
CASES: dict[str, tuple[dict[str, str], list[Any], dict[str, str], tuple[str, ...]]] = {
    "session-fixture-teardown-error": (
        {"tests/conftest.py": SESSION_DB, "tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": "def test_b(db):\n    assert db == 1\n"},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "session-fixture-teardown-error-first": (
        {"tests/conftest.py": SESSION_DB, "tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": "def test_b(db):\n    assert db == 1\n"},
        ["tests/test_b.py", "tests/test_a.py"], {}, ()),
    "module-fixture-teardown-error": (
        {"tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": ("import pytest\n\n@pytest.fixture(scope='module')\n"
                             "def res():\n    yield 1\n    assert False, 'not released'\n\n"
                             "def test_b(res):\n    assert res == 1\n")},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "teardown-module-asserts": (
        {"tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": ("STATE = []\n\ndef teardown_module(module):\n"
                             "    assert not STATE, 'still open'\n\n"
                             "def test_b():\n    STATE.append(1)\n")},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "package-fixture-teardown-error": (
        {"tests/pkg/__init__.py": "",
         "tests/pkg/conftest.py": ("import pytest\n\n@pytest.fixture(scope='package')\n"
                                   "def res():\n    yield 1\n    raise RuntimeError('leak')\n"),
         "tests/pkg/test_1.py": "def test_1(res):\n    assert res\n",
         "tests/pkg/test_2.py": "def test_2():\n    pass\n"},
        ["tests/pkg/test_1.py", "tests/pkg/test_2.py"], {}, ()),
    "session-fixture-teardown-error-on-workers": (
        {"tests/conftest.py": SESSION_DB, "tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": "def test_b(db):\n    assert db == 1\n",
         "tests/test_c.py": "def test_c():\n    pass\n",
         "tests/test_d.py": "def test_d(db):\n    assert db == 1\n"},
        ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_d.py"], {},
        ("--ralph-workers", "2")),
    "parametrize-id-with-colons": (
        {"app.py": "CASES = ['v1', 'v1]::x']\nFEATURE = False\n", "conftest.py": "",
         "tests/test_x.py": ("import pytest\nimport app\n\n"
                             "@pytest.mark.parametrize('case', app.CASES, ids=str)\n"
                             "def test_x(case):\n"
                             "    if case == 'v1' and not app.FEATURE:\n"
                             "        pytest.skip('v1 not implemented')\n"
                             "    assert case\n")},
        ["tests/test_x.py", "tests/test_x.py::test_x[v1]"], {}, ()),
    "symlink-beside-a-fixture": (
        {"tests/b/conftest.py": ("import pytest\n\n@pytest.fixture\ndef feature():\n"
                                 "    pytest.skip('feature not implemented')\n"),
         "tests/b/test_b.py": "def test_b(feature):\n    assert feature\n",
         "tests/a/conftest.py": ("import pytest\n\n@pytest.fixture\ndef feature():\n"
                                 "    return True\n"),
         "tests/a/test_a.py": "def test_a():\n    pass\n"},
        ["tests/a", "tests/b/test_b.py"], {"tests/a/test_link.py": "../b/test_b.py"}, ()),
    "symlink-beside-a-data-file": (
        {"tests/b/test_b.py": ("import pathlib, pytest\n\ndef test_b():\n"
                               "    data = pathlib.Path(__file__).with_name('golden.txt')\n"
                               "    if not data.exists():\n        pytest.skip('not generated')\n"
                               "    assert data.read_text() == 'ok'\n"),
         "tests/a/test_a.py": "def test_a():\n    pass\n", "tests/a/golden.txt": "ok"},
        ["tests/a", "tests/b/test_b.py"], {"tests/a/test_link.py": "../b/test_b.py"}, ()),
    "testcase-renamed-to-a-probe": (
        {"conftest.py": "", "app.py": RENAME_TO_PROBE,
         "tests/test_a.py": "def test_a():\n    pass\n", "tests/test_b.py": B_WITH_APP},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "path-property-moved": (
        {"conftest.py": "", "app.py": MOVE_PATH_PROPERTY,
         "tests/test_a.py": "def test_a():\n    pass\n", "tests/test_b.py": B_WITH_APP},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "junit-names-that-collide": (
        {"tests/test_a.py": "def test_t():\n    pass\n",
         "tests.test_a.py": "def test_t():\n    assert False\n"},
        ["tests/test_a.py", "tests.test_a.py"], {}, ()),
    "conftest-of-another-criterion": (
        {"tests/a/conftest.py": ("def pytest_collection_modifyitems(config, items):\n"
                                 "    bad = [i for i in items if i.name == 'test_bad']\n"
                                 "    if bad:\n"
                                 "        config.hook.pytest_deselected(items=bad)\n"
                                 "        items[:] = [i for i in items if i not in bad]\n"),
         "tests/a/test_a.py": "def test_a():\n    pass\n",
         "tests/b/test_b.py": "def test_ok():\n    pass\n\ndef test_bad():\n    assert False\n"},
        ["tests/a", "tests/b/test_b.py"], {}, ()),
    "run-criterion-between": (
        {"app.py": "import pathlib\npathlib.Path('config.ini').write_text('mode=broken\\n')\n",
         "config.ini": "mode=ok\n", "tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_c.py": ("import pathlib\n\ndef test_config_ok():\n"
                             "    text = pathlib.Path('config.ini').read_text()\n"
                             "    assert text == 'mode=ok\\n'\n")},
        ["tests/test_a.py", {"text": "migrate runs", "run": "python app.py"}, "tests/test_c.py"],
        {}, ()),
    # A second red team's cases.
    "conftest-under-a-linked-folder": (
        {"plug/conftest.py": DESELECT_BAD, "tests/a/test_a.py": "def test_a():\n    pass\n",
         "tests/b/test_b.py": B_OK_BAD},
        ["tests/a", "tests/b/test_b.py"], {"tests/a/sub": "../../plug"}, ()),
    "conftest-under-a-linked-folder-on-workers": (
        {"plug/conftest.py": DESELECT_BAD, "tests/a/test_a.py": "def test_a():\n    pass\n",
         "tests/b/test_b.py": B_OK_BAD, "tests/c/test_c.py": "def test_c():\n    pass\n",
         "tests/d/test_d.py": B_OK_BAD},
        ["tests/a", "tests/b/test_b.py", "tests/c", "tests/d/test_d.py"],
        {"tests/a/sub": "../../plug", "tests/c/sub": "../../plug"}, ("--ralph-workers", "2")),
    "exists-criterion-between": (
        {"app.py": ("import pathlib\ndef build():\n"
                    "    pathlib.Path('dist').mkdir(exist_ok=True)\n    return 1\n"),
         "conftest.py": "", "tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": "import app\n\ndef test_b():\n    assert app.build() == 1\n"},
        ["tests/test_a.py", {"text": "dist was built", "exists": "dist"}, "tests/test_b.py"],
        {}, ()),
    "exit-status-forced-at-exit": (
        {"app.py": ("import atexit, os\natexit.register(os._exit, 0)\n"
                    "def value():\n    return 41\n"),
         "conftest.py": "", "tests/test_a.py": "def test_a():\n    pass\n",
         "tests/test_b.py": B_WITH_APP},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "exit-status-forced-by-a-conftest": (
        {"conftest.py": "def pytest_sessionfinish(session):\n    session.exitstatus = 0\n",
         "tests/test_a.py": "def test_a():\n    pass\n", "tests/test_b.py": B_OK_BAD},
        ["tests/test_a.py", "tests/test_b.py"], {}, ()),
    "two-modules-of-one-name": (
        {"tests/a/test_util.py": "def test_a():\n    pass\n",
         "tests/b/test_util.py": "def test_b():\n    pass\n"},
        ["tests/a/test_util.py", "tests/b/test_util.py"], {}, ()),
}


def _build(root: Path, files: dict[str, str], criteria: list[Any],
           links: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name, to in links.items():
        os.symlink(to, root / name)
    crits = [dict(c, id=f"C{i}") if isinstance(c, dict) else
             {"id": f"C{i}", "text": f"criterion {i}", "pytest": c}
             for i, c in enumerate(criteria)]
    (root / "prd.json").write_text(json.dumps({"userStories": [
        {"id": "US-1", "title": "s", "description": "d", "acceptanceCriteria": crits,
         "priority": 1, "passes": False, "notes": ""}]}))
    (root / "pytest.ini").write_text("[pytest]\naddopts = --ignore=prd.json\n")


def _gate(root: Path, *options: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_RALPH_")}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "prd.json", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "-rA", "-o", "addopts=", *options],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)
    verdicts = dict((m.group(2), m.group(1)) for m in re.finditer(
        r"^(PASSED|FAILED|ERROR|SKIPPED) prd\.json::\S*?(C\d+)", done.stdout, re.M))
    assert verdicts, done.stdout + done.stderr
    return verdicts


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_batched_gate_gives_each_criterion_its_own_verdict(tmp_path: Path,
                                                                case: str) -> None:
    files, criteria, links, options = CASES[case]
    _build(tmp_path / "batched", files, criteria, links)
    _build(tmp_path / "alone", files, criteria, links)
    batched = _gate(tmp_path / "batched", *options)
    alone = _gate(tmp_path / "alone", "-o", "ralph_check_batch=false", *options)
    assert len(alone) == len(criteria), alone
    # Every case but the last fails a criterion alone: a batch must not pass it. The last
    # passes alone: a batch must not fail it.
    assert ("FAILED" in alone.values()) is (case != "two-modules-of-one-name"), alone
    assert batched == alone
    if case.startswith("exit-status-forced"):  # no verdict of that child can be trusted
        assert alone["C1"] == "FAILED", alone


def test_under_pytest_8_every_criterion_keeps_its_own_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest 8 collects overlapping arguments differently (a file and a node id of it gave
    only the node id's test, so a failing test of the file went unseen): batches need
    pytest 9, and under 8 each criterion runs alone (CI runs this under pytest 8 too)."""
    from pytest_ralph.checks import batch

    if batch.batching_supported():
        assert pytest.version_tuple >= batch.FIRST_BATCHING_PYTEST
        monkeypatch.setattr(batch, "batching_supported", lambda: False)
    else:
        assert pytest.version_tuple < batch.FIRST_BATCHING_PYTEST
    files = {"tests/test_b.py": B_OK_BAD}
    _build(tmp_path, files, ["tests/test_b.py", "tests/test_b.py::test_ok"], {})
    from pytest_ralph.checks.pytest_kind import PytestCheck, pin_args

    pin = pin_args(tmp_path, tmp_path / "pytest.ini")
    whole, one = batch.run_batch([PytestCheck((t,), tmp_path, 600.0, pin)
                                  for t in ("tests/test_b.py", "tests/test_b.py::test_ok")])
    assert not whole.passed and whole.message.startswith("1 failed, 1 passed (pytest exit 1)")
    assert one.passed
