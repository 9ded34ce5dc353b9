"""``triggerctl audit``: the audit log, newest first (a caller's own; ``--all`` with an ops
token: everyone's)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from trigger_client.cli.common import Output, OutputOpt, api_errors, client, out, print_json
from trigger_client.models import Page
from trigger_client.resource_models import AuditEntry

Since = Annotated[str | None, typer.Option(help="RFC 3339 with an offset.")]
Action = Annotated[str | None, typer.Option(help="cancel, patch, pause, resume, run, backfill, "
                                            "replay, purge, rotate_secret, recipient_put, ...")]
Actor = Annotated[str | None, typer.Option(help="With --all: one caller's or operator's.")]
All = Annotated[bool, typer.Option("--all", help="Ops tokens: every entry (/v1/ops/audit).")]


def audit(ctx: typer.Context, since: Since = None, action: Action = None, actor: Actor = None,
          all_: All = False,
          limit: Annotated[int, typer.Option(min=1, help="Rows (json: one page).")] = 50,
          cursor: Annotated[str | None, typer.Option()] = None,
          output: OutputOpt = Output.text) -> None:
    """Who changed what, newest first, and how each request was answered."""
    with api_errors(output), client(ctx) as c:
        def page(at: str | None, size: int) -> Page[AuditEntry]:
            if all_:
                return c.ops.audit(since=since, action=action, actor=actor, cursor=at,
                                   limit=size)
            return c.audit(since=since, action=action, cursor=at, limit=size)

        if output is Output.json:
            print_json(page(cursor, min(limit, 500)).raw)
            return
        table = Table("at (UTC)", "actor", "action", "target", "outcome", "request id")
        shown, at = 0, cursor
        while shown < limit:
            p = page(at, min(limit - shown, 500))
            for e in p.items:
                table.add_row(f"{e.at:%Y-%m-%d %H:%M:%S}", e.actor, e.action, e.target,
                              e.outcome, e.request_id)
                shown += 1
            if p.next_cursor is None:
                break
            at = p.next_cursor
    out.print(table)
