"""The check kinds that read files: ``exists`` and ``file`` (+ ``contains``) (:class:`PathCheck`),
``sql`` (:class:`SqlCheck`, a query on a SQLite database opened read-only) and ``schema``
(:class:`SchemaCheck`, a JSON or YAML file valid against a JSON Schema). They run in this
process and start none; a file is read only when it is a regular file within a size limit.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..util.files import NotRegularFile, check_regular, kind_of, read_text
from .base import CheckResult

#: Largest file a ``file`` + ``contains`` check reads, in bytes; a larger one fails.
CONTAINS_MAX_BYTES = 64 * 1024 * 1024

#: Largest schema or instance file (or file a ``$ref`` names) a ``schema`` check reads, in
#: bytes; a larger one fails.
SCHEMA_FILE_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class PathCheck:
    """A path that must exist, or a file whose text must match a regular expression.

    Attributes:
        path: absolute path, as text (a gate of thousands of ``exists`` criteria spends its
            time here: ``os.path`` is several times quicker than :mod:`pathlib`).
        shown: the path as the PRD wrote it (for messages).
        file: require a regular file (a ``file`` criterion), not just any path.
        contains: a regular expression (Python syntax, ``re.MULTILINE``) the file's text
            must match, or ``None``.
    """

    path: str
    shown: str
    file: bool = False
    contains: str | None = None

    def run(self) -> CheckResult:
        """Look at the path now. The file of a ``contains`` check is read only when it is a
        regular file of at most :data:`CONTAINS_MAX_BYTES` bytes (never a FIFO, which would
        block, or a device such as ``/dev/zero``, which never ends)."""
        what = "a file" if self.file else "a file or folder"
        if not os.path.exists(self.path):
            return CheckResult(False, f"nothing at `{self.shown}`; expected {what} there")
        if self.file and not os.path.isfile(self.path):
            try:
                kind = kind_of(os.stat(self.path).st_mode)
            except OSError:  # gone meanwhile
                kind = "not there any more"
            return CheckResult(False, f"`{self.shown}` is {kind}; expected a regular file")
        if self.contains is None:
            return CheckResult(True)
        try:
            text = read_text(self.path, CONTAINS_MAX_BYTES, errors="replace")
        except OSError as exc:
            return CheckResult(False, f"cannot read `{self.shown}`: {exc.strerror}; expected "
                                      f"its text to match /{self.contains}/")
        if re.search(self.contains, text, re.MULTILINE):
            return CheckResult(True)
        lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        return CheckResult(False, f"no match for /{self.contains}/ in `{self.shown}` "
                                  f"({lines} lines); expected the text to match it")


@dataclass(frozen=True)
class SqlCheck:
    """A query on a SQLite database, opened read-only, whose result must equal ``expect``.

    ``expect`` is compared with the single value of a one-row, one-column result when it is
    a scalar (number, string, boolean, null), and with the list of rows (each a list of
    values) when it is a list.

    Attributes:
        sql: the query.
        db: absolute path of the database file.
        shown: the database path as the PRD wrote it.
        expect: the expected result (JSON value).
    """

    sql: str
    db: Path
    shown: str
    expect: Any

    def run(self) -> CheckResult:
        """Run the query (read-only) and compare."""
        import sqlite3  # imported when a sql check runs
        import urllib.request

        where = f"`{self.sql}` on `{self.shown}`"
        try:
            check_regular(self.db)  # SQLite would block on a FIFO
        except NotRegularFile as exc:
            return CheckResult(False, f"`{self.shown}` is {exc.kind}; expected a SQLite file "
                                      f"for {where}")
        except (OSError, ValueError):
            return CheckResult(False, f"no database at `{self.shown}`; expected a SQLite file "
                                      f"for {where}")
        try:
            uri = "file:" + urllib.request.pathname2url(str(self.db)) + "?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10)) as conn:
                rows = [list(r) for r in conn.execute(self.sql).fetchall()]
        except sqlite3.Error as exc:
            return CheckResult(False, f"{where} failed: {exc}; expected a result equal to "
                                      f"{json.dumps(self.expect)}")
        if isinstance(self.expect, list):
            found: Any = rows
            if rows and all(len(r) == 1 for r in rows) and not any(
                    isinstance(e, list) for e in self.expect):
                found = [r[0] for r in rows]  # a list of scalars: compare one column
        elif len(rows) == 1 and len(rows[0]) == 1:
            found = rows[0][0]
        else:
            found = rows
        if found == self.expect:  # SQLite has no booleans: true == 1, as in SQL
            return CheckResult(True)
        return CheckResult(False, f"{where} gave {json.dumps(found, default=str)}; expected "
                                  f"{json.dumps(self.expect)}")


@dataclass(frozen=True)
class SchemaCheck:
    """A JSON or YAML file (``instance``) that must be valid against a JSON Schema file.

    Attributes:
        schema: absolute path of the schema (JSON or YAML).
        instance: absolute path of the file checked.
        shown: (schema, instance) as the PRD wrote them.
    """

    schema: Path
    instance: Path
    shown: tuple[str, str]

    def run(self) -> CheckResult:
        """Load both files and validate; every error is listed with its JSON path.

        A ``$ref`` to another file (``"$ref": "defs.json#/port"``) is read from the schema's
        folder; nothing is fetched over the network: a remote ``$ref`` (``http:``,
        ``https:``, ...) or one that cannot be read fails the criterion, naming it.
        """
        import jsonschema  # imported when a schema check runs
        import referencing.exceptions

        schema_shown, instance_shown = self.shown
        loaded = []
        for path, shown in ((self.schema, schema_shown), (self.instance, instance_shown)):
            try:
                loaded.append(_load_json_or_yaml(path))
            except (OSError, ValueError) as exc:
                return CheckResult(False, f"cannot load `{shown}`: {_reason(exc)}; expected a "
                                          "JSON or YAML file")
        schema, instance = loaded
        try:
            validator_cls = jsonschema.validators.validator_for(schema)
            validator_cls.check_schema(schema)
            registry = _local_registry(self.schema.parent, validator_cls)
            errors = sorted(validator_cls(schema, registry=registry).iter_errors(instance),
                            key=lambda e: list(map(str, e.absolute_path)))
        except RecursionError:
            return CheckResult(False, f"`{instance_shown}` or `{schema_shown}` is nested too "
                                      "deeply to validate; expected JSON or YAML data of "
                                      "reasonable depth")
        except jsonschema.SchemaError as exc:
            return CheckResult(False, f"`{schema_shown}` is not a valid JSON Schema: "
                                      f"{exc.message}")
        except referencing.exceptions.Unresolvable as exc:
            why: BaseException = exc
            while why.__cause__ is not None:  # down to the retriever's own words
                why = why.__cause__
            return CheckResult(False, f"`{schema_shown}`: cannot resolve the $ref "
                                      f"{getattr(exc, 'ref', '')!r}: {why}; expected a "
                                      "reference inside the schema or to a JSON or YAML file "
                                      "next to it (remote references are not fetched)")
        if not errors:
            return CheckResult(True)
        lines = [f"`{instance_shown}` does not match `{schema_shown}`: {len(errors)} "
                 f"problem{'s' if len(errors) != 1 else ''}; expected none"]
        for e in errors[:10]:
            jp = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                               for p in e.absolute_path)
            lines.append(f"  {jp}: {e.message}")
        if len(errors) > 10:
            lines.append(f"  ... and {len(errors) - 10} more")
        return CheckResult(False, "\n".join(lines))



def _load_json_or_yaml(path: Path) -> Any:
    """The data of a JSON file, or of a YAML one (``.yaml``/``.yml``, read with
    ``yaml.safe_load``), read only when it is a regular file of at most
    :data:`SCHEMA_FILE_MAX_BYTES` bytes.

    Raises:
        OSError: the file cannot be read, is not a regular file (a FIFO, a device, a
            folder: :class:`~pytest_ralph.util.files.NotRegularFile`) or is over the limit.
        ValueError: it is not UTF-8, JSON or YAML (a ``yaml.YAMLError`` is re-raised as one),
            or it is nested too deeply to read.
    """
    import yaml

    text = read_text(path, SCHEMA_FILE_MAX_BYTES)
    try:
        if path.suffix.lower() not in (".yaml", ".yml"):
            return json.loads(text)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _reason(exc: BaseException) -> str:
    """What an error says, without ``[Errno N]`` and the repeated path of an
    :class:`OSError`."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _local_registry(folder: Path, validator_cls: Any) -> Any:
    """A :class:`referencing.Registry` that reads a ``$ref`` to another schema from a file
    (a relative reference from ``folder``, or a ``file:`` URI) and fetches nothing remote.
    Its resources default to the dialect of ``validator_cls``."""
    from urllib.parse import unquote, urlsplit

    import referencing
    import referencing.exceptions

    def retrieve(uri: str) -> referencing.Resource[Any]:
        parts = urlsplit(uri)
        if parts.scheme not in ("", "file") or parts.netloc not in ("", "localhost"):
            raise ValueError(f"{uri} is not a local file")
        path = folder / unquote(parts.path)
        try:
            contents = _load_json_or_yaml(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot load {path}: {_reason(exc)}") from None
        return referencing.Resource.from_contents(
            contents, default_specification=referencing.jsonschema.specification_with(
                validator_cls.META_SCHEMA.get("$schema", ""),
                default=referencing.jsonschema.DRAFT202012))

    return referencing.Registry(retrieve=retrieve)  # type: ignore[call-arg]
