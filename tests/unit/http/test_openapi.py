"""The contract file itself: valid OpenAPI 3.1, exactly the app's routes (no operation without
a route, no route without an operation), served as JSON at ``/openapi.json`` and rendered at
``/docs`` without a token under the console's strict CSP. (Every exchange of the HTTP tests is
checked against it by ``tests/openapi_check.py``.)"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from importlib.resources import files
from typing import Any

import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from openapi_spec_validator import validate
from openapi_spec_validator.versions import consts as versions
from openapi_spec_validator.versions.shortcuts import get_spec_version

from dispatcher.channels.webhook import WebhookChannel
from tests.openapi_check import callback_violations, spec
from tests.unit.http.test_routes import Api
from trigger_service.core.errors import ApiError
from trigger_service.http.routes.ops_page import CSP

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
SECRET = "whsec_" + base64.b64encode(b"n" * 32).decode()
_PARAM = re.compile(r"\{[^}]+\}")


def template(path: str) -> str:
    """A path template with its parameter names blanked: the code says ``{id}`` where the
    document says ``{triggerId}``; only the shape has to agree."""
    return _PARAM.sub("{}", path)


def spec_operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), template(path)) for path, item in doc["paths"].items()
            for method in METHODS if method in item}


def app_routes(app: web.Application) -> set[tuple[str, str]]:
    # aiohttp answers HEAD for every GET by itself: not an operation of ours.
    return {(r.method, template(r.resource.canonical)) for r in app.router.routes()
            if r.resource is not None and r.method != "HEAD"}


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = spec()
    assert get_spec_version(doc) == versions.OPENAPIV31
    validate(doc)


def test_every_route_has_an_operation_and_every_operation_a_route(api: Api) -> None:
    routes = app_routes(api.client.app)
    operations = spec_operations(spec())
    assert routes - operations == set(), "routes the document does not describe"
    assert operations - routes == set(), "operations the app does not serve"


def test_every_operation_has_an_id_a_tag_and_its_error_answers() -> None:
    """Every /v1 operation lists 401, 403 and 429 (a bad token, a role that may not, a
    rate limit), and 500/503; every one has a unique operationId and a known tag."""
    doc = spec()
    tags = {t["name"] for t in doc["tags"]}
    ids: list[str] = []
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method not in item:
                continue
            op = item[method]
            ids.append(op["operationId"])
            assert set(op["tags"]) <= tags, (method, path)
            if path.startswith("/v1/"):
                assert {"401", "403", "429", "500", "503"} <= set(op["responses"]), (method, path)
                assert "security" not in op, "every /v1 operation needs the bearer token"
            elif path == "/metrics":  # a token of its own when TRIGGER_METRICS_TOKEN is set
                assert op["security"] == [{}, {"bearer": []}] and "401" in op["responses"]
            else:
                assert op.get("security") == [], f"{method} {path} needs no token"
    assert len(ids) == len(set(ids))


def test_every_error_code_of_the_code_is_in_the_document() -> None:
    codes = {cls.code for cls in _subclasses(ApiError) if "code" in vars(cls)}
    documented = set(spec()["components"]["schemas"]["ErrorFields"]["properties"]["error"]["enum"])
    assert codes - documented == set()


def _subclasses(cls: type[ApiError]) -> list[type[ApiError]]:
    out: list[type[ApiError]] = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def test_the_webhook_documents_the_callback_and_its_signature_headers() -> None:
    hook = spec()["webhooks"]["callback"]["post"]
    shared = spec()["components"]["parameters"]
    params = [shared[p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
              for p in hook["parameters"]]
    headers = {p["name"] for p in params if p["in"] == "header"}
    assert headers == {"X-Trigger-Id", "X-Trigger-Occurrence-Id", "X-Trigger-Attempt",
                       "webhook-id", "webhook-timestamp", "webhook-signature", "traceparent"}


async def test_a_real_signed_callback_conforms_to_the_webhook(api: Api) -> None:
    """The dispatcher's ``WebhookChannel`` posting to a loopback receiver: the headers and
    exact body it sends are what ``webhooks.callback`` says (signatures included)."""
    got: list[tuple[dict[str, str], bytes]] = []

    async def receive(request: web.Request) -> web.Response:
        got.append((dict(request.headers), await request.read()))
        return web.Response(status=204)

    receiver = web.Application()
    receiver.router.add_post("/hook", receive)
    async with TestServer(receiver) as server:
        t = api.env.store.triggers[await api.created_id()]
        t = replace(t, callback_url=str(server.make_url("/hook")))

        async def secrets(caller: str) -> list[str]:
            return [SECRET, "whsec_" + base64.b64encode(b"o" * 32).decode()]

        def trusts(caller: str, url: object) -> bool:
            return True  # the receiver is this test's own, on loopback

        channel = WebhookChannel(5, secrets_for=secrets, trusts=trusts)
        await channel.open()
        try:
            result = await channel.deliver(t, 2)
        finally:
            await channel.close()
    assert result.ok and len(got) == 1
    headers, raw = got[0]
    assert headers["webhook-signature"].count("v1,") == 2
    assert callback_violations(headers, raw) == []
    assert callback_violations({**headers, "X-Trigger-Attempt": "0"}, raw) != []
    assert callback_violations(headers, raw.replace(b'"payload"', b'"pay"')) != []


async def test_openapi_json_is_the_yaml_and_needs_no_token(api: Api) -> None:
    resp = await api.client.get("/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    text = files("trigger_service").joinpath("openapi.yaml").read_text(encoding="utf-8")
    assert await resp.json() == json.loads(json.dumps(yaml.safe_load(text)))
    assert resp.headers["Content-Security-Policy"] == CSP


async def test_docs_page_and_its_files_load_without_a_token_under_the_csp(api: Api) -> None:
    resp = await api.client.get("/docs")
    html = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html"
    assert resp.headers["Content-Security-Policy"] == CSP
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert "<script>" not in html and "http" not in html.replace('href="/openapi.json"', "")
    for name, kind in (("docs.js", "text/javascript"), ("docs.css", "text/css")):
        asset = await api.client.get(f"/docs/static/{name}")
        assert asset.status == 200 and asset.content_type == kind
    assert (await api.client.get("/docs/static/../openapi.yaml")).status == 404
    resp = await api.client.get("/docs/static/openapi.yaml")
    assert resp.status == 404 and (await resp.json())["error"] == "not_found"


def test_the_page_script_builds_no_html_from_strings() -> None:
    script = files("trigger_service.http").joinpath("static", "docs.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
