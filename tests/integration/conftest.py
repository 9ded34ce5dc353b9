"""Integration fixtures: the REAL Cassandra, LocalStack SQS and Redis that ``infra/up.sh``
starts (``make test`` does that first). Nothing here fakes them.

Each test gets its own SQS queues and its own caller (so listings are isolated); all tests
share one Cassandra keyspace (``TRIGGER_TEST_KEYSPACE``, default ``triggers_test``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient

from dispatcher.caller_events import EventSender
from dispatcher.channels.guard import Lookup, system_lookup
from dispatcher.channels.webhook import WebhookChannel
from dispatcher.dispatcher import Dispatcher
from dispatcher.fanout import UNCONFIGURED, Notifiers
from dispatcher.flow_control import FlowGate
from dispatcher.secrets import SecretBook
from dispatcher.succession import Succession
from sweeper.sweeper import Sweeper
from tests.api_server import ApiTestServer
from tests.fake_runtime import fake_runtime
from tests.integration.helpers import SqsAdmin
from tests.keys import fixture_cipher
from tests.openapi_check import callback_violations, check_contract
from trigger_client import AsyncTriggerClient, TriggerClient
from trigger_service.adapters.cassandra.endpoint_health import CassandraEndpointHealth
from trigger_service.adapters.cassandra.migrate import migrate
from trigger_service.adapters.cassandra.recipients import CassandraRecipients
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.cassandra.subscriptions import CassandraSubscriptions
from trigger_service.adapters.ops_events import WebhookOpsEvents
from trigger_service.adapters.redis.client import RedisPing, open_from_settings
from trigger_service.adapters.redis.deaths import RedisDispatcherDeaths
from trigger_service.adapters.redis.flow_control import RedisFlowBoard, RedisFlowLimiter
from trigger_service.adapters.redis.idempotency import RedisIdempotencyCache
from trigger_service.adapters.redis.lease import RedisLease
from trigger_service.adapters.redis.limits import RedisSendBudget
from trigger_service.adapters.redis.ops_board import RedisOpsBoard
from trigger_service.adapters.sqs import SqsQueue
from trigger_service.app.triggers import TriggerService
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.settings import Settings
from trigger_service.core.errors import ApiError
from trigger_service.core.model import Status
from trigger_service.core.time.clock import SystemClock
from trigger_service.http.app import build_app
from trigger_service.platform.caller_events import CallerEvents, SubscriptionBook
from trigger_service.platform.metrics import InMemoryMetrics
from trigger_service.platform.wiring import Runtime

pytestmark = pytest.mark.integration

# Read and taken out of the environment: it is the suite's, not a service setting (those
# refuse unknown TRIGGER_* variables).
KEYSPACE = os.environ.pop("TRIGGER_TEST_KEYSPACE", "triggers_test")
# Production is the service's default (it refuses the development tokens, LocalStack, ...):
# this suite and every process it starts with the environment run in development.
os.environ["TRIGGER_ENV"] = "development"
# The test caller's Standard Webhooks secrets during a rotation: the new one, then the old.
SIGNING_SECRETS = ("whsec_" + base64.b64encode(b"n" * 32).decode(),
                   "whsec_" + base64.b64encode(b"o" * 32).decode())


@pytest.fixture(scope="session")
def store() -> Iterator[CassandraStore]:
    # Hosts, port and replication from the environment (`make test CASSANDRA_NODES=3` sets
    # them for the 3-node ring), the keyspace of the tests.
    settings = replace(Settings.from_env().cassandra, keyspace=KEYSPACE)
    migrate(settings, SystemClock().now_ms())
    # Payloads and plans sealed too: every integration test delivers through encrypted rows.
    s = CassandraStore.open_sync(settings, fixture_cipher(), seal_payloads=True)
    yield s
    s.close_sync()


@dataclass
class Arrival:
    trigger_id: str
    attempt: int
    at_ms: int
    body: dict[str, Any]
    headers: dict[str, str]
    raw: str = ""  # the body exactly as received (what a signature covers)


@dataclass
class Receiver:
    """A real HTTP server on loopback that records every callback it gets."""

    port: int = 0
    arrivals: list[Arrival] = field(default_factory=list)
    # trigger id -> statuses to answer in order (then 200); "hang" sleeps past any timeout;
    # "429:4" is a 429 with Retry-After: 4
    script: dict[str, list[int | str]] = field(default_factory=dict)
    default_status: int = 200
    hang_s: float = 30.0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _unchecked: list[tuple[Mapping[str, str], str]] = field(default_factory=list)
    _violations: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.text()
        self._unchecked.append((request.headers.copy(), raw))
        tid = request.headers.get("X-Trigger-Id", "")
        self.arrivals.append(Arrival(tid, int(request.headers.get("X-Trigger-Attempt", "0")),
                                     time.time_ns() // 1_000_000, json.loads(raw),
                                     dict(request.headers), raw))
        self.arrived.set()
        steps = self.script.get(tid)
        answer: int | str = steps.pop(0) if steps else self.default_status
        if answer == "hang":
            await asyncio.sleep(self.hang_s)
            answer = 200
        # "429:4" answers 429 with Retry-After: 4
        status, _, retry_after = str(answer).partition(":")
        headers = {"Retry-After": retry_after} if retry_after else {}
        return web.Response(status=int(status), headers=headers)

    @property
    def violations(self) -> list[str]:
        """Callbacks that break the document's ``webhooks.callback`` (checked at teardown).
        Checked when asked, not as they arrive: a check costs about 10 CPU-ms, and a herd's
        checks inside ``handle`` would stall the event loop the test's dispatcher shares,
        past its callback timeout (then the retries look like duplicates)."""
        unchecked, self._unchecked = self._unchecked, []
        for headers, raw in unchecked:  # in the order they came
            # A POST without a trigger's headers is an event to the caller (webhooks.event).
            kind = "callback" if "X-Trigger-Id" in headers else "event"
            self._violations += callback_violations(headers, raw.encode(), kind)
        return self._violations

    def events(self) -> list[Arrival]:
        """The events to the caller received (POSTs without a trigger's headers)."""
        return [a for a in self.arrivals if not a.trigger_id]

    def for_trigger(self, trigger_id: str) -> list[Arrival]:
        return [a for a in self.arrivals if a.trigger_id == trigger_id]

    async def wait_for(self, pred: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return True
            await asyncio.sleep(0.05)
        return pred()


class Serves(Protocol):
    port: int

    async def handle(self, request: web.Request) -> web.StreamResponse: ...


R = TypeVar("R", bound=Serves)


@asynccontextmanager
async def serving(rec: R) -> AsyncIterator[R]:
    """``rec`` listening on a free loopback port (set in ``rec.port``) until the block ends."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rec.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield rec
    finally:
        await runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serving(Receiver()) as rec:
        yield rec
    # every callback the receiver got must match webhooks.callback in openapi.yaml
    assert not rec.violations, "\n".join(rec.violations)


@dataclass
class Stack:
    settings: Settings
    runtime: Runtime
    service: TriggerService
    client: TestClient  # type: ignore[type-arg]
    token: str
    caller: str
    receiver: Receiver
    env: dict[str, str]
    redis: aioredis.Redis
    sqs: SqsAdmin

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    async def post(self, body: dict[str, Any], **headers: str) -> tuple[int, Any, Any]:
        resp = await self.client.post("/v1/triggers", json=body,
                                      headers={**self.auth(), **headers})
        return resp.status, await resp.json(), resp.headers

    async def wait_status(self, trigger_id: str, status: str | Collection[str],
                          timeout_s: float = 5) -> Any:
        """GET the trigger until it has ``status`` (one, or any of several) or the time is
        up; return the last view."""
        wanted = {status} if isinstance(status, str) else set(status)
        deadline = time.monotonic() + timeout_s
        while True:
            resp = await self.client.get(f"/v1/triggers/{trigger_id}", headers=self.auth())
            assert resp.status == 200, await resp.text()
            view = await resp.json()
            if view["status"] in wanted or time.monotonic() >= deadline:
                return view
            await asyncio.sleep(0.1)

    def body(self, **fields: Any) -> dict[str, Any]:
        return {"callbackUrl": self.receiver.base_url + "cb", "payload": {"n": 1}, **fields}

    async def start_dispatcher(self, *, notifiers: Notifiers | None = None,
                               lookup: Lookup | None = None, endpoints: bool = False,
                               slot_file: str = "", events: bool = False,
                               **overrides: Any) -> DispatcherHandle:
        """A dispatcher on the real stack; ``notifiers``: its email/SMS/push/inbox senders
        (tests/integration/test_channels.py), else channels are "not configured";
        ``lookup``: the webhook channel's DNS (tests/integration/test_ssrf.py);
        ``endpoints``: it keeps endpoint health (tests/integration/test_endpoint_health.py);
        ``slot_file``: the slot it locks (``dispatcher.succession``; every one reads the
        deaths declared on the real Redis); ``events``: it emits the callers' events (the
        subscriptions in Cassandra) and runs an event sender on its queue's events queue."""
        settings = self.settings
        if overrides:
            settings = replace(settings, dispatch=replace(settings.dispatch, **overrides))
        metrics = InMemoryMetrics()
        queue = await SqsQueue.connect(
            settings.sqs, visibility_timeout_s=settings.dispatch.visibility_timeout_s,
            metrics=metrics, clock=SystemClock())
        book = SecretBook(self.runtime.store, self.runtime.callers, SystemClock(),
                          settings.dispatch.secret_rotation_overlap_s,
                          max_live=settings.dispatch.secret_max_live)
        channel = WebhookChannel(settings.dispatch.callback_timeout_s, clock=SystemClock(),
                                 secrets_for=book.for_caller,
                                 trusts=self.runtime.callers.names_callback_host,
                                 lookup=lookup or system_lookup)
        await channel.open()
        # Flow control on the real Redis: every dispatcher of a test shares one limiter.
        flow = FlowGate(RedisFlowLimiter(self.redis), self.runtime.callers, SystemClock(),
                        metrics, lease_ms=int(settings.dispatch.callback_timeout_s * 1000)
                        + 5_000, board=RedisFlowBoard(self.redis, settings.sqs.queue),
                        source=f"d{len(self._dispatchers)}")
        succession = Succession(RedisDispatcherDeaths(self.redis), SystemClock(), metrics)
        succession.take_slot(slot_file)
        emitter = sender = None
        if events:
            subs = SubscriptionBook(self.runtime.subscriptions, SystemClock(),
                                    settings.events.cache_s)
            emitter = CallerEvents(subs, queue.events, metrics)
            sender = EventSender(settings.events, queue.events, subs, self.runtime.subscriptions,
                                 self.runtime.callers, channel.post_event, SystemClock(),
                                 metrics, failed_ttl_s=settings.retention_s)
        d = Dispatcher(settings, self.runtime.store, queue, channel, self.runtime.callers,
                       SystemClock(), metrics, board=self.runtime.board,
                       succession=succession,
                       notifiers=notifiers or UNCONFIGURED,
                       recipients=self.runtime.recipients, pauses=self.runtime.store,
                       endpoints=((self.runtime.endpoint_health, self.runtime.ops_events)
                                  if endpoints else None),
                       flow=flow, tracing=self.runtime.tracing, events=emitter)
        stop = asyncio.Event()
        task = asyncio.create_task(d.run(stop))
        handle = DispatcherHandle(d, stop, task, queue, channel, metrics,
                                  asyncio.create_task(sender.run(stop)) if sender else None)
        self._dispatchers.append(handle)
        return handle

    async def start_sweeper(self, *, run: bool = True) -> SweeperHandle:
        """A sweeper on the real Redis, Cassandra and SQS; ``run`` starts its loops."""
        redis = open_from_settings(self.settings.redis)
        lease = RedisLease(redis, int(self.settings.sweep.lease_ttl_s * 1000),
                           self.settings.sweep.group)
        metrics = InMemoryMetrics()
        sw = Sweeper(self.settings, self.runtime.store, self.runtime.queue, lease, SystemClock(),
                     metrics, tracing=self.runtime.tracing)
        stop = asyncio.Event()
        task = asyncio.create_task(sw.run(stop)) if run else None
        handle = SweeperHandle(sw, stop, task, redis, metrics)
        self._sweepers.append(handle)
        return handle

    _dispatchers: list[DispatcherHandle] = field(default_factory=list)
    _sweepers: list[SweeperHandle] = field(default_factory=list)


@dataclass
class SweeperHandle:
    sweeper: Sweeper
    stop: asyncio.Event
    task: asyncio.Task[None] | None
    redis: aioredis.Redis
    metrics: InMemoryMetrics
    closed: bool = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, timeout=30)
        await self.redis.aclose()

    async def crash(self) -> None:
        """Stop dead (a sweeper driven by run_once only): nothing saved, no lease released,
        its wheel forgotten, exactly what SIGKILL leaves behind."""
        assert self.task is None, "crash() is for run_once-driven sweepers"
        self.closed = True
        await self.redis.aclose()


