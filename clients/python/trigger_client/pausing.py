"""Pause, resume and the catch-up policy: the models of ``triggers.pause``/``resume`` and
the operators' caller pause (``ops.pause_caller`` and friends)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from trigger_client.errors import parse_instant


class CatchUpPolicy(StrEnum):
    """What fires of the occurrences missed (an outage, a pause, a long retry)."""

    ALL = "all"  # every missed one inside the window, in order
    LATEST = "latest"  # only the most recent missed one
    NONE = "none"  # none: the series goes on at the next one not missed


@dataclass(frozen=True, slots=True)
class CatchUp:
    """A series' catch-up policy (``catch_up=`` on create and patch). Occurrences more than
    ``window_s`` late never fire. The service's default: ``CatchUp()``."""

    policy: CatchUpPolicy = CatchUpPolicy.ALL
    window_s: int = 86_400

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy.value, "windowSeconds": self.window_s}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> CatchUp | None:
        if not d:
            return None
        return cls(CatchUpPolicy(d["policy"]), int(d["windowSeconds"]))


@dataclass(frozen=True, slots=True)
class PausedCaller:
    caller: str
    paused_at: datetime
    paused_triggers: int  # up to 500

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PausedCaller:
        return cls(d["caller"], parse_instant(d["pausedAt"]), d.get("pausedTriggers", 0))


@dataclass(frozen=True, slots=True)
class ResumeJob:
    """A caller resume's progress: ``done`` + ``failed`` of ``total`` triggers."""

    job_id: str
    caller: str
    status: str  # running, done
    total: int
    done: int
    failed: int
    created_at: datetime
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ResumeJob:
        return cls(d["jobId"], d["caller"], d["status"], d["total"], d["done"], d["failed"],
                   parse_instant(d["createdAt"]), d)
