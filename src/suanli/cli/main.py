"""`suanli` command: entry point and command groups."""

from __future__ import annotations

import typer

from suanli.cli.sim_commands import sim_app

app = typer.Typer(help="suanli: a GPU compute rental platform.", no_args_is_help=True)
app.add_typer(sim_app, name="sim")


if __name__ == "__main__":
    app()
