"""The domain model: the frozen ``Trigger``, its status machine, ids, shards and buckets.

State machine (only these transitions exist; every one after creation is a conditional write,
a Cassandra LWT)::

    PENDING ──cancel──────────────> CANCELLED   (terminal)
    PENDING ──claim (dispatcher)──> IN_FLIGHT
    IN_FLIGHT ──2xx───────────────> FIRED       (terminal)
    IN_FLIGHT ──failure, attempts left──> PENDING (next_attempt_at set)
    IN_FLIGHT ──failure, no attempts left──> FAILED (terminal, DLQ)
    IN_FLIGHT ──claim seen unchanged for its lease──> IN_FLIGHT (taken over, new claim)
    PENDING ──pause (API, or a dispatcher for a paused caller)──> PAUSED
    PAUSED ──resume──> PENDING      (at the occurrence the catch-up policy picks)
    PAUSED ──resume, a one-time trigger missed, policy none──> CANCELLED
    PAUSED ──cancel──> CANCELLED

PAUSED is not terminal ("open": in the open listing index) but is never claimed: the
dispatcher drops a message for it, the due-scan and the reconciler leave it alone.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum

from ulid import ULID

from trigger_service.core.flow import FlowControl
from trigger_service.core.notify.plan import ChannelState, DeliveryPlan
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.recurrence import Recurrence
from trigger_service.core.time.timing import ms_to_datetime

TRIGGER_ID_PREFIX = "trg_"
CLAIM_STALE_SLACK_MS = 2_000
_TRIGGER_ID_RE = re.compile(r"^trg_[0-9A-HJKMNP-TV-Z]{26}$")


class Status(StrEnum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    FIRED = "FIRED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PAUSED = "PAUSED"

    @property
    def terminal(self) -> bool:
        return self in (Status.FIRED, Status.FAILED, Status.CANCELLED)

    @property
    def open(self) -> bool:
        """Listed through the open index (by fire time) rather than by creation."""
        return not self.terminal


class Route(StrEnum):
    """Who puts the trigger on SQS: the API right away, or the sweeper near fire time."""

    DIRECT = "DIRECT"
    SWEEP = "SWEEP"


class Priority(StrEnum):
    """Among one caller's triggers due at the same time, high goes before normal before low,
    at every place they wait (the queue's high lane, the claim slots, the bulkheads, flow
    control, the sweeper's sends). Between callers fair shares decide, whatever the priority:
    a caller cannot take another's share by calling everything high."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for high, 1 for normal, 2 for low: the order they are served in."""
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}


