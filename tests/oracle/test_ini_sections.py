"""The pytest section of an INI file, read as pytest reads it (iniconfig), by the oracle guard
(pytest_ralph.oracle.walk.config_digest). Red-team finding: configparser read ``[pytest] #]``
as a section ``pytest] #]``, so a tox.ini the agent added was not guarded; pytest took it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ralph.oracle.snapshot import compare, snapshot
from pytest_ralph.oracle.walk import ABSENT, config_digest
from pytest_ralph.prd.load import load_prd
from tests.support.prd import story

COLLECT_ONLY = "addopts = --collect-only\n"


def changes(root: Path, criterion: dict[str, str], name: str, text: str) -> list[str]:
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_a.py").write_text("def test_a():\n    assert False\n")
    path = root / "prd.json"
    path.write_text(json.dumps({"project": "Ini", "userStories": [story("US-1", criterion)]}))
    start = snapshot(load_prd(path), root)
    (root / name).write_text(text)
    return [c.describe() for c in compare(start, snapshot(load_prd(path), root, start=start))]


def test_pytest_takes_a_header_with_a_trailing_comment(tmp_path: Path) -> None:
    # The premise: pytest's own parser strips the comment, and runs with these addopts.
    (tmp_path / "tox.ini").write_text("[pytest] #]\n" + COLLECT_ONLY)
    (tmp_path / "test_a.py").write_text("def test_a():\n    assert False\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--rootdir", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout
    assert "configfile: tox.ini" in done.stdout and "failed" not in done.stdout


@pytest.mark.parametrize(("name", "header"), [("tox.ini", "[pytest] #]"),
                                              ("setup.cfg", "[tool:pytest] ;]"),
                                              ("pytest.ini", "[pytest]  # the options")])
def test_a_header_comment_is_no_part_of_the_section_name(
        tmp_path: Path, name: str, header: str) -> None:
    plain = tmp_path / "plain" / name
    plain.parent.mkdir()
    plain.write_text(header.split()[0] + "\n" + COLLECT_ONLY)
    (tmp_path / name).write_text(header + "\n" + COLLECT_ONLY)
    got = config_digest(tmp_path / name, tmp_path)
    assert got != ABSENT and got == config_digest(plain, tmp_path)


def test_an_ini_file_iniconfig_rejects_is_guarded_never_absent(tmp_path: Path) -> None:
    for text in ("[pytest]\naddopts\n", "[pytest]\n  -x\n", "[pytest]\n[pytest]\n",
                 "addopts = -x\n[pytest]\n"):
        (tmp_path / "tox.ini").write_text(text)
        assert config_digest(tmp_path / "tox.ini", tmp_path).startswith("unparsable: "), text
    (tmp_path / "tox.ini").write_bytes(b"[pytest]\naddopts = \xff\n")  # not UTF-8
    assert config_digest(tmp_path / "tox.ini", tmp_path).startswith("unparsable: ")
    # Without a pytest section (for pytest), still absent: it may appear freely.
    (tmp_path / "tox.ini").write_text("[tox] # envs\nenvlist = py311\n[pytest-x]\na = 1\n")
    assert config_digest(tmp_path / "tox.ini", tmp_path) == ABSENT


@pytest.mark.parametrize(("criterion", "name", "text"), [
    ({"run": "python -m pytest -q tests"}, "tox.ini", "[pytest] #]\n" + COLLECT_ONLY),
    ({"run": "python -m pytest -q tests"}, "setup.cfg", "[tool:pytest] ;]\n" + COLLECT_ONLY),
    ({"pytest": "tests/test_a.py"}, "tests/tox.ini", "[pytest] #]\n" + COLLECT_ONLY),
    ({"pytest": "tests/test_a.py"}, "tox.ini", "[pytest]\naddopts\n"),
])
def test_an_added_ini_file_pytest_takes_is_a_change(
        tmp_path: Path, criterion: dict[str, str], name: str, text: str) -> None:
    assert changes(tmp_path, criterion, name, text) == [f"pytest configuration {name} added"]


def test_other_sections_of_an_ini_file_still_change_freely(tmp_path: Path) -> None:
    (tmp_path / "tox.ini").write_text("[tox]\nenvlist = py311\n[pytest] # options\naddopts = -q\n")
    assert changes(tmp_path, {"pytest": "tests/test_a.py"}, "tox.ini",
                   "[tox]\nenvlist = py312\n[pytest] # options\naddopts = -q\n") == []
