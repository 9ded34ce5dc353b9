"""The API contract: ``GET /openapi.json`` (``trigger_service/openapi.yaml``, the hand-written
OpenAPI 3.1 document) and ``GET /docs``, a reference page rendered from it in the browser.

Neither needs a token: the document describes the API, it holds no data. The YAML is read and
converted to JSON once, at ``add_routes``, so a malformed file fails at start-up rather than on
the first visit, and every answer is the same bytes. The page, its script and its style sheet
ship inside the package like the ops console's and go out under the same strict
Content-Security-Policy (no CDN, no inline script; the script builds the page with DOM text
nodes only).
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from typing import Any

import yaml
from aiohttp import web

from trigger_service.http.routes.ops_page import SECURITY_HEADERS

STATIC_PREFIX = "/docs/static/"
# name -> content type; nothing outside this list is served.
_ASSETS = {
    "docs.js": "text/javascript",
    "docs.css": "text/css",
}
_FILES_KEY = web.AppKey("docs_files", dict)


# libyaml's safe loader when PyYAML was built with it (the pure-Python one takes 0.3 s for
# the document, several seconds under a tracer); both build no objects from tags.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_spec() -> dict[str, Any]:
    """The OpenAPI document as data (a safe loader: no tags that build objects); a new dict
    on each call, the caller's to change."""
    text = files("trigger_service").joinpath("openapi.yaml").read_text(encoding="utf-8")
    spec = yaml.load(text, Loader=_SafeLoader)
    if not isinstance(spec, dict):
        raise ValueError("openapi.yaml: not a mapping")
    return spec


@functools.cache
def _files() -> dict[str, bytes]:
    """What the routes serve, read and converted once per process (the package's files do
    not change while it runs)."""
    spec_json = json.dumps(load_spec(), ensure_ascii=False, separators=(",", ":"))
    return {"openapi.json": spec_json.encode(),
            **{name: _static(name) for name in ("docs.html", *_ASSETS)}}


def _static(name: str) -> bytes:
    return files("trigger_service.http").joinpath("static", name).read_bytes()


def _respond(body: bytes, content_type: str) -> web.Response:
    response = web.Response(body=body, content_type=content_type, charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    # "no-cache": the browser revalidates, so a new release's contract shows at once.
    response.headers["Cache-Control"] = "no-cache"
    return response


async def openapi_json(request: web.Request) -> web.Response:
    return _respond(request.app[_FILES_KEY]["openapi.json"], "application/json")


async def docs_page(request: web.Request) -> web.Response:
    return _respond(request.app[_FILES_KEY]["docs.html"], "text/html")


async def docs_asset(request: web.Request) -> web.Response:
    """One of the page's files by name; any other name is ``404 not_found``."""
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise web.HTTPNotFound(reason="no such file")
    return _respond(request.app[_FILES_KEY][name], _ASSETS[name])


def add_routes(app: web.Application) -> None:
    """``GET /openapi.json``, ``GET /docs`` and ``GET /docs/static/{name}``; reads (and
    converts) the files now. ``json.dumps`` refuses what YAML reads as a date or a set, so
    an unquoted timestamp in the document fails here rather than reaching a client."""
    app[_FILES_KEY] = _files()
    app.router.add_get("/openapi.json", openapi_json)
    app.router.add_get("/docs", docs_page)
    app.router.add_get(STATIC_PREFIX + "{name}", docs_asset)
