"""Smoke test of the throughput benchmark's builders and of one `schedule` call over their queue."""

from __future__ import annotations

import json
from collections import Counter

from suanli.domain.catalog_data import CATALOG
from suanli.domain.inventory import GpuMode
from suanli.domain.plan import Pending, Placement
from suanli.domain.policies import BestFitPolicy
from suanli.domain.request import GpuShare, MigSlice, Request, WholeGpus
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot
from suanli.sim.throughput import (
    GPU_MODEL,
    NODES_PER_LEAF,
    build_fleet,
    build_queue,
    main,
    make_policy,
    run_throughput,
)


def test_fleet_has_the_stated_shape() -> None:
    fleet = build_fleet(64)
    assert fleet.gpu_count == 512
    modes = Counter(node.gpu_mode for node in fleet.nodes)
    assert modes == {GpuMode.MIG: 16, GpuMode.SHARED: 16, GpuMode.WHOLE: 32}
    assert {node.gpu_model for node in fleet.nodes} == {GPU_MODEL}
    assert {r.jurisdiction for r in fleet.regions.values()} == {"CN", "EU"}
    assert Counter(node.region for node in fleet.nodes) == {"cn-north": 32, "eu-west": 32}
    assert all(len(node.topology) == 4 for node in fleet.nodes)
    leaves = Counter(node.topology for node in fleet.nodes)
    assert max(leaves.values()) == NODES_PER_LEAF
    mig_nodes = [node for node in fleet.nodes if node.gpu_mode is GpuMode.MIG]
    layouts = [layout for node in mig_nodes for layout in node.mig_layouts]
    assert () in layouts and any(len(set(layout)) > 1 for layout in layouts)
    Snapshot(fleet, CATALOG)  # every layout is valid for the model


def test_queue_has_the_stated_mix_and_is_seeded() -> None:
    queue = build_queue(500, seed=7)
    assert queue == build_queue(500, seed=7)
    assert queue != build_queue(500, seed=8)
    kinds = Counter("gang" if r.node_count > 1 else type(r.shape).__name__ for r in queue)
    assert kinds["WholeGpus"] > 150 and kinds["MigSlice"] > 60 and kinds["GpuShare"] > 100
    assert 2 <= kinds["gang"] <= 40
    assert {r.shape.count for r in queue if isinstance(r.shape, WholeGpus) and r.node_count == 1} == {
        1,
        2,
        4,
        8,
    }
    assert all(r.shape == WholeGpus(8) and 2 <= r.node_count <= 8 for r in queue if r.node_count > 1)
    assert all(0 < r.shape.milli < 1000 for r in queue if isinstance(r.shape, GpuShare))
    assert len({r.shape.profile for r in queue if isinstance(r.shape, MigSlice)}) >= 4
    assert sum(1 for r in queue if r.constraints.jurisdictions) > 25
    assert len({r.cpu_milli for r in queue}) > 5 and len({r.memory_mib for r in queue}) > 5


def test_schedule_places_a_sensible_fraction() -> None:
    fleet = build_fleet(64)
    queue = build_queue(500, seed=1)
    result = run_throughput(fleet, queue, make_policy("best-fit", queue, seed=1))
    assert result.requests == 500
    assert result.placed + sum(result.pending_by_reason.values()) == 500
    assert result.placed >= 150  # the queue asks for more than the 512 GPUs; most of the fleet fills
    assert result.allocated_pct > 60
    assert set(result.pending_by_reason) <= {"no_capacity", "gang_incomplete", "residency"}
    assert result.pending_by_reason.get("residency", 0) >= 1  # the SG requests have no region


def test_default_policy_and_json_output(tmp_path) -> None:
    out = tmp_path / "throughput.json"
    assert main(["--nodes", "16", "--requests", "60", "--seed", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["policy"] == "suanli"
    assert figures["fleet_gpus"] == 128 and figures["requests"] == 60
    assert 0 < figures["placed"] <= 60
    assert figures["decisions_per_s"] > 0 and figures["placements_per_s"] > 0
    assert figures["placed"] + sum(figures["pending_by_reason"].values()) == 60


def test_a_shape_that_fit_nowhere_fits_again_after_a_release() -> None:
    """The scheduler's no-fit memo must be forgotten when capacity comes back."""

    fleet = build_fleet(4)
    snapshot = Snapshot(fleet, CATALOG)
    policy = BestFitPolicy()
    taken = [place(snapshot, Request(f"fill-{i}", WholeGpus(8)), policy) for i in range(3)]
    assert all(isinstance(p, Placement) for p in taken)  # the three non-MIG nodes are full
    assert isinstance(place(snapshot, Request("late-1", WholeGpus(8)), policy), Pending)
    assert isinstance(place(snapshot, Request("late-2", WholeGpus(8)), policy), Pending)
    snapshot.release(taken[0].nodes[0])
    assert isinstance(place(snapshot, Request("late-3", WholeGpus(8)), policy), Placement)
