"""examples/ralph_example_plugin: its wheel declares the pytest11 entry point, and its own
tests pass with the plugin only importable (``PYTHONPATH``, loaded with ``-p``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ralph_example_plugin"

pytestmark = pytest.mark.skipif(not EXAMPLE.is_dir(), reason="needs the source tree")


def test_wheel_declares_the_pytest11_entry_point(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "-w", str(tmp_path), str(EXAMPLE)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = tmp_path.glob("ralph_example_plugin-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = "ralph_example_plugin-0.1.0.dist-info"
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        metadata = zf.read(f"{info}/METADATA").decode()
    assert "[pytest11]\nralph_example = ralph_example_plugin\n" in entry_points
    assert {"ralph_example_plugin/__init__.py", "ralph_example_plugin/py.typed"} <= names
    assert not any(n.startswith("tests/") for n in names), names
    assert "\nRequires-Dist: pytest-ralph\n" in metadata
    assert "\nRequires-Python: >=3.10\n" in metadata


def test_example_tests_pass_with_the_plugin_on_pythonpath() -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST_", "PYTEST_ADDOPTS"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLE), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the example folder
    workers = ["-n", "2"] if importlib.util.find_spec("xdist") else []
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          "-rfEs", *workers, "tests"],
                         cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "11 passed" in run.stdout, run.stdout
