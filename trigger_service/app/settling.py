"""One trigger moved by an LWT once it is settled: what a cancel and a pause share. No HTTP
here.

Such a change applies only to the row as read (PENDING, say), the dispatcher's claim only to
the same, so exactly one of them wins: decided by Paxos, not by clocks. A series whose
occurrence is being delivered is waited for (briefly, ``WAIT_MS``): changing it now would
answer before that occurrence's callback. A change that loses its LWT (a claim, an edit, an
outcome came first) looks again, ``ROUNDS`` times at most.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from trigger_service.core.errors import ApiError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock

# How long a change waits for an occurrence being delivered, how often it looks, and how
# many lost LWTs it retries.
WAIT_MS = 3_000
POLL_MS = 25
ROUNDS = 5

Get = Callable[[], Awaitable[Trigger]]
# The change as an LWT on the row as read: the row written, or None when it lost.
Apply = Callable[[Trigger], Awaitable[Trigger | None]]
# The error refusing the change: (message, the row's status).
Refuse = Callable[[str, str], ApiError]


async def settle(get: Get, clock: Clock, *, done: Status, movable: frozenset[Status],
                 apply: Apply, refuse: Refuse) -> Trigger:
    """The trigger ``get`` reads, moved by ``apply`` from a ``movable`` status (as it is
    when already ``done``). Raises ``refuse``'s error for a status it cannot move from (a
    series still in flight after the wait) or when it keeps changing."""
    deadline_ms = clock.now_ms() + WAIT_MS
    rounds = 0
    while True:
        t = await get()
        if t.status is done:
            return t
        if t.status is Status.IN_FLIGHT and t.schedule is not None:
            if clock.now_ms() >= deadline_ms:
                raise refuse(f"trigger {t.trigger_id}: an occurrence is being delivered; "
                             "retry in a moment", t.status.value)
            await clock.sleep_ms(POLL_MS)
            continue
        if t.status not in movable:
            raise refuse(f"trigger {t.trigger_id} is {t.status.value}" + (
                " (being delivered)" if t.status is Status.IN_FLIGHT else ""), t.status.value)
        new = await apply(t)
        if new is not None:
            return new
        rounds += 1  # a claim, an edit or an outcome won: look again
        if rounds >= ROUNDS:
            raise refuse(f"trigger {t.trigger_id} is changing state; try again",
                         t.status.value)
