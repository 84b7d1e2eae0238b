"""The sandbox (issue 20): agent runs and check phases confined by bubblewrap.

Real bubblewrap, real processes: each test runs ``pytest --ralph`` in a subprocess with a
scripted agent (a Python script in the project) that tries to write where it may and where it
may not, and asserts what reached the disk. CI installs bubblewrap (``.ci/run``): these tests
never skip there (``CI`` set makes a missing ``bwrap`` a failure).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.loop.settings import resolve
from pytest_ralph.sandbox.bwrap import (
    HIDDEN_ENV,
    PYTEST_TEMPROOT,
    Confinement,
    Sandbox,
    SandboxError,
    _environment_hidden,
    agent_confinement,
    check_confinement,
    cli_state_paths,
    command_paths,
    prepare_state_paths,
    probe,
    wrap,
)
from tests.support.bwrap import require_bwrap
from tests.support.prd import story

require_bwrap()


def files_criterion(path: str) -> dict[str, str]:
    return {"text": f"{path} exists", "exists": path}


@pytest.fixture
def home(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home folder outside the project and outside /tmp (pytester puts HOME inside the
    project, and /tmp is private to a confined command), as a user's is."""
    import pwd
    base = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"
    base.mkdir(parents=True, exist_ok=True)
    import tempfile
    folder = Path(tempfile.mkdtemp(dir=base))
    (folder / ".bashrc").write_text("# the user's\n")
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("PYTEST_RALPH_PYCACHE", "")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_loop(pytester: pytest.Pytester, agent_body: str, *args: str,
             sandbox: str = "required") -> pytest.RunResult:
    (pytester.path / "agent.py").write_text(agent_body, encoding="utf-8")
    return pytester.runpytest_subprocess(
        "--ralph", "--ralph-agent", f"{sys.executable} agent.py", "--ralph-max-iterations",
        "1", "-o", f"ralph_sandbox={sandbox}", *args)


# -- probe --------------------------------------------------------------------------------


def test_probe_finds_bubblewrap_and_says_so() -> None:
    sb = probe("auto")
    assert sb.confined and sb.bwrap and os.path.isabs(sb.bwrap)
    assert sb.version.startswith("bubblewrap")
    assert sb.describe().startswith("confined by bubblewrap")


@pytest.mark.parametrize("mode", ["auto", "required", "off"])
def test_each_sandbox_mode_is_a_value_of_the_setting(mode: str, tmp_path: Path) -> None:
    for cli, ini in (({"sandbox": mode}, {}), ({}, {"ralph_sandbox": mode})):
        settings = resolve(cli=cli, env={}, ini=ini.get, ini_file="pytest.ini",
                           invocation_dir=tmp_path, rootdir=tmp_path)
        assert settings.sandbox == mode


def test_probe_off_confines_nothing_and_says_why() -> None:
    sb = probe("off", source="--ralph-sandbox")
    assert not sb.confined
    assert sb.describe() == "NOT confined (ralph_sandbox = off from --ralph-sandbox)"
    assert wrap(sb, ["true"], agent_confinement(sb, project=Path("/x"), state_dir=Path(
        "/x/.s"))) == ["true"]


