"""Mutation testing of the modules that decide "complete" (issue 20).

Each target module of the configuration (``tools/mutants.toml``) is parsed, and every
mutation point of its source gets one mutant (AST-level, applied to the source text, so that
line numbers and everything around the change stay as they are):

- ``compare``: ``==``/``!=``, ``<``/``<=``, ``>``/``>=``, ``is``/``is not``, ``in``/``not in``
  swapped
- ``bool``: ``and``/``or`` swapped
- ``not``: a ``not`` removed; ``negate``: an ``if``/``while``/ternary condition negated
- ``arith``: ``+``/``-``, ``*``/``//``, ``<<``/``>>``, ``|``/``&`` swapped (also in ``+=``...)
- ``unary``: a unary minus removed
- ``constant``: ``True``/``False`` swapped; an int ``0`` -> ``1``, ``1`` -> ``0``, ``n`` ->
  ``n + 1``; a float ``x`` -> ``x + 1``
- ``string``: a string (or f-string, or bytes) emptied, an empty one made ``"XX"``
- ``return``: ``return value`` -> ``return None``
- ``remove``: a statement that calls something, assigns to an attribute or an item, raises,
  ``+=``..., ``break``, ``continue`` or ``del`` replaced by ``pass``
- ``call``: ``f(x)`` (one positional argument) replaced by ``x``
- ``slice``: a slice bound or a negative index that is not a constant made ``(bound) + 1``

Docstrings, annotations, ``if TYPE_CHECKING:`` blocks and ``__all__`` are not mutated. A
mutant that does not compile, or that is the same text as the original or as an earlier
mutant, is dropped.

Each mutant is tested in a private copy of the project (a temporary folder under
``.mutants/``, not in ``/tmp``, which the sandbox replaces; the project's files without
``.git``, virtualenvs and caches) in which the module is rewritten: the tests
run from that copy (``python -m pytest`` puts it first on ``sys.path``), and ``PYTHONPATH``
names it too, so every child process the tests start (``runpytest_subprocess``, the loop's
agents and check phases, the Stop hook) imports the mutant, not the installed package. Each
mutant's file gets its own modification time and no bytecode is written
(``PYTHONDONTWRITEBYTECODE``), so no stale ``.pyc`` is ever loaded in its place. A probe in a
child process checks this before any mutant runs.

A module's tests come in two tiers: ``fast`` (unit tests, run first) and ``slow`` (the
subprocess tests, run only for a mutant the fast tier lets survive). Each tier runs with
``-x`` and a timeout of ``timeout_factor`` times its unmutated run (at least
``timeout_floor`` seconds). A mutant is *killed* (a test failed), *timeout* (counted as
killed), *survived*, or *equivalent* (survived, and listed in the configuration with the
reason it cannot change behaviour). Results are kept in ``.mutants/results.json`` keyed by
the mutant's text and a digest of the package and the tests, so an interrupted run resumes
and a rerun after a change re-tests everything (``--fresh`` ignores the kept results).

Output: one line per module (mutants, killed, equivalent, survived, score, seconds), then
each survivor with ``file:line``, the function, the mutation and the command that tests it
again. Exit 0 when no mutant survived unexplained, 1 when one did, 2 on a usage or setup
error (a tier failing without a mutant, the probe failing).

Usage::

    python tools/mutants.py [--module NAME[,NAME]] [--only LINE[.K][,...]] [--every K]
                            [--max-mutants N] [--list] [--diff] [--verbose] [--fresh] [--no-slow]
                            [--config FILE] [--root DIR] [--nice N]

``--module`` matches a target's path or file name (``fingerprint``, ``escalation.py``);
``--only 42`` tests the mutants of line 42, ``--only 42.2`` the second of them.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import difflib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = Path(__file__).resolve().with_name("mutants.toml")

#: What the private copy of the project leaves out.
COPY_IGNORE = (".git", ".venv", "venv", ".tox", "__pycache__", "*.pyc", ".mutants",
               ".pytest_cache", ".mypy_cache", ".ruff_cache", ".pytest_ralph", "build", "dist",
               "*.egg-info", "node_modules")

#: The pytest command each tier runs (its test arguments follow).
PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", "-rN")

#: Exit codes.
EXIT_OK, EXIT_SURVIVORS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad configuration or arguments, or a setup that cannot test mutants."""


