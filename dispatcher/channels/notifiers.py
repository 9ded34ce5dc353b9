"""``NotifierRouter``: one ``Notifier`` that hands each channel to the adapter of its type."""

from __future__ import annotations

from dispatcher.channels.email import EmailNotifier
from dispatcher.channels.push import PushNotifier
from dispatcher.channels.ses import SesEmailNotifier
from dispatcher.channels.sms import SmsNotifier
from dispatcher.channels.telegram import TelegramNotifier
from trigger_service.config.settings import Settings
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    ChannelType,
    OccurrenceNotice,
)
from trigger_service.core.ports import Clock
from trigger_service.core.ports.notify import Notifier

NOT_CONFIGURED = "not configured"


class NotifierRouter:
    """Routes a ``ChannelSpec`` by its ``type`` to the email, SMS, push, inbox or Telegram
    notifier.

    It owns the notifiers it was given: ``open``/``close`` open and close each of them. Without
    an inbox (or Telegram) notifier such a channel's outcome is permanent (``inbox not
    configured``, ``telegram not configured``): nothing later would make it deliverable.
    """

    def __init__(self, email: Notifier, sms: Notifier, push: Notifier,
                 inbox: Notifier | None = None, telegram: Notifier | None = None) -> None:
        self._by_type: dict[ChannelType, Notifier] = {
            ChannelType.EMAIL: email, ChannelType.SMS: sms, ChannelType.PUSH: push}
        if inbox is not None:
            self._by_type[ChannelType.INBOX] = inbox
        if telegram is not None:
            self._by_type[ChannelType.TELEGRAM] = telegram

    @classmethod
    def from_settings(cls, settings: Settings, *, clock: Clock | None = None,
                      inbox: Notifier | None = None) -> NotifierRouter:
        """The provider adapters configured by ``settings`` (email through SMTP or SES, by
        ``TRIGGER_EMAIL_TRANSPORT``); raises ``ConfigError`` for a setting an adapter cannot
        use (an unreadable push service-account file)."""
        email: Notifier
        if settings.email.transport == "ses":
            email = SesEmailNotifier(settings.email, settings.smtp.from_address, clock=clock)
        else:
            email = EmailNotifier(settings.smtp, clock=clock)
        telegram = (TelegramNotifier(settings.telegram, clock=clock)
                    if settings.telegram.bot_token else None)
        return cls(email, SmsNotifier(settings.sms, clock=clock),
                   PushNotifier(settings.push, clock=clock), inbox, telegram)

    async def open(self) -> None:
        for notifier in self._by_type.values():
            await notifier.open()

    async def close(self) -> None:
        """Close every notifier, even when one fails; the first failure is raised after."""
        first: BaseException | None = None
        for notifier in self._by_type.values():
            try:
                await notifier.close()
            except Exception as e:
                first = first or e
        if first is not None:
            raise first

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        notifier = self._by_type.get(spec.type)
        if notifier is None:
            return ChannelOutcome(False, permanent=True,
                                  error=f"{spec.type.value} {NOT_CONFIGURED}")
        return await notifier.send(spec, occ)
