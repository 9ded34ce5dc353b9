"""Acknowledgements: the LWT against a step being sent, idempotence, signed links."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.app.support import NOW_MS, Env, make_env, request
from trigger_service.core.errors import InvalidRequest, NotEditable, NotFound
from trigger_service.core.model import Status
from trigger_service.core.notify.ack_links import key_id, make_token, read_token
from trigger_service.core.notify.channels import SmsSpec
from trigger_service.core.notify.plan import DeliveryPlan

PLAN = DeliveryPlan((SmsSpec("+4915112345678", "go"),))


async def with_channels(env: Env) -> str:
    r = await env.service.register_planned("orders", replace(request(env, 60_000), plan=PLAN),
                                           None, "h")
    return r.trigger_id


async def test_ack_bumps_the_revision_so_a_stale_claim_loses() -> None:
    env = make_env()
    tid = await with_channels(env)
    before = env.store.triggers[tid]
    acked = await env.service.ack("orders", tid, None)
    assert acked.acked and acked.revision == (before.revision or 0) + 1
    claimed = replace(before, status=Status.IN_FLIGHT, claim_id="c", attempts=1)
    assert not await env.store.compare_and_set(before, claimed)  # the dispatcher's stale copy
    assert (await env.service.ack("orders", tid, None)) == acked  # idempotent
    with pytest.raises(NotFound):
        await env.service.ack("billing", tid, None)


async def test_ack_waits_for_a_step_in_flight() -> None:
    env = make_env()
    tid = await with_channels(env)
    t = env.store.triggers[tid]
    env.store.triggers[tid] = replace(t, status=Status.IN_FLIGHT, claim_id="c", attempts=1)
    task = asyncio.ensure_future(env.service.ack("orders", tid, None))
    for _ in range(5):
        await asyncio.sleep(0)
        env.clock.advance_ms(25)
    assert not task.done()
    env.store.triggers[tid] = replace(t, status=Status.PENDING, attempts=1)  # the step finished
    for _ in range(10):
        await asyncio.sleep(0)
        env.clock.advance_ms(25)
    assert (await task).acked


async def test_ack_of_a_trigger_without_channels_or_a_future_occurrence() -> None:
    env = make_env()
    plain = (await env.service.register_planned("orders", request(env, 60_000), None,
                                                "h")).trigger_id
    with pytest.raises(NotEditable):
        await env.service.ack("orders", plain, None)
    tid = await with_channels(env)
    with pytest.raises(NotFound):
        await env.service.ack("orders", tid, 5)


def test_links_round_trip_and_refuse_forgery_and_expiry() -> None:
    token = make_token("k", "trg_X", 3, NOW_MS + 60_000)
    assert read_token("k", token, NOW_MS) == ("trg_X", 3)
    for bad in (token + "x", token.replace(".", ".A", 1), "garbage", ""):
        with pytest.raises(InvalidRequest):
            read_token("k", bad, NOW_MS)
    with pytest.raises(InvalidRequest):
        read_token("other-key", token, NOW_MS)
    with pytest.raises(InvalidRequest, match="expired"):
        read_token("k", token, NOW_MS + 61_000)


def test_a_rotated_key_still_verifies_its_links_and_signs_none() -> None:
    old, new = "old-key-" * 4, "new-key-" * 4
    before = make_token(old, "trg_X", 1, NOW_MS + 60_000)
    after = make_token(new, "trg_X", 2, NOW_MS + 60_000)
    assert before.split(".")[0] == key_id(old) != key_id(new) == after.split(".")[0]
    # Rotated: new current, old previous. Both links work; the old key is only read.
    assert read_token(new, before, NOW_MS, previous=(old,)) == ("trg_X", 1)
    assert read_token(new, after, NOW_MS, previous=(old,)) == ("trg_X", 2)
    # The old key dropped: its links stop, the same answer as a forgery.
    with pytest.raises(InvalidRequest, match="not a valid"):
        read_token(new, before, NOW_MS)
    # A link naming the old key but signed with another is no link, whatever it names.
    kid, body, _sig = before.split(".")
    forged = f"{kid}.{body}.{_legacy_sig('other', f'{kid}.{body}')}"
    with pytest.raises(InvalidRequest):
        read_token(new, forged, NOW_MS, previous=(old,))
    with pytest.raises(InvalidRequest):
        read_token(new, "a.b.c.d", NOW_MS, previous=(old,))


def _legacy_sig(secret: str, body: str) -> str:
    digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()[:20]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def test_a_link_from_before_key_ids_verifies_under_the_current_key_only() -> None:
    body = base64.urlsafe_b64encode(f"trg_X.4.{(NOW_MS + 60_000) // 1000}".encode())
    body_text = body.decode().rstrip("=")
    legacy = f"{body_text}.{_legacy_sig('k', body_text)}"  # what make_token made before
    assert read_token("k", legacy, NOW_MS, previous=("p",)) == ("trg_X", 4)
    with pytest.raises(InvalidRequest):
        read_token("new", legacy, NOW_MS, previous=("k",))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=600), st.sampled_from(["", ".", "..", ".a.b"]))
def test_any_text_is_a_link_or_a_bad_link(text: str, tail: str) -> None:
    """Never anything but ``InvalidRequest`` (``compare_digest`` raised ``TypeError`` on a
    non-ASCII key id), whatever a browser puts in the path."""
    with pytest.raises(InvalidRequest, match="not a valid"):
        read_token("k", text + tail, NOW_MS, previous=("p",))
    with pytest.raises(InvalidRequest, match="not a valid"):
        read_token("k", "é" + tail, NOW_MS)
