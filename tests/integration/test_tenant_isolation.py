"""Tenant isolation on the real stack (Cassandra, SQS, Redis): for every route with an id,
caller B (``stack.token + "-other"``) using caller A's real ids gets exactly what an unknown
id gets, and A's data reads the same afterwards (the table: tests/isolation.py)."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack
from tests.isolation import CASES, Tenants, check_every_case, uncovered

pytestmark = pytest.mark.integration


def tenants(stack: Stack) -> Tenants:
    return Tenants(stack.client, stack.runtime, stack.caller, stack.token,
                   stack.token + "-other", stack.receiver.base_url + "cb")


async def test_every_route_with_an_id_has_an_isolation_case(stack: Stack) -> None:
    assert uncovered(stack.client.app) == []


async def test_caller_b_with_caller_as_ids_gets_what_an_unknown_id_gets(stack: Stack) -> None:
    got = await check_every_case(tenants(stack))
    assert set(got) == set(CASES)
    statuses = {route: status for route, (status, _, _) in got.items()}
    assert statuses[("GET", "/v1/triggers/{id}")] == 404
    assert statuses[("DELETE", "/v1/dead-letters/{id}")] == 404
    assert statuses[("GET", "/v1/inbox/{recipient}/stream")] == 200  # B's own, empty
