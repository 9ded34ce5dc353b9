"""``adapters.cassandra.coalescing``: coalesced writes share requests, at most
``COALESCE_MAX_BYTES`` of values each, so a batch of big rows never nears Cassandra's batch
limit; a request that fails fails only its own submissions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from trigger_service.adapters.cassandra import coalescing
from trigger_service.adapters.cassandra.coalescing import (
    by_size,
    write_batcher,
    written_bytes,
)
from trigger_service.adapters.cassandra.driver import Row, Write
from trigger_service.core.errors import StoreError
from trigger_service.core.time.clock import SystemClock

pytestmark = pytest.mark.timeout(10)  # the batcher lingers 2 ms of the system clock


class Recording:
    """``driver.Statements`` that records each unlogged batch; one naming ``bad`` fails."""

    def __init__(self) -> None:
        self.requests: list[list[Write]] = []

    async def run(self, name: str, params: Sequence[Any]) -> list[Row]:
        raise AssertionError("not used")

    def pages(self, name: str, params: Sequence[Any], page_size: int | None = None
              ) -> AsyncIterator[list[Row]]:
        raise AssertionError("not used")

    async def run_unlogged(self, writes: Sequence[Write]) -> None:
        self.requests.append(list(writes))
        await asyncio.sleep(0)
        if any(name == "bad" for name, _ in writes):
            raise StoreError("refused")

    async def run_conditional(self, writes: Sequence[Write]) -> list[Row]:
        raise AssertionError("not used")


def row(n_bytes: int, name: str = "row") -> list[Write]:
    return [(name, ["trg_1", "x" * n_bytes, b"\0" * 8, 7])]


def test_the_size_counts_text_bytes_collections_and_the_rest() -> None:
    assert written_bytes(["abc", b"12345", {"k": "vv"}, ["a", "bb"], 9]) == 32 + 3 + 5 + 3 + 3 + 16
    assert written_bytes(["é"]) == 32 + 2  # UTF-8


def test_requests_are_cut_by_size_in_order_and_one_big_submission_goes_alone() -> None:
    small, big = row(1000), row(30_000)
    assert by_size([small] * 5, 24 * 1024) == [[0, 1, 2, 3, 4]]
    parts = by_size([row(10_000)] * 5, 24 * 1024)
    assert parts == [[0, 1], [2, 3], [4]]
    assert by_size([small, big, small], 24 * 1024) == [[0], [1], [2]]


async def test_a_batch_of_big_rows_goes_as_several_requests_each_under_the_bound() -> None:
    cql = Recording()
    writes = write_batcher(cql, SystemClock(), waited=True)
    n = coalescing.WAITED_SUBMISSIONS
    await asyncio.gather(*(writes.submit(row(4096)) for _ in range(n)))
    assert sum(len(r) for r in cql.requests) == n
    assert len(cql.requests) > 2  # the first alone (the batcher was idle), then cut by size
    for request in cql.requests:
        assert sum(written_bytes(v) for _, v in request) <= coalescing.COALESCE_MAX_BYTES


async def test_a_failed_request_fails_its_own_submissions_only() -> None:
    cql = Recording()
    writes = write_batcher(cql, SystemClock())
    first = asyncio.ensure_future(writes.submit(row(10)))  # goes alone: the batcher was idle
    rest = [row(10_000), row(10_000), row(10_000, "bad"), row(10_000)]
    outcomes = await writes.submit_many(rest)
    await first
    assert [type(o) for o in outcomes] == [type(None), type(None), StoreError, StoreError]
    assert len(cql.requests) == 3


@pytest.mark.parametrize("n", [1, 7])
async def test_small_submissions_share_one_request(n: int) -> None:
    cql = Recording()
    writes = write_batcher(cql, SystemClock())
    await writes.submit_many([row(100) for _ in range(n)])
    assert len(cql.requests) == 1 and len(cql.requests[0]) == n
