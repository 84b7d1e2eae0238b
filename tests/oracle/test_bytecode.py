"""The bytecode folder of the check phases (issue 20): only the loop writes what they load."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pytest_ralph.oracle.bytecode import TrustedBytecode, cache_path, shared_folder


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


@pytest.mark.parametrize("source", ["/a/b/mod.py", "/:a/mod.py", "pkg/mod.py", "mod.py",
                                    "pkg/script", "pkg/.hidden.py", "pkg/two.dots.py"])
def test_cache_path_is_where_python_looks_for_any_source(
        source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path (taken from the current folder, as importlib does), a folder whose
    name starts with ":" (no drive letter on POSIX), names without or with more dots."""
    prefix = tmp_path / "prefix"
    monkeypatch.chdir(tmp_path)
    code = f"import importlib.util; print(importlib.util.cache_from_source({source!r}))"
    expected = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)},
                              cwd=tmp_path, check=True).stdout.strip()
    assert str(cache_path(prefix, source)) == expected


def test_cache_path_of_a_module_at_the_file_system_root_is_in_the_prefix(
        tmp_path: Path) -> None:
    # (importlib itself splits "/mod.py" into "" and "mod.py", and so puts it under the
    # current folder's path in the prefix; either way it stays inside the prefix.)
    got = cache_path(tmp_path, "/mod.py")
    assert got.parent == tmp_path
    assert got.name == f"mod.{sys.implementation.cache_tag}.pyc"


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
    trusted = TrustedBytecode(folder, project, verify=True, roots=[str(tmp_path)])
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
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True, roots=[str(tmp_path)])
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
    trusted = TrustedBytecode(folder, tmp_path / "project", shared=folder, roots=[str(tmp_path)])
    assert trusted.prime([str(a)]) == 1
    def again() -> TrustedBytecode:
        return TrustedBytecode(folder, tmp_path / "project", shared=folder, roots=[str(tmp_path)])

    assert again().prime([str(a)]) == 0
    a.write_text("A = 22\n")  # another size: stale
    assert again().prime([str(a)]) == 1
    assert trusted.ready() == []  # a shared folder is never swept


def test_for_run_picks_the_shared_folder_only_when_confined(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "cache"
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(shared))
    project = tmp_path / "project"
    project.mkdir()
    confined = TrustedBytecode.for_run(project, confined=True)
    assert confined.folder == shared.resolve() and not confined.verify
    assert confined.shared == shared.resolve()
    own = TrustedBytecode.for_run(project, confined=False)
    try:
        assert own.verify and own.folder != shared.resolve() and own.shared is None
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


def test_for_run_never_shares_the_project_reached_through_a_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    link = tmp_path / "link"
    link.symlink_to(project, target_is_directory=True)
    # The shared folder is the project itself, named by its real path; the loop names the
    # project by the link.
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(project))
    trusted = TrustedBytecode.for_run(link, confined=True)
    try:
        assert trusted.verify and trusted.shared is None
        assert trusted.folder != project.resolve()
    finally:
        trusted.close()


def test_only_absolute_py_sources_are_compiled(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    script = lib / "tool"  # Python, but not a module's source
    script.write_text("VALUE = 1\n")
    _module(lib, "rel", "VALUE = 2\n")
    monkeypatch.chdir(lib)
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True, roots=[str(tmp_path)])
    assert trusted.prime([str(script), "rel.py"]) == 0
    assert list(folder.rglob("*")) == []


