"""The lean HTTP transport against bare asyncio servers: connection reuse, every body kind, a closed
connection replaced, the read timeout, plain http only, and the SDK's errors."""

from __future__ import annotations

import asyncio
import re
import time

import openai
import pytest

from rubrics.judges import (
    LLMJudgeClient,
)
from rubrics.judges.transport import LeanChatPost, LeanHTTPTransport, httpx

# -- the lean HTTP transport ----------------------------------------------------------------------------


async def raw_server(
    replies: list[bytes], close_after_each: bool = False
) -> tuple[asyncio.Server, list[int]]:
    """A bare asyncio HTTP server that sends ``replies`` in order; counts accepted connections."""
    accepted = [0]
    pending = list(replies)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        while pending:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            writer.write(pending.pop(0))
            await writer.drain()
            if close_after_each:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, accepted


async def test_lean_transport_reuses_connections_and_reads_every_body_kind() -> None:
    body = b'{"ok": true}'
    replies = [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"ok"\r\n7\r\n: true}\r\n0\r\n\r\n',
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n" + body,  # no length: read to close
    ]
    server, accepted = await raw_server(replies)
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(transport=LeanHTTPTransport()) as http:
        responses = [await http.post(f"http://127.0.0.1:{port}/v1/x", json={"i": i}) for i in range(4)]
    server.close()
    assert [r.json() for r in responses] == [{"ok": True}] * 4
    assert [r.status_code for r in responses] == [200, 200, 200, 500]
    assert accepted[0] == 1  # one keep-alive connection carried all four


async def test_lean_transport_replaces_a_connection_the_server_closed() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server, accepted = await raw_server([ok, ok, ok], close_after_each=True)
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(transport=LeanHTTPTransport()) as http:
        for _ in range(3):
            assert (await http.get(f"http://127.0.0.1:{port}/")).json() == {}
    server.close()
    assert accepted[0] == 3


async def test_lean_transport_honours_the_read_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads until the client hangs up, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with httpx.AsyncClient(transport=LeanHTTPTransport(), timeout=0.2) as http:
        start = time.perf_counter()
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"http://127.0.0.1:{port}/")
    server.close()
    assert time.perf_counter() - start < 1.0


async def test_lean_transport_is_plain_http_only() -> None:
    async with httpx.AsyncClient(transport=LeanHTTPTransport()) as http:
        with pytest.raises(httpx.UnsupportedProtocol):
            await http.get("https://127.0.0.1:1/")
    assert LLMJudgeClient("https://example.invalid/v1", "m").lean_http is False
    assert LLMJudgeClient("http://127.0.0.1:1/v1", "m").lean_http is True


async def test_lean_chat_post_sends_json_and_raises_the_sdks_errors() -> None:
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        replies = [
            (b"200 OK", b'{"ok": true}'),
            (b"429 Too Many Requests", b'{"error": {"message": "slow down"}}'),
            (b"400 Bad Request", b"no json here"),
            (b"503 Busy", b"{}"),
            (b"200 OK", b"plain text"),
        ]
        for status, body in replies:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
            heads.append(head + await reader.readexactly(length))
            writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    post = LeanChatPost(f"http://127.0.0.1:{port}/v1/chat/completions", {"Authorization": "Bearer sk-x"})
    assert "sk-x" not in repr(post)
    assert await post({"model": "m", "n": 1}) == {"ok": True}
    with pytest.raises(openai.RateLimitError, match=r"^Error code: 429 - slow down$"):
        await post({})
    with pytest.raises(openai.BadRequestError, match=r"^Error code: 400$") as info:
        await post({})
    assert info.value.body == "no json here"
    with pytest.raises(openai.InternalServerError):
        await post({})
    assert await post({}) == "plain text"  # not JSON: the text, as the SDK gives it
    await post.aclose()
    server.close()
    first = heads[0].decode()
    assert first.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    for line in (f"Host: 127.0.0.1:{port}", "Authorization: Bearer sk-x", "Content-Type: application/json"):
        assert f"\r\n{line}\r\n" in first
    assert first.endswith('\r\n\r\n{"model": "m", "n": 1}')
    with pytest.raises(openai.APIConnectionError):
        await LeanChatPost("http://127.0.0.1:9/v1/chat/completions", {})({})
    with pytest.raises(ValueError, match="plain http"):
        LeanChatPost("https://example.invalid/v1/chat/completions", {})
