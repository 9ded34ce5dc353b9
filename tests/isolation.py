"""Tenant isolation as one table, run on the in-memory fakes
(tests/unit/http/test_tenant_isolation.py) and on the real stack
(tests/integration/test_tenant_isolation.py).

For every route with a ``{...}`` in its path, caller B using caller A's real ids gets exactly
what an unknown id of the same shape gets (the same status, the same body; an error's message
may differ only by the id itself), and A's data reads the same afterwards. ``uncovered``
lists the app's routes that have a ``{...}`` and neither a case nor a reason to be exempt,
so a new endpoint cannot be forgotten.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from ulid import ULID

from trigger_service.core.dead_letters import DeadLetter, DeadLetterReason
from trigger_service.core.model import new_trigger_id
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.notify.inbox import message_for
from trigger_service.core.time.timing import DAY_MS, format_rfc3339_ms
from trigger_service.platform.wiring import Runtime

RECIPIENT = "ada"
SECRET = "only-for-A"  # in A's payload and message: never in anything B gets
TAG = "tenant-a"  # A's trigger's tag: B's listing by it holds nothing
SUBSCRIPTION = "a-events"  # A's event subscription's name


@dataclass
class Tenants:
    """Two callers of one API: A owns the data, B tries A's ids."""

    client: TestClient  # type: ignore[type-arg]
    runtime: Runtime
    a_caller: str
    a_token: str
    b_token: str
    callback_url: str

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Ids:
    trigger: str
    dead_letter: str
    job: str
    recipient: str
    message: str
    trigger_job: str
    subscription: str


async def seed(t: Tenants) -> Ids:
    """A's trigger (with an inbox channel), a bulk replay job, a dead letter and an inbox
    message: real rows, written through the API where it can write them."""
    resp = await t.client.post("/v1/triggers", headers=t.auth(t.a_token), json={
        "callbackUrl": t.callback_url, "delaySeconds": 3600, "payload": {"tenant": SECRET},
        "tags": [TAG],
        "channels": [{"type": "inbox", "recipient": RECIPIENT, "title": SECRET, "body": "b"}]})
    assert resp.status == 201, await resp.text()
    view = await (await t.client.get(f"/v1/triggers/{(await resp.json())['triggerId']}",
                                     headers=t.auth(t.a_token))).json()
    trigger_id = view["triggerId"]
    now_ms = t.runtime.clock.now_ms()
    # The job first, over a window two days back (within the retention) with one letter
    # whose trigger is gone (an empty job is refused): it fails that item at once and never
    # replays A's letter below.
    old_ms = now_ms - 2 * DAY_MS
    old_id = new_trigger_id(old_ms)
    await t.runtime.store.put_dead_letter(DeadLetter(
        f"{old_id}.1", old_id, t.a_caller, DeadLetterReason.MAX_ATTEMPTS, "HTTP 500", 3,
        old_ms, old_ms, t.callback_url), 3600)
    resp = await t.client.post("/v1/dead-letters/replay", headers=t.auth(t.a_token), json={
        "since": format_rfc3339_ms(old_ms - 3_600_000),
        "until": format_rfc3339_ms(old_ms + 3_600_000)})
    assert resp.status == 202, await resp.text()
    job_id = (await resp.json())["jobId"]
    for _ in range(200):  # it has nothing to do: done at once, and then it never changes
        job = await (await t.client.get(f"/v1/dead-letters/replay/{job_id}",
                                         headers=t.auth(t.a_token))).json()
        if job["status"] == "done":
            break
        await asyncio.sleep(0.05)
    letter = DeadLetter(f"{trigger_id}.1", trigger_id, t.a_caller,
                        DeadLetterReason.MAX_ATTEMPTS, "HTTP 500", 3, now_ms, now_ms,
                        t.callback_url)
    await t.runtime.store.put_dead_letter(letter, 3600)
    occurrence = OccurrenceNotice(trigger_id, f"{trigger_id}.1", t.a_caller, 0, now_ms)
    message = message_for(InboxSpec(RECIPIENT, SECRET, "body", None), occurrence, now_ms)
    assert await t.runtime.store.put_inbox_message(message, 3600) is not None
    resp = await t.client.put(f"/v1/recipients/{RECIPIENT}", headers=t.auth(t.a_token),
                              json={"timeZone": "Europe/Berlin", "locale": "de-DE"})
    assert resp.status in (200, 201), await resp.text()
    # A job over triggers by filter matching none of A's (done at once, then unchanging).
    resp = await t.client.post("/v1/triggers/jobs", headers=t.auth(t.a_token), json={
        "action": "cancel", "filter": {"tag": "none-of-these"}})
    assert resp.status == 202, await resp.text()
    trigger_job = (await resp.json())["jobId"]
    resp = await t.client.put(f"/v1/event-subscriptions/{SUBSCRIPTION}",
                              headers=t.auth(t.a_token),
                              json={"url": t.callback_url, "events": ["trigger.dead_lettered"]})
    assert resp.status in (200, 201), await resp.text()
    return Ids(trigger_id, letter.id, job_id, RECIPIENT, message.message_id, trigger_job,
               SUBSCRIPTION)


