"""Daily send budgets at send time (issue 25): a ``Notifiers`` that takes one send from the
caller's ``daily_budget`` of the channel's type (``config/recipients.py``) before handing the
channel on, counted in the shared ``SendBudget`` per caller, channel type and UTC day.

Every attempt counts, a retry too: the budget caps what the providers bill. A send past the
budget is not made: its outcome is permanent with the provider code ``budget_exhausted``, so
that channel fails (the occurrence's other channels go on) and, if it is the only kind of
failure, the occurrence is dead-lettered ``budget_exhausted`` (``dispatcher/fanout.py``).
When Redis fails the send goes out (fail open, like the other limits) and
``budget_errors_total`` counts it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from dispatcher.fanout import BUDGET_EXHAUSTED, Notifiers
from trigger_service.config.callers import CallerRegistry
from trigger_service.core.channels import ChannelOutcome, ChannelSpec, ChannelType, Occurrence
from trigger_service.core.errors import CacheError
from trigger_service.core.limit_ports import SendBudget, utc_day
from trigger_service.core.ports import Clock, Metrics

log = structlog.get_logger("dispatcher")


def budgets_of(callers: CallerRegistry) -> Callable[[str, ChannelType], int | None]:
    """A caller's daily budget of a channel type, from the callers file (None: none)."""
    def of(caller: str, kind: ChannelType) -> int | None:
        c = callers.by_name(caller)
        return c.recipients.budget_of(kind) if c is not None else None
    return of


class BudgetedNotifiers:
    """Wraps ``inner`` (which it does not open nor close)."""

    def __init__(self, inner: Notifiers, budget_of: Callable[[str, ChannelType], int | None],
                 budget: SendBudget, clock: Clock, metrics: Metrics) -> None:
        self._inner = inner
        self._budget_of = budget_of
        self._budget = budget
        self._clock = clock
        self._metrics = metrics

    async def send(self, spec: ChannelSpec, occ: Occurrence) -> ChannelOutcome:
        """``inner``'s outcome, or a permanent ``budget_exhausted`` one without sending."""
        limit = self._budget_of(occ.caller, spec.type)
        if limit is not None:
            day = utc_day(self._clock.now_ms())
            try:
                taken = await self._budget.take(occ.caller, spec.type.value, day, limit)
            except CacheError as e:
                self._metrics.inc("budget_errors_total")
                log.warning("budget_unavailable", caller=occ.caller, error=str(e))
                taken = True
            if not taken:
                self._metrics.inc("budget_exhausted_total", caller=occ.caller,
                                  type=spec.type.value)
                return ChannelOutcome(False, permanent=True, provider_code=BUDGET_EXHAUSTED,
                                      error=f"the daily {spec.type.value} budget of caller "
                                            f"{occ.caller} ({limit} sends) is spent; not sent")
        return await self._inner.send(spec, occ)
