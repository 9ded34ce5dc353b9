"""``triggerctl dlq``: dead letters (list, show, replay one or all, purge)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from trigger_client.cli.common import (
    Output,
    OutputOpt,
    api_errors,
    client,
    interactive,
    out,
    print_json,
)
from trigger_client.client import TriggerClient
from trigger_client.resource_models import ReplayJob

app = typer.Typer(no_args_is_help=True, help="Dead letters: list, show, replay, purge.")

Reason = Annotated[str | None, typer.Option(
    help="max_attempts, max_age, gone, callback_not_allowed, budget_exhausted, "
         "recipient_deleted, expired, endpoint_disabled.")]
Since = Annotated[str | None, typer.Option(help="RFC 3339 with an offset.")]
Prefix = Annotated[str | None, typer.Option("--prefix", help="Callback URL prefix.")]
Caller = Annotated[str | None, typer.Option(help="Ops tokens only: one caller's.")]


@app.command("list")
def list_(ctx: typer.Context, reason: Reason = None, since: Since = None, until: Since = None,
          prefix: Prefix = None, caller: Caller = None,
          limit: Annotated[int, typer.Option(min=1, help="Rows (json: one page).")] = 50,
          cursor: Annotated[str | None, typer.Option()] = None,
          output: OutputOpt = Output.text) -> None:
    """Dead letters, newest first."""
    with api_errors(output), client(ctx) as c:
        if output is Output.json:
            print_json(c.dead_letters.list_page(
                reason=reason, since=since, until=until, callback_prefix=prefix, caller=caller,
                limit=min(limit, 500), cursor=cursor).raw)
            return
        table = Table("id", "reason", "attempts", "dead at (UTC)", "last error", "callback")
        for n, d in enumerate(c.dead_letters.list(
                reason=reason, since=since, until=until, callback_prefix=prefix,
                caller=caller, page_size=min(limit, 500))):
            if n >= limit:
                break
            table.add_row(d.id, d.reason, str(d.attempt_count),
                          f"{d.dead_at:%Y-%m-%d %H:%M:%S}", d.last_error or "", d.callback_url)
    out.print(table)


@app.command()
def show(ctx: typer.Context, dead_letter_id: str, output: OutputOpt = Output.text) -> None:
    """One dead letter with every attempt."""
    with api_errors(output), client(ctx) as c:
        d = c.dead_letters.get(dead_letter_id)
    if output is Output.json:
        print_json(d.raw)
        return
    out.print(f"[bold]{d.id}[/bold] {d.reason} ({d.state}); trigger {d.trigger_id} "
              f"{d.trigger_status or '-'}; callback {d.callback_url}")
    out.print(f"payload: {d.payload!r}")
    table = Table("#", "at (UTC)", "ms", "status", "error", "answer", "dispatcher")
    for a in d.attempts:
        table.add_row(str(a.attempt), f"{a.at:%Y-%m-%d %H:%M:%S}", str(a.duration_ms),
                      str(a.status_code or "-"), a.error or "", a.response_excerpt or "",
                      a.dispatcher)
    out.print(table)


def follow(c: TriggerClient, job: ReplayJob, fmt: Output, poll_s: float) -> ReplayJob:
    """Poll the bulk job until done (a progress bar in text mode)."""
    if fmt is Output.json:
        while not job.finished:
            time.sleep(poll_s)
            job = c.dead_letters.replay_job(job.job_id)
        return job
    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[failed]} failed"))
    with Progress(*columns, console=out) as bar:
        task = bar.add_task("replay", total=job.total, failed=0)
        while True:
            bar.update(task, completed=job.done + job.failed, failed=job.failed)
            if job.finished:
                return job
            time.sleep(poll_s)
            job = c.dead_letters.replay_job(job.job_id)


@app.command()
def replay(ctx: typer.Context,
           dead_letter_id: Annotated[str | None, typer.Argument()] = None,
           all_: Annotated[bool, typer.Option("--all", help="Every letter matching the "
                                              "filters, as one server job.")] = False,
           reason: Reason = None, since: Since = None, until: Since = None,
           prefix: Prefix = None, caller: Caller = None,
           at: Annotated[str | None, typer.Option(help="One letter: deliver at this "
                                                  "RFC 3339 time (default now).")] = None,
           poll_s: Annotated[float, typer.Option("--poll", min=0.05)] = 0.5,
           output: OutputOpt = Output.text) -> None:
    """Replay one dead letter, or --all matching the filters (following the server's job;
    json prints the job's last state)."""
    if all_ == (dead_letter_id is not None):
        raise typer.BadParameter("give a dead letter id or --all")
    with api_errors(output), client(ctx) as c:
        if dead_letter_id is not None:
            result = c.dead_letters.replay(dead_letter_id, fire_at=at)
            if output is Output.json:
                print_json(result.raw)
            else:
                out.print(f"{result.id} replayed by {result.trigger_id}"
                          f" ({result.status}, at {result.fire_at:%Y-%m-%dT%H:%M:%SZ})")
            return
        job = c.dead_letters.replay_all(reason=reason, since=since, until=until,
                                        callback_prefix=prefix, caller=caller)
        job = follow(c, job, output, poll_s)
    if output is Output.json:
        print_json(job.raw)
    else:
        out.print(f"job {job.job_id}: {job.done} replayed, {job.failed} failed of {job.total}")


@app.command()
def purge(ctx: typer.Context, dead_letter_id: str,
          yes: Annotated[bool, typer.Option("--yes", "-y")] = False,
          output: OutputOpt = Output.text) -> None:
    """Purge a dead letter (asks first in a terminal, unless --yes)."""
    if interactive(output) and not yes and not typer.confirm(f"purge {dead_letter_id}?"):
        raise typer.Exit(4)
    with api_errors(output), client(ctx) as c:
        result = c.dead_letters.purge(dead_letter_id)
    if output is Output.json:
        print_json(result.raw)
    else:
        out.print(f"{result.id} purged")
