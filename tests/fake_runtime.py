"""A ``Runtime`` for tests: production names every port (``Runtime.open``), a test names the
few it looks at and gets a fresh in-memory fake for each other one. The fakes live here, not
as defaults of ``Runtime``, so no production process can start on one unawares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from trigger_service.adapters.dns import LoopResolver
from trigger_service.adapters.memory.board import MemoryOpsBoard
from trigger_service.adapters.memory.caller_events import MemoryEventQueue, MemorySubscriptions
from trigger_service.adapters.memory.deaths import MemoryDispatcherDeaths
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth, MemoryOpsEvents
from trigger_service.adapters.memory.flow import MemoryFlowBoard, MemoryFlowLimiter
from trigger_service.adapters.memory.inbox import MemoryInboxBus
from trigger_service.adapters.memory.limits import (
    MemoryPendingQuota,
    MemoryRateLimiter,
    MemorySendBudget,
    MemoryStreamSlots,
)
from trigger_service.adapters.memory.recipients import MemoryRecipients
from trigger_service.config.live_callers import Callers
from trigger_service.config.settings import Settings
from trigger_service.core.notify.addresses import HostResolver
from trigger_service.core.ports import Clock, Lease, Pingable
from trigger_service.core.ports.caller_events import EventQueue, SubscriptionStore
from trigger_service.core.ports.deaths import DispatcherDeaths
from trigger_service.core.ports.endpoint_health import EndpointHealthStore, OpsEvents
from trigger_service.core.ports.flow import FlowBoard, FlowLimiter
from trigger_service.core.ports.idempotency import IdempotencyCache
from trigger_service.core.ports.inbox import InboxBus
from trigger_service.core.ports.limit import PendingQuota, RateLimiter, SendBudget, StreamSlots
from trigger_service.core.ports.ops import OpsBoard
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.trace_context import Tracing
from trigger_service.platform.wiring import Queue, Runtime, RuntimeMetrics, Store


def fake_runtime(
    settings: Settings, callers: Callers, store: Store, queue: Queue, cache: IdempotencyCache,
    lease: Lease, clock: Clock, metrics: RuntimeMetrics, *,
    board: OpsBoard | None = None,
    inbox_bus: InboxBus | None = None,
    limiter: RateLimiter | None = None,
    quota: PendingQuota | None = None,
    stream_slots: StreamSlots | None = None,
    budget: SendBudget | None = None,
    resolver: HostResolver | None = None,
    recipients: RecipientStore | None = None,
    endpoint_health: EndpointHealthStore | None = None,
    ops_events: OpsEvents | None = None,
    subscriptions: SubscriptionStore | None = None,
    event_queue: EventQueue | None = None,
    flow: FlowLimiter | None = None,
    flow_board: FlowBoard | None = None,
    deaths: DispatcherDeaths | None = None,
    tracing: Tracing | None = None,
    pings: dict[str, Pingable] | None = None,
    closers: list[Callable[[], Awaitable[None]]] | None = None,
) -> Runtime:
    """A ``Runtime`` on the given adapters; each port not given (None) is a new in-memory
    fake, except ``resolver`` (the real ``LoopResolver``, as production's) and ``tracing``
    (export off). ``pings`` and ``closers``: none unless given."""
    return Runtime(
        settings, callers, store, queue, cache, lease, clock, metrics,
        board=board if board is not None else MemoryOpsBoard(),
        inbox_bus=inbox_bus if inbox_bus is not None else MemoryInboxBus(),
        limiter=limiter if limiter is not None else MemoryRateLimiter(),
        quota=quota if quota is not None else MemoryPendingQuota(),
        stream_slots=stream_slots if stream_slots is not None else MemoryStreamSlots(),
        budget=budget if budget is not None else MemorySendBudget(),
        resolver=resolver if resolver is not None else LoopResolver(),
        recipients=recipients if recipients is not None else MemoryRecipients(),
        endpoint_health=(endpoint_health if endpoint_health is not None
                         else MemoryEndpointHealth()),
        ops_events=ops_events if ops_events is not None else MemoryOpsEvents(),
        subscriptions=subscriptions if subscriptions is not None else MemorySubscriptions(),
        event_queue=event_queue if event_queue is not None else MemoryEventQueue(),
        flow=flow if flow is not None else MemoryFlowLimiter(),
        flow_board=flow_board if flow_board is not None else MemoryFlowBoard(),
        deaths=deaths if deaths is not None else MemoryDispatcherDeaths(clock),
        tracing=tracing if tracing is not None else Tracing(),
        pings=pings if pings is not None else {},
        closers=closers if closers is not None else [],
    )
