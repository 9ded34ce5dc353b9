"""One frozen ``Settings``, read from ``TRIGGER_*`` environment variables in ``main()`` only.

Each setting is written once: its default is the dataclass field's, and ``VARIABLES`` maps a
variable name onto that field with a parser and a help line (the tables of
docs/operations/settings.md are made from the same list, ``config.settings_docs``, and a unit
test keeps them in step). A bad value fails at start-up with a ``ConfigError`` naming the
variable. The infra scripts read the same names (they take the ports from
``TRIGGER_CASSANDRA_PORT``, ``TRIGGER_SQS_ENDPOINT_URL`` and ``TRIGGER_REDIS_URL``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trigger_service.config.aliases import translate
from trigger_service.config.audit import AUDIT_VARIABLES, AuditSettings
from trigger_service.config.encryption import ENCRYPTION_VARIABLES, EncryptionSettings
from trigger_service.config.endpoint_health import (
    ENDPOINT_HEALTH_VARIABLES,
    EndpointHealthSettings,
)
from trigger_service.config.events import EVENT_VARIABLES, EventSettings
from trigger_service.config.inbox import INBOX_VARIABLES, InboxSettings
from trigger_service.config.limits import LIMIT_VARIABLES, LimitSettings, env_kind
from trigger_service.config.parsers import int_list as _int_list
from trigger_service.config.parsers import pos_float as _pos_float
from trigger_service.config.parsers import pos_int as _pos_int
from trigger_service.config.parsers import str_list as _str_list
from trigger_service.config.providers import (
    PROVIDER_VARIABLES,
    EmailSettings,
    PushSettings,
    SmsSettings,
    SmtpSettings,
    TelegramSettings,
)
from trigger_service.config.sqs import SQS_VARIABLES, SqsSettings
from trigger_service.config.stores import (
    CASSANDRA_VARIABLES,
    REDIS_VARIABLES,
    CassandraSettings,
    RedisSettings,
)
from trigger_service.config.sweep import (
    SWEEP_VARIABLES,
    HealSettings,
    ReconcileSettings,
    SweepSettings,
)
from trigger_service.core.errors import ConfigError
from trigger_service.core.time.timing import SQS_MAX_DELAY_S, ceil_div

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class ApiSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    # API processes sharing the port (infra/app.sh starts them; 0: one per core). Past one,
    # each binds with SO_REUSEPORT and the kernel spreads connections over them.
    workers: int = 0
    callers_file: Path = REPO_ROOT / "config" / "callers.dev.toml"
    payload_max_bytes: int = 4096
    max_fire_ahead_days: int = 3660
    min_recurrence_interval_s: int = 60
    max_jitter_s: int = 3600  # the largest jitterSeconds accepted
    catch_up_tolerance_s: int = 60  # how late an occurrence may be before it counts as missed
    # Where people reach the API (acknowledgement links in emails and SMS), and the links' key.
    public_url: str = "http://127.0.0.1:8080"
    ack_secret: str = field(default="dev-ack-secret-change-me", repr=False)  # never logged
    # Earlier keys whose links still verify (rotation); never used to sign.
    ack_previous_secrets: tuple[str, ...] = field(default=(), repr=False)
    ack_link_ttl_s: int = 7 * 86_400
    secret_rotations_per_minute: int = 3  # per caller (app.signing)


@dataclass(frozen=True)
class DispatchSettings:
    callback_timeout_s: float = 10.0
    retry_backoff_s: tuple[int, ...] = (10, 30, 120, 600, 1800)
    max_attempts: int = 6
    processes: int = 1  # dispatcher processes infra/app.sh starts
    receivers: int = 16
    # A whole herd in hand: a held message costs ~14 KB of memory (20,000 held: 87 -> 367
    # MB RSS) and, in a pack, a fiftieth of one visibility extension (adapters.sqs_packs);
    # a 20,000 herd deferred in turns over a 5,000 cap drained at ~400/s (benchmarks).
    max_inflight: int = 25_000
    wait_time_s: int = 2
    # A lone claim is taken this long before the fire time so the POST leaves on the
    # millisecond; a backlog moves claims earlier, up to the max (dispatcher.claim_gate).
    claim_lead_ms: int = 1000
    claim_lead_max_ms: int = 15_000
    claim_concurrency: int = 64
    default_max_concurrency: int = 100
    breaker_fail_max: int = 20
    breaker_reset_s: float = 30.0
    breaker_max_origins: int = 100  # circuits per caller in one dispatcher (dispatcher.breakers)
    visibility_slack_s: int = 20
    retry_after_max_s: int = 3600
    secret_rotation_overlap_s: int = 86_400
    secret_max_live: int = 3  # signing secrets per caller at once (core.notify.signing)
    signer_cache_size: int = 1_000  # callers whose signers a dispatcher keeps (LRU)
    metrics_port: int = 9101
    # A file this dispatcher holds locked while it runs; empty: none (dispatcher.succession).
    slot_file: str = ""

    @property
    def visibility_timeout_s(self) -> int:
        """How long a received message stays hidden: longer than any single delivery."""
        return int(self.callback_timeout_s) + self.visibility_slack_s


# triggerctl's and the SDK's (clients/python): read by the client, never by the service, so a
# shell that exports them for triggerctl can still run `make up`.
CLIENT_VARIABLES = frozenset({"TRIGGER_API_URL", "TRIGGER_TOKEN", "TRIGGER_PROFILE"})
# Removed settings: setting one fails with why (not the generic "unknown setting").
RETIRED_VARIABLES = {
    "TRIGGER_ENQUEUE_WAIT_MS": "a registration answers once the trigger is durable and never "
                               "waits for SQS (the send runs in the background); unset it",
}


@dataclass(frozen=True)
class Settings:
    shards: int = 64
    retention_days: int = 30
    direct_max_delay_s: int = SQS_MAX_DELAY_S
    idempotency_retention_s: int = 86_400
    # A trigger's recent attempts kept for GET /v1/triggers/{id}/attempts (core.recent_attempts).
    attempts_kept: int = 100
    log_level: str = "INFO"
    log_format: str = "json"
    metrics_host: str = "127.0.0.1"
    # Kept out of repr so a logged Settings never shows it.
    metrics_token: str = field(default="", repr=False)
    env: str = "production"  # development only when asked for (TRIGGER_ENV=development)
    # What reading the environment has to say once at start-up (deprecated names); not a
    # variable of its own. Each process logs them (platform.process).
    notices: tuple[str, ...] = field(default=(), compare=False)
    # prometheus_client's own PROMETHEUS_MULTIPROC_DIR (not a TRIGGER_ variable): with it the
    # API's /metrics sums every process of the host (infra/app.sh sets it).
    metrics_multiproc_dir: Path | None = None
    api: ApiSettings = field(default_factory=ApiSettings)
    cassandra: CassandraSettings = field(default_factory=CassandraSettings)
    sqs: SqsSettings = field(default_factory=SqsSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    heal: HealSettings = field(default_factory=HealSettings)
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    sms: SmsSettings = field(default_factory=SmsSettings)
    push: PushSettings = field(default_factory=PushSettings)
    inbox: InboxSettings = field(default_factory=InboxSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    encryption: EncryptionSettings = field(default_factory=EncryptionSettings)
    endpoint_health: EndpointHealthSettings = field(default_factory=EndpointHealthSettings)
    email: EmailSettings = field(default_factory=EmailSettings)
    telegram: TelegramSettings = field(default_factory=TelegramSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    events: EventSettings = field(default_factory=EventSettings)

    @property
    def production(self) -> bool:
        return self.env == "production"

    @property
    def retention_s(self) -> int:
        return self.retention_days * 86_400

    def index_ttl_s(self, fire_at_ms: int, now_ms: int) -> int:
        """How long index entries for a fire time live: until the row's own retention ends
        after the whole retry schedule (a keyed row's retention may be its key's)."""
        d = self.dispatch
        retry_span_s = sum(d.retry_backoff_s) + d.max_attempts * int(d.callback_timeout_s)
        ahead_s = max(0, (fire_at_ms - now_ms) // 1000)
        retention_s = max(self.retention_s, self.idempotency_retention_s)
        return ahead_s + retention_s + retry_span_s + 86_400

    def terminal_ttl_s(self, registered_fire_at_ms: int | None, now_ms: int) -> int:
        """How long a finished trigger's row lives from ``now_ms``: the retention, and for a
        keyed registration (``registered_fire_at_ms``: the fire time its key answered) at
        least until its key's promise ends, that fire time + the idempotency retention, since
        the row is the key's record (a cancel long before the fire time would otherwise let
        the key create the trigger again)."""
        if registered_fire_at_ms is None:
            return self.retention_s
        key_s = ceil_div(registered_fire_at_ms - now_ms, 1000) + self.idempotency_retention_s
        return max(self.retention_s, key_s)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``env`` (default ``os.environ``); unknown TRIGGER_* fail. A
        name of the previous release is read as its new name (``config.aliases``), with a
        line in ``notices``."""
        env, notices = translate(os.environ if env is None else env)
        retired = sorted(k for k in env if k in RETIRED_VARIABLES)
        if retired:
            raise ConfigError("; ".join(f"{k} is retired: {RETIRED_VARIABLES[k]}"
                                        for k in retired))
        known = {v.name for v in VARIABLES} | CLIENT_VARIABLES
        unknown = sorted(k for k in env if k.startswith("TRIGGER_") and k not in known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        values: dict[str, dict[str, Any]] = {}
        for var in VARIABLES:
            if var.name not in env:
                continue
            raw = env[var.name]
            try:
                value = var.parse(raw)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{var.name}={raw!r}: {e}") from e
            section, attr = var.target
            values.setdefault(section, {})[attr] = value
        top = values.pop("", {})
        if env.get(MULTIPROC_ENV):
            top["metrics_multiproc_dir"] = Path(env[MULTIPROC_ENV])
        sections = {name: kind(**values.get(name, {})) for name, kind in _SECTIONS.items()}
        settings = cls(**top, **sections, notices=notices)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Cross-field checks; raises ``ConfigError`` naming the variable."""
        if not 0 < self.direct_max_delay_s <= SQS_MAX_DELAY_S:
            raise ConfigError(f"TRIGGER_DIRECT_MAX_DELAY_S must be in 1..{SQS_MAX_DELAY_S} "
                              "(SQS's delay cap)")
        if self.shards < 1:
            raise ConfigError("TRIGGER_SHARDS must be >= 1")
        if self.dispatch.max_attempts < 1:
            raise ConfigError("TRIGGER_DISPATCH_MAX_ATTEMPTS must be >= 1")
        if not self.dispatch.retry_backoff_s:
            raise ConfigError("TRIGGER_DISPATCH_RETRY_BACKOFF_S needs at least one value")
        sw = self.sweep
        if sw.horizon_s + 1 > self.direct_max_delay_s:
            # A SWEEP trigger (fire time > now + direct max) must land beyond what any sweeper
            # has already scanned (now + horizon), or it would never be promoted.
            raise ConfigError("TRIGGER_SWEEP_HORIZON_S must be at least 1 s below "
                              "TRIGGER_DIRECT_MAX_DELAY_S")
        if sw.horizon_s - sw.interval_s < sw.promote_ahead_s:
            # Each trigger must be scanned before its promotion time.
            raise ConfigError("TRIGGER_SWEEP_HORIZON_S must exceed TRIGGER_SWEEP_INTERVAL_S "
                              "by at least TRIGGER_SWEEP_PROMOTE_AHEAD_S")
        if self.heal.lookback_s < self.heal.overdue_grace_s:
            raise ConfigError("TRIGGER_HEAL_LOOKBACK_S must be >= TRIGGER_HEAL_OVERDUE_GRACE_S")
        self.inbox.validate(self.limits.max_connections)
        if self.redis.max_connections < 1:
            raise ConfigError("TRIGGER_REDIS_MAX_CONNECTIONS must be >= 1")
        if self.log_format not in ("json", "console"):
            raise ConfigError("TRIGGER_LOG_FORMAT must be json or console")
        self.push.validate()
        self.endpoint_health.validate()


_SECTIONS: dict[str, type[Any]] = {
    "api": ApiSettings, "cassandra": CassandraSettings, "sqs": SqsSettings,
    "redis": RedisSettings, "dispatch": DispatchSettings, "sweep": SweepSettings,
    "heal": HealSettings, "reconcile": ReconcileSettings,
    "smtp": SmtpSettings, "sms": SmsSettings, "push": PushSettings, "inbox": InboxSettings,
    "limits": LimitSettings, "encryption": EncryptionSettings,
    "endpoint_health": EndpointHealthSettings, "email": EmailSettings,
    "telegram": TelegramSettings, "audit": AuditSettings,
    "events": EventSettings,
}


@dataclass(frozen=True)
class Variable:
    name: str
    target: tuple[str, str]  # (section, attribute); section "" is the top level
    parse: Callable[[str], Any]
    help: str

    @property
    def default_cell(self) -> str:
        """The default as a docs table shows it: as code, or *empty*."""
        return f"`{self.default}`" if self.default else "*empty*"

    @property
    def default(self) -> str:
        """The default as it would be written in the environment (from the dataclass field)."""
        section, attr = self.target
        owner = Settings if not section else _SECTIONS[section]
        value = next(f for f in dataclasses.fields(owner) if f.name == attr).default
        return _render(value)


def _render(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(_render(v) for v in value)
    if isinstance(value, Path):
        return str(value.relative_to(REPO_ROOT)) if value.is_relative_to(REPO_ROOT) else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


VARIABLES: tuple[Variable, ...] = (
    Variable("TRIGGER_API_HOST", ("api", "host"), str, "API listen address"),
    Variable("TRIGGER_API_PORT", ("api", "port"), _pos_int, "API listen port"),
    Variable("TRIGGER_API_WORKERS", ("api", "workers"), _pos_int,
             "API processes sharing the port (SO_REUSEPORT); 0: one per core"),
    Variable("TRIGGER_API_CALLERS_FILE", ("api", "callers_file"), Path,
             "TOML file of callers (tokens, callback prefixes)"),
    Variable("TRIGGER_API_PAYLOAD_MAX_BYTES", ("api", "payload_max_bytes"), _pos_int,
             "largest serialized payload accepted"),
    Variable("TRIGGER_API_MAX_FIRE_AHEAD_DAYS", ("api", "max_fire_ahead_days"), _pos_int,
             "furthest fire time accepted, in days from now; a recurring rule's next "
             "occurrence is looked for this far after the previous one"),
    Variable("TRIGGER_API_MIN_RECURRENCE_INTERVAL_S", ("api", "min_recurrence_interval_s"),
             _pos_int, "a rule whose occurrences come closer than this is refused"),
    Variable("TRIGGER_API_MAX_JITTER_S", ("api", "max_jitter_s"), _pos_int,
             "largest jitterSeconds accepted (each occurrence fires up to this late, on "
             "purpose); 0 refuses any jitter"),
    Variable("TRIGGER_API_CATCH_UP_TOLERANCE_S", ("api", "catch_up_tolerance_s"), _pos_int,
             "how late a series' occurrence may be and still fire on time: later, it is "
             "missed, and fires or not by the series' catch-up policy (not at a resume: "
             "everything that came due while paused is missed)"),
    Variable("TRIGGER_API_PUBLIC_URL", ("api", "public_url"), str,
             "the API's address as people reach it: acknowledgement links start with it"),
    Variable("TRIGGER_API_ACK_SECRET", ("api", "ack_secret"), str,
             "HMAC key of the acknowledgement links (set your own in production)"),
    Variable("TRIGGER_API_ACK_PREVIOUS_SECRETS", ("api", "ack_previous_secrets"), _str_list,
             "comma list of earlier acknowledgement link keys: their links still verify, "
             "none is signed with them (keep one until its last link expired)"),
    Variable("TRIGGER_API_ACK_LINK_TTL_S", ("api", "ack_link_ttl_s"), _pos_int,
             "how long an acknowledgement link works after its occurrence's fire time"),
    Variable("TRIGGER_API_SECRET_ROTATIONS_PER_MINUTE",
             ("api", "secret_rotations_per_minute"), _pos_int,
             "signing-secret rotations a caller may make per minute (more: 429 with Retry-After)"),
    Variable("TRIGGER_ENV", ("", "env"), env_kind,
             "production (the default; development must be asked for) refuses development "
             "credentials, as does any listener off loopback (docs/operations/production.md)"),
    Variable("TRIGGER_SHARDS", ("", "shards"), _pos_int,
             "bucket sub-shards per minute (stable hash of the id modulo this)"),
    Variable("TRIGGER_RETENTION_DAYS", ("", "retention_days"), _pos_int,
             "how long finished triggers stay readable"),
    Variable("TRIGGER_DIRECT_MAX_DELAY_S", ("", "direct_max_delay_s"), _pos_int,
             "fire times within this many seconds go straight to SQS; later ones wait for the "
             "sweeper"),
    Variable("TRIGGER_IDEMPOTENCY_RETENTION_S", ("", "idempotency_retention_s"), _pos_int,
             "idempotency keys are kept this long after the fire time"),
    Variable("TRIGGER_ATTEMPTS_KEPT", ("", "attempts_kept"), _pos_int,
             "delivery attempts kept per trigger for its attempts listing (the newest; the "
             "listing's largest limit)"),
    Variable("TRIGGER_LOG_LEVEL", ("", "log_level"), str.upper, "log level"),
    Variable("TRIGGER_LOG_FORMAT", ("", "log_format"), str, "json or console"),
    *(Variable(*row) for row in CASSANDRA_VARIABLES),
    *(Variable(*row) for row in SQS_VARIABLES),
    *(Variable(*row) for row in REDIS_VARIABLES),
    Variable("TRIGGER_DISPATCH_CALLBACK_TIMEOUT_S", ("dispatch", "callback_timeout_s"), _pos_float,
             "per-attempt callback timeout; part of a claim's lease (a takeover waits it out)"),
    Variable("TRIGGER_DISPATCH_VISIBILITY_SLACK_S", ("dispatch", "visibility_slack_s"), _pos_int,
             "a received message stays hidden for the callback timeout plus this; after that a "
             "crashed dispatcher's message reappears"),
    Variable("TRIGGER_DISPATCH_RETRY_AFTER_MAX_S", ("dispatch", "retry_after_max_s"), _pos_int,
             "a receiver's Retry-After (429/503) delays the next attempt by at most this"),
    Variable("TRIGGER_DISPATCH_SECRET_ROTATION_OVERLAP_S",
             ("dispatch", "secret_rotation_overlap_s"), _pos_int,
             "after a rotation the previous signing secret still signs this long"),
    Variable("TRIGGER_DISPATCH_SECRET_MAX_LIVE", ("dispatch", "secret_max_live"), _pos_int,
             "signing secrets of a caller that sign at once, the newest (a delivery carries one "
             "signature each); a rotation deletes the stored ones past this"),
    Variable("TRIGGER_DISPATCH_SIGNER_CACHE_SIZE", ("dispatch", "signer_cache_size"), _pos_int,
             "callers whose signing secrets and signers a dispatcher keeps (least recently "
             "used dropped)"),
    Variable("TRIGGER_DISPATCH_RETRY_BACKOFF_S", ("dispatch", "retry_backoff_s"), _int_list,
             "delay before attempt 2, 3, ...; the last value repeats"),
    Variable("TRIGGER_DISPATCH_MAX_ATTEMPTS", ("dispatch", "max_attempts"), _pos_int,
             "attempts before FAILED and the DLQ"),
    Variable("TRIGGER_DISPATCH_PROCESSES", ("dispatch", "processes"), _pos_int,
             "dispatcher processes `make up` starts"),
    Variable("TRIGGER_DISPATCH_RECEIVERS", ("dispatch", "receivers"), _pos_int,
             "the most concurrent SQS long-polls per dispatcher process (one runs always "
             "on each lane, even past this; another starts on a lane while its receives come "
             "back full)"),
    Variable("TRIGGER_DISPATCH_MAX_INFLIGHT", ("dispatch", "max_inflight"), _pos_int,
             "messages a dispatcher holds or delivers at once (about 14 KB of memory each: "
             "25,000 is about 350 MB); a herd larger than this is held in turns, hidden on "
             "SQS meanwhile, and drains slower"),
    Variable("TRIGGER_DISPATCH_WAIT_TIME_S", ("dispatch", "wait_time_s"), _pos_int,
             "SQS long-poll wait"),
    Variable("TRIGGER_DISPATCH_CLAIM_LEAD_MS", ("dispatch", "claim_lead_ms"), _pos_int,
             "a lone trigger's claim LWT (PENDING→IN_FLIGHT) runs this long before its fire "
             "time"),
    Variable("TRIGGER_DISPATCH_CLAIM_LEAD_MAX_MS", ("dispatch", "claim_lead_max_ms"), _pos_int,
             "with a backlog of held triggers claims start earlier, by the measured cost of "
             "each claim ahead, up to this long before the fire time"),
    Variable("TRIGGER_DISPATCH_CLAIM_CONCURRENCY", ("dispatch", "claim_concurrency"), _pos_int,
             "claim LWTs one dispatcher keeps in flight at once"),
    Variable("TRIGGER_DISPATCH_DEFAULT_MAX_CONCURRENCY", ("dispatch", "default_max_concurrency"),
             _pos_int,
             "bulkhead size for a caller that does not set max_concurrency"),
    Variable("TRIGGER_DISPATCH_BREAKER_FAIL_MAX", ("dispatch", "breaker_fail_max"), _pos_int,
             "consecutive failures (5xx, 429, timeouts, refused connections) that open a "
             "callback origin's circuit"),
    Variable("TRIGGER_DISPATCH_BREAKER_RESET_S", ("dispatch", "breaker_reset_s"), _pos_float,
             "how long an open circuit stays open before one trial call"),
    Variable("TRIGGER_DISPATCH_BREAKER_MAX_ORIGINS", ("dispatch", "breaker_max_origins"), _pos_int,
             "circuits (one per callback origin) a dispatcher keeps per caller; a new origin "
             "over it drops the caller's least recently used closed one"),
    Variable("TRIGGER_METRICS_HOST", ("", "metrics_host"), str,
             "listen address of the dispatcher's and sweeper's /metrics ports"),
    Variable("TRIGGER_METRICS_TOKEN", ("", "metrics_token"), str,
             "when set, the API's /metrics needs Authorization: Bearer <it> (and so do the "
             "dispatchers' and sweepers' /metrics ports)"),
    Variable("TRIGGER_DISPATCH_SLOT_FILE", ("dispatch", "slot_file"), str,
             "a file the dispatcher holds locked while it runs, one per dispatcher of a host "
             "(infra/app.sh names one); the next process to lock it has proved the last one "
             "dead, whose claims are then taken over without waiting out their leases"),
    Variable("TRIGGER_DISPATCH_METRICS_PORT", ("dispatch", "metrics_port"), _pos_int,
             "a dispatcher's own /metrics port, 0 = none (infra/app.sh gives its Nth "
             "dispatcher this + N - 1)"),
    *(Variable(*row) for row in SWEEP_VARIABLES),
    *(Variable(*row) for row in PROVIDER_VARIABLES),
    *(Variable(*row) for row in INBOX_VARIABLES),
    *(Variable(*row) for row in LIMIT_VARIABLES),
    *(Variable(*row) for row in ENCRYPTION_VARIABLES),
    *(Variable(*row) for row in EVENT_VARIABLES),
    *(Variable(*row) for row in ENDPOINT_HEALTH_VARIABLES),
    *(Variable(*row) for row in AUDIT_VARIABLES),
)

