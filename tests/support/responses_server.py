"""A scripted loopback model: an HTTP server that speaks enough of the OpenAI Responses API.

Point a real Codex CLI at it (a custom model provider in ``$CODEX_HOME/config.toml``, see
:func:`tests.support.codex_cli.write_codex_home`) and it plays a model that follows a script::

    with ResponsesServer([[FunctionCall("exec_command", {"cmd": "echo hi > done.txt"})],
                          [Text("Done.")]]) as server:
        run_codex(...)
    server.tool_outputs()  # the function_call_output items the CLI sent back

Each *turn* of the script answers one ``POST /v1/responses`` that carries ``tools`` (the
agent's requests): a list of output items (:class:`Text`, :class:`FunctionCall`,
:class:`CustomToolCall`) streamed as server-sent events (``response.created``,
``response.output_item.added`` / ``.done``, ``response.output_text.delta``,
``response.completed`` with ``usage``), an :class:`ApiError` (an HTTP error with an
OpenAI-style ``{"error": {...}}`` body), or a :class:`Reply` (items computed from the request).
Once the script runs out every request gets a plain ``"done"`` message. Requests without
``tools`` get that answer without consuming the script.

The event shapes are the Responses API's streaming events as Codex CLI 0.171.0 reads them:
it runs the ``function_call`` / ``custom_tool_call`` items of ``response.output_item.done``
(``exec_command`` with ``{"cmd": ...}``, the freeform ``apply_patch`` with a patch text as
``input``), sends their results back as ``function_call_output`` / ``custom_tool_call_output``
input items in the next request, and ends a turn at ``response.completed``.

Every request is recorded: :attr:`ResponsesServer.requests` holds the JSON bodies of all
``/v1/responses`` calls, :attr:`ResponsesServer.headers` their headers,
:attr:`ResponsesServer.log` every method, path and answered status, and
:attr:`ResponsesServer.unknown` the paths it had no specific answer for.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Text:
    """An assistant ``message`` output item with one ``output_text`` part."""

    text: str


@dataclass(frozen=True)
class FunctionCall:
    """A ``function_call`` output item: the CLI runs tool ``name`` for real.

    Codex 0.171.0 offers ``exec_command`` (``{"cmd": "shell command", "workdir": ...}``),
    ``write_stdin``, ``view_image`` and others (see the ``tools`` of
    :attr:`ResponsesServer.requests`). ``arguments`` is sent JSON-encoded, as the API does;
    ``call_id`` defaults to a fresh ``call_...`` id.
    """

    name: str
    arguments: dict[str, Any]
    call_id: str | None = None


@dataclass(frozen=True)
class CustomToolCall:
    """A ``custom_tool_call`` output item (a freeform tool): the CLI runs tool ``name`` with
    the raw text ``input``; Codex 0.171.0's ``apply_patch`` takes a ``*** Begin Patch`` ...
    ``*** End Patch`` text here (for the models whose metadata says ``freeform``)."""

    name: str
    input: str
    call_id: str | None = None


Item = Text | FunctionCall | CustomToolCall

#: Error ``type`` and ``code`` in the JSON body per HTTP status, as the OpenAI API answers.
ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", None), 404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"), 500: ("server_error", None),
    503: ("server_error", None)}

#: The API's default messages per HTTP status.
ERROR_MESSAGES = {
    500: "The server had an error while processing your request. Sorry about that!",
    429: ("Rate limit reached for gpt-5.5 in organization org-test on requests per min (RPM): "
          "Limit 3, Used 3, Requested 1. Please try again in 2s. Visit "
          "https://platform.openai.com/account/rate-limits to learn more."),
}


@dataclass(frozen=True)
class ApiError:
    """An HTTP error answer: ``{"error": {"message", "type", "param", "code"}}``.

    Args:
        status: the HTTP status (500, 429, 503, ...).
        message: ``error.message``; default :data:`ERROR_MESSAGES` (429's says ``Please try
            again in 2s``) or ``"mock failure"``.
        type: ``error.type``; default from :data:`ERROR_KINDS` (``server_error`` otherwise).
        code: ``error.code``; default from :data:`ERROR_KINDS`.
        retry_after: seconds for a ``retry-after`` header, or None for no header.
        headers: more response headers, e.g. ``{"x-ratelimit-reset-requests": "2s"}``.
        repeat: how many consecutive requests get this answer (None: every request from now
            on, the script never moves past it). The CLI's own retries count: with
            ``request_max_retries = 0`` (:func:`tests.support.codex_cli.write_codex_home`)
            Codex sends each request once.
    """

    status: int = 500
    message: str | None = None
    type: str | None = None
    code: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    repeat: int | None = 1

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        kind, code = ERROR_KINDS.get(self.status, ("server_error", None))
        message = self.message if self.message is not None else \
            ERROR_MESSAGES.get(self.status, "mock failure")
        return {"error": {"message": message, "type": self.type or kind, "param": None,
                          "code": self.code if self.code is not None else code}}


@dataclass(frozen=True)
class Reply:
    """A turn decided by the request it answers: ``respond`` gets the JSON body of that
    ``POST /v1/responses`` and returns the items to stream. If it raises, the answer is a
    message naming the error and the exception is kept in
    :attr:`ResponsesServer.reply_errors` (assert that it stays empty)."""

    respond: Callable[[dict[str, Any]], Sequence[Item]]


@dataclass(frozen=True)
class StreamFailure:
    """A ``200`` stream that ends with ``response.failed`` instead of ``response.completed``:
    the Responses API's way of failing a response it already started (``response.error``
    has ``code`` and ``message``, e.g. ``rate_limit_exceeded`` with ``Please try again in
    1.5s``). ``repeat`` as for :class:`ApiError`."""

    code: str = "server_error"
    message: str = "mock failure"
    repeat: int | None = 1


Turn = Sequence[Item] | ApiError | StreamFailure | Reply

#: The answer once the script has run out (and for requests without tools).
DONE: tuple[Item, ...] = (Text("done"),)


def _item(item: Item, *, final: bool) -> dict[str, Any]:
    """The output item as ``response.output_item.added`` (``final`` False: text empty,
    ``in_progress``) or ``.done`` shows it."""
    status = "completed" if final else "in_progress"
    if isinstance(item, Text):
        return {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "status": status,
                "role": "assistant",
                "content": [{"type": "output_text", "text": item.text if final else "",
                             "annotations": []}] if final else []}
    if isinstance(item, FunctionCall):
        return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}", "status": status,
                "call_id": item.call_id or f"call_{uuid.uuid4().hex[:24]}", "name": item.name,
                "arguments": json.dumps(item.arguments) if final else ""}
    return {"type": "custom_tool_call", "id": f"ctc_{uuid.uuid4().hex[:24]}", "status": status,
            "call_id": item.call_id or f"call_{uuid.uuid4().hex[:24]}", "name": item.name,
            "input": item.input if final else ""}


def sse_events(items: Sequence[Item], *, model: str, input_tokens: int = 100,
               cached_tokens: int = 0, output_tokens: int = 20
               ) -> list[tuple[str, dict[str, Any]]]:
    """The Responses API stream of one response, as ``(event, data)`` pairs.

    Each item gets ``response.output_item.added``, its ``response.output_text.delta`` (a
    message) and ``response.output_item.done`` (with the same ids); ``response.completed``
    carries ``usage`` (``input_tokens``, ``input_tokens_details.cached_tokens``,
    ``output_tokens``, ``output_tokens_details.reasoning_tokens``, ``total_tokens``).
    """
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    base = {"id": response_id, "object": "response", "created_at": created, "model": model}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0,
                              "response": {**base, "status": "in_progress", "output": []}}),
    ]
    done: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        final = _item(item, final=True)
        start = {**_item(item, final=False), "id": final["id"]}
        if "call_id" in final:
            start["call_id"] = final["call_id"]
        events.append(("response.output_item.added", {
            "type": "response.output_item.added", "output_index": index, "item": start}))
        if isinstance(item, Text):
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": final["id"],
                "output_index": index, "content_index": 0, "delta": item.text}))
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "output_index": index, "item": final}))
        done.append(final)
    usage = {"input_tokens": input_tokens,
             "input_tokens_details": {"cached_tokens": cached_tokens},
             "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": input_tokens + output_tokens}
    events.append(("response.completed", {
        "type": "response.completed",
        "response": {**base, "status": "completed", "output": done, "usage": usage}}))
    for number, (_name, data) in enumerate(events):
        data["sequence_number"] = number
    return events


def _encode_sse(events: Iterable[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    for name, data in events)


class ResponsesServer:
    """A threaded HTTP server on ``127.0.0.1`` (random port) that answers as a scripted model.

    Use it as a context manager; :attr:`url` is valid inside the ``with`` block. Thread-safe.

    Args:
        turns: the script, consumed in order by requests that carry ``tools``.
        model: the ``model`` reported in the response (default: the one requested).
    """

    def __init__(self, turns: Iterable[Turn] = (), *, model: str | None = None) -> None:
        self._script: list[Turn] = list(turns)
        self._errors_left: int | None = None  # remaining repeats of the current ApiError
        self._model = model
        self._lock = threading.Lock()
        #: JSON bodies of every ``POST /v1/responses``, in order.
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

    def _next_turn(self, scripted: bool) -> Turn:
        with self._lock:
            if not scripted or not self._script:
                return DONE
            turn = self._script[0]
            if isinstance(turn, (ApiError, StreamFailure)):
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
    def statuses(self) -> list[int]:
        """The HTTP status answered to each ``POST /v1/responses``, in order."""
        with self._lock:
            return [status for method, path, status in self.log
                    if method == "POST" and path == "/v1/responses"]

    def input_items(self) -> Iterator[dict[str, Any]]:
        """Every ``input`` item of every recorded request, in order (items repeat: each
        request carries the whole conversation)."""
        for body in list(self.requests):
            items = body.get("input")
            if isinstance(items, list):
                yield from (i for i in items if isinstance(i, dict))

    def user_texts(self) -> list[str]:
        """The ``input_text`` parts of the user messages of the last request."""
        if not self.requests:
            return []
        items = self.requests[-1].get("input")
        return [str(part.get("text", "")) for item in (items if isinstance(items, list) else [])
                if isinstance(item, dict) and item.get("role") == "user"
                for part in item.get("content") or [] if isinstance(part, dict)
                and part.get("type") == "input_text"]

    def tool_outputs(self) -> dict[str, dict[str, Any]]:
        """The ``function_call_output`` / ``custom_tool_call_output`` items the CLI sent, by
        ``call_id`` (the last request that holds each)."""
        found: dict[str, dict[str, Any]] = {}
        for item in self.input_items():
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                found[str(item.get("call_id"))] = item
        return found

    def tool_names(self) -> list[str]:
        """The names of the top-level tools the CLI offered in its first request."""
        if not self.requests:
            return []
        return [str(t.get("name") or t.get("type")) for t in self.requests[0].get("tools") or []
                if isinstance(t, dict)]

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash, no ``/v1``)."""
        if self._httpd is None:
            raise RuntimeError("ResponsesServer is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ResponsesServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="responses-server",
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
    def _answer(self, body: dict[str, Any],
                headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
        turn = self._next_turn(bool(body.get("tools")))
        if isinstance(turn, Reply):
            try:
                turn = list(turn.respond(body))
            except Exception as exc:
                with self._lock:
                    self.reply_errors.append(exc)
                turn = [Text(f"scripted reply failed: {exc!r}")]
        if isinstance(turn, ApiError):
            answer = {"content-type": "application/json", **turn.headers}
            if turn.retry_after is not None:
                answer["retry-after"] = f"{turn.retry_after:g}"
            return turn.status, answer, json.dumps(turn.body()).encode()
        model = self._model or str(body.get("model") or "gpt-test")
        if isinstance(turn, StreamFailure):
            events = sse_events([], model=model)
            response = {**events[-1][1]["response"], "status": "failed", "output": [],
                        "error": {"code": turn.code, "message": turn.message}}
            events[-1] = ("response.failed", {"type": "response.failed",
                                              "sequence_number": len(events) - 1,
                                              "response": response})
            return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, \
                _encode_sse(events)
        events = sse_events(list(turn), model=model)
        if body.get("stream"):
            return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, \
                _encode_sse(events)
        return 200, {"content-type": "application/json"}, json.dumps(events[-1][1]["response"]
                                                                     ).encode()


class _Handler(BaseHTTPRequestHandler):
    owner: ResponsesServer
    protocol_version = "HTTP/1.1"
    server_version = "scripted-responses/1"

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        with self.owner._lock:
            self.owner.log.append((self.command, path, status))
        self.send_response(status)
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
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
        sys.stderr.write(f"responses_server: unknown request {self.command} {self.path}\n")

    def do_POST(self) -> None:
        raw = self._read_body()
        path = urlsplit(self.path).path.rstrip("/")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        if path == "/v1/responses" and isinstance(body, dict):
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._send(*self.owner._answer(body, headers))
        else:
            self._unknown()
            self._send(404, {"content-type": "application/json"},
                       json.dumps({"error": {"message": f"unknown path {path}",
                                             "type": "invalid_request_error", "param": None,
                                             "code": None}}).encode())

    def do_GET(self) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/v1/models":
            model = self.owner._model or "gpt-test"
            data = {"object": "list", "data": [{"id": model, "object": "model",
                                                "created": 1, "owned_by": "test"}]}
            self._send(200, {"content-type": "application/json"}, json.dumps(data).encode())
            return
        self._unknown()
        self._send(404, {"content-type": "application/json"}, b"{}")

    def do_PUT(self) -> None:
        self._read_body()
        self._unknown()
        self._send(404, {"content-type": "application/json"}, b"{}")

    do_PATCH = do_PUT
    do_DELETE = do_PUT
