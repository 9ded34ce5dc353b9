"""The boundary to notification providers: one ``Notifier`` per channel type
(``core.ports`` holds the webhook's ``Channel``; the same rules apply).

=============  ==========================  =================================================
port           used by                     implementations
=============  ==========================  =================================================
``Notifier``   dispatcher (delivery)       dispatcher.channels.email (SMTP), .sms (Twilio),
                                           .push (FCM), .notifiers (routes by type), inbox
=============  ==========================  =================================================
"""

from __future__ import annotations

from typing import Protocol

from trigger_service.core.notify.channels import ChannelOutcome, ChannelSpec, OccurrenceNotice


class Notifier(Protocol):
    """Sends one channel's message of one occurrence to its provider.

    ``send`` never raises for what the provider or the network did: a refusal, an error
    answer, a timeout or a lost connection is a ``ChannelOutcome`` (``permanent`` when a
    retry cannot help, else retried on the trigger's backoff). It is safe to retry: each
    message carries ids derived from the occurrence and channel index (an email's Message-ID,
    a push's ``occurrenceId``) so a receiving system can drop a repeat, but a provider that
    accepted a message whose answer was lost will send it again.
    """

    async def open(self) -> None:
        """Acquire what sends need (HTTP sessions); call once before ``send``."""
        ...

    async def close(self) -> None:
        """Release it; idempotent."""
        ...

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        """Send once and report what the provider said."""
        ...
