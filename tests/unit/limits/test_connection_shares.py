"""``ConnectionShares``, the policy behind the API's connection slots, as a pure object on a
manual clock: the cap, the longest-idle slot taken under pressure, a caller's share, and
the short life of anonymous idle connections."""

from __future__ import annotations

from trigger_service.config.limits import LimitSettings
from trigger_service.core.time.clock import ManualClock
from trigger_service.http.connections import Admission, ConnectionShares


def shares(max_connections: int = 4, per_caller: int = 2,
           anonymous_idle_ms: int = 5_000) -> tuple[ConnectionShares[str], ManualClock]:
    clock = ManualClock()
    return ConnectionShares(max_connections, per_caller, anonymous_idle_ms, clock), clock


def kept_alive(s: ConnectionShares[str], clock: ManualClock, conn: str,
               owner: str | None = None) -> None:
    """``conn`` opened, answered one request (of ``owner``, if any), now idle."""
    assert s.open(conn).admitted
    s.started(conn)
    if owner is not None:
        assert s.claim(conn, owner)
    s.finished(conn)
    clock.advance_ms(10)


def test_fresh_and_busy_connections_fill_the_cap_and_one_more_is_refused() -> None:
    s, _ = shares()
    assert [s.open(c) for c in "abcd"] == [Admission(True)] * 4
    s.started("a")  # busy: a request in progress
    assert s.open("e") == Admission(False)
    assert len(s) == 4
    s.closed("b")
    assert s.open("e") == Admission(True)


def test_at_the_cap_the_connection_idle_the_longest_gives_up_its_slot() -> None:
    s, clock = shares()
    for c in "abcd":
        kept_alive(s, clock, c, "A" if c in "ab" else "B")
    s.started("a")  # "a" is used again: now "b" has been idle the longest
    s.finished("a")
    assert s.open("e") == Admission(True, "b")
    assert s.open("f") == Admission(True, "c")
    assert (len(s), s.held("A"), s.held("B")) == (4, 1, 1)
    s.closed("b")  # the evicted connection's own close later changes nothing
    assert (len(s), s.held("A")) == (4, 1)


def test_a_busy_connection_is_never_taken_even_when_it_went_idle_before() -> None:
    s, clock = shares(max_connections=2)
    kept_alive(s, clock, "a", "A")
    kept_alive(s, clock, "b", "B")
    s.started("a")  # a stream, say: busy for a long time
    assert s.open("c") == Admission(True, "b")
    assert s.open("d") == Admission(False)  # "a" busy, "c" fresh: nothing to take


def test_a_caller_at_its_share_is_refused_on_another_connection_while_others_get_in() -> None:
    s, clock = shares(max_connections=6, per_caller=2)
    kept_alive(s, clock, "a1", "A")
    kept_alive(s, clock, "a2", "A")
    assert s.open("a3").admitted
    s.started("a3")
    assert not s.claim("a3", "A")  # over its share: refused, still nobody's
    assert s.owner("a3") is None and s.held("A") == 2
    assert s.claim("a1", "A")  # on its own connections it goes on
    assert s.claim("a3", "B")  # another caller gets in on the same slot
    assert (s.held("A"), s.held("B")) == (2, 1)
    s.closed("a2")
    assert s.open("a4").admitted and s.claim("a4", "A")  # a place of its own again


def test_a_connection_counts_against_whoever_used_it_last() -> None:
    s, clock = shares(per_caller=1)
    kept_alive(s, clock, "x", "A")
    s.started("x")
    assert s.claim("x", "B")  # a proxy's connection, say: B's request on A's connection
    assert (s.held("A"), s.held("B"), s.owner("x")) == (0, 1, "B")
    assert s.open("y").admitted and s.claim("y", "A")
    assert not s.claim("y", "B")  # B holds its one on "x": "y" stays A's
    assert (s.held("A"), s.owner("y")) == (1, "A")


def test_an_uncapped_principal_is_counted_but_never_refused() -> None:
    s, _ = shares(per_caller=1)
    for c in ("o1", "o2", "o3"):
        assert s.open(c).admitted
        assert s.claim(c, "ops:alice", capped=False)
    assert s.held("ops:alice") == 3
    s.closed("o1")
    assert s.held("ops:alice") == 2


def test_only_anonymous_idle_connections_expire_after_their_short_idle_time() -> None:
    s, clock = shares(anonymous_idle_ms=1_000)
    kept_alive(s, clock, "anon")
    kept_alive(s, clock, "mine", "A")
    assert s.open("fresh").admitted
    clock.advance_ms(970)
    assert not s.idle_expired("anon")  # idle 990 ms (20 of them while "mine" was used)
    clock.advance_ms(10)
    assert s.idle_expired("anon")
    assert not s.idle_expired("mine") and not s.idle_expired("fresh")
    s.started("anon")  # used again: busy, then idle afresh
    assert not s.idle_expired("anon")
    s.finished("anon")
    assert not s.idle_expired("anon")
    clock.advance_ms(1_000)
    assert s.idle_expired("anon")
    s.closed("anon")
    assert not s.idle_expired("anon")


def test_a_callers_share_is_a_fraction_of_the_process_cap_and_at_least_one() -> None:
    assert LimitSettings().connections_per_caller == 500  # a quarter of 2,000
    assert LimitSettings(max_connections=60,
                         caller_connection_share=0.5).connections_per_caller == 30
    assert LimitSettings(max_connections=3).connections_per_caller == 1
