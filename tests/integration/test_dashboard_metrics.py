"""The catalogue the alert rules and the dashboard are checked against
(tests/unit/test_alert_rules.py) is the one the processes really expose: after a trigger is
registered, swept and delivered on the real stack, every ``trigger_`` sample of the API's,
the dispatcher's and the sweeper's exposition is in the catalogue, and the series the
dashboard's main panels need are there."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Stack
from tests.integration.helpers import until
from tests.unit.test_alert_rules import catalogue, dashboard_exprs, series_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# Series a delivered trigger always leaves in some process's exposition.
AFTER_A_DELIVERY = {
    "trigger_triggers_registered_total", "trigger_deliveries_total",
    "trigger_fire_lag_seconds_bucket", "trigger_fire_lag_seconds_count",
    "trigger_sweeper_shards_owned", "trigger_sqs_calls_total",
    "trigger_http_request_duration_seconds_count", "trigger_delivery_attempts_total"}


def samples(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith("trigger_")}


async def test_live_expositions_match_the_catalogue(stack: Stack) -> None:
    dispatcher = await stack.start_dispatcher()
    sweeper = await stack.start_sweeper()
    status, body, _ = await stack.post(stack.body(delaySeconds=1))
    assert status == 201, body
    assert (await stack.wait_status(body["triggerId"], "FIRED", timeout_s=30))["status"] == "FIRED"

    async def leases_reported() -> bool:  # (set at the sweeper's heartbeat)
        return "trigger_sweeper_shards_owned" in samples(sweeper.metrics.exposition().decode())

    assert await until(leases_reported, timeout_s=20)

    resp = await stack.client.get("/metrics")
    assert resp.status == 200
    live = samples(await resp.text())
    live |= samples(dispatcher.metrics.exposition().decode())
    live |= samples(sweeper.metrics.exposition().decode())

    known = catalogue()
    assert live - set(known) == set(), "exposed but not in the catalogue"
    assert AFTER_A_DELIVERY - live == set()
    dashboard = {n for _, expr in dashboard_exprs() for n in series_names(expr)}
    assert AFTER_A_DELIVERY <= dashboard | {"trigger_fire_lag_seconds_count",
                                            "trigger_delivery_attempts_total"}
