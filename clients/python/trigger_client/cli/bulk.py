"""``triggerctl import`` and ``export``.

``import FILE`` (``.csv`` or ``.jsonl``) creates one trigger per row. A row is the API's
create body: a JSONL line as is; a CSV row by its header's API names (``callbackUrl``,
``payload`` (JSON), ``delaySeconds``, ``fireAt``, ``localTime``, ``timeZone``, ``rrule``,
``cron``, ...), empty cells left out. Each row's Idempotency-Key is derived from the file's
name, the row's number and its content, so running the same import again (after a crash or
a failed row) creates nothing twice: what was created before comes back ``replayed``.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from trigger_client.cli.common import (
    EXIT_API_ERROR,
    Output,
    OutputOpt,
    api_errors,
    client,
    out,
    print_json,
    usage,
)
from trigger_client.client import TriggerClient
from trigger_client.errors import ApiError
from trigger_client.requests import TriggerRequest

_NUMBERS = {"delaySeconds"}
_JSON_CELLS = {"payload", "channels", "escalation", "quietHours", "dstPolicy", "exdates"}


@dataclass(frozen=True, slots=True)
class Row:
    number: int  # 1-based, data rows only
    body: dict[str, Any] | None
    problem: str | None = None  # why the row could not be read


def csv_cell(name: str, text: str) -> Any:
    if name in _NUMBERS:
        return float(text)
    if name in _JSON_CELLS:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            if name == "payload":
                return text  # a plain string payload
            raise
    return text


def read_rows(path: Path) -> Iterator[Row]:
    """The file's rows; a row that cannot be read comes with its ``problem``."""
    with path.open(encoding="utf-8", newline="") as f:
        if path.suffix.lower() == ".csv":
            for n, record in enumerate(csv.DictReader(f), 1):
                try:
                    yield Row(n, {k: csv_cell(k, v) for k, v in record.items() if k and v})
                except ValueError as e:
                    yield Row(n, None, f"unreadable cell: {e}")
            return
        n = 0
        for line in f:
            if not line.strip():
                continue
            n += 1
            try:
                body = json.loads(line)
            except json.JSONDecodeError as e:
                yield Row(n, None, f"not JSON: {e}")
                continue
            yield Row(n, body if isinstance(body, dict) else None,
                      None if isinstance(body, dict) else "not a JSON object")


def row_key(path: Path, row: Row) -> str:
    """The row's Idempotency-Key: the same file name, row number and content give the
    same key on every run."""
    canonical = json.dumps(row.body, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{path.name}\n{row.number}\n{canonical}".encode()).hexdigest()
    return f"import-{digest[:40]}"


def import_one(c: TriggerClient, path: Path, row: Row) -> tuple[str, Any]:
    """(outcome, the API's answer or the reason): created, replayed or rejected."""
    if row.body is None:
        return "rejected", {"error": "unreadable_row", "message": row.problem}
    try:
        req = TriggerRequest.from_json(row.body)
    except ValueError as e:
        return "rejected", {"error": "unreadable_row", "message": str(e)}
    try:
        created = c.triggers.create(req, idempotency_key=row_key(path, row))
    except ApiError as e:
        return "rejected", e.body if e.body is not None else {"error": e.error,
                                                               "message": e.message}
    return ("replayed" if created.replayed else "created"), created.raw


def import_(ctx: typer.Context, file: Annotated[Path, typer.Argument(
                exists=True, dir_okay=False, help="triggers.csv or triggers.jsonl")],
            output: OutputOpt = Output.text) -> None:
    """Create triggers from a CSV or JSONL file; resumable (per-row Idempotency-Keys).
    json: one line per row, {"row", "outcome", "answer"}. Exit 1 if any row was rejected."""
    if file.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        raise usage(f"{file}: use a .csv or .jsonl file")
    rows = list(read_rows(file))
    counts: Counter[str] = Counter()
    rejected: list[tuple[int, Any]] = []
    with api_errors(output), client(ctx) as c, Progress(
            console=out, disable=output is Output.json) as bar:
        task = bar.add_task(f"importing {file.name}", total=len(rows))
        for row in rows:
            outcome, answer = import_one(c, file, row)
            counts[outcome] += 1
            if outcome == "rejected":
                rejected.append((row.number, answer))
            if output is Output.json:
                print_json({"row": row.number, "outcome": outcome, "answer": answer})
            bar.advance(task)
    if output is Output.text:
        out.print(f"{counts['created']} created, {counts['replayed']} replayed (created "
                  f"before), {counts['rejected']} rejected")
        for number, answer in rejected:
            out.print(f"  row {number}: {answer.get('error')}: {answer.get('message')}")
    if rejected:
        raise typer.Exit(EXIT_API_ERROR)


def export(ctx: typer.Context,
           file: Annotated[Path | None, typer.Option("--file", "-f", help="Default stdout.")]
           = None,
           status: Annotated[str | None, typer.Option()] = None,
           output: OutputOpt = Output.text) -> None:
    """Write the caller's triggers as JSONL (each line the API's trigger JSON)."""
    with api_errors(output), client(ctx) as c:
        lines = (json.dumps(t.raw, separators=(",", ":")) + "\n"
                 for t in c.triggers.list(status, page_size=500))
        if file is None:
            n = 0
            for line in lines:
                typer.echo(line, nl=False)
                n += 1
            return
        with file.open("w", encoding="utf-8") as f:
            n = sum(1 for line in lines if f.write(line) or True)
    if output is Output.json:
        print_json({"file": str(file), "exported": n})
    else:
        out.print(f"{n} triggers written to {file}")
