"""The delivery half of the SSRF guard on a real loopback receiver: the channel's
resolver refuses forbidden addresses and dials only what it checked, literal addresses are
classified before sending, a host a prefix names is trusted, the normalised URL is sent as
it is, and no more than 64 KiB of an answer is read."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from dispatcher.channels.guard import AddressRefused, Answer, GuardedResolver, Lookup
from dispatcher.channels.webhook import REFUSED_ADDRESS, WebhookChannel
from trigger_service.core.dead_letters import EXCERPT_MAX_BYTES
from trigger_service.core.model import Route, Trigger
from trigger_service.core.urls import CallbackUrl

pytestmark = pytest.mark.timeout(20)


@dataclass
class Receiver:
    port: int = 0
    seen: list[str] = field(default_factory=list)  # raw request targets
    body_bytes: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request.raw_path)
        await request.read()
        if not self.body_bytes:
            return web.Response(text="fine")
        resp = web.StreamResponse()
        resp.content_length = self.body_bytes
        await resp.prepare(request)
        chunk = b"x" * 65536
        sent = 0
        try:
            while sent < self.body_bytes:
                await resp.write(chunk[:self.body_bytes - sent])
                sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the dispatcher stopped reading and closed: expected
        return resp


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rec.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield rec
    await runner.cleanup()


def fake_dns(table: dict[str, list[str]], port: int | None = None) -> Lookup:
    """A lookup answering from ``table`` (``port``: the answers' port, as a test receiver's)."""
    async def lookup(host: str, p: int, family: socket.AddressFamily) -> Sequence[Answer]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "no such name")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, a, port or p)
                for a in table[host]]
    return lookup


def trigger(url: str, caller: str = "wide") -> Trigger:
    return Trigger(trigger_id="trg_1", caller=caller, callback_url=url, payload_json="{}",
                   fire_at_ms=1_700_000_000_000, created_at_ms=1_700_000_000_000, shard=0,
                   route=Route.DIRECT)


async def channel_for(receiver: Receiver, *, trusted: bool = False) -> WebhookChannel:
    def trusts(caller: str, url: CallbackUrl) -> bool:
        return trusted
    ch = WebhookChannel(5, trusts=trusts, lookup=fake_dns(
        {"rebind.test": ["127.0.0.1"], "mixed.test": ["93.184.216.34", "127.0.0.1"]},
        receiver.port))
    await ch.open()
    return ch


async def test_resolver_refuses_any_forbidden_address() -> None:
    lookup = fake_dns({"ok.test": ["93.184.216.34"], "mixed.test": ["93.184.216.34", "10.0.0.1"],
                       "v6.test": ["fd00::1"], "none.test": []})
    guarded = GuardedResolver(lookup)
    [only] = await guarded.resolve("ok.test", 443)
    assert (only["host"], only["port"], only["hostname"]) == ("93.184.216.34", 443, "ok.test")
    for host, why in (("mixed.test", "private"), ("v6.test", "unique-local")):
        with pytest.raises(AddressRefused, match=why):
            await guarded.resolve(host, 443)
    with pytest.raises(OSError, match="no IPv4 or IPv6"):
        await guarded.resolve("none.test", 443)
    with pytest.raises(socket.gaierror):
        await guarded.resolve("nxdomain.test", 443)
    assert len(await GuardedResolver(lookup, guard=False).resolve("mixed.test", 443)) == 2


@pytest.mark.parametrize("host", ["rebind.test", "mixed.test", "127.0.0.1", "localhost",
                                  "[::1]"])
async def test_a_forbidden_address_is_refused_and_never_dialled(receiver: Receiver,
                                                                host: str) -> None:
    ch = await channel_for(receiver)
    try:
        r = await ch.deliver(trigger(f"http://{host}:{receiver.port}/cb"), 1)
    finally:
        await ch.close()
    assert (r.ok, r.refused, r.status_code, r.origin_failed) == (False, True, None, False)
    assert r.error and r.error.startswith("refused: ")
    assert receiver.seen == []
    if host.endswith(".test"):  # a name: where it points is not the caller's to learn
        assert r.error == REFUSED_ADDRESS
        assert "127.0.0.1" not in r.error and "loopback" not in r.error


async def test_a_named_host_is_trusted_and_the_normalised_url_sent_as_is(
        receiver: Receiver) -> None:
    ch = await channel_for(receiver, trusted=True)
    try:
        stored = f"http://rebind.test:{receiver.port}/cb/%C3%BC;x=1?a=%2F&b=%7E"
        r = await ch.deliver(trigger(stored), 1)
        literal = await ch.deliver(trigger(f"http://127.0.0.1:{receiver.port}/x"), 1)
    finally:
        await ch.close()
    assert r.ok and literal.ok and r.response_excerpt == "fine"
    # %7E was normalised to ~ at registration; the stored form is sent as it is.
    assert receiver.seen == ["/cb/%C3%BC;x=1?a=%2F&b=~", "/x"]


@pytest.mark.parametrize("size", [100, 70_000, 5_000_000])
async def test_at_most_64_kib_of_an_answer_is_read(receiver: Receiver, size: int) -> None:
    receiver.body_bytes = size
    ch = await channel_for(receiver, trusted=True)
    try:
        r = await ch.deliver(trigger(f"http://127.0.0.1:{receiver.port}/big"), 1)
        again = await ch.deliver(trigger(f"http://127.0.0.1:{receiver.port}/again"), 1)
    finally:
        await ch.close()
    assert r.ok and again.ok  # the next delivery is unaffected (a fresh connection if needed)
    assert r.response_excerpt is not None
    assert len(r.response_excerpt.encode()) == min(size, EXCERPT_MAX_BYTES)


async def test_a_url_that_no_longer_parses_is_refused(receiver: Receiver) -> None:
    ch = await channel_for(receiver, trusted=True)
    try:
        r = await ch.deliver(trigger("http://xn--a.com/"), 1)
    finally:
        await ch.close()
    assert r.refused and receiver.seen == []
