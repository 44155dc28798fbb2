"""`suanli sim ...`: replay cluster traces through the scheduler and print what it measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from suanli.cli.output import error_text
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import SuanliError
from suanli.domain.fragmentation import typical_mix
from suanli.domain.policies import POLICY_NAMES, build_policy
from suanli.sim.itp import parse_estimate
from suanli.sim.packing import ARRIVED_LEVELS, PolicySummary, inflate, parse_seeds, run_packing, summarize
from suanli.sim.queue_outputs import check_outputs
from suanli.sim.queue_report import itp_check_command, queue_command
from suanli.sim.traces import read_openb_nodes, read_openb_pods

sim_app = typer.Typer(help="Simulators that replay real traces through the scheduler.", no_args_is_help=True)
console = Console()
# how replayed jobs declare durations (`suanli.sim.itp.parse_estimate`): `sim queue` and `sim itp-check`
EstimateOption = Annotated[
    str,
    typer.Option(
        help="How jobs declare durations: pow2h (the true one rounded up to a power of two hours), "
        "factor[:MAX] (true x U[1, MAX], seeded; MAX 3 by default) or exact (an oracle)."
    ),
]


def parse_policies(text: str) -> list[str]:
    names = list(POLICY_NAMES) if text.strip() == "all" else [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown or not names:
        raise typer.BadParameter(
            f"unknown policy {', '.join(unknown) or text!r}; use {', '.join(POLICY_NAMES)} or all"
        )
    return names


@sim_app.command("packing")
def packing(
    nodes: Annotated[Path, typer.Option(help="Node CSV of the Alibaba 2023 trace (sn,cpu_milli,...).")],
    pods: Annotated[Path, typer.Option(help="Pod CSV of the Alibaba 2023 trace.")],
    policy: Annotated[str, typer.Option(help="Comma-separated policy names, or all.")] = "all",
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51 or 42,43.")] = "42-51",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
) -> None:
    """Run the FGD packing protocol: inflate to 130%, shuffle, place online, no retries, no departures."""
    policies = parse_policies(policy)
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--seeds") from None
    try:
        check_outputs(None, json_path, None)  # before runs that may take minutes, not after them
    except ValueError as error:
        console.print(error_text(str(error)))
        raise typer.Exit(2) from None
    try:
        fleet = read_openb_nodes(nodes)
        workload = [pod.request for pod in read_openb_pods(pods, with_memory=True)]
    except SuanliError as error:
        console.print(error_text(str(error)))
        raise typer.Exit(2) from None
    if not workload:
        console.print(error_text(f"{pods}: no pods"))
        raise typer.Exit(2)
    summaries: list[PolicySummary] = []
    per_run = len(inflate(workload, fleet.gpu_count, seed_list[0]))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        for name in policies:
            task = progress.add_task(f"{name:>8}", total=per_run * len(seed_list))
            runs = []
            for seed in seed_list:
                chosen = build_policy(name, seed=seed, history=workload)
                runs.append(
                    run_packing(
                        fleet,
                        CATALOG,
                        workload,
                        chosen,
                        seed,
                        typical_mix(workload),
                        on_progress=lambda n, t=task: progress.advance(t, n),
                    )
                )
            summaries.append(summarize(name, runs))
    console.print(packing_table(summaries, fleet.gpu_count, seed_list))
    if json_path is not None:
        report = {
            "protocol": "FGD (Weng et al., ATC'23): inflate to 130%, shuffle, online, no retry or departure",
            "nodes": str(nodes),
            "pods": str(pods),
            "capacity_gpus": fleet.gpu_count,
            "seeds": seed_list,
            "policies": {s.policy: s.as_json() for s in summaries},
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"wrote {json_path}")


def packing_table(summaries: list[PolicySummary], capacity_gpus: int, seeds: list[int]) -> Table:
    table = Table(title=f"Unallocated GPU % by arrived % ({capacity_gpus} GPUs, mean of {len(seeds)} seeds)")
    table.add_column("policy")
    for level in ARRIVED_LEVELS:
        table.add_column(f"{level}%", justify="right")
    table.add_column("frag % @90", justify="right")
    table.add_column("placements/s", justify="right")
    for s in summaries:
        table.add_row(
            s.policy,
            *(f"{s.unallocated_pct[level]:.2f}" for level in ARRIVED_LEVELS),
            f"{s.frag_pct_90:.2f}",
            f"{s.placements_per_s:,.0f}",
        )
    return table


# `sim queue --elastic` and `sim itp-check --elastic`: the share of its GPUs an elastic job may start on
ElasticOption = Annotated[
    float | None,
    typer.Option(
        min=0.01,
        max=1.0,
        help="Jobs of 2+ GPUs are elastic: each may start on this share of its GPUs (fewer on its node, "
        "or fewer nodes of a gang), grows toward its size, and runs at the share it holds of its speed. "
        "A model (the traces' jobs are rigid); policies with elastic starts (suanli) use it.",
    ),
]
# `--resize-restart-s`: what each resize of an elastic job costs it (the server restarts its workload)
ResizeRestartOption = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="With --elastic: each resize (a growth, or a trim) restarts the job on its new GPUs, which make "
        "no progress for this many seconds (counted as lost work). 0: resizes are free.",
    ),
]


@sim_app.command("queue")
def queue(
    nodes: Annotated[
        str,
        typer.Option(
            help="Fleet: a fleet TOML, the trace node CSV, or N:M (N nodes of M GPUs; with :shared after it, "
            "GPUs that also take shares of one, as most Alibaba pods ask)."
        ),
    ],
    jobs: Annotated[
        Path,
        typer.Option(
            help="Job trace CSV: Microsoft ITP jobs (job_id,submission_time,...) or Alibaba 2023 pods "
            "(creation_time,deletion_time,...), told apart by the header."
        ),
    ],
    policy: Annotated[
        str,
        typer.Option(
            help="Comma-separated of fifo, fifo-easy, fifo-backfill, suanli, suanli-wide-first (a variant), "
            "greedy, conservative (the server's other queues), or all."
        ),
    ] = "all",
    mix: Annotated[
        str | None,
        typer.Option(
            help="Seeded tier mix, e.g. on_demand=0.6,spot=0.3,reserved=0.1 (shares, scaled to add up to 1)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for the tier mix and bids.")] = 0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write PNG charts into this directory.")] = None,
    checkpoint: Annotated[
        bool,
        typer.Option(
            help="Jobs checkpoint: a preempted one saves at its notice deadline and resumes (each restart "
            "wastes 300 s), and the queue may lend them idle GPUs (default: a preempted job runs again)."
        ),
    ] = False,
    elastic: ElasticOption = None,
    resize_restart_s: ResizeRestartOption = 0.0,
    estimate: EstimateOption = "pow2h",
    contract: Annotated[
        str | None,
        typer.Option(
            help="Sell GPUS (or MODEL@REGION=GPUS) of the fleet ahead as a compute future to the tenant of "
            "the mix's reserved jobs: they ask on-demand and are promoted to reserved up to that count, "
            "on-demand keeps off the held capacity, spot that borrows it is preempted (the `contract` row; "
            "under the FIFO baselines, which order by arrival alone, only the hold applies).",
        ),
    ] = None,
    tenants: Annotated[
        str | None,
        typer.Option(
            help="NAME=WEIGHT,... : deal the jobs evenly (seeded) to these tenants with these fair-share "
            "weights (0.001 to 1000); the `by tenant` table shows each one's share of the GPU-time.",
        ),
    ] = None,
) -> None:
    """Replay a job trace with arrivals and departures in virtual time through the scheduler."""
    names = [p.strip() for p in policy.split(",") if p.strip()]
    try:
        queue_command(
            nodes,
            jobs,
            names,
            mix,
            json_path,
            plot,
            console,
            estimate=parse_estimate(estimate, seed),
            seed=seed,
            checkpoint=checkpoint,
            elastic=elastic,
            resize_restart_s=resize_restart_s,
            contract=contract,
            tenants=tenants,
        )
    except (ValueError, SuanliError, OSError) as error:
        console.print(error_text(str(error)))
        raise typer.Exit(2) from None


@sim_app.command("itp-check")
def itp_check(
    traces: Annotated[Path, typer.Option(help="Directory of the ITP traces (cluster01.csv ...).")] = Path(
        "../shared/traces/microsoft-itp-elasticflow"
    ),
    cluster: Annotated[
        list[str] | None, typer.Option(help="Only this cluster (02 or cluster02); repeat for more.")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
    strict: Annotated[bool, typer.Option(help="Exit 1 when suanli misses the bar on any cluster.")] = False,
    perturb: Annotated[
        int, typer.Option(min=0, help="Also replay this many times with arrivals moved (seeded): the spread.")
    ] = 0,
    shift_s: Annotated[
        float | None,
        typer.Option(help="With --perturb: the most an arrival moves, in seconds (default 60)."),
    ] = None,
    estimate: EstimateOption = "pow2h",
    split: Annotated[
        int,
        typer.Option(
            min=0,
            help="Also deal each cluster's jobs into this many disjoint parts (by job id) and check each "
            "at its own capacity: clusters of the same kind. 0: no split.",
        ),
    ] = 0,
    checkpoint: Annotated[
        bool,
        typer.Option(
            help="Every job checkpoints: saves on notice and resumes (each restart wastes 300 s), so the "
            "queue may lend it idle GPUs and take them back."
        ),
    ] = False,
    candidate: Annotated[
        str,
        typer.Option(
            help="The policy checked against the baselines: suanli, or a variant measured the same way "
            "(suanli-wide-first, greedy, conservative)."
        ),
    ] = "suanli",
    elastic: ElasticOption = None,
    resize_restart_s: ResizeRestartOption = 0.0,
) -> None:
    """Replay every ITP cluster at about 85% offered load under every policy; check suanli against each."""
    if shift_s is not None and not perturb:
        console.print(error_text("--shift-s: only with --perturb (it moves the perturbed runs' arrivals)"))
        raise typer.Exit(2)
    try:
        checks = itp_check_command(
            traces,
            cluster or [],
            json_path,
            console,
            perturb,
            60.0 if shift_s is None else shift_s,
            parse_estimate(estimate),
            split,
            checkpoint,
            candidate,
            elastic,
            resize_restart_s,
        )
    except (ValueError, SuanliError, OSError) as error:
        console.print(error_text(str(error)))
        raise typer.Exit(2) from None
    if strict and not all(c.met for c in checks):
        raise typer.Exit(1)
