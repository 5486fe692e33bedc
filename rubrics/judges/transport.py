"""A lean keep-alive HTTP/1.1 transport for plain ``http://`` judge endpoints (a vLLM server on the cluster).

Why: with 64 verdicts in flight, httpx's general-purpose connection pool spends more CPU per request (about
1.2 ms here, scanning every pooled connection for expiry) than a judge at 50 ms latency leaves, so scoring
became CPU-bound at about three times its ideal time. This transport keeps a stack of idle connections per
host and speaks the small subset of HTTP/1.1 that a chat-completions call needs: one request, a response
with ``Content-Length``, chunked encoding, or read-to-close. TLS endpoints (hosted APIs) keep the default
httpx transport. ``LLMJudgeClient(lean_http=False)`` turns it off.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

try:  # the HTTP library the installed openai client is built on
    import httpx2 as httpx
except ImportError:  # openai releases before httpx2
    import httpx  # type: ignore[no-redef]

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
        while self._idle[key]:
            conn = self._idle[key].pop()
            try:
                return await self._timed_exchange(key, conn, payload, request, timeouts.get("read"))
            except _StaleConnection:
                continue  # the server closed an idle connection; try the next one
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                conn = await asyncio.open_connection(*key)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connect timed out", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        try:
            return await self._timed_exchange(key, conn, payload, request, timeouts.get("read"))
        except _StaleConnection as exc:
            raise httpx.RemoteProtocolError("server closed the connection", request=request) from exc

    async def _timed_exchange(
        self,
        key: tuple[str, int],
        conn: Connection,
        payload: bytes,
        request: httpx.Request,
        read_timeout_s: float | None,
    ) -> httpx.Response:
        try:
            async with asyncio.timeout(read_timeout_s):
                return await self._exchange(key, conn, payload, request)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("read timed out", request=request) from exc

    async def _exchange(
        self, key: tuple[str, int], conn: Connection, payload: bytes, request: httpx.Request
    ) -> httpx.Response:
        reader, writer = conn
        keep = False
        try:
            writer.write(payload)
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                raise _StaleConnection from exc
            status, headers = _parse_head(head, request)
            body, reusable = await _read_body(reader, headers)
            closing = any(k.lower() == b"connection" and v.lower() == b"close" for k, v in headers)
            keep = reusable and not closing
            return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise httpx.ReadError(str(exc), request=request) from exc
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


def lean_http_client(timeout_s: float) -> httpx.AsyncClient:
    """An HTTP client for ``openai.AsyncOpenAI(http_client=...)`` on the lean transport."""
    return httpx.AsyncClient(transport=LeanHTTPTransport(), timeout=timeout_s)


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


def _parse_head(head: bytes, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]]]:
    status_line, *header_lines = head[:-4].split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"bad status line {status_line[:80]!r}", request=request)
    headers = []
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The body, and whether the connection can carry another request."""
    values = {k.lower(): v for k, v in headers}
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
