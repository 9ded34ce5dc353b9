"""``triggerctl endpoints list`` (the caller's failing and disabled callback origins;
``--all`` for operators) and ``triggerctl endpoints enable ORIGIN [--replay-since T]``
(``--caller NAME`` for operators)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from trigger_client.cli.common import (
    Output,
    OutputOpt,
    api_errors,
    client,
    out,
    print_json,
    usage,
)
from trigger_client.cli.timeparse import parse_at

app = typer.Typer(no_args_is_help=True,
                  help="Endpoint health: failing and disabled callback origins; enable one.")


@app.command("list")
def list_(ctx: typer.Context,
          all_callers: Annotated[bool, typer.Option(
              "--all", help="Operators: every caller's.")] = False,
          output: OutputOpt = Output.text) -> None:
    """The failing and disabled endpoints (a healthy one is not listed)."""
    with api_errors(output), client(ctx) as c:
        rows = c.endpoints.list_all() if all_callers else c.endpoints.list()
    if output is Output.json:
        print_json([e.raw for e in rows])
        return
    if not rows:
        out.print("every endpoint is healthy")
        return
    table = Table("caller", "origin", "state", "failing since (UTC)", "failures", "last error")
    for e in rows:
        table.add_row(e.caller, e.origin, e.state, f"{e.failing_since:%Y-%m-%d %H:%M:%S}",
                      str(e.failures), e.last_error or "")
    out.print(table)


@app.command()
def enable(ctx: typer.Context, origin: str,
           replay_since: Annotated[str | None, typer.Option(
               help="Replay what was held since then (an offset, or this machine's zone).")
           ] = None,
           caller: Annotated[str | None, typer.Option(
               help="Operators: the caller whose endpoint it is.")] = None,
           output: OutputOpt = Output.text) -> None:
    """Enable ORIGIN (https://host[:port]): its record is reset; with --replay-since, what
    was held for it since then is delivered (once each)."""
    since = None
    if replay_since is not None:
        try:
            at = parse_at(replay_since, None)
        except ValueError as e:
            raise usage(f"--replay-since: {e}") from None
        since = at.fire_at
    with api_errors(output), client(ctx) as c:
        got = (c.endpoints.enable_for(caller, origin, since) if caller
               else c.endpoints.enable(origin, since))
    if output is Output.json:
        print_json(got.raw)
        return
    jobs = [j for j in (got.trigger_job_id, got.dead_letter_job_id) if j]
    was = got.previous_state or "healthy"
    out.print(f"{got.origin} enabled (was {was})"
              + (f"; replaying: {', '.join(jobs)}" if jobs else ""))
