"""Queue lanes: the main queue is ``lanes`` SQS queues, and each caller's messages go to one.

Why: SQS (and LocalStack, strictly: oldest first) hands out a standard queue's visible
messages roughly in the order they were sent. One caller's herd of 20,000 due at an instant
sits ahead of another caller's 20 due at the same instant, and a dispatcher can reach those
20 only by receiving (and hiding again) most of the herd first: tens of seconds at
LocalStack's few hundred receives a second. Fair shares inside the dispatcher cannot help
with what it has not received. With lanes, each lane has its own long poll in every
dispatcher, so the 20 are received as soon as they are visible; a herd's lane gets the
extra polls.

A caller's lane is a stable hash of its name (the same in every process and release);
messages without a caller (an earlier release's) go to lane 0, the queue named by
``TRIGGER_SQS_QUEUE``. Two callers may share a lane; more lanes make that rarer.

High lanes: a caller's high-priority messages go to a lane of their own (one of ``high``
lanes after the callers' lanes, by the same hash), so that its herd of normal or low ones
due at the same instant does not stand in front of them on SQS either. Within the
dispatcher, priority orders one caller's messages (``dispatcher.fair_share``); which caller
goes next is still fair shares' choice, so a caller gains nothing over another by calling
everything high: its high lane is shared with the callers hashed to it, and served with the
same fairness.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from trigger_service.core.model import Priority


def lane_of(caller: str | None, lanes: int) -> int:
    """The lane (0 .. ``lanes`` - 1) of ``caller``'s messages; 0 for no caller."""
    if caller is None or lanes <= 1:
        return 0
    return zlib.crc32(caller.encode()) % lanes


@dataclass(frozen=True, slots=True)
class Lanes:
    """The main queue's lanes: ``callers`` lanes (0 .. callers - 1) and after them ``high``
    lanes for high-priority messages (none: those go to their caller's lane)."""

    callers: int
    high: int = 0

    @property
    def total(self) -> int:
        return max(1, self.callers) + self.high

    def of(self, caller: str | None, priority: Priority = Priority.NORMAL) -> int:
        """The lane of a message of ``caller`` with ``priority``."""
        if priority is Priority.HIGH and self.high > 0:
            return max(1, self.callers) + lane_of(caller, self.high)
        return lane_of(caller, self.callers)
