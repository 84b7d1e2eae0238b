"""Which PRD files a session collects, and which of their stories.

:func:`check_prd` refuses a configured PRD that is missing or not a regular file (and a PRD
path argument that is a FIFO or a device) and keeps the PRD that discovery finds
(:func:`pytest_ralph.prd.load.discover_prd`); :func:`add_discovered_prd` collects it when
pytest's own walk did not reach it. :func:`is_prd_file` decides which files
``pytest_collect_file`` collects as PRDs; :func:`select_stories` deselects the stories that
``--ralph-story`` does not name.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..prd.load import PRD_FORMATS, discover_prd
from .collect import COLLECTED_PRDS, CriterionItem, PRDFile
from .stash import get_settings, is_child

if TYPE_CHECKING:
    from ..loop.settings import Settings

#: The PRD that discovery found, resolved (when no path argument was given).
DISCOVERED_PRD = pytest.StashKey[Path]()


def check_prd(config: pytest.Config, settings: Settings) -> None:
    """At configure time: refuse a configured PRD that is missing or not a regular file, and
    a PRD path argument that is a FIFO, a device or a socket; without path arguments, keep
    the PRD that discovery finds (:data:`DISCOVERED_PRD`). The loop's child refuses nothing.

    Raises:
        pytest.UsageError: naming the PRD, where it came from and what it is.
    """
    if settings.prd is not None and not is_child():
        wrong = _not_a_file(settings.prd)
        if wrong:
            raise pytest.UsageError(
                f"pytest-ralph: the PRD {settings.prd} (from {settings.sources.get('prd')}) "
                + ("does not exist; fix the path, or unset it to use discovery"
                   if wrong == "missing" else f"is {wrong}, not a regular file; name the "
                   "PRD's own JSON or YAML file (nothing is read from a FIFO or a device)"))
    args_source = getattr(config, "args_source", None)
    if args_source == pytest.Config.ArgsSource.ARGS and not is_child():
        _refuse_special_prd_args(config)
    if args_source is not None and args_source != pytest.Config.ArgsSource.ARGS:
        prd = settings.prd or discover_prd(config.rootpath)
        wrong = _not_a_file(prd) if prd is not None else "missing"
        if prd is not None and wrong not in ("", "missing") and not is_child():
            raise pytest.UsageError(
                f"pytest-ralph: the PRD {prd} (found by discovery) is {wrong}, not a regular "
                "file; replace it with the PRD's JSON or YAML file, or name another PRD with "
                "--ralph-prd")
        if prd is not None and not wrong:
            config.stash[DISCOVERED_PRD] = prd.resolve()


def _not_a_file(path: Path) -> str:
    """``""`` when ``path`` is a regular file (symbolic links followed), ``"missing"`` when
    nothing is there (or it cannot be looked at), else what it is (``"a FIFO (named
    pipe)"``, ``"a character device"``, ``"a folder"``; :func:`pytest_ralph.util.files.kind_of`)."""
    from ..util.files import kind_of

    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return "missing"
    return "" if stat.S_ISREG(mode) else kind_of(mode)


def _refuse_special_prd_args(config: pytest.Config) -> None:
    """Refuse a command-line path with a PRD suffix (``.json``, ``.yaml``...) that is a FIFO,
    a device or a socket: pytest's own walk skips such a path and says "not found", and a
    PRD is never read from one.

    Raises:
        pytest.UsageError: naming the argument and what it is.
    """
    here = config.invocation_params.dir
    for arg in config.args:
        name = arg.split("::", 1)[0]
        path = Path(name) if os.path.isabs(name) else here / name
        if path.suffix.lower() not in PRD_FORMATS:
            continue
        wrong = _not_a_file(path)
        if wrong not in ("", "missing", "a folder"):
            raise pytest.UsageError(
                f"pytest-ralph: {arg} is {wrong}, not a regular file; a PRD (or any file pytest "
                "collects) is a regular file: name the PRD's own JSON or YAML file")


def is_prd_file(file_path: Path, parent: pytest.Collector, *, taken: bool) -> bool:
    """Whether :func:`pytest_ralph.plugin.pytest_collect_file` collects ``file_path`` as a
    PRD; ``taken``: another plugin or ``conftest.py`` collected it."""
    config = parent.config
    if any(fnmatch.fnmatch(file_path.name, p) for p in config.getini("ralph_prd_files")):
        return True
    if file_path.suffix.lower() not in PRD_FORMATS:
        return False
    if file_path == get_settings(config).prd:
        return True
    # The loop's check phase names only its PRD (or criteria of it) on its command line.
    return parent.session.isinitpath(file_path) and (not taken or is_child())


def add_discovered_prd(session: pytest.Session, config: pytest.Config,
                       items: list[pytest.Item]) -> None:
    """Add the discovered PRD's criteria to ``items`` when pytest's own walk did not reach it
    (a hidden ``.ralph/`` folder, outside ``testpaths``) and ``--ignore``, ``--ignore-glob``
    or a ``conftest.py``'s ``collect_ignore`` do not exclude it."""
    prd = config.stash.get(DISCOVERED_PRD, None)
    if prd is not None and prd not in config.stash.get(COLLECTED_PRDS, set()) and not \
            _ignored(config, prd):
        node = PRDFile.from_parent(session, path=prd)
        items.extend(session.genitems(node))


def select_stories(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the criteria of the stories that ``--ralph-story`` does not name; warn about
    a named story that no collected PRD has."""
    stories = get_settings(config).story
    if not stories:
        return
    keep, drop = [], []
    for item in items:
        if isinstance(item, CriterionItem) and item.story.id not in stories:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    found = {item.story.id for item in [*keep, *drop] if isinstance(item, CriterionItem)}
    unknown = [s for s in stories if s not in found]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if found and unknown and reporter is not None and not hasattr(config, "workerinput"):
        source = get_settings(config).sources.get("story", "--ralph-story")
        reporter.write_line(
            f"pytest-ralph: no story {', '.join(map(repr, unknown))} in the collected PRDs "
            f"(from {source}); their stories: {', '.join(sorted(found)[:10])}"
            f"{', ...' if len(found) > 10 else ''}", yellow=True)


def _ignored(config: pytest.Config, path: Path) -> bool:
    """Whether the user excluded ``path`` from collection: ``pytest_ignore_collect`` says so
    for the file (``--ignore``, ``--ignore-glob``, ``collect_ignore``, another plugin), or
    ``--ignore`` / ``--ignore-glob`` name one of its folders. ``norecursedirs`` alone does not
    count: a PRD in ``.ralph/`` is collected although pytest does not walk hidden folders."""
    if config.hook.pytest_ignore_collect(collection_path=path, config=config):
        return True
    here = config.invocation_params.dir
    paths = {(here / p).resolve() for p in config.getoption("ignore", None) or []}
    globs = [str(here / g) for g in config.getoption("ignore_glob", None) or []]
    return any(folder in paths or any(fnmatch.fnmatch(str(folder), g) for g in globs)
               for folder in path.parents)
