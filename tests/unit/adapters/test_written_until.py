"""``WrittenUntil``: a small index row is written again only for an entry that must outlive
what was written (``caller_months``, ``zoned_versions``)."""

from __future__ import annotations

from trigger_service.adapters.cassandra.indexes import WrittenUntil


def test_a_row_is_written_once_while_it_lives_long_enough() -> None:
    w: WrittenUntil[str] = WrittenUntil()
    assert w.claim("k", 0, 100) == 100
    assert w.claim("k", 50_000, 50) is None  # expires at 100 s: covered
    assert w.claim("k", 50_000, 51) == 51  # must outlive it: written again
    assert w.claim("other", 0, 10) == 10


def test_a_forgotten_row_is_written_again() -> None:
    w: WrittenUntil[str] = WrittenUntil()
    assert w.claim("k", 0, 100) == 100
    w.forget("k")  # the write failed
    assert w.claim("k", 0, 100) == 100
