"""The registration half of the SSRF guard: a callback host name that resolves,
now, to an address a broad prefix may not reach is refused with 422 ``callback_not_allowed``
(``localhost`` tricks, hosts-file entries, internal DNS names).

The dispatcher checks again at every connection (``dispatcher/channels/guard.py``), which is
what closes the door: a name that does not resolve now (or not in time) is accepted here and
fails, or is refused, at delivery like any other host.

The refusal is the same whatever the name resolved to: the address, and which kind of
forbidden range it is in, go to the log only. Naming them would make the API (and the
preview, which writes nothing) a way to map the internal DNS from outside."""

from __future__ import annotations

import structlog

from trigger_service.config.callers import Caller
from trigger_service.core.errors import CallbackNotAllowed
from trigger_service.core.notify.addresses import HostResolver, forbidden_address
from trigger_service.core.urls import UrlError, normalise_callback_url

log = structlog.get_logger(__name__)

REFUSAL = ("callbackUrl: the host resolves to an address that is not allowed; only a "
           "callback prefix that names this host may point there")


async def vet_callback_host(caller: Caller, url_text: str, resolver: HostResolver) -> None:
    """Raises ``CallbackNotAllowed`` when ``url_text``'s host is a name that resolves to a
    forbidden address and no prefix of ``caller`` that admits the URL names the host.
    ``url_text``: an already checked callback ("" when there is none: nothing to do).
    IP literals were classified when the URL was parsed; nothing to resolve."""
    if not url_text:
        return
    try:
        url = normalise_callback_url(url_text)
    except UrlError:
        return  # not a URL the parser accepted: it never gets this far
    if url.ip is not None or caller.names_callback_host(url):
        return
    for ip in await resolver.resolve(url.host, url.port):
        why = forbidden_address(ip)
        if why is not None:
            log.warning("callback_host_refused", caller=caller.name, host=url.host,
                        address=str(ip), why=why)
            raise CallbackNotAllowed(REFUSAL)
