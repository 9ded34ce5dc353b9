"""A claim's lease, the fence it makes around every send, and takeovers that need no clock.

A send goes out only while its claim is the row's claim, decided without comparing one
host's clock with another's:

- the claimer reads its monotonic clock just before it issues the claim's LWT and writes the
  claim with a lease, a duration (``Trigger.claim_lease_ms``): the longest it may be
  sending, counted from that reading (``ClaimKeeper.take``). Every wait before a send (flow
  control, the bulkhead, keeping the message hidden, a recipient's profile) comes before
  the fence's check; the check is the last thing before the channel's send, and that send
  (the signing secrets' read included) is bounded to end with the lease
  (``ClaimKeeper.left_ms``). With too little left the claim is renewed (a new claim id and
  lease: a taker who watched the old one cannot apply) or nothing is sent;
- a taker takes an IN_FLIGHT row over only after it has itself seen the same claim id on
  the row for the claim's lease and ``TAKEOVER_MARGIN_MS``, on its own monotonic clock
  (``Sightings``). Its first sighting read a row the claim's LWT had written, so it came
  after the claimer's reading: the lease ran out on the claimer's side first, and the
  claimer's send had ended before the takeover's LWT was issued. A cancel that applies
  after the takeover (or after the taker put the row back to PENDING) is never followed by
  the first claimer's send.

Only the rate of the two monotonic clocks is trusted (the margin covers their drift over a
lease), never their offset; wall clocks only choose when to look again
(``Trigger.claim_stale_at_ms``).

While a send waits for flow control's admission (``flow_control``) its claim is kept fresh
(``ClaimKeeper.keep``): once less than ``MIN_SEND_TIMEOUT_MS`` and ``KEEP_AHEAD_MS`` is
left, the claim is renewed and the message kept hidden, so a send that starts long after its
claim is not taken over meanwhile (a duplicate send, and the takeover's LWT on a busy store:
a death spiral under a herd)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from dispatcher.finishing import DispatchStore
from dispatcher.visibility import Visibility
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import CLAIM_STALE_SLACK_MS, Status, Trigger
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.values import ReceivedMessage

log = structlog.get_logger("dispatcher")

# More than ``flow_control.KEEP_EVERY_MS``: a renewal is never a keep too late.
KEEP_AHEAD_MS = 1_500
# A lease is the wait until the send's start, a callback timeout, and this: the claim's LWT
# and the short steps between the claim and the send.
LEASE_SLACK_MS = CLAIM_STALE_SLACK_MS
# How much longer than a claim's lease a taker watches it: the drift of two monotonic
# clocks over a lease (NTP slews at most 500 ppm: a few ms), the steps between the fence's
# check and the request leaving (no waits: CPU only), and the kernel flushing the request.
TAKEOVER_MARGIN_MS = 1_000
# Claims a dispatcher remembers seeing; past this the oldest sighting is forgotten (its
# takeover then only waits longer: a sighting restarts).
MAX_SIGHTINGS = 100_000


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim this process holds: the row as claimed, and the time on this process's
    monotonic clock by which every send under it has ended (its lease's end)."""

    trigger: Trigger
    ends_mono_ms: int


@dataclass(slots=True)
class KeptClaim:
    """A claim as kept fresh: its latest state, until when its message stays hidden, and
    whether it was lost (taken over: the send is then not made)."""

    claim: Claim
    hidden_until_ms: int | None
    lost: bool = False


