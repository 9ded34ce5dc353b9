from __future__ import annotations

import asyncio
from collections.abc import Sequence

from trigger_service.adapters.batching import Batcher


async def test_batcher_groups_concurrent_items_and_reports_errors() -> None:
    batches: list[list[int]] = []

    async def flush(items: Sequence[int]) -> None:
        batches.append(list(items))
        if 13 in items:
            raise RuntimeError("boom")

    b: Batcher[int] = Batcher(flush, max_batch=10, linger_s=0.01)
    results = await asyncio.gather(*(b.submit(i) for i in range(25)), return_exceptions=True)
    assert sorted(x for batch in batches for x in batch) == list(range(25))
    assert all(len(batch) <= 10 for batch in batches) and len(batches) == 3
    failed = {i for i, r in enumerate(results) if isinstance(r, RuntimeError)}
    bad_batch = next(batch for batch in batches if 13 in batch)
    assert failed == set(bad_batch)
    await b.drain()
