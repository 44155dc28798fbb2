"""`suanli sim queue` and `sim itp-check`: load a fleet and a workload, replay them under each policy, print
the tables (`queue_tables.py`), write JSON and charts (`queue_outputs.py`); the replay is `sim/queue.py`."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from suanli.domain.catalog_data import CATALOG
from suanli.domain.contracts import Contract
from suanli.domain.errors import SuanliError
from suanli.domain.inventory import Fleet, GpuMode
from suanli.domain.request import Request, Tier
from suanli.domain.scheduler import fit_signature, never_fits
from suanli.domain.snapshot import Snapshot
from suanli.sim.contract_sale import parse_contract, sell_contract
from suanli.sim.fleet_files import read_fleet
from suanli.sim.itp import DurationEstimate, read_itp_jobs, synthetic_fleet
from suanli.sim.itp_check import (
    CANDIDATE,
    ClusterCheck,
    check_candidate,
    check_cluster,
    check_parts,
    cluster_paths,
)
from suanli.sim.queue import (
    DEFAULT_ESTIMATE,
    POLICIES,
    RESTART_S,
    build_requests,
    parse_mix,
    pod_requests,
    run_requests,
)
from suanli.sim.queue_outputs import check_outputs, json_text, write_json, write_plots
from suanli.sim.queue_result import QueueResult
from suanli.sim.queue_tables import (
    idle_table,
    itp_verdict_table,
    perturbed_table,
    print_trims,
    results_table,
    tenants_table,
    tiers_table,
)
from suanli.sim.tenant_mix import deal_to_tenants, parse_tenants
from suanli.sim.traces import read_openb_nodes, read_openb_pods

MAX_NODES = 100_000  # `N:M` fleets: more is no GPU cloud, and would take the machine's memory
MAX_GPUS_PER_NODE = 64
DAY_S = 86_400.0


def check_seconds(option: str, seconds: float) -> None:
    """Refuse, naming `option`, a number of seconds that is negative, not finite, or over a day."""
    if not 0 <= seconds <= DAY_S:  # NaN too
        raise ValueError(f"{option} {seconds}: from 0 to {DAY_S:g} seconds (a day)")


def load_fleet(nodes: str) -> Fleet:
    """`N:M` (N nodes of M whole GPUs; `N:M:shared`: GPUs that also take shares of one, as the Alibaba pods
    ask), a fleet TOML, or the openb node CSV."""
    if ":" in nodes and not Path(nodes).exists():
        count, per_node, *mode = nodes.split(":")
        if not (count.isdigit() and per_node.isdigit() and int(count) > 0 and int(per_node) > 0):
            raise ValueError(f"--nodes {nodes!r}: N:M needs two positive integers, e.g. 73:8")
        if int(count) > MAX_NODES or int(per_node) > MAX_GPUS_PER_NODE:
            raise ValueError(
                f"--nodes {nodes!r}: at most {MAX_NODES:,} nodes of at most {MAX_GPUS_PER_NODE} GPUs"
            )
        if mode not in ([], ["whole"], ["shared"]):
            raise ValueError(f"--nodes {nodes!r}: after N:M, only :whole or :shared (GPUs shared by pods)")
        gpu_mode = GpuMode.SHARED if mode == ["shared"] else GpuMode.WHOLE
        return synthetic_fleet(int(count), int(per_node), gpu_mode)
    path = Path(nodes)
    if not path.is_file():
        raise ValueError(
            f"--nodes {nodes}: not N:M (e.g. 73:8), and no fleet TOML or node CSV there"
            + (" (a directory)" if path.is_dir() else "")
        )
    try:
        if path.suffix == ".toml":
            return read_fleet(path)
        return read_openb_nodes(path)
    except UnicodeDecodeError:
        raise ValueError(f"--nodes {nodes}: not a text (UTF-8) file") from None
    except SuanliError as error:
        raise ValueError(f"--nodes (a fleet TOML, the trace's node CSV, or N:M): {error}") from None


def load_workload(
    path: Path, fleet: Fleet, estimate: DurationEstimate, mix: dict[Tier, float], seed: int
) -> tuple[list[Request], list[float], str]:
    """(requests, true durations, kind) from an ITP job CSV or an openb pod CSV, told apart by the header."""
    with path.open(newline="") as handle:
        header = set(next(csv.reader(handle), []))
    if header & {"creation_time", "deletion_time", "scheduled_time", "gpu_milli"}:  # ITP's has none of them
        pods = read_openb_pods(path, timed=True)
        requests, true_s = pod_requests(pods, estimate, mix, seed)
        never_scheduled = sum(1 for pod in pods if pod.scheduled_s is None)
        kind = "openb pods" + (f" ({never_scheduled} never scheduled left out)" if never_scheduled else "")
        return requests, true_s, kind
    trace = read_itp_jobs(path)
    gpus_per_node = max(node.gpu_count for node in fleet.nodes)
    requests = build_requests(trace, gpus_per_node, estimate, mix, seed)
    return requests, [max(j.duration_s, 1.0) for j in trace], "ITP jobs"


def days_bar(
    progress: Progress, description: str, total_days: float, start_s: float = 0.0
) -> Callable[[float], None]:
    """A bar of virtual days for one replay, and the callback that moves it to a virtual time: its total is
    the last arrival plus its run time, and grows with a replay whose queue runs past that (it showed 100%
    for the rest of such a replay)."""
    task = progress.add_task(description, total=total_days)

    def advance(now_s: float) -> None:
        done = (now_s - start_s) / 86400  # the virtual clock only moves on: so does the total
        progress.update(task, completed=done, total=max(total_days, done))

    return advance


def requests_load(requests: Sequence[Request], true_s: Sequence[float], capacity_gpus: int) -> float:
    """sum(true duration x GPUs) / (arrival span x capacity), as `offered_load` for ITP jobs."""
    if not requests or capacity_gpus <= 0:
        return 0.0
    arrivals = [r.submitted_at_s for r in requests]
    work = sum(d * r.gpus_per_node * r.node_count for r, d in zip(requests, true_s, strict=True))
    return work / (max(max(arrivals) - min(arrivals), 1.0) * capacity_gpus)


def queue_command(
    nodes: str,
    jobs: Path,
    policies: list[str],
    mix: str | None,
    json_path: Path | None,
    plot_dir: Path | None,
    console,
    estimate: DurationEstimate = DEFAULT_ESTIMATE,
    seed: int = 0,
    checkpoint: bool = False,
    elastic: float | None = None,
    resize_restart_s: float = 0.0,
    contract: str | None = None,
    tenants: str | None = None,
) -> list[QueueResult]:
    """`suanli sim queue`: replay `jobs` under each policy, print a table, write JSON and plots if asked."""
    if not policies:
        raise ValueError("--policy: name at least one policy, or all")
    if "all" in policies and policies != ["all"]:
        raise ValueError("--policy: all names every policy; give it alone, or name the policies")
    names = list(POLICIES) if policies == ["all"] else list(dict.fromkeys(policies))  # each replayed once
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ValueError(f"--policy: unknown {', '.join(unknown)}; use {', '.join(POLICIES)} or all")
    check_seconds("--resize-restart-s", resize_restart_s)
    if resize_restart_s and elastic is None:
        raise ValueError("--resize-restart-s: only elastic jobs (--elastic) are resized")
    check_outputs(jobs, json_path, plot_dir)
    fleet = load_fleet(nodes)
    tier_mix = parse_mix(mix)
    sale = None if contract is None else parse_contract(contract, fleet)
    weights = None if tenants is None else parse_tenants(tenants)
    if weights and sale is not None:
        raise ValueError("--tenants: not with --contract, whose holder is a tenant of its own")
    if sale is not None and not tier_mix.get(Tier.RESERVED):
        raise ValueError(
            "--contract: the tier mix draws no reserved jobs for the holder (add reserved=SHARE)"
        )
    try:
        requests, true_s, kind = load_workload(jobs, fleet, estimate, tier_mix, seed)
    except UnicodeDecodeError:
        raise ValueError(f"--jobs {jobs}: not a text (UTF-8) CSV file") from None
    except SuanliError as error:
        raise ValueError(f"--jobs: {error}") from None
    if not requests:
        raise ValueError(f"--jobs {jobs}: the trace holds no jobs")
    never = never_fit(fleet, requests)
    if len(never) == len(requests):
        raise ValueError(
            f"--nodes {nodes}: no job of the trace fits this fleet (e.g. {next(iter(never.values()))})"
        )
    # left out of the replay, not only of the figures: waiting forever, they would fill the queue's chart
    total = len(requests)
    true_s = [d for r, d in zip(requests, true_s, strict=True) if r.id not in never]
    requests = [r for r in requests if r.id not in never]
    load = requests_load(requests, true_s, fleet.gpu_count)
    console.print(
        f"{total} {kind} on {len(fleet.nodes)} nodes / {fleet.gpu_count} GPUs: "
        f"offered load {100 * load:.1f}%; {estimate.describe()}" + _elastic_text(elastic, resize_restart_s)
    )
    if weights:
        requests = deal_to_tenants(requests, list(weights), seed)
        console.print(
            f"jobs dealt evenly to tenants {', '.join(f'{t} (weight {w:g})' for t, w in weights.items())}"
        )
    contracts: list[Contract] = []
    if sale is not None:
        requests, sold = sell_contract(requests, *sale)
        contracts.append(sold)
        holder_jobs = sum(1 for r in requests if r.tenant == sold.tenant)
        console.print(
            f"contract: {sold.gpus} x {sold.model} in {sold.region} held from the first arrival for one "
            f"tenant's {holder_jobs} jobs (the mix's reserved ones), reserved up to that count"
        )
    if never:
        example = next(iter(never.values()))
        console.print(
            f"[yellow]{len(never)} of {total} jobs can never fit this fleet and are left out of the "
            f"replay, every figure and the offered load[/] (e.g. {escape(example)})"
        )
    start = min((r.submitted_at_s for r in requests), default=0.0)
    end = max((r.submitted_at_s + d for r, d in zip(requests, true_s, strict=True)), default=1.0)
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("day {task.completed:.0f}"))
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as progress:
        for name in names:
            advance = days_bar(progress, name, (end - start) / 86400, start)
            results.append(
                run_requests(
                    fleet,
                    requests,
                    true_s,
                    name,
                    estimate=estimate,
                    on_progress=advance,
                    checkpoint=checkpoint,
                    elastic=elastic,
                    resize_restart_s=resize_restart_s,
                    contracts=contracts,
                    weights=weights,
                )
            )
    console.print(results_table(f"queueing replay: {jobs.name} on {fleet.gpu_count} GPUs", results))
    console.print(idle_table(results))
    if len(tier_mix) > 1 or contracts:  # (one tier and no holder: the table above says it all)
        console.print(tiers_table(results))
    if weights:
        console.print(tenants_table(results))
    console.print("replay speed (jobs/s): " + ", ".join(f"{r.policy} {r.jobs_per_s:,.0f}" for r in results))
    print_trims(console, results)
    legend = (
        "owed GPU-h: work still to run at the last arrival; idle %: GPUs free while jobs waited (first to "
        "last arrival); held %: of those, on nodes drained for the blocked head; scat %: elsewhere, on "
        "nodes where no waiting job fits what is free"
    )
    if any(r.preemptions for r in results):
        legend += "; lost %: allocated GPU-time that preemption threw away"
        legend += " (the job resumes)" if checkpoint else " (the job reruns)"
    console.print(legend)
    notes = {
        "nodes": len(fleet.nodes),
        "offered_load_pct": round(100 * load, 2),
        "declared_durations": estimate.describe(),
        "tier_mix": {t.label: round(p, 6) for t, p in tier_mix.items()},
        "never_fit_jobs": len(never),
        "mean_alloc_window": "first to last arrival",
        "owed_gpu_h": "GPU-hours still to run at the last arrival: total work less what the window allocated",
        "idle_waiting": "free GPUs while requests wait; idle_held: on the blocked head's reserved nodes; "
        "idle_scattered: elsewhere, on nodes where none of the waiting requests fits what is free",
        "workload": kind,
        "preempted_jobs": "save at the notice deadline and resume" if checkpoint else "run again in full",
        "elastic_jobs": _elastic_text(elastic, resize_restart_s).removeprefix("; ")
        or "none: every job starts whole",
        "contract": [
            {"model": c.model, "region": c.region, "gpus": c.gpus, "held_for": "the mix's reserved jobs"}
            for c in contracts
        ],
    }
    if json_path is not None:
        try:
            write_json(json_path, results, notes)
        except OSError as error:
            raise ValueError(f"--json {json_path}: cannot write it ({error.strerror})") from None
    if plot_dir is not None:
        try:
            written = write_plots(plot_dir, results, f"{jobs.name} on {nodes} ({fleet.gpu_count} GPUs)")
        except OSError as error:
            raise ValueError(f"--plot {plot_dir}: cannot write the charts ({error.strerror})") from None
        for path in written:
            console.print(f"wrote {path}")
    return results


def never_fit(fleet: Fleet, requests: Sequence[Request]) -> dict[str, str]:
    """The requests no placement on `fleet` could ever take, even empty (id -> why): the replay leaves
    them waiting, so the figures are over the others, and the caller says so."""
    snapshot = Snapshot(fleet, CATALOG)
    why: dict[tuple, str | None] = {}
    never: dict[str, str] = {}
    for request in requests:
        key = (fit_signature(request), request.node_count)  # all that decides whether it can ever fit
        if key not in why:
            refused = never_fits(snapshot, request)
            why[key] = None if refused is None else refused.message
        if why[key] is not None:
            never[request.id] = why[key]
    return never


def itp_check_command(
    traces: Path,
    clusters: Sequence[str],
    json_path: Path | None,
    console,
    perturb_runs: int = 0,
    max_shift_s: float = 60.0,
    estimate: DurationEstimate = DEFAULT_ESTIMATE,
    split_parts: int = 0,
    checkpoint: bool = False,
    candidate: str = CANDIDATE,
    elastic: float | None = None,
    resize_restart_s: float = 0.0,
) -> list[ClusterCheck]:
    """`suanli sim itp-check`: each ITP cluster at its capacity under every policy, and the bar's verdict
    for `candidate` (`suanli`, or a variant measured the same way);
    with `perturb_runs`, how far the figures move when arrivals move by up to `max_shift_s`; with
    `split_parts`, each cluster's jobs also split into that many clusters of the same kind, each checked."""
    if split_parts and split_parts < 2:
        raise ValueError(f"--split {split_parts}: a trace splits into 2 parts or more (0: no split)")
    check_seconds("--shift-s", max_shift_s)
    check_seconds("--resize-restart-s", resize_restart_s)
    check_candidate(candidate)
    paths = cluster_paths(traces, clusters)
    check_outputs(None, json_path, None)  # before minutes of replays
    console.print(
        estimate.describe()
        + ("; jobs checkpoint" if checkpoint else "")
        + _elastic_text(elastic, resize_restart_s)
    )
    checks = []
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("day {task.completed:.0f}"))
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as progress:
        for path in paths:

            def on_policy(name: str, end_s: float, path: Path = path) -> Callable[[float], None]:
                return days_bar(progress, f"{path.stem} {name}", end_s / 86400)

            check = check_cluster(
                path,
                on_policy=on_policy,
                perturb_runs=perturb_runs,
                max_shift_s=max_shift_s,
                estimate=estimate,
                checkpoint=checkpoint,
                candidate=candidate,
                elastic=elastic,
                resize_restart_s=resize_restart_s,
            )
            checks.append(check)
            _print_check(console, check)
            if split_parts:
                parts = check_parts(
                    path,
                    split_parts,
                    on_policy=on_policy,
                    estimate=estimate,
                    checkpoint=checkpoint,
                    candidate=candidate,
                    elastic=elastic,
                    resize_restart_s=resize_restart_s,
                )
                checks.extend(parts)
                for part in parts:
                    _print_check(console, part)
    console.print(itp_verdict_table(checks))
    if json_path is not None:
        report = {
            "candidate": candidate,
            "bar": f"{candidate}: mean and p95 JCT below every baseline's, mean_alloc_pct (to 0.01) no lower",
            "capacity_rule": "8-GPU nodes at the offered load nearest 85%; 4-GPU nodes if none is in 80-90%; "
            "never fewer nodes than the widest job needs",
            "declared_durations": estimate.describe(),
            "checkpointing_jobs": "every job saves on notice and resumes, each restart wasting "
            f"{RESTART_S:.0f} s; the bar counts useful_alloc_pct"
            if checkpoint
            else "none: a preempted job reruns in full",
            "elastic_jobs": _elastic_text(elastic, resize_restart_s).removeprefix("; ")
            or "none: every job starts whole",
            "mean_alloc_window": "first to last arrival",
            "perturbed": "arrivals moved by a seeded uniform shift; each figure: mean, lowest, highest",
            "parts": "a cluster's jobs dealt into disjoint parts by a hash of job ids, each at its capacity",
            "clusters": {c.name: c.summary() for c in checks},
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json_text(report), encoding="utf-8")
        console.print(f"wrote {json_path}")
    return checks


def _print_check(console, check: ClusterCheck) -> None:
    title = (
        f"{check.name}: {check.jobs} jobs on {check.capacity.label} "
        f"({check.capacity.gpus} GPUs, "
        f"offered load {100 * check.capacity.offered_load:.1f}%)"
    )
    console.print(results_table(title, check.results, useful=True))
    console.print(f"{check.candidate}: bar {check.verdict}")
    if check.perturbed is not None:
        console.print(perturbed_table(check.perturbed, check.candidate))


def _elastic_text(elastic: float | None, resize_restart_s: float = 0.0) -> str:
    """How elastic the replay's jobs are, for the header and the JSON notes ("" when none is)."""
    if elastic is None:
        return ""
    restarts = f"restarting for {resize_restart_s:.0f} s" if resize_restart_s > 0 else "free"
    return (
        f"; jobs of 2+ GPUs elastic: may start on {100 * elastic:.0f}% of their GPUs, grow toward their "
        f"size, and run at the share they hold of their speed, each resize {restarts}"
    )
