"""A caller's flow-control defaults per callback origin, from the callers file::

    [callers.orders]
    flow_control = [{origin = "http://127.0.0.1:9000", rate_per_second = 50, parallelism = 5}]

Each entry: ``origin`` (``scheme://host[:port]``, the port defaults to the scheme's),
``rate_per_second`` and/or ``parallelism`` (the bounds of ``core.flow``). A trigger of the
caller whose callback goes to that origin and that has no ``flowControl`` of its own is
delivered under the key ``<caller>|<origin>`` (``scheme://host:port``, the port written):
one key per (caller, origin), shared by every dispatcher.
"""

from __future__ import annotations

from dataclasses import dataclass

from trigger_service.core.endpoint_health import parse_origin
from trigger_service.core.errors import ConfigError, InvalidRequest
from trigger_service.core.flow import FlowControl, parse_flow_control
from trigger_service.core.urls import callback_origin


@dataclass(frozen=True, slots=True)
class FlowDefault:
    origin: str  # ``core.urls.callback_origin``'s form
    rate_per_second: float | None
    parallelism: int | None


def parse_flow_defaults(raw: object, where: str) -> tuple[FlowDefault, ...]:
    """``flow_control`` of a caller's table (absent: none). Raises ``ConfigError``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.flow_control: a list of tables")
    out: dict[str, FlowDefault] = {}
    for i, entry in enumerate(raw):
        at = f"{where}.flow_control[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"origin", "rate_per_second",
                                                        "parallelism"}:
            raise ConfigError(f"{at}: a table of origin, rate_per_second, parallelism")
        origin = entry.get("origin")
        try:
            norm = parse_origin(origin) if isinstance(origin, str) else None
            if norm is None:
                raise ValueError(origin)
            fc = parse_flow_control({"key": "default", "ratePerSecond": entry.get(
                "rate_per_second"), "parallelism": entry.get("parallelism")})
        except (ValueError, InvalidRequest) as e:
            raise ConfigError(f"{at}: {e} (origin: an http(s) URL; rate_per_second: 0 to "
                              "10000; parallelism: 1 to 10000; at least one)") from e
        if norm in out:
            raise ConfigError(f"{at}.origin: {norm} is listed twice")
        assert fc is not None
        out[norm] = FlowDefault(norm, fc.rate_per_second, fc.parallelism)
    return tuple(out.values())


def default_flow(caller: str, defaults: tuple[FlowDefault, ...],
                 callback_url: str) -> FlowControl | None:
    """The caller's default for ``callback_url``'s origin, keyed ``<caller>|<origin>``."""
    if not defaults or not callback_url:
        return None
    try:
        origin = callback_origin(callback_url)
    except ValueError:
        return None
    for d in defaults:
        if d.origin == origin:
            return FlowControl(f"{caller}|{origin}", d.rate_per_second, d.parallelism)
    return None
