"""``triggerctl recipients``: a caller's people (put, get, rm, ls)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from trigger_client.cli.common import Output, OutputOpt, api_errors, client, out, print_json
from trigger_client.resource_models import Recipient

app = typer.Typer(no_args_is_help=True, help="Recipients: put, get, rm, ls.")

Csv = Annotated[str | None, typer.Option(help="Comma-separated.")]


@app.command()
def put(ctx: typer.Context, recipient_id: str,
        time_zone: Annotated[str, typer.Option("--tz", help="IANA zone, e.g. Asia/Tokyo.")],
        phone: Annotated[str | None, typer.Option(help="E.164, e.g. +15551234567.")] = None,
        email: Csv = None, push_tokens: Csv = None,
        inbox: Annotated[str | None, typer.Option(help="Inbox id (default the id).")] = None,
        channels: Annotated[str | None, typer.Option(
            help="Ordered preference, e.g. push,sms,email.")] = None,
        quiet: Annotated[str | None, typer.Option(help="Quiet hours HH:MM-HH:MM.")] = None,
        locale: Annotated[str | None, typer.Option(help="BCP 47, e.g. en-US.")] = None,
        telegram: Annotated[str | None, typer.Option(
            help="Telegram chat id, or a channel's @username.")] = None,
        output: OutputOpt = Output.text) -> None:
    """Create or replace a recipient (idempotent)."""
    def items(v: str | None) -> tuple[str, ...] | None:
        return tuple(x.strip() for x in v.split(",") if x.strip()) if v else None
    quiet_hours = None
    if quiet:
        start, _, end = quiet.partition("-")
        quiet_hours = {"start": start, "end": end}
    chat: int | str | None = telegram
    if telegram is not None and telegram.lstrip("-").isdigit():
        chat = int(telegram)  # the API takes a chat id as a number
    profile = Recipient(recipient_id, time_zone, quiet_hours, items(email), phone,
                        items(push_tokens), inbox, items(channels) or (), locale,
                        telegram=chat)
    with api_errors(output), client(ctx) as c:
        got = c.recipients.put(profile)
    _show(got, output)


@app.command()
def get(ctx: typer.Context, recipient_id: str, output: OutputOpt = Output.text) -> None:
    """One recipient's profile."""
    with api_errors(output), client(ctx) as c:
        got = c.recipients.get(recipient_id)
    _show(got, output)


@app.command()
def rm(ctx: typer.Context, recipient_id: str, output: OutputOpt = Output.text) -> None:
    """Delete a recipient: its pending reminders fail (recipient_deleted)."""
    with api_errors(output), client(ctx) as c:
        gone = c.recipients.delete(recipient_id)
    if output is Output.json:
        print_json({"recipientId": gone.recipient_id, "deleted": True,
                    "triggersFailed": gone.triggers_failed})
        return
    out.print(f"deleted {gone.recipient_id}; {gone.triggers_failed} pending reminder(s) failed")


@app.command("ls")
def ls(ctx: typer.Context,
       limit: Annotated[int, typer.Option(min=1, help="Rows.")] = 50,
       output: OutputOpt = Output.text) -> None:
    """The caller's recipients in id order."""
    with api_errors(output), client(ctx) as c:
        rows = []
        for n, p in enumerate(c.recipients.list(page_size=min(limit, 500))):
            if n >= limit:
                break
            rows.append(p)
    if output is Output.json:
        print_json([p.raw for p in rows])
        return
    table = Table("id", "zone", "channels", "phone", "email", "locale")
    for p in rows:
        table.add_row(p.recipient_id, p.time_zone, ",".join(p.channels), p.phone or "",
                      ",".join(p.email or ()), p.locale or "")
    out.print(table)


def _show(p: Recipient, output: Output) -> None:
    if output is Output.json:
        print_json(p.raw)
        return
    out.print(f"[bold]{p.recipient_id}[/bold] {p.time_zone}; channels "
              f"{','.join(p.channels) or '-'}; phone {p.phone or '-'}; email "
              f"{','.join(p.email or ()) or '-'}; telegram {p.telegram or '-'}; locale "
              f"{p.locale or '-'}; quiet hours "
              f"{json.dumps(p.quiet_hours) if p.quiet_hours else '-'}")