def unknown_ids(now_ms: int) -> Ids:
    """Ids of the same shapes that nobody has."""
    trigger_id = new_trigger_id(now_ms)
    return Ids(trigger_id, f"{trigger_id}.1", f"job_{ULID()}", f"nobody-{uuid.uuid4().hex[:8]}",
               message_for(InboxSpec("x", "t", "b", None),
                           OccurrenceNotice(trigger_id, f"{trigger_id}.1", "x", 0, now_ms),
                           now_ms).message_id, f"tjob_{ULID()}",
               f"nobody-{uuid.uuid4().hex[:8]}")


async def a_view(t: Tenants, ids: Ids) -> list[Any]:
    """What A reads of its data: must not change while B tries A's ids."""
    views = []
    for path in (f"/v1/triggers/{ids.trigger}", f"/v1/dead-letters/{ids.dead_letter}",
                 f"/v1/dead-letters/replay/{ids.job}", f"/v1/inbox/{ids.recipient}",
                 f"/v1/triggers/jobs/{ids.trigger_job}", f"/v1/recipients/{ids.recipient}"):
        resp = await t.client.get(path, headers=t.auth(t.a_token))
        assert resp.status == 200, (path, await resp.text())
        views.append(await resp.json())
    resp = await t.client.get("/v1/event-subscriptions", headers=t.auth(t.a_token))
    views.append(await resp.json())
    views.append(await t.runtime.store.secrets(t.a_caller, 100))
    return views


Answer = tuple[int, str, Any]  # status, content type, body (JSON, or the text read)
Request = Callable[[Tenants, Ids], Awaitable[Answer]]


async def _answer(resp: Any) -> Answer:
    if resp.content_type == "application/json":
        return resp.status, resp.content_type, await resp.json()
    return resp.status, resp.content_type, await resp.text()


def call(method: str, path: str, body: object = None) -> Request:
    """B's request to ``path`` (``{trigger}``, ``{dead_letter}``... from the ids given)."""

    async def request(t: Tenants, ids: Ids) -> Answer:
        url = path.format(**vars(ids))
        # "{callback}" in a body is the tenants' callback URL (under both callers' prefixes).
        kwargs: dict[str, Any] = {} if body is None else {
            "data": json.dumps(body).replace("{callback}", t.callback_url)}
        headers = t.auth(t.b_token) | ({"Content-Type": "application/json"} if body else {})
        return await _answer(await t.client.request(method, url, headers=headers, **kwargs))

    return request


