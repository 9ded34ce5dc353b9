"""FCM with a service account: google-auth signs the RS256 assertion and exchanges it at
the account file's ``token_uri``, here a token endpoint on a loopback port that checks the
assertion with the account's public key (a key pair made for the test), then the push goes
to the FCM simulator with that token. No Cassandra, SQS or Redis needed."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from dispatcher.channels.fcm_auth import FCM_SCOPE
from dispatcher.channels.push import PushNotifier
from tests.providers import PushSimulator, _Simulator
from trigger_service.config.providers import PushSettings
from trigger_service.core.errors import ConfigError
from trigger_service.core.notify.channels import OccurrenceNotice, PushSpec
from trigger_service.core.time.clock import ManualClock

pytestmark = pytest.mark.integration

OCC = OccurrenceNotice("01JTRIGGER", "01JTRIGGER.1", "dev", 0, 1_700_000_000_000)
SPEC = PushSpec("device-token-1", "Standup", "in 5 minutes")
CLIENT_EMAIL = "reminders@trigger-dev.iam.gserviceaccount.com"
KEY_ID = "k1"
# The audience google-auth's assertions name whatever the token_uri (Google's endpoint).
GOOGLE_AUDIENCE = "https://oauth2.googleapis.com/token"


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


class TokenEndpoint(_Simulator):
    """Google's OAuth2 token endpoint for the JWT-bearer grant, as far as a client sees it.
    Each grant whose assertion verifies gets a new token ``sa-token-<n>`` (and becomes the
    FCM simulator's only accepted bearer); ``refuse`` scripts the next answers."""

    def __init__(self, public_key: rsa.RSAPublicKey, fcm: PushSimulator,
                 expires_in_s: int) -> None:
        super().__init__()
        self.public_key, self.fcm, self.expires_in_s = public_key, fcm, expires_in_s
        self.url = ""
        self.issued: list[str] = []
        self.claims: list[dict[str, Any]] = []
        self.refusals: list[tuple[int, dict[str, str]]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/token", self._token)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port``; returns the token URL (``url``)."""
        self.url = f"{await super().start(host, port)}/token"
        return self.url

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if self.refusals:
            status, body = self.refusals.pop(0)
            return web.json_response(body, status=status)
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        claims = self._verified(str(form.get("assertion", "")))
        if claims is None:
            return web.json_response({"error": "invalid_grant",
                                      "error_description": "Invalid JWT Signature."}, status=400)
        self.claims.append(claims)
        token = f"sa-token-{len(self.issued) + 1}"
        self.issued.append(token)
        self.fcm.bearer = token
        return web.json_response({"access_token": token, "expires_in": self.expires_in_s,
                                  "token_type": "Bearer"})

    def _verified(self, assertion: str) -> dict[str, Any] | None:
        """The claims of an RS256 JWT signed by the account's key, addressed to us."""
        try:
            header_b64, claims_b64, signature_b64 = assertion.split(".")
            header, claims = json.loads(_b64(header_b64)), json.loads(_b64(claims_b64))
            self.public_key.verify(_b64(signature_b64), f"{header_b64}.{claims_b64}".encode(),
                                   padding.PKCS1v15(), hashes.SHA256())
        except (ValueError, InvalidSignature):
            return None
        now = time.time()
        ok = (header.get("alg") == "RS256" and header.get("kid") == KEY_ID
              and claims.get("iss") == CLIENT_EMAIL and claims.get("aud") == GOOGLE_AUDIENCE
              and FCM_SCOPE in str(claims.get("scope", "")).split()
              and claims["iat"] - 60 <= now <= claims["exp"] and claims["exp"] - claims["iat"]
              <= 3600)
        return claims if ok else None


@pytest.fixture
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
async def fcm() -> AsyncIterator[PushSimulator]:
    sim = PushSimulator(bearer="none-yet")
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def endpoint(key: rsa.RSAPrivateKey, fcm: PushSimulator) -> AsyncIterator[TokenEndpoint]:
    server = TokenEndpoint(key.public_key(), fcm, expires_in_s=600)
    await server.start()
    yield server
    await server.stop()


def account_file(tmp_path: Path, key: rsa.RSAPrivateKey, token_uri: str) -> str:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "service-account.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "trigger-dev", "private_key_id": KEY_ID,
        "private_key": pem, "client_email": CLIENT_EMAIL, "client_id": "1",
        "token_uri": token_uri}))
    return str(path)


