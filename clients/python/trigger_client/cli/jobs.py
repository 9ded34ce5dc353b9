"""``triggerctl cancel --tag T`` (and ``--label k:v``, ``--recipient R``): a server job over
every unfinished trigger the filter matches, followed with a progress bar."""

from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from trigger_client.cli.common import Output, out, print_json
from trigger_client.client import TriggerClient
from trigger_client.models_more import TriggerJob


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


def cancel_matching(c: TriggerClient, *, tag: str | None, label: str | None,
                    recipient: str | None, fmt: Output, poll_s: float) -> None:
    job = c.triggers.start_job("cancel", tag=tag, label=label, recipient=recipient)
    job = follow(c, job, fmt, poll_s)
    if fmt is Output.json:
        print_json(job.raw)
    else:
        out.print(f"job {job.job_id}: {job.done} cancelled, {job.failed} failed of "
                  f"{job.matched}")
