"""The generated PRD format reference (``docs/prd-format.md``) and the documentation index.

``docs/prd-format.md`` is written by ``python -m pytest_ralph.docgen`` from
``pytest_ralph/prd/schema.json``: these tests fail when the committed page is stale, when a
property of the schema is missing from it, and when ``--check`` does not notice a change.
``docs/index.md`` links every part of the documentation; its links must lead somewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_ralph.prd.docgen import COMMAND, DEFAULT_OUTPUT, prd_format_markdown
from pytest_ralph.prd.validate import schema

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGE = DOCS / "prd-format.md"


def _docgen(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest_ralph.docgen", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_committed_page_is_what_docgen_writes() -> None:
    assert DEFAULT_OUTPUT == PAGE
    assert PAGE.read_text(encoding="utf-8") == prd_format_markdown(schema()), \
        f"docs/prd-format.md is stale: run `{COMMAND}`"


def test_the_page_says_it_is_generated() -> None:
    first = next(line for line in PAGE.read_text(encoding="utf-8").splitlines()
                 if line and not line.startswith(("#", "<!--")))
    assert "generated from `pytest_ralph/prd/schema.json`" in first
    assert f"`{COMMAND}`" in first
    assert "must not be edited by hand" in first


def test_every_property_of_every_definition_is_documented() -> None:
    s = schema()
    text = prd_format_markdown(s)
    for name in s["properties"]:
        assert f"| `{name}` |" in text, name
    seen = 0
    for def_name, node in s["$defs"].items():
        for prop, sub in node.get("properties", {}).items():
            assert f"| `{prop}` |" in text, f"{def_name}.{prop}"
            seen += 1
            if "description" in sub:
                assert sub["description"] in text, f"{def_name}.{prop}"
        if "description" in node:
            assert node["description"] in text, def_name
    assert seen > 20


def test_every_criterion_kind_has_a_section() -> None:
    text = prd_format_markdown(schema())
    for heading in ("### `run` (alias `testCommand`)", "### `pytest`", "### `exists`",
                    "### `file`", "### `sql`", "### `schema`", "### `python`",
                    "### Plugin kinds: `kind`"):
        assert heading + "\n" in text, heading


def test_limits_are_in_plain_words() -> None:
    text = prd_format_markdown(schema())
    assert "from 0 to 1,000,000" in text  # story priority
    assert "more than 0; at most 31,536,000" in text  # timeouts
    assert "at most 200 characters; no whitespace, control characters, `/`, `[`, `]` or " \
           "`::`" in text  # identifiers
    assert "`module:function`" in text
    assert ("| `run` | string | yes, unless `testCommand`; never both | not empty; no NUL "
            "character (`\\u0000`) |") in text


def test_an_unknown_pattern_is_shown_as_a_regex() -> None:
    s = {"type": "object", "required": ["userStories"],
         "properties": {"userStories": {"type": "array"},
                        "code": {"type": "string", "pattern": "^[A-Z]{3}$", "minLength": 3}}}
    text = prd_format_markdown(s)
    assert "| `code` | string | no | at least 3 characters; matches the regular expression " \
           "`^[A-Z]{3}$` |" in text


def test_check_passes_on_the_committed_page() -> None:
    done = _docgen("--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_fails_naming_a_changed_copy(tmp_path: Path) -> None:
    copy = tmp_path / "prd-format.md"
    shutil.copyfile(PAGE, copy)
    assert _docgen("--check", "--output", str(copy)).returncode == 0
    copy.write_text(copy.read_text(encoding="utf-8") + "a hand edit\n", encoding="utf-8")
    done = _docgen("--check", "--output", str(copy))
    assert done.returncode == 1
    assert str(copy) in done.stderr
    assert COMMAND in done.stderr
    assert copy.read_text(encoding="utf-8").endswith("a hand edit\n")  # --check writes nothing


def test_docgen_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "prd-format.md"
    done = _docgen("--output", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
    missing = tmp_path / "nothing.md"
    done = _docgen("--check", "--output", str(missing))
    assert done.returncode == 1 and str(missing) in done.stderr


def test_the_index_links_every_page_it_should() -> None:
    """Each link of the docs, README anchors included, is checked by
    ``tests/project/test_docs.py::test_every_link_leads_somewhere``."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", index)
    assert len(links) == 14
    for page in ("quickstart.md", "gate.md", "prd-format.md", "ci.md", "hooks.md", "fixtures.md",
                 "testing.md", "examples.md", "development.md", "architecture.md"):
        assert page in links, page
