"""The short-delay path end to end: API → Cassandra → SQS → dispatcher → callback."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from dispatcher.succession import incarnation_of
from tests.integration.conftest import SIGNING_SECRETS, Stack
from tests.integration.helpers import dispatcher_process, sigkill
from trigger_service.core.model import Status
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.timing import parse_rfc3339_ms

pytestmark = pytest.mark.integration


async def get(stack: Stack, tid: str) -> dict:  # type: ignore[type-arg]
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200
    return await resp.json()  # type: ignore[no-any-return]


async def test_delivered_on_time_never_early(stack: Stack) -> None:
    await stack.start_dispatcher()
    ids = {}
    for delay in (0.5, 1.25, 2.0, 3.333):
        _, body, _ = await stack.post(stack.body(delaySeconds=delay, payload={"d": delay}))
        ids[body["triggerId"]] = parse_rfc3339_ms(body["fireAt"])
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.arrivals) >= 4, 20)
    for a in rec.arrivals:
        fire_at = ids[a.trigger_id]
        assert a.at_ms >= fire_at, "delivered early"
        assert a.attempt == 1
        assert a.headers["X-Trigger-Id"] == a.trigger_id
        assert a.body["triggerId"] == a.trigger_id and parse_rfc3339_ms(a.body["fireAt"]) == fire_at
        assert a.body["payload"] == {"d": pytest.approx(a.body["payload"]["d"])}
    assert len(rec.arrivals) == 4
    for tid in ids:
        t = await stack.wait_status(tid, "FIRED")
        assert t["status"] == "FIRED" and t["attempts"] == 1 and t["firedAt"] is not None


async def test_past_fire_at_fires_at_once(stack: Stack) -> None:
    await stack.start_dispatcher()
    t0 = time.time()
    status, body, _ = await stack.post(stack.body(fireAt="2001-01-01T00:00:00Z"))
    assert status == 201
    assert parse_rfc3339_ms(body["fireAt"]) >= int(t0 * 1000) - 5
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(body["triggerId"])), 10)


async def test_cancel_before_fire_is_never_delivered(stack: Stack) -> None:
    d = await stack.start_dispatcher()
    _, keep, _ = await stack.post(stack.body(delaySeconds=2))
    _, body, _ = await stack.post(stack.body(delaySeconds=2))
    resp = await stack.client.delete(f"/v1/triggers/{body['triggerId']}", headers=stack.auth())
    assert resp.status == 200
    rec = stack.receiver
    # Wait until the other trigger (same fire time) is delivered, then a bit more.
    assert await rec.wait_for(lambda: bool(rec.for_trigger(keep["triggerId"])), 15)
    await asyncio.sleep(1.5)
    assert rec.for_trigger(body["triggerId"]) == []
    assert (await get(stack, body["triggerId"]))["status"] == "CANCELLED"
    # Lazy cancel: the dispatcher dropped the cancelled message instead of delivering it.
    assert await rec.wait_for(lambda: d.dispatcher.inflight == 0, 5)


async def test_retries_then_delivers_with_attempt_three(stack: Stack) -> None:
    await stack.start_dispatcher()
    _, body, _ = await stack.post(stack.body(delaySeconds=0.2))
    tid = body["triggerId"]
    stack.receiver.script[tid] = [500, 500, 200]
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 3, 30)
    assert [a.attempt for a in rec.for_trigger(tid)] == [1, 2, 3]
    gaps = [b.at_ms - a.at_ms for a, b in zip(rec.for_trigger(tid), rec.for_trigger(tid)[1:],
                                               strict=False)]
    assert all(g >= 1000 for g in gaps), gaps  # backoff 1 s honoured, never early
    t = await stack.wait_status(tid, "FIRED")
    assert t["status"] == "FIRED" and t["attempts"] == 3


async def test_exhausted_attempts_fail_to_the_dlq_and_stop(stack: Stack) -> None:
    await stack.start_dispatcher()
    stack.receiver.default_status = 503
    _, body, _ = await stack.post(stack.body(delaySeconds=0))
    tid = body["triggerId"]
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 3, 30)
    t = await stack.wait_status(tid, "FAILED")
    assert t["status"] == "FAILED" and t["attempts"] == 3 and t["lastError"] == "HTTP 503"
    dlq = await stack.sqs.dlq_bodies()
    assert [m["triggerId"] for m in dlq] == [tid] and dlq[0]["reason"] == "HTTP 503"
    await asyncio.sleep(2.5)
    assert len(rec.for_trigger(tid)) == 3  # no fourth attempt
    resp = await stack.client.delete(f"/v1/triggers/{tid}", headers=stack.auth())
    body = await resp.json()
    assert resp.status == 409 and body["error"] == "not_cancellable" and body["status"] == "FAILED"


async def test_timeouts_and_connection_errors_count_as_failed_attempts(stack: Stack) -> None:
    await stack.start_dispatcher()
    _, body, _ = await stack.post(stack.body(delaySeconds=0))
    tid = body["triggerId"]
    stack.receiver.script[tid] = ["hang", 200]
    stack.receiver.hang_s = 3  # longer than TRIGGER_DISPATCH_CALLBACK_TIMEOUT_S=2
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 2, 30)
    assert [a.attempt for a in rec.for_trigger(tid)] == [1, 2]
    t = await stack.wait_status(tid, "FIRED")
    assert t["status"] == "FIRED" and t["attempts"] == 2


async def test_duplicate_messages_deliver_once(stack: Stack) -> None:
    """Two dispatchers and three copies of one message: one claim wins, the rest drop."""
    d1 = await stack.start_dispatcher()
    d2 = await stack.start_dispatcher()
    _, body, _ = await stack.post(stack.body(delaySeconds=1))
    tid, fire_at = body["triggerId"], parse_rfc3339_ms(body["fireAt"])
    await stack.runtime.queue.send_many([OutgoingMessage(tid, fire_at, 0)] * 2)
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(tid)), 10)

    def duplicates() -> int:
        return sum(d.metrics.snapshot().get("duplicate_messages_total", 0) for d in (d1, d2))

    # A copy that arrives while the winner is delivering waits until the claim could be
    # stale (about 4 s here), then finds the trigger FIRED; each copy is counted once.
    assert await rec.wait_for(lambda: duplicates() >= 2, 15)
    await asyncio.sleep(1)
    assert duplicates() == 2
    assert len(rec.for_trigger(tid)) == 1


async def test_dispatcher_killed_mid_flight_still_delivers(stack: Stack) -> None:
    """SIGKILL a dispatcher process while its callback is in flight: a new dispatcher takes
    the stale claim over and delivers (attempt 2)."""
    env = {**os.environ, **stack.env, "TRIGGER_DISPATCH_RECEIVERS": "1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        _, body, _ = await stack.post(stack.body(delaySeconds=1))
        tid = body["triggerId"]
        stack.receiver.script[tid] = ["hang", 200]
        stack.receiver.hang_s = 10  # outlasts the SIGKILL below; short so teardown is quick
        rec = stack.receiver
        arrived = await rec.wait_for(lambda: bool(rec.for_trigger(tid)), 60)
        if not arrived:
            proc.kill()
            out, _ = await proc.communicate()
            raise AssertionError(f"never delivered; dispatcher said:\n{out.decode()}")
        t = await get(stack, tid)
        assert t["status"] == "IN_FLIGHT" and t["attempts"] == 1
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    d = await stack.start_dispatcher()
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 2, 30)
    assert [a.attempt for a in rec.for_trigger(tid)] == [1, 2]
    t = await stack.wait_status(tid, "FIRED")
    assert t["status"] == "FIRED"
    assert d.metrics.snapshot().get("claim_takeovers_total") == 1


async def test_a_killed_dispatchers_successor_proves_it_dead_and_its_claim_is_taken_at_once(
        stack: Stack, tmp_path: Path) -> None:
    """SIGKILL a dispatcher process (with a slot file) while its callback is in flight; its
    successor locks the slot, finds the dead one's incarnation there and declares it dead:
    the claim is taken over when its message comes back, without a lease's watch first."""
    slot = str(tmp_path / "dispatcher-1.slot")
    env = {**os.environ, **stack.env, "TRIGGER_DISPATCH_RECEIVERS": "1",
           "TRIGGER_DISPATCH_SLOT_FILE": slot, "TRIGGER_DISPATCH_METRICS_PORT": "0"}
    rec = stack.receiver
    async with dispatcher_process(env) as proc:
        _, body, _ = await stack.post(stack.body(delaySeconds=1))
        tid = body["triggerId"]
        rec.script[tid] = ["hang", 200]
        rec.hang_s = 10
        assert await rec.wait_for(lambda: bool(rec.for_trigger(tid)), 60)
        await sigkill(proc)
    row = await stack.runtime.store.get(tid)
    assert row is not None and row.status is Status.IN_FLIGHT
    d = await stack.start_dispatcher(slot_file=slot)
    assert d.dispatcher.succession is not None and d.dispatcher.succession.slot is not None
    assert d.dispatcher.succession.slot.predecessor == incarnation_of(row.claim_id)
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 2, 45)
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"
    got = d.metrics.snapshot()
    assert got.get("dispatcher_deaths_declared_total", 0) >= 1
    assert got.get("claim_takeovers_total") == got.get("claim_takeovers_proved_dead_total") == 1


