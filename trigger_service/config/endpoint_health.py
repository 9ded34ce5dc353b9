"""Settings of endpoint health (section ``endpoint_health`` of ``settings.Settings``;
``ENDPOINT_HEALTH_VARIABLES`` are their rows of ``settings.VARIABLES``), and a caller's own
policy from the callers file (``core.endpoint_health``)::

    [callers.orders]
    disable_after_s = 86400      # optional, else TRIGGER_ENDPOINT_HEALTH_DISABLE_AFTER_S
    on_disabled = "hold"         # or "dead_letter" (default hold)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trigger_service.config.parsers import at_least_one
from trigger_service.core.endpoint_health import OnDisabled
from trigger_service.core.errors import ConfigError

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]


@dataclass(frozen=True)
class EndpointHealthSettings:
    disable_after_s: int = 432_000  # 5 days of continuous failure
    # A failing record is rewritten at most this often per origin and dispatcher.
    write_every_s: int = 30
    # How old a dispatcher's copy of the records may be (the disabled endpoints it holds).
    refresh_s: int = 2
    # A record expires this long after its last write (a disabled endpoint nobody enables is
    # tried again after it); each caller has at most max_per_caller (a new failing origin
    # past that is not tracked); dispatchers read the records in pages of page_size.
    record_ttl_s: int = 7 * 86_400
    max_per_caller: int = 100
    page_size: int = 500
    ops_events_url: str = ""  # none: the events are only logged
    ops_events_secret: str = field(default="", repr=False)  # never logged

    def validate(self) -> None:
        """Raises ``ConfigError`` naming the variable."""
        if self.ops_events_url and not self.ops_events_url.startswith(("http://", "https://")):
            raise ConfigError("TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_URL must be an http(s) URL")
        if self.ops_events_url and not _is_secret(self.ops_events_secret):
            raise ConfigError("TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_SECRET must be a "
                              "'whsec_<base64>' secret when "
                              "TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_URL is set (events are signed)")


def _is_secret(text: str) -> bool:
    try:
        return text.startswith("whsec_") and bool(base64.b64decode(text[6:], validate=True))
    except (ValueError, binascii.Error):
        return False


ENDPOINT_HEALTH_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_ENDPOINT_HEALTH_DISABLE_AFTER_S", ("endpoint_health", "disable_after_s"),
     at_least_one,
     "an endpoint (caller, callback origin) failing without a break this long is disabled "
     "(a caller's disable_after_s overrides it)"),
    ("TRIGGER_ENDPOINT_HEALTH_WRITE_EVERY_S", ("endpoint_health", "write_every_s"), at_least_one,
     "a failing endpoint's record is rewritten at most this often per dispatcher"),
    ("TRIGGER_ENDPOINT_HEALTH_REFRESH_S", ("endpoint_health", "refresh_s"), at_least_one,
     "each dispatcher reads the endpoint records this often (disabled ones are held)"),
    ("TRIGGER_ENDPOINT_HEALTH_RECORD_TTL_S", ("endpoint_health", "record_ttl_s"), at_least_one,
     "an endpoint's record expires this long after its last change (a disabled endpoint "
     "nobody enabled is then tried again)"),
    ("TRIGGER_ENDPOINT_HEALTH_MAX_PER_CALLER", ("endpoint_health", "max_per_caller"),
     at_least_one,
     "endpoints (callback origins) tracked per caller at once; a new failing origin past this "
     "is not tracked (never disabled) until one of the caller's records goes"),
    ("TRIGGER_ENDPOINT_HEALTH_PAGE_SIZE", ("endpoint_health", "page_size"), at_least_one,
     "rows per page of a dispatcher's read of the endpoint records"),
    ("TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_URL", ("endpoint_health", "ops_events_url"), str,
     "operators' webhook for endpoint.disabled / endpoint.enabled events (empty: log only)"),
    ("TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_SECRET", ("endpoint_health", "ops_events_secret"), str,
     "the Standard Webhooks secret (whsec_...) the operators' events are signed with"),
)


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    """One caller's: None takes the setting."""

    disable_after_s: int | None = None
    on_disabled: OnDisabled = OnDisabled.HOLD


DEFAULT_ENDPOINT_POLICY = EndpointPolicy()


def parse_endpoint_policy(table: Mapping[str, object], where: str) -> EndpointPolicy:
    after = table.get("disable_after_s")
    if after is not None and (not isinstance(after, int) or isinstance(after, bool)
                              or after < 1):
        raise ConfigError(f"{where}.disable_after_s: a positive integer")
    on = table.get("on_disabled", OnDisabled.HOLD.value)
    if on not in (OnDisabled.HOLD.value, OnDisabled.DEAD_LETTER.value):
        raise ConfigError(f"{where}.on_disabled: 'hold' or 'dead_letter'")
    return EndpointPolicy(after, OnDisabled(on))
