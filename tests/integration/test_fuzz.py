"""The short form of ``make fuzz``: schemathesis (its CLI, as ``make fuzz`` runs it) against a
real API on the real stack and its own contract (``GET /openapi.json``). Fails on any 5xx,
any status or content type the spec does not list, and any response or header that does not
conform to it, and any request that costs the API over 3 CPU-s (this process's, traced).
Hostile ``when``, ``rrule``, ``cron`` and ``flowControl`` values are weighted in
(``infra/fuzz_hooks.py``). ``make fuzz``
runs the same with several thousand cases."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
async def test_the_api_keeps_its_contract_under_fuzzing(stack: Stack) -> None:
    base = str(stack.client.make_url("")).rstrip("/")
    # The API runs in this process: its CPU per request is this process's, coverage's tracing
    # (2-3x under `make test`) and the stack's background tasks included; hence 3 s here,
    # against `make fuzz`'s 1 s for API processes of their own. A stall is seconds to minutes.
    env = {**os.environ, "FUZZ_TOKEN": stack.token, "FUZZ_SEED": "7",
           "FUZZ_API_PIDS": str(os.getpid()), "FUZZ_MAX_REQUEST_CPU_S": "3"}
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "infra" / "fuzz.sh"), base, os.environ.get("FUZZ_SHORT_EXAMPLES", "3"),
        "300", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 700)  # the API answers meanwhile
    text = out.decode(errors="replace")
    print(text[-3000:])
    assert proc.returncode == 0, text[-6000:]
