"""Print the dishonest-agent table: every case of :mod:`tests.chaos.cases` with the sandbox on
and off, what the loop did, and what is expected.

Usage::

    python -m tests.chaos.table [-j JOBS] [-k SUBSTRING] [--json FILE] [--from FILE]

It runs each case in both modes (``-j`` at a time, default 2) in a temporary folder of its own,
exactly as the test suite does, and prints a Markdown table on stdout (progress on stderr).
``--json FILE`` also saves the records; ``--from FILE`` prints the table of saved records
without running anything (a JSON list, or one record a line as the test suite appends them
to ``$PYTEST_RALPH_CHAOS_RECORDS``: CI prints the table of its own run that way). The exit
status is 1 when any outcome differs from its expectation (the table's last column says how),
else 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.chaos.cases import CASES, Case, as_json, run_case
from tests.support.chaos import MODES, CaseRun, warm_pycache


def run_one(case: Case, mode: str, base: Path, template: Path) -> dict[str, object]:
    """Run ``case`` in ``mode`` under ``base``; its record (:func:`tests.chaos.cases.as_json`)."""
    run = CaseRun(base / f"{case.name}-{mode}", mode, pycache_template=template)
    started = time.monotonic()
    try:
        run_case(case, run)
        record = as_json(case, mode, run)
    finally:
        shutil.rmtree(run.root, ignore_errors=True)
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(records: list[dict[str, object]]) -> str:
    """The table of ``records``: one row per case, its two modes side by side."""
    by_case: dict[str, dict[str, dict[str, object]]] = {}
    for record in records:
        by_case.setdefault(str(record["case"]), {})[str(record["mode"])] = record
    lines = ["| case | family | sandbox on: what the loop did | sandbox off: what the loop did "
             "| expected (on / off) | as expected? |",
             "|---|---|---|---|---|---|"]
    for case in CASES:
        modes = by_case.get(case.name)
        if not modes:
            continue
        on, off = modes.get("on", {}), modes.get("off", {})
        verdicts = []
        for mode, record in (("on", on), ("off", off)):
            found = record.get("problems")
            verdicts.append(f"{mode}: " + ("not run" if found is None else "NO" if found
                                           else "yes"))
        lines.append("| " + " | ".join(_cell(x) for x in (
            case.name, case.family, on.get("summary", "-"), off.get("summary", "-"),
            f"{case.on.describe()} / {case.off.describe()}", "; ".join(verdicts))) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the cases (or read saved records), print the table; 1 when any outcome differs from
    its expectation."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="cases run at a time")
    parser.add_argument("-k", dest="select", default="", help="only cases whose name has this")
    parser.add_argument("--json", type=Path, help="save the records in this file")
    parser.add_argument("--from", dest="source", type=Path, help="print saved records")
    args = parser.parse_args(argv)
    if args.source is not None:
        text = args.source.read_text("utf-8")
        try:  # a JSON list (--json), or one record a line (the test suite's, see
            records = json.loads(text)  # PYTEST_RALPH_CHAOS_RECORDS)
        except ValueError:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        cases = [c for c in CASES if args.select in c.name]
        with tempfile.TemporaryDirectory(prefix="chaos-table-") as tmp:
            base = Path(tmp)
            template = warm_pycache(base / "pycache")
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
                futures = [pool.submit(run_one, case, mode, base, template)
                           for case in cases for mode in MODES]
                records = []
                for future in futures:
                    record = future.result()
                    records.append(record)
                    print(f"{record['case']} ({record['mode']}, {record['seconds']} s): "
                          f"{record['summary']}", file=sys.stderr, flush=True)
            print(f"{len(records)} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)
        if args.json is not None:
            args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    print(markdown(records))
    return 1 if any(r.get("problems") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
