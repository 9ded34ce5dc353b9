"""The SDK's unit tests' fake API: a scripted ``httpx.MockTransport`` that records every
request (no network, no services), and sample answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

Answer = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]

CREATED = {"triggerId": "trg_01JD5Z8Q3X4M2N6P7R8S9T0V1W", "fireAt": "2026-12-01T14:00:00.000Z",
           "nextFireAt": "2026-12-01T14:00:00.000Z", "status": "PENDING"}


def trigger_json(n: int, **over: Any) -> dict[str, Any]:
    """A full ``Trigger`` answer (the n-th)."""
    return {"triggerId": f"trg_01JD5Z8Q3X4M2N6P7R8S9T{n:04d}", "status": "PENDING",
            "fireAt": "2026-12-01T14:00:00.000Z", "createdAt": "2026-11-30T14:00:00.000Z",
            "attempts": 0, "lastError": None, "firedAt": None, "callbackUrl": "http://x/cb",
            "payload": {"n": n}, "timeZone": None, "localTime": None, "rrule": None,
            "cron": None, "dstPolicy": None, "exdates": None,
            "nextFireAt": "2026-12-01T14:00:00.000Z", "occurrencesFired": 0,
            "snoozedFrom": None, "channels": None, "acknowledged": None, **over}


def error(http_status: int, code: str, message: str = "m", headers: dict[str, str] | None = None,
          **extra: Any) -> httpx.Response:
    return httpx.Response(http_status, json={"error": code, "message": message, **extra},
                          headers=headers)


@dataclass
class Script:
    """Answers in order (the last one repeats); every request is kept."""

    answers: list[Answer] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        return answer(request)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]
