"""A trigger's channels against its caller's recipient controls (app/recipients.py), on the
fakes: refused recipients, HTML sanitised unless trusted, daily budgets at registration."""

from __future__ import annotations

import pytest

from trigger_service.adapters.memory.limits import MemorySendBudget
from trigger_service.app.recipients import ChannelGate, vet_recipients
from trigger_service.config.callers import CallbackPrefix, Caller
from trigger_service.config.recipients import RecipientPolicy, sanitise_html
from trigger_service.core.errors import QuotaExceeded, RecipientNotAllowed
from trigger_service.core.notify.channels import ChannelType, EmailSpec, PushSpec, SmsSpec
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports.limit import utc_day
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: 6,400 s before the next UTC midnight
POLICY = RecipientPolicy(("example.com", "*.example.org"), ("1",),
                         ((ChannelType.EMAIL, 2), (ChannelType.SMS, 0)))
HTML = ('<p onclick="steal()">Hello <b>you</b>, <i>see</i> <a href="https://example.com/x" '
        'onmouseover="x()">this</a><script>alert(1)</script><img src="x" onerror="y()"></p>'
        '<a href="javascript:alert(1)">bad</a>')


def caller(policy: RecipientPolicy = POLICY, name: str = "shop") -> Caller:
    return Caller(name, ("a" * 64,), (CallbackPrefix.parse("https://shop.example/"),),
                  recipients=policy)


def email(to: tuple[str, ...] = ("a@example.com",), reply_to: str | None = None,
          html: str | None = None) -> EmailSpec:
    return EmailSpec(to, "subject", "text", html, reply_to)


def plan(*channels: EmailSpec | SmsSpec | PushSpec) -> DeliveryPlan:
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


def test_a_caller_without_controls_may_not_email_nor_text() -> None:
    for spec in (email(), SmsSpec("+15551234567", "hi")):
        with pytest.raises(RecipientNotAllowed):
            vet_recipients(caller(RecipientPolicy()), plan(spec))
    push = plan(PushSpec("tok", "t", "b"))
    assert vet_recipients(caller(RecipientPolicy()), push) == push


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
