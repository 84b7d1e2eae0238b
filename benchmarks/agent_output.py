"""Benchmark: streaming a large agent output through run_agent, with and without redaction.

Runs :func:`pytest_ralph.agent.run_agent` on a child that writes N MiB (default 200) of
output to stdout: mostly short lines, some long ones (300 KiB, and 1.5 MiB, over
``MAX_LINE_BYTES``, so they reach the reader cut), Claude-Code-style ``stream-json`` records
and ``"type": "result"`` lines, read by the Claude Code preset's output reader. Each
measurement runs in a fresh interpreter, so the controller's peak RSS (``ru_maxrss``) of one
run does not carry over to the next; it is read before and after the ``run_agent`` call.

It prints wall time, throughput and the controller's CPU time and peak-RSS growth for N/10
and N MiB, without and with a :class:`~pytest_ralph.redact.Redactor` holding one secret
(which the child writes every 100 short lines). The log is streamed, so memory should stay
flat: the growth ratio N vs N/10 should be about 1 (not 10). The figures are informational:
the script exits non-zero only if a run itself fails (not ``ok``, a wrong log, a leaked secret).

Usage: python benchmarks/agent_output.py [--mb 200] [--small 20]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1024 * 1024

#: The secret of the redaction runs (the child gets it from its environment).
SECRET_NAME = "BENCH_API_KEY"
SECRET = "sk-bench-0123456789abcdefghij"

#: The agent: writes ``argv[1]`` MiB made of one repeated ~3.7 MiB block, then a final
#: result record; with ``BENCH_API_KEY`` set, every 100th short line holds that value.
CHILD = r'''
import json, os, sys
target = int(float(sys.argv[1]) * 1024 * 1024)
secret = os.environ.get("BENCH_API_KEY", "")
parts = []
for i in range(19000):
    if secret and i % 100 == 0:
        parts.append(f"using key {secret} for request {i}\n")
    else:
        parts.append(f"[{i:05d}] ordinary progress output " + "x" * (i % 120) + "\n")
    if i % 95 == 0:
        msg = {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "thinking about step %d " % i + "y" * 300}]}}
        parts.append(json.dumps(msg) + "\n")
    if i % 4000 == 0:
        parts.append(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                                 "num_turns": i, "total_cost_usd": 0.001}) + "\n")
    if i % 9000 == 0:
        parts.append("L" * (300 * 1024) + "\n")
    if i == 10000:
        parts.append("H" * (1536 * 1024) + "\n")
block = "".join(parts).encode()
out = sys.stdout.buffer
written = 0
while written + len(block) <= target:
    out.write(block)
    written += len(block)
rest = block[:target - written]
rest = rest[:rest.rfind(b"\n") + 1]
out.write(rest)
final = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 42,
         "total_cost_usd": 1.25, "usage": {"input_tokens": 1000, "output_tokens": 2000}}
out.write(json.dumps(final).encode() + b"\n")
out.flush()
'''


def _maxrss_mib() -> float:
    """This process's peak RSS so far, in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _count_in_file(path: Path, needle: bytes) -> int:
    """Occurrences of ``needle`` in the file, read 1 MiB at a time."""
    count = 0
    tail = b""
    with path.open("rb") as f:
        while block := f.read(MIB):
            data = tail + block
            count += data.count(needle)
            # Carry the bytes that could start an occurrence (too few to hold a whole one).
            keep = len(needle) - 1
            tail = data[-keep:] if keep else b""
    return count


