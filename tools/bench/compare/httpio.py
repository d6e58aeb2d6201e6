"""A small asyncio HTTP/1.1 client and server, enough for the alternatives
(a)-(c) to speak to the fake platform in one event loop: keep-alive
connections, `Content-Length` bodies only (what the fake platform and
`requests` use). No third-party async HTTP library is installed here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class HttpError(Exception):
    """The peer closed the connection or answered something unreadable."""


async def _read_message(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """One HTTP message: (start line, lower-cased headers, body).

    Raises:
        HttpError: the connection closed before a whole message came.
    """
    try:
        start = await reader.readline()
        if not start:
            raise HttpError("connection closed")
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise HttpError("connection closed in the headers")
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        body = await reader.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
        raise HttpError(str(exc)) from exc
    return start.decode("latin-1").strip(), headers, body


class HttpClient:
    """POSTs over a pool of at most `max_connections` keep-alive connections
    to one host:port."""

    def __init__(self, host: str, port: int, max_connections: int = 64) -> None:
        self.host, self.port = host, port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """POST `body`; returns (HTTP status, answer body).

        A reused connection found closed is replaced once (the fake platform
        keeps connections open, so the request had not been read).

        Raises:
            HttpError: no answer.
            OSError: no connection could be opened.
        """
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        raw = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{head}"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        async with self._slots:
            for _ in range(2):
                fresh = not self._idle
                conn = await asyncio.open_connection(self.host, self.port) if fresh else self._idle.pop()
                reader, writer = conn
                try:
                    writer.write(raw)
                    await writer.drain()
                    start, answer_headers, answer = await _read_message(reader)
                except (HttpError, ConnectionError) as exc:
                    writer.close()
                    if fresh:
                        raise HttpError(str(exc)) from exc
                    continue
                if answer_headers.get("connection", "").lower() == "close":
                    writer.close()
                else:
                    self._idle.append(conn)
                return int(start.split(" ", 2)[1]), answer
        raise HttpError("no answer on a fresh connection")

    async def close(self) -> None:
        """Close the idle connections."""
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


Handler = Callable[[str, str, dict[str, str], bytes], int]


async def serve(host: str, port: int, handler: Handler) -> asyncio.Server:
    """Serve HTTP/1.1 with keep-alive: `handler(method, path, headers, body)`
    returns the status, answered with an empty JSON object."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    start, headers, body = await _read_message(reader)
                except HttpError:
                    return
                method, path, _ = (start.split(" ", 2) + ["", ""])[:3]
                status = handler(method, path, headers, body)
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                             f"Content-Length: 2\r\n\r\n{{}}".encode())
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return  # the peer left, or this process is stopping
        finally:
            writer.close()

    return await asyncio.start_server(connection, host, port, backlog=512)
