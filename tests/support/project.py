"""A project folder driven from the outside, the way a user drives one: real child processes
of ``python -m pytest`` (the gate, ``--ralph``, ``--ralph-init``, ``--ralph-status``) and of the
Stop hook ``python -m pytest_ralph.hook``, fake agent CLIs on its ``PATH``
(``tests/support/fake_cli.py``), and readers of what the runs left in its state folder.

:class:`Project` is the harness; :class:`Done` is what one child process gave (also read as a
Stop hook's answer); :func:`run` runs one command the way the harness does.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import Any

from pytest_ralph.state.history import History
from tests.support.env import clean_env
from tests.support.loop import report_text

#: The fake agent CLI that :meth:`Project.cli` installs under a CLI's name.
FAKE_CLI = Path(__file__).with_name("fake_cli.py")

#: A Stop payload for a project: ``payload(session, cwd, **fields)`` gives the JSON object
#: (a dict, or its text or bytes) that :meth:`Project.stop` writes to the hook's stdin.
PayloadMaker = Callable[..., dict[str, Any] | str | bytes]


@dataclass(frozen=True)
class Done:
    """A finished child process: its exit code and its stdout and stderr (UTF-8 text).

    The properties :attr:`answer`, :attr:`blocked`, :attr:`reason` and :attr:`system` read
    stdout as a Stop hook's answer without checking its shape; :meth:`check`, :meth:`block`,
    :meth:`allow` and :meth:`quiet` assert the shape Claude Code expects.
    """

    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """stdout and stderr, in that order (for assertion messages)."""
        return self.stdout + self.stderr

    @property
    def answer(self) -> dict[str, Any]:
        """stdout as a JSON object (``{}`` when stdout is empty)."""
        return json.loads(self.stdout) if self.stdout.strip() else {}

    @property
    def blocked(self) -> bool:
        """Whether the answer blocks the stop (``"decision": "block"``)."""
        return self.answer.get("decision") == "block"

    @property
    def reason(self) -> str:
        """The answer's ``reason`` ("" when none)."""
        return str(self.answer.get("reason", ""))

    @property
    def system(self) -> str:
        """The answer's ``systemMessage`` ("" when none)."""
        return str(self.answer.get("systemMessage", ""))

    def check(self) -> None:
        """What every answer must be: exit 0, UTF-8, at most one line on stdout, no
        traceback anywhere."""
        assert self.returncode == 0, self
        assert "Traceback" not in self.stdout and "Traceback" not in self.stderr, self
        assert self.stdout.count("\n") <= 1, self

    def block(self) -> dict[str, str]:
        """The block answer, checked to be exactly one JSON object line with the three keys
        Claude Code reads (never ``message`` instead of ``reason``) and a bounded reason."""
        self.check()
        assert self.stdout.endswith("\n") and self.stdout.count("\n") == 1, self
        answer: dict[str, str] = json.loads(self.stdout)
        assert set(answer) == {"decision", "reason", "systemMessage"}, answer
        assert answer["decision"] == "block"
        reason = answer["reason"]
        assert isinstance(reason, str) and reason.strip()
        assert len(reason.encode("utf-16-le")) // 2 < 10000
        assert isinstance(answer["systemMessage"], str)
        return answer

    def allow(self) -> str | None:
        """The stop goes ahead: ``None`` for an empty stdout, else the ``systemMessage`` of
        the one JSON object printed."""
        self.check()
        if not self.stdout:
            return None
        answer = json.loads(self.stdout)
        assert set(answer) == {"systemMessage"}, answer
        assert isinstance(answer["systemMessage"], str)
        return str(answer["systemMessage"])

    def quiet(self) -> None:
        """Nothing at all: the stop goes ahead and nothing is said."""
        self.check()
        assert (self.stdout, self.stderr) == ("", ""), self


