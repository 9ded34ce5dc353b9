"""A trigger's channels against its caller's recipient controls (app/channel_gate.py), on the
fakes: refused recipients, HTML sanitised unless trusted, daily budgets at registration."""

from __future__ import annotations

import pytest

from trigger_service.adapters.memory.limits import MemorySendBudget
from trigger_service.app.channel_gate import ChannelGate, vet_recipients
from trigger_service.config.callers import CallbackPrefix, Caller
from trigger_service.config.recipient_controls import RecipientPolicy, sanitise_html
from trigger_service.core.errors import QuotaExceeded, RecipientNotAllowed
from trigger_service.core.notify.channels import (
    ChannelSpec,
    ChannelType,
    EmailSpec,
    InboxSpec,
    PushSpec,
    SmsSpec,
    TelegramSpec,
)
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports.limit import utc_day
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: 6,400 s before the next UTC midnight
POLICY = RecipientPolicy(("example.com", "*.example.org"), ("1",),
                         ((ChannelType.EMAIL, 2), (ChannelType.SMS, 0)),
                         telegram_chats=frozenset({"42"}), push_tokens=frozenset({"tok"}))
HTML = ('<p onclick="steal()">Hello <b>you</b>, <i>see</i> <a href="https://example.com/x" '
        'onmouseover="x()">this</a><script>alert(1)</script><img src="x" onerror="y()"></p>'
        '<a href="javascript:alert(1)">bad</a>')


def caller(policy: RecipientPolicy = POLICY, name: str = "shop") -> Caller:
    return Caller(name, ("a" * 64,), (CallbackPrefix.parse("https://shop.example/"),),
                  recipients=policy)


def email(to: tuple[str, ...] = ("a@example.com",), reply_to: str | None = None,
          html: str | None = None) -> EmailSpec:
    return EmailSpec(to, "subject", "text", html, reply_to)


def plan(*channels: ChannelSpec) -> DeliveryPlan:
    return DeliveryPlan(tuple(channels))


def test_allowed_recipients_pass_unchanged() -> None:
    p = plan(email(("a@example.com", "b@X.Example.ORG")), SmsSpec("+15551234567", "hi"))
    assert vet_recipients(caller(), p) == p


@pytest.mark.parametrize(("spec", "field"), [
    (email(("a@example.com", "b@evil.test")), "channels[1].to"),
    (email(reply_to="phish@evil.test"), "channels[1].replyTo"),
    (SmsSpec("+4915112345678", "hi"), "channels[1].to"),
])
def test_a_recipient_outside_the_callers_controls_is_refused_naming_the_field(
        spec: EmailSpec | SmsSpec, field: str) -> None:
    with pytest.raises(RecipientNotAllowed) as e:
        vet_recipients(caller(), plan(PushSpec("tok", "t", "b"), spec))
    assert e.value.to_json()["field"] == field
    assert e.value.status == 422 and e.value.code == "recipient_not_allowed"


def test_a_caller_without_controls_may_not_email_text_telegram_nor_push() -> None:
    for spec in (email(), SmsSpec("+15551234567", "hi"), TelegramSpec(42, "hi"),
                 PushSpec("tok", "t", "b")):
        with pytest.raises(RecipientNotAllowed):
            vet_recipients(caller(RecipientPolicy()), plan(spec))
    inbox = plan(InboxSpec("ada", "t", "b"))  # the caller's own inbox
    assert vet_recipients(caller(RecipientPolicy()), inbox) == inbox


@pytest.mark.parametrize(("spec", "field"), [
    (TelegramSpec(43, "hi"), "channels[0].chatId"),
    (TelegramSpec("@someone_else", "hi"), "channels[0].chatId"),
    (PushSpec("another-device", "t", "b"), "channels[0].token"),
])
def test_a_chat_or_token_outside_the_callers_lists_is_refused(spec: ChannelSpec,
                                                              field: str) -> None:
    with pytest.raises(RecipientNotAllowed) as e:
        vet_recipients(caller(), plan(spec))
    assert e.value.to_json()["field"] == field
    assert "another-device" not in e.value.message  # a device's token is not echoed
    p = plan(TelegramSpec(42, "hi"), PushSpec("tok", "t", "b"))
    assert vet_recipients(caller(), p) == p


