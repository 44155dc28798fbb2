"""What the CLI prints comes out as the text it was given: a command, a message or a path holding Rich markup
(`[bold]`) or an emoji code (`:x:`) is shown as it is, not styled, replaced or dropped."""

from __future__ import annotations

from rich.console import Console

from suanli.cli.output import error_text, table

TRICKY = "python -c 'print([bold]x)' :x: [/]"


def _shown(renderable) -> str:
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


def test_table_cells_are_shown_as_they_are() -> None:
    shown = _shown(table("rentals", ["id", "command"], [["rnt_1", TRICKY], ["rnt_2", None]]))
    assert TRICKY in shown and "rnt_2" in shown


def test_error_messages_are_shown_as_they_are() -> None:
    assert _shown(error_text(f"--jobs {TRICKY}: not found")).strip() == f"error: --jobs {TRICKY}: not found"
