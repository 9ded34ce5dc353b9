"""Recipient controls of the callers file (config/recipient_controls.py): which email domains and
SMS country codes a caller may send to, its daily budgets, and the safe default."""

from __future__ import annotations

from pathlib import Path

import pytest

from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.recipient_controls import RecipientPolicy, parse_recipients
from trigger_service.core.errors import ConfigError
from trigger_service.core.notify.channels import ChannelType

DEV_FILE = Path(__file__).resolve().parents[3] / "config" / "callers.dev.toml"
POLICY = RecipientPolicy(("example.com", "*.example.org"), ("1", "44"))


@pytest.mark.parametrize("address", ["a@example.com", "A@EXAMPLE.COM", "a@Example.Com.",
                                     "x@mail.example.org", "x@a.b.example.org"])
def test_listed_domains_and_subdomains_of_a_wildcard_are_allowed(address: str) -> None:
    assert POLICY.email_refusal(address) is None


@pytest.mark.parametrize("address", ["a@example.org", "a@evilexample.org", "a@example.com.evil",
                                     "a@sub.example.com", "a@example.net",
                                     "a@example.org.evil.test"])
def test_other_domains_are_refused(address: str) -> None:
    # example.org itself is not under "*.example.org"; example.com's subdomains are not
    # "example.com"; a suffix that is not a whole label does not count.
    why = POLICY.email_refusal(address)
    assert why is not None and "not one of this caller's email domains" in why


def test_without_email_domains_no_address_is_allowed() -> None:
    why = RecipientPolicy().email_refusal("a@example.com")
    assert why is not None and "may not send email" in why


def test_a_star_allows_any_domain_and_any_number() -> None:
    anything = RecipientPolicy(("*",), ("*",))
    assert anything.email_refusal("a@whatever.example") is None
    assert anything.sms_refusal("+8613800138000") is None


@pytest.mark.parametrize(("number", "allowed"), [
    ("+15551234567", True), ("+447911123456", True), ("+4915112345678", False),
    ("+4411", True), ("+8613800138000", False), ("+35312345678", False)])
def test_country_codes_match_the_start_of_the_number(number: str, allowed: bool) -> None:
    assert (POLICY.sms_refusal(number) is None) is allowed


def test_without_country_codes_no_number_is_allowed() -> None:
    why = RecipientPolicy().sms_refusal("+15551234567")
    assert why is not None and "may not send SMS" in why


def test_the_table_is_parsed_with_budgets_and_trust() -> None:
    policy = parse_recipients({"email_domains": ["Example.COM", "*.Example.org"],
                               "sms_country_codes": ["1"], "trusted": True,
                               "daily_budget": {"email": 1000, "sms": 0}}, "callers.x")
    assert policy.email_domains == ("example.com", "*.example.org")
    assert policy.trusted
    assert policy.budget_of(ChannelType.EMAIL) == 1000
    assert policy.budget_of(ChannelType.SMS) == 0
    assert policy.budget_of(ChannelType.PUSH) is None


@pytest.mark.parametrize(("table", "key"), [
    ({"email_domains": "example.com"}, "email_domains"),
    ({"email_domains": ["exa mple.com"]}, "email_domains"),
    ({"email_domains": ["*example.com"]}, "email_domains"),
    ({"email_domains": ["a.*.example.com"]}, "email_domains"),
    ({"sms_country_codes": ["+44"]}, "sms_country_codes"),
    ({"sms_country_codes": ["4444"]}, "sms_country_codes"),
    ({"sms_country_codes": [44]}, "sms_country_codes"),
    ({"trusted": "yes"}, "trusted"),
    ({"daily_budget": 5}, "daily_budget"),
    ({"daily_budget": {"fax": 5}}, "daily_budget.fax"),
    ({"daily_budget": {"sms": -1}}, "daily_budget.sms"),
    ({"daily_budget": {"sms": True}}, "daily_budget.sms"),
    ({"telegram_chats": 123}, "telegram_chats"),
    ({"telegram_chats": [0]}, "telegram_chats"),
    ({"telegram_chats": ["123"]}, "telegram_chats"),
    ({"telegram_chats": ["@no"]}, "telegram_chats"),
    ({"telegram_chats": [True]}, "telegram_chats"),
    ({"push_tokens": "tok"}, "push_tokens"),
    ({"push_tokens": [""]}, "push_tokens"),
    ({"push_tokens": [" tok"]}, "push_tokens"),
    ({"push_tokens": [5]}, "push_tokens"),
])
def test_a_bad_value_names_its_key(table: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"callers\.x\.{key}"):
        parse_recipients(table, "callers.x")


def test_telegram_chats_and_push_tokens_are_parsed_and_matched() -> None:
    policy = parse_recipients({"telegram_chats": [123456789, -1001234567890, "@Shop_News"],
                               "push_tokens": ["dEv:APA91b-x"]}, "callers.x")
    for chat in (123456789, -1001234567890, "@shop_news", "@SHOP_NEWS"):
        assert policy.telegram_refusal(chat) is None
    for chat in (12345678, 1001234567890, "@shop_news2"):
        why = policy.telegram_refusal(chat)
        assert why is not None and "telegram_chats" in why
    assert policy.push_refusal("dEv:APA91b-x") is None
    why = policy.push_refusal("dev:apa91b-x")  # a token is matched exactly
    assert why is not None and "dev:apa91b-x" not in why
    anything = parse_recipients({"telegram_chats": ["*"], "push_tokens": ["*"]}, "callers.x")
    assert anything.telegram_refusal(-42) is None and anything.push_refusal("t") is None


def test_a_caller_without_the_settings_may_neither_email_nor_text() -> None:
    registry = CallerRegistry.from_mapping({"callers": {"plain": {
        "token_sha256": hash_token("t"), "callback_prefixes": ["https://a.example/"]}}})
    caller = registry.by_name("plain")
    assert caller is not None
    assert caller.recipients.email_refusal("a@a.example") is not None
    assert caller.recipients.sms_refusal("+15551234567") is not None
    assert "no telegram_chats" in (caller.recipients.telegram_refusal(123456789) or "")
    assert "no push_tokens" in (caller.recipients.push_refusal("tok") or "")
    assert not caller.recipients.trusted


def test_the_callers_file_carries_a_callers_controls() -> None:
    registry = CallerRegistry.from_mapping({"callers": {"shop": {
        "token_sha256": hash_token("t"), "callback_prefixes": ["https://a.example/"],
        "email_domains": ["shop.example"], "daily_budget": {"email": 3}}}})
    caller = registry.by_name("shop")
    assert caller is not None
    assert caller.recipients.email_refusal("a@shop.example") is None
    assert caller.recipients.budget_of(ChannelType.EMAIL) == 3


def test_the_development_file_lets_dev_send_anywhere() -> None:
    dev = CallerRegistry.load(DEV_FILE).by_name("dev")
    assert dev is not None
    assert dev.recipients.email_refusal("someone@anywhere.example") is None
    assert dev.recipients.sms_refusal("+4915112345678") is None
    assert dev.recipients.telegram_refusal(123456789) is None
    assert dev.recipients.push_refusal("any-device-token") is None
