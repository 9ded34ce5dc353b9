"""``core.coalescing.TurnCoalescer``: the calls of one turn of the loop go out together (at
most ``max_batch`` a send), each caller gets its own result or error, and a failed send is
every caller's of that batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from trigger_service.core.coalescing import TurnCoalescer


class Echo:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    async def send(self, items: list[int]) -> Sequence[int | Exception]:
        self.batches.append(items)
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


async def test_one_turn_is_one_send_up_to_the_batch_size_and_errors_are_per_item() -> None:
    echo = Echo()
    coalescer: TurnCoalescer[int, int] = TurnCoalescer(echo.send, max_batch=3)
    got = await asyncio.gather(*(coalescer.run(i) for i in range(5)), return_exceptions=True)
    assert echo.batches == [[0, 1, 2], [3, 4]]
    assert got[0] == 0 and got[2] == 20 and got[4] == 40
    assert isinstance(got[1], ValueError) and str(got[3]) == "odd 3"
    assert await coalescer.run(8) == 80  # a lone call: a batch of its own, next turn
    assert echo.batches[-1] == [8]


async def test_a_failed_send_is_every_callers_error() -> None:
    async def down(items: list[int]) -> Sequence[int | Exception]:
        raise ConnectionError("lost")

    coalescer: TurnCoalescer[int, int] = TurnCoalescer(down, max_batch=10)
    got = await asyncio.gather(coalescer.run(1), coalescer.run(2), return_exceptions=True)
    assert all(isinstance(e, ConnectionError) for e in got)
    with pytest.raises(ConnectionError):
        await coalescer.run(3)
