"""Other forms of the same cheats the guard already refuses (red-team round 3 of issue 24), each
with real files in a real folder: an upper-case ``*.DIST-INFO`` (``importlib.metadata`` matches
the suffix whatever its case), a namespace package for a name whose import failed at the
baseline, a package or an extension module beside a guarded helper (import takes either
before the ``.py``), modules named as strings (``pytest_plugins``, ``import_module("x")``),
and a folder a ``run`` command puts on ``PYTHONPATH``."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

from pytest_ralph.oracle.judges import SHADOWS, TEST_MODULES, take, watch
from pytest_ralph.oracle.snapshot import imports_watch, snapshot
from pytest_ralph.oracle.sources import command_path_folders
from pytest_ralph.oracle.staticimports import imported_names
from pytest_ralph.prd.load import load_prd

ROOT = f"folder ./{SHADOWS}"


def names(listing: tuple[str, ...]) -> list[str]:
    return [item.split("\t")[0] for item in listing]


def test_an_upper_case_dist_info_folder_is_listed(tmp_path: Path) -> None:
    before = take(ROOT, ["yaml"], tmp_path)
    dist = tmp_path / "plug-1.0.DIST-INFO"
    dist.mkdir()
    (dist / "entry_points.txt").write_text("[pytest11]\nplug = plug\n")
    digest, listing = take(ROOT, ["yaml"], tmp_path)
    assert names(listing) == ["plug-1.0.DIST-INFO/entry_points.txt"]
    assert digest != before[0]


def test_a_namespace_folder_for_a_name_that_failed_to_import_is_a_change(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()  # a folder named like nothing the checks looked for
    report = [{"path": [str(tmp_path)], "modules": {}, "sources": [], "missing": ["org"]}]
    found = watch(report, tmp_path)
    before = take(ROOT, found[ROOT], tmp_path)
    (tmp_path / "org" / "python").mkdir(parents=True)
    (tmp_path / "org" / "python" / "core.py").write_text("import os\nos._exit(0)\n")
    digest, listing = take(ROOT, found[ROOT], tmp_path)
    assert digest != before[0] and names(listing) == ["org/"]
    # an installed name's folder (no __init__) is not taken by import: not listed
    (tmp_path / "yaml").mkdir()
    assert names(take(ROOT, ["yaml"], tmp_path)[1]) == []


def test_a_package_or_extension_beside_a_guarded_helper_is_a_change(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helpers.py").write_text("def check(f):\n    return f(2, 2) == 4\n")
    before = take(TEST_MODULES, ["tests/helpers.py"], tmp_path)
    (tmp_path / "tests" / "helpers").mkdir()
    (tmp_path / "tests" / "helpers" / "__init__.py").write_text("def check(f):\n    return True\n")
    digest, listing = take(TEST_MODULES, ["tests/helpers.py"], tmp_path)
    assert digest != before[0]
    assert names(listing) == ["tests/helpers.py", "tests/helpers/__init__.py"]
    (tmp_path / "tests" / "helpers" / "__init__.py").unlink()
    ext = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "tests" / f"helpers{ext}").write_bytes(b"\x7fELF")
    assert sorted(names(take(TEST_MODULES, ["tests/helpers.py"], tmp_path)[1])) == sorted([
        "tests/helpers.py", f"tests/helpers{ext}"])


def test_modules_named_as_strings_are_imports() -> None:
    source = b'''
import importlib
pytest_plugins = ["fixmod", "pkg.fixtures"]
extra = importlib.import_module("helper")
other = __import__("tools")
dynamic = importlib.import_module("hel" + "per2")
'''
    found = {module for _, module, _ in imported_names(source)}
    assert {"fixmod", "pkg.fixtures", "helper", "tools", "importlib"} <= found
    assert "helper2" not in found  # not a literal: out of a static reading's reach
    assert {m for _, m, _ in imported_names(b'pytest_plugins = "one"\n')} == {"one"}


def test_a_folder_a_run_command_puts_on_pythonpath_is_guarded(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    assert command_path_folders("PYTHONPATH=src:lib python -m pytest tests", tmp_path) == [
        (tmp_path / "src").resolve(), (tmp_path / "lib").resolve()]
    assert command_path_folders("env PYTHONPATH=/elsewhere pytest", tmp_path) == []
    assert command_path_folders("pytest 'unclosed", tmp_path) == []
    (tmp_path / "prd.json").write_text(
        '{"userStories": [{"id": "US-1", "title": "t", "acceptanceCriteria": ['
        '{"run": "PYTHONPATH=src python -m pytest -q tests"}]}]}')
    prd = load_prd(tmp_path / "prd.json")
    snap = snapshot(prd, tmp_path)
    found = imports_watch(snap, [{"path": [], "modules": {}, "sources": []}], tmp_path,
                          prd=prd)
    subject = f"folder src/{SHADOWS}"
    assert subject in found
    before = take(subject, found[subject], tmp_path)
    (tmp_path / "src" / "plug-1.0.dist-info").mkdir()
    assert take(subject, found[subject], tmp_path)[0] != before[0]
