"""The guarded server's connection slots on a real local socket (no other service needed):
refusals close their connection, a caller over its share is refused while another gets in,
the connection idle the longest gives up its slot at the cap, and anonymous idle
connections are closed soon."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.limits.test_server import guarded_port
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.limits import LimitSettings

LIMITS = LimitSettings(header_timeout_s=5, keepalive_timeout_s=30, max_connections=4,
                       caller_connection_share=0.5, anonymous_idle_s=0.3)
PREFIX = {"callback_prefixes": ["http://127.0.0.1:9000/"]}
CALLERS = CallerRegistry.from_mapping({"callers": {
    "a": {"token_sha256": hash_token("tok-a"), **PREFIX},
    "b": {"token_sha256": hash_token("tok-b"), **PREFIX}}})
LIST = "GET /v1/triggers?limit=1"


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with guarded_port(LIMITS, CALLERS) as bound:
        yield bound


@dataclass
class Conn:
    """One kept-alive client connection that asks, reads whole answers, and notices EOF."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def ask(self, line: str, token: str | None = None,
                  **headers: str) -> tuple[int, dict[str, str], Any]:
        head = f"{line} HTTP/1.1\r\nHost: x\r\n"
        if token is not None:
            head += f"Authorization: Bearer {token}\r\n"
        head += "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
        self.writer.write(head.encode() + b"\r\n")
        raw = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout=5)
        lines = raw.decode().split("\r\n")
        fields = {k.lower(): v for k, v in (x.split(": ", 1) for x in lines[1:] if x)}
        body = await self.reader.readexactly(int(fields["content-length"]))
        return int(lines[0].split()[1]), fields, json.loads(body)

    async def closed_by_server(self, within_s: float = 2.0) -> bool:
        """Whether the server closes this connection within ``within_s`` (EOF)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), timeout=within_s) == b""
        except TimeoutError:
            return False
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def conns() -> AsyncIterator[list[Conn]]:
    held: list[Conn] = []
    yield held
    for c in held:
        c.close()


async def kept(port: int, conns: list[Conn], token: str | None) -> Conn:
    """A new connection that was answered 200 (as ``token``'s, or anonymous) and is kept."""
    c = await Conn.open(port)
    conns.append(c)
    status, headers, _ = await c.ask(LIST if token else "GET /healthz", token)
    assert status == 200 and headers.get("connection") != "close"
    return c


async def test_a_401_closes_its_connection_however_the_client_asked(
        port: int, conns: list[Conn]) -> None:
    c = await Conn.open(port)
    conns.append(c)
    status, headers, body = await c.ask(LIST, "not-a-token", Connection="keep-alive")
    assert (status, body["error"], headers["connection"]) == (401, "unauthorized", "close")
    assert await c.closed_by_server()


async def test_a_refused_stream_closes_its_connection(port: int, conns: list[Conn]) -> None:
    c = await Conn.open(port)
    conns.append(c)
    status, headers, body = await c.ask("GET /v1/inbox/ada/stream", "tok-a",
                                        Last_Event_ID="not-an-id")
    assert (status, body["error"], headers["connection"]) == (400, "invalid_request", "close")
    assert await c.closed_by_server()


async def test_a_caller_at_its_share_is_refused_429_and_closed_while_another_gets_in(
        port: int, conns: list[Conn]) -> None:
    mine = [await kept(port, conns, "tok-a") for _ in range(LIMITS.connections_per_caller)]
    extra = await Conn.open(port)
    conns.append(extra)
    status, headers, body = await extra.ask(LIST, "tok-a")
    assert (status, body["error"]) == (429, "too_many_connections"), body
    assert headers["connection"] == "close" and headers["retry-after"] == "1"
    assert await extra.closed_by_server()
    other = await kept(port, conns, "tok-b")  # another caller gets in
    assert (await other.ask(LIST, "tok-b"))[0] == 200
    for c in mine:  # and the first caller goes on on its own connections
        assert (await c.ask(LIST, "tok-a"))[0] == 200


async def test_at_the_cap_the_connection_idle_the_longest_is_closed_for_a_new_one(
        port: int, conns: list[Conn]) -> None:
    a1, a2 = await kept(port, conns, "tok-a"), await kept(port, conns, "tok-a")
    b1, b2 = await kept(port, conns, "tok-b"), await kept(port, conns, "tok-b")
    assert (await a1.ask(LIST, "tok-a"))[0] == 200  # a2 is now the one idle the longest
    newcomer = await Conn.open(port)
    conns.append(newcomer)
    status, _, body = await newcomer.ask("GET /healthz")
    assert (status, body) == (200, {"status": "ok"})
    assert await a2.closed_by_server()
    for c, token in ((a1, "tok-a"), (b1, "tok-b"), (b2, "tok-b")):
        assert (await c.ask(LIST, token))[0] == 200


async def test_an_anonymous_idle_connection_is_closed_soon_a_callers_is_kept(
        port: int, conns: list[Conn]) -> None:
    anonymous = await kept(port, conns, None)
    mine = await kept(port, conns, "tok-a")
    assert await anonymous.closed_by_server(within_s=2.0)  # 0.3 s, not the 30 s keep-alive
    assert not await mine.closed_by_server(within_s=0.5)
    assert (await mine.ask(LIST, "tok-a"))[0] == 200