@dataclass(frozen=True, slots=True)
class ClaimKeeper:
    store: DispatchStore
    visibility: Visibility
    clock: Clock
    metrics: Metrics
    new_claim_id: Callable[[], str]
    callback_timeout_ms: int
    min_send_timeout_ms: int

    def lease_ms(self, claimed: Trigger) -> int:
        """The lease a claim of ``claimed`` needs: until its send's start (its
        ``claimed_at_ms``, or the due time if later), a callback timeout, and
        ``LEASE_SLACK_MS``. The start is a wall time, but only this host's: its distance
        from this host's now is a duration."""
        start_ms = max(claimed.claimed_at_ms or 0, claimed.due_at_ms())
        return (max(0, start_ms - self.clock.now_ms()) + self.callback_timeout_ms
                + LEASE_SLACK_MS)

    async def take(self, old: Trigger, claimed: Trigger) -> Claim | None:
        """Write the claim ``claimed`` (IN_FLIGHT, a new claim id) over ``old`` with its
        lease (``lease_ms``); None if the LWT did not apply. The lease is counted from
        before the LWT is issued: any time the LWT takes is the claimer's loss, never a
        taker's. Raises ``AdapterError`` (the claim may then have applied: a taker waits
        for its lease)."""
        leased = replace(claimed, claim_lease_ms=self.lease_ms(claimed))
        assert leased.claim_lease_ms is not None
        from_mono_ms = self.clock.monotonic_ms()
        if not await self.store.compare_and_set(old, leased):
            return None
        return Claim(leased, from_mono_ms + leased.claim_lease_ms)

    def left_ms(self, claim: Claim) -> int:
        """How long a send under ``claim`` may still take (negative: its lease is over)."""
        return claim.ends_mono_ms - self.clock.monotonic_ms()

    async def renew(self, claim: Claim) -> Claim | None:
        """The claim renewed, its send starting now (a new claim id and lease, so a taker
        who watched the old one cannot apply); None when it was lost meanwhile. Raises
        ``AdapterError``."""
        renewed = await self.take(claim.trigger, replace(
            claim.trigger, status=Status.IN_FLIGHT, claim_id=self.new_claim_id(),
            claimed_at_ms=self.clock.now_ms()))
        if renewed is not None:
            self.metrics.inc("claim_renewals_total")
        return renewed

    async def keep(self, m: ReceivedMessage, kept: KeptClaim) -> None:
        """Renew ``kept``'s claim if it has little time left (else nothing)."""
        claim = kept.claim
        if kept.lost or self.left_ms(claim) > self.min_send_timeout_ms + KEEP_AHEAD_MS:
            return
        try:
            renewed = await self.renew(claim)
            if renewed is None:
                kept.lost = True
                return
            kept.claim = renewed
            if kept.hidden_until_ms is not None:
                kept.hidden_until_ms = await self.visibility.keep_hidden(
                    m, kept.hidden_until_ms, renewed.trigger.claimed_at_ms or 0)
        except AdapterError as e:  # tried again at the next keep (or at the send)
            log.warning("claim_keep_failed", trigger_id=claim.trigger.trigger_id,
                        error=str(e))


class Sightings:
    """The IN_FLIGHT claims this dispatcher has seen on rows it read, and since when (its
    monotonic clock): a takeover waits until the same claim has been seen for its lease and
    ``TAKEOVER_MARGIN_MS``. In memory: a restarted dispatcher starts watching afresh (a
    takeover only comes later)."""

    def __init__(self, clock: Clock, max_sightings: int = MAX_SIGHTINGS) -> None:
        self._clock = clock
        self._max = max_sightings
        self._seen: dict[str, tuple[str | None, int]] = {}  # trigger id → (claim id, since)

    def wait_ms(self, t: Trigger, lease_ms: int) -> int:
        """How much longer ``t``'s claim must be watched before it may be taken over (0:
        now). ``t`` must have been read before this call: the call counts as seeing it (a
        claim id not seen before starts a sighting)."""
        now_ms = self._clock.monotonic_ms()
        seen = self._seen.get(t.trigger_id)
        if seen is None or seen[0] != t.claim_id:
            if seen is None and len(self._seen) >= self._max:
                # Forgetting a sighting only makes its takeover later, never earlier.
                del self._seen[next(iter(self._seen))]
            self._seen[t.trigger_id] = (t.claim_id, now_ms)
            seen = (t.claim_id, now_ms)
        return max(0, seen[1] + lease_ms + TAKEOVER_MARGIN_MS - now_ms)

    def forget(self, trigger_id: str) -> None:
        """The row is no longer in someone else's claim (we took it, or it moved on)."""
        self._seen.pop(trigger_id, None)

    def __len__(self) -> int:
        return len(self._seen)
