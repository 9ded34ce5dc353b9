"""Packs (``adapters.sqs_packs``): which messages travel together, what a pack's body
carries, and the book of what became of each member received."""

from __future__ import annotations

import json

from trigger_service.adapters.sqs_packs import (
    PackBook,
    member_receipt,
    pack_body,
    pack_members,
    packs_of,
    split_member,
)
from trigger_service.core.ports.values import OutgoingMessage


def _m(i: int, delay_s: int = 0) -> OutgoingMessage:
    return OutgoingMessage(f"trg_{i}", 1_000 + i, delay_s, 5_000, i % 3, f"c{i % 2}")


def test_messages_of_one_delay_pack_together_in_order_at_most_pack_max() -> None:
    ms = [_m(0, 5), _m(1, 0), _m(2, 5), _m(3, 5), _m(4, 0), _m(5, 2_000)]
    assert packs_of(ms, 2) == [[0, 2], [3], [1, 4], [5]]
    assert packs_of(ms, 1) == [[i] for i in (0, 2, 3, 1, 4, 5)]
    # A delay past SQS's maximum is sent as the maximum: one pack with those at 900.
    assert packs_of([_m(0, 900), _m(1, 2_000)], 10) == [[0, 1]]


def test_a_pack_body_carries_each_members_id_times_and_caller() -> None:
    ms = [_m(0), OutgoingMessage("trg_x", 7, 0)]
    got = pack_members(json.loads(pack_body(ms)))
    assert got is not None
    assert [(m.trigger_id, m.fire_at_ms, m.home_at_ms, m.shard, m.caller) for m in got] == [
        ("trg_0", 1_000, 5_000, 0, "c0"), ("trg_x", 7, None, None, None)]
    assert pack_members({"triggerId": "trg_1", "fireAtMs": 1}) is None
    broken = pack_members({"pack": [["trg_1", "soon", None, None, None], "?"]})
    assert broken is not None and [m.trigger_id for m in broken] == ["", ""]


def test_member_receipts_name_their_index_and_the_packs_receipt() -> None:
    assert split_member(member_receipt(12, "~3~AQEBabc")) == (12, "~3~AQEBabc")
    assert split_member("~3~AQEBabc") is None


def test_the_pack_is_deleted_by_its_latest_receipt_when_its_last_member_leaves() -> None:
    book = PackBook()
    ms = [_m(i) for i in range(3)]
    first = book.received("msg1", "r1", ms, 1, 30_000)
    assert [m.message_id for m in first] == ["msg1^0", "msg1^1", "msg1^2"]
    assert book.let_go("r1", 0) is None
    assert book.has_left("r1", 0) and not book.has_left("r1", 1)
    # Received again (its visibility ran out while two were in hand): the one that left is
    # not handed out again; the two in hand are, and leave by their first receipt.
    again = book.received("msg1", "r2", ms, 2, 60_000)
    assert [m.trigger_id for m in again] == ["trg_1", "trg_2"]
    assert book.in_hand("r1") == {1, 2} and book.latest("r1") == "r2"
    assert book.let_go("r1", 1) is None
    assert book.let_go("r2", 2) == "r2"
    assert len(book) == 0 and book.let_go("r1", 2) is None


def test_an_extension_is_asked_once_for_the_members_that_ask_no_later() -> None:
    book = PackBook()
    book.received("msg1", "r1", [_m(0), _m(1)], 1, 30_000)
    assert not book.extend("r1", 20_000)  # hidden that long already
    assert book.extend("r1", 40_000)
    assert not book.extend("r1", 39_000)
    assert book.extend("unknown", 1)  # not in the book: ask SQS


def test_packs_long_past_their_hiding_are_forgotten_once_the_book_is_large() -> None:
    book = PackBook()
    for i in range(1024):  # hidden until 0: long past by the next receive
        book.received(f"old{i}", f"r{i}", [_m(0)], 1, 0)
    book.received("new", "rn", [_m(1)], 1, 20 * 60_000)
    assert len(book) == 1 and book.in_hand("rn") == {0}
