"""``GET /ops``: the ops console, one static HTML page and its script and style sheet.

The page needs no token: it holds nothing but code. It asks the operator for a token (kept in
the browser's ``sessionStorage``) and reads everything it shows from the ``/v1/`` API with it,
so the API's own authentication and roles (``http/auth.py``) decide what it may see and do.

The files ship inside the package (``trigger_service/http/static/``, package data in
pyproject.toml) and are read once, at ``add_routes``. Every response carries a strict
Content-Security-Policy: scripts and styles only from this origin (no inline script, no
``eval``), requests only to this origin, no frames, no forms posting elsewhere. The script
builds the page with DOM text nodes only, never HTML strings, so an attacker-influenced value
(a payload, an error, a URL) is always shown as text.
"""

from __future__ import annotations

from importlib.resources import files

from aiohttp import web

STATIC_PREFIX = "/ops/static/"
# name -> content type; nothing outside this list is served (no path from the request is ever
# joined to a file system path).
_ASSETS = {
    "ops.js": "text/javascript",
    "ops.css": "text/css",
}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_PAGE_KEY = web.AppKey("ops_page", dict)


def _read(name: str) -> bytes:
    return files("trigger_service.http").joinpath("static", name).read_bytes()


def _respond(body: bytes, content_type: str, cache_control: str) -> web.Response:
    response = web.Response(body=body, content_type=content_type, charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = cache_control
    return response


async def ops_page(request: web.Request) -> web.Response:
    """The console's HTML; no token needed, never cached (a new release shows at once)."""
    return _respond(request.app[_PAGE_KEY]["ops.html"], "text/html", "no-store")


async def ops_asset(request: web.Request) -> web.Response:
    """One of the console's files by name; any other name is ``404 not_found``."""
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise web.HTTPNotFound(reason="no such file")
    # "no-cache": the browser revalidates, so the page and its script never disagree.
    return _respond(request.app[_PAGE_KEY][name], _ASSETS[name], "no-cache")


def add_routes(app: web.Application) -> None:
    """``GET /ops`` and ``GET /ops/static/{name}``; reads the files now, so a missing one fails
    at start-up rather than on the first visit."""
    app[_PAGE_KEY] = {name: _read(name) for name in ("ops.html", *_ASSETS)}
    app.router.add_get("/ops", ops_page)
    app.router.add_get("/ops/", ops_page)
    app.router.add_get(STATIC_PREFIX + "{name}", ops_asset)
