from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.channels.notifiers import NOT_CONFIGURED, NotifierRouter
from trigger_service.adapters.memory.notifier import MemoryNotifier
from trigger_service.config.settings import Settings
from trigger_service.core.errors import ConfigError
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    EmailSpec,
    InboxSpec,
    OccurrenceNotice,
    PushSpec,
    SmsSpec,
)

OCC = OccurrenceNotice("t", "t.1", "dev", 0, 0)
SPECS = (EmailSpec(("a@x.example",), "s", "t"), SmsSpec("+4915112345678", "t"),
         PushSpec("tok", "t", "b"), InboxSpec("ann", "t", "b"))


async def test_each_channel_goes_to_the_notifier_of_its_type() -> None:
    email, sms, push, inbox = (MemoryNotifier() for _ in range(4))
    notifiers = NotifierRouter(email, sms, push, inbox)
    await notifiers.open()
    outs = [await notifiers.send(spec, OCC) for spec in SPECS]
    await notifiers.close()
    assert all(o.ok for o in outs)
    assert [n.sent for n in (email, sms, push, inbox)] == [[(s, OCC)] for s in SPECS]
    assert all(n.opened and n.closed for n in (email, sms, push, inbox))


async def test_without_an_inbox_notifier_an_inbox_channel_fails_permanently() -> None:
    notifiers = NotifierRouter(MemoryNotifier(), MemoryNotifier(), MemoryNotifier())
    out = await notifiers.send(SPECS[3], OCC)
    assert not out.ok and out.permanent and out.error == f"inbox {NOT_CONFIGURED}"


async def test_outcomes_are_passed_through_and_scripts_go_by_recipient_then_type() -> None:
    sms = MemoryNotifier()
    sms.script("+4915112345678", ChannelOutcome(False, True, "21211"))
    sms.script("sms", ChannelOutcome(False, retry_after_s=3))
    notifiers = NotifierRouter(MemoryNotifier(), sms, MemoryNotifier())
    outs = [await notifiers.send(SPECS[1], OCC) for _ in range(3)]
    assert [(o.ok, o.permanent, o.provider_code) for o in outs] == [
        (False, True, "21211"), (False, False, None), (True, False, None)]


class Broken(MemoryNotifier):
    async def close(self) -> None:
        raise RuntimeError("boom")


async def test_close_closes_every_notifier_even_when_one_fails() -> None:
    email, push = Broken(), MemoryNotifier()
    with pytest.raises(RuntimeError):
        await NotifierRouter(email, MemoryNotifier(), push).close()
    assert push.closed


def test_from_settings_builds_the_providers_and_refuses_a_credentials_file() -> None:
    NotifierRouter.from_settings(Settings())
    push = replace(Settings().push, credentials_file="/etc/sa.json")
    with pytest.raises(ConfigError, match="TRIGGER_PUSH_CREDENTIALS_FILE"):
        NotifierRouter.from_settings(replace(Settings(), push=push))
