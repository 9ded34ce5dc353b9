"""Telegram through the Bot API (or anything speaking its format, such as the simulator in
``tests/providers.py``): ``POST {base}/bot{token}/sendMessage`` with a JSON ``chat_id``,
``text`` and, when the channel asks, ``parse_mode``.

The bot token is part of the URL, so neither the URL nor anything that may quote it (an
aiohttp error names the URL it failed on) reaches an outcome unredacted: ``_redacted``.

Answers (https://core.telegram.org/bots/api#making-requests): every answer is a JSON object
with ``ok``; an error has ``error_code`` (the HTTP status) and ``description``:

- ``ok: true``: sent; ``result.message_id`` (unique within its chat) is the provider id,
  given as ``<chat id>:<message id>``.
- 429 (``parameters.retry_after`` seconds), 5xx, timeouts, lost connections: transient.
- 400 (chat not found, a text the parse mode cannot parse, a group upgraded to a supergroup:
  ``parameters.migrate_to_chat_id`` is named in the error), 401 (a bad token), 403 (the bot
  was blocked by the user or kicked from the group) and any other 4xx: permanent.
"""

from __future__ import annotations

import html
import re
from dataclasses import replace
from typing import Any

from dispatcher.channels.provider_http import (
    HttpAnswer,
    ProviderHttp,
    failed_outcome,
    transient_status,
)
from trigger_service.config.providers import TelegramSettings
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    OccurrenceNotice,
    TelegramSpec,
)
from trigger_service.core.ports import Clock

# What MarkdownV2 needs escaped anywhere in text, and legacy Markdown's few entity starters.
_MARKDOWN_V2 = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")
_MARKDOWN = re.compile(r"([_*`\[])")
REDACTED = "<bot-token>"


def _escaped(text: str, parse_mode: str | None) -> str:
    """``text`` as literal text under ``parse_mode`` (the ack link must not become markup)."""
    if parse_mode == "HTML":
        return html.escape(text, quote=False)
    if parse_mode == "MarkdownV2":
        return _MARKDOWN_V2.sub(r"\\\1", text)
    if parse_mode == "Markdown":
        return _MARKDOWN.sub(r"\\\1", text)
    return text


def telegram_message(spec: TelegramSpec, occ: OccurrenceNotice) -> dict[str, Any]:
    """The request body: the channel's text, then the acknowledgement link when there is one
    (escaped for the parse mode; the caller's own text is sent as written)."""
    text = spec.text
    if occ.ack_url:
        text = f"{text.rstrip()}\n\n" + _escaped(f"Acknowledge: {occ.ack_url}", spec.parse_mode)
    body: dict[str, Any] = {"chat_id": spec.chat_id, "text": text}
    if spec.parse_mode is not None:
        body["parse_mode"] = spec.parse_mode
    return body


def telegram_outcome(answer: HttpAnswer, chat_id: int | str) -> ChannelOutcome:
    """What a Bot API answer means for the channel."""
    body = answer.body or {}
    if 200 <= answer.status < 300 and body.get("ok") is True:
        result = body.get("result")
        mid = result.get("message_id") if isinstance(result, dict) else None
        return ChannelOutcome(True, provider_code=str(answer.status),
                              provider_message_id=f"{chat_id}:{mid}" if mid is not None else None)
    code = body.get("error_code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else answer.status
    description = body.get("description")
    detail = description if isinstance(description, str) else answer.text
    params = body.get("parameters")
    params = params if isinstance(params, dict) else {}
    retry_after = params.get("retry_after")
    migrated = params.get("migrate_to_chat_id")
    if migrated is not None:
        detail = f"{detail} (the chat is now {migrated})"
    if isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
        wait_s: float | None = max(0.0, float(retry_after))
    else:
        wait_s = answer.retry_after_s
    # Transient when either status says so: the body's error_code or the HTTP answer's.
    return failed_outcome(status, detail, transient=transient_status(status) or answer.transient,
                          provider_code=str(status), retry_after_s=wait_s)


class TelegramNotifier:
    """The ``Notifier`` of telegram channels: one bot (``TRIGGER_TELEGRAM_BOT_TOKEN``)."""

    def __init__(self, settings: TelegramSettings, *, clock: Clock | None = None) -> None:
        self._token = settings.bot_token
        self._url = f"{settings.base_url}/bot{settings.bot_token}/sendMessage"
        self._http = ProviderHttp(settings.timeout_s, clock=clock)

    def __repr__(self) -> str:  # the URL holds the token
        return "TelegramNotifier()"

    async def open(self) -> None:
        await self._http.open()

    async def close(self) -> None:
        await self._http.close()

    def _redacted(self, outcome: ChannelOutcome) -> ChannelOutcome:
        if self._token and outcome.error and self._token in outcome.error:
            return replace(outcome, error=outcome.error.replace(self._token, REDACTED))
        return outcome

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        if not isinstance(spec, TelegramSpec):
            return ChannelOutcome(False, permanent=True,
                                  error=f"not a telegram channel: {spec.type}")
        answer = await self._http.post(self._url, headers={"Accept": "application/json"},
                                       json_body=telegram_message(spec, occ))
        if isinstance(answer, ChannelOutcome):
            return self._redacted(answer)
        return self._redacted(telegram_outcome(answer, spec.chat_id))