def test_sources_loaded_here_are_the_py_files_of_imported_modules(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ext = types.ModuleType("fake_ext")
    ext.__file__ = "/opt/lib/fake_ext.cpython-311-x86_64-linux-gnu.so"
    monkeypatch.setitem(sys.modules, "fake_ext", ext)
    monkeypatch.setitem(sys.modules, "fake_builtin", types.ModuleType("fake_builtin"))
    got = TrustedBytecode(Path("/nowhere"), Path("/project")).sources_loaded_here()
    assert os.__file__ in got and json.__file__ in got
    assert all(isinstance(p, str) and p.endswith(".py") for p in got), got
    assert ext.__file__ not in got


def test_sources_loaded_here_copes_with_a_module_that_imports_when_asked_its_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A lazily loaded module runs when an attribute (its __file__) is first read, and may
    # import more modules then: sys.modules grows while it is being read.
    _module(tmp_path, "lazy_first", "import lazy_second\n")
    _module(tmp_path, "lazy_second", "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.find_spec("lazy_first")
    assert spec is not None and spec.loader is not None
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lazy_first", module)
    spec.loader.exec_module(module)
    try:
        got = TrustedBytecode(Path("/nowhere"), Path("/project")).sources_loaded_here()
        assert str(tmp_path / "lazy_first.py") in got
    finally:
        sys.modules.pop("lazy_second", None)


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


def test_shared_folder_without_xdg_cache_home_is_in_the_home_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_RALPH_PYCACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert shared_folder() == (tmp_path / "home" / ".cache" / "pytest-ralph" / "bytecode"
                               ).resolve()


def test_a_shared_folder_of_another_user_or_not_writable_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    if os.getuid() == 0:  # root may write anywhere: the folder belongs to someone else
        os.chown(folder, 65534, 65534)
    else:  # the folder is ours, but we may not write it
        folder.chmod(0o500)
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", str(folder))
    try:
        assert shared_folder() is None
    finally:
        folder.chmod(0o700)


def test_priming_in_the_background_is_waited_for(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    sources = [str(_module(lib, f"m{i}", f"X = {i}\n")) for i in range(30)]
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True, roots=[str(tmp_path)])
    trusted.prime_in_background(sources)
    assert trusted.ready() == []
    assert all(cache_path(folder, s).is_file() for s in sources)
    assert cache_path(folder, sources[0]).read_bytes()[:4] == importlib.util.MAGIC_NUMBER


def test_a_second_priming_waits_for_the_first(tmp_path: Path) -> None:
    # The loop primes again after each check phase: every source of every priming is
    # compiled and trusted by the time the next phase is made ready.
    lib = tmp_path / "lib"
    lib.mkdir()
    many = [str(_module(lib, f"m{i}", f"X = {i}\n" * 50)) for i in range(300)]
    one = [str(_module(lib, "last", "Y = 1\n"))]
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True, roots=[str(tmp_path)])
    trusted.prime_in_background(many)
    trusted.prime_in_background(one)
    trusted.ready()
    assert all(cache_path(folder, s).is_file() for s in many + one)
    assert trusted.ready() == []


def test_closing_a_run_folder_that_is_already_gone_is_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Something else (a /tmp cleaner, the user) removed the run's own folder meanwhile.
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", "")
    project = tmp_path / "project"
    project.mkdir()
    trusted = TrustedBytecode.for_run(project, confined=False)
    assert trusted.verify
    shutil.rmtree(trusted.folder)
    trusted.close()
    assert not trusted.folder.exists()


def test_a_source_is_compiled_only_at_its_real_path_in_a_trusted_folder(tmp_path: Path) -> None:
    """Issue 20 (red team): the imports report a check phase writes named
    ``<agent's folder>/link/../../<site-packages>/_pytest/reports.py``; the bytecode's place
    was computed from that path, the code read through the link: the agent's file became the
    shared bytecode of pytest's own module. A path through a link or a ``..``, or outside the
    standard library and site-packages, is never compiled."""
    lib = tmp_path / "lib"
    lib.mkdir()
    real = _module(lib, "reports", "GENUINE = True\n")
    agent = tmp_path / "agent"
    agent.mkdir()
    _module(agent, "reports", "GENUINE = False\n")
    (agent / "link").symlink_to(agent, target_is_directory=True)
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", shared=folder, roots=[str(lib)])
    dotted = f"{agent}/link/../{os.path.relpath(real, agent)}"
    linked = tmp_path / "lib-link"
    linked.symlink_to(lib, target_is_directory=True)
    assert trusted.prime([dotted, str(linked / "reports.py"), str(agent / "reports.py")]) == 0
    assert list(folder.rglob("*.pyc")) == []
    assert trusted.prime([str(real)]) == 1


def test_the_default_trusted_folders_are_the_interpreters_own() -> None:
    import sysconfig

    from pytest_ralph.oracle.bytecode import trusted_roots

    roots = trusted_roots()
    assert os.path.realpath(sysconfig.get_paths()["stdlib"]) in roots
    assert os.path.realpath(sysconfig.get_paths()["purelib"]) in roots
    assert all(root == os.path.realpath(root) for root in roots)
    # pytest's own reports module is compiled; a file of the same name elsewhere is not.
    folder_source = importlib.util.find_spec("_pytest.reports")
    assert folder_source is not None and folder_source.origin
    assert any(folder_source.origin.startswith(root) for root in roots)


# --- seeding a private folder from what this process loaded (the gate) ----------------------

def _compiled(path: Path, body: str | None) -> types.ModuleType:
    """A module object for ``path`` (written with ``body`` unless ``None``) with its timestamp
    ``.pyc`` at the standard place, as an import in this process leaves it."""
    import py_compile

    if body is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    cached = importlib.util.cache_from_source(str(path))
    py_compile.compile(str(path), cfile=cached, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    module.__cached__ = cached
    return module


def _loaded(prefix: Path, folder: Path, name: str) -> str:
    """What a child with ``PYTHONPYCACHEPREFIX=prefix`` gets from ``import name`` (its VALUE
    and where its bytecode came from), without writing bytecode."""
    code = f"import {name}; print({name}.VALUE, {name}.__spec__.cached)"
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=folder, env=env, check=True).stdout.strip()


def test_seeding_copies_the_bytecode_of_outside_modules_which_the_child_then_loads(
        tmp_path: Path) -> None:
    from pytest_ralph.oracle.bytecode import seed_from_loaded

    lib = tmp_path / "lib"
    module = _compiled(lib / "outside.py", "VALUE = 1\n")
    # Bytecode that differs from the source but has its header: only what was copied gives it.
    cached = Path(module.__cached__)
    data = cached.read_bytes()
    cached.write_bytes(data[:16] + marshal.dumps(compile("VALUE = 7\n", "x", "exec")))
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    target = cache_path(prefix, str(lib / "outside.py"))
    assert seed_from_loaded(prefix, project, [module], installed=(),
                            trusted=(str(tmp_path),)) == [target]
    # By default only installed code (and pytest-ralph's) is seeded: a module loaded
    # from anywhere else (a conftest.py, the ini pythonpath) is never copied.
    assert seed_from_loaded(prefix, project, [module]) == []
    assert _loaded(prefix, lib, "outside") == f"7 {target}"


def test_seeding_skips_project_files_stale_or_hashed_bytecode_and_links_into_the_project(
        tmp_path: Path) -> None:
    from pytest_ralph.oracle.bytecode import seed_from_loaded

    project = tmp_path / "project"
    inside = _compiled(project / "pkg" / "inside.py", "VALUE = 1\n")
    stale = _compiled(tmp_path / "lib" / "stale.py", "VALUE = 1\n")
    Path(stale.__file__ or "").write_text("VALUE = 22\n")  # size (and time) no longer match
    hashed = _compiled(tmp_path / "lib" / "hashed.py", "VALUE = 1\n")
    pyc = Path(hashed.__cached__)
    pyc.write_bytes(pyc.read_bytes()[:4] + b"\3\0\0\0" + pyc.read_bytes()[8:])
    # A symbolic link from outside to a project file, and a folder link into the project.
    (tmp_path / "lib" / "linked.py").symlink_to(project / "pkg" / "inside.py")
    linked = _compiled(tmp_path / "lib" / "linked.py", None)
    (tmp_path / "door").symlink_to(project / "pkg")
    through = _compiled(tmp_path / "door" / "inside.py", None)
    missing = types.ModuleType("missing")
    missing.__file__ = str(tmp_path / "lib" / "missing.py")
    missing.__cached__ = importlib.util.cache_from_source(missing.__file__)
    elsewhere = _compiled(tmp_path / "lib" / "elsewhere.py", "VALUE = 1\n")
    elsewhere.__cached__ = str(tmp_path / "lib" / "other.pyc")  # not where Python looks
    # The project's own modules, and links into it, are seeded for any other project: they
    # are skipped below because they are the project's.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert len(seed_from_loaded(scratch, tmp_path / "unrelated", [inside, linked, through],
                                installed=(), trusted=(str(tmp_path),))) == 3
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    assert seed_from_loaded(prefix, project, [inside, stale, hashed, linked, through, missing,
                                              elsewhere, types.ModuleType("builtin")],
                            installed=(), trusted=(str(tmp_path),)) == []
    assert not any(prefix.rglob("*"))
    # The project named through a link to it is the same project.
    (tmp_path / "alias").symlink_to(project)
    assert seed_from_loaded(prefix, tmp_path / "alias", [inside], installed=(),
                            trusted=(str(tmp_path),)) == []


