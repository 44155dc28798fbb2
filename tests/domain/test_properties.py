"""Scheduler invariants on random small fleets and queues, under every policy."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog_data import CATALOG
from suanli.domain.fragmentation import typical_mix
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.mig import check_layout
from suanli.domain.plan import Plan, Reason
from suanli.domain.policies import BestFitPolicy, FgdPolicy, Policy, RandomPolicy, SuanliPolicy
from suanli.domain.request import Constraints, GpuShare, MigSlice, Request, Tier, WholeGpus
from suanli.domain.scheduler import schedule
from suanli.domain.snapshot import Snapshot

REGIONS = {
    "cn-north": Region("cn-north", "CN", 550.0, 1.3),
    "eu-west": Region("eu-west", "EU", 250.0, 1.2),
}
LEAVES = (
    "cn-north/z1/pod-a/leaf-01",
    "cn-north/z1/pod-a/leaf-02",
    "cn-north/z1/pod-b/leaf-03",
    "cn-north/z2/pod-c/leaf-04",
    "eu-west/z1/pod-a/leaf-01",
)
MIG_LAYOUTS = {
    "A100-80GB": ((), ("7g.80gb",), ("3g.40gb", "3g.40gb"), ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")),
    "A30-24GB": ((), ("4g.24gb",), ("2g.12gb", "1g.6gb", "1g.6gb")),
}
MIG_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.6gb", "2g.12gb")

POLICIES = {
    "random": lambda queue: RandomPolicy(seed=3),
    "best-fit": lambda queue: BestFitPolicy(),
    "fgd": lambda queue: FgdPolicy(mix=typical_mix(queue)),
    "suanli": lambda queue: SuanliPolicy(mix=typical_mix(queue)),
}


@st.composite
def nodes(draw: st.DrawFn, index: int) -> Node:
    kind = draw(st.sampled_from(("whole", "shared", "mig")))
    where = draw(st.sampled_from(LEAVES))
    topology = tuple(where.split("/"))
    cpu = draw(st.sampled_from((8_000, 32_000, 64_000)))
    memory = draw(st.sampled_from((32 * 1024, 128 * 1024, 256 * 1024)))
    gpus = draw(st.integers(1, 4))
    if kind == "whole":
        model, mode, layouts = draw(st.sampled_from(("H100-SXM-80GB", "L40S"))), GpuMode.WHOLE, ()
    elif kind == "shared":
        model, mode, layouts = "L40S", GpuMode.SHARED, ()
    else:
        model, mode = draw(st.sampled_from(tuple(MIG_LAYOUTS))), GpuMode.MIG
        layouts = tuple(draw(st.sampled_from(MIG_LAYOUTS[model])) for _ in range(gpus))
    return Node(f"n{index:02d}", topology[0], topology, cpu, memory, model, gpus, mode, layouts)


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    count = draw(st.integers(1, 6))
    return Fleet(REGIONS, tuple(draw(nodes(i)) for i in range(count)))


@st.composite
def requests(draw: st.DrawFn, index: int) -> Request:
    kind = draw(st.sampled_from(("whole", "share", "mig", "gang")))
    node_count = 1
    if kind == "whole":
        shape = WholeGpus(draw(st.integers(0, 4)))
    elif kind == "share":
        shape = GpuShare(
            draw(st.sampled_from((100, 250, 500, 750))), draw(st.sampled_from((0, 8192, 24_576)))
        )
    elif kind == "mig":
        shape = MigSlice(draw(st.sampled_from(MIG_PROFILES)))
    else:
        shape, node_count = WholeGpus(draw(st.integers(1, 2))), draw(st.integers(2, 3))
    tier = draw(st.sampled_from(tuple(Tier)))
    jurisdictions = draw(st.sampled_from((frozenset(), frozenset({"EU"}), frozenset({"CN"}))))
    return Request(
        f"r{index:02d}",
        shape,
        node_count=node_count,
        cpu_milli=draw(st.sampled_from((0, 2_000, 16_000, 40_000))),
        memory_mib=draw(st.sampled_from((0, 8 * 1024, 64 * 1024, 200 * 1024))),
        tier=tier,
        bid_micros_per_hour=draw(st.integers(0, 5)) if tier is Tier.SPOT else None,
        constraints=Constraints(jurisdictions=jurisdictions),
        submitted_at_s=draw(st.integers(0, 3)),
    )


@st.composite
def queues(draw: st.DrawFn) -> list[Request]:
    return [draw(requests(i)) for i in range(draw(st.integers(1, 14)))]


def run(fleet: Fleet, queue: list[Request], policy: str) -> tuple[Plan, Snapshot]:
    snap = Snapshot(fleet, CATALOG)
    chosen: Policy = POLICIES[policy](queue)
    return schedule(snap, queue, chosen, now=0.0), snap


def check_plan(fleet: Fleet, queue: list[Request], plan: Plan, snap: Snapshot) -> None:
    by_id = {r.id: r for r in queue}
    node_of = {n.name: n for n in fleet.nodes}

    placed_ids = [p.request_id for p in plan.placements]
    pending_ids = [p.request_id for p in plan.pending]
    assert sorted(placed_ids + pending_ids) == sorted(by_id), "every request is placed or pending, once"
    assert all(isinstance(p.reason, Reason) and p.message for p in plan.pending)

    cpu_used: dict[str, int] = defaultdict(int)
    memory_used: dict[str, int] = defaultdict(int)
    per_gpu: dict[tuple[str, int], list] = defaultdict(list)
    for placement in plan.placements:
        request = by_id[placement.request_id]
        names = [a.node for a in placement.nodes]
        assert len(names) == request.node_count == len(set(names)), "a gang is placed whole on distinct nodes"
        if request.node_count > 1:
            assert placement.subtree
            assert all(node_of[n].topology_path.startswith(placement.subtree) for n in names)
        for allocation in placement.nodes:
            host = node_of[allocation.node]
            allowed = request.constraints.jurisdictions
            assert not allowed or REGIONS[host.region].jurisdiction in allowed
            assert (allocation.cpu_milli, allocation.memory_mib) == (request.cpu_milli, request.memory_mib)
            cpu_used[host.name] += allocation.cpu_milli
            memory_used[host.name] += allocation.memory_mib
            shape = request.shape
            if isinstance(shape, WholeGpus):
                assert len(allocation.slices) == shape.count == len({s.gpu_index for s in allocation.slices})
                assert shape.count == 0 or host.gpu_mode is not GpuMode.MIG
            elif isinstance(shape, GpuShare):
                assert host.gpu_mode is GpuMode.SHARED
                (piece,) = allocation.slices
                assert (piece.milli, piece.memory_mib) == (shape.milli, shape.memory_mib)
            else:
                assert host.gpu_mode is GpuMode.MIG
                (piece,) = allocation.slices
                assert piece.mig_profile == shape.profile
            for piece in allocation.slices:
                assert 0 <= piece.gpu_index < host.gpu_count
                per_gpu[(host.name, piece.gpu_index)].append(piece)

    for host in fleet.nodes:
        assert cpu_used[host.name] <= host.cpu_milli, f"{host.name} over its CPU"
        assert memory_used[host.name] <= host.memory_mib, f"{host.name} over its memory"
        state = snap.by_name[host.name]
        assert state.cpu_free == host.cpu_milli - cpu_used[host.name], "capacity taken outside the plan"
        assert state.memory_free == host.memory_mib - memory_used[host.name], (
            "capacity taken outside the plan"
        )

    for (name, gpu_index), pieces in per_gpu.items():
        model = CATALOG.get(node_of[name].gpu_model)
        if any(p.is_whole for p in pieces):
            assert len(pieces) == 1, f"a whole GPU {name}/{gpu_index} is shared"
        mig_pieces = [p for p in pieces if p.mig_profile is not None]
        if mig_pieces:
            assert model.mig is not None and len(mig_pieces) == len(pieces)
            check_layout(model.mig, [(p.mig_start, p.mig_profile) for p in mig_pieces])
            layout = snap.by_name[name].gpus[gpu_index][2]
            check_layout(model.mig, [(s, n) for s, n, _ in layout])
            assert {(s, n) for s, n, busy in layout if busy} == {
                (p.mig_start, p.mig_profile) for p in mig_pieces
            }
        else:
            assert sum(p.milli for p in pieces) <= 1000, f"GPU {name}/{gpu_index} over its compute"
            assert sum(p.memory_mib for p in pieces) <= model.memory_mib, (
                f"GPU {name}/{gpu_index} over its memory"
            )

    for placement in plan.placements:
        for repartition in placement.repartitions:
            model = CATALOG.get(node_of[repartition.node].gpu_model)
            assert model.mig is not None
            assert repartition.created in {
                (p.mig_start, p.mig_profile) for p in per_gpu[(repartition.node, repartition.gpu_index)]
            }


@pytest.mark.parametrize("policy", list(POLICIES))
@settings(max_examples=120, deadline=None)
@given(fleet=fleets(), queue=queues())
def test_plans_never_overbook_and_are_deterministic(policy: str, fleet: Fleet, queue: list[Request]) -> None:
    plan, snap = run(fleet, queue, policy)
    check_plan(fleet, queue, plan, snap)
    again, _ = run(fleet, queue, policy)
    assert again == plan, "the same inputs give the same plan"
