"""A caller's recipient controls at send time (dispatcher/channels/caller_policy.py) on the
fakes: each send takes its recipients from its caller's budget of the channel type (an email
to three addresses takes three), past it the channel is not sent and fails
``budget_exhausted`` while the occurrence's other channels go on; recipients (Telegram chats
and push tokens included) are checked again and HTML sanitised again."""

from __future__ import annotations

import asyncio

from dispatcher.channels.caller_policy import (
    RECIPIENT_NOT_ALLOWED,
    CallerPolicyNotifiers,
    policies_of,
)
from dispatcher.fanout import BUDGET_EXHAUSTED
from tests.unit.dispatcher.fakes import CALLER, OTHER_CALLER, Env
from trigger_service.adapters.memory.limits import MemorySendBudget
from trigger_service.config.recipient_controls import RecipientPolicy
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelType,
    EmailSpec,
    OccurrenceNotice,
    PushSpec,
    SmsSpec,
    TelegramSpec,
)
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports.limit import utc_day

EMAIL = EmailSpec(("a@example.com",), "s", "t")
SMS = SmsSpec("+4915112345678", "t")
ANY = (("*",), ("*",))
POLICIES = {CALLER: RecipientPolicy(*ANY, ((ChannelType.SMS, 2),)),
            OTHER_CALLER: RecipientPolicy(*ANY, ((ChannelType.SMS, 0),))}


def budgeted(env: Env, budget: MemorySendBudget,
             policies: dict[str, RecipientPolicy] = POLICIES) -> CallerPolicyNotifiers:
    return CallerPolicyNotifiers(env.notifiers, lambda c: policies[c], budget, env.clock,
                                 env.metrics)


async def deliver(env: Env, budget: MemorySendBudget, t: Trigger, rounds: int = 3,
                  notifiers: CallerPolicyNotifiers | None = None) -> Trigger:
    d = env.dispatcher_with(notifiers=notifiers or budgeted(env, budget))
    await env.enqueue(t)
    for _ in range(rounds):
        env.clock.set_ms(max(env.clock.now_ms(), env.row(t).due_at_ms()))
        for m in await env.receive():
            await asyncio.wait_for(d.handle(m), 5)
        if env.row(t).status.terminal:
            break
    return env.row(t)


async def test_sends_within_the_budget_go_out_and_are_counted(env: Env) -> None:
    budget = MemorySendBudget()
    for _ in range(2):
        t = await env.add(0, plan=DeliveryPlan((SMS, EMAIL)), callback_url="")
        assert (await deliver(env, budget, t)).status is Status.FIRED
    assert env.notifiers.kinds() == ["sms", "email"] * 2
    # Only budgeted types are counted.
    assert budget.counts == {(CALLER, "sms", utc_day(env.clock.now_ms())): 2}


async def test_a_send_past_the_budget_is_not_made_and_dead_letters_that_channel(
        env: Env) -> None:
    budget = MemorySendBudget()
    budget.counts[(CALLER, "sms", utc_day(env.clock.now_ms()))] = 2
    t = await env.add(0, plan=DeliveryPlan((SMS, EMAIL)))
    row = await deliver(env, budget, t)
    assert env.notifiers.kinds() == ["email"]  # the SMS never reached its provider
    assert len(env.channel.calls) == 1  # the callback went on too
    assert [s.status.value for s in row.channel_states] == ["FAILED", "DELIVERED", "DELIVERED"]
    assert row.channel_states[0].provider_code == BUDGET_EXHAUSTED
    assert row.channel_states[0].attempts == 1  # permanent: not retried
    assert row.status is Status.FAILED
    letter = env.store.dead_letters[t.occurrence_id]
    assert letter.reason is DeadLetterReason.BUDGET_EXHAUSTED
    assert "budget" in (letter.last_error or "")


async def test_a_zero_budget_sends_nothing_of_that_type(env: Env) -> None:
    budget = MemorySendBudget()
    t = await env.add(0, caller=OTHER_CALLER, plan=DeliveryPlan((SMS,)), callback_url="")
    row = await deliver(env, budget, t)
    assert env.notifiers.kinds() == []
    assert row.status is Status.FAILED
    assert env.store.dead_letters[t.occurrence_id].reason is DeadLetterReason.BUDGET_EXHAUSTED


async def test_budget_wins_over_other_failures_in_the_reason(env: Env) -> None:
    budget = MemorySendBudget()
    budget.counts[(CALLER, "sms", utc_day(env.clock.now_ms()))] = 2
    env.notifiers.results["email"] = [ChannelOutcome(False, permanent=True,
                                                     provider_code="550", error="no user")]
    t = await env.add(0, plan=DeliveryPlan((SMS, EMAIL)), callback_url="")
    await deliver(env, budget, t)
    assert env.store.dead_letters[t.occurrence_id].reason is DeadLetterReason.BUDGET_EXHAUSTED


