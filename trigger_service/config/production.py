"""The production check: fail closed. Every process runs it (``platform.process``) before it
connects anywhere; a failure is one ``ConfigError`` naming every problem.

Production is the default: the check applies unless ``TRIGGER_ENV=development`` is set, so
forgetting that one variable never opens the development credentials, on loopback behind a
reverse proxy of the same host included. It applies **as well** when any listener is off
loopback (``TRIGGER_API_HOST``, or ``TRIGGER_METRICS_HOST`` where the dispatchers' and
sweepers' ``/metrics`` listen): a process others can reach is a production process whatever
``TRIGGER_ENV`` says. Only on loopback with ``TRIGGER_ENV=development`` (what ``make up``, the
tests, the bench and chaos runs set) is nothing checked.

Refused (this module: who may get in; ``production_deps``: what the service connects to):

- the development callers file (``config/callers.dev.toml``) as ``TRIGGER_API_CALLERS_FILE``;
- any caller or ops token whose hash is one of the development tokens' (those in the
  development callers file, and ``dev-token``, ``ops-token``, ``viewer-token``): their
  tokens are public. A callers file reloaded on SIGHUP is held to the same rule;
- the default ``TRIGGER_API_ACK_SECRET``, or one shorter than 32 characters;
- ``/metrics`` without ``TRIGGER_METRICS_TOKEN``: the API's always (on loopback it is a
  reverse proxy's upstream), the dispatchers' and sweepers' on a non-loopback address;
- ``TRIGGER_API_PUBLIC_URL`` on loopback (acknowledgement links would point at the reader's own
  machine) or not ``https://`` (the links carry signed tokens).

``production_needs.PRODUCTION_NEEDS`` lists every variable these checks read, for
docs/operations/production.md. A token's entropy cannot be read off its hash, so it is not
checked: that page asks for tokens of at least 32 random bytes and this module refuses only
the tokens known to be public.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from urllib.parse import urlsplit

from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.live_callers import Vet
from trigger_service.config.production_deps import dependency_problems, is_loopback
from trigger_service.config.settings import REPO_ROOT, ApiSettings, Settings
from trigger_service.core.errors import ConfigError

DEV_CALLERS_FILE = REPO_ROOT / "config" / "callers.dev.toml"
# Tokens printed in the docs and used by the development tooling.
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


def listeners_off_loopback(settings: Settings) -> list[str]:
    """``VARIABLE=host`` of every listen address others may reach."""
    return [f"{var}={host}" for var, host in (("TRIGGER_API_HOST", settings.api.host),
                                              ("TRIGGER_METRICS_HOST", settings.metrics_host))
            if not is_loopback(host)]


def production_reason(settings: Settings) -> str | None:
    """Why the production check applies to ``settings`` (``None``: it does not)."""
    if settings.production:
        return ("TRIGGER_ENV=production (the default: a development run sets "
                "TRIGGER_ENV=development)")
    public = listeners_off_loopback(settings)
    if public:
        return f"{' and '.join(public)} off loopback (production rules apply)"
    return None


def callers_problems(callers: CallerRegistry) -> list[str]:
    """What makes a callers file unfit for production: tokens everyone knows."""
    public = callers.token_hashes() & dev_token_hashes()
    if not public:
        return []
    return [f"TRIGGER_API_CALLERS_FILE holds {len(public)} development token hash(es) "
            "(dev-token, ops-token, ...): give every caller its own token"]


def callers_vet(settings: Settings) -> Vet | None:
    """What a callers file reloaded on SIGHUP must pass (``None``: anything that loads)."""
    return callers_problems if production_reason(settings) else None


def _metrics_problems(settings: Settings) -> list[str]:
    if settings.metrics_token:
        return []
    public = listeners_off_loopback(settings)
    problems = [f"{listener} serves /metrics off loopback: set TRIGGER_METRICS_TOKEN"
                for listener in public]
    if settings.production and not any(p.startswith("TRIGGER_API_HOST=") for p in public):
        # On loopback the API is a reverse proxy's upstream: its /metrics is as public as
        # its routes.
        problems.append("the API serves /metrics to whoever reaches it, through a reverse "
                        "proxy too: set TRIGGER_METRICS_TOKEN")
    return problems


def _access_problems(settings: Settings) -> list[str]:
    api = settings.api
    problems: list[str] = []
    if Path(api.callers_file).resolve() == DEV_CALLERS_FILE.resolve():
        problems.append("TRIGGER_API_CALLERS_FILE is the development file (its tokens are public)")
    if api.ack_secret == ApiSettings.ack_secret or len(api.ack_secret) < MIN_ACK_SECRET_CHARS:
        problems.append(f"TRIGGER_API_ACK_SECRET must be set to a secret of at least "
                        f"{MIN_ACK_SECRET_CHARS} characters")
    if any(len(k) < MIN_ACK_SECRET_CHARS or k == ApiSettings.ack_secret
           for k in api.ack_previous_secrets):
        problems.append(f"TRIGGER_API_ACK_PREVIOUS_SECRETS: every key must be a secret of at "
                        f"least {MIN_ACK_SECRET_CHARS} characters")
    problems += _metrics_problems(settings)
    url = urlsplit(api.public_url)
    if is_loopback(url.hostname or ""):
        problems.append(f"TRIGGER_API_PUBLIC_URL={api.public_url} is on loopback: acknowledgement "
                        "links would point at the reader's own machine")
    if url.scheme != "https":
        problems.append("TRIGGER_API_PUBLIC_URL must be https:// (acknowledgement links carry "
                        "signed tokens)")
    return problems


def production_problems(settings: Settings, callers: CallerRegistry) -> list[str]:
    """Everything that makes ``settings`` and ``callers`` unfit for production (empty: fit)."""
    return [*_access_problems(settings), *callers_problems(callers),
            *dependency_problems(settings)]


def check_production(settings: Settings) -> None:
    """When the production check applies (``production_reason``), raise ``ConfigError``
    listing every problem; otherwise do nothing. Raises ``ConfigError`` too when the callers
    file does not load."""
    reason = production_reason(settings)
    if reason is None:
        return
    problems = production_problems(settings, CallerRegistry.load(settings.api.callers_file))
    if problems:
        raise ConfigError(f"{reason}: refusing to start with {len(problems)} problem(s): "
                          + "; ".join(problems))
