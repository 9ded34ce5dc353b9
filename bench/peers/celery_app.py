"""The peer: a Celery app whose one task POSTs the callback to the benchmark's receiver, as
our dispatcher does (``X-Trigger-Id`` names the delivery; the receiver timestamps arrival).

Broker: Redis, db ``PEER_REDIS_DB`` (5) of the shared server, so nothing collides with the
service's keys (db 0) and ``FLUSHDB`` between runs touches only the peer's. No result
backend (nothing reads results). ``PEER_VISIBILITY_TIMEOUT_S`` (default Celery's own, 3600)
is the Redis transport's visibility timeout: a message reserved longer than that without an
ack is restored to the queue and delivered again. An ETA task is reserved from the moment the
worker fetches it until it has run, so an ETA further out than this timeout runs twice (or
more) once kombu's periodic scan finds it (``PEER_RESTORE_THROTTLE``); ``bench/peers``
measures exactly that with a 10 s timeout.

Start a worker: ``celery -A bench.peers.celery_app worker --pool prefork --concurrency 2``.
"""

from __future__ import annotations

import http.client
import os
import sys
from typing import Any

from celery import Celery
from celery.signals import worker_ready

REDIS_URL = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/"
                           + os.environ.get("PEER_REDIS_DB", "5"))
VISIBILITY_TIMEOUT_S = int(os.environ.get("PEER_VISIBILITY_TIMEOUT_S", "3600"))
# kombu scans for expired reservations every unacked_restore_interval (10 s) x
# unacked_restore_throttle (10) seconds by default; its docs advise a throttle of 1 with a low
# visibility timeout. Empty: kombu's default.
RESTORE_THROTTLE = os.environ.get("PEER_RESTORE_THROTTLE", "")
RECEIVER_PORT = int(os.environ.get("BENCH_RECEIVER_PORT", "9100"))
CALLBACK_TIMEOUT_S = 10

app = Celery("bench_peers", broker=REDIS_URL)
app.conf.update(
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        **({"unacked_restore_throttle": int(RESTORE_THROTTLE)} if RESTORE_THROTTLE else {}),
    },
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    enable_utc=True,
    worker_hijack_root_logger=False,
)

READY_LINE = "bench-peer-worker-ready"


@worker_ready.connect  # type: ignore[untyped-decorator]
def _announce_ready(**_: Any) -> None:
    """The driver waits for this line: the worker then logs at WARNING (a line per task at
    INFO would cost the peer CPU our dispatcher does not spend)."""
    print(READY_LINE, file=sys.stderr, flush=True)


# One keep-alive connection per worker process, as our dispatcher keeps a pool: the peer is
# not charged a TCP handshake per callback.
_conn: http.client.HTTPConnection | None = None


def _post(path: str, trigger_id: str, body: bytes) -> int:
    global _conn
    for attempt in (1, 2):
        if _conn is None:
            _conn = http.client.HTTPConnection("127.0.0.1", RECEIVER_PORT,
                                               timeout=CALLBACK_TIMEOUT_S)
        try:
            _conn.request("POST", path, body=body, headers={
                "Content-Type": "application/json", "X-Trigger-Id": trigger_id,
                "X-Trigger-Attempt": "1"})
            resp = _conn.getresponse()
            resp.read()
            return resp.status
        except (OSError, http.client.HTTPException):
            _conn.close()  # a stale keep-alive connection: reconnect once
            _conn = None
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


# Celery's decorators are untyped; the task body is.
@app.task(name="bench.deliver", acks_late=False)  # type: ignore[untyped-decorator]
def deliver(trigger_id: str, path: str, payload: str) -> int:
    """POST ``payload`` to the receiver at ``path``; the receiver's status code."""
    return _post(path, trigger_id, payload.encode())
