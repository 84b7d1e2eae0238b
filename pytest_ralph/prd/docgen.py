"""Generate the PRD format reference (``docs/prd-format.md``) from the JSON Schema.

:func:`prd_format_markdown` renders ``pytest_ralph/prd/schema.json`` as Markdown: the top-level
keys, the story keys, the identifier rules and every criterion kind, each field with its type,
whether it is required, its limits in plain words and the schema's own description.

``python -m pytest_ralph.docgen`` writes the page; ``--check`` writes nothing and exits 1 when
the page on disk differs from what would be written; ``--output PATH`` points at another file.

This module does not import pytest.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Where the page goes, relative to the repository root.
PAGE = "docs/prd-format.md"

#: The command that writes the page.
COMMAND = "python -m pytest_ralph.docgen"

#: The page's default location: the ``docs/`` folder next to the package.
DEFAULT_OUTPUT = Path(__file__).resolve().parents[2] / PAGE

#: Patterns of the schema said in words; any other pattern is shown as a regular expression.
_PATTERN_WORDS: dict[str, str] = {
    "\\S": "has a character other than whitespace",
    "^(?!.*::)[^\\s/\\[\\]\\u0000-\\u001f\\u007f]*$(?!\\n)":
        "no whitespace, control characters, `/`, `[`, `]` or `::`",
    "^[A-Za-z_][\\w.]*:[A-Za-z_][\\w.]*$":
        "`module:function`: two dotted Python names joined by `:`",
    "^[A-Za-z][A-Za-z0-9_.-]*$(?!\\n)":
        "starts with a letter, then only letters, digits, `_`, `.` and `-`",
    "^[^\\u0000]*$": "no NUL character (`\\u0000`)",
}

#: Words for fields the schema gives no description (said here, not in the schema).
_FIELD_NOTES: dict[tuple[str, str], str] = {
    ("", "description"): "Free text about the project.",
    ("story", "id"): "The story's id, the middle part of its criteria's node ids "
                     "(`prd.json::US-001::AC1`).",
    ("story", "description"): "Free text: what the story is about.",
    ("story", "acceptanceCriteria"):
        "The story's criteria, each a test item (see [Criteria](#criteria)).",
    ("story", "priority"): "Stories with a lower value are worked first.",
    ("story", "notes"): "Free text. The loop keeps one line of it, the one starting with "
                        "`pytest-ralph: `.",
    ("*", "id"): "The criterion's id in its test item's node id; `AC1`, `AC2`, ... "
                 "(its position) when absent.",
    ("*", "text"): "What the criterion says, in words; shown with its results.",
}

#: The section on ``dependsOn`` (said here, not in the schema), after the story keys.
_DEPENDENCIES = [
    "## Dependencies between stories",
    "",
    "A story lists the ids of the stories it depends on in `dependsOn` (the keys "
    "`dependencies` and `depends_on` of other PRD tools are read as `dependsOn`; a single "
    "string is one id). In a parallel run, a story starts only once every story it depends on "
    "is merged, its criteria verified; a story without `dependsOn` is independent and may run "
    "beside any other. Among the stories that may start, the lowest `priority` goes first, "
    "then file order. Priorities never hold a story back: to say that stories must be worked "
    "one after another, chain them with `dependsOn`:",
    "",
    "```json",
    '{"userStories": [',
    '  {"id": "US-001", "title": "Schema", "acceptanceCriteria": ["..."]},',
    '  {"id": "US-002", "title": "API", "acceptanceCriteria": ["..."], '
    '"dependsOn": ["US-001"]},',
    '  {"id": "US-003", "title": "UI", "acceptanceCriteria": ["..."], '
    '"dependsOn": ["US-002"]}',
    "]}",
    "```",
    "",
    "Loading a PRD checks only the form of `dependsOn` (a list of identifiers), so a plain "
    "`pytest prd.json` never fails over it. The parallel run and `pytest --ralph-plan` refuse, "
    "naming the file, the line and the story's key, a dependency on an id that is no story of "
    "the PRD, a story that depends on itself, and a cycle (`US-001 -> US-003 -> US-001`). "
    "Top-level groupings of other tools (`waves` with `depends_on_wave`) are not read: the "
    "stories' own lists say the same.",
    "",
    "`pytest --ralph-plan [PRD]` prints the plan as one line of JSON, for a CI matrix "
    "(`fromJSON(...).include` in GitHub Actions): `prd` (its path from the rootdir), "
    "`waves` (lists of story ids; a wave's stories depend only on stories of earlier waves) "
    "and `include`, one entry per story with `story`, `title`, `branch` (`ralph/<id>`, made a "
    "valid git branch name), `wave` and `dependsOn`. Every story is planned: `passes: true` "
    "is the story's claim, not a verification. A PRD that cannot be loaded, or whose "
    "dependencies cannot be followed, is exit 4 with the problems on stderr and nothing on "
    "stdout; no PRD, or one without stories, is exit 5.",
    "",
]

_TYPE_WORDS = {"string": "string", "integer": "integer", "number": "number",
               "boolean": "boolean (`true` or `false`)", "object": "object",
               "array": "list", "null": "null"}

_REF_PLURALS = {"id": "identifiers ([rules](#identifiers))",
                "story": "stories ([keys](#story-keys))",
                "criterion": "criteria ([kinds](#criteria))"}

_REF_WORDS = {"id": "identifier ([rules](#identifiers))",
              "story": "story ([keys](#story-keys))",
              "criterion": "criterion ([kinds](#criteria))"}


def _ref_name(node: Mapping[str, Any]) -> str | None:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return ref[len("#/$defs/"):]
    return None


def _number(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10000:
        return f"{value:,}"
    return str(value)


def _type(node: Mapping[str, Any]) -> str:
    """The type of a schema node, in words."""
    ref = _ref_name(node)
    if ref is not None:
        return _REF_WORDS.get(ref, f"`{ref}`")
    if "anyOf" in node:
        return " or ".join(_type(branch) for branch in node["anyOf"])
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        if isinstance(items, Mapping):
            ref = _ref_name(items)
            if ref in _REF_PLURALS:
                return "list of " + _REF_PLURALS[ref]
            return f"list of {_type(items)}s"
        return "list"
    if isinstance(kind, str):
        return _TYPE_WORDS.get(kind, kind)
    if isinstance(kind, list):
        return " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kind)
    return "any JSON value"


def _limits(node: Mapping[str, Any], defs: Mapping[str, Any]) -> list[str]:
    """The limits a schema node puts on a value, in plain words."""
    ref = _ref_name(node)
    if ref == "id":
        return _limits(defs["id"], defs)
    out: list[str] = []
    if "anyOf" in node:
        for branch in node["anyOf"]:
            words = _limits(branch, defs)
            if words:
                out.append(f"as {_type(branch)}: " + "; ".join(words))
        return out
    low, high = node.get("minLength"), node.get("maxLength")
    if low == 1:
        if node.get("pattern") != "\\S":  # the pattern says it already
            out.append("not empty")
    elif low is not None:
        out.append(f"at least {_number(low)} characters")
    if high is not None:
        out.append(f"at most {_number(high)} characters")
    lo, hi = node.get("minimum"), node.get("maximum")
    if lo is not None and hi is not None:
        out.append(f"from {_number(lo)} to {_number(hi)}")
    elif lo is not None:
        out.append(f"at least {_number(lo)}")
    elif hi is not None:
        out.append(f"at most {_number(hi)}")
    if "exclusiveMinimum" in node:
        out.append(f"more than {_number(node['exclusiveMinimum'])}")
    if "exclusiveMaximum" in node:
        out.append(f"less than {_number(node['exclusiveMaximum'])}")
    if hi is not None and "exclusiveMinimum" in node and lo is None:
        out.append(out.pop(-2))  # "more than 0; at most N" reads better in that order
    items = node.get("minItems")
    if items == 1:
        out.append("at least one item")
    elif items is not None:
        out.append(f"at least {_number(items)} items")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        out.append(_PATTERN_WORDS.get(pattern, f"matches the regular expression `{pattern}`"))
    refused = node.get("not", {}).get("enum")
    if isinstance(refused, list):
        out.append("not " + ", ".join(f"`{v}`" for v in refused))
    return out


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _required_words(node: Mapping[str, Any]) -> dict[str, str]:
    """Each property that is required (or one of a set of which one is required), in words."""
    words = {name: "yes" for name in node.get("required", [])}
    branches = node.get("oneOf", [])
    names = [b["required"][0] for b in branches
             if isinstance(b, Mapping) and len(b.get("required", [])) == 1]
    if names and len(names) == len(branches):
        others = {n: ", ".join(f"`{o}`" for o in names if o != n) for n in names}
        for name in names:
            words[name] = f"yes, unless {others[name]}; never both"
    return words


def _table(scope: str, node: Mapping[str, Any], defs: Mapping[str, Any]) -> list[str]:
    rows = ["| key | type | required | limits | description |",
            "|---|---|---|---|---|"]
    required = _required_words(node)
    for name, prop in node.get("properties", {}).items():
        description = prop.get("description") or _FIELD_NOTES.get((scope, name)) or (
            _FIELD_NOTES.get(("*", name), "") if scope.endswith("Criterion") else "")
        rows.append("| " + " | ".join(_cell(c) for c in (
            f"`{name}`", _type(prop), required.get(name, "no"),
            "; ".join(_limits(prop, defs)) or "", description)) + " |")
    return rows


def _extra_keys(node: Mapping[str, Any]) -> str:
    if node.get("additionalProperties", True) is False:
        return "No other keys are allowed."
    return ("The schema accepts keys not listed here, except one that looks like a "
            "misspelling of a listed key (`prority`, `contians`): the loader refuses it, "
            "naming the key it looks like, also when that key is there too (its value would "
            "be ignored).")


def _kind_key(node: Mapping[str, Any]) -> list[str]:
    """The key (or keys, for aliases) that name a criterion's kind."""
    names = list(_required_words(node))
    branches = [n for n, w in _required_words(node).items() if w != "yes"]
    return branches or names[:1]


