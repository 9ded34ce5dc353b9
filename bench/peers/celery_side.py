"""Celery's side of ``make bench-peers``: start and stop a worker, publish ETA tasks, empty the
peer's Redis db. The lag is measured on the same receiver as ours (``bench/receiver.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import redis

from bench.common import ROOT
from bench.cpu import TICKS_PER_S, cpu_ticks
from bench.peers.celery_app import READY_LINE, REDIS_URL, deliver

CELERY = ROOT / ".venv" / "bin" / "celery"
LOG = ROOT / "var" / "log" / "celery-peer.log"
DEFAULT_CONCURRENCY = 2  # prefork processes: one per core of this 2-core machine


def flush_peer_db() -> None:
    """``FLUSHDB`` on the peer's own Redis db only (never the service's db 0)."""
    redis.Redis.from_url(REDIS_URL).flushdb()


@contextlib.contextmanager
def worker(concurrency: int, visibility_timeout_s: int | None = None,
           restore_throttle: int | None = None) -> Iterator[int]:
    """A Celery worker (prefork pool, ``concurrency`` processes) for the ``with`` block; yields
    its pid once it logged ``ready``. Stopped with SIGTERM (warm shutdown), then SIGKILL."""
    env = dict(os.environ)
    if visibility_timeout_s is not None:
        env["PEER_VISIBILITY_TIMEOUT_S"] = str(visibility_timeout_s)
    if restore_throttle is not None:
        env["PEER_RESTORE_THROTTLE"] = str(restore_throttle)
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("ab") as log:
        start = LOG.stat().st_size
        # Gossip, mingle and heartbeats talk to other workers: there are none.
        proc = subprocess.Popen(
            [str(CELERY), "-A", "bench.peers.celery_app", "worker", "--pool", "prefork",
             "--concurrency", str(concurrency), "--loglevel", "WARNING", "--without-gossip",
             "--without-mingle", "--without-heartbeat", "-n", f"peer-{os.getpid()}@%h"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_ready(proc, start)
        yield proc.pid
    finally:
        _stop(proc)


def _wait_ready(proc: subprocess.Popen[bytes], log_offset: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the celery worker exited ({proc.returncode}); see {LOG}")
        with LOG.open("rb") as f:
            f.seek(log_offset)
            if READY_LINE.encode() in f.read():
                return
        time.sleep(0.2)
    raise RuntimeError(f"the celery worker was not ready after {timeout_s} s; see {LOG}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only the worker's processes
        proc.wait(10)


def publish(due_ms: dict[str, int]) -> float:
    """One ETA task per id (``eta`` = its due time), from this process, one after the other;
    returns the seconds taken."""
    t0 = time.perf_counter()
    with deliver.app.producer_or_acquire() as producer:
        for i, (tid, ms) in enumerate(due_ms.items()):
            deliver.apply_async(
                (tid, f"/cb/{i}", f'{{"i": {i}}}'),
                eta=datetime.fromtimestamp(ms / 1000, tz=UTC), producer=producer)
    return time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live children (the pool) so far."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return sum(cpu_ticks(p) or 0 for p in pids) / TICKS_PER_S
