"""Agent presets: how to run each known coding-agent CLI unattended, and how to read its output.

A *preset* is a named recipe for one coding-agent CLI: the executable, the flags that run it
headless and unattended with machine-readable output, the route the prompt takes (``stdin``,
or ``file``: a flag naming the prompt file through the ``{prompt_file}`` placeholder, which the
loop replaces by the prompt file's path), the documentation the recipe was taken from, and an
*output reader* that classifies a finished run from the CLI's own structured records. The
prompt never travels as a command-line argument (it can be megabytes long); the loop always
writes it both on the agent's stdin and into the prompt file.

``--ralph-agent claude`` (a preset name, case-insensitive) runs that preset;
``--ralph-agent "some command --flag"`` runs a command line, with no preset. The ini option
``ralph_agent_flags`` replaces a preset's flags entirely (the executable stays), e.g.
``ralph_agent_flags = -p --output-format json --permission-mode acceptEdits`` for ``claude``;
see :func:`resolve_agent`. With overridden flags the reader still reads the CLI's structured
records when the flags still ask for them, and otherwise leaves the verdict to the exit code.

Presets (argv as run; docs are the pages the recipe was read from, listed in each preset's
``docs``):

============  ======================================================================  ======
name          argv                                                                    prompt
============  ======================================================================  ======
claude        ``claude -p --output-format stream-json --verbose``                     stdin
              ``--dangerously-skip-permissions``
codex         ``codex exec --json --skip-git-repo-check``                             stdin
              ``--dangerously-bypass-approvals-and-sandbox -``
aider         ``aider --yes-always --no-pretty --message-file {prompt_file}``         file
              ``--no-auto-commits --no-dirty-commits --no-check-update --no-analytics``
gemini        ``gemini --output-format stream-json --approval-mode=yolo``             stdin
              ``--skip-trust``
opencode      ``opencode run --format json --auto``                                   stdin
amp           ``amp --dangerously-allow-all --stream-json --execute``                 stdin
goose         ``goose run --output-format stream-json --instructions -``              stdin
cursor-agent  ``cursor-agent -p --output-format stream-json --force``                 stdin
============  ======================================================================  ======

Documentation read:

- claude: https://docs.anthropic.com/claude/docs/claude-code/cli-usage,
  https://code.claude.com/docs/ja/headless.md, https://code.claude.com/docs/es/headless,
  https://github.com/obra/superpowers/pull/452 (stream-json needs ``--verbose``),
  https://github.com/anthropics/claude-code/issues/11429 (usage-limit result text).
- codex: https://developers.openai.com/codex/noninteractive.md,
  https://github.com/openai/codex/blob/main/docs/exec.md,
  https://github.com/openai/codex/blob/main/codex-rs/exec/src/cli.rs,
  https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs,
  https://spybara.com/openai/codex/history/docs/en/cli/reference/page/2026-04-07-0040/2026-04-08-0040/
  (a copy of https://developers.openai.com/codex/cli/reference).
- aider: https://aider.chat/docs/scripting.html, https://aider.chat/docs/config/options.html,
  https://aider.chat/docs/git.html, https://github.com/Aider-AI/aider/issues/3918.
- gemini: https://geminicli.com/docs/cli/headless/,
  https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/headless.md,
  https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/cli-reference.md,
  https://github.com/google-gemini/gemini-cli/blob/main/packages/core/src/output/types.ts.
- opencode: https://opencode.ai/docs/cli/commands.md,
  https://github.com/anomalyco/opencode/blob/dev/packages/opencode/src/cli/cmd/run.ts,
  https://github.com/anomalyco/opencode/issues/42064.
- amp: https://ampcode.com/news/streaming-json, https://ampcode.com/manual/appendix,
  https://www.developersdigest.tech/reference/amp/cli-flags.
- goose: https://block.github.io/goose/docs/guides/goose-cli-commands,
  https://block.github.io/goose/docs/guides/goose-permissions,
  https://github.com/aaif-goose/goose/blob/main/crates/goose-cli/src/session/mod.rs.
- cursor-agent: https://cursor.com/docs/cli/cookbook/update-docs,
  https://www.developersdigest.tech/reference/cursor-cli/cli-flags,
  https://github.com/multica-ai/multica/pull/5711 (prompt on stdin).

The output readers are in :mod:`pytest_ralph.agents.readers`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .readers import (
    AiderReader,
    CodexReader,
    GeminiReader,
    GooseReader,
    OpencodeReader,
    OutputReader,
    PlainReader,
    ResultReader,
)
from .run import AgentCommandError, split_command


@dataclass(frozen=True)
class Preset:
    """A known agent CLI.

    Attributes:
        name: the preset's name (``--ralph-agent NAME``).
        executable: the command looked up on PATH.
        flags: the arguments after the executable; ``{prompt_file}`` is replaced by the
            prompt file's path.
        prompt_via: ``"stdin"`` or ``"file"`` (a flag names ``{prompt_file}``).
        docs: URLs of the documentation the preset was taken from.
        reader: makes a fresh output reader for one run.
        structured: whether a flag list still asks the CLI for its structured output (a
            reader is only used when it does).
    """

    name: str
    executable: str
    flags: tuple[str, ...]
    prompt_via: str
    docs: tuple[str, ...]
    reader: Callable[[], OutputReader]
    structured: Callable[[Sequence[str]], bool] = field(default=lambda flags: True,
                                                       repr=False, compare=False)

    def argv(self, flags: Sequence[str] | None = None) -> list[str]:
        """``[executable, *flags]``, with this preset's flags when ``flags`` is empty/None."""
        return [self.executable, *(flags if flags else self.flags)]


