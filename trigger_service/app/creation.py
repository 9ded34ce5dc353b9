"""Writing a new trigger: its quota place and its rows, and an honest answer when Cassandra
does not say whether the rows were written. (Its SQS message is sent by its registration,
``TriggerService.register``, once the rows are written.)

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
from trigger_service.core.model import Trigger
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
                 metrics: Metrics) -> None:
        self._catalog = catalog
        self._quota = quota
        self._clock = clock
        self._metrics = metrics

    async def create(self, t: Trigger, index_ttl_s: int) -> None:
        """Count ``t`` against its caller's quota and write it (plain writes, its index
        entries for ``index_ttl_s``); a failed write gives the quota place back. Raises
        ``QuotaExceeded``, ``StoreError`` (nothing was written) or ``OutcomeUnknown``."""
        await self._counted(t, lambda: self._catalog.create(t, index_ttl_s))

    async def create_keyed(self, t: Trigger, index_ttl_s: int) -> KeyedCreation:
        """``create`` for a keyed trigger (``TriggerCatalog.create_keyed``: one row per id
        whatever the key's requests do): the id's row and whether this call wrote it (the
        row as written: at another request's home, with its fire time, when that one was
        elected)."""
        done = await self._counted(t, lambda: self._catalog.create_keyed(t, index_ttl_s))
        # The quota counts ids: the one there counts (again) while it may still fire.
        if not done.created and done.trigger.status.terminal:
            await self.release(t.caller, t.trigger_id)
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


