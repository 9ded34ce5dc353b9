"""The boundaries: every ``typing.Protocol`` of the service lives in this package, the
trigger store's, the queue's and the delivery's here and the others in one module per group.
The values the ones here take and answer (a due-index entry, a page of a listing, a queue
message, a delivery's result) are in ``values``.

=========================  ============================  =========================================
port (module)              used by                       implementations (fakes: adapters.memory)
=========================  ============================  =========================================
``Clock``                  everyone                      ``core.time.clock`` (system, manual)
``Pingable``               readiness checks              every networked adapter
``TriggerStates``          every process                 adapters.cassandra.triggers; memory.store
``TriggerCatalog``         API (create, list)            adapters.cassandra.triggers; memory.store
``ZoneIndex``              reconciler (re-zoning)        adapters.cassandra.zone_index
``DueIndex``               sweeper, reconciler           adapters.cassandra.due_index;
                                                         memory.store
``SweepCursors``           sweeper                       adapters.cassandra.due_index;
                                                         memory.store
``CounterStore``           every process                 adapters.cassandra.counters; memory.store
``Enqueuer``               API, sweeper, reconciler      adapters.sqs; memory.queue
``QueueDepth``             sweeper (due-scan), ops page  adapters.sqs; memory.queue
``DeliveryQueue``          dispatcher                    adapters.sqs; memory.queue
``RedriveQueue``           reconciler                    adapters.sqs; memory.queue
``Lease``                  sweeper, jobs                 adapters.redis.lease; memory.store
``Channel``                dispatcher                    dispatcher.channels.webhook
``SecretStore``            API, dispatcher               adapters.cassandra.secrets
``Metrics``                everyone                      platform.metrics (prometheus_client)
``KeySource``, ``Cipher``,  every process that reads      adapters.crypto (key file, KMS envelope),
``Resealer`` (crypto)      payloads or secrets           adapters.cassandra.reseal
``IdempotencyStore``,      API                           adapters.cassandra.legacy,
``IdempotencyCache``,                                    adapters.redis.idempotency;
``LegacyIdempotency``                                    memory.store, memory.idempotency
(idempotency)
``AttemptLog``,            dispatcher, reconciler, API   adapters.cassandra.dead_letters,
``DeadLetterIndex``,                                     adapters.cassandra.replay_jobs;
``ReplayJobStore``                                       memory.dead_letters
(history)
``InboxStore``,            API, dispatcher               adapters.cassandra.inbox,
``InboxBus`` (inbox)                                     adapters.redis.inbox_bus; memory.inbox
``RateLimiter``,           API, dispatcher               adapters.redis.limits; memory.limits
``PendingQuota``,
``StreamSlots``,
``SendBudget`` (limit)
``FlowLimiter``,           dispatcher, ops page          adapters.redis.flow_control; memory.flow
``FlowBoard`` (flow)
``EndpointHealthStore``,   dispatcher, API               adapters.cassandra.endpoint_health,
``OpsEvents``                                            adapters.ops_events;
(endpoint_health)                                        memory.endpoint_health
``OpsBoard`` (ops)         dispatcher, ops page          adapters.redis.ops_board; memory.board
``CallerPauses`` (pause)   API, dispatcher               adapters.cassandra.pauses; memory.pauses
``DebounceHeads``          API (create with debounce)    adapters.cassandra.debounce;
(debounce)                                               memory.debounce
``RecipientStore``         API, dispatcher               adapters.cassandra.recipients;
(recipient)                                              memory.recipients
``Notifier`` (notify)      dispatcher                    dispatcher.channels (email, ses, sms,
                                                         push, telegram, inbox); memory.notifier
=========================  ============================  =========================================

Every method that talks to a dependency raises the adapter's ``AdapterError`` subclass
(``StoreError``, ``QueueError``, ``CacheError``) and nothing else on the dependency's failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import (
    BucketEntry,
    DeliveryResult,
    KeyedCreation,
    ListCursor,
    ListPage,
    OutgoingMessage,
    ReceivedMessage,
    VisibilityChange,
)


class Clock(Protocol):
    """Time source; every "now" in the service comes from one."""

    def now_ms(self) -> int:
        """Current wall time as integer milliseconds since the Unix epoch (UTC)."""
        ...

    def monotonic_ms(self) -> int:
        """This process's monotonic time in milliseconds: never goes back, moves at the
        rate of real time, and means nothing outside this process (its origin is
        arbitrary). Only durations measured on it are compared: with other hosts' durations
        (a claim's lease, ``dispatcher.claim_keeping``), never with their timestamps."""
        ...

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        """Return no earlier than wall time ``deadline_ms`` (never early)."""
        ...

    async def sleep_ms(self, duration_ms: int) -> None:
        """Return no earlier than ``duration_ms`` from now."""
        ...


class Pingable(Protocol):
    async def ping(self) -> None:
        """Raise the adapter's ``AdapterError`` unless the dependency answers."""
        ...


# --- the trigger store --------------------------------------------------------------------
class TriggerStates(Protocol):
    """Read triggers and move them through the state machine (every process)."""

    async def get(self, trigger_id: str) -> Trigger | None:
        """Read one trigger (None if unknown or expired): its one row, the one every
        transition applies to (``adapters.homes``: a keyed id whose requests wrote several
        homes has one live row). Raises ``StoreError``."""
        ...

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        """``get`` for each id, concurrently, in order; for listings and scans (a keyed id
        whose homes are not settled is read at its pointer's: the dispatcher's ``get_at``
        checks before any delivery). Raises ``StoreError``."""

    async def get_many_at(self, where: Sequence[tuple[str, int | None, int]]
                          ) -> list[Trigger | None]:
        """``get_many`` of (trigger id, home, shard), in order: ``get_at`` where the home
        is known (a due-index entry carries it), ``get`` where it is None. Raises
        ``StoreError``."""
        ...

    async def get_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        """``get`` when the caller knows where the row is (``Trigger.home_at_ms`` and
        ``shard``, as a queue message carries them): one read instead of two (a keyed row:
        then its pointer, to check it is the id's live row). None if no row is there or the
        row there is not the id's (``get`` then finds it). Raises ``StoreError``."""
        ...

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        """Write ``new`` iff status, claim_id, attempts and revision still equal ``old``'s;
        with ``ttl_s`` the row then expires after that long (terminal states). ``patient``:
        the caller can wait a few hundred ms for the write to share its Paxos round with
        others (an outcome nobody waits for). Returns whether it applied. Raises
        ``StoreError`` (outcome unknown on a timeout)."""
        ...

    async def advance(self, old: Trigger, new: Trigger, index_ttl_s: int, now_ms: int, *,
                      patient: bool = False) -> bool:
        """Move a trigger to another fire time (its next occurrence, or an edit): write the
        index entries for ``new.fire_at_ms`` first, then ``compare_and_set(old, new)``.
        Returns whether it applied. Raises ``StoreError``."""
        ...


class TriggerCatalog(TriggerStates, Protocol):
    """Create and list triggers (the API)."""

    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        """Write a new PENDING trigger and its index entries (the entries first, the row last,
        so every row that exists can be found through the indexes). Plain writes: no Paxos.

        Idempotent: repeating the call with the same trigger rewrites identical cells and can
        never undo a later transition (nor can a create of another trigger with the same id:
        every creation cell is older than every transition's). Raises ``StoreError``."""
        ...

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        """Create a keyed trigger (its id derived from its caller and Idempotency-Key) so
        that its id has one row whatever the requests of the key do: repeated, concurrent,
        with or without Redis ordering them, with writes that land after their timeout
        (``adapters.homes``). Plain writes when the request is alone (no Paxos); a Paxos
        election of one home when several requests wrote theirs. Returns the id's row and
        whether this call wrote it (then possibly at another request's home, with that
        home's fire time); if not, the row is another request's (a replay: compare its
        request hash). Safe to repeat. Raises ``StoreError`` (a timeout leaves the outcome
        unknown: a repeat settles it)."""
        ...

    async def list_by_caller(
        self, caller: str, *, start: ListCursor, last_month: int, limit: int,
        status: Status | None,
    ) -> ListPage:
        """PENDING or IN_FLIGHT: those after ``start`` by (fire time, id) up to
        ``last_month``, a series at its current occurrence, a page full if that many are
        left. Else (all, or a finished status): newest created first, before ``start``; one
        call reads at most 2,000 entries (a rare status: a short page and a cursor). Each
        once; ``next_cursor`` None once nothing is left (or one empty page). StoreError."""
        ...


class ZoneIndex(Protocol):
    """Wall-clock triggers by the zone-rules release their next occurrence was resolved with
    (written with the other index entries of a trigger that has a ``tzdata_version``)."""

    async def zoned_versions(self) -> list[str]:
        """The releases that have entries. Raises ``StoreError``."""
        ...

    def zoned_trigger_ids(self, tzdata_version: str, shard: int) -> AsyncIterator[list[str]]:
        """Ids indexed under (release, shard), some moved on since; a page at a time to the
        last (never all at once: millions, for a long-used release). Raises ``StoreError``."""
        ...


class DueIndex(Protocol):
    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        """Due-index entries of ``shard`` with ``after_ms < fire_at_ms <= until_ms``, in fire
        time order. Raises ``StoreError``."""
        ...


class SweepCursors(Protocol):
    async def load_cursors(self, group: str) -> dict[int, int]:
        """shard → promoted_until_ms of a sweeper group. Raises ``StoreError``."""
        ...

    async def save_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None:
        """Record a shard's progress (last writer wins). Raises ``StoreError``."""
        ...


# --- the queue ----------------------------------------------------------------------------
class Enqueuer(Protocol):
    async def send(self, message: OutgoingMessage) -> None:
        """Enqueue one; concurrent calls share batch requests (a lone one goes at once,
        others wait a few ms at most for a full batch). Raises ``QueueError``."""
        ...

    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        """Enqueue all now (requests of 10); ``QueueError`` if any failed (some may be sent)."""
        ...


class QueueDepth(Protocol):
    async def visible_backlog(self) -> int:
        """About how many triggers are visible and not yet received (SQS's approximate
        count of messages, a pack counted as the triggers a message carries on average): a
        backlog means the dispatchers are behind, not that messages were lost."""
        ...

    async def dead_letter_backlog(self) -> int:
        """About how many messages wait in the dead-letter queue (SQS's approximate count)."""
        ...


class DeliveryQueue(Protocol):
    @property
    def lanes(self) -> int: ...  # the queue's lanes (core.lanes), each received on its own

    @property
    def high_lanes(self) -> int: ...  # the last this many of them are high-priority lanes

    async def receive(
        self, *, max_messages: int, wait_s: int, visibility_s: int, lane: int = 0
    ) -> list[ReceivedMessage]:
        """Long-poll ``lane`` for up to ``max_messages``; each stays hidden ``visibility_s``.
        Its receipts name the lane: the methods below take them as they come. A message
        that carries many triggers (a pack, ``adapters.sqs_packs``) comes back as one each,
        so more than ``max_messages`` may come (at most ``TRIGGER_SQS_PACK_MAX`` times)."""
        ...

    async def delete(self, receipt_handle: str) -> None:
        """Delete one (concurrent calls share batches); a receipt already gone is fine. A
        pack's member leaves the pack; the pack goes with its last member in hand."""
        ...

    async def change_visibility(self, receipt_handle: str, visibility_s: int) -> None:
        """Hide the message for ``visibility_s`` from now (0: show it again now): sent at
        once when alone, in a batch with concurrent changes otherwise (as
        ``change_visibility_many``). A pack's member with others in hand keeps the pack
        hidden at least that long (never shorter)."""
        ...

    async def change_visibility_many(self, changes: Sequence[VisibilityChange]) -> None:
        """``change_visibility`` for each, in batches shared with concurrent calls (a lone
        call goes at once, others wait a few ms at most): for deferrals. Raises
        ``QueueError`` if any failed (a receipt no longer valid too); the others applied.
        A pack's members deferred all together hide the pack (for the longest asked); a
        member deferred without the others is sent again alone and leaves the pack."""
        ...

    async def replace(self, receipt_handle: str, message: OutgoingMessage) -> None:
        """Send ``message`` as a fresh copy (its receive count starts again), then delete the
        received one. A deferral that would otherwise use up the redrive budget uses this."""
        ...

    async def send_dead_letter(self, trigger_id: str, fire_at_ms: int, reason: str) -> None:
        """Put a record of a trigger given up on in the dead-letter queue."""
        ...


class RedriveQueue(Protocol):
    """Where SQS's redrive policy puts a message received ``max_receive_count`` times (a
    message whose handling keeps crashing); the reconciler mirrors each into the trigger."""

    async def receive_redriven(self, *, max_messages: int, wait_s: int,
                               visibility_s: int) -> list[ReceivedMessage]:
        """Long-poll the redrive queue for up to ``max_messages``."""
        ...

    async def delete_redriven(self, receipt_handle: str) -> None:
        """Delete one message from the redrive queue (a receipt already gone is fine)."""
        ...

    async def send_dead_letter(self, trigger_id: str, fire_at_ms: int, reason: str) -> None:
        """Put a record of a trigger given up on in the dead-letter queue."""
        ...


# --- shard ownership ------------------------------------------------------------------------
class Lease(Protocol):
    """One owner per shard with a fencing token, plus a heartbeat set of live members."""

    async def acquire(self, shard: int, owner: str) -> int | None:
        """Take the shard if nobody holds it; the new fencing token, else None."""
        ...

    async def renew(self, leases: dict[int, int], owner: str) -> set[int]:
        """Extend every held lease (shard → fence); return the shards still held."""
        ...

    async def held(self, leases: dict[int, int], owner: str) -> set[int]:
        """The fencing check: which of these (shard → fence) are still ours, right now."""
        ...

    async def release(self, shard: int, fence: int, owner: str) -> None: ...

    async def heartbeat(self, member: str, now_ms: int, ttl_ms: int) -> int:
        """Record ``member`` as alive; return how many members are alive (it included)."""
        ...

    async def leave(self, member: str) -> None: ...


# --- delivery -------------------------------------------------------------------------------
class Channel(Protocol):
    async def deliver(self, trigger: Trigger, attempt: int,
                      timeout_s: float | None = None) -> DeliveryResult:
        """Deliver once, within ``timeout_s`` (None: the channel's callback timeout); never
        raises for the receiver's failures (they are a result)."""
        ...


class SecretStore(Protocol):
    """Rotated signing secrets per caller (the callers file's are older than all of them)."""

    async def add_secret(self, caller: str, created_at_ms: int, secret: str) -> int:
        """Store a new current secret; the ms it is stored under: ``created_at_ms``, or the
        next free one if another rotation of the caller took it. Raises ``StoreError``."""
        ...

    async def secrets(self, caller: str, limit: int) -> list[tuple[int, str]]:
        """The newest ``limit`` (created_at_ms, secret), newest first (only those are read
        and opened). Raises ``StoreError``."""
        ...

    async def retire_secrets(self, caller: str, before_ms: int) -> None:
        """Delete the caller's secrets made before ``before_ms`` (idempotent). Raises
        ``StoreError``."""
        ...


class CounterStore(Protocol):
    """Counters that outlive a process (``GET /v1/stats``)."""

    async def add_counters(self, deltas: dict[str, int]) -> None:
        """Add each delta to its counter (not idempotent). Raises ``StoreError``."""

    async def read_counters(self) -> dict[str, int]:
        """Every counter's sum. Raises ``StoreError``."""


class Metrics(Protocol):
    """Counters, histograms and gauges. Never raises; cheap enough for every delivery."""

    def inc(self, name: str, amount: int = 1, **labels: str) -> None: ...

    def observe(self, name: str, value: float, **labels: str) -> None: ...  # a histogram's

    def set(self, name: str, value: float, **labels: str) -> None: ...  # a gauge's value

    def remove(self, name: str, **labels: str) -> None: ...  # forget a gauge's series

    def snapshot(self) -> dict[str, int]: ...  # counters so far, 'name{label="value",...}'