# -- which flags keep the structured output on ------------------------------------------------


def _option_value(flags: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--name value`` / ``--name=value`` among ``flags``."""
    found: str | None = None
    for i, arg in enumerate(flags):
        for name in names:
            if arg == name and i + 1 < len(flags):
                found = flags[i + 1]
            elif arg.startswith(name + "=") and name.startswith("--"):
                found = arg[len(name) + 1:]
    return found


def _format_in(*names: str, values: tuple[str, ...]) -> Callable[[Sequence[str]], bool]:
    """A check that the option ``names`` is set to one of ``values``."""
    def check(flags: Sequence[str]) -> bool:
        return _option_value(flags, *names) in values
    return check


def _has_flag(*names: str) -> Callable[[Sequence[str]], bool]:
    """A check that one of the boolean flags ``names`` is present."""
    def check(flags: Sequence[str]) -> bool:
        return any(arg in names for arg in flags)
    return check


# -- the presets ------------------------------------------------------------------------------


CLAUDE = Preset(
    name="claude",
    executable="claude",
    flags=("-p", "--output-format", "stream-json", "--verbose",
           "--dangerously-skip-permissions"),
    prompt_via="stdin",
    docs=(
        "https://docs.anthropic.com/claude/docs/claude-code/cli-usage",
        "https://code.claude.com/docs/ja/headless.md",
        "https://code.claude.com/docs/es/headless",
        "https://github.com/obra/superpowers/pull/452",
        "https://github.com/anthropics/claude-code/issues/11429",
    ),
    reader=ResultReader,
    structured=_format_in("--output-format", values=("json", "stream-json")),
)
"""Claude Code in print mode.

``-p`` (``--print``) runs non-interactively; with no prompt argument the prompt is read from
stdin (the CLI reference's ``cat file | claude -p``). ``--output-format stream-json`` prints
one JSON object per line (``system``/``init``, ``assistant``, ``user``, ..., the ``result``
last) and, with ``--print``, needs ``--verbose`` (``Error: When using --print,
--output-format=stream-json requires --verbose``). ``--dangerously-skip-permissions`` (=
``--permission-mode bypassPermissions``) approves every tool; as root it is refused unless
``IS_SANDBOX=1``. Exit status: 1 on an API error (``is_error: true``, ``terminal_reason:
"api_error"``, ``api_error_status``), 0 on success; versions before 2.1 exited 0 on API
errors too, which is why the reader decides from ``is_error``.
"""

CODEX = Preset(
    name="codex",
    executable="codex",
    flags=("exec", "--json", "--skip-git-repo-check",
           "--dangerously-bypass-approvals-and-sandbox", "-"),
    prompt_via="stdin",
    docs=(
        "https://developers.openai.com/codex/noninteractive.md",
        "https://github.com/openai/codex/blob/main/docs/exec.md",
        "https://github.com/openai/codex/blob/main/codex-rs/exec/src/cli.rs",
        "https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs",
        "https://spybara.com/openai/codex/history/docs/en/cli/reference/page/"
        "2026-04-07-0040/2026-04-08-0040/",
        "https://github.com/openai/codex/issues/10550",
        "https://github.com/Th0rgal/sandboxed.sh/pull/394",
    ),
    reader=CodexReader,
    structured=_has_flag("--json", "--experimental-json"),
)
"""OpenAI Codex CLI, ``codex exec`` (non-interactive mode).

The prompt argument ``-`` reads the instructions from stdin (cli.rs: "If not provided as an
argument (or if ``-`` is used), instructions are read from stdin"). ``--json`` prints JSONL
events. ``codex exec`` never asks for approval but runs read-only by default;
``--dangerously-bypass-approvals-and-sandbox`` (alias ``--yolo``) lets it edit files and run
commands with no sandbox of its own, as an unattended loop needs (``--sandbox
workspace-write`` is the sandboxed alternative, via ``ralph_agent_flags``).
``--skip-git-repo-check``: outside a Git repository (or a folder it trusts) Codex refuses to
run with its own sandbox on (0.171.0: exit 1, ``Not inside a trusted directory and
--skip-git-repo-check was not specified.``); with the bypass flag it does not check, so the
flag only matters when the flags are replaced.

Observed with codex-cli 0.171.0 (``tests/agents/test_real_codex.py``: this exact argv, the
prompt on stdin, offline against a scripted OpenAI Responses server; a custom
``model_providers`` entry with ``wire_api = "responses"``, retries off):

- success: exit 0; events ``thread.started``, ``turn.started``, ``item.started`` /
  ``item.completed`` (``agent_message``, ``command_execution`` for its ``exec_command``
  tool, ``file_change`` for ``apply_patch``, and an ``error`` *item* for a warning such as
  ``Model metadata for `x` not found``, which does not fail the run), ``turn.completed``
  with ``usage`` (``input_tokens``, ``cached_input_tokens``, ``cache_write_input_tokens``,
  ``output_tokens``, ``reasoning_output_tokens``: the sum over the turn's model requests).
  One ``codex exec`` is one turn however many model requests it makes.
- HTTP 500: exit 1; ``error`` then ``turn.failed`` with Codex's own words (``We're
  currently experiencing high demand, which may cause temporary errors.``, not the
  body's message): ``api-error``.
- HTTP 429: exit 1; ``exceeded retry limit, last status: 429 Too Many Requests, request id:
  ...``: ``rate-limited``, with no retry time (the CLI drops the ``retry-after`` header and
  the body's ``Please try again in 2s``). A stream the API ends with ``response.failed``
  code ``rate_limit_exceeded`` gives ``rate limit exceeded: <the API's message>``, whose
  ``Please try again in 1.5s`` the reader takes as the retry time; a 429 of type
  ``usage_limit_reached`` gives ``You've hit your usage limit. Try again later.``
  (``rate-limited``); one of code ``insufficient_quota`` gives ``Quota exceeded. Check your
  plan and billing details.`` (``api-error``: waiting does not help).
- Codex retries a failed request (``request_max_retries``, per provider) and a dropped
  stream (``stream_max_retries``) with back-off before it reports the error; when the server
  cannot be reached at all it prints ``Reconnecting... waiting for network`` errors and
  keeps waiting, so such a run ends at the agent timeout.
"""

AIDER = Preset(
    name="aider",
    executable="aider",
    flags=("--yes-always", "--no-pretty", "--message-file", "{prompt_file}",
           "--no-auto-commits", "--no-dirty-commits", "--no-check-update", "--no-analytics"),
    prompt_via="file",
    docs=(
        "https://aider.chat/docs/scripting.html",
        "https://aider.chat/docs/config/options.html",
        "https://aider.chat/docs/git.html",
        "https://github.com/Aider-AI/aider/issues/3918",
    ),
    reader=AiderReader,
)
"""aider, scripted.

``--message-file FILE`` sends the file's text as one message, applies the edits and exits
(the docs document no way to read the message from stdin, so the prompt file is used).
``--yes-always`` says yes to every confirmation; ``--no-pretty`` keeps colour codes out of
the log. Because ``--yes-always`` also says yes to questions meant for the user, two are
kept from being asked: ``--no-check-update`` (once a day aider asks PyPI for a newer
release and, answered yes, pip-installs it over itself and exits 0 without doing the
task), ``--no-analytics`` (one user in ten is asked to opt in to analytics; yes would opt
them in; this run only, a saved choice is kept). aider has no structured output: the
:class:`~pytest_ralph.agents.readers.AiderReader` reads the ``litellm.<Name>Error:`` lines
it prints.

Git: aider commits every edit it makes (a commit message written by a model request of its
own) and, before editing a file with uncommitted changes, commits those too.
``--no-auto-commits --no-dirty-commits`` turn both off, so the agent's work stays in the
working tree for the loop to judge and for you to review and commit, as with the other
presets (the loop stays right when an agent commits anyway: a prompt that asks for
commits, or ``ralph_agent_flags`` without these flags). aider still uses the repository
(its repo map lists the tracked files) and, with ``--yes-always``: in a folder without a
git repository it runs ``git init`` (the repository stays empty), and it adds ``.aider*``
to ``.gitignore`` (creating it) so that its chat history (``.aider.chat.history.md``,
``.aider.input.history``) and tags cache (``.aider.tags.cache.v4/``) in the project stay
out of git and out of the loop's diff stat. Add ``--no-git`` through ``ralph_agent_flags``
to have neither (aider then sees only the files it is told about), or ``--no-gitignore``
to keep ``.gitignore`` as it is. In your home folder aider writes ``~/.aider/`` only
(``installs.json``, ``analytics.json``, ``caches/`` with the model-price list it
downloads), the sandbox's writable folders for this preset.

Observed with aider-chat 0.86.2 (``tests/agents/test_real_aider.py``: this exact argv,
offline against a scripted Anthropic Messages server through litellm's
``ANTHROPIC_API_BASE``, ``--model anthropic/<name>``):

- success: exit 0; after each model response ``Tokens: 598 sent, 17 received. Cost:
  $0.0020 message, $0.0020 session.`` (the cost only for a model whose prices it knows;
  aider counts the tokens itself), then ``Applied edit to hello.py``; aider lints each
  edited file of a language it knows and sends the errors back to the model.
- HTTP 500: **exit 0**; per attempt ``litellm.InternalServerError: AnthropicException -
  b'{...}'. Handle with `litellm.InternalServerError`.`` (wrapped over several lines at 80
  columns), ``The API provider's servers are down or overloaded.``, ``Retrying in 0.2
  seconds...``; it retries with a doubling back-off up to 32 s (9 attempts, about 64 s; the
  60 s cap is a constant, ``aider.models.RETRY_TIMEOUT``, with no option) and gives up
  with the last error printed: ``api-error``.
- HTTP 429: **exit 0**; the same with ``litellm.RateLimitError: ...`` and ``The API
  provider has rate limited you. Try again later or check your quotas.``: ``rate-limited``,
  the retry time taken from the API's message when it says ``Please try again in 2s``
  (aider drops the ``retry-after`` header).
- HTTP 401: **exit 0**, at once (no retry): ``litellm.AuthenticationError: ...``, ``The
  API provider is not able to authenticate you. Check your API key.``: ``api-error``.
"""

GEMINI = Preset(
    name="gemini",
    executable="gemini",
    flags=("--output-format", "stream-json", "--approval-mode=yolo", "--skip-trust"),
    prompt_via="stdin",
    docs=(
        "https://geminicli.com/docs/cli/headless/",
        "https://geminicli.com/docs/cli/trusted-folders/#headless-and-automated-environments",
        "https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/headless.md",
        "https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/cli-reference.md",
        "https://geminicli.com/docs/cli/tutorials/automation",
        "https://github.com/google-gemini/gemini-cli/blob/main/packages/core/src/output/"
        "types.ts",
    ),
    reader=GeminiReader,
    structured=_format_in("--output-format", "-o", values=("stream-json",)),
)
"""Gemini CLI, headless mode.

Headless mode starts when stdin is not a terminal (``echo "Summarize this" | gemini``); the
piped text is the prompt. ``--output-format stream-json`` prints JSONL events (``init``,
``message``, ``tool_use``, ``tool_result``, ``error``, ``result`` with ``status`` and
``stats``). ``--approval-mode=yolo`` auto-approves every tool (``--yolo`` is deprecated).
``--skip-trust`` trusts the working folder for this run only (as
``GEMINI_CLI_TRUST_WORKSPACE=true`` does; trusted-folders docs): without it Gemini CLI
0.61.0 refuses to run headless in a folder the user never trusted (stderr ``Gemini CLI is
not running in a trusted directory. To proceed, either use --skip-trust, ...``, exit
status 55) and would turn yolo back into ``default`` approvals there.
``--output-format json`` is not read: it prints one pretty-printed object over many lines.

Exit statuses observed with Gemini CLI 0.61.0 (the docs' 41/42/52/53/54 list is not what
an API error gives): 0 success; 55 untrusted folder; after an API error the HTTP status mod
256 (173 for a 429, 244 for a 500), the ``result`` event then having ``status: "error"``
and an ``[API Error: ...]`` message; 1 other errors. Its retries (``general.maxAttempts``
in ``~/.gemini/settings.json``, default 10, with back-off) took 270-320 s per failing run
at the defaults.
"""

OPENCODE = Preset(
    name="opencode",
    executable="opencode",
    flags=("run", "--format", "json", "--auto"),
    prompt_via="stdin",
    docs=(
        "https://opencode.ai/docs/cli/commands.md",
        "https://github.com/anomalyco/opencode/blob/dev/packages/opencode/src/cli/cmd/run.ts",
        "https://github.com/anomalyco/opencode/issues/42064",
        "https://github.com/anomalyco/opencode/issues/50062",
    ),
    reader=OpencodeReader,
    structured=_format_in("--format", values=("json",)),
)
"""opencode, ``opencode run``.

``run`` reads non-TTY stdin to EOF and uses it as the message when no message argument is
given (run.ts ``resolveRunInput``; issue 42064). ``--format json`` prints raw JSON events
(``step_start``, ``step_finish`` with tokens and cost, ``text``, ``tool_use``, ``error``).
``--auto`` approves permission requests that are not explicitly denied (without it ``run``
auto-rejects them). Exit status 1 after a session error (run.ts); opencode 2.0 also exits 1
after an error it retried and recovered from (issue 50062), hence the reader clears an
error followed by more work.

Observed with opencode 1.18.33 (npm ``opencode-ai``; ``tests/agents/test_real_opencode.py``,
offline against a scripted Anthropic Messages server through an ``anthropic`` provider
whose ``options.baseURL`` points at it): a success prints ``step_start``, ``text``,
``tool_use`` (``part.tool`` ``bash`` / ``write``, ``part.state.status`` ``completed``) and one
``step_finish`` per model request (``part.tokens.input`` / ``output``, ``part.cost``), and
exits 0. An HTTP 500 or 429 is retried five times by the CLI itself (not configurable; the
wait is the response's ``retry-after-ms`` / ``retry-after`` header, else 2 s doubling), then
one ``error`` event is printed and the exit status is 1: ``{"name": "APIError", "data":
{"message": <the body's error.message>, "statusCode": 429, "isRetryable": true,
"responseHeaders": {<lower-cased names>: <strings>}, "responseBody": "...", ...}}``. The
reader takes a 429's wait from the message (``Please try again in 1.5s``), else from those
headers. opencode takes its working folder from ``PWD`` (not ``getcwd()``): the runner
sets ``PWD`` to the agent's folder. At every start it runs ``npm install`` of its plugin
package into ``~/.config/opencode`` in the background (a failure is only logged).
"""

AMP = Preset(
    name="amp",
    executable="amp",
    flags=("--dangerously-allow-all", "--stream-json", "--execute"),
    prompt_via="stdin",
    docs=(
        "https://ampcode.com/news/streaming-json",
        "https://ampcode.com/manual/appendix",
        "https://www.developersdigest.tech/reference/amp/cli-flags",
    ),
    reader=ResultReader,
    structured=_has_flag("--stream-json"),
)
"""Sourcegraph Amp, execute mode.

``-x``/``--execute`` sends one message, waits for the agent's turn to end and exits; its
prompt value is optional when input is piped, and the CLI's own error says "pipe via stdin:
echo "your message" | amp --execute" (it is placed last so no flag is taken for its value).
``--stream-json`` prints Claude Code compatible JSON lines (``system``/``init``, ``user``,
``assistant``, ``result`` with ``is_error``, ``num_turns``). ``--dangerously-allow-all``
skips every permission prompt. Exit codes and the error/rate-limit records are not
documented; the reader reads ``is_error`` results as for Claude Code.
"""

GOOSE = Preset(
    name="goose",
    executable="goose",
    flags=("run", "--output-format", "stream-json", "--instructions", "-"),
    prompt_via="stdin",
    docs=(
        "https://block.github.io/goose/docs/guides/goose-cli-commands",
        "https://block.github.io/goose/docs/guides/goose-permissions",
        "https://github.com/aaif-goose/goose/blob/main/crates/goose-cli/src/session/mod.rs",
    ),
    reader=GooseReader,
    structured=_format_in("--output-format", values=("stream-json",)),
)
"""Block goose, ``goose run``.

``-i``/``--instructions -`` reads the instructions from stdin; the run exits when the task
is done. ``--output-format stream-json`` prints JSON events (``message``, ``notification``,
``error``, ``complete`` with tokens and cost). goose has no approval flag: its default mode
is autonomous ("Autonomous Mode is applied by default"); a config that changed it is
overridden with the environment variable ``GOOSE_MODE=auto``. Exit codes are not documented.
"""

CURSOR = Preset(
    name="cursor-agent",
    executable="cursor-agent",
    flags=("-p", "--output-format", "stream-json", "--force"),
    prompt_via="stdin",
    docs=(
        "https://cursor.com/docs/cli/cookbook/update-docs",
        "https://www.developersdigest.tech/reference/cursor-cli/cli-flags",
        "https://github.com/manaflow-ai/manaflow/pull/152",
        "https://github.com/multica-ai/multica/pull/5711",
    ),
    reader=ResultReader,
    structured=_format_in("--output-format", values=("json", "stream-json")),
)
"""Cursor CLI (``cursor-agent``, also installed as ``agent``), print mode.

``-p``/``--print`` runs non-interactively; ``--output-format stream-json`` prints Claude Code
like JSON lines ending with a ``result`` (``is_error``). ``--force`` (``--yolo``) runs every
action without approval except what ``permissions.deny`` blocks; without it print mode
rejects whatever would need approval. The official pages read show the prompt as an argument
only; that the CLI reads the prompt from stdin when none is given comes from integrators
(multica PR 5711, cursor-plugin-cc issue 26), not from Cursor's docs. On failure it exits
non-zero and writes the error to stderr, in no documented format.
"""

#: Every preset by name.
PRESETS: dict[str, Preset] = {p.name: p for p in (
    CLAUDE, CODEX, AIDER, GEMINI, OPENCODE, AMP, GOOSE, CURSOR)}

_BY_EXECUTABLE: dict[str, Preset] = {p.executable: p for p in PRESETS.values()}


def _basename(command: str) -> str:
    """The executable's name: last path part, lower-cased, without ``.exe``/``.cmd``."""
    name = re.split(r"[\\/]", command)[-1].lower()
    for suffix in (".exe", ".cmd"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def reader_for(argv: Sequence[str]) -> OutputReader:
    """A fresh output reader for ``argv``.

    The preset whose executable is ``argv[0]``'s name (``/usr/bin/claude``, ``claude.exe``,
    ``claude.cmd``) gives its reader, provided the other arguments still ask the CLI for its
    structured output; anything else gets a :class:`PlainReader`.
    """
    if not argv:
        return PlainReader()
    preset = _BY_EXECUTABLE.get(_basename(argv[0]))
    if preset is None or not preset.structured(list(argv[1:])):
        return PlainReader()
    return preset.reader()


def resolve_agent(value: str, flags: str | None) -> tuple[list[str], Preset | None]:
    """The agent argv for ``--ralph-agent value`` and ini ``ralph_agent_flags``.

    Args:
        value: a preset name (one of :data:`PRESETS`, any case), or a command line.
        flags: for a preset, a command-line fragment that replaces the preset's flags (empty
            or ``None``: the preset's own); ignored for a command line.

    Returns:
        ``(argv, preset)``; ``preset`` is ``None`` for a command line.

    Raises:
        AgentCommandError: ``flags`` cannot be split (unbalanced quotes), or the command
            line is empty or cannot be split.
    """
    preset = PRESETS.get(value.strip().lower())
    if preset is None:
        return split_command(value), None
    if not flags:
        return preset.argv(), preset
    try:
        parts = shlex.split(flags, posix=os.name != "nt")
    except ValueError as exc:
        raise AgentCommandError(
            f"cannot split ralph_agent_flags {flags!r} for preset {preset.name!r}: {exc}"
        ) from None
    return preset.argv(parts), preset