def test_probe_without_bwrap_auto_runs_unconfined_required_refuses(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # no bwrap there
    sb = probe("auto", env=env)
    assert not sb.confined
    assert "bwrap is not installed (install bubblewrap (Debian/Ubuntu: apt-get install " \
        "bubblewrap))" in sb.reason
    with pytest.raises(SandboxError, match=r"ralph_sandbox = required .* cannot be confined: "
                                           r"bwrap is not installed"):
        probe("required", source="ini ralph_sandbox (tox.ini)", env=env)


def test_a_bwrap_that_cannot_make_a_sandbox_is_not_taken_for_one(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    sb = probe("auto", env={"PATH": str(tmp_path)})
    assert not sb.confined
    assert "cannot make a sandbox here (exit 1: bwrap: No permissions to creating new " \
        "namespace)" in sb.reason


def _fake_bwrap(folder: Path, body: str) -> dict[str, str]:
    """A ``bwrap`` shell script in ``folder`` (its own path, so probe() tries it afresh);
    returns the environment whose PATH finds it."""
    fake = folder / "bwrap"
    fake.write_text(body)
    fake.chmod(0o755)
    return {"PATH": str(folder)}


def test_a_bwrap_that_cannot_start_is_not_taken_for_one(tmp_path: Path) -> None:
    env = _fake_bwrap(tmp_path, "#!/nonexistent/interpreter\n")
    sb = probe("auto", env=env)
    assert not sb.confined
    assert f"bwrap ({tmp_path / 'bwrap'}) cannot run: " in sb.reason
    with pytest.raises(SandboxError, match="cannot run"):
        probe("required", env=env)


def test_a_bwrap_message_that_is_not_utf8_is_shown_replaced(tmp_path: Path) -> None:
    env = _fake_bwrap(tmp_path, "#!/bin/sh\nprintf 'bwrap: \\377 refused\\n' >&2\nexit 1\n")
    sb = probe("auto", env=env)
    assert "cannot make a sandbox here (exit 1: bwrap: \ufffd refused)" in sb.reason


def test_the_version_is_what_bwrap_version_prints(tmp_path: Path) -> None:
    # (an exit code of --version does not matter: what it printed is the version)
    env = _fake_bwrap(tmp_path, '#!/bin/sh\n[ "$1" = --version ] && { echo "bubblewrap 9.9"; '
                      'exit 1; }\nexit 0\n')
    sb = probe("auto", env=env)
    assert sb.confined and sb.version == "bubblewrap 9.9"
    assert sb.describe() == "confined by bubblewrap 9.9"


def test_a_bwrap_whose_version_cannot_be_asked_is_bubblewrap(tmp_path: Path) -> None:
    # It works once (the probe), then is gone when asked its version.
    env = _fake_bwrap(tmp_path, '#!/bin/sh\nrm -f "$0"\nexit 0\n')
    sb = probe("auto", env=env)
    assert sb.confined and sb.version == "bubblewrap"


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A folder outside /tmp (which is private to a confined command)."""
    import pwd
    import tempfile
    base = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _inside(confinement: Confinement, code: str, env: dict[str, str] | None = None) -> Any:
    """What ``code`` prints as JSON, run by Python under the real bubblewrap (this Python's
    folders bound back when the private /tmp would hide them, as the loop does: a checkout
    and its virtualenv under /tmp)."""
    hidden = _environment_hidden(confinement.chdir)
    confinement = dataclasses.replace(confinement,
                                      readonly=(*confinement.readonly, *hidden))
    argv = wrap(probe("required"), [sys.executable, "-c", code], confinement)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env=env if env is not None else dict(os.environ))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_confined_command_sees_no_session_socket_or_variable(outside: Path) -> None:
    env = {**os.environ, **{name: "/run/user/0/bus" for name in HIDDEN_ENV},
           "TMPDIR": "/somewhere/else"}
    seen = _inside(Confinement(chdir=outside, env=(("RALPH_GIVEN", "yes"),)), """
import json, os
names = (*HIDDEN, "TMPDIR", "RALPH_GIVEN")
print(json.dumps({"run": sorted(os.listdir("/run")), "tmp": os.listdir("/tmp"),
                  "env": {k: v for k, v in os.environ.items() if k in names}}))
""".replace("HIDDEN", repr(HIDDEN_ENV)), env)
    resolv = os.path.realpath("/etc/resolv.conf")
    # Only the folder resolv.conf lives in (systemd-resolved) is bound back into /run.
    expected_run = [resolv.split("/")[2]] if resolv.startswith("/run/") else []
    assert seen["run"] == expected_run
    # pytest's folder, made empty, and this Python's folders when they live in /tmp.
    ours = {os.path.realpath(p).split("/")[2] for p in (sys.prefix, sys.executable)
            if os.path.realpath(p).startswith("/tmp/")}
    assert sorted(seen["tmp"]) == sorted({PYTEST_TEMPROOT.rsplit("/", 1)[1], *ours})
    assert seen["env"] == {"TMPDIR": "/tmp", "RALPH_GIVEN": "yes"}


def test_a_private_home_may_be_written_and_keeps_nothing(outside: Path) -> None:
    home = outside / "home"
    home.mkdir()
    (home / "mine.txt").write_text("the user's")
    seen = _inside(Confinement(chdir=outside, home=home), """
import json, os
home = HOME
open(os.path.join(home, "new.txt"), "w").write("made inside")
try:
    open(os.path.join(home, "mine.txt"), "w").write("changed")
    changed = True
except OSError:
    changed = False
print(json.dumps({"changed": changed, "mine": open(os.path.join(home, "mine.txt")).read(),
                  "entries": sorted(os.listdir(home))}))
""".replace("HOME", repr(str(home)), 1))
    assert seen == {"changed": False, "mine": "the user's", "entries": ["mine.txt", "new.txt"]}
    assert sorted(p.name for p in home.iterdir()) == ["mine.txt"]
    assert (home / "mine.txt").read_text() == "the user's"


WRITES = """
import json, os
out = {}
for path in PATHS:
    try:
        open(path, "w").write("x")
        out[path] = "written"
    except OSError as exc:
        out[path] = exc.strerror
print(json.dumps(out))
"""


def test_a_writable_folder_inside_an_enclosing_read_only_one_stays_writable(
        outside: Path) -> None:
    """The merge queue's integration worktree lives in the state folder, read-only to the gate
    (:attr:`Confinement.enclosing`); a read-only path inside it (the PRD) stays read-only, and
    an enclosing path that is also writable is writable."""
    state = outside / "state"
    tree = state / "lanes" / "run" / "integration"
    tree.mkdir(parents=True)
    other = outside / "writable-too"
    other.mkdir()
    (tree / "prd.json").write_text("{}")
    paths = [str(state / "forged.txt"), str(tree / "built.txt"), str(tree / "prd.json"),
             str(other / "x.txt")]
    seen = _inside(Confinement(chdir=tree, writable=(tree, other),
                               readonly=(tree / "prd.json",), enclosing=(state, other)),
                   WRITES.replace("PATHS", repr(paths), 1))
    assert seen == {paths[0]: "Read-only file system", paths[1]: "written",
                    paths[2]: "Read-only file system", paths[3]: "written"}
    assert not (state / "forged.txt").exists() and (tree / "prd.json").read_text() == "{}"


def test_a_check_phase_in_the_state_folder_gets_it_read_only_around_it(
        outside: Path) -> None:
    state = outside / ".pytest_ralph"
    tree = state / "lanes" / "run" / "integration"
    tree.mkdir(parents=True)
    results = outside / "results"
    results.mkdir()
    made = check_confinement(probe("required"), project=tree, state_dir=state, results=results,
                             judges=(tree / "prd.json",), pycache=None, around=(outside,))
    assert made.enclosing == (outside, state)
    assert state not in made.readonly
    plain = check_confinement(probe("required"), project=outside, state_dir=state,
                              results=results, judges=(), pycache=None)
    assert plain.enclosing == () and plain.readonly[0] == state


def test_an_xauthority_file_cannot_be_read_inside(monkeypatch: pytest.MonkeyPatch,
                                                  outside: Path) -> None:
    # The X11 cookie would let a program type into the user's terminal.
    (outside / ".Xauthority").write_text("MIT-MAGIC-COOKIE-1 secret")
    monkeypatch.setenv("HOME", str(outside))
    got = _inside(Confinement(chdir=outside), """
import json, os
try:
    print(json.dumps(open(os.path.expanduser("~/.Xauthority")).read()))
except OSError as exc:
    print(json.dumps(type(exc).__name__))
""")
    assert got in ("", "PermissionError")


@pytest.mark.parametrize("exists", [True, False])
def test_resolv_conf_in_run_is_bound_back_only_when_it_is_there(
        monkeypatch: pytest.MonkeyPatch, exists: bool) -> None:
    # systemd-resolved: /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf; a dangling
    # link (resolved not running) is not bound (bwrap would fail on a missing source).
    from pytest_ralph.sandbox import bwrap as sandbox
    target = "/run/systemd/resolve/stub-resolv.conf"
    real_realpath, real_exists = os.path.realpath, os.path.exists
    monkeypatch.setattr(sandbox.os.path, "realpath", lambda p: target if p ==
                        "/etc/resolv.conf" else real_realpath(p))
    monkeypatch.setattr(sandbox.os.path, "exists", lambda p: exists if p == target else
                        real_exists(p))
    args = sandbox.base_args("/usr/bin/bwrap")
    bound = [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]
    assert ("/run/systemd/resolve" in bound) is exists
    assert target not in bound
    assert args.index("--tmpfs", args.index("/var/tmp")) < len(args)
    if exists:
        at = args.index("/run/systemd/resolve")
        assert args[at - 1:at + 2] == ["--ro-bind", "/run/systemd/resolve",
                                       "/run/systemd/resolve"]
        assert args.index("/run") < at  # bound after the empty /run


def test_prepare_state_paths_makes_missing_folders_private_and_leaves_files(
        tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder would go")
    existing = tmp_path / ".codex"
    existing.mkdir(mode=0o755)
    prepare_state_paths([tmp_path / ".claude", tmp_path / ".claude.json",
                         tmp_path / ".cache" / "claude", blocked / "sub", existing,
                         tmp_path / ".local" / "share" / "amp"])
    for made in (tmp_path / ".claude", tmp_path / ".cache" / "claude",
                 tmp_path / ".local" / "share" / "amp"):
        assert made.is_dir() and oct(made.stat().st_mode & 0o777) == "0o700", made
    assert not (tmp_path / ".claude.json").exists()  # a file: bound only when it exists
    assert oct(existing.stat().st_mode & 0o777) == "0o755"  # left as it is
    assert blocked.is_file()


def test_a_home_that_is_the_root_is_not_made_private(tmp_path: Path) -> None:
    sb = Sandbox("required", bwrap="/usr/bin/bwrap")
    args = wrap(sb, ["true"], Confinement(chdir=tmp_path, home=Path("/")))
    assert "--tmpfs" in args and args[args.index("--chdir") + 1] == str(tmp_path)
    tmpfs = [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert "/" not in tmpfs


def test_a_link_in_the_private_home_stays_a_link(outside: Path) -> None:
    home = outside / "home"
    home.mkdir()
    (outside / "dotfiles").mkdir()
    (outside / "dotfiles" / "rc").write_text("set -o vi\n")
    (home / ".rc").symlink_to(outside / "dotfiles" / "rc")
    seen = _inside(Confinement(chdir=outside, home=home), """
import json, os
link = os.path.join(HOME, ".rc")
print(json.dumps([os.path.islink(link), os.readlink(link), open(link).read()]))
""".replace("HOME", repr(str(home)), 1))
    assert seen == [True, str(outside / "dotfiles" / "rc"), "set -o vi\n"]


@pytest.mark.parametrize("home", ["folder", "relative", "missing", ""])
def test_the_home_folder_made_private_is_home_when_it_is_an_absolute_folder(
        home: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "folder").mkdir()
    value = {"folder": str(tmp_path / "folder"), "relative": "folder",
             "missing": str(tmp_path / "missing"), "": ""}[home]
    monkeypatch.setenv("HOME", value)
    monkeypatch.chdir(tmp_path)
    sb = Sandbox("required", bwrap="/usr/bin/bwrap")
    project = tmp_path / "project"
    project.mkdir()
    for confinement in (agent_confinement(sb, project=project, state_dir=project / ".s"),
                        check_confinement(sb, project=project, state_dir=project / ".s",
                                          results=tmp_path / "r", judges=(), pycache=None)):
        assert confinement.home == (Path(value) if home == "folder" else None)


def test_wrap_without_a_sandbox_gives_a_copy_of_the_command(tmp_path: Path) -> None:
    argv = ("python", "-c", "pass")
    got = wrap(Sandbox("off"), argv, Confinement(chdir=tmp_path))
    assert got == ["python", "-c", "pass"] and isinstance(got, list)


def test_required_without_bwrap_is_a_usage_error_before_any_agent_runs(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-001", files_criterion("done.txt")))
    bin_dir = pytester.path.parent / "nobwrap"
    bin_dir.mkdir()
    for tool in ("sh", "true", "git"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = run_loop(pytester, "open('ran', 'w').write('x')\n")
    assert result.ret == 4, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["pytest-ralph: ralph_sandbox = required from -o ralph_sandbox"
                                 ", but the agent cannot be confined: bwrap is not installed*"])
    assert not (pytester.path / "ran").exists()


# -- what the agent may and may not write ---------------------------------------------------


WRITER = r"""
import json, os, pathlib, subprocess, sys
out = {}
def attempt(name, path):
    try:
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(path).write_text("agent was here")
        out[name] = "written"
    except OSError as exc:
        out[name] = exc.strerror
attempt("project", "done.txt")
attempt("state folder", ".pytest_ralph/forged.txt")
attempt("parent of the project", "../agent-parent.txt")
attempt("home", os.path.expanduser("~/.bashrc"))
attempt("new in home", os.path.expanduser("~/.bash_profile"))
if not os.environ.get("UNCONFINED"):  # with the sandbox off these would really be written
    attempt("tmp", "/tmp/agent-tmp-file")
    attempt("etc", "/etc/agent-file")
attempt("claude config", os.path.expanduser("~/.claude/settings.json"))
attempt("extra", os.environ.get("EXTRA_DIR", "/nonexistent") + "/x")
out["tmpdir"] = os.environ.get("TMPDIR")
out["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["uid"] = os.getuid()
out["HOME"] = os.environ.get("HOME")
pathlib.Path("seen.json").write_text(json.dumps(out))
"""


def test_the_agent_writes_the_project_and_nothing_else(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], home: Path) -> None:
    write_prd(story("US-001", files_criterion("done.txt")))
    result = run_loop(pytester, WRITER)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert seen["project"] == "written"
    for where in ("state folder", "etc"):
        assert seen[where] == "Read-only file system", where
    # Not a preset: ~/.claude is not its own; made in its private home, it is gone.
    assert not (home / ".claude").exists()
    assert seen["home"] == "Read-only file system"
    # The project is under /tmp here: its parent is in the agent's private /tmp (a project
    # elsewhere has a read-only parent); either way nothing reaches the real one.
    assert seen["parent of the project"] in ("Read-only file system", "written")
    assert seen["tmp"] == "written"  # a private /tmp
    assert not Path("/tmp/agent-tmp-file").exists()
    assert seen["tmpdir"] == "/tmp"
    assert seen["processes"][:2] == [1, 2] and len(seen["processes"]) < 10  # its own PIDs
    assert not (pytester.path.parent / "agent-parent.txt").exists()
    assert (home / ".bashrc").read_text() == "# the user's\n"
    # The home folder is private: a new file there is the agent's own, gone after its run.
    assert seen["new in home"] == "written" and not (home / ".bash_profile").exists()
    result.stdout.fnmatch_lines([
        "pytest-ralph: agent and check phases confined by bubblewrap * (the agent writes: the "
        "project, a private /tmp; read-only: the rest, the state folder .pytest_ralph; "
        "network on)"])
    assert result.stdout.lines[0].startswith("pytest-ralph: agent and check phases confined")
    (report,) = (pytester.path / ".pytest_ralph" / "reports").glob("*.md")
    assert "- Sandbox: agent and check phases confined by bubblewrap" in report.read_text()


def test_sandbox_off_leaves_the_agent_unconfined_and_says_so(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-001", files_criterion("done.txt")))
    monkeypatch.setenv("UNCONFINED", "1")
    result = run_loop(pytester, WRITER, sandbox="off")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert seen["home"] == "written" and seen["parent of the project"] == "written"
    assert (home / ".bash_profile").exists()
    (pytester.path.parent / "agent-parent.txt").unlink()
    assert result.stdout.lines[0] == (
        "pytest-ralph: agent and check phases NOT confined (ralph_sandbox = off from -o "
        "ralph_sandbox): the agent can write anywhere you can")


def test_the_preset_cli_state_and_ralph_sandbox_writable_are_writable(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A preset's own folders (here ``claude``'s ``~/.claude``) are writable: the agent is a
    fake ``claude`` on PATH, so the loop takes it for the preset."""
    write_prd(story("US-001", files_criterion("done.txt")))
    extra = pytester.path.parent / f"{pytester.path.name}-extra"
    extra.mkdir()
    bin_dir = pytester.path.parent / f"{pytester.path.name}-bin"
    bin_dir.mkdir()
    (pytester.path / "agent.py").write_text(WRITER)
    claude = bin_dir / "claude"
    claude.write_text(f"#!/bin/sh\nexec {sys.executable} {pytester.path / 'agent.py'}\n")
    claude.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("EXTRA_DIR", str(extra))
    result = pytester.runpytest_subprocess(
        "--ralph", "--ralph-agent", "claude", "--ralph-max-iterations", "1",
        "-o", "ralph_sandbox=required", "-o", f"ralph_sandbox_writable={extra}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert seen["claude config"] == "written"
    assert seen["extra"] == "written"
    assert seen["home"] == "Read-only file system"
    assert (home / ".claude" / "settings.json").read_text() == "agent was here"
    result.stdout.fnmatch_lines(["*confined by bubblewrap * (the agent writes: the project, a "
                                 "private /tmp, ~/.claude, *" + str(extra) + "*"])


def test_a_virtualenv_inside_the_project_is_read_only(tmp_path: Path) -> None:
    """No .pth file or plugin can be planted into a .venv that lives in the project."""
    sb = probe("required")
    project = Path(sys.prefix).parent  # the environment running this test, taken as inside
    confinement = agent_confinement(sb, project=project, state_dir=project / ".pytest_ralph")
    inside = [p for p in confinement.readonly if str(p).startswith(str(Path(sys.prefix)))]
    if Path(sys.prefix).resolve() == project.resolve():  # pragma: no cover - no venv
        pytest.skip("the tests do not run in a virtualenv")
    assert inside, confinement.readonly
    argv = wrap(sb, [sys.executable, "-c", "import site, pathlib; pathlib.Path("
                     "site.getsitepackages()[0], 'evil.pth').write_text('import os')"],
                confinement)
    import subprocess
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "Read-only file system" in done.stderr
    assert not any(Path(p, "evil.pth").exists() for p in __import__("site").getsitepackages())


def test_the_network_stays_on(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                              home: Path) -> None:
    """Agent CLIs talk to their model: a server on 127.0.0.1 answers from inside."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(b"hello from the model")
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    write_prd(story("US-001", files_criterion("done.txt")))
    body = ("import socket, pathlib\ns = socket.create_connection(('127.0.0.1', "
            f"{port}))\npathlib.Path('done.txt').write_bytes(s.recv(100))\n")
    result = run_loop(pytester, body)
    thread.join(10)
    server.close()
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (pytester.path / "done.txt").read_bytes() == b"hello from the model"


# -- the check phase ------------------------------------------------------------------------


CODE_UNDER_TEST = r'''
import os, pathlib, site, subprocess, sys
tried = {}
def attempt(name, path):
    try:
        pathlib.Path(path).write_text("x")
        tried[name] = "written"
    except OSError as exc:
        tried[name] = exc.strerror
attempt("test file", "test_calc.py")
attempt("state folder", ".pytest_ralph/x")
attempt("site-packages", os.path.join(site.getsitepackages()[0], "evil.pth"))
attempt("prd", "prd.json")
attempt("home", os.path.expanduser("~/.bashrc"))
attempt("new in home", os.path.expanduser("~/.bash_profile"))
attempt("bytecode", os.path.join(sys.pycache_prefix or "/nonexistent", "evil.pyc"))
attempt("project", "built.txt")
LATE = "import time, pathlib\ntime.sleep(1.5)\npathlib.Path('late.txt').write_text('x')"
subprocess.Popen(["setsid", sys.executable, "-c", LATE])
pathlib.Path("tried.txt").write_text(repr(sorted(tried.items())))
def add(a, b):
    return a + b
'''


def test_code_under_test_runs_confined_in_the_check_phase(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], home: Path) -> None:
    """The check phase runs the agent's code: it may write the project, not its judges (the
    tests, the PRD), the state folder, the environment or the bytecode folder; and nothing it
    starts outlives the phase."""
    pytester.makepyfile(test_calc="from calc import add\ndef test_add():\n"
                                  "    assert add(1, 2) == 3\n")
    (pytester.path / "conftest.py").write_text("")
    write_prd(story("US-001", {"pytest": "test_calc.py"}))
    body = f"import pathlib\npathlib.Path('calc.py').write_text({CODE_UNDER_TEST!r})\n"
    result = run_loop(pytester, body)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    tried = dict(eval((pytester.path / "tried.txt").read_text()))
    assert tried == {"test file": "Read-only file system", "state folder":
                     "Read-only file system", "site-packages": "Read-only file system",
                     "prd": "Read-only file system", "home": "Read-only file system",
                     "new in home": "written", "bytecode": "Read-only file system",
                     "project": "written"}
    assert not (home / ".bash_profile").exists()  # its private home's, gone
    import time
    time.sleep(2.5)
    assert not (pytester.path / "late.txt").exists(), "a process outlived the check phase"


# -- the confinements, as argv ---------------------------------------------------------------


def test_read_only_paths_inside_writable_ones_come_last(tmp_path: Path) -> None:
    sb = Sandbox("required", bwrap="/usr/bin/bwrap", version="bubblewrap 0.8.0")
    project = tmp_path / "p"
    (project / ".pytest_ralph").mkdir(parents=True)
    argv = wrap(sb, ["agent"], agent_confinement(sb, project=project,
                                                 state_dir=project / ".pytest_ralph"))
    assert argv[:2] == ["/usr/bin/bwrap", "--die-with-parent"]
    for flag in ("--unshare-pid", "--unshare-user", "--disable-userns"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    rw = argv.index("--bind-try")
    assert argv[rw + 1] == str(project.resolve())
    state = str((project / ".pytest_ralph").resolve())
    ro = argv.index(state) - 1
    assert argv[ro] == "--ro-bind-try" and ro > rw
    assert argv[-2:] == ["--", "agent"]
    assert "--unshare-net" not in argv


def test_check_confinement_keeps_the_judges_and_the_bytecode_read_only(tmp_path: Path) -> None:
    sb = Sandbox("required", bwrap="/usr/bin/bwrap")
    project = tmp_path / "p"
    (project / "tests").mkdir(parents=True)
    results = tmp_path / "results"
    results.mkdir()
    c = check_confinement(sb, project=project, state_dir=project / ".pytest_ralph",
                          results=results, judges=(project / "tests",),
                          pycache=tmp_path / "bc")
    assert set(c.writable) >= {project, results}
    assert set(c.readonly) >= {project / ".pytest_ralph", project / "tests", tmp_path / "bc"}


def test_the_agent_commands_own_files_under_tmp_stay_reachable(tmp_path: Path) -> None:
    """A scripted agent keeps its script and call log in a folder of /tmp: that folder stays
    writable; a folder holding the project never does (its parent could configure pytest)."""
    own = Path("/tmp") / f"pytest-ralph-test-own-{os.getpid()}"
    own.mkdir(exist_ok=True)
    try:
        (own / "script.json").write_text("{}")
        project = tmp_path / "project"
        project.mkdir()
        (tmp_path / "agent.py").write_text("")
        rw, ro = command_paths(["python", "-m", "x", str(own / "script.json"),
                                str(tmp_path / "agent.py"), f"--log={own}"], project)
        assert rw == [own, own]
        assert ro == [(tmp_path / "agent.py").resolve()]
    finally:
        shutil.rmtree(own)


def test_command_files_in_or_around_a_python_environment_under_tmp_stay_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A virtualenv made in /tmp: a command file inside it, or beside it in the folder that
    # holds it, is bound read-only (the agent must not plant .pth files or plugins there).
    from pytest_ralph.sandbox import bwrap as sandbox
    base = Path(os.path.realpath(tmp_path))
    assert str(base).startswith("/tmp/")
    venv = base / "holder" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "tool").write_text("")
    (base / "holder" / "run.py").write_text("")
    (base / "project").mkdir()
    monkeypatch.setattr(sandbox, "_environment_folders", lambda: [str(venv)])
    rw, ro = command_paths([str(venv / "bin" / "tool"), str(base / "holder" / "run.py"),
                            "/usr/bin/env", "python"], base / "project")
    assert rw == []
    assert ro == [venv / "bin" / "tool", base / "holder" / "run.py"]


def test_a_python_environment_under_tmp_is_bound_back_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The private /tmp would hide a virtualenv made there: it is bound back, read-only; not
    # a folder that holds the project, nor the project's own, nor one outside /tmp.
    from pytest_ralph.sandbox import bwrap as sandbox
    base = Path(os.path.realpath(tmp_path))
    venv, project = base / "venv", base / "project"
    for folder in (venv, project / "sub"):
        folder.mkdir(parents=True)
    monkeypatch.setattr(sandbox, "_environment_folders",
                        lambda: [str(venv), str(base), str(project), str(project / "sub"),
                                 "/usr/lib"])
    sb = Sandbox("required", bwrap="/usr/bin/bwrap")
    ro = agent_confinement(sb, project=project, state_dir=project / ".s").readonly
    assert venv in ro
    for never in (base, project, project / "sub", Path("/usr/lib")):
        assert never not in ro, never
    # This interpreter's own environment is not inside the project: nothing of it is there.
    assert Path(os.path.realpath(sys.prefix)) not in ro


def test_a_read_only_folder_stands_for_its_files(
        outside: Path) -> None:
    project = outside / "project"
    tests = project / "tests"
    fixtures = tests / "fixtures"
    fixtures.mkdir(parents=True)
    names = [f"test_{i}.py" for i in range(50)]
    for name in names:
        (tests / name).write_text("def test(): pass\n")
    golden = fixtures / "golden.txt"
    golden.write_text("expected\n")
    sb = probe("required")
    sb = Sandbox(sb.mode, sb.source, sb.bwrap, sb.version, writable=(fixtures,))
    confinement = check_confinement(
        sb, project=project, state_dir=project / ".s", results=outside / "results",
        judges=[tests, *(tests / n for n in names), golden], pycache=None)
    argv = wrap(sb, ["true"], confinement)
    bound_ro = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind-try"]
    assert str(tests) in bound_ro
    assert not any(str(tests / n) in bound_ro for n in names)  # tests/ stands for them
    seen = _inside(confinement, """
import json, os
def can_write(path):
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False
print(json.dumps([can_write(p) for p in PATHS]))
""".replace("PATHS", repr([str(project / "new.txt"), str(tests / names[0]),
                            str(fixtures / "out.txt"), str(golden)])))
    # The judges win: a writable folder inside a read-only one is read-only too.
    assert seen == [True, False, False, False]


def test_cli_state_paths_follow_the_cli_environment(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "cc"),
           "CODEX_HOME": str(tmp_path / "cx")}
    assert cli_state_paths("claude", env)[:2] == [tmp_path / "cc", tmp_path / ".claude.json"]
    assert cli_state_paths("codex", env) == [tmp_path / "cx"]
    assert cli_state_paths("opencode", env)[0] == tmp_path / ".local/share/opencode"
    assert cli_state_paths(None, env) == []


# Where each agent CLI keeps its configuration, credentials, sessions and caches (from each
# CLI's documentation, see CLI_STATE_PATHS): what the sandbox lets its agent write.
STATE_OF_EACH_PRESET = {
    "claude": [".claude", ".claude.json", ".claude.json.backup", ".cache/claude",
               ".local/state/claude", ".local/share/claude"],
    "codex": [".codex"],
    "gemini": [".gemini"],
    "opencode": [".local/share/opencode", ".config/opencode", ".cache/opencode",
                 ".local/state/opencode"],
    "aider": [".aider", ".cache/aider"],
    "amp": [".config/amp", ".local/share/amp", ".cache/amp", ".local/state/amp"],
    "goose": [".config/goose", ".local/share/goose", ".local/state/goose", ".cache/goose"],
    "cursor-agent": [".cursor", ".config/cursor", ".local/share/cursor-agent",
                     ".cache/cursor-agent"],
}


@pytest.mark.parametrize("preset", sorted(STATE_OF_EACH_PRESET))
def test_cli_state_paths_of_each_preset(preset: str, tmp_path: Path) -> None:
    assert cli_state_paths(preset, {"HOME": str(tmp_path)}) == [
        tmp_path / rel for rel in STATE_OF_EACH_PRESET[preset]]
    # Given explicitly, the home folder wins over $HOME.
    assert cli_state_paths(preset, {"HOME": "/elsewhere"}, home=tmp_path) == [
        tmp_path / rel for rel in STATE_OF_EACH_PRESET[preset]]


@pytest.mark.parametrize(("preset", "variable", "replaced", "inside"), [
    ("claude", "CLAUDE_CONFIG_DIR", ".claude", ""), ("codex", "CODEX_HOME", ".codex", ""),
    # GEMINI_CLI_HOME replaces the home folder: the state is its .gemini, not all of it.
    ("gemini", "GEMINI_CLI_HOME", ".gemini", ".gemini")])
def test_cli_state_paths_follow_the_variable_that_moves_the_state(
        preset: str, variable: str, replaced: str, inside: str, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    got = cli_state_paths(preset, {"HOME": str(tmp_path), variable: str(moved)})
    assert got == [moved / inside if rel == replaced else tmp_path / rel
                   for rel in STATE_OF_EACH_PRESET[preset]]
    # A blank value moves nothing.
    assert cli_state_paths(preset, {"HOME": str(tmp_path), variable: " "}) == [
        tmp_path / rel for rel in STATE_OF_EACH_PRESET[preset]]


def test_a_sandbox_without_a_version_is_described_as_bubblewrap() -> None:
    assert Sandbox("required", bwrap="/usr/bin/bwrap").describe() == "confined by bubblewrap"
    assert Sandbox("auto", bwrap="/usr/bin/bwrap", version="bubblewrap 0.8.0").describe() == (
        "confined by bubblewrap 0.8.0")


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    for leftover in ("/tmp/agent-tmp-file", "/etc/agent-file"):
        assert not os.path.exists(leftover), f"{leftover} was written outside the sandbox"
