"""Honest answers: a registration whose write never settled is ``503
outcome_unknown`` naming its trigger id, and no adapter's text (nodes, addresses, driver
messages) reaches any answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cassandra import OperationTimedOut, WriteTimeout, WriteType

from tests.unit.app.support import drive
from tests.unit.http.test_routes import AUTH, BODY, Api, assert_error
from trigger_service.adapters.cassandra.driver import execute_page
from trigger_service.app.creation import UNKNOWN_OUTCOME_ATTEMPTS
from trigger_service.core.errors import (
    CacheError,
    QueueError,
    StoreError,
    StoreTimeout,
)
from trigger_service.core.model import keyed_trigger_id, new_trigger_id

DRIVER_TEXT = "OperationTimedOut: errors={'10.0.0.7:9042': 'Client request timeout'}"


async def post_driven(api: Api, headers: dict[str, str]) -> tuple[int, Any]:
    """POST a registration while the manual clock moves (the repeats pause on it)."""
    async def run() -> tuple[int, Any]:
        resp = await api.client.post("/v1/triggers", json=BODY, headers=headers)
        return resp.status, await resp.json()
    task = asyncio.create_task(run())
    await drive(api.env.clock, task)
    return task.result()


@pytest.mark.parametrize("key", [None, "k1"])
async def test_a_write_that_never_settles_is_503_outcome_unknown(api: Api,
                                                                 key: str | None) -> None:
    op = "create" if key is None else "create_keyed"
    api.env.store.failures[op] = StoreTimeout(DRIVER_TEXT)
    headers = AUTH | ({"Idempotency-Key": key} if key else {})
    status, body = await post_driven(api, headers)
    assert (status, body["error"]) == (503, "outcome_unknown")
    assert set(body) == {"error", "message", "triggerId"}
    assert "Idempotency-Key" in body["message"]
    assert "10.0.0.7" not in str(body) and "OperationTimedOut" not in str(body)
    assert api.env.store.calls[op] == UNKNOWN_OUTCOME_ATTEMPTS
    if key is not None:
        assert body["triggerId"] == keyed_trigger_id("orders", key)
        # The retry with the key settles it: created now, under the id the 503 named.
        del api.env.store.failures[op]
        status, again = await post_driven(api, headers)
        assert status == 201 and again["triggerId"] == body["triggerId"]


@pytest.mark.parametrize("error", [StoreError, StoreTimeout, CacheError, QueueError])
async def test_no_adapter_text_reaches_an_answer(api: Api, error: type[Exception]) -> None:
    api.env.store.failures["get"] = error(DRIVER_TEXT)
    resp = await api.client.get(f"/v1/triggers/{new_trigger_id(0)}", headers=AUTH)
    body = await assert_error(resp, 503, "dependency_unavailable")
    for secret in ("10.0.0.7", "9042", "OperationTimedOut", "timeout", "cassandra", "redis"):
        assert secret not in body["message"]


class _TimedOutFuture:
    """What the driver's ``execute_async`` returns, failing with ``error``."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def add_callbacks(self, ok: Any, err: Any) -> None:
        err(self._error)


class _Session:
    def __init__(self, error: Exception) -> None:
        self._error = error

    def execute_async(self, stmt: object, paging_state: object = None) -> _TimedOutFuture:
        return _TimedOutFuture(self._error)


@pytest.mark.parametrize(("driver_error", "unknown"), [
    (OperationTimedOut("no answer"), True),
    (WriteTimeout("write timeout", write_type=WriteType.SIMPLE), True),
    (RuntimeError("Unavailable: not enough replicas"), False),
])
async def test_the_driver_says_when_a_writes_outcome_is_unknown(
        driver_error: Exception, unknown: bool) -> None:
    with pytest.raises(StoreError) as caught:
        await execute_page(_Session(driver_error), "row_insert", object(), None)
    assert isinstance(caught.value, StoreTimeout) is unknown
    assert caught.value.__cause__ is driver_error
