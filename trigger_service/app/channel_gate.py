"""A trigger's channels against its caller's recipient controls
(``config/recipient_controls.py``), at registration, edit, snooze and preview alike:

- every email recipient (``to`` and ``replyTo``) in the caller's ``email_domains``, every
  SMS number in its ``sms_country_codes``, every Telegram ``chatId`` in its
  ``telegram_chats`` and every push ``token`` in its ``push_tokens``, else 422
  ``recipient_not_allowed`` naming the channel's field;
- a trigger one occurrence of which needs more recipients of a type than the caller's whole
  ``daily_budget`` of it (an email to 50 addresses needs 50) is refused 422
  ``recipient_not_allowed`` naming the channel that passes it: it could never be sent;
- an HTML email body sanitised with nh3 (Ammonia: scripts, event-handler attributes,
  ``javascript:`` links and styles removed, ordinary formatting kept) unless the caller is
  ``trusted``; what is stored is what is sent;
- a channel type whose ``daily_budget`` has not enough left today (UTC) for one occurrence's
  recipients refuses the request 429 ``quota_exceeded`` with ``Retry-After`` to the next UTC
  day. Registration only reads the
  count; sends take from it (``dispatcher/channels/caller_policy.py``, which also checks the
  recipients again). A trigger registered while budget is left may still find it spent when
  it fires: that channel is then dead-lettered ``budget_exhausted``.

A registration checks the budgets as it counts and writes (``TriggerService.register``),
after its idempotency key is looked at: a keyed retry of a registration made while budget was
left gets its trigger (a replay), never 429, once the budget is spent.

When Redis fails the budget is not checked (fail open, like the other limits) and
``budget_errors_total`` counts it; each send still takes from the budget.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from trigger_service.config.callers import Caller
from trigger_service.core.errors import CacheError, QuotaExceeded, RecipientNotAllowed
from trigger_service.core.notify.channels import ChannelType, has_address, recipient_count
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.limit import SendBudget, seconds_to_next_day, utc_day

log = structlog.get_logger(__name__)


def vet_recipients(caller: Caller, plan: DeliveryPlan) -> DeliveryPlan:
    """``plan`` with its HTML sanitised (unless the caller is trusted), once every recipient
    is allowed. Pure. Raises ``RecipientNotAllowed``."""
    policy = caller.recipients
    for i, spec in enumerate(plan.channels):
        # A channel whose address is its recipient's: that address was checked when the
        # profile was put, and is checked again at send time (``caller_policy``).
        refused = policy.spec_refusal(spec) if has_address(spec) else None
        if refused is not None:
            field = f"channels[{i}].{refused[0]}"
            raise RecipientNotAllowed(f"{field}: {refused[1]}", field=field)
    too_many = policy.budget_refusal(plan.channels)
    if too_many is not None:
        field = f"channels[{too_many[0]}]"
        raise RecipientNotAllowed(f"{field}: {too_many[1]}", field=field)
    channels = tuple(policy.prepared(spec) for spec in plan.channels)
    return plan if channels == plan.channels else replace(plan, channels=channels)


class ChannelGate:
    def __init__(self, budget: SendBudget | None, clock: Clock, metrics: Metrics) -> None:
        """``budget``: the shared send counts (None: daily budgets are not checked here)."""
        self._budget = budget
        self._clock = clock
        self._metrics = metrics

    async def vet(self, caller: Caller, plan: DeliveryPlan | None, *,
                  budgets: bool = True) -> DeliveryPlan | None:
        """``plan`` as it may be stored for ``caller`` (``vet_recipients``), once no channel's
        budget is spent today (unless ``budgets`` is False: a registration checks them as it
        writes, after its key's replay). Raises ``RecipientNotAllowed`` or
        ``QuotaExceeded``."""
        if plan is None:
            return None
        plan = vet_recipients(caller, plan)
        if budgets:
            await self.check_budgets(caller, plan)
        return plan

    async def check_budgets(self, caller: Caller, plan: DeliveryPlan | None) -> None:
        """Raise ``QuotaExceeded`` (``Retry-After``: the next UTC day) when a channel type of
        ``plan`` has not enough of ``caller``'s daily budget left for one occurrence's
        recipients; Redis down: nothing is checked."""
        if self._budget is None or plan is None:
            return
        now_ms = self._clock.now_ms()
        need: dict[ChannelType, int] = {}
        for spec in plan.channels:
            need[spec.type] = need.get(spec.type, 0) + recipient_count(spec)
        for kind, count in need.items():
            limit = caller.recipients.budget_of(kind)
            if limit is None:
                continue
            try:
                spent = await self._budget.spent(caller.name, kind.value, utc_day(now_ms))
            except CacheError as e:
                self._metrics.inc("budget_errors_total")
                log.warning("budget_unavailable", caller=caller.name, error=str(e))
                return
            if spent + count > limit:
                self._metrics.inc("budget_exhausted_total", caller=caller.name,
                                  type=kind.value)
                raise QuotaExceeded(f"the daily {kind.value} budget of caller {caller.name} "
                                    f"({limit} recipients) has not {count} left until the "
                                    "next UTC day",
                                    retry_after_s=seconds_to_next_day(now_ms))
