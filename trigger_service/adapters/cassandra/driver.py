"""cassandra-driver, connected and bridged to asyncio, with its errors translated.

The driver calls back on its own I/O thread; :func:`execute_page` hands each result to the
event loop. Every driver failure leaves this module as ``StoreError`` (``raise ... from``),
``StoreTimeout`` when the outcome of a write is unknown.

Every read pages to its end: Cassandra answers at most ``CassandraSettings.fetch_size`` rows
per request, with a paging state for the rest. :func:`execute` follows that state to the last
page and returns every row (for reads bounded by construction: a key, a ``LIMIT``, a small
table); :func:`pages` yields one page at a time, for reads whose whole result may be too big
to hold (the zone-rules index of a release and shard, a replay job's items). Nothing here
hands back the first page alone.

Writes to many rows of one partition go in unlogged batches of :data:`ROWS_PER_BATCH`
(:func:`write_in_batches`). The parts of ``CassandraStore`` run its statements by name
through :class:`Statements` (:class:`PreparedStatements`: prepared on its session).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from cassandra import (
    AuthenticationFailed,
    ConsistencyLevel,
    OperationTimedOut,
    Timeout,
    WriteFailure,
)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    Session,
)
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import BatchStatement, BatchType, PreparedStatement, Statement, dict_factory

from trigger_service.config.stores import CassandraSettings
from trigger_service.core.errors import StoreError, StoreTimeout

Row = dict[str, Any]
Page = tuple[list[Row], bytes | None]
Write = tuple[str, Sequence[Any]]  # a prepared statement's name and its values
RunUnlogged = Callable[[Sequence[Write]], Awaitable[None]]

# A partition's rows written together go this many to an unlogged batch: one mutation, a
# short request (Cassandra's batch size warning and limit, 5 and 50 KiB by default, apply only
# to batches that span partitions); this many batches in flight at a time (not 10,000
# requests at once).
ROWS_PER_BATCH = 50
BATCHES_AT_ONCE = 16


def connect(settings: CassandraSettings) -> tuple[Cluster, Session]:
    """Open a cluster connection (blocking), reading ``settings.fetch_size`` rows per page.
    With ``settings.username`` it logs in (PasswordAuthenticator); with
    ``settings.tls_ca_file`` every connection is TLS and the node's certificate must be signed
    by that CA and name the address connected to (an IP SAN for an address). Raises
    ``StoreError`` (refused credentials and an unreadable CA file say so)."""
    # Token-aware within the local DC: a request goes to a replica of its partition (no
    # extra coordinator hop), and never crosses to another DC while the local one is up.
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(
            DCAwareRoundRobinPolicy(local_dc=settings.local_dc)),
        request_timeout=settings.request_timeout_s,
        consistency_level=ConsistencyLevel.LOCAL_QUORUM,
        serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
        row_factory=dict_factory,
    )
    cluster = Cluster(
        contact_points=list(settings.hosts),
        port=settings.port,
        # v4, not v5: v5 frames every message with a checksum the driver computes in Python
        # (measured here: 0.056 against 0.047 client CPU-ms per request).
        protocol_version=4,
        connect_timeout=settings.request_timeout_s,
        # The control connection reads every keyspace's schema when it connects; the driver's
        # 2 s for that timed out here on a loaded node holding many keyspaces.
        control_connection_timeout=settings.request_timeout_s,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        auth_provider=auth_provider(settings),
        ssl_context=tls_context(settings),
    )
    try:
        session = cluster.connect()
    except Exception as e:  # NoHostAvailable is not a DriverException subclass
        cluster.shutdown()
        raise StoreError(connect_failure(settings, e)) from e
    # Every statement without its own fetch size pages by this (the driver's default 5,000).
    session.default_fetch_size = settings.fetch_size
    return cluster, session


def auth_provider(settings: CassandraSettings) -> PlainTextAuthProvider | None:
    """The login for PasswordAuthenticator, or None (no user set: no authentication)."""
    if not settings.username:
        return None
    return PlainTextAuthProvider(username=settings.username, password=settings.password)


def tls_context(settings: CassandraSettings) -> ssl.SSLContext | None:
    """A client TLS context trusting only ``settings.tls_ca_file``, never the system's CAs
    (any public CA could otherwise vouch for a node), or None (no CA file: plain CQL).
    Hostnames are checked: the driver names each node by its address, so the node's
    certificate carries it as an IP SAN. Raises ``StoreError`` if the file is not a readable
    PEM CA."""
    if not settings.tls_ca_file:
        return None
    try:
        # With a cafile, create_default_context loads that file alone (no load_default_certs)
        # and keeps its defaults: certificate and hostname checks, TLS 1.2 at least.
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.tls_ca_file)
    except (OSError, ssl.SSLError) as e:  # FileNotFoundError is an OSError
        raise StoreError(
            f"cassandra TLS CA file {settings.tls_ca_file!r} unusable: {e}") from e


def connect_failure(settings: CassandraSettings, e: Exception) -> str:
    """The message of a failed connect, naming the cause an operator can fix."""
    causes = list(e.errors.values()) if isinstance(e, NoHostAvailable) else [e]
    if any(isinstance(c, AuthenticationFailed) for c in causes):
        who = f"user {settings.username!r}" if settings.username else "no user set"
        return (f"cassandra connect failed: authentication refused ({who}; "
                f"TRIGGER_CASSANDRA_USERNAME/PASSWORD): {e}")
    # The driver reports a failed handshake as an OSError quoting the SSL error.
    if any(isinstance(c, ssl.SSLError) or "[SSL" in str(c) for c in causes):
        return (f"cassandra connect failed: TLS handshake failed "
                f"(TRIGGER_CASSANDRA_TLS_CA_FILE): {e}")
    return f"cassandra connect failed: {e}"


def prepare(session: Session, queries: dict[str, str]) -> dict[str, PreparedStatement]:
    """Prepare every statement (blocking). Raises ``StoreError``."""
    try:
        return {name: session.prepare(text) for name, text in queries.items()}
    except Exception as e:
        raise StoreError(f"cassandra prepare failed: {e}") from e


async def execute(session: Session, name: str, stmt: PreparedStatement,
                  params: Sequence[Any]) -> list[Row]:
    """Run one prepared statement; all its rows, every page read (one request per page).
    Raises ``StoreError`` (naming ``name``); a failure on a later page loses the earlier
    ones (a read: the caller's retry reads again)."""
    rows: list[Row] = []
    async for page in pages(session, name, stmt.bind(params)):
        rows += page
    return rows


async def pages(session: Session, name: str, stmt: Statement) -> AsyncIterator[list[Row]]:
    """The rows of a bound statement a page at a time, to the last page: the next page is
    requested only when the consumer asks for it, so memory holds one page however big the
    result. Pages are never empty (an empty one, which Cassandra may send before the end,
    is skipped). Raises ``StoreError`` (naming ``name``) from the page that failed; the
    pages yielded before it stand (a read: go on or read again)."""
    state: bytes | None = None
    while True:
        rows, state = await execute_page(session, name, stmt, state)
        if rows:
            yield rows
        if state is None:
            return


async def execute_unlogged(session: Session, name: str,
                           statements: Sequence[tuple[PreparedStatement, Sequence[Any]]]
                           ) -> None:
    """Several writes in one request: an UNLOGGED batch (no batchlog, so no all-or-nothing:
    each write applies or not as if sent alone; what it saves is the round trips and their
    cost in both processes). For independent writes whose order does not matter. Raises
    ``StoreError``."""
    if len(statements) == 1:
        stmt, params = statements[0]
        await execute(session, name, stmt, params)
        return
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for stmt, params in statements:
        batch.add(stmt, params)
    await execute_page(session, name, batch, None)


async def write_in_batches(run_unlogged: RunUnlogged, writes: Sequence[Write]) -> None:
    """Independent writes to rows of one partition, ``ROWS_PER_BATCH`` to an unlogged batch
    (``run_unlogged``), ``BATCHES_AT_ONCE`` batches in flight at a time: each batch applies as
    one mutation, the batches independently. Raises ``StoreError`` (of the first batch that
    failed; the others may have applied: the writes must be safe to run again)."""
    batches = [writes[k:k + ROWS_PER_BATCH] for k in range(0, len(writes), ROWS_PER_BATCH)]
    for k in range(0, len(batches), BATCHES_AT_ONCE):
        await asyncio.gather(*(run_unlogged(b) for b in batches[k:k + BATCHES_AT_ONCE]))


async def execute_conditional(session: Session, name: str,
                              statements: Sequence[tuple[PreparedStatement, Sequence[Any]]]
                              ) -> list[Row]:
    """Conditional writes to rows of one partition as one batch: one Paxos round, applied
    all or none. The rows: ``[applied]`` True alone, or False with the current values of
    each row the batch names that exists (its key and condition columns). Raises
    ``StoreError`` (a timeout leaves the outcome unknown)."""
    if len(statements) == 1:
        stmt, params = statements[0]
        return await execute(session, name, stmt, params)
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for stmt, params in statements:
        batch.add(stmt, params)
    rows, _ = await execute_page(session, name, batch, None)
    return rows


async def execute_page(session: Session, name: str, stmt: Statement,
                       paging_state: bytes | None) -> Page:
    """One page of a bound statement: (rows, paging state of the next page or None)."""
    try:
        return await _bridge(session.execute_async(stmt, paging_state=paging_state))
    except (OperationTimedOut, Timeout, WriteFailure) as e:
        # No answer, or some replicas only: a write may have applied (or still apply).
        raise StoreTimeout(f"cassandra {name} timed out: {e}") from e
    except Exception as e:  # DriverException, NoHostAvailable and friends
        raise StoreError(f"cassandra {name} failed: {e}") from e


def _bridge(fut: Any) -> asyncio.Future[Page]:
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Page] = loop.create_future()

    def ok(rows: list[Row]) -> None:
        state = fut._paging_state if fut.has_more_pages else None
        loop.call_soon_threadsafe(_settle, result, (rows or [], state), None)

    def err(exc: BaseException) -> None:
        loop.call_soon_threadsafe(_settle, result, None, exc)

    fut.add_callbacks(ok, err)
    return result