def stream(path: str) -> Request:
    """B's event stream, resumed after A's message (the replay reads the store): whatever
    arrives within half a second, then B goes."""

    async def request(t: Tenants, ids: Ids) -> Answer:
        headers = t.auth(t.b_token) | {"Last-Event-ID": ids.message}
        resp = await t.client.get(path.format(**vars(ids)), headers=headers)
        received = b""
        try:
            while True:
                received += await asyncio.wait_for(resp.content.readany(), timeout=0.5)
        except TimeoutError:
            pass
        finally:
            resp.close()
        return resp.status, resp.content_type, received.decode()

    return request


# (method, route as the router names it) -> B's request with an id in it.
CASES: dict[tuple[str, str], Request] = {
    ("GET", "/v1/triggers/{id}"): call("GET", "/v1/triggers/{trigger}"),
    ("DELETE", "/v1/triggers/{id}"): call("DELETE", "/v1/triggers/{trigger}"),
    ("PATCH", "/v1/triggers/{id}"): call("PATCH", "/v1/triggers/{trigger}",
                                         {"delaySeconds": 60}),
    ("POST", "/v1/triggers/{id}/snooze"): call("POST", "/v1/triggers/{trigger}/snooze",
                                               {"delaySeconds": 60}),
    ("POST", "/v1/triggers/{id}/ack"): call("POST", "/v1/triggers/{trigger}/ack"),
    ("POST", "/v1/triggers/{id}/pause"): call("POST", "/v1/triggers/{trigger}/pause"),
    ("POST", "/v1/triggers/{id}/run"): call("POST", "/v1/triggers/{trigger}/run"),
    ("GET", "/v1/triggers/{id}/attempts"): call("GET", "/v1/triggers/{trigger}/attempts"),
    ("POST", "/v1/triggers/{id}/backfill"): call(
        "POST", "/v1/triggers/{trigger}/backfill",
        {"from": "2020-01-01T00:00:00Z", "to": "2020-01-02T00:00:00Z"}),
    ("POST", "/v1/triggers/{id}/resume"): call("POST", "/v1/triggers/{trigger}/resume",
                                               {"policy": "none"}),
    ("GET", "/v1/dead-letters/{id}"): call("GET", "/v1/dead-letters/{dead_letter}"),
    ("POST", "/v1/dead-letters/{id}/replay"): call("POST",
                                                   "/v1/dead-letters/{dead_letter}/replay"),
    ("DELETE", "/v1/dead-letters/{id}"): call("DELETE", "/v1/dead-letters/{dead_letter}"),
    ("GET", "/v1/dead-letters/replay/{job}"): call("GET", "/v1/dead-letters/replay/{job}"),
    ("GET", "/v1/triggers/jobs/{jobId}"): call("GET", "/v1/triggers/jobs/{trigger_job}"),
    ("GET", "/v1/inbox/{recipient}"): call("GET", "/v1/inbox/{recipient}"),
    ("GET", "/v1/inbox/{recipient}/stream"): stream("/v1/inbox/{recipient}/stream"),
    ("POST", "/v1/inbox/{recipient}/{message_id}/read"): call(
        "POST", "/v1/inbox/{recipient}/{message}/read"),
    ("DELETE", "/v1/inbox/{recipient}/{message_id}"): call(
        "DELETE", "/v1/inbox/{recipient}/{message}"),
    # B's own profile of the same id (created by the PUT, then deleted): never A's.
    ("GET", "/v1/recipients/{id}"): call("GET", "/v1/recipients/{recipient}"),
    ("PUT", "/v1/recipients/{id}"): call("PUT", "/v1/recipients/{recipient}",
                                         {"timeZone": "Asia/Tokyo"}),
    ("DELETE", "/v1/recipients/{id}"): call("DELETE", "/v1/recipients/{recipient}"),
    # Failures first: the PUT below makes B a subscription of the name (its own), which the
    # DELETE then deletes; A's is never touched.
    ("GET", "/v1/event-subscriptions/{name}/failures"): call(
        "GET", "/v1/event-subscriptions/{subscription}/failures"),
    ("PUT", "/v1/event-subscriptions/{name}"): call(
        "PUT", "/v1/event-subscriptions/{subscription}",
        {"url": "{callback}", "events": ["trigger.failed"]}),
    ("DELETE", "/v1/event-subscriptions/{name}"): call(
        "DELETE", "/v1/event-subscriptions/{subscription}"),
}
OPS_ONLY = "operators only (a caller's token is 403 whatever the name)"
EXEMPT = {
    ("GET", "/ack/{token}"): "a signed link: the signature is the authority, not a caller",
    ("POST", "/ack/{token}"): "a signed link: the signature is the authority, not a caller",
    ("GET", "/ops/static/{name}"): "the ops console's static files: no tenant data",
    ("GET", "/docs/static/{name}"): "the API reference page's static files: no tenant data",
    ("POST", "/v1/ops/callers/{caller}/pause"): OPS_ONLY,
    ("GET", "/v1/ops/triggers/{id}"): OPS_ONLY,
    ("GET", "/v1/ops/triggers/{id}/attempts"): OPS_ONLY,
    ("POST", "/v1/ops/triggers/{id}/run"): OPS_ONLY,
    ("POST", "/v1/ops/callers/{caller}/resume"): OPS_ONLY,
    ("GET", "/v1/ops/callers/resume-jobs/{job}"): OPS_ONLY,
    ("POST", "/v1/ops/endpoints/{caller}/enable"): OPS_ONLY,
}