async def test_redis_failing_lets_the_send_go_out(env: Env) -> None:
    budget = MemorySendBudget()
    budget.fail = True
    t = await env.add(0, caller=OTHER_CALLER, plan=DeliveryPlan((SMS,)), callback_url="")
    row = await deliver(env, budget, t)
    assert env.notifiers.kinds() == ["sms"] and row.status is Status.FIRED
    assert env.metrics.snapshot()["budget_errors_total"] == 1


async def test_a_recipient_no_longer_allowed_is_not_sent(env: Env) -> None:
    # Registered before the callers file narrowed the caller's domains (or before the
    # controls existed): refused at send time, the other channel goes on.
    narrowed = {CALLER: RecipientPolicy(("other.example",), ("*",))}
    t = await env.add(0, plan=DeliveryPlan((EMAIL, SMS)), callback_url="")
    row = await deliver(env, MemorySendBudget(), t,
                        notifiers=budgeted(env, MemorySendBudget(), narrowed))
    assert env.notifiers.kinds() == ["sms"]
    assert row.channel_states[0].provider_code == RECIPIENT_NOT_ALLOWED
    assert row.status is Status.FAILED


async def test_an_untrusted_callers_html_is_sanitised_before_sending(env: Env) -> None:
    seen: list[str | None] = []
    original = env.notifiers.send

    async def spy(spec: EmailSpec | SmsSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        seen.append(spec.html if isinstance(spec, EmailSpec) else None)
        return await original(spec, occ)

    env.notifiers.send = spy  # type: ignore[method-assign,assignment]
    html = '<p onclick="x()">Hi</p><script>alert(1)</script>'
    t = await env.add(0, plan=DeliveryPlan((EmailSpec(("a@example.com",), "s", "t", html),)),
                      callback_url="")
    await deliver(env, MemorySendBudget(), t)
    trusted = {CALLER: RecipientPolicy(*ANY, trusted=True)}
    t2 = await env.add(0, plan=DeliveryPlan((EmailSpec(("a@example.com",), "s", "t", html),)),
                       callback_url="")
    await deliver(env, MemorySendBudget(), t2,
                  notifiers=budgeted(env, MemorySendBudget(), trusted))
    assert seen == ["<p>Hi</p>", html]


async def test_an_email_takes_one_from_the_budget_per_recipient(env: Env) -> None:
    budget = MemorySendBudget()
    day = utc_day(env.clock.now_ms())
    policies = {CALLER: RecipientPolicy(*ANY, ((ChannelType.EMAIL, 4),))}
    three = EmailSpec(("a@example.com", "b@example.com", "c@example.com"), "s", "t")
    t = await env.add(0, plan=DeliveryPlan((three,)), callback_url="")
    row = await deliver(env, budget, t, notifiers=budgeted(env, budget, policies))
    assert row.status is Status.FIRED
    assert budget.counts == {(CALLER, "email", day): 3}
    # One left: the next three-address email is not sent, and takes nothing.
    t2 = await env.add(0, plan=DeliveryPlan((three, EMAIL)), callback_url="")
    row = await deliver(env, budget, t2, notifiers=budgeted(env, budget, policies))
    assert env.notifiers.kinds() == ["email", "email"]  # the first one, then the lone address
    assert row.channel_states[0].provider_code == BUDGET_EXHAUSTED
    assert "has not 3 left" in (row.channel_states[0].last_error or "")
    assert budget.counts == {(CALLER, "email", day): 4}


async def test_a_chat_or_token_not_allowed_is_not_sent(env: Env) -> None:
    # Allowed when registered (or from a recipient's profile): checked again when sent.
    allowed = {CALLER: RecipientPolicy(*ANY, telegram_chats=frozenset({"42"}),
                                       push_tokens=frozenset({"device-1"}))}
    specs = (TelegramSpec(43, "hi"), PushSpec("device-2", "t", "b"),
             TelegramSpec(42, "hi"), PushSpec("device-1", "t", "b"))
    t = await env.add(0, plan=DeliveryPlan(specs), callback_url="")
    row = await deliver(env, MemorySendBudget(), t,
                        notifiers=budgeted(env, MemorySendBudget(), allowed))
    assert env.notifiers.kinds() == ["telegram", "push"]  # the allowed two only
    assert [s.provider_code for s in row.channel_states[:2]] == [RECIPIENT_NOT_ALLOWED] * 2
    assert "device-2" not in (row.channel_states[1].last_error or "")
    refused = env.metrics.snapshot()
    assert (refused['recipient_refused_total{type="telegram"}'],
            refused['recipient_refused_total{type="push"}']) == (1, 1)
    t2 = await env.add(0, plan=DeliveryPlan(specs[2:]), callback_url="")
    row = await deliver(env, MemorySendBudget(), t2)  # POLICIES: no chats, no tokens
    assert [s.provider_code for s in row.channel_states] == [RECIPIENT_NOT_ALLOWED] * 2


def test_a_caller_gone_from_the_callers_file_has_no_recipients(env: Env) -> None:
    of = policies_of(env.callers)
    assert of("ghost").spec_refusal(SMS) is not None
