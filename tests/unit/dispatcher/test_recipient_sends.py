"""A recipient's channels at send time (dispatcher/recipients.py, dispatcher/fanout.py) on
the fakes: the address (and a preferred channel's type) read from the profile as it is when
the occurrence is sent, the profile's quiet hours, a missing address, and a deleted
recipient that ends even a series with the reason."""

from __future__ import annotations

import asyncio
from datetime import datetime, time

from tests.unit.dispatcher.fakes import CALLER, Env
from trigger_service.adapters.memory.recipients import MemoryRecipients
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    ChannelType,
    OccurrenceNotice,
    PushSpec,
    SmsSpec,
)
from trigger_service.core.notify.plan import (
    ChannelStatus,
    DeliveryPlan,
    QuietHours,
    parse_plan,
)
from trigger_service.core.recipient_profiles import RecipientProfile
from trigger_service.core.time.recurrence import Recurrence, RuleKind

PROFILE = RecipientProfile("ada", "UTC", phone="+15551230000", push_tokens=("tok-ada",),
                           preference=(ChannelType.PUSH, ChannelType.SMS))


class Recording:
    def __init__(self) -> None:
        self.specs: list[ChannelSpec] = []

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        self.specs.append(spec)
        return ChannelOutcome(True, provider_message_id="m-1")


async def deliver(env: Env, t: Trigger, recipients: MemoryRecipients, sent: Recording
                  ) -> None:
    d = env.dispatcher_with(notifiers=sent, recipients=recipients)
    env.clock.set_ms(max(env.clock.now_ms(), env.row(t).due_at_ms()))
    await env.enqueue(env.row(t))
    for m in await env.receive():
        await asyncio.wait_for(d.handle(m), 5)


def sms_plan() -> DeliveryPlan:
    plan = parse_plan({"recipient": "ada", "channels": [{"type": "sms"}],
                       "message": {"text": "Standup"}})
    assert plan is not None
    return plan


async def test_the_address_is_the_profiles_at_send_time(env: Env) -> None:
    recipients = MemoryRecipients()
    await recipients.put_profile(CALLER, PROFILE)
    t = await env.add(0, plan=sms_plan(), callback_url="", recipient="ada")
    # The number changes after registration: the send goes to the new one.
    await recipients.put_profile(CALLER, RecipientProfile("ada", "UTC", phone="+15559990000"))
    sent = Recording()
    await deliver(env, t, recipients, sent)
    assert sent.specs == [SmsSpec("+15559990000", "Standup")]
    assert env.row(t).status is Status.FIRED


async def test_preferred_takes_the_first_type_with_an_address(env: Env) -> None:
    recipients = MemoryRecipients()
    await recipients.put_profile(CALLER, PROFILE)
    plan = parse_plan({"recipient": "ada", "channels": "preferred",
                       "message": {"title": "Standup", "text": "in 5"}})
    t = await env.add(0, plan=plan, callback_url="", recipient="ada")
    sent = Recording()
    await deliver(env, t, recipients, sent)
    assert sent.specs == [PushSpec("tok-ada", "Standup", "in 5")]
    assert [s.type for s in env.row(t).channel_states] == ["preferred"]


async def test_a_missing_address_fails_that_channel_at_once(env: Env) -> None:
    recipients = MemoryRecipients()
    await recipients.put_profile(CALLER, RecipientProfile("ada", "UTC"))  # no phone
    t = await env.add(0, plan=sms_plan(), callback_url="", recipient="ada")
    sent = Recording()
    await deliver(env, t, recipients, sent)
    row = env.row(t)
    assert sent.specs == [] and row.status is Status.FAILED
    assert row.channel_states[0].provider_code == "recipient_no_address"


async def test_the_profiles_quiet_hours_defer_a_trigger_without_its_own(env: Env) -> None:
    recipients = MemoryRecipients()
    now_utc = time(env.clock.now_ms() // 3_600_000 % 24, 0)
    quiet = QuietHours(now_utc, time((now_utc.hour + 2) % 24, 0), "")
    await recipients.put_profile(CALLER, RecipientProfile("ada", "UTC", quiet_hours=quiet,
                                                          phone="+15551230000"))
    t = await env.add(0, plan=sms_plan(), callback_url="", recipient="ada")
    sent = Recording()
    await deliver(env, t, recipients, sent)
    row = env.row(t)
    assert sent.specs == [] and row.status is Status.PENDING
    assert row.channel_states[0].status is ChannelStatus.DEFERRED


async def test_a_deleted_recipient_ends_even_a_series_with_the_reason(env: Env) -> None:
    recipients = MemoryRecipients()  # nobody: the profile was deleted
    rec = Recurrence(RuleKind.RRULE, "FREQ=MINUTELY", "UTC",
                     datetime(2020, 1, 1))
    t = await env.add(0, plan=sms_plan(), callback_url="", recipient="ada", schedule=rec)
    sent = Recording()
    await deliver(env, t, recipients, sent)
    row = env.row(t)
    assert sent.specs == [] and row.status is Status.FAILED
    assert row.last_error == "recipient_deleted: recipient ada was deleted"
    letter = env.store.dead_letters[t.occurrence_id]
    assert letter.reason is DeadLetterReason.RECIPIENT_DELETED
