"""`suanli fleet ...`: check a fleet file and show what it declares."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.console import Console, Group

from suanli.cli.output import emit, error_text, table
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import SuanliError
from suanli.domain.inventory import Fleet
from suanli.sim.fleet_files import read_fleet

fleet_app = typer.Typer(help="Fleet files: regions, nodes and their GPUs.", no_args_is_help=True)
console = Console()


class RegionSummary(BaseModel):
    name: str
    jurisdiction: str
    grid_gco2_per_kwh: float
    pue: float
    nodes: int
    gpus: int


class ModelSummary(BaseModel):
    model: str
    mode: str
    nodes: int
    gpus: int


class FleetSummary(BaseModel):
    """What a fleet file declares: its regions, and its nodes and GPUs by model and mode."""

    path: str
    nodes: int
    gpus: int
    regions: list[RegionSummary]
    models: list[ModelSummary]


@fleet_app.command("check")
def check(
    path: Annotated[Path, typer.Argument(help="A fleet TOML file, e.g. examples/fleet.toml.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")
    ] = False,
) -> None:
    """Load a fleet file; print its regions and nodes, or the first mistake with file, node and field."""
    try:
        fleet = read_fleet(path, CATALOG)
    except SuanliError as error:
        console.print(error_text(str(error)))
        raise typer.Exit(2) from None
    emit(summarize(path, fleet), as_json, _tables)


def summarize(path: Path, fleet: Fleet) -> FleetSummary:
    """The regions with their nodes and GPUs, and the nodes and GPUs of each model and mode."""
    regions = []
    for name, region in fleet.regions.items():
        nodes = [n for n in fleet.nodes if n.region == name]
        regions.append(
            RegionSummary(
                name=name,
                jurisdiction=region.jurisdiction,
                grid_gco2_per_kwh=region.grid_gco2_per_kwh,
                pue=region.pue,
                nodes=len(nodes),
                gpus=sum(n.gpu_count for n in nodes),
            )
        )
    by_kind: dict[tuple[str, str], list[int]] = defaultdict(list)
    for node in fleet.nodes:
        by_kind[(node.gpu_model, node.gpu_mode.value)].append(node.gpu_count)
    models = [
        ModelSummary(model=model, mode=mode, nodes=len(counts), gpus=sum(counts))
        for (model, mode), counts in sorted(by_kind.items())
    ]
    return FleetSummary(
        path=str(path), nodes=len(fleet.nodes), gpus=fleet.gpu_count, regions=regions, models=models
    )


def _tables(summary: FleetSummary) -> Group:
    """The regions table, then the models table."""
    regions = table(
        f"{summary.path}: {len(summary.regions)} regions",
        ("region", "jurisdiction", "gCO2/kWh", "PUE", "nodes", "GPUs"),
        [
            (r.name, r.jurisdiction, f"{r.grid_gco2_per_kwh:g}", f"{r.pue:g}", r.nodes, r.gpus)
            for r in summary.regions
        ],
    )
    models = table(
        f"{summary.nodes} nodes, {summary.gpus} GPUs",
        ("model", "mode", "nodes", "GPUs"),
        [(m.model, m.mode, m.nodes, m.gpus) for m in summary.models],
    )
    return Group(regions, models)
