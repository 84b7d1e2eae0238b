"""A real headless Chromium for the report tests, and the pinned ``mermaid`` npm package.

:func:`browser` finds Debian's ``chromium`` (``.ci/run`` installs it); :func:`screenshot`,
:func:`dump_dom` and :func:`console` drive its command line (``--headless``), one process
per call, and :func:`png_colours` reads a screenshot back (standard library only) so a test
can tell a blank page from a drawn one. :func:`mermaid_js` installs ``mermaid`` at
:data:`MERMAID_VERSION` into ``<cache>/mermaid-<version>`` (``$PYTEST_RALPH_CACHE`` or
``~/.cache/pytest-ralph``), under a lock, renamed into place only once npm succeeded (as
:mod:`tests.support.claude_cli` does), and :func:`mermaid_page` writes a local page that
renders a Mermaid source with it and says in its title whether it could.
"""

from __future__ import annotations

import fcntl
import html
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

#: The mermaid release the charts are checked against: GitHub renders Mermaid with a 10.x
#: release, so the chart must parse in 10.x (not only in the newest 11.x).
MERMAID_VERSION = "10.9.3"
#: Seconds a Chromium run may take.
TIMEOUT = 120.0


class BrowserError(Exception):
    """Chromium or npm failed; the message carries their output."""


def browser() -> Path | None:
    """The Chromium executable (``chromium``, ``chromium-browser``), or ``None``."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def _run(exe: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tempfile.mkdtemp(prefix="ralph-chromium-")
    argv = [str(exe), "--headless", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--allow-file-access-from-files",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", *args, url]
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        argv.insert(1, "--no-sandbox")
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT,
                             stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BrowserError(f"{' '.join(argv)} timed out after {TIMEOUT:.0f} s") from exc
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if out.returncode != 0:
        raise BrowserError(f"{' '.join(argv)} exited {out.returncode}\n{out.stderr[-4000:]}")
    return out


def screenshot(exe: Path, page: Path, png: Path, size: str = "1280,2000") -> str:
    """Take a screenshot of ``page`` (a local file) into ``png``; return Chromium's stderr
    (its console lines: :func:`console`)."""
    out = _run(exe, page.resolve().as_uri(), f"--screenshot={png}", f"--window-size={size}",
               "--virtual-time-budget=10000")
    if not png.is_file():
        raise BrowserError(f"chromium wrote no screenshot {png}\n{out.stderr[-4000:]}")
    return out.stderr


def dump_dom(exe: Path, page: Path) -> tuple[str, str]:
    """The DOM of ``page`` after its scripts ran (``--dump-dom``), and Chromium's stderr."""
    out = _run(exe, page.resolve().as_uri(), "--dump-dom", "--virtual-time-budget=10000")
    return out.stdout, out.stderr


def console(stderr: str) -> list[str]:
    """The page's console messages (errors included) in Chromium's stderr log: its
    ``:CONSOLE`` lines, and the resources it could not load."""
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line or "ERR_FILE_NOT_FOUND" in line or "net::ERR" in line]


def png_colours(png: Path) -> int:
    """How many distinct pixel values the PNG ``png`` holds (8-bit RGB or RGBA, any filter);
    1 for a blank page.

    Raises:
        BrowserError: not a PNG of that kind.
    """
    data = png.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise BrowserError(f"{png} is not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            channels = {2: 3, 6: 4}.get(colour, 0)
            if depth != 8 or not channels:
                raise BrowserError(f"{png}: depth {depth}, colour type {colour} not read here")
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    seen: set[bytes] = set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + pred) & 255
        if row % 8 == 0:  # every 8th row is enough to tell colours apart
            seen.update(bytes(line[i:i + channels]) for i in range(0, stride, channels * 4))
        previous = line
    return len(seen)


def cache_dir() -> Path:
    """``$PYTEST_RALPH_CACHE`` or ``~/.cache/pytest-ralph``."""
    env = os.environ.get("PYTEST_RALPH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pytest-ralph"


def mermaid_js() -> Path | None:
    """``mermaid.min.js`` of :data:`MERMAID_VERSION`, installed with npm on first use.

    Returns:
        The file, or ``None`` when it is not installed and ``npm`` is not on ``PATH``.

    Raises:
        BrowserError: npm failed (its output in the message).
    """
    target = cache_dir() / "npm" / f"mermaid-{MERMAID_VERSION}"
    js = target / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
    if js.is_file():
        return js
    npm = shutil.which("npm")
    if npm is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".mermaid-{MERMAID_VERSION}.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if js.is_file():
            return js
        staging = Path(tempfile.mkdtemp(prefix=".mermaid-", dir=target.parent))
        try:
            argv = [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix",
                    str(staging), f"mermaid@{MERMAID_VERSION}"]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                                  stdin=subprocess.DEVNULL, check=False)
            if proc.returncode != 0 or not (staging / js.relative_to(target)).is_file():
                raise BrowserError(f"{' '.join(argv)} exited {proc.returncode}\n"
                                   f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            staging.chmod(0o755)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return js


def mermaid_page(source: str, js: Path, page: Path) -> Path:
    """Write ``page``: it renders the Mermaid ``source`` with ``js`` (a local file) and sets
    its title to ``MERMAID-OK`` with the SVG in ``#out``, or ``MERMAID-ERROR: ...``."""
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>pending</title></head><body>'
        f'<pre id="src">{html.escape(source)}</pre><div id="out"></div>'
        f'<script src="{js.resolve().as_uri()}"></script><script>'
        "mermaid.initialize({startOnLoad: false});"
        "mermaid.render('chart', document.getElementById('src').textContent)"
        ".then(r => {document.getElementById('out').innerHTML = r.svg;"
        " document.title = 'MERMAID-OK';})"
        ".catch(e => {document.title = 'MERMAID-ERROR: ' + e;});"
        "</script></body></html>", encoding="utf-8")
    return page
