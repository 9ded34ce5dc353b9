"""What every triggerctl command shares: the output format, the client, error handling and
the exit codes.

Exit codes: 0 done; 1 the API answered non-2xx (the error is printed; with ``--output json``
exactly the API's JSON error on stdout), and for ``import`` any row rejected; 2 a usage error
(bad flag or value); 3 the API did not answer (connection failed after retries); 4 the text
was ambiguous and no choice could be asked (``--output json``, or stdin not a terminal), or
the user declined.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console

from trigger_client.cli.config import CliConfig
from trigger_client.client import TriggerClient
from trigger_client.errors import ApiError, ConnectionFailed

EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 3
EXIT_NOT_CONFIRMED = 4

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class Output(StrEnum):
    text = "text"
    json = "json"


OutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", help="text (tables, prompts) or json (the API's JSON answer as is, "
    "never a prompt).", case_sensitive=False)]


def state(ctx: typer.Context) -> CliConfig:
    cfg = ctx.find_root().obj
    assert isinstance(cfg, CliConfig)
    return cfg


def client(ctx: typer.Context) -> TriggerClient:
    cfg = state(ctx)
    return TriggerClient(base_url=cfg.api_url, token=cfg.token, transport=cfg.transport)


def interactive(fmt: Output) -> bool:
    """Whether a question may be asked: text output and a terminal on stdin."""
    return fmt is Output.text and sys.stdin.isatty()


def print_json(raw: Any) -> None:
    """One API answer as JSON on one line of stdout."""
    sys.stdout.write(json.dumps(raw, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def usage(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(EXIT_USAGE)


def report(e: ApiError, fmt: Output) -> None:
    """Print the API's error: its JSON on stdout (json), a line on stderr (text)."""
    if fmt is Output.json:
        print_json(e.body if e.body is not None else {"error": e.error, "message": e.message})
    else:
        where = f" (field {e.field})" if e.field else ""
        err.print(f"[red]{e.status} {e.error}[/red]{where}: {e.message}")


@contextmanager
def api_errors(fmt: Output) -> Iterator[None]:
    """Turn the SDK's errors into the documented exit codes (the API's error printed)."""
    try:
        yield
    except ApiError as e:
        report(e, fmt)
        raise typer.Exit(EXIT_API_ERROR) from e
    except ConnectionFailed as e:
        err.print(f"[red]no answer from the API:[/red] {e}")
        raise typer.Exit(EXIT_NO_ANSWER) from e
    except ValueError as e:
        raise usage(str(e)) from e


def read_payload(text: str | None) -> Any:
    """``--payload``: inline JSON or ``@file.json``."""
    if text is None:
        return None
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"--payload {text}: {e.strerror}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--payload is not JSON: {e}") from e
