"""A caller's recipient controls at send time (``config/recipient_controls.py``): a
``Notifiers`` that checks each channel against its caller's policy before handing it on.

- Recipients are checked again (email and SMS addresses, Telegram chats, push tokens): the
  callers file may have changed since registration, a recipient's profile gives its address
  only now, and triggers stored before the controls existed were never checked. A refused
  one is not sent: a permanent outcome with the provider code ``recipient_not_allowed``.
- An untrusted caller's HTML is sanitised again (idempotent for what registration stored).
- The send's recipients (``recipient_count``: an email's ``to`` addresses, else one) are
  taken from the caller's ``daily_budget`` of the channel's type, all or none, counted in the
  shared ``SendBudget`` per caller, channel type and UTC day. Every attempt counts, a retry
  too: the budget caps what the providers bill. A send past the budget is not made: its
  outcome is permanent with the provider code ``budget_exhausted``, so that channel fails
  (the occurrence's other channels go on) and the occurrence is dead-lettered
  ``budget_exhausted`` (``dispatcher/fanout.py``). When Redis fails the send goes out (fail
  open, like the other limits) and ``budget_errors_total`` counts it.

A caller no longer in the callers file has no recipients at all.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from dispatcher.fanout import BUDGET_EXHAUSTED, Notifiers
from trigger_service.config.live_callers import Callers
from trigger_service.config.recipient_controls import NO_RECIPIENTS, RecipientPolicy
from trigger_service.core.errors import CacheError
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    OccurrenceNotice,
    recipient_count,
)
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.limit import SendBudget, utc_day

log = structlog.get_logger("dispatcher")

RECIPIENT_NOT_ALLOWED = "recipient_not_allowed"  # the outcome's provider code


def policies_of(callers: Callers) -> Callable[[str], RecipientPolicy]:
    """A caller's recipient controls from the callers file (none for an unknown caller)."""
    def of(caller: str) -> RecipientPolicy:
        c = callers.by_name(caller)
        return c.recipients if c is not None else NO_RECIPIENTS
    return of


class CallerPolicyNotifiers:
    """Wraps ``inner`` (which it does not open nor close)."""

    def __init__(self, inner: Notifiers, policy_of: Callable[[str], RecipientPolicy],
                 budget: SendBudget, clock: Clock, metrics: Metrics) -> None:
        self._inner = inner
        self._policy_of = policy_of
        self._budget = budget
        self._clock = clock
        self._metrics = metrics

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        """``inner``'s outcome, or a permanent ``recipient_not_allowed`` or
        ``budget_exhausted`` one without sending."""
        policy = self._policy_of(occ.caller)
        refused = policy.spec_refusal(spec)
        if refused is not None:
            self._metrics.inc("recipient_refused_total", type=spec.type.value)
            return ChannelOutcome(False, permanent=True, provider_code=RECIPIENT_NOT_ALLOWED,
                                  error=f"{refused[0]}: {refused[1]}; not sent")
        limit = policy.budget_of(spec.type)
        if limit is not None and not await self._take(occ.caller, spec, limit):
            self._metrics.inc("budget_exhausted_total", caller=occ.caller,
                              type=spec.type.value)
            return ChannelOutcome(False, permanent=True, provider_code=BUDGET_EXHAUSTED,
                                  error=f"the daily {spec.type.value} budget of caller "
                                        f"{occ.caller} ({limit} recipients) has not "
                                        f"{recipient_count(spec)} left; not sent")
        return await self._inner.send(policy.prepared(spec), occ)

    async def _take(self, caller: str, spec: ChannelSpec, limit: int) -> bool:
        try:
            return await self._budget.take(caller, spec.type.value,
                                           utc_day(self._clock.now_ms()), limit,
                                           recipient_count(spec))
        except CacheError as e:
            self._metrics.inc("budget_errors_total")
            log.warning("budget_unavailable", caller=caller, error=str(e))
            return True
