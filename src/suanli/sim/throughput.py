"""Scheduler throughput on a synthetic fleet: how many decisions one `schedule` call makes per second.

`python -m suanli.sim.throughput [--json FILE] [--requests N] [--seed S] [--policy NAME]` builds a fleet of
1,250 nodes x 8 H100-SXM-80GB (10,000 GPUs) in two regions of different jurisdictions, a seeded queue of
mixed requests (whole GPUs, MIG slices, shares, a few multi-node gangs, some with residency constraints),
times one `schedule(snapshot, queue, policy, now=0.0)` call over the whole queue and prints what happened.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from suanli.domain.catalog import Catalog
from suanli.domain.catalog_data import CATALOG
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.policies import Policy, build_policy
from suanli.domain.request import Constraints, GpuShare, MigSlice, Request, Tier, WholeGpus
from suanli.domain.scheduler import schedule
from suanli.domain.snapshot import Snapshot
from suanli.sim.queue_outputs import check_outputs

GPU_MODEL = "H100-SXM-80GB"
GPUS_PER_NODE = 8
NODE_CPU_MILLI = 192_000  # 2 x 48-core sockets, hyper-threaded
NODE_MEMORY_MIB = 2 * 1024 * 1024  # 2 TiB
NODES_PER_LEAF = 16
LEAVES_PER_POD = 4
PODS_PER_ZONE = 5
GOAL_PLACEMENTS_PER_S = 2000
POLICY_NAMES = ("suanli", "fgd", "best-fit", "random")

# (region, jurisdiction, grid gCO2/kWh, PUE)
REGIONS = (("cn-north", "CN", 540.0, 1.3), ("eu-west", "EU", 250.0, 1.2))
# MIG nodes: one layout per GPU, cycled; () is an unpartitioned GPU
MIG_LAYOUTS: tuple[tuple[str, ...], ...] = (
    (),
    ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
    (),
    ("1g.10gb",) * 7,
    ("4g.40gb", "3g.40gb"),
    (),
    ("7g.80gb",),
    ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
)
MIG_PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
MIG_PROFILE_WEIGHTS = (30, 10, 20, 20, 10, 10)
SHARE_MILLI = (100, 200, 250, 300, 500, 750)
SHARE_MEMORY_MIB = (4096, 8192, 10240, 16384, 20480, 40960)
WHOLE_COUNTS = (1, 2, 4, 8)
WHOLE_WEIGHTS = (50, 25, 15, 10)
GANG_NODES = (2, 2, 4, 4, 8)
PER_GPU_CPU_MILLI = (12_000, 24_000)  # the two CPU ratios of common 8-GPU instance types (96 or 192 cores)
PER_GPU_MEMORY_MIB = (128 * 1024, 256 * 1024)
# request kinds and their share of the queue, in percent
KIND_WEIGHTS = {"whole": 45, "mig": 22, "share": 30, "gang": 3}


def build_fleet(node_count: int = 1250, *, gpus_per_node: int = GPUS_PER_NODE) -> Fleet:
    """Two regions, half the nodes each; every 4th node MIG, the next shared, the other two whole.

    Topology `region/zone/pod/leaf` with NODES_PER_LEAF nodes per leaf, LEAVES_PER_POD leaves per pod
    and PODS_PER_ZONE pods per zone. Half the MIG nodes' GPUs start unpartitioned, the rest pre-carved.
    """
    regions = {name: Region(name, jurisdiction, grid, pue) for name, jurisdiction, grid, pue in REGIONS}
    per_region = -(-node_count // len(REGIONS))
    nodes: list[Node] = []
    for index in range(node_count):
        region = REGIONS[index // per_region][0]
        local = index % per_region
        leaf = local // NODES_PER_LEAF
        pod = leaf // LEAVES_PER_POD
        zone = pod // PODS_PER_ZONE
        topology = (region, f"z{zone + 1}", f"pod-{pod:02d}", f"leaf-{leaf:03d}")
        mode = (GpuMode.MIG, GpuMode.SHARED, GpuMode.WHOLE, GpuMode.WHOLE)[index % 4]
        layouts: tuple[tuple[str, ...], ...] = ()
        if mode is GpuMode.MIG:
            layouts = tuple(
                MIG_LAYOUTS[(index // 4 + gpu) % len(MIG_LAYOUTS)] for gpu in range(gpus_per_node)
            )
        nodes.append(
            Node(
                name=f"node-{index:05d}",
                region=region,
                topology=topology,
                cpu_milli=NODE_CPU_MILLI,
                memory_mib=NODE_MEMORY_MIB,
                gpu_model=GPU_MODEL,
                gpu_count=gpus_per_node,
                gpu_mode=mode,
                mig_layouts=layouts,
            )
        )
    return Fleet(regions, tuple(nodes))


def build_queue(count: int = 20_000, seed: int = 42) -> list[Request]:
    """A seeded mix of requests; see KIND_WEIGHTS. CPU and memory are drawn per request in round steps."""
    rng = random.Random(seed)
    kinds = tuple(KIND_WEIGHTS)
    weights = tuple(KIND_WEIGHTS.values())
    queue: list[Request] = []
    for number in range(count):
        kind = rng.choices(kinds, weights)[0]
        node_count = 1
        if kind == "whole":
            shape: WholeGpus | MigSlice | GpuShare = WholeGpus(rng.choices(WHOLE_COUNTS, WHOLE_WEIGHTS)[0])
            gpus = shape.count
        elif kind == "gang":
            shape, node_count, gpus = WholeGpus(GPUS_PER_NODE), rng.choice(GANG_NODES), GPUS_PER_NODE
        elif kind == "mig":
            shape, gpus = MigSlice(rng.choices(MIG_PROFILES, MIG_PROFILE_WEIGHTS)[0]), 1
        else:
            shape, gpus = GpuShare(rng.choice(SHARE_MILLI), rng.choice(SHARE_MEMORY_MIB)), 1
        # GPU clouds sell CPU and memory in fixed ratios per GPU (instance sizes), not at random
        per_gpu_cpu = rng.choice(PER_GPU_CPU_MILLI)
        per_gpu_mib = rng.choice(PER_GPU_MEMORY_MIB)
        if kind in ("mig", "share"):
            per_gpu_cpu //= 2
            per_gpu_mib //= 2
        tier_draw = rng.random()
        tier = Tier.RESERVED if tier_draw < 0.1 else Tier.SPOT if tier_draw < 0.3 else Tier.ON_DEMAND
        residency_draw = rng.random()
        jurisdictions: frozenset[str] = frozenset()
        if residency_draw < 0.08:
            jurisdictions = frozenset({"CN"})
        elif residency_draw < 0.16:
            jurisdictions = frozenset({"EU"})
        elif residency_draw < 0.17:
            jurisdictions = frozenset({"SG"})  # no region there: stays pending for residency
        queue.append(
            Request(
                id=f"req-{number:06d}",
                shape=shape,
                node_count=node_count,
                cpu_milli=per_gpu_cpu * gpus,
                memory_mib=per_gpu_mib * gpus,
                tenant=f"tenant-{rng.randrange(50):02d}",
                tier=tier,
                bid_micros_per_hour=rng.randrange(500_000, 3_000_000, 50_000) if tier is Tier.SPOT else None,
                constraints=Constraints(jurisdictions=jurisdictions),
                submitted_at_s=number * 0.05,
            )
        )
    return queue


def make_policy(name: str, queue: Sequence[Request], seed: int = 0) -> Policy:
    """A policy by name; the fragmentation-aware ones learn their typical mix from the queue."""
    return build_policy(name, seed=seed, history=queue)


@dataclass
class ThroughputResult:
    policy: str
    fleet_gpus: int
    requests: int
    placed: int
    seconds: float
    allocated_pct: float
    pending_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def decisions_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else float("inf")

    @property
    def placements_per_s(self) -> float:
        return self.placed / self.seconds if self.seconds else float("inf")

    def as_json(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "fleet_gpus": self.fleet_gpus,
            "requests": self.requests,
            "placed": self.placed,
            "seconds": round(self.seconds, 4),
            "decisions_per_s": round(self.decisions_per_s, 1),
            "placements_per_s": round(self.placements_per_s, 1),
            "allocated_pct": round(self.allocated_pct, 2),
            "pending_by_reason": dict(sorted(self.pending_by_reason.items())),
        }


def run_throughput(
    fleet: Fleet, queue: Sequence[Request], policy: Policy, catalog: Catalog = CATALOG
) -> ThroughputResult:
    """Time one `schedule` call over the whole queue on a fresh snapshot (the snapshot build is not timed)."""
    snapshot = Snapshot(fleet, catalog)
    started = time.perf_counter()
    plan = schedule(snapshot, queue, policy, now=0.0)
    seconds = time.perf_counter() - started
    capacity = snapshot.gpu_count
    return ThroughputResult(
        policy=policy.name,
        fleet_gpus=capacity,
        requests=len(queue),
        placed=len(plan.placements),
        seconds=seconds,
        allocated_pct=100 * snapshot.allocated_milli() / (1000 * capacity) if capacity else 0.0,
        pending_by_reason=dict(Counter(p.reason.value for p in plan.pending)),
    )


def render(result: ThroughputResult) -> Table:
    table = Table(title=f"scheduler throughput: {result.policy} on {result.fleet_gpus:,} GPUs")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{result.requests:,}")
    table.add_row("placed", f"{result.placed:,}")
    for reason, count in sorted(result.pending_by_reason.items()):
        table.add_row(f"pending: {reason}", f"{count:,}")
    table.add_row("seconds", f"{result.seconds:.3f}")
    table.add_row("decisions / s", f"{result.decisions_per_s:,.0f}")
    goal = "ok" if result.placements_per_s >= GOAL_PLACEMENTS_PER_S else f"goal {GOAL_PLACEMENTS_PER_S:,}"
    table.add_row("placements / s", f"{result.placements_per_s:,.0f} ({goal})")
    table.add_row("GPU allocated", f"{result.allocated_pct:.1f}%")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.sim.throughput", description=__doc__)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--requests", type=int, default=20_000, help="queue length (default 20000)")
    parser.add_argument("--nodes", type=int, default=1250, help="8-GPU nodes in the fleet (default 1250)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the queue and of random tie-breaks")
    parser.add_argument("--policy", choices=POLICY_NAMES, default="suanli")
    args = parser.parse_args(argv)
    if args.json is not None:
        try:
            check_outputs(None, args.json, None)
        except ValueError as error:
            parser.error(str(error))
    fleet = build_fleet(args.nodes)
    queue = build_queue(args.requests, args.seed)
    result = run_throughput(fleet, queue, make_policy(args.policy, queue, args.seed))
    Console().print(render(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.as_json(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
