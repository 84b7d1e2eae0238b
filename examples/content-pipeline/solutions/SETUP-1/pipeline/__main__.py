"""Command line of the content pipeline.

::

    python -m pipeline init --db PATH [--force]   # a new database from db/schema.sql + seed.sql
    python -m pipeline all --db PATH              # rebuild PATH and run every stage
    python -m pipeline STAGE --db PATH            # one stage on an existing database
    python -m pipeline stages                     # the stages implemented so far

Exit status: 0 done, 1 a stage or the database failed (one line on stderr, the stage's
writes rolled back), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from pipeline import db
from pipeline.stages import Stage, discover

MAX_ROUNDS = 10
"""``all`` repeats the stages until a round changes nothing; more rounds than this is a bug."""


def run_stage(conn: sqlite3.Connection, stage: Stage, *, quiet: bool = False) -> int:
    """Run one stage in its own transaction, print its summary, return its changed rows.

    With ``quiet``, a stage that changed nothing prints nothing.
    """
    try:
        with db.transaction(conn):
            outcome = stage.run(conn)
    except sqlite3.Error as exc:
        raise db.PipelineError(f"{stage.name} ({stage.story}) failed: {exc}") from None
    conn.commit()
    if outcome.changed or not quiet:
        print(outcome.summary, flush=True)
    return outcome.changed


def run_all(path: Path, stages: list[Stage]) -> None:
    """Rebuild ``path`` from scratch, run the stages until they settle, then the final ones.

    A round runs every stage once, in order; later rounds pick up what earlier stages of the
    previous round left (a draft sent back for revision is revised, reviewed again and
    published in the next round).
    """
    db.create(path, force=True)
    print(f"init: built {path} from db/schema.sql and db/seed.sql", flush=True)
    conn = db.connect(path)
    try:
        working = [stage for stage in stages if not stage.final]
        for round_number in range(1, MAX_ROUNDS + 1):
            if sum(run_stage(conn, stage, quiet=True) for stage in working) == 0:
                print(f"all: settled (round {round_number} changed nothing)", flush=True)
                break
        else:
            raise db.PipelineError(f"the stages still change rows after {MAX_ROUNDS} rounds")
        for stage in stages:
            if stage.final:
                run_stage(conn, stage)
    finally:
        conn.close()


def build_parser(stages: list[Stage]) -> argparse.ArgumentParser:
    """The argument parser: the fixed commands and one command per stage."""
    parser = argparse.ArgumentParser(prog="python -m pipeline",
                                     description="The content pipeline, one stage at a time.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    init = commands.add_parser("init", help="create the database from db/schema.sql and "
                               "db/seed.sql")
    init.add_argument("--db", type=Path, required=True, help="the database file to create")
    init.add_argument("--force", action="store_true", help="replace an existing file")
    every = commands.add_parser("all", help="rebuild the database and run every stage")
    every.add_argument("--db", type=Path, required=True, help="the database file to rebuild")
    commands.add_parser("stages", help="list the stages implemented so far")
    for stage in stages:
        command = commands.add_parser(stage.name, help=f"{stage.help} ({stage.story})")
        command.add_argument("--db", type=Path, required=True, help="an existing database")
    return parser


def main(argv: list[str]) -> int:
    """Run the command line; return the exit status."""
    stages = discover()
    args = build_parser(stages).parse_args(argv)
    try:
        if args.command == "init":
            db.create(args.db, force=args.force)
            print(f"init: built {args.db} from db/schema.sql and db/seed.sql")
        elif args.command == "all":
            run_all(args.db, stages)
        elif args.command == "stages":
            for stage in stages:
                print(f"{stage.name}\t{stage.story}\t{stage.help}")
        else:
            (stage,) = (s for s in stages if s.name == args.command)
            conn = db.connect(args.db)
            try:
                run_stage(conn, stage)
            finally:
                conn.close()
    except db.PipelineError as exc:
        print(f"python -m pipeline {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
