"""SMS through Twilio's REST API (or anything speaking its format, such as the simulator in
``tests/providers.py``): one form-encoded ``POST {base}/2010-04-01/Accounts/{sid}/Messages.json``
with ``To``, ``From`` and ``Body``, HTTP basic auth with the account SID and auth token.

Answers (https://www.twilio.com/docs/usage/twilios-response):

- 2xx: accepted; the JSON's ``sid`` (``SM...``) is the provider's message id.
- 429, 5xx, timeouts, lost connections: transient, after ``Retry-After`` when given.
- any other 4xx: permanent, with Twilio's error ``code`` (21211 invalid number, 21610
  unsubscribed recipient, 20003 bad credentials...) or else the HTTP status as the code.
"""

from __future__ import annotations

import base64

from dispatcher.channels.provider_http import HttpAnswer, ProviderHttp, failed_outcome
from trigger_service.config.providers import SmsSettings
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    OccurrenceNotice,
    SmsSpec,
)
from trigger_service.core.ports import Clock


def sms_body(spec: SmsSpec, occ: OccurrenceNotice) -> str:
    """The text sent: the channel's own, then the acknowledgement link when there is one."""
    return spec.text + (f" Ack: {occ.ack_url}" if occ.ack_url else "")


def sms_outcome(answer: HttpAnswer) -> ChannelOutcome:
    """What a Twilio answer means for the channel."""
    body = answer.body or {}
    if 200 <= answer.status < 300:
        sid = body.get("sid")
        return ChannelOutcome(True, provider_code=str(answer.status),
                              provider_message_id=sid if isinstance(sid, str) else None)
    code = body.get("code")
    message = body.get("message")
    detail = message if isinstance(message, str) else answer.text
    return failed_outcome(answer.status, detail, transient=answer.transient,
                          provider_code=str(code) if code is not None else str(answer.status),
                          retry_after_s=answer.retry_after_s)


class SmsNotifier:
    """The ``Notifier`` of SMS channels."""

    def __init__(self, settings: SmsSettings, *, clock: Clock | None = None) -> None:
        self._settings = settings
        self._url = (f"{settings.base_url}/2010-04-01/Accounts/{settings.account_sid}"
                     "/Messages.json")
        # Built here, not with aiohttp.BasicAuth (deprecated in aiohttp 3.14).
        credentials = f"{settings.account_sid}:{settings.auth_token}".encode()
        self._headers = {"Accept": "application/json",
                         "Authorization": "Basic " + base64.b64encode(credentials).decode()}
        self._http = ProviderHttp(settings.timeout_s, clock=clock)

    async def open(self) -> None:
        await self._http.open()

    async def close(self) -> None:
        await self._http.close()

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        if not isinstance(spec, SmsSpec):
            return ChannelOutcome(False, permanent=True, error=f"not an sms channel: {spec.type}")
        form = {"To": spec.to, "From": self._settings.from_number, "Body": sms_body(spec, occ)}
        answer = await self._http.post(self._url, headers=self._headers, data=form)
        return answer if isinstance(answer, ChannelOutcome) else sms_outcome(answer)
