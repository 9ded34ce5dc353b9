"""OAuth2 access tokens for FCM from a Google service-account file
(``TRIGGER_PUSH_CREDENTIALS_FILE``), with google-auth: it signs the RS256 JWT assertion and
exchanges it at the file's ``token_uri`` (the JWT-bearer grant, RFC 7523). Nothing of that
is ours: we only decide when to refresh.

google-auth is synchronous; a refresh runs in a worker thread (``asyncio.to_thread``) over
its own ``requests`` transport, one at a time (a lock: concurrent sends share the one
refresh). A token is refreshed ``REFRESH_MARGIN_S`` before it expires (or half its lifetime
before, for short-lived ones), timed on the injected ``Clock``, and at once after FCM
refused it (``invalidate``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import google.auth.exceptions
import google.auth.transport.requests
from google.oauth2 import service_account

from trigger_service.core.errors import ConfigError
from trigger_service.core.ports import Clock

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
REFRESH_MARGIN_S = 300.0


class TokenUnavailable(Exception):
    """No access token could be had; ``transient``: a later attempt may get one."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class _TimedRequest(google.auth.transport.requests.Request):
    """google-auth's requests transport with our timeout on every call (its default is
    120 s, longer than a send may take)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self._timeout_s = timeout_s

    def __call__(self, url: str, method: str = "GET", body: Any = None,
                 headers: Any = None, timeout: Any = None, **kwargs: Any) -> Any:
        return super().__call__(  # type: ignore[no-untyped-call]
            url, method=method, body=body, headers=headers, timeout=self._timeout_s, **kwargs)


def load_credentials(path: str) -> service_account.Credentials:
    """The file's credentials, scoped to FCM; ``ConfigError`` naming the variable when the
    file cannot be read or is not a service account's key."""
    try:
        info = json.loads(Path(path).read_text(encoding="utf-8"))
        credentials: service_account.Credentials = (
            service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
                info, scopes=[FCM_SCOPE]))
        return credentials
    except (OSError, ValueError, KeyError, TypeError,
            google.auth.exceptions.GoogleAuthError) as e:
        raise ConfigError(f"TRIGGER_PUSH_CREDENTIALS_FILE={path}: not a usable service-account "
                          f"file ({type(e).__name__}: {e})") from e


class ServiceAccountTokens:
    """The current access token of one service account; ``token()`` refreshes when due."""

    def __init__(self, path: str, *, clock: Clock, timeout_s: float) -> None:
        self._credentials = load_credentials(path)
        self._clock = clock
        self._request = _TimedRequest(timeout_s)
        self._lock = asyncio.Lock()
        self._token: str | None = None
        self._refresh_at_ms = 0

    def invalidate(self, token: str) -> None:
        """Forget ``token`` (FCM refused it): the next ``token()`` fetches a new one, unless
        a concurrent send has already replaced it."""
        if self._token == token:
            self._token = None

    async def token(self) -> str:
        """A token valid for at least the margin; raises ``TokenUnavailable``."""
        async with self._lock:
            if self._token is None or self._clock.now_ms() >= self._refresh_at_ms:
                await self._refresh()
            assert self._token is not None
            return self._token

    async def _refresh(self) -> None:
        started_ms = self._clock.now_ms()
        try:
            await asyncio.to_thread(self._credentials.refresh, self._request)
        except google.auth.exceptions.RefreshError as e:
            # The token endpoint refused the grant: a revoked or deleted key is not fixed by
            # retrying, an endpoint's 5xx (google-auth marks it retryable) may be.
            raise TokenUnavailable(f"token refresh refused: {e}",
                                   transient=bool(getattr(e, "retryable", False))) from e
        except google.auth.exceptions.TransportError as e:
            raise TokenUnavailable(f"token endpoint unreachable: {e}", transient=True) from e
        token = self._credentials.token
        expiry = self._credentials.expiry  # naive UTC, google-auth's own clock
        if not isinstance(token, str) or expiry is None:
            raise TokenUnavailable("the token endpoint gave no access token", transient=True)
        lifetime_s = (expiry.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds()
        margin_s = min(REFRESH_MARGIN_S, max(0.0, lifetime_s) / 2)
        self._token = token
        self._refresh_at_ms = started_ms + int((lifetime_s - margin_s) * 1000)
