"""``bench/run.py`` runs and prints its report in the documented format.

Only the format is checked, never the timings: ``--selftest`` runs the cases on tiny inputs
with one repetition and fails only when a run misbehaves (ERROR).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: One case line: the figure, the reference, their ratio, the target, the verdict, what.
CASE_LINE = re.compile(
    r"^(?P<case>P\d[a-z]?)\s+"
    r"figure\s+(?P<figure>\d+\.\d+ (?:s|MB))\s+"
    r"reference\s+(?P<reference>\d+\.\d+ (?:s|MB))\s+"
    r"ratio\s+(?P<ratio>\d+\.\d+)\s+"
    r"target\s+(?P<target>(?:ratio )?<= \d+\.\d+(?: s| MB)?)\s+"
    r"(?P<verdict>PASS|WARN|FAIL)\s+(?P<what>\S.*)$")


def test_selftest_prints_one_line_per_case_with_figure_reference_ratio_and_target() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--selftest", "--only", "P6,P7"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    machine = lines[0]
    assert machine.startswith("machine: ")
    assert re.search(r"\d+ CPUs", machine), machine
    assert re.search(r"Python \d+\.\d+", machine), machine
    assert re.search(r"pytest \d+\.", machine), machine
    assert lines[1].startswith("mode: selftest; cases: P6, P7;"), lines[1]
    case_lines = [line for line in lines if re.match(r"P\d", line)]
    bad = [line for line in case_lines if not CASE_LINE.match(line)]
    assert not bad, "\n".join(bad)
    found = {m["case"]: m for m in map(CASE_LINE.match, case_lines) if m}
    assert list(found) == ["P6a", "P6b", "P7a", "P7b"], case_lines
    assert found["P6a"]["target"] == "<= 0.100 s"
    assert found["P7a"]["target"] == "ratio <= 1.50"
    assert found["P7b"]["target"] == "ratio <= 0.50"
    summary = r"result: (\d+ (PASS|WARN|FAIL)(, )?)+; \d+ s; load average .*; exit 0"
    assert re.fullmatch(summary, lines[-1]), lines[-1]
