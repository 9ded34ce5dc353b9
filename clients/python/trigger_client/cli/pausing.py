"""``triggerctl pause|resume ID [--policy]`` (or ``--tag``/``--label``/``--recipient``: a
job over every match) and the operators' ``triggerctl callers pause|resume NAME
[--policy]``; the jobs are followed with a progress bar."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.progress import Progress

from trigger_client.cli import jobs
from trigger_client.cli.common import Output, OutputOpt, api_errors, client, out, print_json
from trigger_client.cli.jobs import Label, Poll, Recipient, Tag
from trigger_client.pausing import CatchUpPolicy

Policy = Annotated[CatchUpPolicy | None, typer.Option(
    "--policy", help="Of the occurrences that came due while paused, fire all, the latest, "
    "or none (default: each series' catch-up policy).")]
_POLL_S = 0.5

callers_app = typer.Typer(no_args_is_help=True, help="Operators: pause or resume a caller.")


def pause(ctx: typer.Context, trigger_id: Annotated[str | None, typer.Argument()] = None,
          tag: Tag = None, label: Label = None, recipient: Recipient = None,
          poll_s: Poll = 0.5, output: OutputOpt = Output.text) -> None:
    """Pause a pending trigger or series, or every one matching --tag, --label or
    --recipient (a server job): nothing of it fires until it is resumed."""
    filtered = jobs.by_id_or_filter(trigger_id, tag, label, recipient)
    with api_errors(output), client(ctx) as c:
        if filtered:
            jobs.run_matching(c, "pause", tag=tag, label=label, recipient=recipient,
                              fmt=output, poll_s=poll_s)
            return
        assert trigger_id is not None
        t = c.triggers.pause(trigger_id)
    if output is Output.json:
        print_json(t.raw)
    else:
        out.print(f"{t.trigger_id} {t.status}")


def resume(ctx: typer.Context, trigger_id: Annotated[str | None, typer.Argument()] = None,
           policy: Policy = None, tag: Tag = None, label: Label = None,
           recipient: Recipient = None, poll_s: Poll = 0.5,
           output: OutputOpt = Output.text) -> None:
    """Resume a paused trigger or series, or every one matching --tag, --label or
    --recipient (a server job); --policy: what came due meanwhile."""
    filtered = jobs.by_id_or_filter(trigger_id, tag, label, recipient)
    with api_errors(output), client(ctx) as c:
        if filtered:
            jobs.run_matching(c, "resume", tag=tag, label=label, recipient=recipient,
                              fmt=output, poll_s=poll_s,
                              policy=policy.value if policy else None)
            return
        assert trigger_id is not None
        t = c.triggers.resume(trigger_id, policy)
    if output is Output.json:
        print_json(t.raw)
    else:
        nxt = f" next {t.next_fire_at:%Y-%m-%dT%H:%M:%SZ}" if t.next_fire_at else ""
        out.print(f"{t.trigger_id} {t.status}{nxt}")


@callers_app.command("pause")
def pause_caller(ctx: typer.Context, caller: str, output: OutputOpt = Output.text) -> None:
    """Hold every due trigger of CALLER (an incident); registrations are still accepted."""
    with api_errors(output), client(ctx) as c:
        got = c.ops.pause_caller(caller)
    if output is Output.json:
        print_json(got)
    else:
        out.print(f"{caller} paused since {got['pausedAt']}")


@callers_app.command("resume")
def resume_caller(ctx: typer.Context, caller: str, policy: Policy = None,
                  output: OutputOpt = Output.text) -> None:
    """Resume CALLER and its paused triggers, following the job to its end."""
    with api_errors(output), client(ctx) as c:
        job = c.ops.resume_caller(caller, policy)
        if output is Output.json:
            print_json(job.raw)
            return
        with Progress(transient=True) as bar:
            task = bar.add_task(f"resuming {caller}", total=max(job.total, 1))
            while job.status != "done":
                bar.update(task, completed=job.done + job.failed)
                time.sleep(_POLL_S)
                job = c.ops.resume_job(job.job_id)
    out.print(f"{caller} resumed: {job.done} triggers resumed, {job.failed} failed")