# --- the mutants -------------------------------------------------------------------------

_COMPARE_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
    ast.GtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_ARITH_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
    ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr}
_REMOVABLE = (ast.AugAssign, ast.Raise, ast.Break, ast.Continue, ast.Delete)


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One mutation of one module.

    Attributes:
        module: the module's path relative to the project root (POSIX separators).
        line: the first line of the mutated code (1-based).
        k: its rank among the mutants of that line (1-based).
        function: the qualified name of the enclosing function or class, or ``<module>``.
        operator: the operator's name (``compare``, ``string``...; see the module docstring).
        before: the mutated code, blanks folded (at most 100 characters).
        after: what replaces it, the same way.
        n: its rank among the mutants of the module with the same function, before and
            after (1 for the first).
        source: the whole mutated module.
    """

    module: str
    line: int
    k: int
    function: str
    operator: str
    before: str
    after: str
    n: int
    source: str

    @property
    def ident(self) -> str:
        """``LINE.K``, as ``--only`` takes it."""
        return f"{self.line}.{self.k}"

    @property
    def key(self) -> str:
        """What the configuration's ``equivalent`` entries name: ``function: `before` ->
        `after``` (``#N`` appended from the second mutant with the same text on)."""
        base = f"{self.function}: `{self.before}` -> `{self.after}`"
        return base if self.n == 1 else f"{base} #{self.n}"

    def describe(self) -> str:
        """``module:line function: `before` -> `after` [operator]``."""
        return f"{self.module}:{self.line} {self.key} [{self.operator}]"


def _fold(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclasses.dataclass
class _Edit:
    node: ast.AST
    text: str  # the replacement source
    operator: str
    function: str
    statement: bool = False  # the edit replaces a whole statement


class _Finder:
    """Walks a module's AST and collects the edits of every operator."""

    def __init__(self, functions: Sequence[str]) -> None:
        self.functions = tuple(functions)
        self.edits: list[_Edit] = []

    def _wanted(self, qual: str) -> bool:
        return not self.functions or any(
            qual == f or qual.startswith(f + ".") for f in self.functions)

    def run(self, tree: ast.Module) -> list[_Edit]:
        self._body(tree.body, "<module>")
        return self.edits

    # -- traversal --------------------------------------------------------------------

    def _body(self, body: list[ast.stmt], qual: str) -> None:
        for i, stmt in enumerate(body):
            if i == 0 and _is_docstring(stmt):
                continue
            self._stmt(stmt, qual)

    def _stmt(self, stmt: ast.stmt, qual: str) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner = stmt.name if qual == "<module>" else f"{qual}.{stmt.name}"
            for deco in stmt.decorator_list:  # named after what they decorate
                self._expr(deco, inner)
            if not isinstance(stmt, ast.ClassDef):
                args = stmt.args
                for default in [*args.defaults, *(d for d in args.kw_defaults if d)]:
                    self._expr(default, inner)
            else:
                for base in [*stmt.bases, *(kw.value for kw in stmt.keywords)]:
                    self._expr(base, qual)
            self._body(stmt.body, inner)
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Pass)):
            return
        if isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            self._body(stmt.orelse, qual)
            return
        if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            return
        wanted = self._wanted(qual)
        if wanted:
            self._statement_edits(stmt, qual)
        for name, value in ast.iter_fields(stmt):
            if name in ("annotation", "returns", "type_comment"):
                continue
            if isinstance(stmt, ast.AnnAssign) and name == "target":
                continue
            if isinstance(value, list):
                for item in value:
                    self._any(item, qual)
            else:
                self._any(value, qual)

    def _any(self, value: Any, qual: str) -> None:
        if isinstance(value, ast.expr):
            self._expr(value, qual)
        elif isinstance(value, ast.ExceptHandler):
            if value.type is not None:
                self._expr(value.type, qual)
            for s in value.body:
                self._stmt(s, qual)
        elif isinstance(value, (ast.comprehension, ast.keyword, ast.withitem,
                                ast.match_case)):
            for _, v in ast.iter_fields(value):
                if isinstance(v, list):
                    for item in v:
                        self._any(item, qual)
                else:
                    self._any(v, qual)
        elif isinstance(value, ast.stmt):
            self._stmt(value, qual)

    def _expr(self, node: ast.expr, qual: str) -> None:
        if self._wanted(qual):
            self._expression_edits(node, qual)
        if isinstance(node, ast.JoinedStr):
            return  # positions inside f-strings are not reliable before Python 3.12
        if isinstance(node, ast.Lambda):
            self._expr(node.body, qual)
            return
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    self._any(item, qual)
            else:
                self._any(value, qual)

    # -- operators --------------------------------------------------------------------

    def _add(self, node: ast.AST, new: ast.AST | str, operator: str, qual: str,
             statement: bool = False) -> None:
        text = new if isinstance(new, str) else ast.unparse(new)
        self.edits.append(_Edit(node, text, operator, qual, statement))

    def _statement_edits(self, stmt: ast.stmt, qual: str) -> None:
        if isinstance(stmt, ast.Return) and stmt.value is not None and not (
                isinstance(stmt.value, ast.Constant)):
            self._add(stmt, "return None", "return", qual, statement=True)
        removable = isinstance(stmt, _REMOVABLE) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Call, ast.Await))) or (
            isinstance(stmt, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, (ast.Attribute, ast.Subscript))
                for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])))
        if removable:
            self._add(stmt, "pass", "remove", qual, statement=True)
        if isinstance(stmt, ast.AugAssign) and type(stmt.op) in _ARITH_SWAP:
            new = copy.copy(stmt)
            new.op = _ARITH_SWAP[type(stmt.op)]()
            self._add(stmt, new, "arith", qual, statement=True)
        if isinstance(stmt, (ast.If, ast.While)) and not _trivial_test(stmt.test):
            self._add(stmt.test, _negated(stmt.test), "negate", qual)

    def _expression_edits(self, node: ast.expr, qual: str) -> None:
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE_SWAP:
                    cmp = copy.copy(node)
                    cmp.ops = [*node.ops[:i], _COMPARE_SWAP[type(op)](), *node.ops[i + 1:]]
                    self._add(node, cmp, "compare", qual)
        elif isinstance(node, ast.BoolOp):
            boolop = copy.copy(node)
            boolop.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self._add(node, boolop, "bool", qual)
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                self._add(node, node.operand, "not", qual)
            elif isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
                self._add(node, node.operand, "unary", qual)
        elif isinstance(node, ast.BinOp):
            if type(node.op) in _ARITH_SWAP and not (
                    isinstance(node.op, ast.Add) and _stringish(node)):
                binop = copy.copy(node)
                binop.op = _ARITH_SWAP[type(node.op)]()
                self._add(node, binop, "arith", qual)
        elif isinstance(node, ast.IfExp):
            if not _trivial_test(node.test):
                self._add(node.test, _negated(node.test), "negate", qual)
        elif isinstance(node, ast.Constant):
            self._constant(node, qual)
        elif isinstance(node, ast.JoinedStr):
            self._add(node, "''", "string", qual)
        elif isinstance(node, ast.Call):
            if (len(node.args) == 1 and not node.keywords
                    and not isinstance(node.args[0], (ast.Starred, ast.Constant))
                    and isinstance(node.func, (ast.Name, ast.Attribute))):
                self._add(node, node.args[0], "call", qual)
        elif isinstance(node, ast.Subscript):
            sl = node.slice
            bounds = [sl.lower, sl.upper] if isinstance(sl, ast.Slice) else (
                [sl] if isinstance(sl, ast.UnaryOp) and isinstance(sl.op, ast.USub) else [])
            for bound in bounds:
                if bound is not None and not isinstance(bound, ast.Constant):
                    self._add(bound, ast.BinOp(bound, ast.Add(), ast.Constant(1)), "slice",
                              qual)

    def _constant(self, node: ast.Constant, qual: str) -> None:
        v = node.value
        if isinstance(v, bool):
            self._add(node, repr(not v), "constant", qual)
        elif isinstance(v, int):
            self._add(node, repr({0: 1, 1: 0}.get(v, v + 1)), "constant", qual)
        elif isinstance(v, float):
            self._add(node, repr(v + 1), "constant", qual)
        elif isinstance(v, str):
            self._add(node, "''" if v else "'XX'", "string", qual)
        elif isinstance(v, bytes):
            self._add(node, "b''" if v else "b'XX'", "string", qual)


