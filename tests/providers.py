"""Provider simulators for tests (and a sample process): a Twilio-format SMS API, an
FCM-HTTP-v1-format push API and a Telegram-Bot-API-format ``sendMessage`` as small aiohttp
apps, and a real SMTP server (``aiosmtpd``).

Each records what it received, parsed, and answers like the real API: it checks the path,
the credentials and the request's format (wrong account in the path or bad basic auth → 401
with Twilio's code 20003; a bad bearer → 401 ``UNAUTHENTICATED``; a malformed body → 400), and
can be scripted per recipient (phone number, device token, email address) to answer errors
first::

    sms.script("+15005550001", twilio_error(503), twilio_error(503))  # then 201
    sms.script("+15005550002", twilio_error(400, 21211))
    push.script(token, fcm_error(404, "NOT_FOUND", "UNREGISTERED"))
    push.script(token, fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", retry_after=7))
    smtp.refuse("a@b.example", "451 4.3.0 Try again later")
    telegram.script("42", telegram_error(403, "Forbidden: bot was blocked by the user"))

A scripted answer is used once, in order; when a recipient's script is used up the request
succeeds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiohttp import web
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from trigger_service.config.providers import DEV_SMS_ACCOUNT_SID, DEV_TELEGRAM_TOKEN

DEV_SMS_TOKEN = "dev-sms-token"
DEV_PUSH_PROJECT = "trigger-dev"
DEV_PUSH_BEARER = "dev-push-token"
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
_TTL = re.compile(r"^[0-9]+(\.[0-9]{1,9})?s$")


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # answer this late (a slow provider, a client timeout)

    async def response(self) -> web.Response:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.json_response(self.body, status=self.status, headers=self.headers)


def slow(reply: Reply, delay_s: float) -> Reply:
    """``reply``, answered ``delay_s`` late."""
    return Reply(reply.status, reply.body, reply.headers, delay_s)


def twilio_error(status: int, code: int | None = None, message: str = "error", *,
                 retry_after: int | None = None) -> Reply:
    """Twilio's error JSON (``code`` defaults to the status, as for 5xx)."""
    body = {"code": code or status, "message": message, "status": status,
            "more_info": f"https://www.twilio.com/docs/errors/{code or status}"}
    return Reply(status, body, {"Retry-After": str(retry_after)} if retry_after else {})


def fcm_error(status: int, grpc_status: str, error_code: str | None = None,
              message: str = "error", *, retry_after: int | None = None) -> Reply:
    """FCM's error JSON: ``error.status`` and, when given, ``details[].errorCode``."""
    error: dict[str, Any] = {"code": status, "message": message, "status": grpc_status}
    if error_code:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                             "errorCode": error_code}]
    return Reply(status, {"error": error},
                 {"Retry-After": str(retry_after)} if retry_after else {})


def telegram_error(status: int, description: str, *, retry_after: int | None = None,
                   migrate_to: int | None = None) -> Reply:
    """The Bot API's error JSON (``parameters`` only when given)."""
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    params = {k: v for k, v in (("retry_after", retry_after), ("migrate_to_chat_id", migrate_to))
              if v is not None}
    if params:
        body["parameters"] = params
    return Reply(status, body)


