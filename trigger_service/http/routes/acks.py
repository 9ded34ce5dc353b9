"""Acknowledging an occurrence: ``POST /v1/triggers/{id}/ack`` (the caller's token) and
``GET|POST /ack/{token}`` (a signed link from the email or SMS itself; no token needed)."""

from __future__ import annotations

import html

from aiohttp import web

from trigger_service.core.errors import ApiError, InvalidRequest, NotFound
from trigger_service.core.model import Trigger
from trigger_service.core.notify.ack_links import read_token
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import RUNTIME_KEY, SERVICE_KEY
from trigger_service.http.parsing import NO_BODY, parse_optional_json_body


def _ack_view(t: Trigger) -> dict[str, object]:
    return {"triggerId": t.trigger_id, "acknowledged": True, "status": t.status.value}


def _seq_of(trigger_id: str, occurrence_id: object) -> int:
    head, _, n = str(occurrence_id).rpartition(".")
    # isascii: str.isdigit() takes "²", which int() refuses
    if head != trigger_id or not (n.isascii() and n.isdigit()) or len(n) > 9 or int(n) < 1:
        raise InvalidRequest("occurrenceId: an occurrence id of this trigger (<triggerId>.<n>)")
    return int(n) - 1


async def ack(request: web.Request) -> web.Response:
    trigger_id = request.match_info["id"]
    body = parse_optional_json_body(await request.read())
    seq = None
    if body is not NO_BODY:
        if not isinstance(body, dict) or set(body) - {"occurrenceId"}:
            raise InvalidRequest("body: {\"occurrenceId\"} or nothing")
        if body.get("occurrenceId") is not None:
            seq = _seq_of(trigger_id, body["occurrenceId"])
    t = await request.app[SERVICE_KEY].ack(caller_of(request).name, trigger_id, seq)
    return web.json_response(_ack_view(t))


async def ack_link(request: web.Request) -> web.Response:
    """A small HTML page for a person, whatever happens (never a stack trace). GET only
    shows a button: mail scanners that follow links must not acknowledge for the person;
    the button POSTs to the same link."""
    runtime = request.app[RUNTIME_KEY]
    form = ""
    try:
        api = runtime.settings.api
        trigger_id, seq = read_token(api.ack_secret, request.match_info["token"],
                                     runtime.clock.now_ms(), api.ack_previous_secrets)
        if request.method == "GET":
            status, text = 200, "Acknowledge this reminder? Later reminders for it stop."
            form = ("<form method=post><button style='font:inherit;padding:.6rem 1.2rem'>"
                    "Acknowledge</button></form>")
        else:
            await request.app[SERVICE_KEY].ack(None, trigger_id, seq)
            status, text = 200, "Acknowledged. No further reminders will be sent for this one."
    except NotFound:
        status, text = 404, "This reminder no longer exists."
    except ApiError as e:
        status, text = e.status, e.message
    page = ("<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport "
            "content='width=device-width'><title>Reminder</title>"
            f"<main style='font:1.2rem system-ui;margin:2rem'><p>{html.escape(text)}</p>"
            f"{form}</main></html>")
    return web.Response(text=page, status=status, content_type="text/html",
                        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/triggers/{id}/ack", ack)
    # Any one segment (aiohttp's default leaves out braces): whatever a mail client did to a
    # link, the person gets the page that says it is not one, never the API's JSON 404.
    app.router.add_get("/ack/{token:[^/]+}", ack_link)
    app.router.add_post("/ack/{token:[^/]+}", ack_link)
