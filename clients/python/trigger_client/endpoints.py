"""Endpoint health: the models and calls of ``/v1/endpoints`` (a caller's own) and
``/v1/ops/endpoints`` (operators), executed by the sync and async clients alike
(``client.Endpoints``, ``aio.AsyncEndpoints``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from trigger_client._calls import Call, seg
from trigger_client.errors import parse_instant


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    """A failing (``state`` "failing") or disabled callback origin of a caller."""

    caller: str
    origin: str  # scheme://host:port
    state: str  # failing, disabled
    failing_since: datetime
    last_failure_at: datetime
    failures: int
    last_error: str | None
    disabled_at: datetime | None
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EndpointHealth:
        return cls(d["caller"], d["origin"], d["state"], parse_instant(d["failingSince"]),
                   parse_instant(d["lastFailureAt"]), d["failures"], d.get("lastError"),
                   parse_instant(d["disabledAt"]) if d.get("disabledAt") else None, d)


@dataclass(frozen=True, slots=True)
class EndpointEnabled:
    """An enable's answer: the state before (None: it was healthy) and the replay jobs
    started (a job over triggers, a bulk dead-letter replay), if any."""

    caller: str
    origin: str
    previous_state: str | None
    trigger_job_id: str | None
    dead_letter_job_id: str | None
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EndpointEnabled:
        replay = d.get("replay") or {}
        return cls(d["caller"], d["origin"], d.get("previousState"),
                   replay.get("triggerJobId"), replay.get("deadLetterJobId"), d)


def _items(r: Any) -> list[EndpointHealth]:
    return [EndpointHealth.from_json(i) for i in r.json()["items"]]


def _enable_body(origin: str, replay_since: datetime | None) -> dict[str, Any]:
    body: dict[str, Any] = {"origin": origin}
    if replay_since is not None:
        if replay_since.tzinfo is None:
            raise ValueError("replay_since needs a time zone (an aware datetime)")
        body["replaySince"] = replay_since.astimezone(UTC).isoformat()
    return body


def list_endpoints() -> Call[list[EndpointHealth]]:
    return Call("GET", "/v1/endpoints", _items, retry=True)


def enable_endpoint(origin: str, replay_since: datetime | None) -> Call[EndpointEnabled]:
    # Not retried: with a replay each enable makes a job (a retry would make a second one,
    # which finds nothing left held).
    return Call("POST", "/v1/endpoints/enable", lambda r: EndpointEnabled.from_json(r.json()),
                body=_enable_body(origin, replay_since))


def list_all_endpoints() -> Call[list[EndpointHealth]]:
    return Call("GET", "/v1/ops/endpoints", _items, retry=True)


def enable_caller_endpoint(caller: str, origin: str, replay_since: datetime | None
                           ) -> Call[EndpointEnabled]:
    return Call("POST", f"/v1/ops/endpoints/{seg(caller)}/enable",
                lambda r: EndpointEnabled.from_json(r.json()),
                body=_enable_body(origin, replay_since))