@dataclass
class Request:
    """One request as the simulator saw it: parsed body, headers, and the answer's status."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int
    at_ms: int


class _Simulator:
    """A scripted aiohttp app on a loopback port (``start``/``stop``)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []  # every request, answered or refused
        self.scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.echo = False  # print each request (the command-line simulators)

    def script(self, recipient: str, *replies: Reply) -> None:
        self.scripts[recipient].extend(replies)

    def _scripted(self, recipient: str) -> Reply | None:
        queue = self.scripts.get(recipient)
        return queue.popleft() if queue else None

    def _record(self, request: web.Request, body: dict[str, Any], status: int) -> None:
        self.requests.append(Request(request.path, dict(request.headers), body, status,
                                     int(time.time() * 1000)))
        if self.echo:
            print(f"{type(self).__name__} {status} {json.dumps(body)}", flush=True)

    def app(self) -> web.Application:
        raise NotImplementedError

    async def _json_send(self, request: web.Request,
                         check: Callable[[web.Request, dict[str, Any]], Reply | None],
                         bad_json: Reply, key: Callable[[dict[str, Any]], str],
                         accept: Callable[[dict[str, Any]], Reply]) -> web.Response:
        """A JSON request's answer: ``bad_json`` when the body is not JSON, else ``check``'s
        refusal, else the script of the recipient ``key`` names, else ``accept``'s (which
        records the accepted message)."""
        body: dict[str, Any] = {}
        try:
            parsed = json.loads(await request.read())
            body = parsed if isinstance(parsed, dict) else {}
            reply = check(request, body)
        except ValueError:
            reply = bad_json
        if reply is None:
            reply = self._scripted(key(body))
            if reply is None:
                reply = accept(body)
        self._record(request, body, reply.status)
        return await reply.response()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: any free port); returns the base URL."""
        self._runner = web.AppRunner(self.app())
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.base_url = f"http://{host}:{bound}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class SmsSimulator(_Simulator):
    """Twilio's ``POST /2010-04-01/Accounts/{sid}/Messages.json``. ``messages``: the form of
    each accepted message (``To``, ``From``, ``Body``) with its ``sid``."""

    def __init__(self, account_sid: str = DEV_SMS_ACCOUNT_SID,
                 auth_token: str = DEV_SMS_TOKEN) -> None:
        super().__init__()
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.messages: list[dict[str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/2010-04-01/Accounts/{sid}/Messages.json", self._send)
        return app

    def _authorized(self, request: web.Request) -> bool:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        return (request.match_info["sid"] == self.account_sid
                and request.headers.get("Authorization") == f"Basic {expected}")

    async def _send(self, request: web.Request) -> web.Response:
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        reply = self._check(request, form) or self._scripted(form["To"])
        if reply is None:
            sid = "SM" + secrets.token_hex(16)
            self.messages.append({**form, "sid": sid})
            reply = Reply(201, {"sid": sid, "account_sid": self.account_sid, "to": form["To"],
                                "from": form["From"], "body": form["Body"],
                                "status": "queued"})
        self._record(request, form, reply.status)
        return await reply.response()

    def _check(self, request: web.Request, form: dict[str, str]) -> Reply | None:
        if not self._authorized(request):
            return twilio_error(401, 20003, "Authenticate")
        if request.content_type != "application/x-www-form-urlencoded":
            return twilio_error(400, 20001, "form-encoded parameters expected")
        for name, code in (("To", 21604), ("From", 21603), ("Body", 21602)):
            if not form.get(name):
                return twilio_error(400, code, f"A '{name}' is required.")
        if not _E164.match(form["To"]):
            return twilio_error(400, 21211, f"The 'To' number {form['To']} is not valid.")
        return None


class PushSimulator(_Simulator):
    """FCM's ``POST /v1/projects/{project}/messages:send``. ``messages``: each accepted
    ``message`` object with its ``name``."""

    def __init__(self, project: str = DEV_PUSH_PROJECT, bearer: str = DEV_PUSH_BEARER) -> None:
        super().__init__()
        self.project = project
        self.bearer = bearer
        self.messages: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/projects/{project}/messages:send", self._send)
        return app

    async def _send(self, request: web.Request) -> web.Response:
        return await self._json_send(
            request, self._check,
            fcm_error(400, "INVALID_ARGUMENT", None, "Invalid JSON payload received."),
            lambda body: str(body["message"]["token"]), self._accept)

    def _accept(self, body: dict[str, Any]) -> Reply:
        message = body["message"]
        name = f"projects/{self.project}/messages/0:{secrets.token_hex(8)}"
        self.messages.append({**message, "name": name})
        return Reply(200, {"name": name})

    def _check(self, request: web.Request, body: dict[str, Any]) -> Reply | None:
        if request.headers.get("Authorization") != f"Bearer {self.bearer}":
            return fcm_error(401, "UNAUTHENTICATED", None,
                             "Request had invalid authentication credentials.")
        if request.match_info["project"] != self.project:
            return fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH",
                             "Permission denied on the project.")
        message = body.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("token"), str):
            return fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "message.token")
        data = message.get("data", {})
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            return fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT",
                             "message.data: values must be strings")
        android = message.get("android", {})
        ttl = android.get("ttl") if isinstance(android, dict) else android
        if ttl is not None and not (isinstance(ttl, str) and _TTL.match(ttl)):
            return fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT",
                             "message.android.ttl: a duration such as 3.5s")
        return None


# MarkdownV2 characters that are never markup and must be escaped (the simulator checks
# these only; Telegram also checks the entity characters' pairing).
_MDV2_PLAIN = re.compile(r"(?<!\\)[.!\-=#+{}]")
_PARSE_MODES = ("HTML", "MarkdownV2", "Markdown")


class TelegramSimulator(_Simulator):
    """The Bot API's ``POST /bot{token}/sendMessage`` (JSON). ``messages``: each accepted
    request body with its ``message_id``. Scripts are keyed by ``str(chat_id)``."""

    def __init__(self, token: str = DEV_TELEGRAM_TOKEN) -> None:
        super().__init__()
        self.token = token
        self.messages: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bot{token}/sendMessage", self._send)
        return app

    async def _send(self, request: web.Request) -> web.Response:
        return await self._json_send(request, self._check,
                                     telegram_error(400, "Bad Request: can't parse JSON"),
                                     lambda body: str(body["chat_id"]), self._accept)

    def _accept(self, body: dict[str, Any]) -> Reply:
        message_id = len(self.messages) + 1
        self.messages.append({**body, "message_id": message_id})
        return Reply(200, {"ok": True, "result": {
            "message_id": message_id, "date": int(time.time()),
            "chat": {"id": body["chat_id"]}, "text": body["text"]}})

    def _check(self, request: web.Request, body: dict[str, Any]) -> Reply | None:
        if request.match_info["token"] != self.token:
            return telegram_error(401, "Unauthorized")
        if request.content_type != "application/json":
            return telegram_error(400, "Bad Request: JSON expected")
        chat, text = body.get("chat_id"), body.get("text")
        if not isinstance(chat, int | str) or isinstance(chat, bool) or chat in ("", 0):
            return telegram_error(400, "Bad Request: chat_id is empty")
        if not isinstance(text, str) or not text.strip():
            return telegram_error(400, "Bad Request: message text is empty")
        mode = body.get("parse_mode")
        if mode is not None and mode not in _PARSE_MODES:
            return telegram_error(400, f"Bad Request: unsupported parse_mode {mode!r}")
        bad = _MDV2_PLAIN.search(text) if mode == "MarkdownV2" else None
        if bad:
            return telegram_error(400, "Bad Request: can't parse entities: Character "
                                  f"'{bad.group()}' is reserved and must be escaped with "
                                  "the preceding '\\'")
        return None


@dataclass
class ReceivedMail:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage  # parsed with the default policy
    raw: bytes


class SmtpSink:
    """A real SMTP server (aiosmtpd) on a loopback port, in the caller's event loop.

    ``refuse(address, *replies)``: the next RCPTs of that address get these replies (e.g.
    ``"550 5.1.1 No such user"``); ``fail_data(*replies)``: the next DATAs do. With ``users``
    the server offers AUTH (PLAIN, LOGIN) over plain TCP and ``logins`` records each one."""

    def __init__(self, users: dict[str, str] | None = None) -> None:
        self.messages: list[ReceivedMail] = []
        self.logins: list[tuple[str, bool]] = []  # (user, accepted)
        self.users = users or {}
        self.refusals: dict[str, deque[str]] = defaultdict(deque)
        self.data_replies: deque[str] = deque()
        self.port = 0
        self.echo = False  # print each message (the command-line sandbox)
        self._server: asyncio.Server | None = None

    def refuse(self, address: str, *replies: str) -> None:
        self.refusals[address.lower()].extend(replies)

    def fail_data(self, *replies: str) -> None:
        self.data_replies.extend(replies)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SMTP(self, hostname="sink.test", loop=loop, auth_require_tls=False,
                         authenticator=self._authenticate if self.users else None),
            host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _authenticate(self, server: SMTP, session: Session, envelope: Envelope,
                      mechanism: str, auth_data: object) -> AuthResult:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False)
        user, password = auth_data.login.decode(), auth_data.password.decode()
        ok = self.users.get(user) == password
        self.logins.append((user, ok))
        return AuthResult(success=ok, handled=False)

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        script = self.refusals.get(address.lower())
        if script:
            return script.popleft()
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.data_replies:
            return self.data_replies.popleft()
        raw = envelope.original_content or b""
        parsed = message_from_bytes(raw, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(ReceivedMail(str(envelope.mail_from), list(envelope.rcpt_tos),
                                          parsed, raw))
        if self.echo:
            print(f"SmtpSink 250 to={envelope.rcpt_tos} subject={parsed['Subject']!r} "
                  f"message-id={parsed['Message-ID']}", flush=True)
        return "250 Message accepted for delivery"


async def serve(sms_port: int, push_port: int, smtp_port: int = 0,
                telegram_port: int = 0) -> None:
    """Run the HTTP simulators with the development credentials (and, with ``smtp_port``,
    an SMTP sink that prints each message; with ``telegram_port``, the Bot API) until
    cancelled."""
    sms, push, smtp, telegram = SmsSimulator(), PushSimulator(), SmtpSink(), TelegramSimulator()
    sms.echo = push.echo = telegram.echo = True
    print("sms: ", await sms.start(port=sms_port), flush=True)
    print("push:", await push.start(port=push_port), flush=True)
    if telegram_port:
        print("telegram:", await telegram.start(port=telegram_port), flush=True)
    if smtp_port:
        smtp.echo = True
        print(f"smtp: 127.0.0.1:{await smtp.start(port=smtp_port)}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await sms.stop()
        await push.stop()
        await smtp.stop()
        await telegram.stop()


if __name__ == "__main__":
    # python -m tests.providers [SMS_PORT PUSH_PORT [SMTP_PORT [TELEGRAM_PORT]]]: the provider
    # sandbox of `make up` (infra/app.sh starts it on 9201, 9202, 1025 and 9203).
    import sys

    ports = [int(a) for a in sys.argv[1:5]] or [9201, 9202, 1025, 9203]
    asyncio.run(serve(*ports))

