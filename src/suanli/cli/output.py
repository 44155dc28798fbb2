"""Shared CLI plumbing: the logged-in client, JSON or table output, and exit codes scripts can trust.

Exit codes: 0 done; 1 the server refused (4xx); 2 bad usage or input; 3 not logged in;
4 server unreachable; 5 server error (5xx).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from suanli.cli import profile
from suanli.cli.rent_spec import SpecError, moment, money_to_micros
from suanli.client import BAD_RESPONSE, NOT_OURS, ApiError, Client, InvalidArgument, ServerUnreachable
from suanli.client.client import DEFAULT_TIMEOUT_S, url_problem
from suanli.wire.schemas import MONTH_PATTERN, problem_text

EXIT_REFUSED, EXIT_USAGE, EXIT_NOT_LOGGED_IN, EXIT_UNREACHABLE, EXIT_SERVER_ERROR = 1, 2, 3, 4, 5
TIMEOUT_VARIABLE = (
    "SUANLI_TIMEOUT_S"  # seconds each call to the server waits for its answer, retries included
)
TIMEOUT_SECONDS = TypeAdapter(Annotated[float, Field(gt=0, allow_inf_nan=False)])
# Piped or redirected (no terminal, no COLUMNS), Rich would lay tables out in 80 columns and wrap ids and
# model names inside their cells, so `suanli ls | grep` missed them: lay them out wider there.
PIPE_WIDTH = 200
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)
errors = Console(stderr=True, soft_wrap=True)  # a message is one line: the terminal wraps it, not Rich


def moment_option(text: str) -> datetime:
    """A typer parser for a time option: `now`, `+2h`, `now+1d` or ISO 8601 (UTC unless a zone is given)."""
    try:
        return moment(text)
    except SpecError as error:
        raise typer.BadParameter(str(error)) from None


def usage_error(message: str) -> typer.Exit:
    """Print `message` as an error; the usage exit (2) to raise."""
    errors.print(error_text(message))
    return typer.Exit(EXIT_USAGE)


def micros_option(text: str, option: str) -> int:
    """An amount in currency units (`12.5`, at most 6 decimals) as exact micros, or a usage error naming
    `option`."""
    try:
        return money_to_micros(text)
    except SpecError as error:
        raise usage_error(f"{option}: {error}") from None


def month_argument(text: str | None) -> str | None:
    """A typer callback for a month argument: yyyy-mm in ASCII digits, checked before anything is sent (a `/`
    in it would change the URL's path)."""
    if text is not None and re.fullmatch(MONTH_PATTERN, text) is None:
        raise typer.BadParameter(f"{text!r} is not a month as yyyy-mm, e.g. 2026-12")
    return text


def error_text(message: str) -> Text:
    """`error: message` for the terminal, the message shown as it is: text from users, files or the server
    may hold Rich markup (`[red]`) or emoji codes (`:x:`), which must not be rendered."""
    return Text.assemble(("error:", "red"), " ", message)


@contextmanager
def valid_input(options: Mapping[str, str]) -> Iterator[None]:
    """A request built from options that its wire model refuses: one line per bad value, naming its option
    (`options`: field -> option; else the field), and exit 2, not a traceback."""
    try:
        yield
    except ValidationError as error:
        raise _refused_input(error, options) from None


def _refused_input(error: ValidationError, options: Mapping[str, str]) -> typer.Exit:
    """Print one line per bad value of a request model, naming its option; the exit (2) to raise."""
    for problem in error.errors():
        field = str(problem["loc"][0]) if problem["loc"] else "input"
        errors.print(error_text(f"{options.get(field, field)}: {problem_text(problem, money_in_units=True)}"))
    return typer.Exit(EXIT_USAGE)


@contextmanager
def logged_in(options: Mapping[str, str] | None = None) -> Iterator[Client]:
    """A client for the saved profile; maps SDK errors to messages and exit codes (`options`: wire field ->
    the option that sets it, named in a refusal instead of the field)."""
    saved = profile.load()
    if saved is None:
        errors.print(error_text("not logged in; run `suanli login URL --key KEY` first"))
        raise typer.Exit(EXIT_NOT_LOGGED_IN)
    if (problem := url_problem(saved.url)) is not None:
        source = "SUANLI_URL" if os.environ.get("SUANLI_URL") else f"the URL in {profile.profile_path()}"
        errors.print(error_text(f"{source}: {saved.url!r} {problem}"))
        raise typer.Exit(EXIT_USAGE)
    with api_errors(options), server_client(saved.url, saved.key) as client:
        yield client


def server_client(url: str, key: str) -> Client:
    """A client whose every call, its retries included, waits `SUANLI_TIMEOUT_S` at most for the server."""
    timeout_s = request_timeout_s()
    return Client(url, key, timeout_s=timeout_s, call_timeout_s=timeout_s)


def request_timeout_s() -> float:
    """`SUANLI_TIMEOUT_S`: how long each call waits for the server, its retries included (default the SDK's
    30 s), so a command on a server that never answers gives up then; a value that is not a positive number
    exits 2."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        return TIMEOUT_SECONDS.validate_python(text)
    except ValidationError as error:
        problem = problem_text(error.errors()[0])
        errors.print(
            error_text(f"{TIMEOUT_VARIABLE}: {text!r} is not a number of seconds above 0 ({problem})")
        )
        raise typer.Exit(EXIT_USAGE) from None


@contextmanager
def api_errors(options: Mapping[str, str] | None = None) -> Iterator[None]:
    try:
        yield
    except ValidationError as error:  # a request built from options its model refuses
        raise _refused_input(error, options or {}) from None
    except InvalidArgument as error:  # ... that the SDK built: refused before anything was sent
        raise _refused_input(error.validation, options or {}) from None
    except ApiError as error:
        option = (options or {}).get(error.field or "")
        where = f" (field {error.field})" if error.field and not option else ""
        text = f"{error.message}{where} [{error.status} {error.code}]"
        if _server_failed(error):
            text = f"the server failed: {text}; its log says why"
        errors.print(error_text(f"{option}: {text}" if option else text))
        raise typer.Exit(EXIT_SERVER_ERROR if error.status >= 500 else EXIT_REFUSED) from None
    except ServerUnreachable as error:
        hint = f"; {TIMEOUT_VARIABLE} sets how long a command waits" if error.waited_s is not None else ""
        errors.print(error_text(f"cannot reach the server: {error}{hint}"))
        raise typer.Exit(EXIT_UNREACHABLE) from None


def _server_failed(error: ApiError) -> bool:
    """Whether a suanli server failed the request (a 5xx it wrote, or one from a server that answered as
    suanli before); not an answer this client could not read, nor a reply that may be another service's."""
    return error.status >= 500 and error.code not in (BAD_RESPONSE, NOT_OURS)


def emit(
    value: BaseModel | Sequence[BaseModel], as_json: bool, render: Callable[[Any], RenderableType]
) -> None:
    """Print `value` as JSON (for scripts) or rendered for people."""
    if as_json:
        data = (
            [v.model_dump(mode="json") for v in value]
            if isinstance(value, list)
            else value.model_dump(mode="json")
        )
        typer.echo(json.dumps(data, indent=2))
    else:
        console.print(render(value))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    """A table of `rows`, each cell shown as it is (commands, messages and names are not Rich markup) and
    whole: in a narrow terminal a long cell wraps, so an id is never cut to `rnt_0814…`."""
    result = Table(title=title)
    for column in columns:
        result.add_column(column, overflow="fold")
    for row in rows:
        result.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
    return result


def age_text(seconds: float) -> str:
    """How long ago, as `kubectl get` shows it: 42s, 7m, 3h5m (under 10 h), 15h, 4d."""
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 10 * 3600:
        hours, minutes = divmod(whole // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if whole < 2 * 86400:
        return f"{whole // 3600}h"
    return f"{whole // 86400}d"


def micros(amount: int | None) -> str:
    return "" if amount is None else f"{amount / 1_000_000:,.4f}"
