"""``pytest --ralph-init``: scaffold a project for pytest-ralph.

:func:`scaffold` looks at a project (:func:`detect`: its pytest suite, whether ruff and mypy are
configured, its pytest configuration file) and adds, without ever overwriting a file or a value:

* ``prd.json`` with one example story whose criteria are real checks on this project (the
  test suite passes; ``ruff check .`` and ``mypy`` pass where they are configured), unless a
  PRD is already there;
* the ralph ini keys (:func:`init_keys`) in the project's pytest configuration file, the one
  pytest reads (``pytest.toml``, ``pytest.ini``, ``pyproject.toml``, ``tox.ini``,
  ``setup.cfg``), or in a new ``pytest.ini`` where there is none. ``pyproject.toml`` and the
  other TOML files are edited with tomlkit and INI files as text: every byte outside the
  added lines stays as it was (an edit that would change any other line is not made);
* the state folder in ``.gitignore``.

Everything is planned and checked first and written only then, so a malformed file
(:class:`ScaffoldError`) leaves the project untouched. Running it again changes nothing.
:mod:`pytest_ralph.commands.detect` looks at the project and reads its configuration files;
this module plans the edits and writes them.

This module does not import pytest; :mod:`pytest_ralph.plugin.commands` calls it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Comment, Table, Whitespace

from ..loop.settings import SPEC_BY_NAME, Settings
from ..prd.errors import PRDError
from ..prd.load import discover_prd, load_prd
from .detect import (
    Project,
    ScaffoldError,
    Text,
    config_kind,
    detect,
    find_config,
    find_section,
    import_note,
    parse_ini,
    parse_toml,
    read_text,
    toml_get,
)

#: The file :func:`scaffold` writes when the project has no PRD.
PRD_NAME = "prd.json"

#: The configuration file created when the project has none.
NEW_CONFIG = "pytest.ini"

#: The id of the example story.
STORY_ID = "US-001"


@dataclass(frozen=True)
class Change:
    """What :func:`scaffold` did to one file.

    Attributes:
        action: ``"created"``, ``"updated"`` or ``"skipped"``.
        path: the file, relative to the rootdir when inside it (``/`` separators).
        detail: what was added, or why nothing was.
    """

    action: str
    path: str
    detail: str

    def line(self) -> str:
        """``created prd.json: ...``"""
        return f"{self.action} {self.path}: {self.detail}"


@dataclass
class Plan:
    """The outcome of :func:`plan`: what to write and what to say.

    Attributes:
        changes: one per file looked at, in order.
        writes: path -> ``(text before or None for a new file, new text)``.
        notes: remarks for the user (no test suite found, a tool not on ``PATH``).
        prd: the PRD (found, or written), as shown (relative to the rootdir when inside).
        config: the pytest configuration file (found, edited or created).
    """

    prd: str = PRD_NAME
    config: Path | None = None
    changes: list[Change] = field(default_factory=list)
    writes: dict[Path, tuple[str | None, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# -- the PRD ---------------------------------------------------------------------------------


def example_prd(project: Project) -> dict[str, Any]:
    """The example PRD for ``project`` (the canonical shape, valid against
    ``prd.schema.json``): one story, :data:`STORY_ID`, whose criteria are checks:

    * ``{"text": "the test suite passes", "pytest": <project.tests>}``; with no test suite,
      ``"pytest": "tests"`` (the criterion then asks for one);
    * ``{"text": ..., "run": "ruff check ."}`` when ruff is configured;
    * ``{"text": ..., "run": "mypy"}`` (``mypy .`` when its configuration names no files)
      when mypy is configured.
    """
    criteria: list[dict[str, Any]] = []
    if project.tests:
        target: str | list[str] = (project.tests[0] if len(project.tests) == 1
                                   else list(project.tests))
        criteria.append({"text": "the test suite passes", "pytest": target})
    else:
        criteria.append({"text": "the project has a test suite in tests/ and it passes",
                         "pytest": "tests"})
    if project.ruff:
        criteria.append({"text": "ruff finds no problems", "run": "ruff check ."})
    if project.mypy:
        criteria.append({"text": "mypy finds no type errors",
                         "run": "mypy" if project.mypy_files else "mypy ."})
    name = project.rootdir.name or "project"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "work"
    return {
        "project": name,
        "branchName": f"ralph/{slug}",
        "description": "Written by `pytest --ralph-init`. `pytest prd.json` checks every "
                       "acceptance criterion; `pytest --ralph` runs an agent until they all "
                       "pass.",
        "userStories": [{
            "id": STORY_ID,
            "title": "The project's own checks pass",
            "description": "An example story: each acceptance criterion is a check that "
                           "pytest-ralph runs (a pytest run, a command). Replace it with the "
                           "stories of your work, each with criteria that a check can decide.",
            "acceptanceCriteria": criteria,
            "priority": 1,
            "passes": False,
            "notes": "",
        }],
    }


def _describe_criterion(criterion: Mapping[str, Any]) -> str:
    if "pytest" in criterion:
        target = criterion["pytest"]
        return "pytest " + (" ".join(target) if isinstance(target, list) else str(target))
    return f"run {criterion['run']}"


# -- settings --------------------------------------------------------------------------------


def init_keys(settings: Settings, rootdir: Path | None = None) -> list[tuple[str, str]]:
    """The ini keys ``--ralph-init`` adds, as ``(key, value)`` text: ``ralph_max_iterations``
    (the effective value: the default 5 unless given), ``ralph_agent`` when
    ``--ralph-agent`` was given on the command line, and ``ralph_prd`` (relative to
    ``rootdir``, with ``/``) when ``--ralph-prd`` named a PRD other than ``prd.json`` in the
    rootdir, so that the loop and the gate find the PRD it creates without the option. An
    agent command that holds a secret (:mod:`pytest_ralph.util.redact`: a token the shell expanded
    into ``--ralph-agent``) is never written into the configuration file."""
    from ..util.redact import Redactor

    keys = [(SPEC_BY_NAME["max_iterations"].ini, str(settings.max_iterations))]
    agent = SPEC_BY_NAME["agent"]
    if settings.agent and settings.sources.get("agent") == agent.cli \
            and "\n" not in settings.agent and "\r" not in settings.agent \
            and Redactor.from_env().text(settings.agent) == settings.agent:
        keys.append((agent.ini, settings.agent))
    prd = SPEC_BY_NAME["prd"]
    if settings.prd is not None and rootdir is not None \
            and settings.sources.get("prd") == prd.cli \
            and settings.prd.resolve() != (rootdir / "prd.json").resolve():
        where = settings.prd.resolve()
        root = rootdir.resolve()
        shown = where.relative_to(root).as_posix() if where.is_relative_to(root) else str(where)
        if "\n" not in shown and "\r" not in shown:
            keys.append((prd.ini, shown))
    return keys


def _insert_only(old: str, new: str, newline: str) -> str | None:
    """``old`` with the lines that ``new`` adds to it, written with ``newline``; ``None`` when
    ``new`` changes or removes any line of ``old``."""
    before, after = old.splitlines(), new.splitlines()
    kept = old.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag != "insert":
            return None
        out += kept[at:i1]
        at = i1
        if out and not out[-1].endswith(("\n", "\r")):
            out[-1] += newline
        out += [line + newline for line in after[j1:j2]]
    return "".join(out + kept[at:])


def _toml_string(value: str) -> str:
    return tomlkit.string(value).as_string()


def _plan_toml(path: Path, read: Text | None, tables: list[tuple[str, ...]],
               keys: Sequence[tuple[str, str]]) -> tuple[str | None, list[str], list[str], str]:
    """Add ``keys`` to a TOML configuration file.

    Returns:
        ``(new text or None, added keys, keys already set, the table's name)``.

    Raises:
        ScaffoldError: the file is not valid TOML, or the keys cannot be added without
            changing other lines.
    """
    text = read.text if read is not None else ""
    newline = read.newline if read is not None else "\n"
    doc = parse_toml(path, text)
    native, ini_mode = tables[0], tables[1] if len(tables) > 1 else None
    target: tuple[str, ...] | None = None
    for candidate in tables:
        table = toml_get(doc, *candidate)
        if not isinstance(table, Mapping):
            continue
        own = [k for k in table if k != "ini_options"] if candidate == native else list(table)
        if own or candidate != native or ini_mode is None:
            target = candidate
            break
    name = "[" + ".".join(target or (ini_mode or native)) + "]"
    existing = toml_get(doc, *target) if target else {}
    present = [k for k, _ in keys if k in existing]
    missing = [(k, v) for k, v in keys if k not in existing]
    if not missing:
        return None, [], present, name
    if target is None:
        lines = [name, *(f"{k} = {_toml_string(v)}" for k, v in missing)]
        prefix = "" if not text.strip() else (
            newline if text.endswith(("\n", "\r")) else newline * 2)
        new: str | None = text + prefix + newline.join(lines) + newline
    else:
        node: Any = doc
        for part in target:
            node = node[part]
        if not isinstance(node, Table):
            raise ScaffoldError(f"{path}: {name} is not a plain table (an inline table or "
                                "one split across the file); add these lines to it by hand: "
                                + "; ".join(f"{k} = {_toml_string(v)}" for k, v in missing))
        body = node.value.body
        tail: list[Any] = []  # blank lines and comments at its end stay after the new keys
        while body and body[-1][0] is None and isinstance(body[-1][1], (Whitespace, Comment)):
            tail.insert(0, body.pop())
        for k, v in missing:
            node.add(k, v)
        body.extend(tail)
        new = _insert_only(text, tomlkit.dumps(doc), newline)
    if new is None or not _has_values(new, target or (ini_mode or native), missing):
        raise ScaffoldError(f"{path}: cannot add to {name} without changing other lines; add "
                            "these lines to it by hand: "
                            + "; ".join(f"{k} = {_toml_string(v)}" for k, v in missing))
    return new, [k for k, _ in missing], present, name


def _has_values(text: str, table: tuple[str, ...], keys: Sequence[tuple[str, str]]) -> bool:
    try:
        found = toml_get(tomlkit.parse(text).unwrap(), *table)
    except Exception:
        return False
    return isinstance(found, Mapping) and all(found.get(k) == v for k, v in keys)


def _plan_ini(path: Path, read: Text | None, section_name: str,
              keys: Sequence[tuple[str, str]]) -> tuple[str | None, list[str], list[str], str]:
    """Add ``keys`` at the end of the ``[section_name]`` section of an INI file (the section is
    appended when missing), keeping every other line as it is.

    Returns:
        ``(new text or None, added keys, keys already set, the section's name)``.

    Raises:
        ScaffoldError: a malformed line (file and line named).
    """
    text = read.text if read is not None else ""
    newline = read.newline if read is not None else "\n"
    lines = text.splitlines(keepends=True)
    section = find_section(parse_ini(path, lines), section_name)
    name = f"[{section_name}]"
    present = [k for k, _ in keys if section is not None and k in section.values]
    missing = [(k, v) for k, v in keys if k not in present]
    if not missing:
        return None, [], present, name
    added = [f"{k} = {v}{newline}" for k, v in missing]
    if section is None:
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        if lines and lines[-1].strip():
            lines.append(newline)
        lines += [name + newline, *added]
    else:
        at = section.end
        if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
            lines[at - 1] += newline
        lines[at:at] = added
    return "".join(lines), [k for k, _ in missing], present, name


# -- planning and writing --------------------------------------------------------------------


def _shown(path: Path, rootdir: Path) -> str:
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return str(path)


def _gitignore_entry(state_dir: Path, rootdir: Path) -> str | None:
    try:
        rel = state_dir.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return None
    return None if rel in ("", ".") else rel + "/"


def _ignored(lines: Sequence[str], entry: str) -> bool:
    """Whether a ``.gitignore`` line already names the folder ``entry`` (``dir/``)."""
    bare = entry.rstrip("/")
    for line in lines:
        pattern = line.strip()
        if pattern.startswith("/"):
            pattern = pattern[1:]
        for suffix in ("/**", "/*", "/"):
            pattern = pattern.removesuffix(suffix)
        if pattern == bare:
            return True
    return False


def plan(rootdir: Path, *, config: Path | None, state_dir: Path, prd: Path | None,
         keys: Sequence[tuple[str, str]], ignores: Sequence[tuple[str, str]] = ()) -> Plan:
    """Work out what :func:`scaffold` would write, writing nothing.

    Args:
        rootdir: the project root.
        config: the pytest configuration file pytest chose (``config.inipath``), or ``None``
            to find it with :func:`find_config` (and create :data:`NEW_CONFIG` when there is
            none).
        state_dir: the state folder (absolute), for ``.gitignore``.
        prd: the configured PRD, or ``None`` to look for one with
            :func:`pytest_ralph.prd.load.discover_prd`.
        keys: the ini keys to add, ``(key, value)`` text (see :func:`init_keys`).
        ignores: more ``.gitignore`` entries, ``(pattern, what it is)``, after the state
            folder's (``--ralph-driver claude``: the arming file).

    Raises:
        ScaffoldError: a file is malformed or cannot be edited safely.
    """
    config = config if config is not None else find_config(rootdir)
    if prd is not None:  # configured: that file, even where discovery would find another
        existing: Path | None = prd if prd.exists() else None
        target = prd
    else:
        existing = discover_prd(rootdir)
        target = existing or rootdir / PRD_NAME
    out = Plan(prd=_shown(target, rootdir))
    project = detect(rootdir, config=config, prd=target, skip=(state_dir,))

    if existing is not None:
        out.changes.append(Change("skipped", out.prd,
                                  "a PRD is already there (the loop uses it)"))
        try:
            load_prd(existing)
        except PRDError as exc:
            first = exc.problems[0] if exc.problems else None
            what = f"{first.json_path}: {first.message}" if first is not None else str(exc)
            n = len(exc.problems)
            out.notes.append(f"{out.prd} does not load ({n} problem{'s' if n != 1 else ''}; "
                             f"the first: {what}); fix it before the gate or the loop: "
                             f"`pytest {out.prd}` lists every problem")
        except OSError as exc:
            out.notes.append(f"{out.prd} cannot be read: {exc.strerror or exc}")
    else:
        data = example_prd(project)
        criteria = data["userStories"][0]["acceptanceCriteria"]
        out.writes[target] = (None, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        out.changes.append(Change(
            "created", out.prd, f"story {STORY_ID} with {len(criteria)} "
            f"criteri{'on' if len(criteria) == 1 else 'a'} "
            f"({'; '.join(_describe_criterion(c) for c in criteria)}); edit it to describe "
            "your work"))
        if not project.tests:
            out.notes.append("no test suite found (no test_*.py or *_test.py file): the "
                             "example criterion asks for one in tests/")
        note = import_note(rootdir, project.tests, project.config)
        if note:
            out.notes.append(note)
        for tool, where in (("ruff", project.ruff), ("mypy", project.mypy)):
            if where and shutil.which(tool) is None:
                out.notes.append(f"{tool} is configured ({where}) but not on PATH: its "
                                 "criterion fails until it is installed")

    path = out.config = config if config is not None else rootdir / NEW_CONFIG
    read = read_text(path) if path.is_file() else None
    kind, tables = config_kind(path)
    if kind == "toml":
        new, added, present, name = _plan_toml(path, read, tables, keys)
    else:
        new, added, present, name = _plan_ini(path, read, tables[0][0], keys)
    shown = _shown(path, rootdir)
    already = f"{', '.join(present)} already set in {name}" if present else ""
    if new is None:
        out.changes.append(Change("skipped", shown, already or "nothing to add"))
    else:
        out.writes[path] = (read.with_bom(read.text) if read is not None else None,
                            read.with_bom(new) if read is not None else new)
        detail = f"added {', '.join(added)} to {name}"
        out.changes.append(Change("updated" if read is not None else "created", shown,
                                  detail + (f" ({already})" if already else "")))

    entry = _gitignore_entry(state_dir, rootdir)
    wanted = [*([(entry, "the state folder")] if entry is not None else []), *ignores]
    ignore = rootdir / ".gitignore"
    if entry is None:
        out.changes.append(Change("skipped", ".gitignore", f"the state folder {state_dir} is "
                                  "outside the rootdir"))
    old = read_text(ignore) if ignore.exists() else None
    present = old.text.splitlines() if old is not None else []
    new_entries = [(e, what) for e, what in wanted if not _ignored(present, e)]
    shown = ", ".join(f"{e} ({what})" for e, what in new_entries)
    if old is None and new_entries:
        out.writes[ignore] = (None, "".join(e + "\n" for e, _ in new_entries))
        out.changes.append(Change("created", ".gitignore", f"ignores {shown}"))
    elif old is not None and new_entries:
        sep = "" if not old.text or old.text.endswith(("\n", "\r")) else old.newline
        appended = "".join(e + old.newline for e, _ in new_entries)
        out.writes[ignore] = (old.with_bom(old.text), old.with_bom(old.text + sep + appended))
        out.changes.append(Change("updated", ".gitignore", f"added {shown}"))
    elif wanted:
        out.changes.append(Change("skipped", ".gitignore",
                                  f"{', '.join(e for e, _ in wanted)} "
                                  f"{'is' if len(wanted) == 1 else 'are'} already ignored"))
    return out


def _write(path: Path, before: str | None, text: str) -> None:
    """Write a new file (never over one that appeared meanwhile) or replace an edited one
    atomically (only if it still holds what was read), keeping its permissions.

    Raises:
        ScaffoldError: the file changed or appeared while this ran, or cannot be written.
    """
    data = text.encode("utf-8")
    try:
        if before is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("xb") as f:
                f.write(data)
            return
        if path.read_bytes() != before.encode("utf-8"):
            raise ScaffoldError(f"{path}: changed while --ralph-init ran; run it again")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            shutil.copymode(path, tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except FileExistsError:
        raise ScaffoldError(f"{path}: appeared while --ralph-init ran; it was left as it is, "
                            "run it again") from None
    except OSError as exc:
        raise ScaffoldError(f"{path}: cannot be written ({exc.strerror or exc})") from None


def scaffold(rootdir: Path, *, config: Path | None, state_dir: Path, prd: Path | None = None,
             keys: Sequence[tuple[str, str]] = (),
             ignores: Sequence[tuple[str, str]] = ()) -> Plan:
    """Scaffold the project at ``rootdir`` (see the module docstring): :func:`plan`, then
    write. Never overwrites a file or a value; a second run writes nothing.

    Args: as :func:`plan`.

    Returns:
        the :class:`Plan` carried out (``changes`` says what was done to each file).

    Raises:
        ScaffoldError: a file is malformed or cannot be edited safely (nothing was written),
            or a write failed.
    """
    done = plan(rootdir, config=config, state_dir=state_dir, prd=prd, keys=keys,
                ignores=ignores)
    for path, (before, text) in done.writes.items():
        _write(path, before, text)
    return done


def render(done: Plan, rootdir: Path, *, driver: str | None = None) -> str:
    """The text ``--ralph-init`` prints: a heading, one line per file, the notes, and what to
    do next (or that nothing needed doing); with ``driver="claude"`` the next step is the
    Claude Code session the arming text that follows describes, not ``pytest --ralph``."""
    lines = [f"pytest-ralph: --ralph-init in {rootdir}"]
    lines += [f"  {change.line()}" for change in done.changes]
    lines += [f"  note: {note}" for note in done.notes]
    if done.writes and driver == "claude":
        lines.append(f"next: describe your work in {done.prd}, check it with `pytest "
                     f"{done.prd}` (the gate: one test per criterion), then start Claude Code "
                     "in this folder (below)")
    elif done.writes:
        lines.append(f"next: describe your work in {done.prd}, check it with `pytest "
                     f"{done.prd}` (the gate: one test per criterion), then run the loop: "
                     "`pytest --ralph --ralph-agent claude` (or another agent)"
                     f"{_unattended_note('claude')}")
    else:
        lines.append("nothing to do: every file and value is already there")
    return "\n".join(lines)


def _unattended_note(preset: str) -> str:
    """What preset ``preset`` runs unattended, for the "next:" line: ``"; it runs claude with
    `--dangerously-skip-permissions`, which lets it ..."``, or ``""`` when its argv carries no
    flag of :data:`pytest_ralph.agents.unattended.UNATTENDED`."""
    from ..agents.presets import PRESETS
    from ..agents.unattended import unattended_flags

    found = unattended_flags(PRESETS[preset].argv())
    if not found:
        return ""
    flags = " and ".join(f"`{u.flag}`" for u in found)
    return (f"; it runs {preset} with {flags}, which lets it {found[0].grants}: the loop's "
            "sandbox confines it to the project folder where bubblewrap works "
            "(`--ralph-sandbox required` insists; off, nothing confines it), and `pytest "
            f"--ralph-doctor --ralph-agent {preset}` checks the CLI first")
