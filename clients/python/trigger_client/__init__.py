"""Typed Python SDK for the trigger service (sync :class:`TriggerClient`, asyncio
:class:`AsyncTriggerClient`), its errors and models, and :mod:`trigger_client.receiver` for
services that receive callbacks."""

from trigger_client._retry import RetryPolicy
from trigger_client.aio import AsyncTriggerClient
from trigger_client.client import TriggerClient
from trigger_client.errors import (
    ApiError,
    Conflict,
    ConnectionFailed,
    FireAtOutOfRange,
    Forbidden,
    HeadersTooLarge,
    InvalidRequest,
    InvalidSignature,
    MethodNotAllowed,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    RequestTimeout,
    ServerError,
    TriggerError,
    Unauthorized,
    Unprocessable,
    UnsupportedMediaType,
)
from trigger_client.models import (
    AckResult,
    CancelledTrigger,
    ChannelState,
    CreatedTrigger,
    DstPolicy,
    Page,
    Preview,
    Resolved,
    SigningSecret,
    Status,
    Trigger,
)
from trigger_client.models_more import (
    Attempt,
    DeadLetter,
    Health,
    InboxMessage,
    OpsOverview,
    PurgeResult,
    ReplayJob,
    ReplayResult,
)
from trigger_client.pausing import CatchUp, CatchUpPolicy, PausedCaller, ResumeJob
from trigger_client.requests import TriggerRequest

__all__ = [
    "AckResult", "ApiError", "AsyncTriggerClient", "Attempt", "CancelledTrigger", "CatchUp",
    "CatchUpPolicy", "PausedCaller", "ResumeJob",
    "ChannelState", "Conflict", "ConnectionFailed", "CreatedTrigger", "DeadLetter",
    "DstPolicy", "FireAtOutOfRange", "Forbidden", "HeadersTooLarge", "Health", "InboxMessage",
    "InvalidRequest", "InvalidSignature", "MethodNotAllowed", "NotFound", "OpsOverview",
    "OutcomeUnknown", "Page", "PayloadTooLarge", "Preview", "PurgeResult", "QuotaExceeded",
    "RateLimited", "ReplayJob", "ReplayResult", "RequestTimeout", "Resolved", "RetryPolicy",
    "ServerError", "SigningSecret", "Status", "Trigger", "TriggerClient", "TriggerError",
    "TriggerRequest", "Unauthorized", "Unprocessable", "UnsupportedMediaType",
]