def _is_docstring(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _trivial_test(test: ast.expr) -> bool:
    """A condition whose negation another operator already makes (``not x``, ``a == b``,
    ``a in b``) or that is a constant (``while True``)."""
    return isinstance(test, ast.Constant) or (
        isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)) or (
        isinstance(test, ast.Compare) and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)))


def _negated(test: ast.expr) -> ast.expr:
    return ast.UnaryOp(ast.Not(), test)


def _stringish(node: ast.expr) -> bool:
    """Whether ``node`` is text: a string or bytes constant, an f-string, or a ``+`` of
    those (``-`` in its place is a ``TypeError``: a mutant that says nothing)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _stringish(node.left) or _stringish(node.right)
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def _offsets(source: bytes) -> list[int]:
    starts = [0]
    for m in re.finditer(rb"\n", source):
        starts.append(m.end())
    return starts


def mutants_of(source: str, module: str, functions: Sequence[str] = ()) -> list[Mutant]:
    """Every mutant of ``source`` (the text of ``module``, a path relative to the project),
    in source order (deterministic); only inside ``functions`` (qualified names) when given.

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    raw = source.encode("utf-8")
    starts = _offsets(raw)
    tree = ast.parse(source, filename=module)
    edits = _Finder(functions).run(tree)
    seen = {raw}
    found: list[tuple[int, int, int, _Edit, str, str, str]] = []
    for order, edit in enumerate(edits):
        node: Any = edit.node
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        extra = "\n" * (node.end_lineno - node.lineno)  # keeps the line numbers below
        text = edit.text if edit.statement else f"({edit.text}{extra})"
        if edit.statement:
            text += extra
        new = raw[:begin] + text.encode("utf-8") + raw[end:]
        if new in seen:
            continue
        seen.add(new)
        mutated = new.decode("utf-8")
        try:
            compile(mutated, module, "exec", dont_inherit=True)
        except SyntaxError:
            continue
        before = raw[begin:end].decode("utf-8")
        found.append((node.lineno, node.col_offset, order, edit, mutated, _fold(before),
                      _fold(edit.text)))
    found.sort(key=lambda f: (f[0], f[1], f[2]))
    out: list[Mutant] = []
    per_line: dict[int, int] = {}
    per_key: dict[tuple[str, str, str], int] = {}
    for line, _col, _order, edit, mutated, before, after in found:
        per_line[line] = per_line.get(line, 0) + 1
        kk = (edit.function, before, after)
        per_key[kk] = per_key.get(kk, 0) + 1
        out.append(Mutant(module, line, per_line[line], edit.function, edit.operator, before,
                          after, per_key[kk], mutated))
    return out


