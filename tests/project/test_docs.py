"""Every example in ``docs/*.md`` is run: its files written, its commands run, their exit
codes, output lines and resulting files checked.

An example is marked in the Markdown with HTML comments (invisible when rendered):

* ``<!-- example: NAME/PATH -->`` before a fenced block: the block is the file PATH, written
  before the first command (wherever the block is on the page);
* ``<!-- example: NAME > PATH -->`` before a fenced block: the block is written to PATH at
  this point of the example, after the commands above it and before those below it (a file
  that changes, or appears, between two commands);
* ``<!-- example: NAME $ COMMAND => CODE -->``: run COMMAND, expect exit CODE. COMMAND is one
  of
  - ``pytest ARGS``: ``python -m pytest -p no:cacheprovider -p no:randomly ARGS``;
  - ``pytest-ralph-hook < FILE``: the Claude Code Stop hook, run as Claude Code runs it: the
    console script next to ``sys.executable`` (else ``python -P -m pytest_ralph.hook``),
    FILE on stdin (empty stdin without ``< FILE``), ``CLAUDE_PROJECT_DIR`` set to the
    example's folder;
  - ``cat PATH``: PATH's lines become output (exit 1 and ``cat``'s message when it is
    missing), to show a file a command wrote;
* ``<!-- example: NAME expect: PATTERN -->``: a line of some command's output (stdout and
  stderr) matches the ``fnmatch`` PATTERN;
* ``<!-- example: NAME json: KEY = PATTERN -->``: the stdout of the command just above is one
  JSON object (the Stop hook's answer) whose KEY is a string matching the ``fnmatch``
  PATTERN; ``json: without KEY``: that object has no KEY; ``json: nothing``: that command
  printed nothing on stdout (a stop allowed silently);
* ``<!-- example: NAME file: PATH = TEXT -->``: after the commands, PATH holds TEXT.

Each example runs in a folder of its own, with an environment that keeps nothing of the
user's or of the run of this suite that could change what a command does: no ``PYTEST_*``
(settings, ``PYTEST_ADDOPTS``, an xdist worker's id), ``CLAUDE*``, ``ANTHROPIC_*``,
``GIT_*``, ``GITHUB_*``, ``XDG_*``, secrets (as :mod:`pytest_ralph.util.redact` tells them),
``PYTHONPATH``, ``CI`` (pytest's output depends on it) or colour and width settings; ``HOME``
is a folder of its own, and the check phases share one private bytecode folder
(``PYTEST_RALPH_PYCACHE``).

Paths differ from run to run (a page shows ``/home/me/...``): patterns use ``*`` there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.support.docs import DOCS, Example, Run, parse
from tests.support.env import clean_env

HOOK = "pytest-ralph-hook"

EXAMPLES = [ex for doc in sorted(DOCS.glob("*.md")) for ex in parse(doc)]


def test_the_docs_have_examples() -> None:
    names = {(ex.doc, ex.name) for ex in EXAMPLES}
    assert {("hooks.md", "wordcount"), ("hooks.md", "mood"), ("hooks.md", "patience"),
            ("hooks.md", "notices"), ("fixtures.md", "rules"), ("fixtures.md", "until"),
            ("fixtures.md", "db"), ("claude-code.md", "greeter"),
            ("claude-code.md", "promise")} <= names
    assert all(ex.commands for ex in EXAMPLES), [ex.name for ex in EXAMPLES if not ex.commands]


def test_every_hook_and_fixture_is_documented() -> None:
    from pytest_ralph.plugin.hookspecs import HOOK_NAMES

    hooks = (DOCS / "hooks.md").read_text()
    for name in HOOK_NAMES:
        assert f"`{name}(" in hooks, name
    fixtures = (DOCS / "fixtures.md").read_text()
    for name in ("ralph_prd", "ralph_story", "ralph_loop", "ralph_db", "ralph_agent"):
        assert f"`{name}`" in fixtures, name


def test_the_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= linked, f"docs/index.md does not link {sorted(pages - linked)}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_anchor_rules() -> None:
    assert _anchor("The loop: `pytest --ralph`") == "the-loop-pytest---ralph"
    assert _anchor("Known limitations (this version)") == "known-limitations-this-version"


def _prose(path: Path) -> str:
    """A Markdown file without its fenced blocks."""
    return re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_every_link_leads_somewhere(page: str) -> None:
    for link in re.findall(r"\]\(([^)\s]+)\)", _prose(DOCS / page)):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target, _, anchor = link.partition("#")
        path = (DOCS / target).resolve() if target else DOCS / page
        assert path.exists(), f"{page}: {link}"
        if anchor:
            headings = [line.lstrip("#") for line in _prose(path).splitlines()
                        if re.match(r"#{1,6} ", line)]
            assert anchor in {_anchor(h) for h in headings}, f"{page}: {link}"


README = DOCS.parent / "README.md"


def test_the_readme_is_short() -> None:
    """The README introduces; the reference lives in docs/ (issue 25). Words are counted as
    ``str.split`` counts them, code blocks included."""
    words = len(README.read_text(encoding="utf-8").split())
    assert words < 1500, f"README.md has {words} words; move reference detail into docs/"


def test_the_readme_links_the_quickstart_and_the_index() -> None:
    links = set(re.findall(r"\]\(([^)\s]+)\)", _prose(README)))
    assert {"docs/quickstart.md", "docs/index.md"} <= links


def test_every_readme_link_leads_somewhere() -> None:
    """Each relative link of the README (to docs/, examples/, their anchors) resolves."""
    links = re.findall(r"\]\(([^)\s]+)\)", _prose(README))
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target, _, anchor = link.partition("#")
        path = (README.parent / target).resolve() if target else README
        assert path.exists(), f"README.md: {link}"
        if anchor:
            headings = [line.lstrip("#") for line in _prose(path).splitlines()
                        if re.match(r"#{1,6} ", line)]
            assert anchor in {_anchor(h) for h in headings}, f"README.md: {link}"


def test_the_readme_keeps_the_command_ci_runs() -> None:
    """``.ci/run`` runs the README's second set-up command verbatim."""
    commands = re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"),
                          flags=re.M | re.S)
    ci = (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8")
    second = 'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && ' \
             "python -m pytest -n 2"
    assert any(block.strip() == second for block in commands)
    assert second in ci.splitlines()


def _presets_table() -> dict[str, dict[str, str]]:
    """The presets table of docs/loop.md ("### Presets"): preset name -> column -> cell."""
    text = (DOCS / "loop.md").read_text(encoding="utf-8")
    section = text[text.index("\n### Presets\n"):]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows: list[str] = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    table: dict[str, dict[str, str]] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].strip("`")] = dict(zip(head, cells, strict=True))
    return table


