"""Bytecode the check phases load: compiled by the loop itself, never by a process that runs
the agent's code.

Every Python process of a check phase keeps its bytecode under ``PYTHONPYCACHEPREFIX`` (see
:func:`pytest_ralph.checks.phase.private_bytecode`), so that a ``.pyc`` planted in a
``__pycache__`` folder is never loaded. Compiling pytest, its plugins and the standard-library
modules they import costs about a second, which each phase would pay again with an empty
folder; so the loop keeps the folder warm. What the phases load from it must not be writable by
whatever runs the agent's code (the agent, and the code under test inside a check phase): a
``.pyc`` that keeps the source's size and modification time but holds other code would be
loaded as that module.

:class:`TrustedBytecode` is that folder:

- only the loop (the controller, which never imports project code) writes it, compiling the
  source files of installed and standard-library modules, at their real paths (never a file
  inside the project, nor one a symbolic link or a ``..`` leads to, nor one outside the
  standard library and site-packages that the loop did not import itself):
  those the loop itself has imported (pytest and the plugins a check phase loads too) and
  those a check phase reports it imported (:meth:`TrustedBytecode.prime`), in a background
  thread, while the agent works;
- with the sandbox on, the folder is shared by the runs of every project
  (:func:`shared_folder`: ``$PYTEST_RALPH_PYCACHE`` or ``~/.cache/pytest-ralph/bytecode``) and
  read-only to every confined process;
- with the sandbox off, the agent and the check phases can write anywhere you can, the shared
  folder included, so each run gets a folder of its own that only the loop compiles into
  (never copied from the shared one, which an unconfined agent of an earlier run may have
  written), and before each check phase :meth:`TrustedBytecode.ready` removes every file in it
  that the loop did not write, or that changed since it did.

Outside the loop (the gate, ``pytest prd.json``), the processes checks start get a private
folder of their own, which :func:`seed_from_loaded` fills with copies of the bytecode the gate
itself loaded from outside the project.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import py_compile
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from ..util.env import PYCACHE_ENV

#: The shared folder's name under ``$XDG_CACHE_HOME/pytest-ralph`` (``~/.cache``). Not
#: ``pycache``, which earlier versions let check phases write.
SHARED_NAME = "bytecode"

#: Prefix of the name of a run's own folder (in the system's temporary folder).
RUN_DIR_PREFIX = "pytest-ralph-bytecode-"

#: Bytes of a ``.pyc`` header: magic, flags, source modification time, source size.
_HEADER_BYTES = 16


def shared_folder() -> Path | None:
    """The folder the check phases of confined runs share: ``$PYTEST_RALPH_PYCACHE``, else
    ``$XDG_CACHE_HOME/pytest-ralph/bytecode`` (``~/.cache`` without ``XDG_CACHE_HOME``), made
    with mode 0700 on first use.

    Returns:
        The folder (absolute, symbolic links resolved), or ``None`` when
        ``$PYTEST_RALPH_PYCACHE`` is empty, the path is relative, or the folder cannot be
        made or written or is not ours.
    """
    chosen = os.environ.get(PYCACHE_ENV)
    if chosen == "":
        return None
    if chosen is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        chosen = os.path.join(base, "pytest-ralph", SHARED_NAME)
    folder = Path(chosen).expanduser()
    if not folder.is_absolute():
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = folder.resolve()
        info = folder.stat()
        if (hasattr(os, "getuid") and info.st_uid != os.getuid()) or not os.access(
                folder, os.W_OK | os.X_OK):
            return None
    except OSError:
        return None
    return folder


def cache_path(prefix: Path, source: str) -> Path:
    """Where a process with ``PYTHONPYCACHEPREFIX=prefix`` reads and writes the bytecode of
    ``source`` (as ``importlib.util.cache_from_source`` computes it with
    ``sys.pycache_prefix`` set, without optimization): ``<prefix>/<source's folder>/<name>.
    <cache tag>.pyc``."""
    head, tail = os.path.split(source)
    if not os.path.isabs(head):
        head = os.path.join(os.getcwd(), head)
    if len(head) > 1 and head[1] == ":" and head[0] not in "\\/":  # pragma: no cover - Windows
        head = head[2:]
    base, sep, rest = tail.rpartition(".")
    name = f"{base if base else rest}{sep}{sys.implementation.cache_tag}.pyc"
    return prefix / head.lstrip("\\/") / name


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class TrustedBytecode:
    """A bytecode folder for check phases that only the loop writes (see the module docstring).

    Args:
        folder: the folder the check phases get as ``PYTHONPYCACHEPREFIX``.
        project: the project folder: no source inside it is ever compiled here.
        shared: the shared folder (then :attr:`folder` itself), or ``None``.
        verify: check the folder before each phase (a run's own folder, sandbox off).
        roots: the folders whose sources may be compiled (real paths); default
            :func:`trusted_roots`.
    """

    def __init__(self, folder: Path, project: Path, *, shared: Path | None = None,
                 verify: bool = False, roots: Iterable[str] | None = None) -> None:
        self.folder = folder
        self.shared = shared
        self.verify = verify
        self._project = os.path.realpath(project)
        #: pyc path in :attr:`folder` -> SHA-256 of what the loop put there.
        self.written: dict[Path, str] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._roots = tuple(root.rstrip(os.sep) + os.sep
                            for root in (trusted_roots() if roots is None else roots))
        self._own = set(self.sources_loaded_here())

    @classmethod
    def for_run(cls, project: Path, *, confined: bool) -> TrustedBytecode:
        """The bytecode folder of a run: the shared one when every process that runs the
        agent's code is confined (it is read-only to them), else a temporary folder of the
        run's own, removed by :meth:`close` (also when the shared folder is unusable or lies
        inside the project, where the agent could write it)."""
        shared = shared_folder()
        if shared is not None and (shared == Path(os.path.realpath(project)) or
                                   Path(os.path.realpath(project)) in shared.parents):
            shared = None
        if confined and shared is not None:
            return cls(shared, project, shared=shared)
        own = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
        return cls(own, project, verify=True)

    def _inside_project(self, source: str) -> bool:
        real = os.path.realpath(source)
        return real == self._project or real.startswith(self._project.rstrip(os.sep) + os.sep)

    def _trusted(self, source: str) -> bool:
        """Whether ``source`` may be compiled here: a path that is its own real path (no
        symbolic link, no ``..``: the bytecode's place is computed from the path as written,
        so a path that resolves elsewhere would put another file's code there), outside the
        project, and either in this interpreter's standard library or site-packages
        (:func:`trusted_roots`) or a module this process imported itself. The sources come
        from a check phase's imports report, which the code under test can write."""
        if os.path.realpath(source) != source or self._inside_project(source):
            return False
        if source in self._own:
            return True
        return any(source.startswith(root) for root in self._roots)

    def sources_loaded_here(self) -> list[str]:
        """The source files of the modules this process has imported, outside the project."""
        out = []
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and path.endswith(".py"):
                out.append(path)
        return out

    def prime(self, sources: Iterable[str]) -> int:
        """Compile ``sources`` (absolute ``.py`` paths; only those :meth:`_trusted` takes,
        the others are skipped) whose bytecode is missing or stale (a run's own folder: not
        written by this object yet) into :attr:`folder`; return how many were compiled.
        Nothing is imported or run."""
        done = 0
        for source in sources:
            if source in self._seen or not source.endswith(".py") or not os.path.isabs(source):
                continue
            self._seen.add(source)
            if not self._trusted(source):
                continue
            try:
                info = os.stat(source)
            except OSError:
                continue
            header = (int(info.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (
                info.st_size & 0xFFFFFFFF).to_bytes(4, "little")
            target = cache_path(self.folder, source)
            with self._lock:
                if self.verify and target in self.written:
                    continue
            # A run's own folder never trusts a file it did not write itself.
            if self.verify or not _fresh(target, header):
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    py_compile.compile(source, cfile=str(target), doraise=True, optimize=0,
                                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
                except (py_compile.PyCompileError, OSError, ValueError, SyntaxError):
                    continue
                done += 1
            if self.verify:
                digest = _digest(target)
                if digest is not None:
                    with self._lock:
                        self.written[target] = digest
        return done

    def seed_rewritten(self) -> int:
        """Put into :attr:`folder` pytest's assertion-rewrite cache of the modules this
        process (the controller, which never imports project code) loaded through that
        rewriter from outside the project, pytest-ralph's own among them: each check phase's
        pytest and its batched child load them rewritten, and without the cache rewrite them
        all again (about 0.8 s each here), the folder being read-only to them. Copied by
        :func:`seed_from_loaded`, so only files this process itself loaded, with a header
        that matches the source's hash, never a project file; a run's own folder records them
        as written by the loop. Returns how many files were written."""
        rewriter, tail = loaded_rewriter()
        if rewriter is None or not tail:
            return 0
        mine = [m for m in list(sys.modules.values())
                if isinstance(getattr(m, "__loader__", None), rewriter)
                and self._own_source(getattr(m, "__file__", None))]
        done = seed_from_loaded(self.folder, Path(self._project), mine, rewriter=rewriter,
                                rewrite_tail=tail)
        if self.verify:
            for target in done:
                digest = _digest(target)
                if digest is not None:
                    with self._lock:
                        self.written[target] = digest
        return len(done)

    def _own_source(self, source: object) -> bool:
        return (isinstance(source, str) and source in self._own
                and os.path.realpath(source) == source and not self._inside_project(source))

    def prime_in_background(self, sources: Iterable[str]) -> None:
        """:meth:`prime` in a daemon thread (one at a time; :meth:`ready` waits for it)."""
        todo = list(sources)
        self.wait()
        self._thread = threading.Thread(target=self.prime, args=(todo,), daemon=True,
                                        name="pytest-ralph-bytecode")
        self._thread.start()

    def wait(self) -> None:
        """Wait for a :meth:`prime_in_background` still running."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def ready(self) -> list[Path]:
        """Make the folder fit for the next check phase: wait for the background compiling,
        then (a run's own folder) remove every file the loop did not write or that changed
        since; return the files removed."""
        self.wait()
        if not self.verify:
            return []
        removed: list[Path] = []
        for dirpath, _dirnames, filenames in os.walk(self.folder):
            for name in filenames:
                path = Path(dirpath) / name
                want = self.written.get(path)
                if want is None or _digest(path) != want:
                    with contextlib.suppress(OSError):
                        path.unlink()
                        removed.append(path)
                    self.written.pop(path, None)
        return removed

    def close(self) -> None:
        """Wait for the compiling; remove a run's own folder."""
        self.wait()
        if self.verify:
            shutil.rmtree(self.folder, ignore_errors=True)


def trusted_roots() -> list[str]:
    """The real paths of this interpreter's standard library and site-packages folders
    (``sysconfig``'s ``stdlib``, ``platstdlib``, ``purelib`` and ``platlib``, and
    :func:`site.getsitepackages`): the folders whose modules :class:`TrustedBytecode` compiles
    for a check phase. A confined agent cannot write them (the sandbox binds ``/`` read-only);
    an unconfined one can, see ``docs/limitations.md``."""
    import site
    import sysconfig

    found = [sysconfig.get_paths().get(key, "") for key in
             ("stdlib", "platstdlib", "purelib", "platlib")]
    with contextlib.suppress(AttributeError):  # a virtualenv's old site.py
        found += site.getsitepackages()
    roots: list[str] = []
    for path in found:
        if path and os.path.isabs(path):
            real = os.path.realpath(path)
            if real not in roots:
                roots.append(real)
    return roots


def _fresh(pyc: Path, header: bytes) -> bool:
    """Whether ``pyc`` is bytecode of this interpreter for a source of the size and
    modification time in ``header`` (its bytes 8 to 16)."""
    try:
        with pyc.open("rb") as f:
            data = f.read(_HEADER_BYTES)
    except OSError:
        return False
    return (len(data) == _HEADER_BYTES and data[:4] == importlib.util.MAGIC_NUMBER
            and data[4:8] == b"\0\0\0\0" and data[8:] == header)


def installed_folders() -> tuple[str, ...]:
    """The folders of the standard library and of installed distributions
    (``sysconfig``'s ``stdlib``, ``platstdlib``, ``purelib``, ``platlib``), as written and
    resolved: the only places :func:`seed_from_loaded` copies bytecode from, with
    pytest-ralph's own package."""
    import sysconfig

    paths = sysconfig.get_paths()
    found = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")
             if key in paths]
    return tuple(dict.fromkeys(p for f in found for p in (os.path.normpath(f),
                                                          os.path.realpath(f))))


def _own_package_folders() -> tuple[str, ...]:
    """pytest-ralph's own package folder (an editable install lives outside site-packages),
    as written and resolved; under a project it is excluded with the project."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return tuple(dict.fromkeys((os.path.normpath(folder), os.path.realpath(folder))))


def _under(path: str, folders: Iterable[str]) -> bool:
    return any(path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
               for folder in folders)


def _standard_cache(source: str) -> str | None:
    """Where this process reads ``source``'s bytecode (``importlib.util.cache_from_source``
    under this process's own ``sys.pycache_prefix``), or ``None``."""
    try:
        return importlib.util.cache_from_source(source)
    except (NotImplementedError, ValueError):  # pragma: no cover - no cache tag
        return None


def _rewrite_cache(folder: str | None, source: str, tail: str) -> Path:
    """Where pytest's assertion rewriter caches the rewritten code of ``source`` under the
    bytecode prefix ``folder`` (``None``: the ``__pycache__`` beside it): its
    ``get_cache_dir`` joined with ``<name><tail>``."""
    path = Path(source)
    name = path.name[:-3] + tail
    if folder:
        return Path(folder).joinpath(*path.parts[1:-1]) / name
    return path.parent / "__pycache__" / name


def _header_matches(data: bytes, source: str, info: os.stat_result, *, hashed: bool) -> bool:
    """Whether ``data`` (a ``.pyc``'s bytes) is code of this interpreter for ``source`` as it
    is now: a timestamp header (flags 0, the source's modification time and size), or with
    ``hashed`` a checked-hash one (flags 3, ``importlib.util.source_hash`` of its bytes)."""
    if len(data) <= _HEADER_BYTES or data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if hashed:
        try:
            with open(source, "rb") as f:
                digest = importlib.util.source_hash(f.read())
        except OSError:
            return False
        return data[4:8] == b"\3\0\0\0" and data[8:_HEADER_BYTES] == digest[:8]
    header = (int(info.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (
        info.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return data[4:8] == b"\0\0\0\0" and data[8:_HEADER_BYTES] == header


def loaded_rewriter() -> tuple[type | None, str]:
    """pytest's assertion-rewriting loader class and the name tail of its cache files, when
    this process runs under pytest (read from ``sys.modules``, never imported), else
    ``(None, "")``: the ``rewriter`` and ``rewrite_tail`` of :func:`seed_from_loaded`."""
    rewrite = sys.modules.get("_pytest.assertion.rewrite")
    hook = getattr(rewrite, "AssertionRewritingHook", None)
    tail = getattr(rewrite, "PYC_TAIL", "")
    return (hook if isinstance(hook, type) else None), (tail if isinstance(tail, str) else "")


def seed_from_loaded(prefix: Path, project: Path, modules: Iterable[object] | None = None, *,
                     rewriter: type | None = None, rewrite_tail: str = "",
                     installed: tuple[str, ...] | None = None,
                     trusted: tuple[str, ...] | None = None) -> list[Path]:
    """Copy into the bytecode folder ``prefix`` (a process's ``PYTHONPYCACHEPREFIX``) the
    bytecode of the modules this process has already imported from outside ``project``, so
    that a child started with that prefix does not compile pytest, its plugins and the
    standard library again (about 2 s on two CPUs).

    Safe because this process itself loaded exactly those files: the child trusts nothing
    its parent did not already trust. The project's files are never seeded (they are what an
    agent plants): a module is copied only when

    - it has a ``__file__`` ending in ``.py`` and a ``__cached__``, the path ``importlib``
      computes for that source here (so this process read or wrote that very file);
    - its source, as written and resolved, is in the standard library, in an installed
      distribution's folder (:func:`installed_folders`) or in pytest-ralph's own package:
      never a module loaded from anywhere else (a ``conftest.py``, a module on the ini
      ``pythonpath``), wherever the project is;
    - unless it is installed (a virtualenv inside the project is bound read-only to the
      agent, like any other), neither the source as written, nor its real path, nor the
      ``.pyc``'s real path is ``project`` or under it (also through symbolic links:
      ``project`` is compared both as given and resolved);
    - the ``.pyc`` exists and its header is this interpreter's magic number, flags 0 (a
      timestamp ``.pyc``) and the source's current modification time and size: what Python
      itself checks before loading it, so a stale or hash-based file is skipped.

    Each is copied to :func:`cache_path` ``(prefix, source)``, where ``importlib`` looks
    with ``sys.pycache_prefix`` set to ``prefix``, replacing a file there unless it holds the
    same bytes.

    A module whose loader is a ``rewriter`` (pytest's assertion-rewriting importer, which
    loads plugins' modules from its own cache, ``<name><rewrite_tail>``) is seeded from that
    cache instead, under the same conditions except the header: flags 3 (checked hash) and
    the source's hash, what that importer checks.

    Args:
        prefix: the bytecode folder (absolute).
        project: the project folder (the rootdir).
        modules: the modules to consider; default ``sys.modules``' values.
        rewriter: the class of an assertion-rewriting loader, or ``None``.
        rewrite_tail: the name tail of its cache files (with ``rewriter``).
        installed: the folders of installed code (default :func:`installed_folders`).
        trusted: other folders modules may be seeded from, the project excluded (default
            pytest-ralph's own package folder).

    Returns:
        The ``.pyc`` files written under ``prefix``. Unreadable files are skipped; nothing
        is raised for them.
    """
    given = os.path.abspath(project)
    excluded = (given, os.path.realpath(given))
    installed = installed_folders() if installed is None else installed
    roots = (*installed, *(_own_package_folders() if trusted is None else trusted))
    chosen = list(sys.modules.values()) if modules is None else list(modules)
    written: list[Path] = []
    for module in chosen:
        source = getattr(module, "__file__", None)
        cached = getattr(module, "__cached__", None)
        if not (isinstance(source, str) and isinstance(cached, str) and source.endswith(".py")
                and os.path.isabs(source)):
            continue
        if cached != _standard_cache(source):
            continue
        hashed = (rewriter is not None and bool(rewrite_tail)
                  and isinstance(getattr(module, "__loader__", None), rewriter))
        if hashed:
            cached = str(_rewrite_cache(sys.pycache_prefix, source, rewrite_tail))
            target = _rewrite_cache(str(prefix), source, rewrite_tail)
        else:
            target = cache_path(prefix, source)
        spelt = (os.path.normpath(source), os.path.realpath(source))
        if not all(_under(path, roots) for path in spelt):
            continue  # neither installed nor the standard library's, nor pytest-ralph's
        if not all(_under(path, installed) for path in spelt) and (
                _under(spelt[0], excluded) or _under(spelt[1], excluded)
                or _under(os.path.realpath(cached), excluded)):
            continue
        try:
            info = os.stat(source)
            with open(cached, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if not _header_matches(data, source, info, hashed=hashed):
            continue
        try:
            if target.read_bytes() == data:
                continue
        except OSError:
            pass
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError:
            continue
        written.append(target)
    return written
