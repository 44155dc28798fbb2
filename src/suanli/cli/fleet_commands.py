"""`suanli fleet ...`: check a fleet file and show what it declares."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from suanli.cli.output import error_text
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import SuanliError
from suanli.sim.fleet_files import read_fleet

fleet_app = typer.Typer(help="Fleet files: regions, nodes and their GPUs.", no_args_is_help=True)
console = Console()


@fleet_app.command("check")
def check(path: Annotated[Path, typer.Argument(help="A fleet TOML file, e.g. examples/fleet.toml.")]) -> None:
    """Load a fleet file; print its regions and nodes, or the first mistake with file, node and field."""
    try:
        fleet = read_fleet(path, CATALOG)
    except SuanliError as error:
        console.print(error_text(str(error)))
        raise typer.Exit(2) from None
    regions = Table(title=f"{path}: {len(fleet.regions)} regions")
    for column in ("region", "jurisdiction", "gCO2/kWh", "PUE", "nodes", "GPUs"):
        regions.add_column(column)
    for name, region in fleet.regions.items():
        nodes = [n for n in fleet.nodes if n.region == name]
        regions.add_row(
            name,
            region.jurisdiction,
            f"{region.grid_gco2_per_kwh:g}",
            f"{region.pue:g}",
            str(len(nodes)),
            str(sum(n.gpu_count for n in nodes)),
        )
    console.print(regions)
    models = Table(title=f"{len(fleet.nodes)} nodes, {fleet.gpu_count} GPUs")
    for column in ("model", "mode", "nodes", "GPUs"):
        models.add_column(column)
    counts = Counter((n.gpu_model, n.gpu_mode.value) for n in fleet.nodes)
    for (model, mode), nodes in sorted(counts.items()):
        gpus = sum(n.gpu_count for n in fleet.nodes if (n.gpu_model, n.gpu_mode.value) == (model, mode))
        models.add_row(model, mode, str(nodes), str(gpus))
    console.print(models)
