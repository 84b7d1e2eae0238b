"""The shape of the package, from its source: ``python tools/house.py [--tree] [--json]``.

It reads every module of ``pytest_ralph/`` with :mod:`ast` (nothing is imported) and prints:

- the figures that ``docs/architecture.md`` holds the package to: modules at the top level,
  subpackages, the largest module, class and function (in lines, ``def`` line to last line),
  and the import circles;
- the imports that break the dependency rule (:data:`LAYERS`): a folder may import only from
  itself and the folders below it;
- with ``--tree``, the package tree with the line count of each module.

An import counts wherever it is written (module level or inside a function); only the
imports under ``if TYPE_CHECKING:`` are left out, as they never run. ``tests/project/
test_layers.py`` runs the same checks, so a change that breaks the rule fails the suite.
Exit status: 0 when the rule holds and there is no circle, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "pytest_ralph"

#: The folders of the package, lowest first. A module may import from its own folder and from
#: the folders before it in this tuple, never from one after it.
LAYERS: tuple[str, ...] = (
    "util",      # stdlib only: files, processes, redaction, environment names, text helpers
    "prd",       # the PRD format: model, loading, dialects, write-back
    "oracle",    # what judges a check phase, and its integrity snapshot
    "sandbox",   # bubblewrap confinement
    "checks",    # how a criterion is decided, and the check phase
    "agents",    # running a coding-agent CLI, and the presets
    "state",     # the state folder and the run history
    "loop",      # the Ralph loop: the engine and the pytest --ralph controller
    "claude",    # Claude Code: the Stop hook and its driver
    "parallel",  # parallel stories: the plan, git worktrees per lane (only commands, plugin
                 # import it)
    "commands",  # the one-shot verbs: --ralph-status, --ralph-cancel, --ralph-init, --ralph-doctor
    "plugin",    # the pytest layer: the only folder that imports pytest
)

#: Modules at the top of the package and the layer each one sits in: ``testing`` (the public
#: scripted agents) sits with ``agents``; the shims ``hook`` and ``docgen`` hand over to their
#: folders; ``__init__`` is the public face, which loads its names lazily from anywhere.
TOP_LEVEL: dict[str, str] = {"testing": "agents", "hook": "claude", "docgen": "prd",
                             "__init__": "face"}

#: The only folder whose modules may import pytest.
PYTEST_LAYER = "plugin"


@dataclass
class Module:
    """One module of the package: ``name`` is dotted below the package (``loop.engine``;
    ``plugin`` for ``plugin/__init__.py``), ``imports`` the modules of the package it imports
    (dotted the same way), ``pytest`` whether it imports pytest or ``_pytest``."""

    name: str
    path: Path
    lines: int
    top: bool  # a module directly in the package folder (not in a subpackage)
    imports: dict[str, int] = field(default_factory=dict)  # target -> first line
    pytest: int | None = None  # line of the first pytest import
    classes: list[tuple[str, int, int]] = field(default_factory=list)  # name, line, length
    functions: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def folder(self) -> str:
        """The layer name of the module: its folder, or :data:`TOP_LEVEL`'s entry."""
        if not self.top:
            return self.name.split(".")[0]
        return TOP_LEVEL.get(self.name, "?")


