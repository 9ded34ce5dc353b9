"""``triggerctl subscriptions put NAME URL -e TYPE...``, ``list``, ``delete NAME`` and
``failures NAME``: the caller's subscriptions to its own events."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from trigger_client.cli.common import Output, OutputOpt, api_errors, client, out, print_json
from trigger_client.subscriptions import EVENT_TYPES

app = typer.Typer(no_args_is_help=True,
                  help="Event subscriptions: the caller's events POSTed, signed, to a URL.")


@app.command()
def put(ctx: typer.Context, name: str, url: str,
        events: Annotated[list[str], typer.Option(
            "--event", "-e", help=f"An event type to send ({', '.join(EVENT_TYPES)}); "
            "repeat for more.")],
        output: OutputOpt = Output.text) -> None:
    """Create or replace subscription NAME: the events listed go to URL (under one of the
    caller's callback prefixes)."""
    with api_errors(output), client(ctx) as c:
        sub = c.subscriptions.put(name, url, events)
    if output is Output.json:
        print_json(sub.raw)
        return
    out.print(f"{sub.name} → {sub.url}: {', '.join(sub.events)}")


@app.command("list")
def list_(ctx: typer.Context, output: OutputOpt = Output.text) -> None:
    """The caller's subscriptions."""
    with api_errors(output), client(ctx) as c:
        subs = c.subscriptions.list()
    if output is Output.json:
        print_json({"items": [s.raw for s in subs]})
        return
    if not subs:
        out.print("no event subscriptions")
        return
    table = Table("name", "url", "events")
    for s in subs:
        table.add_row(s.name, s.url, ", ".join(s.events))
    out.print(table)


@app.command()
def delete(ctx: typer.Context, name: str, output: OutputOpt = Output.text) -> None:
    """Delete subscription NAME (its failed events too)."""
    with api_errors(output), client(ctx) as c:
        got = c.subscriptions.delete(name)
    if output is Output.json:
        print_json(asdict(got))
        return
    out.print(f"{got.name} deleted")


@app.command()
def failures(ctx: typer.Context, name: str, output: OutputOpt = Output.text) -> None:
    """The events given up on for NAME, newest first."""
    with api_errors(output), client(ctx) as c:
        rows = c.subscriptions.failures(name)
    if output is Output.json:
        print_json([{"eventId": f.event_id, "type": f.type, "at": f.at.isoformat(),
                     "failedAt": f.failed_at.isoformat(), "attempts": f.attempts,
                     "lastError": f.last_error, "data": f.data} for f in rows])
        return
    if not rows:
        out.print("no failed events")
        return
    table = Table("failed at (UTC)", "type", "event id", "attempts", "last error")
    for f in rows:
        table.add_row(f"{f.failed_at:%Y-%m-%d %H:%M:%S}", f.type, f.event_id, str(f.attempts),
                      f.last_error or "")
    out.print(table)