@dataclass(frozen=True, slots=True)
class Trigger:
    """One registered callback. ``payload_json`` is the caller's JSON, serialized once."""

    trigger_id: str
    caller: str
    callback_url: str
    payload_json: str
    fire_at_ms: int
    created_at_ms: int
    shard: int
    route: Route
    status: Status = Status.PENDING
    attempts: int = 0
    last_error: str | None = None
    fired_at_ms: int | None = None
    claim_id: str | None = None
    claimed_at_ms: int | None = None
    next_attempt_at_ms: int | None = None
    idem_key: str | None = None
    # Wall-clock and recurring triggers: how fire times are computed, and which occurrence
    # ``fire_at_ms`` is (its wall instance's index; the later instant of an overlap fired
    # twice). Only the next occurrence is ever stored.
    schedule: Recurrence | None = None
    occurrence_index: int = 0
    occurrence_second: bool = False
    occurrence_seq: int = 0  # occurrences finished before this one (fired or dead-lettered)
    occurrences_fired: int = 0
    tzdata_version: str | None = None  # the zone rules ``fire_at_ms`` was resolved with
    # Bumped by every edit: a copy read before an edit can no longer win an LWT. None on
    # rows written before the column existed (the condition then compares with null).
    revision: int | None = 0
    snoozed_from: str | None = None
    # Notification channels: the plan, each channel's state for the current
    # occurrence, and the last occurrence (``occurrence_seq``) acknowledged.
    plan: DeliveryPlan | None = None
    channel_states: tuple[ChannelState, ...] = ()
    acked_seq: int | None = None
    # A keyed registration's idempotency record (the row is the record): the hash of the
    # request that created it and the fire time answered to that request (``fire_at_ms``
    # moves on with a series or an edit; a replay answers the first one). None without a key.
    request_hash: str | None = None
    registered_fire_at_ms: int | None = None
    # Jitter: each occurrence fires ``jitter_offset_ms`` after its scheduled
    # instant; ``fire_at_ms`` is the jittered instant, ``scheduled_at_ms`` the scheduled one.
    jitter_s: int = 0
    # Tags and labels (``core.tags``): what listings and bulk jobs find it by.
    # Labels sorted by key (one value has one form).
    tags: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    # The recipient profile this trigger is for (its channels' addresses and
    # quiet hours are the profile's at send time), and whether its wall-clock schedule
    # floats with the profile's zone (``"timeZone": "recipient"``).
    recipient: str | None = None
    recipient_zone: bool = False
    # Where the store keeps the row: the fire time the trigger was created with (it never
    # changes as the trigger moves on; the store partitions rows by its minute). None: not
    # known (a trigger not read from the store, or stored by a release before the field),
    # and not part of a trigger's value.
    home_at_ms: int | None = field(default=None, compare=False)
    # Deadlines (``core.deadlines``): no occurrence is sent after ``expires_at_ms``
    # (a series has none after it), nor more than ``max_lateness_s`` after its fire time (the
    # jittered instant); past either it is dead-lettered ``expired``. None: no such bound.
    expires_at_ms: int | None = None
    max_lateness_s: int | None = None
    # Flow control (``core.flow``): the trigger's own key and bounds; None: its
    # caller's default for the callback's origin applies, if any (``config.callers``).
    flow_control: FlowControl | None = None
    # Traces (``core.trace_context``): the W3C ``traceparent`` of the registering
    # request's span (the caller's own when export is off); None: the request had none.
    trace_parent: str | None = None
    # The claim's lease (``dispatcher.claim_keeping``): how long its claimer may be sending,
    # counted on the claimer's own monotonic clock from just before its claim's LWT. A
    # duration, never compared with another host's clock: a taker waits for it on its own.
    # None: claimed by a release before the column (a taker assumes the longest claim
    # those made), or never claimed.
    claim_lease_ms: int | None = None
    # Served before (high) or after (low) the caller's other triggers due at the same time.
    priority: Priority = Priority.NORMAL

    @property
    def acked(self) -> bool:
        """Has the current occurrence been acknowledged?"""
        return self.acked_seq is not None and self.acked_seq == self.occurrence_seq

    @property
    def occurrence_id(self) -> str:
        """The receiver's dedup key: stable for every attempt of one occurrence."""
        return f"{self.trigger_id}.{self.occurrence_seq + 1}"

    @property
    def occurrence_key(self) -> tuple[int, int, bool]:
        """The series' cursor: this occurrence's (scheduled instant, wall index, second of
        two); jitter never moves it."""
        return (self.scheduled_at_ms, self.occurrence_index, self.occurrence_second)

    @property
    def fire_seq(self) -> int:
        """The number (from 1) of the occurrence ``fire_at_ms`` is: the current one, or for
        a trigger that finished by firing or failing, the last one (it counted it)."""
        done = self.status in (Status.FIRED, Status.FAILED)
        return self.occurrence_seq + (0 if done else 1)

    @property
    def jitter_ms(self) -> int:
        """How far ``fire_at_ms`` is after the scheduled instant (``core.time.jitter``)."""
        return jitter_offset_ms(f"{self.trigger_id}.{self.fire_seq}", self.jitter_s)

    @property
    def scheduled_at_ms(self) -> int:
        """The instant the occurrence ``fire_at_ms`` is was scheduled for (before jitter)."""
        return self.fire_at_ms - self.jitter_ms

    def jittered(self, scheduled_at_ms: int) -> Trigger:
        """This trigger firing its occurrence scheduled at ``scheduled_at_ms``: ``fire_at_ms``
        that instant plus the occurrence's jitter (the route is the caller's to set)."""
        return replace(self, fire_at_ms=scheduled_at_ms + self.jitter_ms)

    def due_at_ms(self) -> int:
        """When the next delivery attempt may start: the fire time, or the retry time."""
        return max(self.fire_at_ms, self.next_attempt_at_ms or 0)

    def claim_stale_at_ms(self, callback_timeout_ms: int) -> int:
        """When an IN_FLIGHT claim should be over by the wall clock: a claim is taken up to
        the claim lead before the due time, delivery starts at the due time and may take the
        callback timeout, plus a slack. Only a hint of when to look at the row again (the
        due-scan and the reconciler re-send its message; a dispatcher that finds the claim
        live comes back then): whether a claim may be taken over is never decided by a
        clock compared across hosts (``dispatcher.claim_keeping``)."""
        started_ms = max(self.claimed_at_ms or 0, self.due_at_ms())
        return started_ms + callback_timeout_ms + CLAIM_STALE_SLACK_MS

    def watch_from_ms(self, callback_timeout_ms: int, grace_ms: int) -> int:
        """When an IN_FLIGHT claim's copy is re-sent (``is_overdue``): ``grace_ms`` after
        its delivery could start, or once stale, whichever is first."""
        started_ms = max(self.claimed_at_ms or 0, self.due_at_ms())
        return min(self.claim_stale_at_ms(callback_timeout_ms), started_ms + grace_ms)

    def with_home(self) -> Trigger:
        """This trigger with its home set: the fire time it is created with, unless it has
        one (what a store keeps when it creates it)."""
        return self if self.home_at_ms is not None else replace(self, home_at_ms=self.fire_at_ms)


