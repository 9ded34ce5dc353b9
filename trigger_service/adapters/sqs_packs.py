"""Packs: one SQS message that carries many triggers sent with the same delay (a herd's
second, a batch's minute), so that a herd costs SQS one message per ``pack_max`` triggers to
send, receive, keep hidden and delete, not one each (``TRIGGER_SQS_PACK_MAX``; 1: off).

A received pack is handed out as one ``ReceivedMessage`` per member. Each member has its
own message id (the pack's and its index) and its own receipt (``^i^`` before the pack's;
SQS's handle is base64 and has no ``^``), and the queue keeps what its members ask for
apart in a ``PackBook``:

- a member deleted (its trigger finished), or re-sent alone (replaced, deferred, passed on),
  leaves the pack: the pack is deleted on SQS when its last member has left;
- a member kept hidden longer (a late delivery) keeps the whole pack hidden as long;
- members deferred all together, to one time (a herd's excess, a stopping dispatcher's
  hand-back), hide the pack as it is; a member deferred alone is re-sent alone, with its
  delay, and then leaves the pack.

Why this is safe: a pack stays on SQS until every member it carries has been finished or
re-sent; killed in between, the pack reappears after its visibility timeout and every member
comes back (those already finished are dropped by the dispatcher as duplicates: the row is
the truth). A member that left the pack is not handed out again by the process it left.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trigger_service.adapters import schema
from trigger_service.adapters.sqs_wire import body_priority
from trigger_service.core.model import Priority
from trigger_service.core.ports.values import OutgoingMessage, ReceivedMessage
from trigger_service.core.time.timing import SQS_MAX_DELAY_S

_MEMBER_MARK = "^"
# A pack whose members this process has not all let go is forgotten this long after it would
# have reappeared (another process received it, or a member's handling failed): the book
# stays bounded.
_FORGET_AFTER_MS = 15 * 60_000
_SWEEP_AT = 1024  # packs in the book before the first forget pass


def sqs_delay(m: OutgoingMessage) -> int:
    """The delay SQS is asked for (whole seconds, at most its maximum)."""
    return max(0, min(SQS_MAX_DELAY_S, m.delay_s))


def packs_of(messages: Sequence[OutgoingMessage], pack_max: int) -> list[list[int]]:
    """Positions of ``messages`` grouped into packs: those of one delay and one priority
    together, in order, at most ``pack_max`` a pack (a pack of one is a plain message)."""
    by_delay: dict[tuple[int, Priority], list[int]] = {}
    for i, m in enumerate(messages):
        by_delay.setdefault((sqs_delay(m), m.priority), []).append(i)
    size = max(1, pack_max)
    return [group[j:j + size] for group in by_delay.values()
            for j in range(0, len(group), size)]


def pack_body(members: Sequence[OutgoingMessage]) -> str:
    """A pack's body: each member's id, fire time, home, shard and caller, and the
    members' one priority unless normal (beside the list: an earlier release reads the
    members as it always did)."""
    body: dict[str, Any] = {schema.MSG_PACK: [
        [m.trigger_id, m.fire_at_ms, m.home_at_ms, m.shard, m.caller] for m in members]}
    if members and members[0].priority is not Priority.NORMAL:
        body[schema.MSG_PRIORITY] = members[0].priority.value
    return json.dumps(body)


def pack_members(body: Any) -> list[OutgoingMessage] | None:
    """The members of a parsed body that is a pack (None: it is not one). A member that
    cannot be read becomes one with an empty trigger id (dead-lettered as malformed)."""
    if not isinstance(body, dict) or not isinstance(items := body.get(schema.MSG_PACK), list):
        return None
    out = []
    priority = body_priority(body)
    for item in items:
        try:
            tid, fire_at_ms, home_at_ms, shard, caller = item
            where = ((home_at_ms, shard) if isinstance(home_at_ms, int)
                     and isinstance(shard, int) else (None, None))
            out.append(OutgoingMessage(str(tid), int(fire_at_ms), 0, where[0], where[1],
                                       caller if isinstance(caller, str) else None, priority))
        except (ValueError, TypeError):
            out.append(OutgoingMessage("", 0, 0))
    return out


def member_receipt(index: int, receipt: str) -> str:
    return f"{_MEMBER_MARK}{index}{_MEMBER_MARK}{receipt}"


def split_member(receipt: str) -> tuple[int, str] | None:
    """(member index, the pack's receipt) of a member's receipt; None for a plain one."""
    if not receipt.startswith(_MEMBER_MARK):
        return None
    _, index, rest = receipt.split(_MEMBER_MARK, 2)
    return int(index), rest


@dataclass(slots=True)
class _Pack:
    message_id: str
    receipt: str  # the latest receive's (SQS deletes by the latest receipt only)
    members: list[OutgoingMessage]
    in_hand: set[int]  # members handed out and not let go
    left: set[int] = field(default_factory=set)  # members let go: not handed out again
    hidden_until_ms: int = 0
    receipts: list[str] = field(default_factory=list)  # every receive's, the latest last


class PackBook:
    """The packs this process received and what became of each member (see the module)."""

    def __init__(self) -> None:
        self._packs: dict[str, _Pack] = {}  # by the pack's message id
        self._ids: dict[str, str] = {}  # a receipt handed out -> its pack's message id
        self._sweep_at = _SWEEP_AT  # the book's size that makes the next forget pass

    def __len__(self) -> int:
        return len(self._packs)

    def received(self, message_id: str, receipt: str, members: list[OutgoingMessage],
                 receive_count: int, hidden_until_ms: int) -> list[ReceivedMessage]:
        """The members of a pack just received, to hand out: each not yet let go by this
        process (a pack received again while some are in hand hands those out again: the
        dispatcher passes over a message id it holds)."""
        self._forget_old(hidden_until_ms)
        # Received again while members are in hand (they are let go by their first
        # receipt; the pack is deleted by its latest).
        earlier = self._packs.get(message_id)
        left = earlier.left if earlier is not None else set()
        receipts = [*(earlier.receipts if earlier is not None else []), receipt]
        pending = [i for i in range(len(members)) if i not in left]
        self._packs[message_id] = _Pack(message_id, receipt, members, set(pending), left,
                                        hidden_until_ms, receipts)
        self._ids[receipt] = message_id
        return [ReceivedMessage(f"{message_id}{_MEMBER_MARK}{i}", member_receipt(i, receipt),
                                members[i].trigger_id, members[i].fire_at_ms, receive_count,
                                members[i].home_at_ms, members[i].shard, members[i].caller,
                                members[i].priority)
                for i in pending]

    def _pack(self, receipt: str) -> _Pack | None:
        message_id = self._ids.get(receipt)
        return self._packs.get(message_id) if message_id is not None else None

    def member(self, receipt: str, index: int) -> OutgoingMessage | None:
        """What member ``index`` of the pack received with ``receipt`` carries (None: the
        pack is not in hand here any more)."""
        pack = self._pack(receipt)
        return pack.members[index] if pack is not None and index < len(pack.members) else None

    def let_go(self, receipt: str, index: int) -> str | None:
        """Member ``index`` left the pack (finished, or re-sent alone): the pack's receipt
        to delete if it was the last in hand, else None."""
        pack = self._pack(receipt)
        if pack is None:
            return None  # forgotten, or handed back: it reappears, and is dropped then
        pack.in_hand.discard(index)
        pack.left.add(index)
        if pack.in_hand:
            return None
        self._drop(pack)
        return pack.receipt

    def in_hand(self, receipt: str) -> set[int]:
        """The members of the pack received with ``receipt`` still in hand here."""
        pack = self._pack(receipt)
        return set(pack.in_hand) if pack is not None else set()

    def latest(self, receipt: str) -> str:
        """The latest receipt of the pack received with ``receipt`` (itself if unknown)."""
        pack = self._pack(receipt)
        return pack.receipt if pack is not None else receipt

    def has_left(self, receipt: str, index: int) -> bool:
        """Whether member ``index`` left the pack (its receipt is no longer valid)."""
        pack = self._pack(receipt)
        return pack is not None and index in pack.left

    def hidden(self, receipt: str, until_ms: int) -> None:
        """The pack was hidden (or shown) until ``until_ms``."""
        if (pack := self._pack(receipt)) is not None:
            pack.hidden_until_ms = until_ms

    def extend(self, receipt: str, until_ms: int) -> bool:
        """Whether the pack must be hidden longer to stay hidden until ``until_ms``; if so,
        it is taken as done (the members that ask next, for no later, share the call)."""
        pack = self._pack(receipt)
        if pack is None:
            return True
        if pack.hidden_until_ms >= until_ms:
            return False
        pack.hidden_until_ms = until_ms
        return True

    def _drop(self, pack: _Pack) -> None:
        self._packs.pop(pack.message_id, None)
        for r in pack.receipts:
            self._ids.pop(r, None)

    def _forget_old(self, now_ms: int) -> None:
        """Forget the packs long past their hiding, once the book has doubled since the
        last pass (a pass reads every pack: not on every receive of a large book)."""
        if len(self._packs) < self._sweep_at:
            return
        horizon_ms = now_ms - _FORGET_AFTER_MS
        for pack in [p for p in self._packs.values() if p.hidden_until_ms < horizon_ms]:
            self._drop(pack)
        self._sweep_at = max(_SWEEP_AT, 2 * len(self._packs))
