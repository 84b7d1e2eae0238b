"""A scripted loopback model: an HTTP server that speaks enough of the Anthropic Messages API.

Point a real Claude Code CLI at it (``ANTHROPIC_BASE_URL``, see
:func:`tests.support.claude_cli.offline_env`) and it plays a model that follows a script::

    with ModelServer([[ToolUse("Write", {"file_path": "/abs/done.txt", "content": "hi"})],
                      [Text("Done.")]]) as server:
        run_claude(env=offline_env(server.url, home))
    server.requests[1]  # the JSON body the CLI sent with the tool_result

Each *turn* of the script answers one ``POST /v1/messages`` that carries tools (the agent loop's
requests): a list of blocks (:class:`Text`, :class:`ToolUse`), streamed as server-sent
events, an :class:`ApiError` (an HTTP error with an Anthropic-style JSON body; by default it
also answers the CLI's automatic retries of that request, so one ``ApiError`` fails one CLI
call), or a :class:`Reply` (blocks computed from the request, for a model that reacts to what
it was sent, e.g. a Stop hook's feedback). Once the script runs out every request gets
a plain ``"done"`` text turn that ends with ``end_turn``. Side requests without tools (titles,
summaries) get that ``"done"`` answer without consuming the script.

Every request is recorded: :attr:`ModelServer.requests` holds the JSON bodies of all
``/v1/messages`` calls, :attr:`ModelServer.log` every method and path, and
:attr:`ModelServer.unknown` the paths it had no specific answer for.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Text:
    """A text block of an assistant turn."""

    text: str


@dataclass(frozen=True)
class ToolUse:
    """A ``tool_use`` block: the CLI runs tool ``name`` (``"Write"``, ``"Bash"``, ...) for real.

    ``input`` is streamed as ``input_json_delta`` fragments; ``id`` defaults to a fresh
    ``toolu_...`` id (see :attr:`ModelServer.requests` for the matching ``tool_result``).
    """

    name: str
    input: dict[str, Any]
    id: str | None = None


#: Error ``type`` in the JSON body per HTTP status, as the real API answers.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


@dataclass(frozen=True)
class ApiError:
    """An HTTP error answer: ``{"type": "error", "error": {"type": ..., "message": ...}}``.

    Args:
        status: the HTTP status (500, 429, 529, ...).
        message: ``error.message``; the CLI shows it in its result text.
        type: ``error.type``; defaults from :data:`ERROR_TYPES` (``api_error`` otherwise).
        retry_after: seconds for a ``retry-after`` header, or None for no header.
        headers: more response headers, e.g.
            ``{"anthropic-ratelimit-requests-reset": "2030-01-01T00:00:00Z"}``.
        repeat: how many consecutive fresh requests get this answer (None: every request from
            now on, the script never moves past it).
        sticky: also answer the client's automatic retries of a request that got this error
            with it, without counting them against ``repeat``; so ``ApiError(500)`` fails
            exactly one CLI call whatever ``CLAUDE_CODE_MAX_RETRIES`` is. A retry is a request
            whose body is byte-identical to the failed one (Claude Code 2.1.328 resends the
            same body and headers, including its per-session id, and leaves
            ``x-stainless-retry-count`` at 0) or that has ``x-stainless-retry-count`` above 0.
    """

    status: int = 500
    message: str = "mock failure"
    type: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    repeat: int | None = 1
    sticky: bool = True

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        kind = self.type or ERROR_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": self.message},
                "request_id": f"req_{uuid.uuid4().hex[:24]}"}


Block = Text | ToolUse


@dataclass(frozen=True)
class Reply:
    """A turn decided by the request it answers, like a model that reads what it was sent.

    ``respond`` gets the JSON body of that ``POST /v1/messages`` and returns the blocks to
    stream. If it raises, the answer is a text turn naming the error and the exception is
    kept in :attr:`ModelServer.reply_errors` (assert that it stays empty).
    """

    respond: Callable[[dict[str, Any]], Sequence[Block]]


Turn = Sequence[Block] | ApiError | Reply

#: The answer once the script has run out (and for side requests without tools).
DONE: tuple[Block, ...] = (Text("done"),)


def sse_events(blocks: Sequence[Block], *, model: str, input_tokens: int = 100,
               output_tokens: int = 20) -> list[tuple[str, dict[str, Any]]]:
    """The Messages API stream for one assistant message, as ``(event, data)`` pairs.

    ``stop_reason`` is ``tool_use`` when any block is a :class:`ToolUse`, else ``end_turn``.
    Token counts are what ``usage`` reports (the CLI derives ``total_cost_usd`` from them).
    """
    msg_id = f"msg_{uuid.uuid4().hex[:24]}"
    usage = {"input_tokens": input_tokens, "output_tokens": 1,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}}),
    ]
    for index, block in enumerate(blocks):
        if isinstance(block, Text):
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {
                "type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": block.text}}))
        else:
            tool_id = block.id or f"toolu_{uuid.uuid4().hex[:24]}"
            events.append(("content_block_start", {
                "type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": tool_id, "name": block.name,
                                  "input": {}}}))
            raw = json.dumps(block.input)
            for start in range(0, len(raw), 64) or [0]:  # several fragments, like the real API
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": raw[start:start + 64]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = "tool_use" if any(isinstance(b, ToolUse) for b in blocks) else "end_turn"
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": output_tokens}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _encode_sse(events: Iterable[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    for name, data in events)


class ModelServer:
    """A threaded HTTP server on ``127.0.0.1`` (random port) that answers as a scripted model.

    Use it as a context manager; :attr:`url` is valid inside the ``with`` block. Thread-safe:
    the CLI may open several connections at once.

    Args:
        turns: the script, consumed in order by requests that carry ``tools``.
        model: the ``model`` reported in ``message_start`` (default: the one requested).
        side_requests_use_script: when False (default), requests without ``tools`` (side
            requests such as titles or summaries) are answered with :data:`DONE` without
            consuming the script; they are recorded either way.
    """

    def __init__(self, turns: Iterable[Turn] = (), *, model: str | None = None,
                 side_requests_use_script: bool = False) -> None:
        self._script: list[Turn] = list(turns)
        self._errors_left: int | None = None  # remaining repeats of the current ApiError
        self._last_error: ApiError | None = None  # what the previous scripted request got
        self._last_raw = b""  # and its body, to recognise the client's retries
        self._model = model
        self._side_consumes = side_requests_use_script
        self._lock = threading.Lock()
        #: JSON bodies of every ``POST /v1/messages`` (side requests included), in order.
        self.requests: list[dict[str, Any]] = []
        #: The HTTP headers (lower-cased names) of each request in :attr:`requests`.
        self.headers: list[dict[str, str]] = []
        #: ``(method, path, answer)`` of every request, ``answer`` being the HTTP status.
        self.log: list[tuple[str, str, int]] = []
        #: ``"METHOD path"`` of requests for paths this server does not know.
        self.unknown: list[str] = []
        #: Exceptions raised by :class:`Reply` turns, in order.
        self.reply_errors: list[BaseException] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script ---------------------------------------------------------------------------
    def add(self, *turns: Turn) -> None:
        """Append turns to the script (safe while the server runs)."""
        with self._lock:
            self._script.extend(turns)

    @property
    def remaining(self) -> int:
        """How many scripted turns have not been answered yet."""
        with self._lock:
            return len(self._script)

    def _next_turn(self, scripted: bool, retry: bool, raw: bytes) -> Turn:
        with self._lock:
            if not scripted:
                return DONE
            failed, self._last_error = self._last_error, None
            if failed is not None and failed.sticky and (retry or raw == self._last_raw):
                self._last_error = failed
                return failed  # the client's own retry of a failed request
            self._last_raw = raw
            if not self._script:
                return DONE
            turn = self._script[0]
            if isinstance(turn, ApiError):
                self._last_error = turn
                if turn.repeat is not None:
                    self._errors_left = (turn.repeat if self._errors_left is None
                                         else self._errors_left) - 1
                    if self._errors_left <= 0:
                        self._script.pop(0)
                        self._errors_left = None
                return turn
            self._script.pop(0)
            return turn

    # -- recorded traffic -------------------------------------------------------------------
    @property
    def agent_requests(self) -> list[dict[str, Any]]:
        """The recorded ``/v1/messages`` bodies that carry tools (the agent loop's turns)."""
        with self._lock:
            return [r for r in self.requests if r.get("tools")]

    def texts(self) -> Iterator[str]:
        """Every text (plain or in blocks) of every user message the CLI sent, in order."""
        for body in list(self.requests):
            for message in body.get("messages", []):
                if message.get("role") != "user":
                    continue
                yield from _texts(message.get("content"))

    def tool_results(self) -> list[dict[str, Any]]:
        """Every ``tool_result`` block the CLI sent (from the last request that has each id)."""
        found: dict[str, dict[str, Any]] = {}
        for body in list(self.requests):
            for message in body.get("messages", []):
                content = message.get("content")
                if isinstance(content, list):
                    for block in content:
                        if isinstance(block, dict) and block.get("type") == "tool_result":
                            found[str(block.get("tool_use_id"))] = block
        return list(found.values())

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash, no ``/v1``)."""
        if self._httpd is None:
            raise RuntimeError("ModelServer is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ModelServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="model-server",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    # -- answers ----------------------------------------------------------------------------
    def _answer_messages(self, body: dict[str, Any], headers: dict[str, str],
                         raw: bytes) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
        scripted = bool(body.get("tools")) or self._side_consumes
        retry = headers.get("x-stainless-retry-count", "0") not in ("", "0")
        turn = self._next_turn(scripted, retry, raw)
        if isinstance(turn, Reply):
            try:
                turn = list(turn.respond(body))
            except Exception as exc:
                with self._lock:
                    self.reply_errors.append(exc)
                turn = [Text(f"scripted reply failed: {exc!r}")]
        if isinstance(turn, ApiError):
            headers = {"content-type": "application/json", **turn.headers}
            if turn.retry_after is not None:
                headers["retry-after"] = f"{turn.retry_after:g}"
            return turn.status, headers, json.dumps(turn.body()).encode()
        model = self._model or str(body.get("model") or "claude-test")
        events = sse_events(list(turn), model=model)
        if body.get("stream"):
            return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, \
                _encode_sse(events)
        return 200, {"content-type": "application/json"}, json.dumps(_collect(events)).encode()


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                yield str(block.get("text", ""))
            elif block.get("type") == "tool_result":
                yield from _texts(block.get("content"))


def _collect(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The non-streaming message equivalent to ``events``."""
    message: dict[str, Any] = dict(events[0][1]["message"])
    content: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for _name, data in events[1:]:
        if data["type"] == "content_block_start":
            content.append(dict(data["content_block"]))
        elif data["type"] == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                content[data["index"]]["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif data["type"] == "message_delta":
            message.update(data["delta"])
            message["usage"] = {**message["usage"], **data["usage"]}
    for index, raw in partial.items():
        content[index]["input"] = json.loads(raw or "{}")
    message["content"] = content
    return message


_request_ids = itertools.count(1)


class _Handler(BaseHTTPRequestHandler):
    owner: ModelServer
    protocol_version = "HTTP/1.1"
    server_version = "scripted-model/1"

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        path = urlsplit(self.path).path
        with self.owner._lock:
            self.owner.log.append((self.command, path, status))
        self.send_response(status)
        self.send_header("request-id", f"req_{next(_request_ids):024d}")
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            self.wfile.flush()

    def _unknown(self) -> None:
        with self.owner._lock:
            self.owner.unknown.append(f"{self.command} {self.path}")
        sys.stderr.write(f"model_server: unknown request {self.command} {self.path}\n")

    def do_POST(self) -> None:
        raw = self._read_body()
        path = urlsplit(self.path).path.rstrip("/")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        if path == "/v1/messages":
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._send(*self.owner._answer_messages(body, headers, raw))
        elif path == "/v1/messages/count_tokens":
            tokens = max(1, len(json.dumps(body)) // 4)
            self._send(200, {"content-type": "application/json"},
                       json.dumps({"input_tokens": tokens}).encode())
        else:
            self._unknown()
            self._send(200, {"content-type": "application/json"}, b"{}")

    def do_GET(self) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/v1/models":
            model = self.owner._model or "claude-test"
            data = {"data": [{"type": "model", "id": model, "display_name": model,
                              "created_at": "2025-01-01T00:00:00Z"}],
                    "has_more": False, "first_id": model, "last_id": model}
            self._send(200, {"content-type": "application/json"}, json.dumps(data).encode())
            return
        if path not in ("", "/"):
            self._unknown()
        self._send(200, {"content-type": "application/json"}, b"{}")

    def do_HEAD(self) -> None:
        self._send(200, {"content-type": "application/json"}, b"")

    def do_PUT(self) -> None:
        self._read_body()
        self._unknown()
        self._send(200, {"content-type": "application/json"}, b"{}")

    do_PATCH = do_PUT
    do_DELETE = do_PUT
