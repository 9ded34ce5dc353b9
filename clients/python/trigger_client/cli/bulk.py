"""``triggerctl import`` and ``export``.

``import FILE`` (``.csv`` or ``.jsonl``) creates one trigger per row. A row is the API's
create body: a JSONL line as is; a CSV row by its header's API names (``callbackUrl``,
``payload`` (JSON), ``delaySeconds``, ``fireAt``, ``localTime``, ``timeZone``, ``rrule``,
``cron``, ...), empty cells left out. Rows go 1,000 a request (``POST /v1/triggers/batch``),
each answered on its own. Each row's Idempotency-Key is derived from the file's name, the
row's number and its content, so running the same import again (after a crash or a failed
row) creates nothing twice: what was created before comes back ``replayed``.
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

from trigger_client._calls import MAX_BATCH_ITEMS
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


def import_chunk(c: TriggerClient, path: Path, rows: list[Row]) -> list[tuple[str, Any]]:
    """(outcome, the API's answer or the reason) of each row, in order: created, replayed or
    rejected. The readable rows go in one ``POST /v1/triggers/batch``, each with its key."""
    results: list[tuple[str, Any] | None] = [None] * len(rows)
    sendable: list[tuple[int, TriggerRequest, str]] = []
    for i, row in enumerate(rows):
        if row.body is None:
            results[i] = ("rejected", {"error": "unreadable_row", "message": row.problem})
            continue
        try:
            sendable.append((i, TriggerRequest.from_json(row.body), row_key(path, row)))
        except ValueError as e:
            results[i] = ("rejected", {"error": "unreadable_row", "message": str(e)})
    if sendable:
        answers = c.triggers.create_batch([r for _, r, _ in sendable],
                                          idempotency_keys=[k for _, _, k in sendable])
        for (i, _, _), item in zip(sendable, answers, strict=True):
            outcome = "rejected" if not item.ok else "replayed" if item.replayed else "created"
            results[i] = (outcome, item.raw)
    return [r for r in results if r is not None]


def import_(ctx: typer.Context, file: Annotated[Path, typer.Argument(
                exists=True, dir_okay=False, help="triggers.csv or triggers.jsonl")],
            output: OutputOpt = Output.text) -> None:
    """Create triggers from a CSV or JSONL file, 1,000 rows a request (the batch endpoint);
    resumable (per-row Idempotency-Keys). json: one line per row, {"row", "outcome",
    "answer"}. Exit 1 if any row was rejected."""
    if file.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        raise usage(f"{file}: use a .csv or .jsonl file")
    rows = list(read_rows(file))
    counts: Counter[str] = Counter()
    rejected: list[tuple[int, Any]] = []
    with api_errors(output), client(ctx) as c, Progress(
            console=out, disable=output is Output.json) as bar:
        task = bar.add_task(f"importing {file.name}", total=len(rows))
        for start in range(0, len(rows), MAX_BATCH_ITEMS):
            chunk = rows[start:start + MAX_BATCH_ITEMS]
            for row, (outcome, answer) in zip(chunk, import_chunk(c, file, chunk),
                                              strict=True):
                counts[outcome] += 1
                if outcome == "rejected":
                    rejected.append((row.number, answer))
                if output is Output.json:
                    print_json({"row": row.number, "outcome": outcome, "answer": answer})
            bar.advance(task, len(chunk))
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
