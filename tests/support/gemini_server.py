"""A scripted loopback model: an HTTP server that speaks enough of the Gemini API.

Point a real Gemini CLI at it (``GOOGLE_GEMINI_BASE_URL`` with ``gemini-api-key``
authentication, see :func:`tests.support.gemini_cli.offline_env`) and it plays a model that
follows a script::

    with GeminiServer([[FunctionCall("run_shell_command", {"command": "echo hi > done.txt"})],
                       [Text("Done.")]]) as server:
        run_gemini(...)
    server.function_responses()  # the functionResponse parts the CLI sent back

Each *turn* of the script answers one ``POST /v1beta/models/<model>:streamGenerateContent``
(``?alt=sse``) that carries ``tools`` (the agent loop's requests): a list of parts
(:class:`Text`, :class:`FunctionCall`) streamed as server-sent events, each ``data:`` line a
``GenerateContentResponse`` (``candidates[0].content.parts``, ``finishReason`` ``STOP`` on the
last, ``usageMetadata``); an :class:`ApiError` (an HTTP error with a Google-style
``{"error": {"code", "message", "status", "details"}}`` body); or a :class:`Reply` (parts
computed from the request). Once the script runs out every request gets a plain ``"done"``
text. Requests without ``tools`` (the CLI's side calls through ``:generateContent``, such as
its model router's complexity classifier, which asks for JSON) get that answer, or a value
fitting the requested ``responseJsonSchema`` (:func:`schema_value`), without consuming the
script; a ``:countTokens`` call gets a count.

The shapes are the Gemini API's (``ai.google.dev/api/generate-content``) as Gemini CLI 0.61.0
reads them: it runs the ``functionCall`` parts (``write_file`` with ``file_path`` and
``content``, ``run_shell_command`` with ``command``; see :meth:`GeminiServer.tool_names`),
sends their results back as ``functionResponse`` parts in the next request, and classifies a
429 by the ``google.rpc`` details of the error body (``QuotaFailure``, ``RetryInfo``).

Every request is recorded: :attr:`GeminiServer.requests` holds ``(method, path, body)`` of
every model call, :attr:`GeminiServer.headers` their headers, :attr:`GeminiServer.log` every
method, path and answered status, and :attr:`GeminiServer.unknown` the paths it had no
specific answer for.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Text:
    """A ``text`` part of a model turn."""

    text: str


@dataclass(frozen=True)
class FunctionCall:
    """A ``functionCall`` part: the CLI runs tool ``name`` for real.

    Gemini CLI 0.61.0 declares ``write_file`` (``{"file_path": ..., "content": ...}``),
    ``run_shell_command`` (``{"command": ..., "description": ...}``), ``replace``,
    ``read_file`` and others (see :meth:`GeminiServer.tool_names`). ``id`` is sent as the
    part's ``functionCall.id`` when given (the CLI echoes it in the ``functionResponse``).
    """

    name: str
    args: dict[str, Any]
    id: str | None = None


Part = Text | FunctionCall

#: The ``error.status`` the Gemini API gives per HTTP status (google.rpc.Code names).
ERROR_STATUSES: dict[int, str] = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
    404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}

#: The API's usual messages per HTTP status; 429's is the free-tier quota message.
ERROR_MESSAGES: dict[int, str] = {
    500: "An internal error has occurred. Please retry or report in "
         "https://developers.generativeai.google/guide/troubleshooting",
    429: "You exceeded your current quota, please check your plan and billing details. For "
         "more information on this error, head to: "
         "https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: "
         "generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, "
         "model: gemini-2.5-flash\nPlease retry in 2s.",
}

#: ``@type`` URLs of the ``google.rpc`` error details.
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
HELP = "type.googleapis.com/google.rpc.Help"


@dataclass(frozen=True)
class ApiError:
    """An HTTP error answer: ``{"error": {"code", "message", "status", "details"}}``.

    Args:
        status: the HTTP status (500, 429, 503, ...), also ``error.code``.
        message: ``error.message``; default :data:`ERROR_MESSAGES` or ``"mock failure"``.
        rpc_status: ``error.status``; default from :data:`ERROR_STATUSES`.
        retry_delay: a ``google.rpc.RetryInfo`` detail's ``retryDelay`` (``"2s"``), or None
            for no such detail. A 429 by default also carries a per-minute
            ``google.rpc.QuotaFailure`` and a ``Help`` link, as the API sends.
        details: replaces the default ``details`` list entirely when given.
        repeat: how many consecutive model requests get this answer (None: every request
            from now on). The CLI's own retries count: with ``general.maxAttempts = 1``
            (:func:`tests.support.gemini_cli.write_settings`) each request is sent once.
    """

    status: int = 500
    message: str | None = None
    rpc_status: str | None = None
    retry_delay: str | None = None
    details: Sequence[dict[str, Any]] | None = None
    repeat: int | None = 1

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        message = self.message if self.message is not None else \
            ERROR_MESSAGES.get(self.status, "mock failure")
        details: list[dict[str, Any]]
        if self.details is not None:
            details = list(self.details)
        elif self.status == 429:
            details = [
                {"@type": QUOTA_FAILURE, "violations": [{
                    "quotaMetric": "generativelanguage.googleapis.com/"
                                   "generate_content_free_tier_requests",
                    "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                    "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                    "quotaValue": "10"}]},
                {"@type": HELP, "links": [{
                    "description": "Learn more about Gemini API quotas",
                    "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}]
        else:
            details = []
        if self.retry_delay is not None and self.details is None:
            details.append({"@type": RETRY_INFO, "retryDelay": self.retry_delay})
        return {"error": {"code": self.status, "message": message,
                          "status": self.rpc_status or ERROR_STATUSES.get(self.status,
                                                                          "UNKNOWN"),
                          "details": details}}


@dataclass(frozen=True)
class Reply:
    """A turn decided by the request it answers: ``respond`` gets the JSON body of that
    model request and returns the parts to stream. If it raises, the answer is a text naming
    the error and the exception is kept in :attr:`GeminiServer.reply_errors`."""

    respond: Callable[[dict[str, Any]], Sequence[Part]]


Turn = Sequence[Part] | ApiError | Reply

#: The answer once the script has run out (and for side requests without tools).
DONE: tuple[Part, ...] = (Text("done"),)


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"text": part.text}
    call: dict[str, Any] = {"name": part.name, "args": part.args}
    if part.id is not None:
        call["id"] = part.id
    return {"functionCall": call}


def response_chunks(parts: Sequence[Part], *, model: str, prompt_tokens: int = 100,
                    output_tokens: int = 20) -> list[dict[str, Any]]:
    """The ``GenerateContentResponse`` chunks of one streamed answer: one chunk per part,
    the last with ``finishReason: "STOP"`` and ``usageMetadata`` (``promptTokenCount``,
    ``candidatesTokenCount``, ``totalTokenCount``); an empty ``parts`` gives one text
    chunk of ``""``."""
    response_id = uuid.uuid4().hex[:22]
    chunks: list[dict[str, Any]] = []
    items = list(parts) or [Text("")]
    for index, part in enumerate(items):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [_part(part)]},
                                     "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model,
                                 "responseId": response_id}
        if index == len(items) - 1:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = {"promptTokenCount": prompt_tokens,
                                      "candidatesTokenCount": output_tokens,
                                      "totalTokenCount": prompt_tokens + output_tokens}
        chunks.append(chunk)
    return chunks


def _merged(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The chunks of one answer as one ``GenerateContentResponse`` (for ``:generateContent``)."""
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    last = dict(chunks[-1])
    last["candidates"] = [{**last["candidates"][0],
                           "content": {"role": "model", "parts": parts}}]
    return last


