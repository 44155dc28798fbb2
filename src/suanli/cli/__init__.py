"""The `suanli` command line: Typer commands over the simulator (and, later, the SDK)."""