def test_an_email_to_more_recipients_than_a_days_budget_is_refused() -> None:
    three = email(("a@example.com", "b@example.com", "c@example.com"))
    with pytest.raises(RecipientNotAllowed) as e:
        vet_recipients(caller(), plan(PushSpec("tok", "t", "b"), three))
    assert e.value.to_json()["field"] == "channels[1]"
    assert "3 email recipients" in e.value.message and "of 2" in e.value.message
    with pytest.raises(RecipientNotAllowed) as e:  # two channels of a type count together
        vet_recipients(caller(), plan(email(), email(("b@example.com", "c@example.com"))))
    assert e.value.to_json()["field"] == "channels[1]"
    two = plan(email(("a@example.com", "b@example.com")))
    assert vet_recipients(caller(), two) == two


def test_sanitising_removes_scripts_and_handlers_and_keeps_formatting() -> None:
    clean = sanitise_html(HTML)
    for gone in ("<script", "alert", "onclick", "onmouseover", "onerror", "javascript:",
                 "steal"):
        assert gone not in clean
    for kept in ("<p>", "<b>you</b>", "<i>see</i>", 'href="https://example.com/x"', "this"):
        assert kept in clean


def test_an_untrusted_callers_html_is_stored_sanitised() -> None:
    vetted = vet_recipients(caller(), plan(email(html=HTML)))
    spec = vetted.channels[0]
    assert isinstance(spec, EmailSpec)
    assert spec.html == sanitise_html(HTML) and spec.text == "text"


def test_a_trusted_callers_html_is_unchanged() -> None:
    trusted = RecipientPolicy(("example.com",), trusted=True)
    p = plan(email(html=HTML))
    assert vet_recipients(caller(trusted), p) == p


class Gate:
    def __init__(self) -> None:
        self.clock = ManualClock(NOW_MS)
        self.budget = MemorySendBudget()
        self.metrics = InMemoryMetrics()
        self.gate = ChannelGate(self.budget, self.clock, self.metrics)

    def spend(self, kind: ChannelType, n: int, name: str = "shop") -> None:
        self.budget.counts[(name, kind.value, utc_day(self.clock.now_ms()))] = n


async def test_a_spent_budget_refuses_429_until_the_next_utc_day() -> None:
    g = Gate()
    g.spend(ChannelType.EMAIL, 1)
    assert await g.gate.vet(caller(), plan(email())) is not None  # one send left
    g.spend(ChannelType.EMAIL, 2)
    with pytest.raises(QuotaExceeded) as e:
        await g.gate.vet(caller(), plan(PushSpec("tok", "t", "b"), email()))
    assert e.value.code == "quota_exceeded" and "email" in e.value.message
    assert e.value.headers() == {"Retry-After": "6400"}
    g.clock.advance_ms(6_400_000)  # midnight: a new day's count
    assert await g.gate.vet(caller(), plan(email())) is not None


async def test_registration_needs_a_budget_left_for_every_recipient() -> None:
    g = Gate()
    two = plan(email(("a@example.com", "b@example.com")))
    assert await g.gate.vet(caller(), two) is not None
    g.spend(ChannelType.EMAIL, 1)  # one left: enough for one address, not for two
    assert await g.gate.vet(caller(), plan(email())) is not None
    with pytest.raises(QuotaExceeded) as e:
        await g.gate.vet(caller(), two)
    assert "has not 2 left" in e.value.message


async def test_a_zero_budget_refuses_at_once_and_other_channels_are_not_limited() -> None:
    g = Gate()
    with pytest.raises(QuotaExceeded):
        await g.gate.vet(caller(), plan(SmsSpec("+15551234567", "hi")))
    g.spend(ChannelType.PUSH, 10**6)  # push has no budget: never refused
    assert await g.gate.vet(caller(), plan(PushSpec("tok", "t", "b"))) is not None


async def test_budgets_are_per_caller() -> None:
    g = Gate()
    g.spend(ChannelType.EMAIL, 2, name="other")
    assert await g.gate.vet(caller(), plan(email())) is not None


async def test_registration_only_reads_the_count() -> None:
    g = Gate()
    for _ in range(5):
        await g.gate.vet(caller(), plan(email()))
    assert g.budget.counts == {}


async def test_redis_failing_lets_the_registration_through() -> None:
    g = Gate()
    g.budget.fail = True
    assert await g.gate.vet(caller(), plan(email())) is not None
    assert g.metrics.snapshot()["budget_errors_total"] == 1


async def test_recipients_are_checked_before_the_budget() -> None:
    g = Gate()
    g.spend(ChannelType.EMAIL, 2)
    with pytest.raises(RecipientNotAllowed):
        await g.gate.vet(caller(), plan(email(("x@evil.test",))))
