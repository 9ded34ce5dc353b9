"""Typed keys for what the application and each request carry."""

from __future__ import annotations

from aiohttp import web

from trigger_service.app.attempts import AttemptHistory
from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.app.recipient_profiles import RecipientService
from trigger_service.app.replay_jobs import ReplayJobRunner
from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.app.triggers import TriggerService
from trigger_service.config.callers import Caller, Principal
from trigger_service.platform.wiring import Runtime

CALLER_KEY = web.RequestKey("caller", Caller)
PRINCIPAL_KEY = web.RequestKey("principal", Principal)
SERVICE_KEY = web.AppKey("service", TriggerService)
RUNTIME_KEY = web.AppKey("runtime", Runtime)
LETTERS_KEY = web.AppKey("dead_letters", DeadLetterService)
ATTEMPTS_KEY = web.AppKey("attempts", AttemptHistory)
JOBS_KEY = web.AppKey("replay_jobs", ReplayJobRunner)
TRIGGER_JOBS_KEY = web.AppKey("trigger_jobs", TriggerJobRunner)
RECIPIENTS_KEY = web.AppKey("recipients", RecipientService)
REQUEST_ID_KEY = web.RequestKey("request_id", str)
# Set by a route whose answer holds its connection (an inbox stream): any refusal of it is
# answered Connection: close (http.server), so refused streams hold no connection slot.
LONG_LIVED_KEY = web.RequestKey("long_lived", bool)