class GeminiServer:
    """A threaded HTTP server on ``127.0.0.1`` (random port) that answers as a scripted model.

    Use it as a context manager; :attr:`url` is valid inside the ``with`` block. Thread-safe.

    Args:
        turns: the script, consumed in order by model requests that carry ``tools``.
        model: the ``modelVersion`` reported (default: the one in the request's path).
    """

    def __init__(self, turns: Iterable[Turn] = (), *, model: str | None = None) -> None:
        self._script: list[Turn] = list(turns)
        self._errors_left: int | None = None
        self._model = model
        self._lock = threading.Lock()
        #: ``(method, path, JSON body)`` of every model call (``generateContent``,
        #: ``streamGenerateContent``, ``countTokens``), in order.
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        #: The HTTP headers (lower-cased names) of each request in :attr:`requests`.
        self.headers: list[dict[str, str]] = []
        #: ``(method, path with query, answer)`` of every request, ``answer`` the HTTP status.
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
            if isinstance(turn, ApiError):
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
    def agent_requests(self) -> list[dict[str, Any]]:
        """The bodies of the model requests that carried ``tools`` (the agent loop's), in
        order."""
        with self._lock:
            return [body for _m, _p, body in self.requests if body.get("tools")]

    def statuses(self) -> list[int]:
        """The HTTP status answered to each ``streamGenerateContent`` call, in order."""
        with self._lock:
            return [status for method, path, status in self.log
                    if method == "POST" and ":streamGenerateContent" in path]

    def contents(self) -> Iterator[dict[str, Any]]:
        """Every ``contents`` entry of the last agent request (the whole conversation)."""
        bodies = self.agent_requests()
        if bodies:
            yield from (c for c in bodies[-1].get("contents") or [] if isinstance(c, dict))

    def user_texts(self) -> list[str]:
        """The ``text`` parts of the user entries of the last agent request."""
        return [str(p.get("text", "")) for c in self.contents() if c.get("role") == "user"
                for p in c.get("parts") or [] if isinstance(p, dict) and "text" in p]

    def function_responses(self) -> dict[str, dict[str, Any]]:
        """The ``functionResponse`` parts the CLI sent, by ``id`` (or by ``name`` when it
        sent no id), from the last agent request."""
        found: dict[str, dict[str, Any]] = {}
        for content in self.contents():
            for part in content.get("parts") or []:
                answer = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(answer, dict):
                    found[str(answer.get("id") or answer.get("name"))] = answer
        return found

    def tool_names(self) -> list[str]:
        """The function declarations' names the CLI offered in its first agent request."""
        bodies = self.agent_requests()
        if not bodies:
            return []
        return [str(d.get("name")) for tool in bodies[0].get("tools") or []
                if isinstance(tool, dict)
                for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)]

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash, no ``/v1beta``)."""
        if self._httpd is None:
            raise RuntimeError("GeminiServer is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> GeminiServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="gemini-server",
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
    def _answer(self, method: str, path: str, body: dict[str, Any],
                headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append((method, path, body))
            self.headers.append(headers)
        model_path, _, action = path.rpartition(":")
        model = self._model or model_path.rsplit("/", 1)[-1] or "gemini-test"
        if action == "countTokens":
            return 200, {"content-type": "application/json"}, b'{"totalTokens": 100}'
        turn = self._next_turn(bool(body.get("tools")))
        if isinstance(turn, Reply):
            try:
                turn = list(turn.respond(body))
            except Exception as exc:
                with self._lock:
                    self.reply_errors.append(exc)
                turn = [Text(f"scripted reply failed: {exc!r}")]
        if isinstance(turn, ApiError):
            return turn.status, {"content-type": "application/json; charset=UTF-8"}, \
                json.dumps(turn.body()).encode()
        wants_json = _get(body, "generationConfig", "responseMimeType") == "application/json"
        parts = list(turn)
        if wants_json and turn is DONE:
            schema = _get(body, "generationConfig", "responseJsonSchema")
            parts = [Text(json.dumps(schema_value(schema)))]
        chunks = response_chunks(parts, model=model)
        if action == "streamGenerateContent":
            data = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
            return 200, {"content-type": "text/event-stream"}, data
        return 200, {"content-type": "application/json; charset=UTF-8"}, \
            json.dumps(_merged(chunks)).encode()


def _get(value: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def schema_value(schema: object) -> object:
    """A small value that fits the JSON schema ``schema`` (the ``responseJsonSchema`` of a
    side request, types upper- or lower-case): objects get every property, strings
    ``"scripted"``, numbers 1, booleans false, arrays []; ``{}`` for no schema. Gemini CLI
    0.61.0's model router asks for ``{"complexity_reasoning": STRING, "complexity_score":
    INTEGER}`` and its checks for objects of their own."""
    if not isinstance(schema, dict):
        return {}
    kind = str(schema.get("type") or "object").lower()
    if kind == "object":
        props = schema.get("properties")
        return {str(k): schema_value(v) for k, v in props.items()} \
            if isinstance(props, dict) else {}
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    return {"string": "scripted", "integer": 1, "number": 1, "boolean": False,
            "array": []}.get(kind)


#: The model actions this server answers (``POST .../models/<model>:<action>``).
ACTIONS = ("generateContent", "streamGenerateContent", "countTokens")


class _Handler(BaseHTTPRequestHandler):
    owner: GeminiServer
    protocol_version = "HTTP/1.1"
    server_version = "scripted-gemini/1"

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        with self.owner._lock:
            self.owner.log.append((self.command, self.path, status))
        self.send_response(status)
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
        sys.stderr.write(f"gemini_server: unknown request {self.command} {self.path}\n")
        body = {"error": {"code": 404, "message": f"unknown path {self.path}",
                          "status": "NOT_FOUND", "details": []}}
        self._send(404, {"content-type": "application/json"}, json.dumps(body).encode())

    def do_POST(self) -> None:
        raw = self._read_body()
        path = urlsplit(self.path).path.rstrip("/")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        action = path.rpartition(":")[2]
        if "/models/" in path and action in ACTIONS and isinstance(body, dict):
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._send(*self.owner._answer("POST", path, body, headers))
        else:
            self._unknown()

    def do_GET(self) -> None:
        self._unknown()

    def do_PUT(self) -> None:
        self._read_body()
        self._unknown()

    do_PATCH = do_PUT
    do_DELETE = do_PUT
