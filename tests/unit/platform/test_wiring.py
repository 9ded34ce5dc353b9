"""``Runtime``: whoever builds one names every port; a port left out is a start-up error, never
a private in-memory stand-in."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from tests.fake_runtime import fake_runtime
from tests.unit.app.support import make_env
from tests.unit.http.test_routes import CALLERS
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.platform.wiring import Runtime

PORTS = [f.name for f in fields(Runtime)
         if f.default is MISSING and f.default_factory is MISSING]


def test_no_port_has_a_default() -> None:
    defaulted = {f.name for f in fields(Runtime)} - set(PORTS)
    assert defaulted == {"pings", "closers"}  # not ports: what /readyz checks, close closes
    assert {"board", "inbox_bus", "limiter", "flow", "recipients", "tracing"} <= set(PORTS)


@pytest.mark.parametrize("port", PORTS)
def test_a_runtime_without_a_port_fails_naming_it(port: str) -> None:
    env = make_env()
    full = fake_runtime(env.settings, CALLERS, env.store, env.queue, env.cache,
                        MemoryLease(env.clock, 10_000), env.clock, env.metrics)
    given = {f.name: getattr(full, f.name) for f in fields(Runtime) if f.name != port}
    assert Runtime(**given | {port: getattr(full, port)}) == full  # all given: it builds
    with pytest.raises(TypeError, match=rf"missing 1 required .*argument: '{port}'"):
        Runtime(**given)