# --- the configuration -------------------------------------------------------------------


@dataclasses.dataclass
class Target:
    """One target module of the configuration.

    Attributes:
        path: the module, relative to the project root.
        fast: pytest arguments of the fast tier (run for every mutant).
        slow: pytest arguments of the slow tier (run when the fast tier lets a mutant
            survive), or empty.
        functions: qualified names the mutants are limited to (empty: the whole module).
        equivalent: mutant key -> why it cannot change behaviour.
    """

    path: str
    fast: list[str]
    slow: list[str]
    functions: list[str]
    equivalent: dict[str, str]


@dataclasses.dataclass
class Config:
    """The configuration file.

    Attributes:
        timeout_factor: a tier may take this many times its unmutated run...
        timeout_floor: ...and at least this many seconds.
        targets: the target modules, in the file's order.
    """

    timeout_factor: float
    timeout_floor: float
    targets: list[Target]


def _args(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{where}: expected a list of pytest arguments (strings)")
    return list(value)


def load_config(path: Path) -> Config:
    """Read the TOML configuration at ``path``.

    Format::

        timeout_factor = 4.0        # optional
        timeout_floor = 30.0        # optional, seconds
        [[target]]
        path = "pytest_ralph/checks/fingerprint.py"
        functions = ["Loop._conclude"]          # optional
        fast = ["tests/checks/test_fingerprint.py"]    # pytest arguments
        slow = ["tests/loop/test_loop.py", "-k", "breaker"]   # optional
        [[target.equivalent]]
        mutant = "normalize_failure: `...` -> `...`"     # a key the tool prints
        why = "..."

    Raises:
        UsageError: unreadable file, bad TOML, a missing or mistyped field, the same
            target twice, an equivalent entry without a reason.
    """
    if tomllib is None:
        raise UsageError("tools/mutants.py needs Python 3.11 or later (tomllib)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the configuration {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None
    targets: list[Target] = []
    for i, raw in enumerate(data.get("target", [])):
        where = f"{path}: target[{i}]"
        if not isinstance(raw.get("path"), str):
            raise UsageError(f"{where}: expected `path`, the module relative to the root")
        equivalent: dict[str, str] = {}
        for j, eq in enumerate(raw.get("equivalent", [])):
            mutant, why = eq.get("mutant"), eq.get("why")
            if not isinstance(mutant, str) or not isinstance(why, str) or not why.strip():
                raise UsageError(f"{where}.equivalent[{j}]: expected `mutant` (a key as the "
                                 "tool prints it) and `why` (the reason it is equivalent)")
            equivalent[mutant] = why
        if any(t.path == raw["path"] for t in targets):
            raise UsageError(f"{where}: {raw['path']} is a target twice")
        targets.append(Target(raw["path"], _args(raw.get("fast"), f"{where}.fast"),
                              _args(raw.get("slow", []), f"{where}.slow")
                              if raw.get("slow") else [],
                              _args(raw.get("functions", []), f"{where}.functions")
                              if raw.get("functions") else [], equivalent))
    if not targets:
        raise UsageError(f"{path}: no [[target]]")
    return Config(float(data.get("timeout_factor", 4.0)), float(data.get("timeout_floor", 30.0)),
                  targets)


# --- running -----------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """How one mutant (or an unmutated tier) went: ``status`` is ``killed``, ``timeout``,
    ``survived`` or ``equivalent``; ``tier`` the tier that decided; ``seconds`` the time it
    took; ``output`` the tail of the deciding run's output."""

    status: str
    tier: str
    seconds: float
    output: str = ""


def _digest(root: Path, folders: Sequence[str]) -> str:
    """A digest of every Python, JSON and template file under ``folders`` of ``root``."""
    h = hashlib.sha256()
    for folder in folders:
        base = root / folder
        files = [base] if base.is_file() else sorted(
            p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for p in files:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


class Runner:
    """Runs the tiers of a target in the private copy ``work`` of the project."""

    def __init__(self, root: Path, work: Path, config: Config, verbose: bool) -> None:
        self.root, self.work, self.config, self.verbose = root, work, config, verbose
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(work), *filter(None, [os.environ.get("PYTHONPATH")])])
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.env.pop("PYTEST_ADDOPTS", None)
        self.env.pop("PYTEST_XDIST_WORKER", None)
        self._stamp = int(time.time()) - 10_000_000

    def probe(self, module: str) -> None:
        """Check that a child process started elsewhere imports ``module`` from the copy.

        Raises:
            UsageError: it imports another file (the mutants would not be seen).
        """
        name = module.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        code = f"import {name} as m; print(m.__file__)"
        with tempfile.TemporaryDirectory() as elsewhere:
            done = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=self.env,
                                  capture_output=True, text=True, timeout=120, check=False)
        got = done.stdout.strip()
        want = str(self.work / module)
        if done.returncode != 0 or os.path.realpath(got) != os.path.realpath(want):
            raise UsageError(f"a child process imports {name} from {got or done.stderr!r}, "
                             f"not from the mutated copy {want}: mutants would not be seen")

    def write(self, module: str, source: str) -> None:
        """Rewrite ``module`` in the copy, with a modification time of its own."""
        path = self.work / module
        path.write_text(source, encoding="utf-8")
        self._stamp += 2
        os.utime(path, (self._stamp, self._stamp))

    def tier(self, args: Sequence[str], timeout: float | None) -> Outcome:
        """Run pytest with ``args`` in the copy; ``survived`` when it passes."""
        cmd = [sys.executable, *PYTEST, *args]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = "survived" if proc.returncode == 0 else "killed"
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            status = "timeout"
        except BaseException:  # Ctrl-C, SIGTERM: no test run is left behind
            _kill_group(proc)
            proc.wait()
            raise
        tail = "\n".join(out.decode("utf-8", "replace").splitlines()[-40:])
        return Outcome(status, "", time.monotonic() - start, tail)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _select(mutants: list[Mutant], only: Sequence[str], every: int, max_mutants: int | None
            ) -> list[Mutant]:
    if only:
        mutants = [m for m in mutants if str(m.line) in only or m.ident in only]
    mutants = mutants[::every]
    return mutants[:max_mutants] if max_mutants is not None else mutants


