"""``triggerctl``: the trigger service from a terminal (typer + rich). Every command takes
``--output json`` (the API's JSON answer, never a prompt); exit codes are in
:mod:`trigger_client.cli.common`."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, tzinfo
from itertools import islice
from typing import Annotated, Any

import httpx
import typer
from rich.live import Live
from rich.table import Column, Table

from trigger_client._calls import new_idempotency_key
from trigger_client.cli import (
    audit,
    bulk,
    dlq,
    endpoints,
    jobs,
    pausing,
    recipients,
    subscriptions,
)
from trigger_client.cli.common import (
    EXIT_NOT_CONFIRMED,
    Output,
    OutputOpt,
    api_errors,
    client,
    err,
    interactive,
    out,
    print_json,
    read_payload,
    report,
    usage,
)
from trigger_client.cli.config import resolve
from trigger_client.cli.jobs import Label, Poll, Recipient, Tag
from trigger_client.cli.timeparse import dst_marks, local, parse_at, parse_duration_s, show, zone
from trigger_client.client import TriggerClient
from trigger_client.errors import ConnectionFailed, InvalidRequest, ServerError
from trigger_client.models import CreatedTrigger, Debounce, FlowControl, Priority, Trigger
from trigger_client.requests import TriggerRequest

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Register, inspect and replay triggers of the trigger service.")
app.add_typer(dlq.app, name="dlq")
app.add_typer(recipients.app, name="recipients")
app.command("import")(bulk.import_)
app.command("export")(bulk.export)
app.command("pause")(pausing.pause)
app.command("resume")(pausing.resume)
app.add_typer(pausing.callers_app, name="callers")
app.add_typer(endpoints.app, name="endpoints")
app.command("audit")(audit.audit)
app.add_typer(subscriptions.app, name="subscriptions")

In = Annotated[str | None, typer.Option("--in", help="Fire after this long: 30s, 10m, 2h, 1d.")]
At = Annotated[str | None, typer.Option("--at", help='"2027-03-14 09:00" (wall time in --tz) '
                                        'or with an offset.')]
Tz = Annotated[str | None, typer.Option("--tz", help="IANA zone, e.g. Europe/Berlin.")]
When = Annotated[str | None, typer.Option("--when", help='"tomorrow 9am", "in 2 hours", '
                                          '"every weekday at 9am" (read in --tz).')]
Rrule = Annotated[str | None, typer.Option("--rrule", help="RFC 5545 rule, FREQ=DAILY.")]
Jitter = Annotated[str | None, typer.Option(
    "--jitter", help="Spread each occurrence over this long after its time, on purpose: "
    "30s, 10m, 1h (whole seconds).")]
Cron = Annotated[str | None, typer.Option("--cron", help='Five fields, "0 9 * * 1-5".')]
ExpiresAt = Annotated[str | None, typer.Option(
    "--expires-at", help="Send nothing after this: like --at (a wall time in --tz, or with an "
    "offset); a later occurrence is dead-lettered 'expired'.")]
MaxLateness = Annotated[str | None, typer.Option(
    "--max-lateness", help="Send each occurrence at most this long after its time (30s, "
    "10m, 1h; whole seconds, at least 1s); later, it is dead-lettered 'expired'.")]

PriorityOpt = Annotated[Priority | None, typer.Option(
    "--priority", help="Among your triggers due at the same time: high ones go first, low "
    "ones last (default normal). Other callers' shares are unchanged.")]


FlowKey = Annotated[str | None, typer.Option(
    "--flow-key", help="Flow control: your deliveries sharing this key are paced together "
    "(keys are per caller).")]
FlowRate = Annotated[float | None, typer.Option(
    "--flow-rate", help="Flow control: at most this many starts a second (0.5 allowed).")]
FlowParallelism = Annotated[int | None, typer.Option(
    "--flow-parallelism", help="Flow control: at most this many open at once.")]


DebounceKey = Annotated[str | None, typer.Option(
    "--debounce", help="Debounce key: while a pending trigger of yours with this key exists, "
    "join it instead of creating another.")]
DebounceModeOpt = Annotated[str, typer.Option(
    "--debounce-mode", help="replace: the last request's payload and time (trailing); "
    "keep: the first one's.")]
DebounceMaxWait = Annotated[str | None, typer.Option(
    "--debounce-max-wait", help="replace: never later than this after the first request "
    "(30s, 10m, 1h).")]


def debounce(key: str | None, mode: str, max_wait: str | None) -> Debounce | None:
    """``--debounce`` with its mode and bound (ValueError for a bound without a key or a
    mode not known); the API checks the rest."""
    if key is None:
        if max_wait is not None:
            raise ValueError("--debounce-max-wait needs --debounce")
        return None
    if mode not in ("replace", "keep"):
        raise ValueError("--debounce-mode: replace or keep")
    return Debounce(key, mode, None if max_wait is None else round(parse_duration_s(max_wait)))


def flow_control(key: str | None, rate: float | None,
                 parallelism: int | None) -> FlowControl | None:
    """``--flow-key`` with ``--flow-rate`` and/or ``--flow-parallelism`` (ValueError for a
    bound without a key); the API checks the bounds."""
    if key is None:
        if rate is not None or parallelism is not None:
            raise ValueError("--flow-rate and --flow-parallelism need --flow-key")
        return None
    return FlowControl(key, rate, parallelism)


@app.callback()
def main(ctx: typer.Context,
         api_url: Annotated[str | None, typer.Option(help="Or TRIGGER_API_URL.")] = None,
         token: Annotated[str | None, typer.Option(help="Or TRIGGER_TOKEN.")] = None,
         profile: Annotated[str | None, typer.Option(help="A section of the config file "
                                                     "(or TRIGGER_PROFILE).")] = None) -> None:
    try:
        transport = ctx.obj if isinstance(ctx.obj, httpx.BaseTransport) else None
        ctx.obj = resolve(api_url, token, profile, transport=transport)
    except ValueError as e:
        raise usage(str(e)) from e


def time_request(in_: str | None, at: str | None, tz: str | None, when: str | None,
                 **rest: Any) -> TriggerRequest:
    """The request for exactly one of ``--in``, ``--at``, ``--when`` (ValueError else)."""
    given = [n for n, v in (("--in", in_), ("--at", at), ("--when", when)) if v is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of --in, --at, --when"
                         + (f" (got {', '.join(given)})" if given else ""))
    zone(tz)
    if in_ is not None:
        return TriggerRequest(delay_s=parse_duration_s(in_), time_zone=tz, **rest)
    if at is not None:
        a = parse_at(at, tz)
        return TriggerRequest(fire_at=a.fire_at, local_time=a.local_time, time_zone=tz, **rest)
    return TriggerRequest(when=when, time_zone=tz, **rest)


def settle_when(c: TriggerClient, req: TriggerRequest, fmt: Output, tz: tzinfo | None,
                yes: bool) -> TriggerRequest:
    """Ask the API how it reads ``req.when`` (a preview stores nothing); when ambiguous, let
    the user choose among its candidates, else stop with exit code 4."""
    try:
        c.triggers.preview(req, count=1)
        return req
    except InvalidRequest as e:
        if not e.candidates:
            raise
        if not interactive(fmt) or yes:
            report(e, fmt)  # nobody to ask: say so, create nothing
            raise typer.Exit(EXIT_NOT_CONFIRMED) from e
        out.print(f"[yellow]{e.message}[/yellow] — it could mean:")
        for n, candidate in enumerate(e.candidates, 1):
            out.print(f"  {n}. {show(candidate, tz)}")
        choice = typer.prompt("Which one? (0 to abort)", type=int, default=0)
        if not 1 <= choice <= len(e.candidates):
            err.print("aborted: nothing created")
            raise typer.Exit(EXIT_NOT_CONFIRMED) from e
        return replace(req, when=None, fire_at=e.candidates[choice - 1])


def print_created(created: CreatedTrigger, tz: tzinfo | None) -> None:
    note = " [dim](replayed: this Idempotency-Key was used before)[/dim]" if \
        created.replayed else ""
    if created.debounced:
        note += " [dim](debounced: joined the key's open trigger)[/dim]"
    out.print(f"[green]{created.trigger_id}[/green] {created.status}{note}")
    out.print(f"  fires at  {show(created.fire_at, tz)}")
    if created.next_fire_at != created.fire_at:
        out.print(f"  next      {show(created.next_fire_at, tz)}")
    if created.resolved is not None:
        r = created.resolved
        out.print(f"  read \"{r.when}\" as {r.rrule or 'once'} in {r.time_zone or 'UTC'}")


@app.command()
def create(ctx: typer.Context, url: Annotated[str | None, typer.Option(
               "--url", help="Callback URL (under one of your prefixes).")] = None,
           payload: Annotated[str | None, typer.Option(help="JSON, or @file.json.")] = None,
           in_: In = None, at: At = None, tz: Tz = None, when: When = None,
           rrule: Rrule = None, cron: Cron = None, jitter: Jitter = None,
           expires_at: ExpiresAt = None, max_lateness: MaxLateness = None,
           flow_key: FlowKey = None, flow_rate: FlowRate = None,
           flow_parallelism: FlowParallelism = None, priority: PriorityOpt = None,
           debounce_key: DebounceKey = None, debounce_mode: DebounceModeOpt = "replace",
           debounce_max_wait: DebounceMaxWait = None,
           idempotency_key: Annotated[str | None, typer.Option(
               help="Default: a fresh one (printed when the outcome is unknown).")] = None,
           yes: Annotated[bool, typer.Option("--yes", "-y", help="Never ask.")] = False,
           output: OutputOpt = Output.text) -> None:
    """Register a trigger; prints when it fires, in the local zone (--tz) and UTC."""
    with api_errors(output), client(ctx) as c:
        req = time_request(in_, at, tz, when, callback_url=url,
                           payload=read_payload(payload), rrule=rrule, cron=cron,
                           jitter_s=jitter_s(jitter), expires_at=instant(expires_at, tz),
                           max_lateness_s=None if max_lateness is None
                           else round(parse_duration_s(max_lateness)),
                           flow_control=flow_control(flow_key, flow_rate, flow_parallelism),
                           priority=priority,
                           debounce=debounce(debounce_key, debounce_mode, debounce_max_wait))
        if when is not None:
            req = settle_when(c, req, output, zone(tz), yes)
        # Always a key, and one the user can see: if the answer never settles (no answer,
        # a 5xx after the SDK's retries) the same command with it cannot make a second.
        key = idempotency_key or new_idempotency_key()
        try:
            created = c.triggers.create(req, idempotency_key=key)
        except (ServerError, ConnectionFailed):
            err.print(f"the trigger may or may not exist: retry with --idempotency-key {key}")
            raise
    if output is Output.json:
        print_json(created.raw)
    else:
        print_created(created, zone(tz))


def trigger_table(triggers: list[Trigger], tz: tzinfo | None) -> Table:
    table = Table("status", "fires (local)", "next (UTC)", "rule", "attempts", "callback",
                  "tags")
    table.columns.insert(0, Column("id", no_wrap=True, min_width=30))  # ids whole, always
    for t in triggers:
        nxt = f"{t.next_fire_at:%Y-%m-%d %H:%M:%SZ}" if t.next_fire_at else "-"
        table.add_row(t.trigger_id, t.status, f"{local(t.fire_at, tz):%Y-%m-%d %H:%M:%S %Z}",
                      nxt, t.rrule or t.cron or "", str(t.attempts), t.callback_url,
                      " ".join([*t.tags, *(f"{k}:{v}" for k, v in t.labels.items())]))
    return table


@app.command("list")
def list_(ctx: typer.Context,
          status: Annotated[str | None, typer.Option(help="PENDING, FIRED, ...")] = None,
          limit: Annotated[int, typer.Option(min=1, help="Rows (json: one page).")] = 50,
          cursor: Annotated[str | None, typer.Option(help="json: the page after.")] = None,
          watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C.")] = False,
          interval_s: Annotated[float, typer.Option("--interval", min=0.2)] = 2.0,
          tag: Tag = None, label: Label = None, recipient: Recipient = None,
          tz: Tz = None, output: OutputOpt = Output.text) -> None:
    """The caller's triggers: pending or in flight by fire time, else (or filtered by
    --tag, --label, --recipient) newest first (a table; --watch refreshes it)."""
    flt = {"tag": tag, "label": label, "recipient": recipient}
    with api_errors(output), client(ctx) as c:
        if output is Output.json:
            while True:
                print_json(c.triggers.list_page(status, limit=min(limit, 500),
                                                cursor=cursor, **flt).raw)
                if not watch:
                    return
                time.sleep(interval_s)

        def table() -> Table:
            rows = list(islice(c.triggers.list(status, page_size=min(limit, 500), **flt),
                               limit))
            return trigger_table(rows, zone(tz))
        if not watch:
            out.print(table())
            return
        try:
            with Live(table(), console=out, auto_refresh=False) as live:
                while True:
                    time.sleep(interval_s)
                    live.update(table(), refresh=True)
        except KeyboardInterrupt:
            return


@app.command()
def get(ctx: typer.Context, trigger_id: str, tz: Tz = None,
        output: OutputOpt = Output.text) -> None:
    """One trigger as it is now."""
    with api_errors(output), client(ctx) as c:
        t = c.triggers.get(trigger_id)
    if output is Output.json:
        print_json(t.raw)
        return
    table = Table("field", "value", show_header=False)
    for key, value in t.raw.items():
        if key in ("fireAt", "nextFireAt", "firedAt", "createdAt") and value:
            value = show(datetime.fromisoformat(value.replace("Z", "+00:00")), zone(tz))
        table.add_row(key, str(value))
    out.print(table)


@app.command()
def attempts(ctx: typer.Context, trigger_id: str,
             limit: Annotated[int | None, typer.Option(
                 min=1, help="Rows (default 50; at most what the service keeps).")] = None,
             cursor: Annotated[str | None, typer.Option(help="The page after.")] = None,
             tz: Tz = None, output: OutputOpt = Output.text) -> None:
    """A trigger's delivery attempts, newest first: one page (the next page's cursor is
    printed under it)."""
    with api_errors(output), client(ctx) as c:
        page = c.triggers.attempts(trigger_id, limit=limit, cursor=cursor)
    if output is Output.json:
        print_json(page.raw)
        return
    table = Table("started (local)", "occurrence", "attempt", "channel", "outcome", "status",
                  "ms", "error")
    for a in page.items:
        table.add_row(f"{local(a.started_at, zone(tz)):%Y-%m-%d %H:%M:%S %Z}", a.occurrence_id,
                      str(a.attempt), a.channel, a.outcome,
                      "" if a.status_code is None else str(a.status_code),
                      str(a.duration_ms), a.error or "")
    out.print(table)
    if page.next_cursor:
        out.print(f"more: --cursor {page.next_cursor}")


app.command("ls", help="The same as list.")(list_)


@app.command()
def cancel(ctx: typer.Context, trigger_id: Annotated[str | None, typer.Argument()] = None,
           tag: Tag = None, label: Label = None, recipient: Recipient = None,
           poll_s: Poll = 0.5, output: OutputOpt = Output.text) -> None:
    """Cancel a pending trigger or series (idempotent), or every unfinished one matching
    --tag, --label or --recipient (a server job, followed with a progress bar)."""
    filtered = jobs.by_id_or_filter(trigger_id, tag, label, recipient)
    with api_errors(output), client(ctx) as c:
        if filtered:
            jobs.run_matching(c, "cancel", tag=tag, label=label, recipient=recipient,
                              fmt=output, poll_s=poll_s)
            return
        assert trigger_id is not None
        done = c.triggers.cancel(trigger_id)
    if output is Output.json:
        print_json(done.raw)
    else:
        out.print(f"{done.trigger_id} {done.status}")


@app.command()
def snooze(ctx: typer.Context, trigger_id: str, in_: In = None, at: At = None, tz: Tz = None,
           when: When = None, output: OutputOpt = Output.text) -> None:
    """A new one-time trigger like this one, later (--in, --at or --when: "in 10 minutes",
    "tomorrow 9am", read in the trigger's zone unless --tz)."""
    with api_errors(output), client(ctx) as c:
        req = time_request(in_, at, tz, when)
        created = c.triggers.snooze(trigger_id, delay_s=req.delay_s, fire_at=req.fire_at,
                                    local_time=req.local_time, time_zone=req.time_zone,
                                    when=req.when)
    if output is Output.json:
        print_json(created.raw)
    else:
        print_created(created, zone(tz))


@app.command("run")
def run_now(ctx: typer.Context, trigger_id: str, tz: Tz = None,
            idempotency_key: Annotated[str | None, typer.Option(
                help="Default: a fresh one (printed when the outcome is unknown).")] = None,
            output: OutputOpt = Output.text) -> None:
    """Fire a trigger now: a one-time trigger moves to now, a series (or a paused trigger)
    gets one extra occurrence now and keeps its schedule."""
    with api_errors(output), client(ctx) as c:
        key = idempotency_key or new_idempotency_key()
        try:
            started = c.triggers.run(trigger_id, idempotency_key=key)
        except (ServerError, ConnectionFailed):
            err.print(f"it may or may not run: retry with --idempotency-key {key}")
            raise
    if output is Output.json:
        print_json(started.raw)
        return
    note = " [dim](replayed: this Idempotency-Key was used before)[/dim]" if \
        started.replayed else ""
    out.print(f"[green]{started.occurrence_id}[/green] fires at "
              f"{show(started.fire_at, zone(tz))}{note}")
    if started.run_trigger_id != started.trigger_id:
        out.print(f"  an extra occurrence: the one-time copy {started.run_trigger_id}")


@app.command()
def backfill(ctx: typer.Context, trigger_id: str,
             from_: Annotated[str, typer.Option(
                 "--from", help='First instant: "2027-03-14 09:00" (this machine\'s zone) '
                 'or with an offset.')],
             to: Annotated[str, typer.Option(
                 "--to", help="End of the range (not included), the same forms.")],
             poll_s: Poll = 0.5, output: OutputOpt = Output.text) -> None:
    """Fire a series' past occurrences scheduled in [--from, --to), once each, oldest first
    (a server job, followed with a progress bar); again over the same range fires nothing."""
    try:
        start, end = (parse_at(v, None).fire_at for v in (from_, to))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    assert start is not None and end is not None  # no --tz: always an instant
    with api_errors(output), client(ctx) as c:
        jobs.run_backfill(c, trigger_id, start, end, fmt=output, poll_s=poll_s)


@app.command()
def ack(ctx: typer.Context, trigger_id: str,
        occurrence: Annotated[str | None, typer.Option(help="Default: the current one.")] = None,
        output: OutputOpt = Output.text) -> None:
    """Acknowledge an occurrence: its escalation steps not yet sent are never sent."""
    with api_errors(output), client(ctx) as c:
        result = c.triggers.ack(trigger_id, occurrence)
    if output is Output.json:
        print_json(result.raw)
    else:
        out.print(f"{result.trigger_id} acknowledged ({result.status})")


@app.command()
def preview(ctx: typer.Context, in_: In = None, at: At = None, tz: Tz = None,
            when: When = None, rrule: Rrule = None, cron: Cron = None, jitter: Jitter = None,
            count: Annotated[int, typer.Option(min=1, max=1000)] = 10,
            after: Annotated[str | None, typer.Option(help="RFC 3339.")] = None,
            output: OutputOpt = Output.text) -> None:
    """The next occurrences of a schedule: local time, UTC, and a mark on DST-shifted ones."""
    with api_errors(output), client(ctx) as c:
        req = time_request(in_, at, tz, when, rrule=rrule, cron=cron,
                           jitter_s=jitter_s(jitter))
        result = c.triggers.preview(req, count=count, after=after)
    if output is Output.json:
        print_json(result.raw)
        return
    z = zone(tz)
    table = Table("#", f"local ({tz or 'this machine'})", "UTC", "DST",
                  *(["fires by (jitter)"] if result.jittered else []))
    latest = [f"{j.latest_at:%H:%M:%SZ}" for j in result.jittered]
    for n, (instant, mark) in enumerate(zip(result.occurrences,
                                            dst_marks(result.occurrences, z), strict=True), 1):
        table.add_row(str(n), f"{local(instant, z):%a %Y-%m-%d %H:%M:%S %Z}",
                      f"{instant:%Y-%m-%dT%H:%M:%SZ}", mark, *latest[n - 1:n])
    out.print(table)


def instant(text: str | None, tz: str | None) -> datetime | None:
    """``--expires-at``: read as ``--at``, a wall time made an instant in ``--tz``."""
    if text is None:
        return None
    a = parse_at(text, tz)
    if a.fire_at is not None:
        return a.fire_at
    assert a.local_time is not None
    return a.local_time.replace(tzinfo=zone(tz))


def jitter_s(text: str | None) -> int | None:
    """``--jitter`` (``30s``, ``10m``) in whole seconds; None when not given."""
    return None if text is None else round(parse_duration_s(text))


secrets_app = typer.Typer(no_args_is_help=True, help="The caller's signing secrets.")
app.add_typer(secrets_app, name="secrets")


@secrets_app.command("rotate")
def rotate(ctx: typer.Context, output: OutputOpt = Output.text) -> None:
    """A new current signing secret, shown once (the old ones sign for the overlap)."""
    with api_errors(output), client(ctx) as c:
        secret = c.signing.rotate()
    if output is Output.json:
        print_json(secret.raw)
    else:
        out.print(secret.secret)
        err.print(f"previous secrets sign until {secret.previous_valid_until:%Y-%m-%dT%H:%M:%SZ}")


def run() -> None:
    """The console script's entry point."""
    app()
