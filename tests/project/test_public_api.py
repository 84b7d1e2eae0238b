"""The public interface (``pytest_ralph.__all__``, ``pytest_ralph.testing``, the two ``python -m``
commands, the pytest11 entry point) resolves, and the examples use nothing else."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_ralph

ROOT = Path(__file__).resolve().parents[2]

#: The modules users may import.
PUBLIC_MODULES = {"pytest_ralph", "pytest_ralph.testing"}


@pytest.mark.parametrize("name", sorted(pytest_ralph.__all__))
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(pytest_ralph, name)
    if name != "__version__" and not name.isupper():
        assert getattr(value, "__doc__", None), f"pytest_ralph.{name} has no docstring"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pytest_ralph.Nope  # noqa: B018


def test_the_examples_import_only_public_modules() -> None:
    used: dict[str, set[str]] = {}
    for path in sorted((ROOT / "examples").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.split(".")[0] == "pytest_ralph" and name not in PUBLIC_MODULES:
                    used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert used == {}


@pytest.mark.parametrize("command", [["pytest_ralph.hook"], ["pytest_ralph.docgen", "--check"]])
def test_the_module_commands_users_write_down_still_run(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", *command], input=b"", capture_output=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()


def test_the_entry_point_is_the_plugin_module() -> None:
    from importlib.metadata import entry_points

    (ralph,) = [ep for ep in entry_points(group="pytest11") if ep.name == "ralph"]
    assert ralph.value == "pytest_ralph.plugin"
    assert hasattr(ralph.load(), "pytest_addoption")