@dataclass
class DispatcherHandle:
    dispatcher: Dispatcher
    stop: asyncio.Event
    task: asyncio.Task[None]
    queue: SqsQueue
    channel: WebhookChannel
    metrics: InMemoryMetrics
    sender: asyncio.Task[None] | None = None  # its event sender's loop

    async def close(self) -> None:
        self.stop.set()
        if self.sender is not None:
            self.sender.cancel()  # (a long poll: nothing in hand to finish)
            await asyncio.gather(self.sender, return_exceptions=True)
        await asyncio.wait_for(self.task, timeout=30)
        await self.channel.close()
        await self.queue.close()
        if self.dispatcher.succession is not None:
            self.dispatcher.succession.release()


# The test caller may send to any recipient unless a module overrides ``caller_controls``.
ANY_RECIPIENT = ('email_domains = ["*"]\nsms_country_codes = ["*"]\ntelegram_chats = ["*"]\n'
                 'push_tokens = ["*"]\n')


def make_settings(tag: str, tmp_path: Path, receiver_url: str, token: str,
                  extra_env: dict[str, str], extra_prefixes: tuple[str, ...] = (),
                  controls: str = ANY_RECIPIENT) -> tuple[Settings, dict[str, str]]:
    callers = tmp_path / "callers.toml"
    prefixes = ", ".join(f'"{p}"' for p in (receiver_url, *extra_prefixes))
    callers.write_text(
        f'[callers.{tag}]\ntoken_sha256 = "{hash_token(token)}"\n'
        f'callback_prefixes = [{prefixes}]\nmax_concurrency = 50\n'
        f'signing_secrets = ["{SIGNING_SECRETS[0]}", "{SIGNING_SECRETS[1]}"]\n{controls}'
        f'[callers.{tag}_other]\ntoken_sha256 = "{hash_token(token + "-other")}"\n'
        f'callback_prefixes = ["{receiver_url}"]\n'
        f'[ops.{tag}_op]\ntoken_sha256 = "{hash_token(token + "-ops")}"\nrole = "operator"\n'
        f'[ops.{tag}_viewer]\ntoken_sha256 = "{hash_token(token + "-viewer")}"\n'
        'role = "viewer"\n'
    )
    env = {
        "TRIGGER_ENV": "development",
        "TRIGGER_API_CALLERS_FILE": str(callers),
        "TRIGGER_CASSANDRA_KEYSPACE": KEYSPACE,
        "TRIGGER_SQS_QUEUE": f"q-{tag}",
        "TRIGGER_SQS_DLQ": f"q-{tag}-dlq",
        "TRIGGER_SQS_REDRIVE_QUEUE": f"q-{tag}-redrive",
        "TRIGGER_DISPATCH_CALLBACK_TIMEOUT_S": "2",
        "TRIGGER_DISPATCH_VISIBILITY_SLACK_S": "2",
        "TRIGGER_DISPATCH_RETRY_BACKOFF_S": "1,1,1",
        "TRIGGER_DISPATCH_MAX_ATTEMPTS": "3",
        "TRIGGER_SQS_ENQUEUE_LEAD_S": "1",
        "TRIGGER_DISPATCH_RECEIVERS": "2",
        "TRIGGER_LOG_LEVEL": "WARNING",
        "TRIGGER_SWEEP_GROUP": tag,
        # Tests share one keyspace: a sweeper heals only the last half minute, so it does not
        # pick up what earlier tests left behind.
        "TRIGGER_HEAL_LOOKBACK_S": "30",
        **extra_env,
    }
    return Settings.from_env(env), env


