"""A caller's event subscriptions (``core.caller_events``): create or replace, list, delete,
and the events given up on for one. No HTTP here.

Each subscription is keyed by its caller: another caller's name is answered like an unknown
one. The URL passes the same checks as a callback URL: under one of the caller's callback
prefixes (``Caller.callback_refusal``), and a host name that resolves to a forbidden address
is refused unless a prefix names the host (``app.callbacks.vet_callback_host``); the sender
checks both again at every send. At most ``TRIGGER_EVENTS_MAX_SUBSCRIPTIONS`` a caller: the
cost of a subscription (a partition read per dispatcher per cache period, a send per event)
is bounded before it is spent.
"""

from __future__ import annotations

from collections.abc import Sequence

from trigger_service.app.callbacks import vet_callback_host
from trigger_service.config.callers import Caller
from trigger_service.config.events import EventSettings
from trigger_service.core.caller_events import EventType, FailedEvent, Subscription
from trigger_service.core.errors import NotFound, TooManySubscriptions
from trigger_service.core.notify.addresses import HostResolver
from trigger_service.core.ports import Clock
from trigger_service.core.ports.caller_events import SubscriptionStore

FAILURES_SHOWN = 100


class SubscriptionService:
    def __init__(self, settings: EventSettings, store: SubscriptionStore,
                 resolver: HostResolver, clock: Clock) -> None:
        self._s = settings
        self._store = store
        self._resolver = resolver
        self._clock = clock

    async def put(self, caller: Caller, name: str, url: str,
                  events: frozenset[EventType]) -> tuple[Subscription, bool]:
        """Create or replace ``caller``'s subscription ``name``: the subscription stored and
        whether it is new. ``url``: normalised and under a prefix of the caller already
        (``http.parsing``); its host is vetted here. Raises ``CallbackNotAllowed``,
        ``TooManySubscriptions`` (a new one past the cap), ``StoreError``."""
        await vet_callback_host(caller, url, self._resolver)
        now_ms = self._clock.now_ms()
        stored = await self._store.put_subscription(
            Subscription(caller.name, name, url, events, now_ms, now_ms),
            self._s.max_subscriptions)
        if stored is None:
            raise TooManySubscriptions(
                f"a caller has at most {self._s.max_subscriptions} event subscriptions; "
                "replace or delete one")
        return stored

    async def subscriptions(self, caller: str) -> list[Subscription]:
        """``caller``'s own, by name. Raises ``StoreError``."""
        return await self._store.subscriptions(caller)

    async def delete(self, caller: str, name: str) -> None:
        """Delete it (its failed events too); events already queued for it are dropped by
        the sender. Raises ``NotFound`` (none of that name: another caller's too),
        ``StoreError``."""
        if not await self._store.delete_subscription(caller, name):
            raise _not_found(name)

    async def failures(self, caller: str, name: str) -> Sequence[FailedEvent]:
        """Its newest events given up on (at most ``FAILURES_SHOWN``). Raises ``NotFound``,
        ``StoreError``."""
        if not any(s.name == name for s in await self._store.subscriptions(caller)):
            raise _not_found(name)
        return await self._store.failed_events(caller, name, FAILURES_SHOWN)


def _not_found(name: str) -> NotFound:
    return NotFound(f"no event subscription {name}")
