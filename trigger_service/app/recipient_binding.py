"""A trigger bound to a recipient profile at registration, edit and snooze: the
profile must exist (``422 recipient_not_found``), a floating time (``"timeZone":
"recipient"``) is read in the profile's zone, and the trigger joins the person's index
before its row is written (an entry pointing at no row is skipped by its readers)."""

from __future__ import annotations

from dataclasses import replace

from trigger_service.app.registration import RegisterRequest
from trigger_service.core.errors import RecipientNotFound
from trigger_service.core.model import Trigger
from trigger_service.core.ports.recipient import LinkedTrigger, RecipientStore


async def bind_recipient(recipients: RecipientStore | None, caller: str,
                         req: RegisterRequest) -> RegisterRequest:
    """``req`` with its time fields read in its recipient's zone when they float, and a
    ``when`` with its recipient's locale (the date order of "3/4"). Raises
    ``RecipientNotFound`` (also when no recipient store is wired) or ``StoreError``."""
    if req.recipient is None:
        return req
    profile = (await recipients.get_profile(caller, req.recipient)
               if recipients is not None else None)
    if profile is None:
        raise RecipientNotFound(f"recipient: no recipient {req.recipient!r} (PUT "
                                "/v1/recipients/{id} first)", field="recipient")
    if req.retime is None:
        return req
    zone = profile.time_zone if req.floats else None
    return replace(req, time=req.retime(zone, profile.locale))


async def link_recipient(recipients: RecipientStore | None, t: Trigger, ttl_s: int) -> None:
    """Put ``t`` in its recipient's index (idempotent; nothing without a recipient). Raises
    ``StoreError``."""
    if t.recipient is None or recipients is None:
        return
    assert t.home_at_ms is not None
    await recipients.link(t.caller, t.recipient,
                          LinkedTrigger(t.trigger_id, t.home_at_ms, t.shard), ttl_s)
