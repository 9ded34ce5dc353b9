"""A trigger's recipient at send time: its profile read when the occurrence is
sent, so that a changed address or preference reaches every pending reminder.

- Each channel's address (and a ``"preferred"`` channel's type) comes from the profile
  (``core.recipient_profiles.resolve_spec``); the caller's recipient controls and budgets
  (``channels/caller_policy.py``, the notifiers' wrapper) then check the resolved address.
  A profile without the address a channel needs: that channel fails at once (provider code
  ``recipient_no_address``).
- The profile's quiet hours apply to a trigger that has none of its own.
- A deleted profile ends the trigger FAILED (a series too: it would only fail again), with
  the dead letter ``recipient_deleted``.

Profiles are cached ``PROFILE_CACHE_MS`` (2 s) at most, ``PROFILE_CACHE_ENTRIES`` of them: a
change reaches a send within those 2 s (a burst for one person reads the store once).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from trigger_service.core.model import Trigger
from trigger_service.core.notify.channels import ChannelOutcome, ChannelSpec
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports import Clock
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.recipient_profiles import NO_ADDRESS, RecipientProfile, resolve_spec

PROFILE_CACHE_MS = 2_000
PROFILE_CACHE_ENTRIES = 10_000


class SendTimeProfiles:
    def __init__(self, store: RecipientStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str], tuple[int, RecipientProfile | None]] = \
            OrderedDict()

    async def of(self, t: Trigger) -> RecipientProfile | None:
        """``t``'s recipient's profile as of at most ``PROFILE_CACHE_MS`` ago (None: deleted).
        Raises ``StoreError``."""
        assert t.recipient is not None
        key = (t.caller, t.recipient)
        now_ms = self._clock.now_ms()
        hit = self._cache.get(key)
        if hit is not None and now_ms - hit[0] < PROFILE_CACHE_MS:
            return hit[1]
        profile = await self._store.get_profile(t.caller, t.recipient)
        self._cache[key] = (now_ms, profile)
        self._cache.move_to_end(key)
        while len(self._cache) > PROFILE_CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return profile


def plan_for(plan: DeliveryPlan, profile: RecipientProfile | None) -> DeliveryPlan:
    """``plan`` with the profile's quiet hours when it has none of its own."""
    if profile is None or plan.quiet_hours is not None:
        return plan
    quiet = profile.effective_quiet_hours()
    return plan if quiet is None else replace(plan, quiet_hours=quiet)


def resolved(spec: ChannelSpec, plan: DeliveryPlan, profile: RecipientProfile | None
             ) -> ChannelSpec | ChannelOutcome:
    """The spec to send, or the outcome of one that cannot be sent (permanent)."""
    if profile is None:
        return ChannelOutcome(False, permanent=True, provider_code=NO_ADDRESS,
                              error="no recipient profile to resolve the address from")
    out = resolve_spec(profile, spec, preferred=plan.preferred)
    if isinstance(out, str):
        return ChannelOutcome(False, permanent=True, provider_code=NO_ADDRESS, error=out)
    return out