def is_overdue(t: Trigger, now_ms: int, *, grace_ms: int, callback_timeout_ms: int,
               claim_grace_ms: int = 0) -> bool:
    """Has this trigger leaked (its message lost, its claimer dead)? PENDING more than
    ``grace_ms`` past its due time, or IN_FLIGHT with a claim stale for ``claim_grace_ms``.
    The sweepers' due-scan and the reconciler re-send exactly these.

    An IN_FLIGHT row is overdue once ``grace_ms`` past its delivery's start, or once its
    claim is stale, whichever comes first (``Trigger.watch_from_ms``; plus
    ``claim_grace_ms``, which the due-scan does not pass): a
    dispatcher takes a claim over only after watching it for its lease on its own clock
    (``dispatcher.claim_keeping``), so the copy re-sent early starts that watch early (a
    killed dispatcher's trigger is late by about grace + lease, not by staleness + lease),
    and re-sending is always safe (a live claimer's copy is only watched, then dropped).
    The reconciler, the net behind the due-scan, passes its own grace.
    """
    if t.status is Status.PENDING:
        return t.due_at_ms() < now_ms - grace_ms
    if t.status is Status.IN_FLIGHT:
        return t.watch_from_ms(callback_timeout_ms, grace_ms) < now_ms - claim_grace_ms
    return False


def new_trigger_id(now_ms: int) -> str:
    """A ``trg_<ULID>`` id for a registration without an Idempotency-Key; its time prefix is
    the creation time. Nothing may rely on that: a keyed trigger's id has no time in it
    (``keyed_trigger_id``), so ids are identifiers, never an order or a clock."""
    return TRIGGER_ID_PREFIX + str(ULID.from_timestamp(now_ms / 1000))


# Domain separation for the derivation below: another derivation (a v2) gets other ids.
_KEYED_ID_PERSON = b"trg-idem-v1"


def keyed_trigger_id(caller: str, idem_key: str) -> str:
    """The id of the trigger a caller's Idempotency-Key creates: the same in every process
    and release for the same (caller, key), so the trigger row itself is the key's record.

    ``trg_`` + 26 Crockford base32 characters like a ULID (the first one 0-7: 128 bits),
    so ``is_trigger_id`` and every reader take it; the 128 bits are BLAKE2b of ``caller``,
    a NUL and ``idem_key`` (a key is printable ASCII, never a NUL, so the split is
    unambiguous). No time is in it: its "ULID time" means nothing. Two (caller, key) pairs
    share an id with probability about 2^-128.
    """
    digest = hashlib.blake2b(f"{caller}\0{idem_key}".encode(), digest_size=16,
                             person=_KEYED_ID_PERSON).digest()
    return TRIGGER_ID_PREFIX + str(ULID.from_bytes(digest))


def is_trigger_id(value: str) -> bool:
    return bool(_TRIGGER_ID_RE.match(value))


def shard_of(trigger_id: str, shards: int) -> int:
    """Stable shard of a trigger id (CRC-32, identical in every process and release)."""
    return zlib.crc32(trigger_id.encode()) % shards


def route_for(fire_at_ms: int, now_ms: int, direct_max_delay_s: int) -> Route:
    """DIRECT when SQS can hold the message until the fire time, else SWEEP."""
    return Route.DIRECT if fire_at_ms - now_ms <= direct_max_delay_s * 1000 else Route.SWEEP


def bucket_minute(fire_at_ms: int) -> int:
    """The 1-minute bucket (minutes since the epoch) that holds a fire time."""
    return fire_at_ms // 60_000


# Where a trigger's row lives: the triggers created to fire in one second (their home, the
# fire time they were created with) and in one of ROW_SHARDS groups of shards share a
# partition, so the claims and outcomes of a wave share Paxos rounds. At 1,000 triggers a
# second a partition holds 125 rows; at 100,000 a second, 12,500 (then raise ROW_SHARDS:
# a new table, since rows never move).
ROW_BUCKET_MS = 1_000
ROW_SHARDS = 8


def row_partition(home_at_ms: int, shard: int) -> tuple[int, int]:
    """(second, shard group) of the partition that holds the row of a trigger with this home
    and shard."""
    return home_at_ms // ROW_BUCKET_MS, shard % ROW_SHARDS


def fire_month(fire_at_ms: int) -> int:
    """``YYYYMM`` of a fire time in UTC: the listing index's partition."""
    dt = ms_to_datetime(fire_at_ms)
    return dt.year * 100 + dt.month


def month_start_ms(month: int) -> int:
    """The first millisecond of ``YYYYMM`` (UTC)."""
    year, mon = divmod(month, 100)
    return int(datetime(year, mon, 1, tzinfo=UTC).timestamp() * 1000)


def month_end_ms(month: int) -> int:
    """The first millisecond after ``YYYYMM`` (UTC)."""
    year, mon = divmod(next_month(month), 100)
    return int(datetime(year, mon, 1, tzinfo=UTC).timestamp() * 1000)


def next_month(month: int) -> int:
    year, mon = divmod(month, 100)
    return (year + 1) * 100 + 1 if mon == 12 else month + 1