def test_seeding_takes_a_rewriters_cache_for_the_modules_it_loaded(tmp_path: Path) -> None:
    from pytest_ralph.oracle.bytecode import seed_from_loaded

    class Rewriter:
        pass

    tail = "-rewritten.pyc"
    lib = tmp_path / "lib"
    good = _compiled(lib / "good.py", "VALUE = 1\n")
    bad = _compiled(lib / "bad.py", "VALUE = 1\n")
    for module, source_of_hash in ((good, "VALUE = 1\n"), (bad, "VALUE = 2\n")):
        module.__loader__ = Rewriter()  # type: ignore[assignment]
        path = Path(module.__file__ or "")
        (path.parent / "__pycache__" / (path.stem + tail)).write_bytes(
            importlib.util.MAGIC_NUMBER + b"\3\0\0\0"
            + importlib.util.source_hash(source_of_hash.encode())[:8] + b"code")
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    got = seed_from_loaded(prefix, tmp_path / "project", [good, bad], rewriter=Rewriter,
                           rewrite_tail=tail, installed=(), trusted=(str(tmp_path),))
    assert got == [prefix.joinpath(*lib.parts[1:]) / f"good{tail}"]
    # Without the rewriter, the same modules' ordinary bytecode is what is copied.
    assert seed_from_loaded(prefix, tmp_path / "project", [good], installed=(),
                            trusted=(str(tmp_path),)) == [cache_path(prefix, good.__file__ or "")]


