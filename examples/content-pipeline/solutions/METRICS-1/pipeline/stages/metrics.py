"""The metrics report: how many rows are in each state, per table and per channel.

Runs once, after the other stages have settled. The report is a markdown file next to the
database (``content.db`` -> ``content.metrics.md``; none for an in-memory database), and a
one-line summary goes to ``agent_log``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pipeline import db
from pipeline.stages import Outcome

STORY = "METRICS-1"
ORDER = 100
FINAL = True

STATES = (("research_briefs", "status"), ("content_ideas", "status"), ("drafts", "status"),
          ("critique_results", "verdict"), ("agent_log", "level"))
"""The tables counted per state, with their state column."""


def table(headers: tuple[str, ...], rows: list[tuple[object, ...]]) -> list[str]:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(value) for value in row) + " |" for row in rows]
    return lines


def report_path(conn: sqlite3.Connection) -> Path | None:
    """Where the report goes: next to the database file (None for an in-memory one)."""
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main" and file:
            path = Path(file)
            return path.with_name(f"{path.stem}.metrics.md")
    return None


def report(conn: sqlite3.Connection) -> str:
    """The metrics report, as markdown."""
    lines = ["# Content pipeline metrics", "", "## Rows per state", ""]
    rows: list[tuple[object, ...]] = []
    for name, column in STATES:
        rows += [(name, state, count) for state, count in conn.execute(
            f"SELECT {column}, count(*) FROM {name} GROUP BY {column} ORDER BY {column}")]
    lines += table(("table", "state", "rows"), rows)
    lines += ["", "## Plan slots per channel and status", ""]
    lines += table(("channel", "status", "slots"), conn.execute(
        "SELECT channel, status, count(*) FROM content_plan GROUP BY channel, status"
        " ORDER BY channel, status").fetchall())
    lines += ["", "## Published per channel", ""]
    lines += table(("channel", "posts"), conn.execute(
        "SELECT channel, count(*) FROM published GROUP BY channel ORDER BY channel").fetchall())
    lines += ["", "## Critique scores", ""]
    lines += table(("verdict", "critiques", "average score"), conn.execute(
        "SELECT verdict, count(*), round(avg(score), 1) FROM critique_results GROUP BY verdict"
        " ORDER BY verdict").fetchall())
    return "\n".join(lines) + "\n"


def run(conn: sqlite3.Connection) -> Outcome:
    """Write the report and log its summary; changes no pipeline state."""
    published = conn.execute("SELECT channel, count(*) FROM published GROUP BY channel"
                             " ORDER BY channel").fetchall()
    per_channel = ", ".join(f"{channel} {count}" for channel, count in published)
    total = sum(count for _, count in published)
    path = report_path(conn)
    if path is not None:
        path.write_text(report(conn), encoding="utf-8")
    slots = db.scalar(conn, "SELECT count(*) FROM content_plan")
    summary = (f"metrics: {slots} plan slots, {total} posts published ({per_channel or 'none'})"
               f"; report: {path.name if path else 'none (in-memory database)'}")
    db.log(conn, STORY, summary)
    return Outcome(0, summary)
