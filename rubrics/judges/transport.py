"""A lean keep-alive HTTP/1.1 transport for plain ``http://`` judge endpoints (a vLLM server on the cluster).

Why: with 64 verdicts in flight, httpx's general-purpose connection pool spends more CPU per request (about
1.2 ms here, scanning every pooled connection for expiry) than a judge at 50 ms latency leaves, so scoring
became CPU-bound at about three times its ideal time. This transport keeps a stack of idle connections per
host and speaks the small subset of HTTP/1.1 that a chat-completions call needs: one request, a response
with ``Content-Length``, chunked encoding, or read-to-close. It is an httpx transport, and the judge client
uses its connections through ``LeanChatPost``; TLS endpoints (hosted APIs) go through the openai SDK and
httpx's own pool, as does plain http with ``LLMJudgeClient(lean_http=False)``.

``LeanChatPost`` goes one step further than the transport: it POSTs JSON to one fixed URL through the same
connections with the request head built once, and answers like the openai SDK's ``post`` (the decoded JSON,
or the SDK's status and connection errors) with no SDK or httpx objects made per call. The SDK's request
machinery (request options, URL and header merging, ``httpx.Request`` and ``Response``) cost about 0.4 ms of
CPU per verdict, over half of what the client spent (``benchmarks/judge_bound.py --case criteria``), and with
64 verdicts in flight every 50 ms the client's CPU is what kept scoring from its ideal time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import openai

try:  # the HTTP library the installed openai client is built on
    import httpx2 as httpx
except ImportError:  # openai releases before httpx2
    import httpx  # type: ignore[no-redef]

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Headers = list[tuple[bytes, bytes]]


class RawResponse(NamedTuple):
    """An HTTP answer as read off the connection."""

    status: int
    """The status code."""
    headers: Headers
    """Header names and values, as sent."""
    body: bytes
    """The whole body (de-chunked)."""


class LeanHTTPTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over asyncio streams, plain ``http`` only."""

    def __init__(self, max_idle_per_host: int = 256) -> None:
        self.max_idle_per_host = max_idle_per_host
        """Idle connections kept open per host."""
        self._idle: defaultdict[tuple[str, int], list[Connection]] = defaultdict(list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request within the request's connect and read timeouts (httpx's ``timeout``)."""
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"LeanHTTPTransport speaks plain http only, not {request.url.scheme}"
            )
        timeouts = request.extensions.get("timeout") or {}
        key = (request.url.host, request.url.port or 80)
        payload = _serialize(request, await request.aread())
        try:
            status, headers, body = await self.exchange(
                key, payload, timeouts.get("connect"), timeouts.get("read")
            )
        except httpx.RequestError as exc:
            exc.request = request
            raise
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)

    async def exchange(
        self,
        key: tuple[str, int],
        payload: bytes,
        connect_timeout_s: float | None = None,
        read_timeout_s: float | None = None,
    ) -> RawResponse:
        """Send ``payload`` (a whole HTTP/1.1 request) to ``key`` (host, port) and read the answer, on an idle
        connection when one is still open. Raises httpx's transport errors (without ``request``)."""
        idle = self._idle[key]
        while idle:
            conn = idle.pop()
            try:
                return await self._timed_exchange(key, conn, payload, read_timeout_s)
            except _StaleConnection:
                continue  # the server closed an idle connection; try the next one
        try:
            async with asyncio.timeout(connect_timeout_s):
                conn = await asyncio.open_connection(*key)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connect timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        try:
            return await self._timed_exchange(key, conn, payload, read_timeout_s)
        except _StaleConnection as exc:
            raise httpx.RemoteProtocolError("server closed the connection") from exc

    async def _timed_exchange(
        self, key: tuple[str, int], conn: Connection, payload: bytes, read_timeout_s: float | None
    ) -> RawResponse:
        if read_timeout_s is None:  # the caller bounds the whole call (no timer per request)
            return await self._exchange(key, conn, payload)
        try:
            async with asyncio.timeout(read_timeout_s):
                return await self._exchange(key, conn, payload)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("read timed out") from exc

    async def _exchange(self, key: tuple[str, int], conn: Connection, payload: bytes) -> RawResponse:
        reader, writer = conn
        keep = False
        try:
            writer.write(payload)
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                raise _StaleConnection from exc
            status, headers = _parse_head(head)
            values = {k.lower(): v for k, v in headers}
            body, reusable = await _read_body(reader, values)
            keep = reusable and values.get(b"connection", b"").lower() != b"close"
            return RawResponse(status, headers, body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise httpx.ReadError(str(exc)) from exc
        finally:  # a cancelled or failed exchange never returns its connection to the pool
            if keep and len(self._idle[key]) < self.max_idle_per_host:
                self._idle[key].append(conn)
            else:
                writer.close()

    async def aclose(self) -> None:
        """Close every idle connection."""
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
        self._idle.clear()


class LeanChatPost:
    """POST JSON to one fixed plain ``http://`` URL over a ``LeanHTTPTransport``, answering like the openai
    SDK's ``client.post(path, body=..., cast_to=object)``: the decoded JSON (the text when the body is not
    JSON); ``openai.APIStatusError`` (its subclass for the status) for any status but 2xx;
    ``openai.APIConnectionError`` when the endpoint cannot be reached or drops the connection. No timeout
    of its own: the caller bounds each call (``asyncio.timeout``). ``repr`` never shows the headers (the API
    key is one of them)."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"LeanChatPost: expected a plain http:// URL, got {url!r}")
        self.url = url
        """Where every request goes."""
        self.transport = LeanHTTPTransport()
        """The keep-alive connections."""
        self._key = (parts.hostname, parts.port or 80)
        target = parts.path or "/"
        if parts.query:
            target += f"?{parts.query}"
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {parts.netloc}",
            "Accept: application/json",
            "Content-Type: application/json",
            *(f"{name}: {value}" for name, value in headers.items()),
            "Content-Length: ",
        ]
        self._head = "\r\n".join(lines).encode("ascii")  # all but the body's length

    def __repr__(self) -> str:
        return f"LeanChatPost({self.url!r})"

    async def __call__(self, payload: Mapping[str, Any]) -> Any:
        """Send ``payload`` as the JSON body; the reply's JSON (see the class)."""
        body = json.dumps(payload).encode()
        try:
            status, headers, content = await self.transport.exchange(
                self._key, b"%s%d\r\n\r\n%s" % (self._head, len(body), body)
            )
        except httpx.TransportError as exc:
            raise openai.APIConnectionError(
                message=f"Connection error: {exc}", request=self._request()
            ) from exc
        if not 200 <= status < 300:
            raise self._status_error(status, headers, content)
        try:
            return json.loads(content)
        except ValueError:
            return content.decode("utf-8", "replace")

    def _request(self) -> httpx.Request:
        """The request, for an error to name (made only on failure; its headers are left out)."""
        return httpx.Request("POST", self.url)

    def _status_error(self, status: int, headers: Headers, content: bytes) -> openai.APIStatusError:
        """The SDK's error for ``status``, with its message (``Error code: 429 - <the server's message>``)."""
        response = httpx.Response(status, headers=headers, content=content, request=self._request())
        message = f"Error code: {status}"
        try:
            body: Any = json.loads(content)
        except ValueError:
            body = content.decode("utf-8", "replace").strip()
        error = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
            message += f" - {error['message']}"
        kind = _STATUS_ERRORS.get(
            status, openai.InternalServerError if status >= 500 else openai.APIStatusError
        )
        return kind(message, response=response, body=error)

    async def aclose(self) -> None:
        """Close the connections."""
        await self.transport.aclose()


_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}
"""The openai SDK's error class per status (``_make_status_error``); other 5xx: ``InternalServerError``."""


class _StaleConnection(Exception):
    """A pooled connection was closed by the server before it answered."""


def _serialize(request: httpx.Request, body: bytes) -> bytes:
    target = request.url.raw_path.decode("ascii")
    lines = [f"{request.method} {target} HTTP/1.1".encode()]
    has_length = False
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            continue  # the body is already read in full: always send a Content-Length
        has_length |= lowered == b"content-length"
        lines.append(name + b": " + value)
    if not has_length:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _parse_head(head: bytes) -> tuple[int, Headers]:
    status_line, *header_lines = head[:-4].split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"bad status line {status_line[:80]!r}")
    headers = []
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, values: Mapping[bytes, bytes]) -> tuple[bytes, bool]:
    """The body, and whether the connection can carry another request (``values``: the headers by
    lower-case name)."""
    if b"content-length" in values:
        return await reader.readexactly(int(values[b"content-length"])), True
    if values.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return b"".join(chunks), True
            chunks.append(chunk[:-2])
    return await reader.read(), False  # neither: the body ends when the server closes
