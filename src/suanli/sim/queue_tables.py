"""The Rich tables `suanli sim queue` and `sim itp-check` print: each within 80 columns, a long policy name
folding rather than a figure."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from suanli.sim.itp_check import CANDIDATE, ClusterCheck, Perturbed
from suanli.sim.queue_result import QueueResult


def print_trims(console: Console, results: Sequence[QueueResult]) -> None:
    """How many elastic victims each policy trimmed rather than evicted, when any did."""
    if any(r.trims for r in results):
        trims = ", ".join(f"{r.policy} {r.trims:,}" for r in results)
        console.print(f"trimmed (elastic victims that gave back part of their GPUs and ran on): {trims}")


def results_table(title: str, results: Sequence[QueueResult], useful: bool = False) -> Table:
    """One row per policy, the headline figures, fitting 80 columns (a long policy name folds, never a
    figure); preemption columns only when some policy preempted. `useful`: the allocation the bar
    compares (`useful_alloc_pct`: what reruns and restarts threw away left out)."""
    preempting = any(r.preemptions for r in results)
    alloc = "useful\nalloc %" if useful else "alloc\n%"
    headers = ["mean\nJCT h", "p95\nJCT h", "mean\nqueue h", alloc, "owed\nGPU-h"]
    headers += ["pre-\nempted", "lost\n%"] if preempting else []
    table = _figures_table(title, headers)
    for r in results:
        cells = [
            f"{r.mean_jct_s / 3600:.2f}",
            f"{r.p95_jct_s / 3600:.2f}",
            f"{r.mean_queue_s / 3600:.2f}",
            f"{r.useful_alloc_pct if useful else r.mean_alloc_pct:.2f}",
            f"{r.owed_gpu_h:,.0f}",
        ]
        cells += [f"{r.preemptions:,}", f"{r.lost_work_pct:.1f}"] if preempting else []
        table.add_row(r.policy, *cells)
    return table


def idle_table(results: Sequence[QueueResult]) -> Table:
    """Where GPUs idled while jobs waited, per policy (the legend says what each column counts)."""
    table = _figures_table("GPUs idle while jobs waited", ["idle\n%", "held\n%", "scat\n%"])
    for r in results:
        cells = (r.idle_waiting_pct, r.idle_held_pct, r.idle_scattered_pct)
        table.add_row(r.policy, *(f"{c:.1f}" for c in cells))
    return table


def tiers_table(results: Sequence[QueueResult]) -> Table:
    """Per policy and price tier: jobs completed, JCT, queueing delay and victims preempted."""
    headers = ["tier", "jobs", "mean\nJCT h", "p95\nJCT h", "mean\nqueue h", "pre-\nempted"]
    table = _figures_table("by tier", headers)
    for r in results:
        for tier, figures in r.per_tier().items():
            table.add_row(
                r.policy,
                tier,
                f"{figures['jobs']:,}",
                f"{figures['mean_jct_s'] / 3600:.2f}",
                f"{figures['p95_jct_s'] / 3600:.2f}",
                f"{figures['mean_queue_s'] / 3600:.2f}",
                f"{figures['preemptions']:,}",
            )
    return table


def tenants_table(results: Sequence[QueueResult]) -> Table:
    """Per policy and tenant: its weight's share, its share of the GPU-time allocated (arrival window), jobs
    and mean queueing delay."""
    headers = ["tenant", "weight\n%", "GPU\n%", "jobs", "mean\nqueue h"]
    table = _figures_table("by tenant", headers)
    for r in results:
        for tenant, figures in r.per_tenant().items():
            table.add_row(
                r.policy,
                tenant,
                f"{figures['weight_share_pct']:.1f}",
                f"{figures['gpu_share_pct']:.1f}",
                f"{figures['jobs']:,}",
                f"{figures['mean_queue_s'] / 3600:.2f}",
            )
    return table


def _figures_table(title: str, headers: Sequence[str]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    table.add_column("policy", overflow="fold", min_width=6)
    for header in headers:
        table.add_column(header, justify="left" if header == "tier" else "right", no_wrap=True)
    return table


def perturbed_table(perturbed: Perturbed, candidate: str = CANDIDATE) -> Table:
    """Mean (lowest-highest) of each figure over the perturbed runs, and how often each shortfall held."""
    runs = f"{perturbed.runs} run" + ("s" if perturbed.runs != 1 else "")
    title = f"{runs} with arrivals moved by up to {perturbed.max_shift_s:g} s"
    misses = "; ".join(
        f"{metric} vs {baseline} missed in {n} of {perturbed.runs}"
        for (baseline, metric), n in perturbed.misses.items()
    )
    table = Table(
        title=title,
        caption=misses or f"{candidate} met the bar in every run",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    table.add_column("policy", no_wrap=True, min_width=13)
    for header in ("mean JCT h", "p95 JCT h", "useful alloc %"):
        table.add_column(header, justify="right", no_wrap=True)
    for name, spread in perturbed.spreads.items():
        cells = [f"{m:.2f} ({lo:.1f}-{hi:.1f})" for m, lo, hi in (spread.mean_jct_h, spread.p95_jct_h)]
        mean, low, high = spread.alloc_pct
        cells.append(f"{mean:.2f} ({low:.2f}-{high:.2f})")  # allocation bars are 0.01 apart
        table.add_row(name, *cells)
    return table


def itp_verdict_table(checks: Sequence[ClusterCheck]) -> Table:
    """One row per cluster: its capacity, the candidate's figures and the verdict."""
    met = sum(check.met for check in checks)
    candidate = checks[0].candidate if checks else CANDIDATE  # one command checks one candidate
    table = Table(
        title=f"{candidate} against every baseline",
        caption=f"bar met on {met} of {len(checks)}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for header in ("cluster", "nodes", "load %", "mean JCT h", "p95 JCT h", "useful alloc %", "verdict"):
        # a narrow terminal wraps the verdict whole rather than cut a baseline's name or figure
        table.add_column(
            header, justify="left" if header in ("cluster", "verdict") else "right", overflow="fold"
        )
    for check in checks:
        mine = check.candidate_result
        table.add_row(
            check.name,
            check.capacity.label,
            f"{100 * check.capacity.offered_load:.1f}",
            f"{mine.mean_jct_s / 3600:.2f}",
            f"{mine.p95_jct_s / 3600:.2f}",
            f"{mine.useful_alloc_pct:.2f}",  # the bar's (the same as allocated when nothing is lost)
            check.verdict,
        )
    return table
