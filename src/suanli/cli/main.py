"""`suanli` command: entry point and command groups."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer

from suanli.cli import (
    agent_commands,
    billing_commands,
    contract_commands,
    exec_commands,
    gpu_commands,
    key_commands,
    plan_commands,
    webhook_commands,
)
from suanli.cli import platform_commands as platform
from suanli.cli.admin_commands import admin_app
from suanli.cli.fleet_commands import fleet_app
from suanli.cli.maintenance_commands import maintenance_app
from suanli.cli.sim_commands import sim_app

ENVIRONMENT_HELP = (
    "Environment: SUANLI_URL and SUANLI_API_KEY override the saved login for one command; SUANLI_CONFIG_DIR "
    "is where login saves it; SUANLI_TIMEOUT_S (default 30) is how many seconds a command waits for each "
    "answer from the server, its retries included, before it exits 4 (cannot reach the server)."
)
app = typer.Typer(
    help="suanli: a GPU compute rental platform.", epilog=ENVIRONMENT_HELP, no_args_is_help=True
)


def _print_version(shown: bool) -> None:
    if shown:
        typer.echo(f"suanli {version('suanli')}")
        raise typer.Exit


@app.callback()
def main(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """suanli: a GPU compute rental platform."""


app.add_typer(sim_app, name="sim")
app.add_typer(fleet_app, name="fleet")
app.add_typer(contract_commands.contracts_app, name="contracts")
app.add_typer(admin_app, name="admin")
app.add_typer(key_commands.keys_app, name="keys")
app.add_typer(webhook_commands.webhooks_app, name="webhooks")
app.add_typer(billing_commands.ledger_app, name="ledger")
# "-5" is the amount (refused as such), not an unknown option
admin_app.command("credit", context_settings={"ignore_unknown_options": True})(billing_commands.admin_credit)
admin_app.command("sla")(billing_commands.admin_sla)
admin_app.add_typer(billing_commands.admin_prices_app, name="prices")
admin_app.command("plan")(plan_commands.admin_plan)
admin_app.command("terms")(plan_commands.admin_terms)
admin_app.command("limits")(plan_commands.admin_limits)
admin_app.add_typer(maintenance_app, name="maintenance")
for command in (
    platform.server,
    platform.login,
    platform.offers,
    platform.rent,
    platform.rerun,
    platform.ls,
    platform.show,
    platform.stop,
    platform.resize,
    platform.bid,
    billing_commands.prices,
    billing_commands.balance,
    billing_commands.payouts,
    billing_commands.invoice,
    billing_commands.sla,
    plan_commands.plans,
    plan_commands.grants,
    plan_commands.terms,
    plan_commands.limits,
    plan_commands.budget,
    agent_commands.logs,
    agent_commands.agent,
    agent_commands.demo,
):
    app.command()(command)
app.command("exec", cls=exec_commands.ExecCommand)(exec_commands.exec_command)
app.command("port-forward")(exec_commands.port_forward_command)
app.command("cp")(exec_commands.copy_command)
app.command("execs")(exec_commands.execs_command)
app.command("gpus")(gpu_commands.gpus)
app.command("report-revenue", context_settings={"ignore_unknown_options": True})(plan_commands.report_revenue)


if __name__ == "__main__":
    app()
