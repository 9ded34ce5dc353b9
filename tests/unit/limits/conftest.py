"""The ``worker`` fixture: a costly pool of the test's own, its worker up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trigger_service.app import costly_pool


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A fresh ``WorkerPool`` in place of the process's, its worker started and warm (its
    pid); shut down after the test."""
    pool = costly_pool.WorkerPool()
    monkeypatch.setattr(costly_pool, "_POOL", pool)
    started = pool.starting()
    assert started is not None
    try:
        yield started.result(timeout=60)
    finally:
        pool.shutdown()
