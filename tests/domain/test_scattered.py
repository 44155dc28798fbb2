"""Free GPUs in pieces too small for the queue: per node, against the requests that could run there."""

from __future__ import annotations

from suanli.domain.catalog_data import CATALOG
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import Placement
from suanli.domain.policies import BestFitPolicy
from suanli.domain.request import GpuSelector, GpuShare, Request, WholeGpus
from suanli.domain.scattered import scattered_gpus
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

REGION = Region("r", "US", 400.0, 1.2)


def fleet_of(*nodes: tuple[str, str, int, GpuMode]) -> Snapshot:
    return Snapshot(
        Fleet(
            {"r": REGION},
            tuple(
                Node(name, "r", ("r", "z", "p", "l0"), 64_000, 512_000, model, gpus, mode)
                for name, model, gpus, mode in nodes
            ),
        ),
        CATALOG,
    )


def occupy(snapshot: Snapshot, request: Request) -> None:
    assert isinstance(place(snapshot, request, BestFitPolicy()), Placement)


def whole(rid: str, gpus: int, model: str | None = None) -> Request:
    selector = GpuSelector(models=frozenset({model})) if model else GpuSelector()
    return Request(rid, WholeGpus(gpus), selector=selector)


def test_one_free_gpu_on_each_node_is_scattered_for_a_pair_but_not_for_a_single():
    snap = fleet_of(("n0", "H100-SXM-80GB", 8, GpuMode.WHOLE), ("n1", "H100-SXM-80GB", 8, GpuMode.WHOLE))
    occupy(snap, whole("a", 7))
    occupy(snap, whole("b", 7))
    assert scattered_gpus(snap, [whole("pair", 2)]) == 2.0
    assert scattered_gpus(snap, [whole("pair", 2), whole("single", 1)]) == 0.0
    assert scattered_gpus(snap, []) == 0.0
    assert scattered_gpus(snap, [whole("pair", 2)], excluded={"n0"}) == 1.0  # the head's node is its drain


def test_only_nodes_a_waiting_request_could_run_on_count():
    """An idle L40S node is not a piece of anything for a queue of H100 requests; the H100 node's last free
    GPU is, and a node where one of them fits is not."""
    snap = fleet_of(
        ("h0", "H100-SXM-80GB", 8, GpuMode.WHOLE),
        ("h1", "H100-SXM-80GB", 8, GpuMode.WHOLE),
        ("l0", "L40S", 4, GpuMode.WHOLE),
    )
    occupy(snap, whole("a", 7, "H100-SXM-80GB"))
    occupy(snap, whole("b", 5, "H100-SXM-80GB"))  # h1: 3 free
    assert scattered_gpus(snap, [whole("pair", 2, "H100-SXM-80GB")]) == 1.0  # h0's one; the pair fits h1
    assert scattered_gpus(snap, [whole("quad", 4, "H100-SXM-80GB")]) == 4.0  # h0's one and h1's three


def test_a_share_fits_the_free_part_of_a_shared_gpu():
    snap = fleet_of(("s0", "L40S", 1, GpuMode.SHARED))
    occupy(snap, Request("used", GpuShare(600)))
    assert scattered_gpus(snap, [Request("big", GpuShare(500))]) == 0.4
    assert scattered_gpus(snap, [Request("small", GpuShare(300))]) == 0.0