def test_the_presets_table_shows_the_release_each_preset_was_proven_with() -> None:
    from pytest_ralph.agents.presets import PRESETS
    from pytest_ralph.agents.proven import PROVEN, UNVERIFIED

    table = _presets_table()
    assert set(table) == set(PRESETS)
    assert set(PROVEN) | set(UNVERIFIED) == set(PRESETS)
    for name, row in table.items():
        pin = PROVEN.get(name)
        expected = f"{pin.registry} `{pin.package}` {pin.version}" if pin else "unverified"
        assert row["proven with"] == expected, (name, row)


def test_the_harness_reads_every_kind_of_mark(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "<!-- example: ex/a.txt -->", "```", "one", "```",
        "<!-- example: ex $ pytest --version => 0 -->",
        "<!-- example: ex json: nothing -->",
        "<!-- example: ex > a.txt -->", "```text", "two", "```",
        "<!-- example: ex $ cat a.txt => 0 -->",
        "<!-- example: ex expect: t?o -->",
        "<!-- example: ex file: a.txt = two -->",
        "<!-- example: ex/late.txt -->", "```", "late", "```",
    ]) + "\n", encoding="utf-8")
    [ex] = parse(page)
    assert ex.files == {"a.txt": "one\n", "late.txt": "late\n"}
    assert ex.steps == [Run("pytest --version", 0, ["nothing"]), ("a.txt", "two\n"),
                        Run("cat a.txt", 0)]
    assert ex.expect == ["t?o"] and ex.results == [("a.txt", "two")]


