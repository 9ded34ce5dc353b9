"""Tenant isolation on the in-memory fakes: the table of tests/isolation.py, cheaply (the
real stack runs it too: tests/integration/test_tenant_isolation.py)."""

from __future__ import annotations

from tests.isolation import CASES, Tenants, check_every_case, uncovered
from tests.unit.app.support import CALLBACK
from tests.unit.http.test_routes import Api


def tenants(api: Api) -> Tenants:
    return Tenants(api.client, api.runtime, "orders", "tok", "tok2", CALLBACK)


async def test_every_route_with_an_id_has_an_isolation_case(api: Api) -> None:
    assert uncovered(api.client.app) == []


async def test_caller_b_with_caller_as_ids_gets_what_an_unknown_id_gets(api: Api) -> None:
    got = await check_every_case(tenants(api))
    assert set(got) == set(CASES)
    statuses = {route: status for route, (status, _, _) in got.items()}
    assert statuses[("GET", "/v1/triggers/{id}")] == 404
    assert statuses[("GET", "/v1/inbox/{recipient}")] == 200  # B's own inbox: empty
