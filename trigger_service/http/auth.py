"""Bearer-token authentication and who may do what.

Every ``/v1/`` request carries a token that names a ``Principal``: a caller (its own triggers
and dead letters) or an ops user (``operator``: every caller's dead letters and the ops
console; ``viewer``: the same, read only). Routes state what they need with the helpers
below; a token without that right gets ``403 forbidden``, never a 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from trigger_service.config.callers import Caller, Principal, Role
from trigger_service.config.live_callers import Callers
from trigger_service.core.errors import Forbidden, Unauthorized
from trigger_service.http.keys import CALLER_KEY, PRINCIPAL_KEY


def auth_middleware(callers: Callers) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            token = token.strip()
            # Header bytes that are not ASCII arrive surrogate-escaped: no token has them.
            principal = (callers.principal(token)
                         if scheme.lower() == "bearer" and token.isascii() else None)
            if principal is None:
                raise Unauthorized("missing or unknown bearer token")
            request[PRINCIPAL_KEY] = principal
            if principal.caller is not None:
                request[CALLER_KEY] = principal.caller
        return await handler(request)

    return middleware


def caller_of(request: web.Request) -> Caller:
    """The authenticated caller; ops tokens may not use caller-scoped endpoints."""
    if CALLER_KEY not in request:
        raise Forbidden("this endpoint needs a caller's token, not an ops token")
    return request[CALLER_KEY]


def require_ops(request: web.Request, *, write: bool = False) -> Principal:
    """An operator (or, when ``write`` is false, a viewer); callers get 403."""
    p = request[PRINCIPAL_KEY]
    if not p.is_ops:
        raise Forbidden("this endpoint needs an operator or viewer token")
    if write and p.role is not Role.OPERATOR:
        raise Forbidden("viewers may only read")
    return p


def scope_of(request: web.Request, *, write: bool = False) -> str | None:
    """Whose data the request may see or change: the caller's name, or None (every caller)
    for ops users; a viewer asking to change something gets 403."""
    p = request[PRINCIPAL_KEY]
    if p.caller is not None:
        return p.caller.name
    if write and p.role is not Role.OPERATOR:
        raise Forbidden("viewers may only read")
    return None