@pytest.fixture
def extra_env() -> dict[str, str]:
    """Settings a test module adds (override this fixture in the module)."""
    return {}


@pytest.fixture
def extra_prefixes() -> tuple[str, ...]:
    """Callback prefixes the test caller may use besides the receiver's (override it)."""
    return ()


@pytest.fixture
def caller_controls() -> str:
    """The test caller's recipient controls, TOML lines of its table (override it)."""
    return ANY_RECIPIENT


@pytest.fixture
async def stack(
    store: CassandraStore, receiver: Receiver, tmp_path: Path, extra_env: dict[str, str],
    extra_prefixes: tuple[str, ...], caller_controls: str,
) -> AsyncIterator[Stack]:
    tag = "t" + uuid.uuid4().hex[:10]
    token = "token-" + tag
    settings, env = make_settings(tag, tmp_path, receiver.base_url, token, extra_env,
                                  extra_prefixes, caller_controls)
    metrics = InMemoryMetrics()  # the API's, and its queue's requests
    queue = await SqsQueue.connect(
        settings.sqs, visibility_timeout_s=settings.dispatch.visibility_timeout_s,
        metrics=metrics, clock=SystemClock())
    admin = await SqsAdmin(settings.sqs).open()
    redis = open_from_settings(settings.redis)
    cache = RedisIdempotencyCache(redis)
    lease = RedisLease(redis, int(settings.sweep.lease_ttl_s * 1000), settings.sweep.group)
    # Redis and Cassandra where the tests look at shared state; the other ports are
    # fake_runtime's (this process's fakes, the real DNS, no trace export).
    runtime = fake_runtime(
        settings, CallerRegistry.load(settings.api.callers_file), store, queue, cache, lease,
        SystemClock(), metrics, board=RedisOpsBoard(redis, settings.sqs.queue),
        pings={"cassandra": store, "sqs": queue, "redis": RedisPing(redis)},
        budget=RedisSendBudget(redis),
        recipients=CassandraRecipients(store.statements, store.sealer),
        endpoint_health=CassandraEndpointHealth.of(store.statements, settings.endpoint_health),
        ops_events=WebhookOpsEvents(settings.endpoint_health, SystemClock()),
        subscriptions=CassandraSubscriptions(store.statements), event_queue=queue.events,
        flow_board=RedisFlowBoard(redis, settings.sqs.queue))
    service = TriggerService(settings, store, store, queue, cache, runtime.clock,
                             runtime.metrics, resolver=runtime.resolver, budget=runtime.budget,
                             debounce_heads=store)
    app = build_app(runtime, service)
    contract = check_contract(app)  # every exchange against trigger_service/openapi.yaml
    client = TestClient(ApiTestServer(app))  # the API's own runner: its deadlines, its 431
    await client.start_server()
    st = Stack(settings, runtime, service, client, token, tag, receiver, env, redis, admin)
    try:
        yield st
    finally:
        # Cancel what this test left pending so no later test's sweeper promotes it.
        caller = st.runtime.callers.by_name(tag)
        assert caller is not None
        page = await service.list_triggers(caller.name, status=Status.PENDING, limit=500,
                                           cursor=None)
        for t in page.triggers:
            try:
                await service.cancel(caller.name, t.trigger_id)
            except ApiError:
                pass  # it moved on (in flight, fired): not pending any more
        for sw in st._sweepers:
            await sw.close()
        for d in st._dispatchers:
            await d.close()
        await client.close()
        await service.drain()  # the sends of registrations that answered
        await queue.close()
        await admin.delete_queues()
        await admin.close()
        await redis.aclose()
    contract.assert_clean()


def api_url(stack: Stack) -> str:
    """The test API's base URL, as an SDK or triggerctl is given it."""
    return str(stack.client.make_url("")).rstrip("/")


@pytest.fixture
async def sdk(stack: Stack) -> AsyncIterator[AsyncTriggerClient]:
    """The async SDK as the test caller."""
    async with AsyncTriggerClient(api_url(stack), stack.token) as client:
        yield client


@pytest.fixture
async def sync_sdk(stack: Stack) -> AsyncIterator[TriggerClient]:
    """The sync SDK as the test caller (call it in a worker thread: the API shares the
    test's event loop)."""
    client = TriggerClient(api_url(stack), stack.token)
    yield client
    await asyncio.to_thread(client.close)
