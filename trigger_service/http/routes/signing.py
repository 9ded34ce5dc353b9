"""``POST /v1/signing-secrets/rotate``: a new current signing secret for the calling caller,
shown once; the previous ones keep signing for ``TRIGGER_DISPATCH_SECRET_ROTATION_OVERLAP_S``
(the ``TRIGGER_DISPATCH_SECRET_MAX_LIVE`` newest). Past ``TRIGGER_API_SECRET_ROTATIONS_PER_MINUTE``
a caller's rotation is refused: 429 ``rate_limited`` with ``Retry-After``."""

from __future__ import annotations

from aiohttp import web

from trigger_service.app.signing import RotationPolicy, SigningSecrets
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import RUNTIME_KEY


async def rotate(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    book = SigningSecrets(runtime.store, runtime.clock, runtime.limiter,
                          RotationPolicy.of(runtime.settings))
    rotated = await book.rotate(caller_of(request).name)
    return web.json_response({
        "secret": rotated.secret,
        "createdAt": format_rfc3339_ms(rotated.created_at_ms),
        "previousValidUntil": format_rfc3339_ms(rotated.previous_valid_until_ms),
    }, status=201, headers={"Cache-Control": "no-store"})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/signing-secrets/rotate", rotate)