@pytest.fixture
async def push(tmp_path: Path, key: rsa.RSAPrivateKey, endpoint: TokenEndpoint,
               fcm: PushSimulator) -> AsyncIterator[tuple[PushNotifier, ManualClock]]:
    clock = ManualClock()
    notifier = PushNotifier(PushSettings(base_url=fcm.base_url, bearer="unused",
                                         credentials_file=account_file(tmp_path, key,
                                                                       endpoint.url),
                                         timeout_s=5), clock=clock)
    await notifier.open()
    yield notifier, clock
    await notifier.close()


def bearers(fcm: PushSimulator) -> list[str]:
    return [r.headers["Authorization"] for r in fcm.requests]


async def test_pushes_carry_the_accounts_token_refreshed_before_it_expires(
        push: tuple[PushNotifier, ManualClock], endpoint: TokenEndpoint,
        fcm: PushSimulator) -> None:
    notifier, clock = push
    assert (await notifier.send(SPEC, OCC)).ok
    assert (await notifier.send(SPEC, OCC)).ok
    assert endpoint.issued == ["sa-token-1"]  # one grant serves both sends
    # 600 s tokens are refreshed 300 s before they expire: not at 299 s, at 301 s.
    clock.advance_ms(299_000)
    assert (await notifier.send(SPEC, OCC)).ok
    clock.advance_ms(2_000)
    out = await notifier.send(SPEC, OCC)
    assert out.ok and out.provider_message_id == fcm.messages[-1]["name"]
    assert endpoint.issued == ["sa-token-1", "sa-token-2"]
    assert bearers(fcm) == ["Bearer sa-token-1"] * 3 + ["Bearer sa-token-2"]
    assert endpoint.claims[0]["iss"] == CLIENT_EMAIL


async def test_a_token_fcm_refuses_is_replaced_and_the_send_tried_again(
        push: tuple[PushNotifier, ManualClock], endpoint: TokenEndpoint,
        fcm: PushSimulator) -> None:
    notifier, _ = push
    assert (await notifier.send(SPEC, OCC)).ok
    fcm.bearer = "revoked-everything"  # FCM no longer takes sa-token-1
    # Two sends refused at once share one new token.
    outs = await asyncio.gather(notifier.send(SPEC, OCC), notifier.send(SPEC, OCC))
    assert all(out.ok for out in outs)
    assert endpoint.issued == ["sa-token-1", "sa-token-2"]
    assert sorted(r.status for r in fcm.requests) == [200, 200, 200, 401, 401]
    assert sorted(bearers(fcm)[1:]) == ["Bearer sa-token-1"] * 2 + ["Bearer sa-token-2"] * 2


async def test_a_refused_grant_is_permanent_and_an_unavailable_endpoint_transient(
        push: tuple[PushNotifier, ManualClock], endpoint: TokenEndpoint,
        fcm: PushSimulator) -> None:
    notifier, _ = push
    endpoint.refusals.append((400, {"error": "invalid_grant",
                                    "error_description": "Invalid JWT Signature."}))
    refused = await notifier.send(SPEC, OCC)
    assert not refused.ok and refused.permanent and "invalid_grant" in (refused.error or "")
    # google-auth retries a 5xx itself a few times, then says it may work later.
    endpoint.refusals.extend([(503, {"error": "unavailable"})] * 5)
    unavailable = await notifier.send(SPEC, OCC)
    assert not unavailable.ok and not unavailable.permanent
    assert fcm.requests == []  # no push without a token
    endpoint.refusals.clear()
    assert (await notifier.send(SPEC, OCC)).ok


def test_an_unusable_account_file_stops_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "sa.json"
    bad.write_text(json.dumps({"type": "service_account", "client_email": CLIENT_EMAIL}))
    with pytest.raises(ConfigError, match="TRIGGER_PUSH_CREDENTIALS_FILE"):
        PushNotifier(PushSettings(credentials_file=str(bad)))