def worker(mb: float, redact: bool) -> int:
    """One measurement, in this (fresh) process; prints one JSON object."""
    from pytest_ralph.agent import run_agent
    from pytest_ralph.presets import PRESETS
    from pytest_ralph.redact import Redactor

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        child = root / "agent.py"
        child.write_text(CHILD, encoding="utf-8")
        env = {SECRET_NAME: SECRET} if redact else {}
        redactor = Redactor.from_env(env) if redact else None
        reader = PRESETS["claude"].reader()
        gc.collect()
        before = _maxrss_mib()
        cpu0 = _cpu()
        start = time.perf_counter()
        run = run_agent([sys.executable, str(child), str(mb)], prompt="benchmark",
                        prompt_file=root / "prompt.md", cwd=root, timeout=3600,
                        log_path=root / "agent.log", env=env, reader=reader,
                        redactor=redactor)
        wall = time.perf_counter() - start
        cpu = _cpu() - cpu0
        after = _maxrss_mib()
        log = root / "agent.log"
        size = log.stat().st_size
        leaked = _count_in_file(log, SECRET.encode())
        redacted = _count_in_file(log, f"[redacted ${SECRET_NAME}]".encode())
    problems = []
    if run.outcome != "ok":
        problems.append(f"outcome {run.outcome} ({run.describe()})")
    if run.cost_usd != 1.25 or run.turns != 42:
        problems.append(f"reader missed the final result (cost {run.cost_usd}, "
                        f"turns {run.turns})")
    if leaked:
        problems.append(f"secret written {leaked} times")
    if redact and not redacted:
        problems.append("no redaction in the log")
    if not redact and abs(size - mb * MIB) > 2 * MIB:
        problems.append(f"log holds {size} bytes")
    print(json.dumps({"mb": mb, "redact": redact, "wall": wall, "cpu": cpu, "before": before,
                      "after": after, "log_bytes": size, "redacted": redacted,
                      "problems": problems}))
    return 1 if problems else 0


def measure(mb: float, redact: bool) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter."""
    argv = [sys.executable, __file__, "--worker", "--mb", str(mb)]
    if redact:
        argv.append("--redact")
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    out = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    lines = out.stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"worker {argv} failed (exit {out.returncode}):\n{out.stderr}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a"


def main() -> int:
    """Run the four measurements and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="MiB of the large run")
    parser.add_argument("--small", type=float, default=None,
                        help="MiB of the small run (default: a tenth of --mb)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redact", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.mb, args.redact)
    small = args.small if args.small is not None else args.mb / 10
    rows = {(mb, redact): measure(mb, redact)
            for redact in (False, True) for mb in (small, args.mb)}
    print(f"run_agent on an agent writing {small:g} and {args.mb:g} MiB of output "
          f"(short, long and JSON lines; Claude Code result reader); one fresh interpreter "
          f"per run; {os.cpu_count()} CPUs")
    print(f"{'MiB':>6} {'redactor':>9} {'wall s':>7} {'MiB/s':>7} {'CPU s':>6} "
          f"{'RSS before':>10} {'RSS peak':>9} {'growth':>7}  check")
    failed = False
    for (mb, redact), r in rows.items():
        wall = float(r["wall"])
        before = float(r["before"])
        after = float(r["after"])
        problems = r["problems"]
        failed = failed or bool(problems)
        check = "ok" if not problems else "; ".join(problems)
        print(f"{mb:>6g} {'1 secret' if redact else 'none':>9} {wall:>7.2f} "
              f"{mb / wall:>7.1f} {float(r['cpu']):>6.2f} "
              f"{before:>7.1f} MiB {after:>5.1f} MiB {after - before:>3.1f} MiB  {check}")
    print()
    for redact in (False, True):
        s, b = rows[(small, redact)], rows[(args.mb, redact)]
        gs = float(s["after"]) - float(s["before"])
        gb = float(b["after"]) - float(b["before"])
        label = "with a redactor" if redact else "no redactor    "
        print(f"{label}: peak RSS growth {args.mb:g}/{small:g} MiB = "
              f"{gb:.1f}/{gs:.1f} MiB, ratio {_ratio(gb, gs)} (flat memory: ~1, not "
              f"{args.mb / small:g}); peak RSS ratio "
              f"{_ratio(float(b['after']), float(s['after']))}")
    for mb in (small, args.mb):
        plain = float(rows[(mb, False)]["wall"])
        red = float(rows[(mb, True)]["wall"])
        print(f"redaction cost at {mb:g} MiB: wall time ratio with/without "
              f"{_ratio(red, plain)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
