"""The Redis clients a process opens (redis.asyncio): one bounded command pool, shared by the
cache, the lease, the limits and publishes; the API's inbox subscription has its own
(``inbox_bus``).

Every Redis connection of the project is opened here, so authentication and TLS are the same
everywhere: the ACL user and password come in the URL (``redis://user:password@host:port/db``)
and ``rediss://`` is TLS, verified against a CA file when one is given.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.config.stores import RedisSettings
from trigger_service.core.errors import CacheError, ConfigError

_TIMEOUT_S = 2


def open_client(url: str, max_connections: int = 64, client_name: str | None = None, *,
                tls_ca_file: str = "") -> aioredis.Redis:
    """A lazily connecting client: nothing is sent until the first command. Its pool holds
    at most ``max_connections``; a command finding them all busy waits up to 2 s for one,
    then fails (``ConnectionError``, a ``RedisError``), so a burst cannot open connections
    without bound. ``client_name``: its connections' name in Redis's CLIENT LIST. Closing the
    client closes its pool. For ``rediss://`` the server's certificate must be signed by
    ``tls_ca_file`` (the system's CAs when empty) and name the host of the URL. Raises
    ``ConfigError`` for a CA file with a plaintext URL (it would silently not be used)."""
    options: dict[str, Any] = {}
    if urlsplit(url).scheme == "rediss":
        options.update(ssl_cert_reqs="required", ssl_check_hostname=True)
        if tls_ca_file:
            options["ssl_ca_certs"] = tls_ca_file
    elif tls_ca_file:
        raise ConfigError("TRIGGER_REDIS_TLS_CA_FILE is set but TRIGGER_REDIS_URL is not "
                          "rediss:// (TLS)")
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=_TIMEOUT_S, socket_timeout=_TIMEOUT_S,
        socket_connect_timeout=_TIMEOUT_S, decode_responses=True, client_name=client_name,
        **options)
    client: aioredis.Redis = aioredis.Redis.from_pool(pool)
    return client


def open_from_settings(settings: RedisSettings) -> aioredis.Redis:
    """:func:`open_client` for the process's Redis settings (URL, pool size and CA file)."""
    return open_client(settings.url, settings.max_connections, tls_ca_file=settings.tls_ca_file)


class RedisPing:
    """``Pingable`` for readiness checks."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    async def ping(self) -> None:
        try:
            await self._r.ping()
        except (RedisError, OSError) as e:
            raise CacheError(f"redis unreachable: {e}") from e
