"""A fake agent CLI for loop tests: installed under a CLI's name (``claude``, ``codex``,
``aider``, ...) on a temporary PATH, it plays a plan of steps, one per call.

The plan is a JSON file named by the environment variable ``FAKE_CLI_PLAN``: a list of
steps; call k (1-based, counted in ``<plan>.count``) plays step k, the last step repeats.
Each call appends ``{"argv", "stdin_bytes", "stdin_sha256", "prompt_file_bytes"}`` to
``<plan>.calls.jsonl``. A step is an object with any of:

- ``write``: {relative path: text} files to write (the agent's "useful work"), first;
- ``delete``: relative paths of files to delete, next;
- ``stdout`` / ``stderr``: lists of lines to print (``{reset}`` becomes now + ``reset_in``
  seconds, as an integer epoch);
- ``filler``: bytes of filler to print on stdout (in 1 MiB lines);
- ``sleep``: seconds to sleep after printing;
- ``kill``: die by SIGKILL (a crash) after printing;
- ``exit``: the exit status (default 0).

Run as a script; it imports only the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    """Play the next step of the plan; return its exit status."""
    plan_path = Path(os.environ["FAKE_CLI_PLAN"])
    steps = json.loads(plan_path.read_text("utf-8"))
    counter = plan_path.with_name(plan_path.name + ".count")
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    step = steps[min(n, len(steps)) - 1]
    data = sys.stdin.buffer.read()
    prompt_file = os.environ.get("PYTEST_RALPH_PROMPT_FILE", "")
    record = {"argv": sys.argv, "stdin_bytes": len(data),
              "stdin_sha256": hashlib.sha256(data).hexdigest(),
              "prompt_file_bytes": (Path(prompt_file).stat().st_size
                                    if prompt_file and Path(prompt_file).exists() else None)}
    with plan_path.with_name(plan_path.name + ".calls.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    for rel, text in step.get("write", {}).items():
        target = Path.cwd() / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for rel in step.get("delete", []):
        (Path.cwd() / rel).unlink(missing_ok=True)
    reset = str(int(time.time() + float(step.get("reset_in", 0))))
    for line in step.get("stdout", []):
        sys.stdout.write(line.replace("{reset}", reset) + "\n")
    sys.stdout.flush()
    filler = int(step.get("filler", 0))
    chunk = b"x" * (1024 * 1024 - 1) + b"\n"
    while filler > 0:
        sys.stdout.buffer.write(chunk[:filler])
        filler -= len(chunk)
    sys.stdout.flush()
    for line in step.get("stderr", []):
        sys.stderr.write(line.replace("{reset}", reset) + "\n")
    sys.stderr.flush()
    time.sleep(float(step.get("sleep", 0)))
    if step.get("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    return int(step.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())
