"""``TRIGGER_ENV=production``: the start-up checks that keep development credentials and a
public ``/metrics`` out of production. Every process runs them (``platform.process``) before
it connects anywhere; a failure is a ``ConfigError`` naming what to change.

Refused in production:

- the development callers file (``config/callers.dev.toml``) as ``TRIGGER_CALLERS_FILE``;
- any caller or ops token whose hash is one of the development tokens' (those in the
  development callers file, and ``dev-token``, ``ops-token``, ``viewer-token``): their
  tokens are public;
- the default ``TRIGGER_ACK_SECRET``, or one shorter than 32 characters;
- ``/metrics`` reachable on a non-loopback address without ``TRIGGER_METRICS_TOKEN``: the
  API's (on ``TRIGGER_API_HOST``), and the dispatchers' and sweepers' own ports (on
  ``TRIGGER_METRICS_HOST``).

A token's entropy cannot be read off its hash, so it is not checked: the README asks for
tokens of at least 32 random bytes (``python -c 'import secrets;
print(secrets.token_urlsafe(32))'``) and this module refuses only the tokens known to be
public.
"""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.settings import REPO_ROOT, ApiSettings, Settings
from trigger_service.core.errors import ConfigError

DEV_CALLERS_FILE = REPO_ROOT / "config" / "callers.dev.toml"
# Tokens printed in the README and used by the development tooling.
DEV_TOKENS = ("dev-token", "ops-token", "viewer-token")
MIN_ACK_SECRET_CHARS = 32


def dev_token_hashes(dev_file: Path = DEV_CALLERS_FILE) -> set[str]:
    """The hashes of every publicly known token: the development file's and ``DEV_TOKENS``'."""
    hashes = {hash_token(t) for t in DEV_TOKENS}
    try:
        data = tomllib.loads(dev_file.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return hashes  # not shipped with this install: the fixed list is all there is
    for section in ("callers", "ops"):
        for table in (data.get(section) or {}).values():
            raw = table.get("token_sha256") if isinstance(table, dict) else None
            hashes.update(str(h).lower() for h in (raw if isinstance(raw, list) else [raw])
                          if h)
    return hashes


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name (or "" / "0.0.0.0"-like wildcards) may be reachable from outside


def production_problems(settings: Settings, callers: CallerRegistry) -> list[str]:
    """Everything that makes ``settings`` unfit for production (empty: fit)."""
    api = settings.api
    problems: list[str] = []
    if Path(api.callers_file).resolve() == DEV_CALLERS_FILE.resolve():
        problems.append("TRIGGER_CALLERS_FILE is the development file (its tokens are public)")
    public = callers.token_hashes() & dev_token_hashes()
    if public:
        problems.append(f"the callers file holds {len(public)} development token hash(es) "
                        "(dev-token, ops-token, ...): give every caller its own token")
    if api.ack_secret == ApiSettings.ack_secret or len(api.ack_secret) < MIN_ACK_SECRET_CHARS:
        problems.append(f"TRIGGER_ACK_SECRET must be set to a secret of at least "
                        f"{MIN_ACK_SECRET_CHARS} characters")
    if any(len(k) < MIN_ACK_SECRET_CHARS or k == ApiSettings.ack_secret
           for k in api.ack_previous_secrets):
        problems.append(f"TRIGGER_ACK_PREVIOUS_SECRETS: every key must be a secret of at "
                        f"least {MIN_ACK_SECRET_CHARS} characters")
    if not settings.limits.metrics_token:
        for var, host in (("TRIGGER_API_HOST", api.host),
                          ("TRIGGER_METRICS_HOST", settings.metrics_host)):
            if not is_loopback(host):
                problems.append(f"{var}={host} serves /metrics off loopback: set "
                                "TRIGGER_METRICS_TOKEN")
    return problems


def check_production(settings: Settings) -> None:
    """In production, raise ``ConfigError`` listing every problem; otherwise do nothing."""
    if not settings.limits.production:
        return
    problems = production_problems(settings, CallerRegistry.load(settings.api.callers_file))
    if problems:
        raise ConfigError("TRIGGER_ENV=production refuses to start: " + "; ".join(problems))
