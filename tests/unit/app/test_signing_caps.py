"""Signing secrets stay few per caller: a rotation retires the stored secrets that no longer
sign, rotations are rate limited per caller (429 with ``Retry-After``), a delivery carries at
most ``max_live`` signatures, and a dispatcher keeps the signers of a bounded number of
callers."""

from __future__ import annotations

from standardwebhooks.webhooks import Webhook

from dispatcher.channels.webhook import WebhookChannel
from dispatcher.lru import Lru
from dispatcher.secrets import SecretBook
from trigger_service.adapters.memory.limits import MemoryRateLimiter
from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.app.signing import RotationPolicy, SigningSecrets
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.core.errors import RateLimited
from trigger_service.core.model import Route, Trigger
from trigger_service.core.notify.signing import active_secrets, new_secret
from trigger_service.core.time.clock import ManualClock

NOW_MS = 1_700_000_000_000
POLICY = RotationPolicy(overlap_s=86_400, max_live=3, rotations_per_minute=3)
NO_FILE = CallerRegistry.from_mapping(
    {"callers": {"other": {"token_sha256": hash_token("t"),
                           "callback_prefixes": ["https://example.com/"]}}})


def signing(store: MemoryStore, clock: ManualClock) -> SigningSecrets:
    return SigningSecrets(store, clock, MemoryRateLimiter(clock), POLICY)


async def signing_now(store: MemoryStore, clock: ManualClock, caller: str,
                      file_secrets: list[str]) -> list[str]:
    """The secrets that sign ``caller``'s deliveries now, by the rotation policy."""
    return active_secrets(await store.secrets(caller, POLICY.max_live), file_secrets,
                          clock.now_ms(), POLICY.overlap_s * 1000, POLICY.max_live)


class WatchedChannel(WebhookChannel):
    @property
    def signer_callers(self) -> int:
        """How many callers' signers are kept (at most ``max_signer_callers``)."""
        return len(self._signers)


async def test_fifty_rotations_leave_at_most_the_cap_stored_and_signing() -> None:
    store, clock = MemoryStore(), ManualClock(NOW_MS)
    book = signing(store, clock)
    shown = []
    for _ in range(50):  # all within one overlap; a minute apart: within the rate
        shown.append((await book.rotate("c")).secret)
        clock.advance_ms(60_000)
    assert len(store.signing_secrets["c"]) <= POLICY.max_live
    assert await signing_now(store, clock, "c", ["whsec_file"]) == shown[::-1][:POLICY.max_live]
    dispatcher_book = SecretBook(store, NO_FILE, clock, 86_400, max_live=3)
    assert list(await dispatcher_book.for_caller("c")) == shown[::-1][:3]


async def test_the_fourth_rotation_in_a_minute_is_refused_until_a_token_is_back() -> None:
    store, clock = MemoryStore(), ManualClock(NOW_MS)
    book = signing(store, clock)
    for _ in range(3):
        await book.rotate("c")
    try:
        await book.rotate("c")
        raise AssertionError("a fourth rotation went through")
    except RateLimited as e:
        assert e.retry_after_s == 20 and e.headers() == {"Retry-After": "20"}
    await book.rotate("other")  # per caller
    clock.advance_ms(20_000)
    await book.rotate("c")
    assert len(store.signing_secrets["c"]) == 3


async def test_the_rate_limit_down_lets_a_rotation_through_still_capped() -> None:
    store, clock = MemoryStore(), ManualClock(NOW_MS)
    limiter = MemoryRateLimiter(clock)
    book = SigningSecrets(store, clock, limiter, POLICY)
    limiter.fail = True
    for _ in range(10):
        await book.rotate("c")
    assert len(store.signing_secrets["c"]) == 3


async def test_secrets_stored_before_the_cap_sign_three_at_most_read_three_at_most() -> None:
    """50 secrets stored (rotations of a release without the cap): a delivery carries 3
    signatures, and a refresh opens 3."""
    store, clock = MemoryStore(), ManualClock(NOW_MS)
    for i in range(50):
        await store.add_secret("c", NOW_MS - 50 + i, new_secret())
    book = SecretBook(store, NO_FILE, clock, 86_400, max_live=3)
    channel = WebhookChannel(1.0, clock=clock, secrets_for=book.for_caller)
    t = Trigger("trg_01HF7YAT0085GF0BANA9NK482Y", "c", "https://127.0.0.1:9/cb", "null",
                NOW_MS, NOW_MS, 0, Route.DIRECT)
    headers = await channel.signature_headers(t, "{}")
    assert len(headers["webhook-signature"].split(" ")) == 3
    assert store.secret_reads == 3


async def test_the_signer_cache_never_holds_more_callers_than_its_size() -> None:
    store, clock = MemoryStore(), ManualClock(NOW_MS)
    for n in range(200):
        await store.add_secret(f"c{n}", NOW_MS, new_secret())
    book = SecretBook(store, NO_FILE, clock, 86_400, max_live=3, max_callers=10)
    channel = WatchedChannel(1.0, clock=clock, secrets_for=book.for_caller,
                             max_signer_callers=10)
    for n in range(200):
        t = Trigger("trg_01HF7YAT0085GF0BANA9NK482Y", f"c{n}", "https://127.0.0.1:9/cb",
                    "null", NOW_MS, NOW_MS, 0, Route.DIRECT)
        assert (await channel.signature_headers(t, "{}"))["webhook-signature"]
        assert channel.signer_callers <= 10 and len(book) <= 10


def test_the_lru_drops_the_least_recently_used() -> None:
    lru: Lru[str, Webhook] = Lru(2)
    a, b, c = (Webhook(new_secret()) for _ in range(3))
    lru.put("a", a)
    lru.put("b", b)
    assert lru.get("a") is a  # now the most recently used
    lru.put("c", c)
    assert (lru.get("b"), lru.get("a"), lru.get("c"), len(lru)) == (None, a, c, 2)
