"""``triggerctl cancel|pause|resume --tag T`` (and ``--label k:v``, ``--recipient R``): a
server job over every unfinished trigger the filter matches, followed with a progress bar;
``triggerctl backfill ID --from --to``: a series' past occurrences, the same way."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from trigger_client.cli.common import Output, out, print_json
from trigger_client.client import TriggerClient
from trigger_client.resource_models import TriggerJob

Tag = Annotated[str | None, typer.Option("--tag", help="Only triggers with this tag.")]
Label = Annotated[str | None, typer.Option("--label", help="Only with this label: key:value.")]
Recipient = Annotated[str | None, typer.Option("--recipient", help="Only for this recipient.")]
Poll = Annotated[float, typer.Option("--poll", min=0.05, help="Seconds between job polls.")]
_DONE = {"cancel": "cancelled", "pause": "paused", "resume": "resumed",
         "backfill": "fired"}


def by_id_or_filter(trigger_id: str | None, *filters: str | None) -> bool:
    """Whether a command works on a filter (True) or one trigger (False); exactly one."""
    filtered = any(v is not None for v in filters)
    if filtered == (trigger_id is not None):
        raise typer.BadParameter("give a trigger id or a filter (--tag, --label, --recipient)")
    return filtered


def follow(c: TriggerClient, job: TriggerJob, fmt: Output, poll_s: float) -> TriggerJob:
    """Poll the job until done (a progress bar in text mode)."""
    if fmt is Output.json:
        while not job.finished:
            time.sleep(poll_s)
            job = c.triggers.job(job.job_id)
        return job
    columns = (TextColumn(f"{job.action}ing"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[failed]} failed"))
    with Progress(*columns, console=out) as bar:
        task = bar.add_task(job.action, total=job.matched, failed=0)
        while True:
            bar.update(task, completed=job.done + job.failed, failed=job.failed)
            if job.finished:
                return job
            time.sleep(poll_s)
            job = c.triggers.job(job.job_id)


def run_backfill(c: TriggerClient, trigger_id: str, from_: datetime, to: datetime, *,
                 fmt: Output, poll_s: float) -> None:
    """Start the series' backfill over ``[from_, to)`` and follow it."""
    report(follow(c, c.triggers.backfill(trigger_id, from_, to), fmt, poll_s), fmt)


def report(job: TriggerJob, fmt: Output) -> None:
    """A finished job: its body (json), or one line of counts."""
    if fmt is Output.json:
        print_json(job.raw)
    else:
        out.print(f"job {job.job_id}: {job.done} {_DONE[job.action]}, {job.failed} failed of "
                  f"{job.matched}")


def run_matching(c: TriggerClient, action: str, *, tag: str | None, label: str | None,
                 recipient: str | None, fmt: Output, poll_s: float,
                 policy: str | None = None) -> None:
    """Start the job ``action`` (cancel, pause, resume with ``policy``) and follow it."""
    job = c.triggers.start_job(action, tag=tag, label=label, recipient=recipient,
                               policy=policy)
    report(follow(c, job, fmt, poll_s), fmt)
