"""``SubscriptionService`` on the fakes: the URL's host vetted as a callback's (the
registration half of the SSRF guard), the cap, and each caller's own."""

from __future__ import annotations

import pytest

from trigger_service.adapters.memory.caller_events import MemorySubscriptions
from trigger_service.adapters.memory.dns import StaticResolver
from trigger_service.app.subscriptions import SubscriptionService
from trigger_service.config.callers import Caller, CallerRegistry
from trigger_service.config.events import EventSettings
from trigger_service.core.caller_events import EventType
from trigger_service.core.errors import CallbackNotAllowed, NotFound, TooManySubscriptions
from trigger_service.core.time.clock import ManualClock

CALLERS = CallerRegistry.from_mapping({"callers": {
    "wide": {"token_sha256": "a" * 64, "callback_prefixes": ["https://"]},
    "other": {"token_sha256": "b" * 64, "callback_prefixes": ["https://"]},
}})
WANTS = frozenset({EventType.TRIGGER_DEAD_LETTERED})


def service(store: MemorySubscriptions) -> SubscriptionService:
    resolver = StaticResolver({"public.example": ["93.184.216.34"],
                               "internal.example": ["10.0.0.7"]})
    return SubscriptionService(EventSettings(max_subscriptions=2), store, resolver,
                               ManualClock(1_700_000_000_000))


def caller(name: str = "wide") -> Caller:
    c = CALLERS.by_name(name)
    assert c is not None
    return c


async def test_a_host_resolving_inside_is_refused_as_a_callbacks_is() -> None:
    store = MemorySubscriptions()
    with pytest.raises(CallbackNotAllowed):
        await service(store).put(caller(), "x", "https://internal.example/ev", WANTS)
    assert store.subs == {}
    sub, created = await service(store).put(caller(), "x", "https://public.example/ev", WANTS)
    assert created and sub.url == "https://public.example/ev"


async def test_the_cap_and_the_callers_scope() -> None:
    store = MemorySubscriptions()
    svc = service(store)
    for name in ("a", "b"):
        await svc.put(caller(), name, "https://public.example/ev", WANTS)
    with pytest.raises(TooManySubscriptions):
        await svc.put(caller(), "c", "https://public.example/ev", WANTS)
    assert (await svc.put(caller(), "a", "https://public.example/2", WANTS))[1] is False
    with pytest.raises(NotFound):
        await svc.delete("other", "a")
    with pytest.raises(NotFound):
        await svc.failures("other", "a")
    assert await svc.failures("wide", "a") == []
    await svc.delete("wide", "a")
    assert [s.name for s in await svc.subscriptions("wide")] == ["b"]
