"""``Fanout`` (the local half of every inbox bus): a payload reaches each subscriber of its
channel only, a subscriber that falls behind is failed alone, a broken source fails all, and
leaving unsubscribes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from trigger_service.adapters.inbox_fanout import Fanout
from trigger_service.core.errors import CacheError


async def take(feed: AsyncIterator[str], n: int) -> list[str]:
    return [await asyncio.wait_for(anext(feed), 1) for _ in range(n)]


async def test_each_subscriber_of_a_channel_gets_its_payloads_in_order() -> None:
    fan: Fanout[str] = Fanout()
    with fan.subscriber("a") as a1, fan.subscriber("a") as a2, fan.subscriber("b") as b:
        assert fan.count("a") == 2 and fan.count() == 3
        assert fan.deliver("a", "1") == 2 and fan.deliver("a", "2") == 2
        assert fan.deliver("b", "x") == 1 and fan.deliver("c", "y") == 0
        assert await take(a1.payloads(), 2) == ["1", "2"]
        assert await take(a2.payloads(), 2) == ["1", "2"]
        assert await take(b.payloads(), 1) == ["x"]
    assert fan.count() == 0 and fan.deliver("a", "3") == 0


async def test_a_subscriber_that_falls_behind_fails_alone_after_what_it_has() -> None:
    fan: Fanout[str] = Fanout(queue_max=3)
    with fan.subscriber("a") as slow, fan.subscriber("a") as quick:
        quick_feed = quick.payloads()
        for n in range(5):
            fan.deliver("a", str(n))
            if n < 4:
                assert await take(quick_feed, 1) == [str(n)]
        slow_feed = slow.payloads()
        assert await take(slow_feed, 3) == ["0", "1", "2"]
        with pytest.raises(CacheError, match="fell 3 messages behind"):
            await take(slow_feed, 1)
        assert await take(quick_feed, 1) == ["4"] and not quick.failed


async def test_a_broken_source_fails_every_subscriber() -> None:
    fan: Fanout[tuple[str, str]] = Fanout()
    with fan.subscriber(("o", "ada")) as one, fan.subscriber(("o", "bob")) as two:
        fan.deliver(("o", "ada"), "m")
        fan.fail_all(CacheError("redis connection lost"))
        fan.fail_all(CacheError("again"))  # the first failure wins
        assert await take(one.payloads(), 1) == ["m"]
        for feed in (one.payloads(), two.payloads()):
            with pytest.raises(CacheError, match="redis connection lost"):
                await take(feed, 1)
        fan.deliver(("o", "ada"), "after")  # dropped: the subscriber has failed