def uncovered(app: web.Application) -> list[tuple[str, str]]:
    """Routes with a ``{...}`` in their path and neither a case nor an exemption."""
    routes = {(r.method, r.resource.canonical) for r in app.router.routes()
              if r.resource is not None and "{" in r.resource.canonical and r.method != "HEAD"}
    return sorted(routes - set(CASES) - set(EXEMPT))


def _without(answer: Answer, ids: Ids) -> Answer:
    """The answer with every id in it replaced by its kind: what may differ."""
    status, content_type, body = answer
    text = json.dumps(body) if content_type == "application/json" else str(body)
    for kind, value in vars(ids).items():
        text = text.replace(value, f"<{kind}>")
    return status, content_type, text


async def check_every_case(t: Tenants) -> dict[tuple[str, str], Answer]:
    """Each case as B with A's ids, then with unknown ids: the same answer. Returns what
    B got (for a test to look at), after checking that A reads the same as before."""
    ids = await seed(t)
    unknown = unknown_ids(t.runtime.clock.now_ms())
    before = await a_view(t, ids)
    got = {}
    for route, request in CASES.items():
        with_a = await request(t, ids)
        with_unknown = await request(t, unknown)
        assert _without(with_a, ids) == _without(with_unknown, unknown), (route, with_a,
                                                                        with_unknown)
        assert SECRET not in json.dumps(with_a[2]), route  # nothing of A's, not even streamed
        got[route] = with_a
    await _check_lists(t, ids, unknown)
    resp = await t.client.post("/v1/signing-secrets/rotate", headers=t.auth(t.b_token))
    assert resp.status == 201, await resp.text()
    assert await a_view(t, ids) == before
    return got


async def _check_lists(t: Tenants, ids: Ids, unknown: Ids) -> None:
    """B's lists hold nothing of A's, and naming A as the caller of a dead-letter listing is
    refused exactly like naming nobody."""
    for path in ("/v1/triggers", f"/v1/triggers?tag={TAG}", "/v1/dead-letters",
                 f"/v1/inbox/{ids.recipient}", "/v1/recipients", "/v1/event-subscriptions"):
        resp = await t.client.get(path, headers=t.auth(t.b_token))
        text = await resp.text()
        assert resp.status == 200, text
        assert ids.trigger not in text and SECRET not in text, path
    answers = []
    for caller in (t.a_caller, f"nobody-{unknown.recipient}"):
        resp = await t.client.get("/v1/dead-letters", params={"caller": caller},
                                  headers=t.auth(t.b_token))
        answers.append((resp.status, (await resp.json())["error"]))
    assert answers[0] == answers[1] == (400, "invalid_request"), answers
