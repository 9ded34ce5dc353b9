"""``OpsBoard``'s behind marks, on the in-memory fake and on Redis: what dispatchers say
they are behind on, as the due-scan reads it (``sweeper.heal``)."""

from __future__ import annotations

from trigger_service.core.ports.ops import OpsBoard

NOW_MS = 1_800_000_000_000


async def test_a_caller_is_behind_until_its_latest_mark(ops_board: OpsBoard) -> None:
    assert await ops_board.read_behind(NOW_MS) == set()
    await ops_board.mark_behind([], NOW_MS + 5_000)  # nothing to mark: nothing marked
    await ops_board.mark_behind(["orders", "billing"], NOW_MS + 5_000)
    await ops_board.mark_behind(["orders"], NOW_MS + 9_000)  # a later round
    await ops_board.mark_behind(["billing"], NOW_MS + 2_000)  # another dispatcher's, earlier
    assert await ops_board.read_behind(NOW_MS) == {"orders", "billing"}
    assert await ops_board.read_behind(NOW_MS + 4_999) == {"orders", "billing"}
    assert await ops_board.read_behind(NOW_MS + 5_000) == {"orders"}  # never shortened
    assert await ops_board.read_behind(NOW_MS + 9_000) == set()


async def test_callers_named_alike_stay_apart(ops_board: OpsBoard) -> None:
    await ops_board.mark_behind(["a|b", "a"], NOW_MS + 1_000)
    assert await ops_board.read_behind(NOW_MS) == {"a|b", "a"}
