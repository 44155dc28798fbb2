"""Elastic rentals: grow near the rental's nodes (same leaf, then pod), all or nothing; shrink frees."""

from __future__ import annotations

import pytest

from suanli.domain.catalog_data import CATALOG
from suanli.domain.elastic import grow, shrink
from suanli.domain.errors import RequestError
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import Pending, Placement, Reason
from suanli.domain.policies import BestFitPolicy
from suanli.domain.request import Request, WholeGpus
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

REGION = Region("r", "US", 400.0, 1.2)
POLICY = BestFitPolicy()
# 8 nodes: leaves of 2 nodes, pods of 2 leaves
PATHS = [("r", "z", f"p{i // 4}", f"l{i // 2}") for i in range(8)]


def snapshot() -> Snapshot:
    nodes = tuple(
        Node(f"n{i}", "r", PATHS[i], 64_000, 512_000, "H100-SXM-80GB", 8, GpuMode.WHOLE) for i in range(8)
    )
    return Snapshot(Fleet({"r": REGION}, nodes), CATALOG)


def state(snap: Snapshot):
    return [(n.cpu_free, n.memory_free, tuple(n.gpus)) for n in snap.nodes]


def on(snap: Snapshot, rid: str, gpus: int, node: str) -> Placement:
    for other in snap.nodes:
        snap.set_schedulable(other.name, other.name == node)
    placement = place(snap, Request(rid, WholeGpus(gpus)), POLICY)
    for other in snap.nodes:
        snap.set_schedulable(other.name, True)
    assert isinstance(placement, Placement)
    return placement


def test_grow_takes_the_same_leaf_first_then_the_same_pod():
    snap = snapshot()
    request = Request("job", WholeGpus(8))
    rental = on(snap, "job", 8, "n2")  # leaf l1 = n2, n3; pod p0 = n0..n3
    on(snap, "other", 8, "n0")  # leaves n1 as the only other free node in pod p0
    added = grow(snap, request, rental, POLICY, extra_nodes=2)
    assert isinstance(added, Placement)
    assert [a.node for a in added.nodes] == ["n3", "n1"]
    assert added.subtree == "r/z/p0"


def test_grow_gpus_on_the_same_nodes_is_all_or_nothing():
    snap = snapshot()
    request = Request("job", WholeGpus(4), node_count=2)
    rental = place(snap, request, POLICY)
    assert isinstance(rental, Placement)
    first = rental.nodes[0].node
    on(snap, "filler", 4, first)  # the first node is now full
    before = state(snap)
    refused = grow(snap, request, rental, POLICY, extra_gpus_per_node=2)
    assert isinstance(refused, Pending) and refused.reason is Reason.NO_CAPACITY and first in refused.message
    assert state(snap) == before
    on_free = grow(
        snap, Request("job2", WholeGpus(4)), on(snap, "job2", 4, "n7"), POLICY, extra_gpus_per_node=4
    )
    assert isinstance(on_free, Placement) and on_free.gpus == 4 and on_free.nodes[0].node == "n7"


def test_shrink_releases_part_and_keeps_the_rest():
    snap = snapshot()
    request = Request("job", WholeGpus(8), node_count=3)
    rental = place(snap, request, POLICY)
    assert isinstance(rental, Placement)
    allocated = snap.allocated_milli()
    kept, released = shrink(snap, rental, fewer_nodes=1)
    assert len(kept.nodes) == 2 and len(released.nodes) == 1
    assert snap.allocated_milli() == allocated - 8000
    kept2, released2 = shrink(snap, kept, fewer_gpus_per_node=3)
    assert kept2.gpus == 10 and released2.gpus == 6 and snap.allocated_milli() == allocated - 14000
    with pytest.raises(RequestError):
        shrink(snap, kept2, fewer_nodes=2)
    with pytest.raises(RequestError):
        shrink(snap, kept2, release_nodes=["nope"])


def test_shrink_then_grow_returns_to_the_same_capacity():
    snap = snapshot()
    request = Request("job", WholeGpus(8), node_count=2)
    rental = place(snap, request, POLICY)
    assert isinstance(rental, Placement)
    before = snap.allocated_milli()
    kept, _ = shrink(snap, rental, release_nodes=[rental.nodes[1].node])
    added = grow(snap, request, kept, POLICY, extra_nodes=1)
    assert isinstance(added, Placement) and snap.allocated_milli() == before


def test_a_rental_that_names_no_model_grows_only_onto_nodes_of_the_model_it_runs_on():
    """A T4 node and two H100 nodes share a leaf: a rental on the T4 that names no model does not grow onto
    the free H100s (it would run a mixed gang, billed at the T4's rate per GPU); it grows onto a T4 only,
    even one in another pod."""
    nodes = (
        Node("t4-1", "r", PATHS[0], 64_000, 512_000, "T4", 4, GpuMode.WHOLE),
        Node("h100-1", "r", PATHS[0], 64_000, 512_000, "H100-SXM-80GB", 4, GpuMode.WHOLE),
        Node("h100-2", "r", PATHS[1], 64_000, 512_000, "H100-SXM-80GB", 4, GpuMode.WHOLE),
        Node("t4-2", "r", PATHS[7], 64_000, 512_000, "T4", 4, GpuMode.WHOLE),
    )
    snap = Snapshot(Fleet({"r": REGION}, nodes), CATALOG)
    rental = on(snap, "job", 4, "t4-1")
    busy = on(snap, "busy", 4, "t4-2")
    anywhere = Request("job", WholeGpus(4))
    added = grow(snap, anywhere, rental, POLICY, extra_nodes=1)
    assert isinstance(added, Pending) and added.message == "no more T4 node fits it in its region"
    for allocation in busy.nodes:
        snap.release(allocation)
    grown = grow(snap, anywhere, rental, POLICY, extra_nodes=1)
    assert isinstance(grown, Placement) and [a.node for a in grown.nodes] == ["t4-2"]


def test_a_gang_grows_only_within_its_region_however_free_the_others_are():
    """Two nodes in region `a`, two in `b`: a gang on one node of `a` whose neighbour is busy does not grow
    onto `b`'s free nodes (a gang never spans regions); it grows when `a`'s frees."""
    regions = {"a": Region("a", "CN", 500.0, 1.3), "b": Region("b", "EU", 300.0, 1.2)}
    nodes = tuple(
        Node(f"{r}{i}", r, (r, "z", "p", "l"), 64_000, 512_000, "H100-SXM-80GB", 8, GpuMode.WHOLE)
        for r in ("a", "b")
        for i in range(2)
    )
    snap = Snapshot(Fleet(regions, nodes), CATALOG)
    rental = on(snap, "job", 8, "a0")
    busy = on(snap, "busy", 8, "a1")
    added = grow(snap, Request("job", WholeGpus(8)), rental, POLICY, extra_nodes=1)
    assert isinstance(added, Pending) and added.reason is Reason.NO_CAPACITY
    assert (
        added.message == "no more H100-SXM-80GB node fits it in its region"
    )  # was "0 nodes fit, 1 more needed"
    for allocation in busy.nodes:
        snap.release(allocation)
    grown = grow(snap, Request("job", WholeGpus(8)), rental, POLICY, extra_nodes=1)
    assert isinstance(grown, Placement) and [a.node for a in grown.nodes] == ["a1"]
