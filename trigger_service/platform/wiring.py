"""Wiring: the one place that builds adapters. A ``Runtime`` is what a process runs on,
typed by the core's ports, so components never see a concrete adapter."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Protocol

from opentelemetry.sdk.trace import TracerProvider

from trigger_service.adapters.dns import LoopResolver
from trigger_service.config.live_callers import Callers, LiveCallers
from trigger_service.config.production import callers_vet
from trigger_service.config.settings import Settings
from trigger_service.core.notify.addresses import HostResolver
from trigger_service.core.ports import (
    Clock,
    CounterStore,
    DeliveryQueue,
    DueIndex,
    Enqueuer,
    Lease,
    Metrics,
    Pingable,
    QueueDepth,
    RedriveQueue,
    SecretStore,
    SweepCursors,
    TriggerCatalog,
    ZoneIndex,
)
from trigger_service.core.ports.audit import AuditLog
from trigger_service.core.ports.caller_events import EventQueue, SubscriptionStore
from trigger_service.core.ports.crypto import Resealer
from trigger_service.core.ports.deaths import DispatcherDeaths
from trigger_service.core.ports.debounce import DebounceHeads
from trigger_service.core.ports.endpoint_health import EndpointHealthStore, OpsEvents
from trigger_service.core.ports.flow import FlowBoard, FlowLimiter
from trigger_service.core.ports.history import AttemptLog, DeadLetterIndex, ReplayJobStore
from trigger_service.core.ports.idempotency import IdempotencyCache, IdempotencyStore
from trigger_service.core.ports.inbox import InboxBus, InboxStore
from trigger_service.core.ports.limit import PendingQuota, RateLimiter, SendBudget, StreamSlots
from trigger_service.core.ports.ops import OpsBoard
from trigger_service.core.ports.pause import CallerPauses
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.tags import FilteredListing
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.trace_context import Tracing
from trigger_service.core.trigger_jobs import TriggerJobStore
from trigger_service.platform.metrics import PrometheusMetrics
from trigger_service.platform.tracing import open_tracing

if TYPE_CHECKING:  # (a driver is loaded by ``Runtime.open`` alone)
    from trigger_service.adapters.cassandra.store import CassandraStore


class Store(TriggerCatalog, IdempotencyStore, DueIndex, SweepCursors, CounterStore, ZoneIndex,
            SecretStore, AttemptLog, DeadLetterIndex, ReplayJobStore, InboxStore, Resealer,
            Pingable, FilteredListing, TriggerJobStore, CallerPauses, DebounceHeads, AuditLog,
            Protocol):
    """Everything the trigger store offers; each component uses a part."""


class Queue(Enqueuer, DeliveryQueue, QueueDepth, RedriveQueue, Pingable, Protocol):
    """Everything the queue offers; each component uses a part."""


class RuntimeMetrics(Metrics, Protocol):
    """The metrics a process keeps, and their Prometheus exposition."""

    def exposition(self, *, aggregate: bool = False) -> bytes: ...


@dataclass
class Runtime:
    """The adapters a process runs on, one per port. Every port is a required argument, so
    no process runs on a stand-in nobody chose (an in-memory fake: state no other process
    sees); leaving one out is a ``TypeError`` naming it, at start-up. ``open`` names each
    for production; tests build one on in-memory fakes (``tests.fake_runtime``)."""

    settings: Settings
    # A LiveCallers when opened (SIGHUP reloads it: platform.process), a registry in tests.
    callers: Callers
    store: Store
    queue: Queue
    cache: IdempotencyCache
    lease: Lease
    clock: Clock
    metrics: RuntimeMetrics
    _: KW_ONLY
    # Breaker states and fire lag from the dispatchers, for the ops page (Redis).
    board: OpsBoard
    # Live inbox messages, published by the dispatchers to every API process (Redis).
    inbox_bus: InboxBus
    # Per-caller request rates and pending quotas, shared by every API (Redis).
    limiter: RateLimiter
    quota: PendingQuota
    # Each caller's open inbox streams, counted across every API process (Redis).
    stream_slots: StreamSlots
    # Channels' daily send counts, shared by the API and the dispatchers (Redis).
    budget: SendBudget
    # DNS for the registration half of the SSRF guard (app/callbacks.py).
    resolver: HostResolver
    # Recipient profiles and endpoint health records (Cassandra, on the store's session).
    recipients: RecipientStore
    endpoint_health: EndpointHealthStore
    # The operators' events (a signed webhook).
    ops_events: OpsEvents
    # The callers' event subscriptions (Cassandra) and the queue their events go out on
    # (SQS, apart from the triggers' queue).
    subscriptions: SubscriptionStore
    event_queue: EventQueue
    # Flow control per destination: the dispatchers' shared limiter and the ops page's
    # views (Redis).
    flow: FlowLimiter
    flow_board: FlowBoard
    # Dispatcher processes proved dead by their successors (Redis).
    deaths: DispatcherDeaths
    # Spans of requests and occurrences: export off unless OTEL_* say otherwise.
    tracing: Tracing
    # What /readyz checks and what ``close`` closes: not ports, none is a stand-in.
    pings: dict[str, Pingable] = field(default_factory=dict)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @classmethod
    async def open(cls, settings: Settings, process: str = "service") -> Runtime:
        """Load the callers and the encryption keys, connect Cassandra (its schema must be
        current), SQS (ensuring the queues) and Redis; trace export as the ``OTEL_*``
        variables say, spans named for ``process``. Raises ``ConfigError``, ``StoreError``
        (``CipherError``: KMS) or ``QueueError``."""
        # Imported here so that the modules of the core and the use cases, and unit tests,
        # never load a driver.
        from trigger_service.adapters.cassandra.store import CassandraStore
        from trigger_service.adapters.crypto.keyring import open_cipher
        from trigger_service.adapters.ops_events import WebhookOpsEvents
        from trigger_service.adapters.redis.client import RedisPing, open_from_settings
        from trigger_service.adapters.redis.deaths import RedisDispatcherDeaths as Deaths
        from trigger_service.adapters.redis.flow_control import RedisFlowBoard, RedisFlowLimiter
        from trigger_service.adapters.redis.idempotency import RedisIdempotencyCache
        from trigger_service.adapters.redis.inbox_bus import RedisInboxBus, open_listener
        from trigger_service.adapters.redis.lease import RedisLease
        from trigger_service.adapters.redis.limits import (
            RedisPendingQuota,
            RedisRateLimiter,
            RedisSendBudget,
            RedisStreamSlots,
        )
        from trigger_service.adapters.redis.ops_board import RedisOpsBoard
        from trigger_service.adapters.sqs import SqsQueue

        callers = LiveCallers.load(settings.api.callers_file, callers_vet(settings))
        tracing, provider = open_tracing(process)
        metrics = PrometheusMetrics(settings.metrics_multiproc_dir)
        clock = SystemClock()
        # First: it connects lazily (nothing to close if a later step fails), and a bad TLS
        # setting is a ConfigError before anything is connected.
        redis = open_from_settings(settings.redis)
        # One KMS call at most (this process's data key), before anything is connected.
        cipher = await open_cipher(settings.encryption, settings.sqs)
        store = await CassandraStore.connect(
            settings.cassandra, cipher, seal_payloads=settings.encryption.payloads)
        try:
            queue = await SqsQueue.connect(
                settings.sqs, visibility_timeout_s=settings.dispatch.visibility_timeout_s,
                metrics=metrics, clock=clock)
        except BaseException:
            await store.close()
            raise
        recipients, endpoint_health, subscriptions = _on_store(store, settings)
        # Its one connection is opened by the first inbox stream (so only by an API process).
        inbox_bus = RedisInboxBus(redis, open_listener(
            settings.redis.url, tls_ca_file=settings.redis.tls_ca_file))
        lease = RedisLease(redis, int(settings.sweep.lease_ttl_s * 1000), settings.sweep.group)
        return cls(settings, callers, store, queue, RedisIdempotencyCache(redis), lease,
                   clock, metrics, board=RedisOpsBoard(redis, settings.sqs.queue),
                   inbox_bus=inbox_bus, limiter=RedisRateLimiter(redis), resolver=LoopResolver(),
                   quota=RedisPendingQuota(redis), stream_slots=RedisStreamSlots(redis),
                   budget=RedisSendBudget(redis), recipients=recipients,
                   endpoint_health=endpoint_health, subscriptions=subscriptions,
                   ops_events=WebhookOpsEvents(settings.endpoint_health, clock),
                   event_queue=queue.events, flow=RedisFlowLimiter(redis), tracing=tracing,
                   flow_board=RedisFlowBoard(redis, settings.sqs.queue), deaths=Deaths(redis),
                   pings={"cassandra": store, "sqs": queue, "redis": RedisPing(redis)},
                   closers=[inbox_bus.close, redis.aclose, queue.close, store.close,
                            metrics.close, _flushing(provider)])

    def health_checks(self) -> dict[str, Pingable]:
        """name → dependency, for ``/readyz``."""
        return self.pings

    async def close(self) -> None:
        """Close every adapter (the queue flushes what it still batches)."""
        for close in self.closers:
            await close()


def _on_store(store: CassandraStore, settings: Settings
              ) -> tuple[RecipientStore, EndpointHealthStore, SubscriptionStore]:
    """The recipient profiles, the endpoint health records and the event subscriptions,
    on ``store``'s statements (prepared on its session; the profiles sealed by its
    sealer)."""
    from trigger_service.adapters.cassandra.endpoint_health import CassandraEndpointHealth
    from trigger_service.adapters.cassandra.recipients import CassandraRecipients
    from trigger_service.adapters.cassandra.subscriptions import CassandraSubscriptions
    return (CassandraRecipients(store.statements, store.sealer),
            CassandraEndpointHealth.of(store.statements, settings.endpoint_health),
            CassandraSubscriptions(store.statements))


def _flushing(provider: TracerProvider | None) -> Callable[[], Awaitable[None]]:
    """A closer that sends the spans still queued (in a thread: the exporter blocks)."""
    async def close() -> None:
        if provider is not None:
            await asyncio.to_thread(provider.shutdown)
    return close
