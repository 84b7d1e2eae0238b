"""The bytecode folder of the check phases (issue 20): only the loop writes what they load."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ralph.bytecode import TrustedBytecode, cache_path, shared_folder


def _module(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(body)
    return path


def test_cache_path_is_where_python_looks(tmp_path: Path) -> None:
    """The same path importlib computes with PYTHONPYCACHEPREFIX set."""
    source = tmp_path / "lib" / "mod.py"
    source.parent.mkdir()
    source.write_text("x = 1\n")
    prefix = tmp_path / "prefix"
    code = ("import importlib.util, sys; "
            f"print(importlib.util.cache_from_source({str(source)!r}))")
    expected = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)},
                              check=True).stdout.strip()
    assert str(cache_path(prefix, str(source))) == expected


def test_a_run_folder_compiles_outside_sources_and_never_the_projects(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    outside = _module(lib, "outside", "VALUE = 1\n")
    inside = _module(project, "inside", "VALUE = 2\n")
    broken = _module(lib, "broken", "def (\n")
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, project, verify=True)
    assert trusted.prime([str(outside), str(inside), str(broken), "relative.py",
                          str(lib / "missing.py")]) == 1
    assert cache_path(folder, str(outside)).is_file()
    assert not cache_path(folder, str(inside)).exists()
    assert not cache_path(folder, str(broken)).exists()
    # Python loads it: the header is the source's size and modification time.
    done = subprocess.run([sys.executable, "-c", "import outside; print(outside.__cached__)"],
                          cwd=lib, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPYCACHEPREFIX": str(folder)})
    assert done.stdout.strip() == str(cache_path(folder, str(outside)))


def test_ready_removes_what_the_loop_did_not_write_or_what_changed(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    a = _module(lib, "a", "A = 1\n")
    b = _module(lib, "b", "B = 1\n")
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True)
    trusted.prime([str(a), str(b)])
    planted = folder / "planted.cpython-311.pyc"
    planted.write_bytes(b"evil")
    cache_path(folder, str(b)).write_bytes(b"swapped")  # same path, other code
    removed = trusted.ready()
    assert sorted(p.name for p in removed) == sorted([planted.name,
                                                      cache_path(folder, str(b)).name])
    assert cache_path(folder, str(a)).is_file() and not planted.exists()
    assert not cache_path(folder, str(b)).exists()
    # Compiled again by the loop, it is trusted again.
    trusted.prime([str(b)])
    assert trusted.ready() == []


def test_a_shared_folder_keeps_fresh_bytecode_and_replaces_stale(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    a = _module(lib, "a", "A = 1\n")
    folder = tmp_path / "shared"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", shared=folder)
    assert trusted.prime([str(a)]) == 1
    assert TrustedBytecode(folder, tmp_path / "project", shared=folder).prime([str(a)]) == 0
    a.write_text("A = 22\n")  # another size: stale
    assert TrustedBytecode(folder, tmp_path / "project", shared=folder).prime([str(a)]) == 1
    assert trusted.ready() == []  # a shared folder is never swept


def test_for_run_picks_the_shared_folder_only_when_confined(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "cache"
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(shared))
    project = tmp_path / "project"
    project.mkdir()
    confined = TrustedBytecode.for_run(project, confined=True)
    assert confined.folder == shared.resolve() and not confined.verify
    own = TrustedBytecode.for_run(project, confined=False)
    try:
        assert own.verify and own.folder != shared.resolve()
        assert own.folder.name.startswith("pytest-ralph-bytecode-")
    finally:
        own.close()
    assert not own.folder.exists()
    # A shared folder inside the project is the agent's to write: never used.
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(project / ".cache"))
    inside = TrustedBytecode.for_run(project, confined=True)
    try:
        assert inside.verify
    finally:
        inside.close()


def test_shared_folder_defaults_and_refusals(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_RALPH_PYCACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shared_folder() == (tmp_path / "xdg" / "pytest-ralph" / "bytecode").resolve()
    assert oct(shared_folder().stat().st_mode & 0o777) == "0o700"  # type: ignore[union-attr]
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", "")
    assert shared_folder() is None
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", "relative/dir")
    assert shared_folder() is None


def test_priming_in_the_background_is_waited_for(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    sources = [str(_module(lib, f"m{i}", f"X = {i}\n")) for i in range(30)]
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True)
    trusted.prime_in_background(sources)
    assert trusted.ready() == []
    assert all(cache_path(folder, s).is_file() for s in sources)
    assert cache_path(folder, sources[0]).read_bytes()[:4] == importlib.util.MAGIC_NUMBER
