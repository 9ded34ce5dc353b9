"""``POST /v1/triggers`` with ``debounce`` on in-memory fakes (every exchange checked against
openapi.yaml by the ``api`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.app.support import CALLBACK
from tests.unit.http.test_routes import AUTH, Api, assert_error


def _body(payload: object, **debounce: Any) -> dict[str, Any]:
    return {"callbackUrl": CALLBACK, "delaySeconds": 600, "payload": payload,
            "debounce": {"key": "digest", "mode": "replace", **debounce}}


async def test_the_first_request_creates_the_next_ones_are_debounced(api: Api) -> None:
    first = await api.client.post("/v1/triggers", json=_body(1), headers=AUTH)
    one = await first.json()
    assert first.status == 201 and one["debounced"] is False
    again = await api.client.post("/v1/triggers", json=_body(2), headers=AUTH)
    two = await again.json()
    assert again.status == 200 and two["debounced"] is True
    assert two["triggerId"] == one["triggerId"]
    got = await (await api.client.get(f"/v1/triggers/{one['triggerId']}", headers=AUTH)).json()
    assert got["payload"] == 2 and got["fireAt"] == two["fireAt"]
    plain = await api.client.post("/v1/triggers", json={"callbackUrl": CALLBACK,
                                                        "delaySeconds": 60}, headers=AUTH)
    assert plain.status == 201 and "debounced" not in await plain.json()


@pytest.mark.parametrize("debounce", [
    "digest", {"mode": "replace"}, {"key": "", "mode": "replace"},
    {"key": "k", "mode": "latest"}, {"key": "k", "mode": "keep", "maxWaitSeconds": 0},
    {"key": "k", "mode": "keep", "maxWaitSeconds": True}, {"key": "k", "mode": "keep", "x": 1},
    {"key": "k\n", "mode": "keep"}])
async def test_a_bad_debounce_is_400_naming_it(api: Api, debounce: object) -> None:
    body = {"callbackUrl": CALLBACK, "delaySeconds": 60, "debounce": debounce}
    resp = await api.client.post("/v1/triggers", json=body, headers=AUTH)
    got = await assert_error(resp, 400, "invalid_request", extras=("field",))
    assert got["field"] == "debounce"


async def test_a_series_with_debounce_is_400(api: Api) -> None:
    body = _body(1) | {"rrule": "FREQ=DAILY"}
    resp = await api.client.post("/v1/triggers", json=body, headers=AUTH)
    got = await assert_error(resp, 400, "invalid_request", extras=("field",))
    assert got["field"] == "debounce"
