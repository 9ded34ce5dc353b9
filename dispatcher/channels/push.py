"""Push through FCM HTTP v1 (or anything speaking its format, such as the simulator in
``tests/providers.py``): ``POST {base}/v1/projects/{project}/messages:send`` with a JSON
``{"message": {...}}`` and ``Authorization: Bearer <token>``.

The bearer is an OAuth2 access token of the service account in
``TRIGGER_PUSH_CREDENTIALS_FILE`` (``fcm_auth``: fetched and refreshed with google-auth; a
401 ``UNAUTHENTICATED`` makes the token be fetched again and the send tried once more), or,
without that file, ``TRIGGER_PUSH_BEARER`` as given (a token from elsewhere, or anything an
emulator accepts). A token that cannot be had is the send's outcome: transient when the
token endpoint may give one later, else permanent.

Answers (https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode):

- 2xx: accepted; the JSON's ``name`` (``projects/p/messages/...``) is the message id.
- an error names itself twice: ``error.status`` (``NOT_FOUND``, ``INVALID_ARGUMENT``...) and,
  more precisely, ``error.details[].errorCode`` (``UNREGISTERED``...). The precise one is the
  provider code. ``UNAVAILABLE``, ``INTERNAL``, ``QUOTA_EXCEEDED`` and any 429/5xx are
  transient (after ``Retry-After`` when given); ``UNREGISTERED``, ``INVALID_ARGUMENT``,
  ``NOT_FOUND``, ``SENDER_ID_MISMATCH`` and any other 4xx are permanent.
"""

from __future__ import annotations

from typing import Any

from dispatcher.channels.fcm_auth import ServiceAccountTokens, TokenUnavailable
from dispatcher.channels.provider_http import (
    MAX_ERROR_LEN,
    HttpAnswer,
    ProviderHttp,
    failed_outcome,
)
from trigger_service.config.providers import PushSettings
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    OccurrenceNotice,
    PushSpec,
)
from trigger_service.core.ports import Clock
from trigger_service.core.time.clock import SystemClock

TRANSIENT_CODES = frozenset({"UNAVAILABLE", "INTERNAL", "QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED"})
PERMANENT_CODES = frozenset({"UNREGISTERED", "INVALID_ARGUMENT", "NOT_FOUND",
                             "SENDER_ID_MISMATCH", "THIRD_PARTY_AUTH_ERROR",
                             "PERMISSION_DENIED", "UNAUTHENTICATED"})


def push_message(spec: PushSpec, occ: OccurrenceNotice) -> dict[str, Any]:
    """The request body. ``data`` is the channel's own, then what lets the app act on the
    occurrence (ours win over a caller's key of the same name: they describe this send)."""
    data = dict(spec.data)
    data["triggerId"] = occ.trigger_id
    data["occurrenceId"] = occ.occurrence_id
    if occ.ack_url:
        data["ackUrl"] = occ.ack_url
    message: dict[str, Any] = {"token": spec.token,
                               "notification": {"title": spec.title, "body": spec.body},
                               "data": data}
    if spec.ttl_seconds is not None:
        message["android"] = {"ttl": f"{spec.ttl_seconds}s"}
    return {"message": message}


def _error_code(body: dict[str, Any]) -> str | None:
    """``details[].errorCode`` when present, else ``status``."""
    error = body.get("error")
    if not isinstance(error, dict):
        return None
    details = error.get("details")
    for d in details if isinstance(details, list) else ():
        if isinstance(d, dict) and isinstance(d.get("errorCode"), str):
            return str(d["errorCode"])
    status = error.get("status")
    return status if isinstance(status, str) else None


def push_outcome(answer: HttpAnswer) -> ChannelOutcome:
    """What an FCM answer means for the channel."""
    body = answer.body or {}
    if 200 <= answer.status < 300:
        name = body.get("name")
        return ChannelOutcome(True, provider_code=str(answer.status),
                              provider_message_id=name if isinstance(name, str) else None)
    code = _error_code(body)
    if code in TRANSIENT_CODES:
        permanent = False
    elif code in PERMANENT_CODES:
        permanent = True
    else:
        permanent = not answer.transient
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    detail = message if isinstance(message, str) else answer.text
    return failed_outcome(answer.status, detail, transient=not permanent,
                          provider_code=code or str(answer.status),
                          retry_after_s=answer.retry_after_s)


class PushNotifier:
    """The ``Notifier`` of push channels."""

    def __init__(self, settings: PushSettings, *, clock: Clock | None = None) -> None:
        settings.validate()
        self._url = f"{settings.base_url}/v1/projects/{settings.project}/messages:send"
        self._bearer = settings.bearer
        self._tokens = (ServiceAccountTokens(settings.credentials_file,
                                             clock=clock or SystemClock(),
                                             timeout_s=settings.timeout_s)
                        if settings.credentials_file else None)
        self._http = ProviderHttp(settings.timeout_s, clock=clock)

    async def _post(self, body: dict[str, Any]) -> tuple[HttpAnswer | ChannelOutcome, str]:
        """FCM's answer (or the outcome of no answer, or of no token) and the bearer used."""
        try:
            bearer = await self._tokens.token() if self._tokens else self._bearer
        except TokenUnavailable as e:
            return ChannelOutcome(False, permanent=not e.transient,
                                  error=f"FCM access token: {e}"[:MAX_ERROR_LEN]), ""
        headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}
        return await self._http.post(self._url, headers=headers, json_body=body), bearer

    async def open(self) -> None:
        await self._http.open()

    async def close(self) -> None:
        await self._http.close()

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        if not isinstance(spec, PushSpec):
            return ChannelOutcome(False, permanent=True, error=f"not a push channel: {spec.type}")
        body = push_message(spec, occ)
        answer, bearer = await self._post(body)
        if isinstance(answer, HttpAnswer) and answer.status == 401 and self._tokens:
            # A token FCM no longer accepts (revoked, or expired early): fetch a new one and
            # try once more; a second 401 is the account's fault, and permanent.
            self._tokens.invalidate(bearer)
            answer, _ = await self._post(body)
        return answer if isinstance(answer, ChannelOutcome) else push_outcome(answer)
