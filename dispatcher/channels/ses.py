"""Email through Amazon SES (``TRIGGER_EMAIL_TRANSPORT=ses``): the message ``email.build_email``
makes (the same headers, Message-ID and ack link as over SMTP) sent whole with SES's
``SendRawEmail`` through aioboto3, the SDK stack the SQS adapter uses.

Why SES v1's ``SendRawEmail`` and not SES v2's ``SendEmail`` with raw content: both send the
same MIME message, but LocalStack's SES (what every test and ``make up`` run against) serves
v1 only (v2 answers 501), and v1 is a fully supported AWS API.

One retry layer: the trigger's backoff. botocore's own retries are off (one attempt per
send), so a throttled send waits out the channel's backoff rather than being sent again
within the same attempt.

Answers (botocore's ``ClientError`` and transport errors are translated here, nowhere else):

- sent: SES's ``MessageId`` is the provider message id (our Message-ID header stays in the
  message for the receiver's de-duplication);
- ``Throttling`` (the sending rate or the daily quota), ``ServiceUnavailable``,
  ``InternalFailure``, any 5xx, timeouts and lost connections: transient;
- ``MessageRejected`` (a virus, an unverified sender in the sandbox), ``InvalidParameterValue``
  (a malformed address), ``MailFromDomainNotVerified``, a paused account or configuration set,
  a missing configuration set, bad credentials, and any other 4xx: permanent (a dead letter
  can be replayed once the account is fixed).
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from email.utils import parseaddr
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError

from dispatcher.channels.email import bad_message, prepare
from dispatcher.channels.provider_http import MAX_ERROR_LEN, clock_now
from trigger_service.config.providers import EmailSettings
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    EmailSpec,
    OccurrenceNotice,
)
from trigger_service.core.ports import Clock
from trigger_service.core.time.clock import SystemClock

TRANSIENT_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException",
                             "ServiceUnavailable", "InternalFailure", "RequestTimeout"})


def ses_error_outcome(code: str, message: str, status: int, mid: str) -> ChannelOutcome:
    """What an SES error answer means for the channel."""
    transient = code in TRANSIENT_CODES or status >= 500
    return ChannelOutcome(False, permanent=not transient, provider_code=code or str(status),
                          provider_message_id=mid,
                          error=f"SES {code or status}: {message}"[:MAX_ERROR_LEN])


class SesEmailNotifier:
    """The ``Notifier`` of email channels over SES; ``open`` makes the client."""

    def __init__(self, settings: EmailSettings, from_address: str, *,
                 clock: Clock | None = None) -> None:
        self._settings = settings
        self._from = from_address
        self._source = parseaddr(from_address)[1]
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._slots = asyncio.Semaphore(settings.ses_max_connections)
        self._stack: AsyncExitStack | None = None
        self._client: Any = None

    async def open(self) -> None:
        """Make the SES client (no request: SES being unreachable fails sends, not start)."""
        if self._client is not None:
            return
        s = self._settings
        stack = AsyncExitStack()
        self._client = await stack.enter_async_context(aioboto3.Session().client(
            "ses", endpoint_url=s.ses_endpoint_url or None, region_name=s.ses_region,
            aws_access_key_id=s.ses_access_key_id,
            aws_secret_access_key=s.ses_secret_access_key,
            config=AioConfig(max_pool_connections=s.ses_max_connections,
                             retries={"total_max_attempts": 1, "mode": "standard"},
                             connect_timeout=s.ses_timeout_s, read_timeout=s.ses_timeout_s)))
        self._stack = stack

    async def close(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
        self._stack, self._client = None, None

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        msg = prepare(spec, occ, self._from, clock_now(self._clock))
        if isinstance(msg, ChannelOutcome):
            return msg
        assert isinstance(spec, EmailSpec)  # prepare made a message
        assert self._client is not None, "open() first"
        try:
            raw = msg.as_bytes()
        except ValueError as e:
            return bad_message(e)
        mid = str(msg["Message-ID"])
        request: dict[str, Any] = {"Source": self._source, "Destinations": list(spec.to),
                                   "RawMessage": {"Data": raw}}
        if self._settings.ses_configuration_set:
            request["ConfigurationSetName"] = self._settings.ses_configuration_set
        try:
            async with self._slots:
                answer = await self._client.send_raw_email(**request)
        except ClientError as e:
            error = e.response.get("Error", {})
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            return ses_error_outcome(str(error.get("Code", "")), str(error.get("Message", "")),
                                     int(status or 0), mid)
        # No answer (a timeout, a refused or lost connection): the message may or may not
        # have been accepted; a retry is the only way to know it was sent.
        except (BotoCoreError, OSError, TimeoutError) as e:
            return ChannelOutcome(False, provider_message_id=mid,
                                  error=f"{type(e).__name__}: {e}"[:MAX_ERROR_LEN])
        return ChannelOutcome(True, provider_code="200",
                              provider_message_id=str(answer.get("MessageId") or mid))
