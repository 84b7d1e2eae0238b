"""The package finds its templates and schema from a wheel and from a source tree (editable)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import pytest_ralph.loop.prompt as p, pytest_ralph.prd.validate as d
path = p.template_path("prompt.md")
assert path.read_text("utf-8").startswith("# Ralph loop"), path
assert d.schema()["title"] == "pytest-ralph PRD"
print(path)
print(p.__file__)
"""


def probe(location: Path) -> tuple[Path, Path]:
    out = subprocess.run([sys.executable, "-I", "-c", PROBE, str(location)], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    return Path(out[0]), Path(out[1])


def test_source_tree_layout_uses_the_top_level_templates() -> None:
    """What an editable install puts on sys.path: the repository root."""
    template, module = probe(ROOT)
    assert module == ROOT / "pytest_ralph" / "loop" / "prompt.py"
    assert template == ROOT / "templates" / "prompt.md"


@pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file(), reason="needs the source tree")
def test_wheel_ships_templates_schema_and_entry_point(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("pytest_ralph-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        zf.extractall(tmp_path / "site")
    assert {"pytest_ralph/templates/prompt.md", "pytest_ralph/prd/schema.json",
            "pytest_ralph/py.typed"} <= names
    assert "[pytest11]\nralph = pytest_ralph.plugin" in entry_points
    # What PyPI shows: the classifiers, the project's addresses, the license and the README.
    head, _, body = metadata.partition("\n\n")
    for line in ("Classifier: Framework :: Pytest", "Classifier: Typing :: Typed",
                 "Classifier: Programming Language :: Python :: 3.10", "License-Expression: MIT",
                 "License-File: LICENSE", "Description-Content-Type: text/markdown"):
        assert line in head.splitlines(), line
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} == {
        line.split(": ", 1)[1].split(",")[0] for line in head.splitlines()
        if line.startswith("Project-URL: ")}
    assert body.strip() == (ROOT / "README.md").read_text(encoding="utf-8").strip()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    template, module = probe(tmp_path / "site")
    assert module == tmp_path / "site" / "pytest_ralph" / "loop" / "prompt.py"
    assert template == tmp_path / "site" / "pytest_ralph" / "templates" / "prompt.md"