def _dotted(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _resolve(module: Module, node: ast.ImportFrom, known: set[str]) -> Iterator[str]:
    """The package modules an ``ImportFrom`` names (``from .x import y`` may name module
    ``x.y`` or an attribute of ``x``)."""
    if node.level:
        base = module.name.split(".") if module.path.name == "__init__.py" else \
            module.name.split(".")[:-1]
        if module.name == "__init__":
            base = []
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        head = ".".join([*base, *(node.module.split(".") if node.module else [])])
    elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
        head = node.module[len(PACKAGE) + 1:]
    else:
        return
    for alias in node.names:
        sub = f"{head}.{alias.name}" if head else alias.name
        if sub in known:
            yield sub
        elif head in known:
            yield head
        elif head == "":
            yield "__init__"


def read_module(path: Path, root: Path, known: set[str]) -> Module:
    """Parse one module: its imports (outside ``TYPE_CHECKING``), classes and functions."""
    text = path.read_text("utf-8")
    tree = ast.parse(text, str(path))
    mod = Module(_dotted(path, root), path, len(text.splitlines()), path.parent == root)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_stmt(stmt)
                continue
            visit_stmt(child)

    def visit_stmt(child: ast.AST) -> None:
        if isinstance(child, ast.ImportFrom):
            top = (child.module or "").split(".")[0]
            if child.level == 0 and top in ("pytest", "_pytest"):
                mod.pytest = mod.pytest or child.lineno
            for target in _resolve(mod, child, known):
                mod.imports.setdefault(target, child.lineno)
        elif isinstance(child, ast.Import):
            for alias in child.names:
                top = alias.name.split(".")[0]
                if top in ("pytest", "_pytest"):
                    mod.pytest = mod.pytest or child.lineno
                elif top == PACKAGE:
                    name = alias.name[len(PACKAGE) + 1:]
                    while name and name not in known:
                        name = name.rpartition(".")[0]
                    mod.imports.setdefault(name or "__init__", child.lineno)
        if isinstance(child, ast.ClassDef):
            mod.classes.append((child.name, child.lineno, _length(child)))
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.functions.append((child.name, child.lineno, _length(child)))
        visit(child)

    visit(tree)
    mod.imports.pop(mod.name, None)
    return mod


def _length(node: ast.AST) -> int:
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return (node.end_lineno or node.lineno) - start + 1


def read_package(root: Path) -> dict[str, Module]:
    """Every module under ``root`` (the package folder), by dotted name."""
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    known = {_dotted(p, root) for p in paths}
    return {m.name: m for m in (read_module(p, root, known) for p in paths)}


def circles(edges: dict[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def strong(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


def _rank(folder: str) -> int:
    return len(LAYERS) if folder == "face" else LAYERS.index(folder) if folder in LAYERS else -1


def rule_breaks(modules: dict[str, Module]) -> list[str]:
    """Each import that breaks the dependency rule, as ``file:line: a -> b (why)``; also a
    pytest import outside :data:`PYTEST_LAYER` and a module in no known layer."""
    out = []
    for mod in modules.values():
        rank = _rank(mod.folder)
        where = f"{mod.path.as_posix()}"
        if rank < 0:
            out.append(f"{where}:1: {mod.name} is in no layer (add its folder to LAYERS)")
            continue
        for target, line in sorted(mod.imports.items()):
            folder = modules[target].folder if target in modules else "?"
            if folder == "face" and mod.folder != "face":
                out.append(f"{where}:{line}: {mod.name} -> {target} (the public face is "
                           "for users; import from the module that defines the name)")
            elif _rank(folder) > rank:
                out.append(f"{where}:{line}: {mod.name} -> {target} ({mod.folder} may not "
                           f"import from {folder}, which is above it)")
        if mod.pytest is not None and mod.folder != PYTEST_LAYER:
            out.append(f"{where}:{mod.pytest}: {mod.name} imports pytest (only "
                       f"{PYTEST_LAYER}/ may)")
    return out


def module_circles(modules: dict[str, Module]) -> list[list[str]]:
    """Import circles between modules (function-level imports count)."""
    return circles({m.name: list(m.imports) for m in modules.values()})


def folder_circles(modules: dict[str, Module]) -> list[list[str]]:
    """Import circles between folders."""
    edges: dict[str, set[str]] = {}
    for m in modules.values():
        for t in m.imports:
            if t in modules and modules[t].folder != m.folder:
                edges.setdefault(m.folder, set()).add(modules[t].folder)
    return circles({k: sorted(v) for k, v in edges.items()})


def figures(modules: dict[str, Module]) -> dict[str, object]:
    """The figures of the package: counts, the largest module/class/function, circles."""
    top = [m for m in modules.values() if m.top]
    subpackages = sorted({m.name.split(".")[0] for m in modules.values() if not m.top})
    biggest = max(modules.values(), key=lambda m: m.lines)
    classes = [(n, m, ln, size) for m in modules.values() for n, ln, size in m.classes]
    functions = [(n, m, ln, size) for m in modules.values() for n, ln, size in m.functions]
    cls = max(classes, key=lambda c: c[3])
    fn = max(functions, key=lambda f: f[3])
    return {
        "modules": len(modules),
        "lines": sum(m.lines for m in modules.values()),
        "top_level_modules": len(top),
        "subpackages": len(subpackages),
        "largest_module": f"{biggest.name} {biggest.lines}",
        "largest_class": f"{cls[1].name}.{cls[0]} {cls[3]}",
        "largest_function": f"{fn[1].name}:{fn[0]} {fn[3]}",
        "modules_over_800": sorted(f"{m.name} {m.lines}" for m in modules.values()
                                   if m.lines > 800),
        "classes_over_500": sorted(f"{m.name}.{n} {s}" for n, m, _, s in classes if s > 500),
        "functions_over_120": sorted(f"{m.name}:{n} {s}" for n, m, _, s in functions
                                     if s > 120),
        "module_circles": module_circles(modules),
        "folder_circles": folder_circles(modules),
    }


def tree(modules: dict[str, Module]) -> str:
    """The package tree, one line a module, with its line count; each folder's total."""
    rows = []
    folders: dict[str, list[Module]] = {}
    for m in modules.values():
        folders.setdefault("" if m.top else m.folder, []).append(m)
    for m in sorted(folders.pop("", []), key=lambda m: m.name):
        rows.append(f"{m.path.name:<28}{m.lines:>6}")
    for folder in LAYERS:
        mods = sorted(folders.get(folder, []), key=lambda m: m.path.name)
        if not mods:
            continue
        rows.append(f"{folder + '/':<28}{sum(m.lines for m in mods):>6}")
        rows.extend(f"  {m.path.name:<26}{m.lines:>6}" for m in mods)
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Print the figures (and the tree); exit 1 when the rule is broken or a circle exists."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path,
                        default=Path(__file__).resolve().parents[1] / PACKAGE)
    parser.add_argument("--tree", action="store_true", help="print the package tree too")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    modules = read_package(args.root)
    figs = figures(modules)
    breaks = rule_breaks(modules)
    if args.json:
        print(json.dumps({**figs, "rule_breaks": breaks}, indent=2))
    else:
        if args.tree:
            print(tree(modules), end="\n\n")
        for key, value in figs.items():
            print(f"{key.replace('_', ' ')}: {value}")
        print(f"rule breaks: {len(breaks)}")
        for line in breaks:
            print(f"  {line}")
    return 1 if breaks or figs["module_circles"] or figs["folder_circles"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