def _targets(config: Config, wanted: Sequence[str]) -> list[Target]:
    if not wanted:
        return config.targets
    out: list[Target] = []
    for w in wanted:
        hits = [t for t in config.targets if w in (t.path, Path(t.path).name,
                                                   Path(t.path).stem)]
        if not hits:
            raise UsageError(f"--module {w}: no such target; the targets are "
                             f"{', '.join(t.path for t in config.targets)}")
        out.extend(h for h in hits if h not in out)
    return out


def _repro(args: argparse.Namespace, target: Target, m: Mutant) -> str:
    parts = [Path(sys.executable).name, "tools/mutants.py", "--module", target.path,
             "--only", m.ident, "--diff", "--verbose"]
    if args.config != DEFAULT_CONFIG:
        parts[2:2] = ["--config", str(args.config)]
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code."""
    parser = argparse.ArgumentParser(prog="tools/mutants.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the project root (default: the folder above tools/)")
    parser.add_argument("--module", default="", help="targets, comma-separated")
    parser.add_argument("--only", default="", help="LINE or LINE.K, comma-separated")
    parser.add_argument("--max-mutants", type=int, default=None,
                        help="test at most N mutants per module")
    parser.add_argument("--every", type=int, default=1, metavar="K",
                        help="test every K-th mutant only (a deterministic sample)")
    parser.add_argument("--list", action="store_true", help="list the mutants, test none")
    parser.add_argument("--diff", action="store_true", help="print each tested mutant's diff")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print the test output of every tested mutant")
    parser.add_argument("--fresh", action="store_true", help="ignore the kept results")
    parser.add_argument("--no-slow", action="store_true", help="run the fast tier only")
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness added to this process and its tests (default 10)")
    args = parser.parse_args(argv)
    # SIGTERM ends the run as Ctrl-C does: the running tests are killed and the copy removed
    # (the results so far are kept).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return _run(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted; the results so far are kept in .mutants/", file=sys.stderr)
        return 128 + signal.SIGINT


def _run(args: argparse.Namespace) -> int:
    root: Path = args.root.resolve()
    config = load_config(args.config)
    targets = _targets(config, [w for w in args.module.split(",") if w])
    only = [w for w in args.only.split(",") if w]
    if args.max_mutants is not None and args.max_mutants < 1:
        raise UsageError("--max-mutants: expected a number >= 1")
    if args.every < 1:
        raise UsageError("--every: expected a number >= 1")
    plan: list[tuple[Target, str, list[Mutant], list[Mutant]]] = []
    for target in targets:
        path = root / target.path
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"target {target.path}: cannot read {path}: {exc.strerror}"
                             ) from None
        everyone = mutants_of(source, target.path, target.functions)
        if target.functions and not everyone:
            raise UsageError(f"target {target.path}: no mutant in {target.functions} "
                             "(a function renamed?)")
        chosen = _select(everyone, only, args.every, args.max_mutants)
        plan.append((target, source, everyone, chosen))
    if args.list:
        for target, _s, everyone, chosen in plan:
            print(f"{target.path}: {len(everyone)} mutants")
            for m in chosen:
                eq = "  (equivalent)" if m.key in target.equivalent else ""
                print(f"  {m.ident:>7} {m.key} [{m.operator}]{eq}")
        return EXIT_OK
    if args.nice:
        os.nice(args.nice)
    store = root / ".mutants" / "results.json"
    kept: dict[str, Any] = {}
    if store.is_file() and not args.fresh:
        try:
            kept = json.loads(store.read_text(encoding="utf-8"))
        except ValueError:
            kept = {}
    suite = _digest(root, [d for d in ("pytest_ralph", "tests", "templates", "pyproject.toml")
                           if (root / d).exists()])
    unexplained = 0
    # The copy lives under the project's .mutants/, not in /tmp: the sandbox gives the
    # agent and the check phase a /tmp of their own, where a copy there would not be seen.
    (root / ".mutants").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="work-", dir=root / ".mutants") as tmp:
        work = Path(tmp) / "project"
        shutil.copytree(root, work, ignore=shutil.ignore_patterns(*COPY_IGNORE),
                        symlinks=True)
        runner = Runner(root, work, config, args.verbose)
        print(f"mutants: {len(plan)} module(s) in a copy at {work}; python "
              f"{sys.version.split()[0]}; niceness {os.nice(0)}", flush=True)
        for target, source, everyone, chosen in plan:
            unexplained += _module(args, runner, target, source, everyone, chosen, kept,
                                   suite, store)
    print(f"total: {unexplained} unexplained survivor(s)")
    return EXIT_SURVIVORS if unexplained else EXIT_OK


def _module(args: argparse.Namespace, runner: Runner, target: Target, source: str,
            everyone: list[Mutant], chosen: list[Mutant], kept: dict[str, Any], suite: str,
            store: Path) -> int:
    """Test ``chosen`` mutants of ``target``; print its summary; return its unexplained
    survivors."""
    start = time.monotonic()
    runner.probe(target.path)
    runner.write(target.path, source)
    tiers = [("fast", target.fast)] + ([("slow", target.slow)]
                                       if target.slow and not args.no_slow else [])
    config = runner.config
    timeouts: dict[str, float] = {}
    todo = [m for m in chosen if _cache_key(suite, target, m) not in kept]
    if todo:
        for name, tier_args in tiers:
            base = runner.tier(tier_args, timeout=None)
            if base.status != "survived":
                raise UsageError(f"{target.path}: the {name} tier fails without any mutant "
                                 f"(pytest {' '.join(tier_args)}):\n{base.output}")
            timeouts[name] = max(config.timeout_floor, config.timeout_factor * base.seconds)
            print(f"{target.path}: {name} tier ({' '.join(tier_args)}) passes unmutated in "
                  f"{base.seconds:.1f} s; timeout {timeouts[name]:.0f} s", flush=True)
    results: list[tuple[Mutant, Outcome]] = []
    for i, m in enumerate(chosen, 1):
        ck = _cache_key(suite, target, m)
        if ck in kept:
            got = Outcome(**kept[ck])
        else:
            runner.write(target.path, m.source)
            got = Outcome("survived", "", 0.0)
            for name, tier_args in tiers:
                got = runner.tier(tier_args, timeouts[name])
                got.tier = name
                if got.status != "survived":
                    break
            runner.write(target.path, source)
            kept[ck] = dataclasses.asdict(got) | {"output": ""}
            store.parent.mkdir(exist_ok=True)
            store.write_text(json.dumps(kept, indent=0, sort_keys=True), encoding="utf-8")
        if got.status == "survived" and m.key in target.equivalent:
            got = dataclasses.replace(got, status="equivalent")
        results.append((m, got))
        print(f"  [{i}/{len(chosen)}] {m.ident:>7} {got.status:<10} "
              f"{got.tier or '-':<4} {got.seconds:5.1f} s  {m.key}", flush=True)
        if args.diff:
            print("".join(difflib.unified_diff(
                source.splitlines(True), m.source.splitlines(True),
                f"a/{m.module}", f"b/{m.module}", n=1)), end="")
        if args.verbose and got.output:
            print("    " + got.output.replace("\n", "\n    "))
    counts = {s: sum(1 for _, o in results if o.status == s)
              for s in ("killed", "timeout", "survived", "equivalent")}
    judged = len(results) - counts["equivalent"]
    score = 100.0 * (counts["killed"] + counts["timeout"]) / judged if judged else 100.0
    took = time.monotonic() - start
    print(f"{target.path}: {len(results)} of {len(everyone)} mutants tested: "
          f"{counts['killed'] + counts['timeout']} killed ({counts['timeout']} by timeout), "
          f"{counts['equivalent']} equivalent, {counts['survived']} survived; score "
          f"{score:.1f}% of the non-equivalent; {took:.0f} s", flush=True)
    keys = {m.key for m in everyone}
    for stale in sorted(set(target.equivalent) - keys):
        print(f"  warning: equivalent entry matches no mutant (code changed?): {stale}")
    for m, o in results:
        if o.status != "survived" and m.key in target.equivalent and o.status != "equivalent":
            print(f"  warning: listed as equivalent but {o.status}: {m.key}")
    for m, o in results:
        if o.status == "survived":
            print(f"  SURVIVED {m.describe()}\n    reproduce: {_repro(args, target, m)}")
    return counts["survived"]


def _cache_key(suite: str, target: Target, m: Mutant) -> str:
    h = hashlib.sha256(json.dumps([suite, target.path, target.fast, target.slow]).encode())
    h.update(m.source.encode("utf-8"))
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
