"""``bench/run.py`` runs and prints its report in the documented format.

Only the format is checked, never the timings: ``--selftest`` runs the cases on tiny inputs
with one repetition and fails only when a run misbehaves (ERROR).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: One case line: the figure, the reference, their ratio, the target, the verdict, what.
CASE_LINE = re.compile(
    r"^(?P<case>P\d+[a-z]?)\s+"
    r"figure\s+(?P<figure>\d+\.\d+ (?:s|MB))\s+"
    r"reference\s+(?P<reference>\d+\.\d+ (?:s|MB))\s+"
    r"ratio\s+(?P<ratio>\d+\.\d+)\s+"
    r"target\s+(?P<target>(?:ratio )?<= \d+\.\d+(?: s| MB)?)\s+"
    r"(?P<verdict>PASS|WARN|MISS|FAIL)\s+(?P<what>\S.*)$")


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
    assert found["P7a"]["target"] == "ratio <= 0.20"
    assert found["P7b"]["target"] == "ratio <= 0.50"
    summary = r"result: (\d+ (PASS|WARN|MISS|FAIL)(, )?)+; \d+ s; load average .*; exit 0"
    assert re.fullmatch(summary, lines[-1]), lines[-1]
    assert "jsonschema validator" in found["P7a"]["what"]
    assert "x json.loads alone (no validation)" in found["P7a"]["what"]


def _bench() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ralph_bench", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ralph_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_verdicts_pass_warn_fail_and_a_known_miss() -> None:
    bench: object = _bench()
    target_cls, result_cls = bench.Target, bench.Result  # type: ignore[attr-defined]

    def verdict(mode: str, ratio: float, missed: tuple[float, str] | None = None) -> str:
        r = result_cls("P9", target_cls("ratio", 1.5, missed=missed), "x", ratio=ratio)
        r.judge(mode)
        return str(r.verdict)

    assert [verdict("full", x) for x in (1.0, 1.6)] == ["PASS", "FAIL"]
    assert [verdict("quick", x) for x in (1.0, 2.9, 3.1)] == ["PASS", "WARN", "FAIL"]
    known = (20.0, "why")
    # a known miss is still a FAIL in full mode; quick mode fails beyond twice its figure
    assert [verdict("full", x, known) for x in (1.0, 21.0)] == ["PASS", "FAIL"]
    assert [verdict("quick", x, known) for x in (1.0, 39.0, 41.0)] == ["PASS", "MISS", "FAIL"]