def run(argv: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float,
        stdin: bytes | str | None = None) -> Done:
    """Run ``argv`` to its end in ``cwd`` with ``env`` and ``stdin`` (``/dev/null`` when
    ``None``); both streams are decoded as UTF-8 (an undecodable byte fails the test).
    Raises :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    feed: dict[str, Any] = {"stdin": subprocess.DEVNULL} if data is None else {"input": data}
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, timeout=timeout,
                          check=False, **feed)
    return Done(proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8"))


def stop_payload(session: str | None, cwd: Path | str, **fields: Any) -> dict[str, Any]:
    """The Stop payload of the fields every Claude Code version sends (``session_id``, ``cwd``,
    ``hook_event_name``, ``stop_hook_active``) plus ``fields``; a field whose value is
    ``None`` is left out."""
    payload = {"session_id": session, "cwd": str(cwd), "hook_event_name": "Stop",
               "stop_hook_active": False, **fields}
    return {k: v for k, v in payload.items() if v is not None}


class Project:
    """A project folder (``prd.json``, ``pytest.ini``) and the children run in it.

    ``env`` is the environment of every child (default :func:`tests.support.env.clean_env`),
    ``python`` their interpreter, ``flags`` come before the arguments of every
    ``python -m pytest``, and each child may take ``timeout`` seconds. :meth:`stop` sends
    ``payload(session, cwd, **fields)`` (default :func:`stop_payload`) with ``session`` the
    project's default session.
    """

    def __init__(self, root: Path, *, env: dict[str, str] | None = None,
                 python: str = sys.executable, flags: Sequence[str] = (),
                 timeout: float = 300.0, session: str | None = None,
                 payload: PayloadMaker = stop_payload) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.env = clean_env() if env is None else env
        self.python = python
        self.flags = tuple(flags)
        self.timeout = timeout
        self.default_session = session
        self.payload = payload
        #: The id of the run :meth:`arm` armed last ("" before).
        self.run_id = ""

    # -- files -------------------------------------------------------------------------------

    @property
    def prd(self) -> Path:
        return self.root / "prd.json"

    @property
    def ini(self) -> Path:
        return self.root / "pytest.ini"

    @property
    def state(self) -> Path:
        """The state folder, ``.pytest_ralph``."""
        return self.root / ".pytest_ralph"

    @property
    def db(self) -> Path:
        """The run history, ``.pytest_ralph/ralph.db``."""
        return self.state / "ralph.db"

    @property
    def marker(self) -> Path:
        """The arming file of the Claude Code driver."""
        return self.root / ".claude" / "pytest-ralph.local.json"

    @property
    def settings_file(self) -> Path:
        """Where ``--ralph-init --ralph-driver claude`` puts the Stop hook by default (the
        local scope)."""
        return self.root / ".claude" / "settings.local.json"

    @property
    def project_settings(self) -> Path:
        """The shared settings file (``--ralph-hook-scope project``)."""
        return self.root / ".claude" / "settings.json"

    def write_prd(self, *stories: dict[str, Any], project: str = "demo", **top: Any) -> None:
        """Write ``prd.json``: ``{"project": project, **top, "userStories": stories}``."""
        data = {"project": project, **top, "userStories": list(stories)}
        self.prd.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                            encoding="utf-8")

    def edit_prd(self, edit: Callable[[dict[str, Any]], None]) -> None:
        """Change ``prd.json`` in place: ``edit`` changes the loaded object."""
        data = json.loads(self.prd.read_text(encoding="utf-8"))
        edit(data)
        self.prd.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                            encoding="utf-8")

    def write_ini(self, lines: str = "") -> None:
        """Write ``pytest.ini``: ``[pytest]`` and then ``lines``."""
        self.ini.write_text(f"[pytest]\n{lines}", encoding="utf-8")

    def write(self, name: str, text: str = "ok\n") -> None:
        """Write the project file ``name`` (``"ok\\n"`` by default)."""
        (self.root / name).write_text(text, encoding="utf-8")

    def armed(self) -> dict[str, Any]:
        """The arming file, loaded."""
        return dict(json.loads(self.marker.read_text(encoding="utf-8")))

    def session(self) -> str:
        """The session named by the arming file ("" while no session adopted the run)."""
        return str(self.armed()["session"])

    # -- commands ----------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, stdin: bytes | str | None = None,
            cwd: Path | None = None, timeout: float | None = None) -> Done:
        """Run ``argv`` in the project (or in ``cwd``) with its environment."""
        return run(argv, cwd=cwd or self.root, env=self.env, stdin=stdin,
                   timeout=self.timeout if timeout is None else timeout)

    def pytest(self, *args: str, python: str | None = None) -> Done:
        """``python -m pytest <flags> *args`` in the project."""
        return self.run([python or self.python, "-m", "pytest", *self.flags, *args])

    def ralph(self, *args: str, ini: str | None = None) -> Done:
        """``pytest --ralph *args``, writing ``pytest.ini`` first with ``ini`` when given."""
        if ini is not None:
            self.write_ini(ini)
        return self.pytest("--ralph", *args)

    def arm(self, *args: str) -> str:
        """``pytest --ralph-init --ralph-driver claude *args``, which must succeed; the armed
        run's id (also kept in :attr:`run_id`)."""
        done = self.pytest("--ralph-init", "--ralph-driver", "claude", *args)
        assert done.returncode == 0, done.text
        self.run_id = str(self.armed()["run"])
        return self.run_id

    def status(self) -> str:
        """The output of ``pytest --ralph-status``, which must succeed."""
        done = self.pytest("--ralph-status")
        assert done.returncode == 0, done.text
        return done.stdout

    def hook(self, payload: dict[str, Any] | str | bytes, *, cwd: Path | None = None) -> Done:
        """Run the Stop hook as Claude Code does, ``payload`` (a JSON object, or its text) on
        its stdin, in the project (or in ``cwd``)."""
        data = json.dumps(payload) if isinstance(payload, dict) else payload
        return self.run([self.python, "-m", "pytest_ralph.hook"], stdin=data, cwd=cwd)

    def stop(self, session: str | EllipsisType | None = ..., *, cwd: Path | None = None,
             **fields: Any) -> Done:
        """One Stop of ``session`` (default: the project's session) with the payload
        ``fields``, in the project or in its subfolder ``cwd`` (where the hook runs too)."""
        where = cwd or self.root
        sid = self.default_session if session is ... else session
        return self.hook(self.payload(sid, where, **fields), cwd=where)

    # -- fake agent CLIs ---------------------------------------------------------------------

    @property
    def bin(self) -> Path:
        """The folder of the fake CLIs, beside the project: an agent command's own folder stays
        writable in the sandbox (the rest of /tmp is private to the agent)."""
        return self.root.parent / "bin"

    @property
    def plan(self) -> Path:
        """The plan the fake CLIs play (see ``tests/support/fake_cli.py``)."""
        return self.bin / "plan.json"

    def cli(self, name: str) -> None:
        """Put the fake CLI on the project's ``PATH`` under ``name`` (``claude``, ``aider``)."""
        self.bin.mkdir(exist_ok=True)
        shim = self.bin / name
        shim.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {name!r}\n"
                        f"runpy.run_path({str(FAKE_CLI)!r}, run_name='__main__')\n")
        shim.chmod(0o755)
        path = self.env.get("PATH", "")
        if not path.startswith(f"{self.bin}{os.pathsep}"):
            self.env["PATH"] = f"{self.bin}{os.pathsep}{path}"
        self.env["FAKE_CLI_PLAN"] = str(self.plan)

    def play(self, *steps: dict[str, Any]) -> None:
        """The steps the fake CLIs play, one per call (the last one repeats)."""
        self.plan.write_text(json.dumps(list(steps)))

    def calls(self) -> list[dict[str, Any]]:
        """What the fake CLIs were called with, one record per call."""
        path = self.plan.with_name(self.plan.name + ".calls.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()]

    # -- what the runs left ------------------------------------------------------------------

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (parameters ``args``) in the run history, opened read-only."""
        with closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)) as conn:
            return [tuple(r) for r in conn.execute(sql, args).fetchall()]

    def history(self) -> History:
        """The run history, opened read-only."""
        return History.open(self.db, readonly=True)

    def run_row(self) -> tuple[str, int | None, str]:
        """``(status, exit_code, reason)`` of the armed run."""
        (row,) = self.rows("SELECT status, exit_code, reason FROM runs WHERE id = ?",
                           self.run_id)
        return str(row[0]), row[1], str(row[2])

    def driver_session(self) -> str:
        """The Claude Code session that drives the armed run."""
        (row,) = self.rows("SELECT session_id FROM drivers WHERE run_id = ?", self.run_id)
        return str(row[0])

    def iterations(self) -> list[tuple[int, str, int, int]]:
        """``(n, story, passing, total)`` of each check of the armed run, in order."""
        return [(int(n), str(s), int(p), int(t)) for n, s, p, t in self.rows(
            "SELECT n, story, passing, total FROM iterations WHERE run_id = ? ORDER BY n",
            self.run_id)]

    def report(self) -> str:
        """The text of the one Markdown report of the state folder."""
        return report_text(self.root)

    def iteration_file(self, n: int, name: str) -> Path:
        """The file ``name`` of iteration ``n`` of the one run of the state folder."""
        (path,) = (self.state / "runs").glob(f"*/iteration-{n:03d}/{name}")
        return path

    def hook_log(self) -> str:
        """The armed run's ``hook.log``, headed by its path (``(none)`` when absent)."""
        path = self.state / "runs" / self.run_id / "hook.log"
        text = path.read_text(encoding="utf-8") if path.is_file() else "(none)"
        return f"--- {path} ---\n{text}"
