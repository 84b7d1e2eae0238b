"""Benchmark: the Claude Code Stop hook when no loop is armed.

Claude Code runs the Stop hook each time a session ends a reply, in every project where the
hook is installed, armed or not. This script times, in fresh processes, the median wall time
(seconds) of:

- ``python -c pass``: the interpreter alone (the floor);
- the hook as ``pytest --ralph-init`` installs it (``python -P -m pytest_ralph.hook``; ``-I``
  on Python 3.10) with a Stop payload on stdin and no arming file (the path every reply takes
  when no loop is armed);
- the same with an arming file owned by another session (the path of every other session);
- ``python -c "import pytest"``: what the hook would cost if it imported pytest first.

It prints each median, its ratio to the bare interpreter, and checks the issue's target:
the unarmed hook answers in under 0.1 s median. It also lists the heavy modules (pytest,
jsonschema, yaml, sqlite3) the unarmed hook imported, which must be none. Exit status 1 when
the target is missed or a heavy module was imported (a run that does not answer exit 0 with
empty stdout also fails).

Usage: python benchmarks/hook_startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_ralph.claude_settings import SAFE_PATH_FLAG

#: The target of issue 6: median seconds of the unarmed hook.
TARGET_SECONDS = 0.1

HEAVY = ("pytest", "_pytest", "jsonschema", "yaml", "sqlite3")


def _time(argv: list[str], stdin: bytes, cwd: Path, env: dict[str, str], runs: int) -> float:
    """Median wall seconds of ``runs`` runs of ``argv``; each must exit 0 with empty stdout."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(argv, input=stdin, cwd=cwd, env=env, capture_output=True,
                              check=False)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0 or done.stdout.strip():
            raise SystemExit(f"{argv} answered exit {done.returncode}, stdout "
                             f"{done.stdout[:200]!r}, stderr {done.stderr[-500:]!r}")
    return statistics.median(times)


def _heavy_imports(cwd: Path, env: dict[str, str], payload: bytes) -> list[str]:
    """The heavy modules loaded after the unarmed hook ran in this interpreter."""
    code = ("import io, sys\nfrom pytest_ralph import hook\n"
            f"hook.main(io.BytesIO({payload!r}), io.BytesIO(), io.BytesIO(), "
            "{'CLAUDE_PROJECT_DIR': sys.argv[1]})\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(cwd)], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)
    return [m for m in done.stdout.strip().split(",") if m]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per case (default 30)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_RALPH_CONTROLLER",
                                                            "CLAUDE_PROJECT_DIR")}
    with tempfile.TemporaryDirectory(prefix="ralph-hook-bench-") as tmp:
        project = Path(tmp) / "my project"
        project.mkdir()
        payload = json.dumps({
            "session_id": "5c6a6c2d-0000-4000-8000-000000000001",
            "transcript_path": str(project / "t.jsonl"), "cwd": str(project),
            "hook_event_name": "Stop", "stop_hook_active": False,
            "last_assistant_message": "Done: the tests pass now.\n" * 20}).encode()
        py = sys.executable
        bare = _time([py, "-c", "pass"], b"", project, env, args.runs)
        hook = [py, SAFE_PATH_FLAG, "-m", "pytest_ralph.hook"]
        unarmed = _time(hook, payload, project, env, args.runs)
        (project / ".claude").mkdir()
        (project / ".claude" / "pytest-ralph.local.json").write_text(json.dumps({
            "version": 1, "run": "20261130-000000-000000",
            "state_dir": str(project / ".pytest_ralph"), "rootdir": str(project),
            "session": "another-session"}), encoding="utf-8")
        other = _time(hook, payload, project, env, args.runs)
        (project / ".claude" / "pytest-ralph.local.json").unlink()
        pytest_import = _time([py, "-c", "import pytest"], b"", project, env,
                              max(args.runs // 3, 5))
        heavy = _heavy_imports(project, env, payload)
    rows = [("python -c pass (the floor)", bare, None),
            ("hook, no loop armed", unarmed, TARGET_SECONDS),
            ("hook, loop armed by another session", other, TARGET_SECONDS),
            ("python -c 'import pytest' (reference)", pytest_import, None)]
    print(f"Stop hook startup, median of {args.runs} runs each ({sys.version.split()[0]}):")
    for name, seconds, target in rows:
        goal = f"  target < {target:.2f} s" if target else ""
        print(f"  {name:<40} {seconds:7.3f} s  {seconds / bare:5.2f}x the floor{goal}")
    print(f"  heavy modules imported by the unarmed hook: {', '.join(heavy) or 'none'}")
    ok = unarmed < TARGET_SECONDS and other < TARGET_SECONDS and not heavy
    print("result: " + ("every target met" if ok else "TARGET MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