def test_the_loops_folder_gets_the_rewrite_cache_of_the_plugins_the_loop_loaded(
        tmp_path: Path) -> None:
    """This process runs under pytest, which loaded its plugins' modules (pytest-ralph's,
    xdist's) rewritten: a run's own folder gets their rewrite cache, recorded as the loop's
    (kept by ready()), where a child's pytest looks for it; never for a project holding them,
    nor a stale cache."""
    from _pytest.assertion.rewrite import PYC_TAIL, AssertionRewritingHook, _read_pyc

    def cache(source: Path) -> Path:
        return source.parent / "__pycache__" / (source.stem + PYC_TAIL)

    rewritten = [Path(m.__file__) for m in list(sys.modules.values())
                 if isinstance(getattr(m, "__loader__", None), AssertionRewritingHook)
                 and isinstance(getattr(m, "__file__", None), str)
                 and "site-packages" in (m.__file__ or "")]
    valid = [p for p in rewritten if _read_pyc(p, cache(p)) is not None]
    assert valid, rewritten
    folder = tmp_path / "bc"
    folder.mkdir()
    trusted = TrustedBytecode(folder, tmp_path / "project", verify=True)
    assert trusted.seed_rewritten() >= len(valid)
    for source in valid:
        target = folder.joinpath(*source.parts[1:-1]) / (source.stem + PYC_TAIL)
        assert target in trusted.written
        assert _read_pyc(source, target) is not None  # what pytest itself accepts
    assert trusted.ready() == []
    assert all(path.is_file() for path in trusted.written)
    stale = [p for p in rewritten if p not in valid]
    assert not any(folder.joinpath(*p.parts[1:-1]) / (p.stem + PYC_TAIL) in trusted.written
                   for p in stale)
    (tmp_path / "bc2").mkdir()
    site = next(p for p in valid[0].parents if p.name == "site-packages")
    again = TrustedBytecode(tmp_path / "bc2", site, verify=True)
    again.seed_rewritten()
    assert not any(str(site).lstrip("/") in str(path) for path in again.written)
