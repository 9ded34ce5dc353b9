"""A Server-Sent Events parser (pure): lines in, events out (WHATWG rules, those this API
uses: ``id``, ``data``, ``event``, comments; ``retry`` is ignored)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Event:
    id: str | None
    event: str
    data: str


@dataclass
class SseParser:
    """Feed it lines without their line break; it returns an event at each blank line."""

    comments: int = 0
    _id: str | None = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> Event | None:
        if line == "":
            if not self._data:
                self._event = ""
                return None
            event = Event(self._id, self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value  # the last id persists across events, as the spec says
        elif name == "event":
            self._event = value
        return None