def _heading(keys: Sequence[str]) -> str:
    if keys == ["kind"]:
        return "### Plugin kinds: `kind`"
    first, *aliases = keys
    if aliases:
        return f"### `{first}` (alias " + ", ".join(f"`{a}`" for a in aliases) + ")"
    return f"### `{first}`"


def prd_format_markdown(schema: dict[str, Any]) -> str:
    """The PRD format reference, as Markdown, rendered from the PRD JSON Schema."""
    defs: Mapping[str, Any] = schema.get("$defs", {})
    out = [
        "# The PRD format",
        "",
        "<!-- Generated file: do not edit. Change pytest_ralph/prd/schema.json and run "
        f"`{COMMAND}`. -->",
        "",
        "This page is generated from `pytest_ralph/prd/schema.json` by "
        f"`{COMMAND}` and must not be edited by hand: change the schema, then run the "
        "command again (`--check` tells whether the page is up to date).",
        "",
    ]
    if "description" in schema:
        out += [schema["description"], ""]
    out += ["A PRD is a JSON, JSONC or YAML file holding one object. This page describes the "
            "canonical shape; other shapes that agents often write are read too (see "
            "[Dialects](criteria.md#dialects)).", ""]

    out += ["## Top-level keys", "", *_table("", schema, defs), "", _extra_keys(schema), ""]

    story = defs.get("story", {})
    out += ["## Story keys", ""]
    if "description" in story:
        out += [story["description"], ""]
    out += [*_table("story", story, defs), "", _extra_keys(story), ""]
    if "dependsOn" in story.get("properties", {}):
        out += _DEPENDENCIES

    ident = defs.get("id", {})
    out += ["## Identifiers", "",
            "Story ids, and criterion ids when given, are " + _type(ident) + "s: "
            + "; ".join(_limits(ident, defs)) + ".", ""]
    if "description" in ident:
        out += [ident["description"], ""]

    criterion = defs.get("criterion", {})
    out += ["## Criteria", ""]
    if "description" in criterion:
        out += [criterion["description"], ""]
    sections: list[str] = []
    kinds: list[str] = []
    for branch in criterion.get("anyOf", []):
        ref = _ref_name(branch)
        if ref is None:
            limits = "; ".join(_limits(branch, defs))
            kinds.append(f"- text: a {_type(branch)}" + (f" ({limits})" if limits else "")
                         + ", decided by an ini `ralph_checks` command, the verifier, or the "
                         "story's claim (see [Text criteria](criteria.md#text-criteria));")
            continue
        node = defs[ref]
        keys = _kind_key(node)
        heading = _heading(keys)
        kinds.append("- " + heading.lstrip("# ") + ";")
        sections += [heading, ""]
        if "description" in node:
            sections += [node["description"], ""]
        sections += [*_table(ref, node, defs), "", _extra_keys(node), ""]
    if kinds:
        kinds[-1] = kinds[-1][:-1] + "."
        out += ["A criterion is one of:", "", *kinds, ""]
    out += sections
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_ralph.docgen [--check] [--output PATH]``."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description=f"Write {PAGE} from pytest_ralph/prd/schema.json.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the page differs from what would be "
                             "written")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"the page to write or check (default: {PAGE})")
    args = parser.parse_args(argv)
    from .validate import schema

    text = prd_format_markdown(schema())
    path: Path = args.output
    if args.check:
        try:
            current = path.read_text(encoding="utf-8")
        except OSError as exc:
            print(f"{path}: cannot read ({exc.strerror}); run `{COMMAND}`", file=sys.stderr)
            return 1
        if current != text:
            print(f"{path} is out of date: run `{COMMAND}` to write it again",
                  file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