async def test_callbacks_are_signed_for_every_key_of_a_rotation(stack: Stack) -> None:
    """Standard Webhooks: a receiver holding either the new or the old secret verifies, with
    the standardwebhooks library itself; a tampered body fails."""
    await stack.start_dispatcher()
    status, body, _ = await stack.post(stack.body(delaySeconds=0, payload={"sign": "me"}))
    assert status == 201
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(body["triggerId"])), 10)
    arrival = rec.for_trigger(body["triggerId"])[0]
    raw = arrival.raw
    headers = {k.lower(): v for k, v in arrival.headers.items()}
    assert headers["webhook-id"] == arrival.body["occurrenceId"]
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in SIGNING_SECRETS:
        assert Webhook(secret).verify(raw, headers)["payload"] == {"sign": "me"}
    with pytest.raises(WebhookVerificationError):
        Webhook(SIGNING_SECRETS[0]).verify(raw.replace("me", "you"), headers)


async def test_410_is_one_attempt_and_retry_after_is_honoured(stack: Stack) -> None:
    await stack.start_dispatcher()
    rec = stack.receiver
    _, gone, _ = await stack.post(stack.body(delaySeconds=2))  # time to script the answers
    _, slow, _ = await stack.post(stack.body(delaySeconds=2))
    rec.script[gone["triggerId"]] = [410]
    rec.script[slow["triggerId"]] = ["429:4"]  # the backoff here is 1 s
    assert await rec.wait_for(lambda: len(rec.for_trigger(slow["triggerId"])) >= 2, 20)
    first, second = rec.for_trigger(slow["triggerId"])[:2]
    assert second.at_ms - first.at_ms >= 4_000
    view = await stack.wait_status(gone["triggerId"], "FAILED")
    assert view["status"] == "FAILED" and view["attempts"] == 1
    assert len(rec.for_trigger(gone["triggerId"])) == 1
    dead = [b for b in await stack.sqs.dlq_bodies() if b["triggerId"] == gone["triggerId"]]
    assert dead and dead[0]["reason"] == "gone: HTTP 410"


async def test_a_rotated_secret_signs_beside_the_old_one(stack: Stack) -> None:
    resp = await stack.client.post("/v1/signing-secrets/rotate", headers=stack.auth())
    rotated = await resp.json()
    assert resp.status == 201 and rotated["secret"].startswith("whsec_")
    await stack.start_dispatcher()  # reads the secrets now
    status, body, _ = await stack.post(stack.body(delaySeconds=0))
    assert status == 201
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(body["triggerId"])), 10)
    arrival = rec.for_trigger(body["triggerId"])[0]
    headers = {k.lower(): v for k, v in arrival.headers.items()}
    assert len(headers["webhook-signature"].split(" ")) == 3  # new, then the file's two
    for secret in (rotated["secret"], *SIGNING_SECRETS):
        Webhook(secret).verify(arrival.raw, headers)
    other = await stack.client.get(f"/v1/triggers/{body['triggerId']}", headers=stack.auth())
    assert rotated["secret"] not in await other.text()  # shown once, never again
