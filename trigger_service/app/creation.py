"""Writing a new trigger: its quota place, its rows, its SQS message, and an honest answer
when Cassandra does not say whether the rows were written.

A write that timed out (``StoreTimeout``) may have applied, or may still apply: the
due-scan would then find the row and fire it. Answering "nothing was accepted" would make a
client that retries without a key register it twice. The creation writes are idempotent
(the same trigger id, the same cells with timestamps fixed by the trigger; the Paxos
variant reads back what is there), so they are written again, up to
``UNKNOWN_OUTCOME_ATTEMPTS`` times in all: one that is answered settles it either way. Still
unknown after that: ``OutcomeUnknown`` (503 ``outcome_unknown``, naming the trigger id), and
the quota place stays taken (the trigger may exist; a place held in vain is given back at
its fire time).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from trigger_service.app.quota import QuotaGate
from trigger_service.core.errors import OutcomeUnknown, StoreTimeout
from trigger_service.core.model import Route, Trigger
from trigger_service.core.ports import Clock, Metrics, TriggerCatalog
from trigger_service.core.ports.values import KeyedCreation

log = structlog.get_logger(__name__)

# Writes of one registration before its answer says the outcome is unknown, and the pause
# before each repeat (a timeout is often a coordinator's moment of overload).
UNKNOWN_OUTCOME_ATTEMPTS = 3
_RETRY_PAUSE_MS = 100

T = TypeVar("T")


class TriggerWriter:
    def __init__(self, catalog: TriggerCatalog, quota: QuotaGate | None, clock: Clock,
                 metrics: Metrics, index_ttl_s: Callable[[Trigger], int],
                 enqueue: Callable[[Trigger], Awaitable[None]]) -> None:
        """``enqueue`` starts the SQS send of a direct trigger (it does not wait for it)."""
        self._catalog = catalog
        self._quota = quota
        self._clock = clock
        self._metrics = metrics
        self._index_ttl_s = index_ttl_s
        self._enqueue = enqueue

    async def create(self, t: Trigger) -> None:
        """Count ``t`` against its caller's quota, write it (plain writes) and enqueue it; a
        failed write gives the quota place back. Raises ``QuotaExceeded``, ``StoreError``
        (nothing was written) or ``OutcomeUnknown``."""
        await self._counted(t, lambda: self._catalog.create(t, self._index_ttl_s(t)))
        if t.route is Route.DIRECT:
            await self._enqueue(t)

    async def create_keyed(self, t: Trigger) -> KeyedCreation:
        """``create`` for a keyed trigger (``TriggerCatalog.create_keyed``: one row per id
        whatever the key's requests do): the id's row and whether this call wrote it. A
        written one is enqueued (the row as written: at another request's home, with its
        fire time, when that one was elected); the one of another request is not."""
        done = await self._counted(
            t, lambda: self._catalog.create_keyed(t, self._index_ttl_s(t)))
        if not done.created:
            # The quota counts ids: the one there counts (again) while it may still fire.
            if done.trigger.status.terminal:
                await self.release(t.caller, t.trigger_id)
            return done
        if done.trigger.route is Route.DIRECT:
            await self._enqueue(done.trigger)
        return done

    async def _counted(self, t: Trigger, write: Callable[[], Awaitable[T]]) -> T:
        counted = self._quota is not None and await self._quota.reserve(t, self._clock.now_ms())
        try:
            return await self._settled(t, write)
        except OutcomeUnknown:
            raise  # it may exist: its place stays taken
        except BaseException:
            if counted:
                await self.release(t.caller, t.trigger_id)
            raise

    async def _settled(self, t: Trigger, write: Callable[[], Awaitable[T]]) -> T:
        """``write`` (idempotent) until Cassandra answers, at most
        ``UNKNOWN_OUTCOME_ATTEMPTS`` times: its result. Raises
        ``OutcomeUnknown`` (the last timeout is its ``__cause__``, logged), or any other
        error of ``write``."""
        for attempt in range(1, UNKNOWN_OUTCOME_ATTEMPTS + 1):
            try:
                return await write()
            except StoreTimeout as e:
                log.warning("registration_write_unknown", trigger_id=t.trigger_id,
                            caller=t.caller, attempt=attempt, error=str(e))
                if attempt == UNKNOWN_OUTCOME_ATTEMPTS:
                    self._metrics.inc("registration_outcome_unknown_total")
                    raise OutcomeUnknown(t.trigger_id) from e
                self._metrics.inc("registration_write_retries_total")
            await self._clock.sleep_ms(_RETRY_PAUSE_MS * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def release(self, caller: str, trigger_id: str) -> None:
        """Stop counting ``trigger_id`` against ``caller``'s quota (never raises)."""
        if self._quota is not None:
            await self._quota.release(caller, trigger_id)


