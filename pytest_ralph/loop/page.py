"""The frame of pytest-ralph's HTML reports: one self-contained page, escaped text.

A page holds its CSS inline, needs no network and no JavaScript (it has none), and shows
every user text (story titles, criteria, failure messages, agent output) escaped with
:func:`text`: agent output is hostile, so ``<script>`` or ``</style>`` in a failure message
renders as those characters. Used by :mod:`pytest_ralph.loop.report_html` (a run) and
:mod:`pytest_ralph.plugin.gatehtml` (a gate). This module does not import pytest.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from .report import clean

#: A function applied to user text before it is escaped (secret values of the environment
#: replaced), or the identity.
Redact = Callable[[str], str]

#: The page's style: light and dark, a grid of coloured cells, pre blocks that wrap.
CSS = """
:root{color-scheme:light dark;--ok:#2da44e;--part:#d4a72c;--bad:#cf222e;--none:#8c959f;
--fg:#1f2328;--bg:#fff;--muted:#59636e;--line:#d1d9e0;--code:#f6f8fa}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--muted:#9198a1;
--line:#3d444d;--code:#151b23}}
*{box-sizing:border-box}
body{font:14px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;padding:16px 24px;max-width:1200px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:24px 0 8px;border-bottom:1px solid
var(--line);padding-bottom:4px}h3{font-size:15px;margin:16px 0 4px;overflow-wrap:anywhere}
.outcome{font-size:16px;padding:8px 12px;border-radius:6px;border-left:6px solid var(--none);
background:var(--code)}.outcome.ok{border-color:var(--ok)}.outcome.bad{border-color:var(--bad)}
.outcome.part{border-color:var(--part)}
ul.facts{padding-left:20px;margin:8px 0}ul.facts li{overflow-wrap:anywhere}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--code);padding:8px;border-radius:6px;white-space:pre-wrap;
overflow-wrap:anywhere;max-height:24em;overflow:auto}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid var(--line);padding:2px 6px;
text-align:left;vertical-align:top}th{background:var(--code)}
.scroll{overflow-x:auto;max-width:100%}
table.grid td.c{min-width:10px;padding:0 2px;text-align:center;font-size:11px;color:#fff}
table.grid th.n{font-size:11px;padding:0 2px;text-align:center;font-weight:normal}
table.grid.dense td.c{height:12px;min-width:5px;padding:0;font-size:0}
table.grid.dense th.n{font-size:0;padding:0}
td.ok{background:var(--ok)}td.part{background:var(--part)}td.bad{background:var(--bad)}
td.none{background:transparent}
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border-radius:3px;color:#fff}
.legend .ok{background:var(--ok)}.legend .part{background:var(--part)}
.legend .bad{background:var(--bad)}
svg.chart{width:100%;height:auto;max-width:960px;display:block}
svg.chart .bar{fill:var(--ok);opacity:.75}svg.chart .stories{fill:none;stroke:#0969da;
stroke-width:2.5}svg.chart .grid{stroke:var(--line)}svg.chart .axis{fill:var(--muted);
font-size:12px}svg.chart .pass{fill:#8250df}
.muted{color:var(--muted)}.fp{font-family:ui-monospace,monospace}
"""


def text(value: object, redact: Redact | None = None) -> str:
    """``value`` as HTML text: terminal escapes and control characters dropped
    (:func:`pytest_ralph.loop.report.clean`), ``redact`` applied, then ``&``, ``<``, ``>``
    and both quotes escaped (safe in an element and in a quoted attribute)."""
    raw = clean(str(value))
    return html.escape(redact(raw) if redact else raw, quote=True)


def facts(items: Sequence[tuple[str, str]]) -> str:
    """A list of ``label: value`` lines; each value is HTML already (escaped by the caller)."""
    return ('<ul class="facts">' + "".join(f"<li><b>{html.escape(k)}</b>: {v}</li>"
                                           for k, v in items) + "</ul>")


def tone(passing: int, total: int) -> str:
    """The colour class of a cell: ``ok`` (all pass), ``part`` (some), ``bad`` (none),
    ``none`` (nothing checked)."""
    if not total:
        return "none"
    return "ok" if passing == total else ("part" if passing else "bad")


def legend() -> str:
    """The colour legend of the grid."""
    return ('<p class="legend"><span class="ok">all pass</span><span class="part">some pass'
            '</span><span class="bad">none pass</span> empty: not checked</p>')


def page(title: str, body: Sequence[str]) -> str:
    """The whole page: ``title`` (plain text, escaped here) and ``body`` (HTML parts)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
