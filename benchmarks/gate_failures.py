"""Benchmark: the gate on a large PRD, all passing vs. many failing.

Generates a PRD of N criteria (``exists`` checks on files it creates) in a temporary
folder, runs ``python -m pytest prd.json`` once with every file present and once with F
files removed, and prints both wall times (seconds) and their ratio. pytest's own
failure summary is quadratic in the number of failures (pytest issue 13360); pytest-ralph
prints one line per failing criterion instead, so the ratio should stay near 1 (target:
at most 1.5).

Usage: python benchmarks/gate_failures.py [--criteria 20000] [--failing 3000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_project(root: Path, criteria: int, per_story: int = 20) -> None:
    """Write ``prd.json`` with ``criteria`` exists-checks and the files they name."""
    files = root / "files"
    files.mkdir()
    stories = []
    for s in range(0, criteria, per_story):
        crits = [{"exists": f"files/f{i}.txt"} for i in range(s, min(s + per_story, criteria))]
        stories.append({"id": f"S-{s // per_story}", "title": f"story {s // per_story}",
                        "acceptanceCriteria": crits, "priority": 1, "passes": False})
    (root / "prd.json").write_text(json.dumps({"project": "bench", "userStories": stories}))
    for i in range(criteria):
        (files / f"f{i}.txt").write_text("x")


def run_gate(root: Path) -> tuple[float, str]:
    """Run the gate; return (seconds, pytest's last line)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "prd.json"], cwd=root, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()
    return elapsed, last


def main() -> int:
    """Run both cases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--criteria", type=int, default=20000)
    parser.add_argument("--failing", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_project(root, args.criteria)
        passing, line_p = run_gate(root)
        step = max(1, args.criteria // args.failing)
        for i in range(0, step * args.failing, step):
            (root / "files" / f"f{i}.txt").unlink()
        failing, line_f = run_gate(root)
    print(f"criteria: {args.criteria}, failing: {args.failing}")
    print(f"all passing: {passing:.2f} s   ({line_p})")
    print(f"{args.failing} failing: {failing:.2f} s   ({line_f})")
    ratio = failing / passing
    print(f"ratio failing/passing: {ratio:.2f} (target <= 1.5)")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