def _settle(fut: asyncio.Future[Page], value: Page | None, exc: BaseException | None) -> None:
    if fut.cancelled():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        assert value is not None
        fut.set_result(value)


class Statements(Protocol):
    """The store's statements, run by name: what each part of the store is given to reach
    Cassandra (:class:`PreparedStatements`, or a test's double). Raises ``StoreError``."""

    async def run(self, name: str, params: Sequence[Any]) -> list[Row]:
        """Every row of a statement, all pages read (:func:`execute`)."""

    def pages(self, name: str, params: Sequence[Any], page_size: int | None = None
              ) -> AsyncIterator[list[Row]]:
        """Every row of a statement, a page at a time (:func:`pages`): ``page_size`` rows a
        page, or the session's fetch size."""

    async def run_unlogged(self, writes: Sequence[Write]) -> None:
        """Independent writes as one unlogged batch (:func:`execute_unlogged`)."""

    async def run_conditional(self, writes: Sequence[Write]) -> list[Row]:
        """Conditional writes to one partition as one request (:func:`execute_conditional`)."""


class PreparedStatements:
    """``Statements`` prepared on one session (blocking: :func:`prepare`)."""

    def __init__(self, session: Session, queries: dict[str, str]) -> None:
        self._session = session
        self._prepared = prepare(session, queries)

    async def run(self, name: str, params: Sequence[Any]) -> list[Row]:
        return await execute(self._session, name, self._prepared[name], params)

    def pages(self, name: str, params: Sequence[Any], page_size: int | None = None
              ) -> AsyncIterator[list[Row]]:
        stmt = self._prepared[name].bind(params)
        if page_size is not None:
            stmt.fetch_size = page_size
        return pages(self._session, name, stmt)

    async def run_unlogged(self, writes: Sequence[Write]) -> None:
        await execute_unlogged(self._session, "+".join(name for name, _ in writes),
                               [(self._prepared[name], params) for name, params in writes])

    async def run_conditional(self, writes: Sequence[Write]) -> list[Row]:
        return await execute_conditional(
            self._session, "+".join(sorted({name for name, _ in writes})),
            [(self._prepared[name], params) for name, params in writes])

