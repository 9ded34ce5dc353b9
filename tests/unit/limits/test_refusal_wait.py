"""``refusal_wait_middleware``: a caller refused for going too fast is answered after a
wait (or its Retry-After, if shorter), with Retry-After less the time waited; the refusals
that free a slot (streams, connections) and everything else are answered at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from trigger_service.app.cpu_shares import CpuShareExceeded
from trigger_service.config.limits import LIMIT_VARIABLES
from trigger_service.core.errors import (
    ApiError,
    NotFound,
    RateLimited,
    TooManyConnections,
    TooManyStreams,
)
from trigger_service.http.app import errors_middleware
from trigger_service.http.guards import refusal_wait_middleware

Client = TestClient[web.Request, web.Application]
RAISED: dict[str, Callable[[], ApiError]] = {
    "rate": lambda: RateLimited("over the rate", 3),
    "cpu": lambda: CpuShareExceeded("over the share", 7),
    "short": lambda: RateLimited("over the rate", 1),
    "streams": lambda: TooManyStreams("too many streams", 30),
    "connections": lambda: TooManyConnections("too many connections", 1),
    "missing": lambda: NotFound("no such thing"),
}


async def serve(wait_s: float, slept: list[float]) -> Client:
    async def sleep(s: float) -> None:
        slept.append(s)

    async def handler(request: web.Request) -> web.Response:
        raise RAISED[request.match_info["kind"]]()

    app = web.Application(middlewares=[errors_middleware,
                                       refusal_wait_middleware(wait_s, sleep)])
    app.router.add_get("/{kind}", handler)
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def slept() -> AsyncIterator[list[float]]:
    yield []


async def test_a_rate_refusal_waits_and_its_retry_after_counts_the_wait(
        slept: list[float]) -> None:
    client = await serve(1.0, slept)
    try:
        answers = {}
        for kind in ("rate", "cpu", "short"):
            resp = await client.get(f"/{kind}")
            assert resp.status == 429 and (await resp.json())["error"] == "rate_limited"
            answers[kind] = resp.headers["Retry-After"]
    finally:
        await client.close()
    # A second's wait each (the short one only its own Retry-After), told the rest of the wait.
    assert slept == [1.0, 1.0, 1.0] and answers == {"rate": "2", "cpu": "6", "short": "0"}


async def test_refusals_that_free_a_slot_and_other_errors_are_answered_at_once(
        slept: list[float]) -> None:
    client = await serve(1.0, slept)
    try:
        statuses = [(await client.get(f"/{k}")).status
                    for k in ("streams", "connections", "missing")]
        assert statuses == [429, 429, 404]
        resp = await client.get("/streams")
        assert resp.headers["Retry-After"] == "30"
    finally:
        await client.close()
    assert slept == []


async def test_a_wait_of_zero_answers_at_once(slept: list[float]) -> None:
    client = await serve(0.0, slept)
    try:
        resp = await client.get("/rate")
        assert resp.status == 429 and resp.headers["Retry-After"] == "3"
    finally:
        await client.close()
    assert slept == []


def test_the_wait_setting_is_bounded() -> None:
    parse = next(row[2] for row in LIMIT_VARIABLES if row[0] == "TRIGGER_LIMITS_REFUSAL_WAIT_S")
    assert parse("0") == 0 and parse("2.5") == 2.5
    for bad in ("-1", "6", "x"):
        with pytest.raises(ValueError):
            parse(bad)
