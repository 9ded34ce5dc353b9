"""A claim kept fresh while its send waits for flow control's admission (``flow_control``).

A claim goes stale a callback timeout (and a slack) after its time; a send that a full key
keeps waiting long past its slot would otherwise be taken over by another dispatcher (a
duplicate send, and the takeover's LWT on a busy store: a death spiral under a herd). Once
less than ``MIN_SEND_TIMEOUT_MS`` and ``KEEP_AHEAD_MS`` is left, the claim is renewed (a new
claim id and time, as the send itself renews a late one) and the message kept hidden."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from dispatcher.finishing import DispatchStore
from dispatcher.visibility import Visibility
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import CLAIM_STALE_SLACK_MS, Status, Trigger
from trigger_service.core.ports import Clock, Metrics, ReceivedMessage

log = structlog.get_logger("dispatcher")

# More than ``flow_control.KEEP_EVERY_MS``: a renewal is never a keep too late.
KEEP_AHEAD_MS = 1_500


@dataclass(slots=True)
class KeptClaim:
    """A claim as kept fresh: its latest row, until when its message stays hidden, and
    whether it was lost (taken over: the send is then not made)."""

    claimed: Trigger
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

    def left_ms(self, claimed: Trigger) -> int:
        """How long a send of ``claimed`` may still take before its claim could go stale
        (half the slack kept for clock skew)."""
        return (claimed.claim_stale_at_ms(self.callback_timeout_ms)
                - CLAIM_STALE_SLACK_MS // 2 - self.clock.now_ms())

    async def renew(self, claimed: Trigger) -> Trigger | None:
        """The claim renewed (a new claim id and time, so a taker who read the old one
        cannot apply); None when it was lost meanwhile. Raises ``AdapterError``."""
        renewed = replace(claimed, status=Status.IN_FLIGHT, claim_id=self.new_claim_id(),
                                      claimed_at_ms=self.clock.now_ms())
        if not await self.store.compare_and_set(claimed, renewed):
            return None
        self.metrics.inc("claim_renewals_total")
        return renewed

    async def keep(self, m: ReceivedMessage, kept: KeptClaim) -> None:
        """Renew ``kept``'s claim if it has little time left (else nothing)."""
        claimed = kept.claimed
        if kept.lost or self.left_ms(claimed) > self.min_send_timeout_ms + KEEP_AHEAD_MS:
            return
        try:
            renewed = await self.renew(claimed)
            if renewed is None:
                kept.lost = True
                return
            kept.claimed = renewed
            if kept.hidden_until_ms is not None:
                kept.hidden_until_ms = await self.visibility.keep_hidden(
                    m, kept.hidden_until_ms, renewed.claimed_at_ms or 0)
        except AdapterError as e:  # tried again at the next keep (or at the send)
            log.warning("claim_keep_failed", trigger_id=claimed.trigger_id, error=str(e))
