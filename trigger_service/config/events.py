"""Settings of events to the caller (section ``events`` of ``settings.Settings``;
``EVENT_VARIABLES`` are their rows of ``settings.VARIABLES``): ``core.caller_events``, the
API's subscriptions (``app.subscriptions``) and the dispatchers' event sender
(``dispatcher.caller_events``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trigger_service.config.parsers import at_least_one, int_list, int_up_to
from trigger_service.core.caller_events import RetrySchedule

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]


@dataclass(frozen=True)
class EventSettings:
    # Subscriptions per caller: each one is a read of the caller's partition by every
    # dispatcher per cache period, and a send per event.
    max_subscriptions: int = 5
    # Sends of one event to one subscription, and the waits after each failed one (seconds;
    # the last repeated): about 10 h in all by default.
    max_attempts: int = 8
    retry_backoff_s: tuple[int, ...] = (10, 60, 300, 1800, 3600, 7200, 21600)
    # How old a dispatcher's copy of a caller's subscriptions may be.
    cache_s: int = 10
    # One send's time limit.
    send_timeout_s: int = 10
    # Events a dispatcher has emitted and not yet queued (past it one is dropped, counted
    # in caller_events_dropped_total: a trigger's delivery never waits for its events).
    max_pending: int = 1000

    @property
    def schedule(self) -> RetrySchedule:
        return RetrySchedule(self.max_attempts, self.retry_backoff_s or (60,))


EVENT_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_EVENTS_MAX_SUBSCRIPTIONS", ("events", "max_subscriptions"), int_up_to(50),
     "event subscriptions per caller (PUT /v1/event-subscriptions/{name}); a new one past "
     "this is refused 409 too_many_subscriptions"),
    ("TRIGGER_EVENTS_MAX_ATTEMPTS", ("events", "max_attempts"), at_least_one,
     "sends of one event to one subscription before it is listed as failed"),
    ("TRIGGER_EVENTS_RETRY_BACKOFF_S", ("events", "retry_backoff_s"), int_list,
     "seconds to wait after each failed send of an event (the last value repeats)"),
    ("TRIGGER_EVENTS_CACHE_S", ("events", "cache_s"), at_least_one,
     "each dispatcher reads a caller's subscriptions at most this often (a change reaches "
     "the senders within it)"),
    ("TRIGGER_EVENTS_SEND_TIMEOUT_S", ("events", "send_timeout_s"), int_up_to(60),
     "one event send's time limit"),
    ("TRIGGER_EVENTS_MAX_PENDING", ("events", "max_pending"), at_least_one,
     "events a dispatcher holds on their way to the events queue; past it one is dropped "
     "(caller_events_dropped_total), never a delivery slowed"),
)
