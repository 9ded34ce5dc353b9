"""The webhook ``Channel``: POST the trigger to its callback URL.

Redirects are not followed (a redirect could leave the caller's allowed prefixes); any
status outside 2xx, a timeout or a connection error is a failed attempt. A 429 or 503's
``Retry-After`` (seconds or an HTTP date) is reported with the result.

Signatures follow Standard Webhooks (https://www.standardwebhooks.com), made with the
``standardwebhooks`` package: ``webhook-id`` is the occurrence id, ``webhook-timestamp`` the
send time (Unix seconds), ``webhook-signature`` one ``v1,<base64>`` per signing secret of the
caller (the current one first), space-separated, so a receiver holding any of them verifies.
A caller has at most ``TRIGGER_DISPATCH_SECRET_MAX_LIVE`` signing secrets at once, so at most
that many signatures; the signers are kept for the ``TRIGGER_DISPATCH_SIGNER_CACHE_SIZE`` most
recently used callers.

The SSRF guard: the URL is normalised again (it was stored normalised: the same
text) and sent in exactly that form. Unless a prefix of the trigger's caller names the host
(``trusts``: the operator chose it, internal addresses included), the request goes through a
session whose resolver refuses forbidden addresses and dials only the addresses it checked
(``guard.py``); IP literals and ``localhost`` are classified here. A refusal is a result with
``refused`` set: permanent, dead-lettered ``callback_not_allowed``. Two sessions rather than a
per-request flag: aiohttp's DNS cache and connection pool are per connector, so a trusted
caller's lookup or connection is never reused for an untrusted one.

At most ``MAX_RESPONSE_BYTES`` of an answer are read (the first ``EXCERPT_MAX_BYTES`` are
kept for the attempt history); past that the connection is closed instead of drained.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Sequence

import aiohttp
import structlog
from standardwebhooks.webhooks import Webhook
from yarl import URL

from dispatcher.channels.guard import AddressRefused, GuardedResolver, Lookup, system_lookup
from dispatcher.channels.provider_http import clock_now, retry_after_s
from dispatcher.lru import Lru
from trigger_service.core.dead_letters import EXCERPT_MAX_BYTES, excerpt
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Trigger
from trigger_service.core.notify.addresses import forbidden_address, forbidden_name
from trigger_service.core.notify.signing import webhook_headers
from trigger_service.core.ports import Clock
from trigger_service.core.ports.values import DeliveryResult
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.core.trace_context import inject
from trigger_service.core.urls import CallbackUrl, UrlError, normalise_callback_url

log = structlog.get_logger(__name__)

# A host name that resolved, at delivery, to an address the guard refuses (the same words
# as the API's 422: neither says where the name points).
REFUSED_ADDRESS = "refused: the host resolves to an address that is not allowed"

_MAX_ERROR_LEN = 500
MAX_RESPONSE_BYTES = 64 * 1024

SecretsFor = Callable[[str], Awaitable[Sequence[str]]]
# (caller, url) -> does a prefix of the caller that admits url name its host?
TrustsHost = Callable[[str, CallbackUrl], bool]


async def no_secrets(caller: str) -> Sequence[str]:
    return ()


def trusts_nothing(caller: str, url: CallbackUrl) -> bool:
    return False


class WebhookChannel:
    def __init__(self, timeout_s: float, *, clock: Clock | None = None,
                 secrets_for: SecretsFor = no_secrets, max_connections: int = 1000,
                 trusts: TrustsHost = trusts_nothing, lookup: Lookup = system_lookup,
                 max_signer_callers: int = 1_000) -> None:
        """``trusts``: ``CallerRegistry.names_callback_host`` (the default trusts no host:
        every callback guarded); ``lookup``: DNS (tests replace it); ``max_connections``
        for each of the two sessions; ``max_signer_callers``: callers whose signers are
        kept (least recently used dropped)."""
        self._trusts = trusts
        self._lookup = lookup
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._secrets_for = secrets_for
        self._signers: Lru[str, tuple[tuple[str, ...], list[Webhook]]] = Lru(max_signer_callers)
        self._max_connections = max_connections
        self._guarded: aiohttp.ClientSession | None = None
        self._trusted: aiohttp.ClientSession | None = None

    async def signature_headers(self, trigger: Trigger, body: str) -> dict[str, str]:
        """The Standard Webhooks headers for ``body`` (none if the caller has no secret)."""
        secrets = tuple(await self._secrets_for(trigger.caller))
        if not secrets:
            return {}
        return webhook_headers(self._signers_of(trigger.caller, secrets), trigger.occurrence_id,
                               clock_now(self._clock), body)

    def _signers_of(self, caller: str, secrets: tuple[str, ...]) -> list[Webhook]:
        """The signers of ``secrets``, kept per caller (made again when they change)."""
        kept = self._signers.get(caller)  # (a hit is now the most recently used)
        if kept is None or kept[0] != secrets:
            kept = (secrets, [Webhook(secret) for secret in secrets])
            self._signers.put(caller, kept)
        return kept[1]

    async def _headers(self, trigger: Trigger, attempt: int, body: str,
                       ends_at: float) -> dict[str, str]:
        """The request's headers, signed; raises ``StoreError`` when the signing secrets
        are not read by ``ends_at`` (the event loop's time): a refresh of the secrets is a
        store read, and it spends the send's time."""
        try:
            async with asyncio.timeout_at(ends_at):
                signed = await self.signature_headers(trigger, body)
        except TimeoutError as e:
            raise StoreError("signing secrets not read within the send's time") from e
        headers = {
            "Content-Type": "application/json",
            "X-Trigger-Id": trigger.trigger_id,
            "X-Trigger-Occurrence-Id": trigger.occurrence_id,
            "X-Trigger-Attempt": str(attempt),
            **signed,
        }
        inject(headers)  # the send's W3C traceparent (the caller's own with export off)
        return headers

    def retry_after_s(self, value: str | None) -> float | None:
        """``Retry-After`` as seconds from now (``provider_http.retry_after_s``)."""
        return retry_after_s(value, clock_now(self._clock))

    def _new_session(self, *, guard: bool) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, limit_per_host=0, ttl_dns_cache=60,
            resolver=GuardedResolver(self._lookup, guard=guard))
        # trust_env stays off: no proxy from the environment dials on our behalf.
        return aiohttp.ClientSession(
            connector=connector, timeout=self._timeout,
            headers={"User-Agent": "trigger-service-dispatcher/0.1"})

    async def open(self) -> None:
        self._guarded = self._new_session(guard=True)
        self._trusted = self._new_session(guard=False)

    async def close(self) -> None:
        for session in (self._guarded, self._trusted):
            if session is not None:
                await session.close()

    def _session_for(self, trigger: Trigger) -> tuple[aiohttp.ClientSession, CallbackUrl]:
        """The session to send ``trigger`` with and its URL; raises ``UrlError`` when the
        URL (or its literal address) is refused."""
        return self._session_for_url(trigger.caller, trigger.callback_url)

    def _session_for_url(self, caller: str, url_text: str
                         ) -> tuple[aiohttp.ClientSession, CallbackUrl]:
        assert self._guarded is not None and self._trusted is not None, "open() first"
        url = normalise_callback_url(url_text)
        if self._trusts(caller, url):
            return self._trusted, url
        ip = url.ip
        why = forbidden_address(ip) if ip is not None else forbidden_name(url.host)
        if why is not None:
            raise UrlError(f"{url.host} is {why}: not allowed for this callback")
        return self._guarded, url

    async def post_event(self, caller: str, url_text: str, event_id: str,
                         body: str, timeout_s: float | None = None) -> DeliveryResult:
        """POST an event to ``caller`` (``dispatcher.caller_events``), signed with the
        caller's secrets as a callback is, ``webhook-id`` ``event_id``; through the same
        sessions and SSRF guard as its callbacks, within ``timeout_s`` (never more than the
        channel's timeout). Raises
        ``StoreError`` when the signing secrets cannot be read (nothing is sent unsigned)."""
        try:
            session, url = self._session_for_url(caller, url_text)
        except UrlError as e:
            return DeliveryResult(False, None, f"refused: {e}"[:_MAX_ERROR_LEN], refused=True)
        secrets = tuple(await self._secrets_for(caller))
        signed = (webhook_headers(self._signers_of(caller, secrets), event_id,
                                  clock_now(self._clock), body) if secrets else {})
        headers = {"Content-Type": "application/json", **signed}
        limit_s = self._timeout_s if timeout_s is None else min(timeout_s, self._timeout_s)
        return await self._post(session, url, body, headers, limit_s, limit_s,
                                {"caller": caller, "event_id": event_id})

    async def deliver(self, trigger: Trigger, attempt: int,
                      timeout_s: float | None = None) -> DeliveryResult:
        """POST ``trigger``; the whole call, the signing secrets' read included, ends within
        ``timeout_s`` (None: the channel's timeout; never more): the dispatcher's claim
        fence counts on no part of a send outlasting it. Raises ``StoreError`` when the
        signing secrets cannot be read in that time (nothing is sent unsigned)."""
        limit_s = self._timeout_s if timeout_s is None else min(timeout_s, self._timeout_s)
        loop = asyncio.get_running_loop()
        ends_at = loop.time() + limit_s
        try:
            session, url = self._session_for(trigger)
        except UrlError as e:
            return DeliveryResult(False, None, f"refused: {e}"[:_MAX_ERROR_LEN], refused=True)
        fire_at = json.dumps(format_rfc3339_ms(trigger.fire_at_ms))
        # With jitterSeconds the occurrence was scheduled before it was made to fire.
        scheduled = json.dumps(format_rfc3339_ms(trigger.scheduled_at_ms))
        body = ('{"triggerId":' + json.dumps(trigger.trigger_id)
                + ',"occurrenceId":' + json.dumps(trigger.occurrence_id)
                + ',"payload":' + trigger.payload_json
                + ',"fireAt":' + fire_at + ',"scheduledAt":' + scheduled + "}")
        headers = await self._headers(trigger, attempt, body, ends_at)
        post_s = ends_at - loop.time()
        if post_s <= 0:
            raise StoreError(f"signing secrets not read within {limit_s:g}s")
        return await self._post(session, url, body, headers, post_s, limit_s,
                                {"trigger_id": trigger.trigger_id})

    async def _post(self, session: aiohttp.ClientSession, url: CallbackUrl, body: str,
                    headers: dict[str, str], post_s: float, limit_s: float,
                    ctx: dict[str, str]) -> DeliveryResult:
        """The POST and its answer as a result; ``ctx``: what the log names it by."""
        try:
            async with session.post(
                _yarl_url(url.text), data=body.encode(), headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=post_s),
            ) as resp:
                text = await _read_excerpt(resp)
                if 200 <= resp.status < 300:
                    return DeliveryResult(True, resp.status, None, response_excerpt=text)
                retry_after = (self.retry_after_s(resp.headers.get("Retry-After"))
                               if resp.status in (429, 503) else None)
                return DeliveryResult(False, resp.status, f"HTTP {resp.status}", retry_after,
                                      text)
        except TimeoutError:
            return DeliveryResult(False, None, f"timeout after {limit_s:g}s")
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, AddressRefused):
                # The error is shown to the caller (lastError, dead letters, attempts): the
                # address a name resolves to inside, and its range, go to the log only.
                refused = e.os_error
                log.warning("callback_address_refused", **ctx,
                            host=refused.host, address=str(refused.ip), why=refused.why)
                return DeliveryResult(False, None, REFUSED_ADDRESS, refused=True)
            return DeliveryResult(False, None, f"{type(e).__name__}: {e}"[:_MAX_ERROR_LEN])
        except aiohttp.ClientError as e:
            msg = f"{type(e).__name__}: {e}"
            return DeliveryResult(False, None, msg[:_MAX_ERROR_LEN])
        except (OSError, asyncio.IncompleteReadError) as e:
            return DeliveryResult(False, None, f"{type(e).__name__}: {e}"[:_MAX_ERROR_LEN])


@functools.lru_cache(maxsize=4096)
def _yarl_url(text: str) -> URL:
    """The normalised text as yarl's URL, once per URL. encoded=True: yarl sends the text as
    it is, re-quoting nothing."""
    return URL(text, encoded=True)


async def _read_excerpt(resp: aiohttp.ClientResponse) -> str | None:
    """Read at most ``MAX_RESPONSE_BYTES`` of the answer and keep its first
    ``EXCERPT_MAX_BYTES`` (the attempt history's excerpt). A longer answer's connection is
    closed rather than drained: a receiver cannot make us read a large body."""
    kept = bytearray()
    read = 0
    while read < MAX_RESPONSE_BYTES:
        chunk = await resp.content.read(MAX_RESPONSE_BYTES - read)
        if not chunk:
            break
        read += len(chunk)
        kept += chunk[:max(0, EXCERPT_MAX_BYTES - len(kept))]
    if not resp.content.at_eof():
        resp.close()
    return excerpt(bytes(kept))
