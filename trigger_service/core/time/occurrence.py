"""One occurrence of a schedule: its instant and which of the rule's wall instances it is.

Below both ``recurrence`` (which expands a rule into occurrences) and ``catchup`` (which picks
among them), so that neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True, order=True)
class Occurrence:
    """Identified by ``key``: its instant, its wall instance's index and whether it is the
    later instant of an overlap fired twice."""

    at_ms: int
    index: int  # the wall instance's position in the rule (skipped ones count)
    second: bool = False  # the later instant of an overlap under ``both``
    wall: datetime = field(compare=False, default=datetime.min)

    @property
    def key(self) -> tuple[int, int, bool]:
        return (self.at_ms, self.index, self.second)