@pytest.fixture(scope="session")
def private_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``HOME`` and the check phases' bytecode folder, shared by the examples of a session
    and outside their folders."""
    root = tmp_path_factory.mktemp("docs-user")
    (root / "home").mkdir()
    (root / "pycache").mkdir()
    return {"HOME": str(root / "home"), "USERPROFILE": str(root / "home"),
            "PYTEST_RALPH_PYCACHE": str(root / "pycache")}


_DROPPED = ("PYTEST_", "CLAUDE", "ANTHROPIC_", "GIT_", "GITHUB_", "XDG_")
_DROPPED_NAMES = {"PYTHONPATH", "PYTHONSTARTUP", "CI", "BUILD_NUMBER", "COLUMNS", "LINES",
                  "PY_COLORS", "NO_COLOR", "FORCE_COLOR"}


def user_env(private: dict[str, str]) -> dict[str, str]:
    """This process's environment without what could leak the user's state (or this test
    run's) into an example; see the module docstring."""
    from pytest_ralph.util.redact import secret_values

    secrets = set(secret_values().values())
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return clean_env(drop=_DROPPED, names=_DROPPED_NAMES | secrets, bytecode=True, PATH=path,
                     **private)


def hook_argv() -> list[str]:
    """The Stop hook's command: the console script next to this interpreter, as the Claude
    Code plugin runs it, else the module, as ``--ralph-init`` writes it."""
    for name in (HOOK, HOOK + ".exe"):
        script = Path(sys.executable).parent / name
        if script.is_file():
            return [str(script)]
    from pytest_ralph.claude.settings_file import SAFE_PATH_FLAG

    return [sys.executable, SAFE_PATH_FLAG, "-m", "pytest_ralph.hook"]


def run(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Run one example command; ``(exit code, stdout, stderr)``."""
    args = shlex.split(command)
    stdin = b""
    if args[0] == "cat":
        assert len(args) == 2, command
        try:
            return 0, (cwd / args[1]).read_text(encoding="utf-8"), ""
        except FileNotFoundError:
            return 1, "", f"cat: {args[1]}: No such file or directory\n"
    if args[0] == HOOK:
        assert args[1:] in ([], ["<", args[-1]]), command
        if args[1:]:
            stdin = (cwd / args[-1]).read_bytes()
        argv = hook_argv()
        env = {**env, "CLAUDE_PROJECT_DIR": str(cwd)}
    else:
        assert args[0] == "pytest", command
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                *args[1:]]
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True,
                          timeout=300)
    return (done.returncode, done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"))


def check_json(check: str, stdout: str, command: str) -> None:
    """One ``json:`` check of a command's stdout."""
    where = f"{command}: stdout {stdout!r}"
    if check == "nothing":
        assert not stdout.strip(), where
        return
    obj = json.loads(stdout)
    assert isinstance(obj, dict), where
    if check.startswith("without "):
        assert check.removeprefix("without ") not in obj, where
        return
    key, pattern = check.split(" = ", 1)
    assert isinstance(obj.get(key), str), f"no string {key!r}: {where}"
    assert fnmatch(obj[key], pattern), f"{key} does not match {pattern!r}: {where}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.doc}:{e.name}" for e in EXAMPLES])
def test_doc_example(example: Example, tmp_path: Path, private_state: dict[str, str]) -> None:
    def write(name: str, text: str) -> None:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")

    for name, text in example.files.items():
        write(name, text)
    env = user_env(private_state)
    output = []
    for step in example.steps:
        if not isinstance(step, Run):
            write(*step)
            continue
        code, stdout, stderr = run(step.command, tmp_path, env)
        text = stdout + stderr
        assert code == step.code, f"{step.command}: exit {code}\n{text}"
        for check in step.json:
            check_json(check, stdout, step.command)
        output += text.splitlines()
    for pattern in example.expect:
        assert any(fnmatch(line, pattern) for line in output), \
            f"no line matches {pattern!r}:\n" + "\n".join(output)
    for name, text in example.results:
        assert (tmp_path / name).read_text(encoding="utf-8").strip() == text
