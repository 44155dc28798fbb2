"""The scheduler: filters and their pending reasons, slices of every kind, gangs, queue order, snapshots."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog_data import CATALOG
from suanli.domain.fragmentation import typical_mix
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import Pending, Placement, Plan, Reason, Repartition
from suanli.domain.policies import BestFitPolicy, FgdPolicy, Policy, RandomPolicy, SuanliPolicy
from suanli.domain.request import (
    Constraints,
    GpuSelector,
    GpuShare,
    MigSlice,
    Request,
    Shape,
    Tier,
    WholeGpus,
)
from suanli.domain.scheduler import never_fits, order_queue, place, schedule
from suanli.domain.snapshot import Snapshot, host_layouts

REGIONS = {
    "cn-north": Region("cn-north", "CN", 550.0, 1.3),
    "eu-west": Region("eu-west", "EU", 250.0, 1.2),
    "ap-southeast": Region("ap-southeast", "SG", 400.0, 1.4),
}
L40S_MIB = 48 * 1024
A100_MIB = 80 * 1024


def node(
    name: str,
    *,
    model: str = "H100-SXM-80GB",
    gpus: int = 8,
    mode: GpuMode = GpuMode.WHOLE,
    layouts: tuple[tuple[str, ...], ...] = (),
    where: str = "cn-north/z1/pod-a/leaf-01",
    cpu: int = 64_000,
    memory: int = 512 * 1024,
    provider: str = "platform",
    labels: dict[str, str] | None = None,
) -> Node:
    topology = tuple(where.split("/"))
    return Node(name, topology[0], topology, cpu, memory, model, gpus, mode, layouts, provider, labels or {})


def shared(name: str, gpus: int = 1, **kw) -> Node:
    return node(name, model="L40S", gpus=gpus, mode=GpuMode.SHARED, **kw)


def mig_node(name: str, layouts: tuple[tuple[str, ...], ...] = ((),), **kw) -> Node:
    return node(name, model="A100-80GB", gpus=len(layouts), mode=GpuMode.MIG, layouts=layouts, **kw)


def snapshot(*nodes: Node) -> Snapshot:
    return Snapshot(Fleet(REGIONS, nodes), CATALOG)


ONE_GPU = WholeGpus(1)


def req(rid: str, shape: Shape = ONE_GPU, **kw) -> Request:
    return Request(rid, shape, **kw)


POLICIES: dict[str, Callable[[list[Request]], Policy]] = {
    "random": lambda queue: RandomPolicy(seed=7),
    "best-fit": lambda queue: BestFitPolicy(),
    "fgd": lambda queue: FgdPolicy(mix=typical_mix(queue)),
    "suanli": lambda queue: SuanliPolicy(mix=typical_mix(queue)),
}


def run(snap: Snapshot, *queue: Request, policy: str = "best-fit") -> Plan:
    return schedule(snap, list(queue), POLICIES[policy](list(queue)), now=0.0)


def placed(plan: Plan, rid: str) -> Placement:
    placement = plan.placement_of(rid)
    assert placement is not None, f"{rid} is pending: {plan.pending}"
    return placement


def nodes_of(plan: Plan, rid: str) -> list[str]:
    return [a.node for a in placed(plan, rid).nodes]


every_policy = pytest.mark.parametrize("policy", list(POLICIES))


# --- whole GPUs -------------------------------------------------------------------------------------------


@every_policy
def test_whole_gpus_take_distinct_entire_gpus(policy: str) -> None:
    plan = run(snapshot(node("n1")), req("r", WholeGpus(3), cpu_milli=8_000, memory_mib=1024), policy=policy)
    (allocation,) = placed(plan, "r").nodes
    assert (allocation.node, allocation.cpu_milli, allocation.memory_mib) == ("n1", 8_000, 1024)
    assert len({s.gpu_index for s in allocation.slices}) == 3
    assert all(s.is_whole and s.memory_mib == A100_MIB for s in allocation.slices)
    assert placed(plan, "r").gpus == 3.0


@every_policy
def test_a_full_node_leaves_the_next_whole_request_waiting(policy: str) -> None:
    plan = run(snapshot(node("n1")), req("a", WholeGpus(8)), req("b", WholeGpus(1)), policy=policy)
    assert nodes_of(plan, "a") == ["n1"]
    assert plan.pending_reason("b") is Reason.NO_CAPACITY


@pytest.mark.parametrize(
    ("fleet_node", "shape", "reason"),
    [
        pytest.param(node("n1"), WholeGpus(9), Reason.NO_MATCHING_GPU, id="more-gpus-than-any-node"),
        pytest.param(mig_node("m1"), WholeGpus(1), Reason.NO_MATCHING_GPU, id="whole-on-mig-node"),
        pytest.param(node("n1"), GpuShare(500), Reason.NO_MATCHING_GPU, id="share-on-whole-node"),
        pytest.param(node("n1"), MigSlice("3g.40gb"), Reason.NO_MATCHING_GPU, id="mig-on-whole-node"),
        pytest.param(mig_node("m1"), MigSlice("3g.71gb"), Reason.NO_MATCHING_GPU, id="profile-model-lacks"),
        pytest.param(shared("s1"), GpuShare(100, 60_000), Reason.NO_MATCHING_GPU, id="share-over-gpu-memory"),
    ],
)
def test_shapes_no_node_can_serve(fleet_node: Node, shape: Shape, reason: Reason) -> None:
    plan = run(snapshot(fleet_node), req("r", shape))
    assert plan.pending_reason("r") is reason
    assert plan.pending[0].message


def test_a_request_that_can_never_fit_says_what_to_change() -> None:
    """More whole GPUs than any matching node has: the most one node has, and to ask for more nodes; a region
    the fleet lacks: the fleet's regions. Other causes keep their general message."""
    plan = run(snapshot(node("n1"), mig_node("m1")), req("r", WholeGpus(9)))
    assert plan.pending[0].message == (
        "no matching node has 9 GPUs (at most 8 on one node): ask for 8 or fewer per node, on more nodes"
    )
    mars = Constraints(regions=frozenset({"mars-1"}))
    plan = run(snapshot(*CONSTRAINT_FLEET), req("r", constraints=mars))
    assert plan.pending[0].message == "no node in region mars-1; the fleet's regions: ap-southeast, cn-north"
    plan = run(snapshot(node("n1")), req("r", MigSlice("3g.40gb")))
    assert plan.pending[0].message == "no GPU in the fleet matches the selector and shape"


NEVER_FITS_FLEET = (
    node("a1"),
    node("a2", where="cn-north/z2/pod-b/leaf-07"),
    node("b1", gpus=4, where="eu-west/z1/pod-a/leaf-01"),
    node("c1", model="A100-40GB", gpus=4, where="ap-southeast/z1/pod-a/leaf-01"),
)


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.integers(1, 10),
    nodes=st.integers(1, 4),
    model=st.sampled_from(["", "H100-SXM-80GB", "A100-40GB", "H200-141GB"]),
    regions=st.sets(st.sampled_from(["cn-north", "eu-west", "ap-southeast"]), max_size=2),
    cpu_milli=st.sampled_from([0, 64_000, 65_000]),
)
def test_never_fits_says_so_exactly_when_an_empty_fleet_cannot_place_the_request(
    gpus: int, nodes: int, model: str, regions: set[str], cpu_milli: int
) -> None:
    """What a new rental is refused for: `never_fits` is None exactly when the request is placed on the
    whole fleet with every node empty, and otherwise carries the reason placement gives."""
    request = req(
        "r",
        WholeGpus(gpus),
        node_count=nodes,
        cpu_milli=cpu_milli,
        selector=GpuSelector(models=frozenset({model}) if model else frozenset()),
        constraints=Constraints(regions=frozenset(regions)),
    )
    why = never_fits(snapshot(*NEVER_FITS_FLEET), request)
    placed_on_empty = place(snapshot(*NEVER_FITS_FLEET), request, BestFitPolicy())
    assert (why is None) == isinstance(placed_on_empty, Placement), (why, placed_on_empty)
    if why is not None:
        assert isinstance(placed_on_empty, Pending) and why.reason is placed_on_empty.reason
        assert why.message == placed_on_empty.message


def test_a_whole_gpu_on_a_shared_node_needs_an_untouched_gpu() -> None:
    snap = snapshot(shared("s1", gpus=2))
    queue = [
        req("share", GpuShare(100, 1024), submitted_at_s=0),
        req("whole", WholeGpus(1), submitted_at_s=1),
        req("more", WholeGpus(1), submitted_at_s=2),
    ]
    plan = run(snap, *queue)
    share_gpu = placed(plan, "share").nodes[0].slices[0].gpu_index
    assert placed(plan, "whole").nodes[0].slices[0].gpu_index != share_gpu
    assert plan.pending_reason("more") is Reason.NO_CAPACITY


# --- shares -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "fits"),
    [
        pytest.param([GpuShare(500, 1024)] * 3, 2, id="milli-limit"),
        pytest.param([GpuShare(300)] * 4, 3, id="milli-limit-no-memory"),
        pytest.param([GpuShare(100, 20 * 1024)] * 3, 2, id="memory-limit"),
        pytest.param([GpuShare(600, 1024), GpuShare(400, 47 * 1024)], 2, id="exactly-full"),
        pytest.param([GpuShare(999, L40S_MIB), GpuShare(1, 1)], 1, id="memory-full-milli-left"),
    ],
)
@every_policy
def test_shares_fill_one_gpu_up_to_its_compute_and_memory(
    shapes: list[GpuShare], fits: int, policy: str
) -> None:
    queue = [req(f"r{i}", shape, submitted_at_s=i) for i, shape in enumerate(shapes)]
    plan = run(snapshot(shared("s1")), *queue, policy=policy)
    assert [p.request_id for p in plan.placements] == [f"r{i}" for i in range(fits)]
    assert all(p.reason is Reason.NO_CAPACITY for p in plan.pending)
    for request in queue[:fits]:
        (piece,) = placed(plan, request.id).nodes[0].slices
        assert (piece.milli, piece.memory_mib, piece.mig_profile) == (
            request.shape.milli,
            request.shape.memory_mib,
            None,
        )


# --- MIG --------------------------------------------------------------------------------------------------


@every_policy
def test_an_uncarved_gpu_is_repartitioned_for_a_mig_request(policy: str) -> None:
    plan = run(snapshot(mig_node("m1")), req("r", MigSlice("3g.40gb")), policy=policy)
    placement = placed(plan, "r")
    (piece,) = placement.nodes[0].slices
    assert piece.mig_profile == "3g.40gb" and piece.mig_start in (0, 4)
    assert (piece.milli, piece.memory_mib) == (3000 // 7, 40 * 1024)
    assert placement.repartitions == (Repartition("m1", 0, (), (piece.mig_start, "3g.40gb")),)


@every_policy
def test_an_idle_instance_is_reused_without_repartition(policy: str) -> None:
    plan = run(
        snapshot(mig_node("m1", (("3g.40gb", "3g.40gb"),))), req("r", MigSlice("3g.40gb")), policy=policy
    )
    placement = placed(plan, "r")
    assert placement.nodes[0].slices[0].mig_start in (0, 4)
    assert placement.repartitions == ()


SMALL = ("4g.40gb", "2g.20gb", "1g.10gb")


@pytest.mark.parametrize("policy", [name for name in POLICIES if name != "random"])
@pytest.mark.parametrize(
    ("profile", "on_m1", "on_m2"),
    [
        ("7g.80gb", SMALL, ("7g.80gb",)),
        ("3g.40gb", SMALL, ("3g.40gb", "3g.40gb")),
        ("1g.10gb", ("4g.40gb", "3g.40gb"), SMALL),
    ],
)
def test_a_mig_request_takes_an_idle_instance_on_another_node_before_carving_one(
    policy: str, profile: str, on_m1: tuple[str, ...], on_m2: tuple[str, ...]
) -> None:
    """m1 is first, its GPUs carved into idle instances of other profiles (the demo's a100-mig-01): a
    request whose profile idles on m2 goes there; before, the policies' scores sent it to m1 and destroyed
    m1's idle instances to carve one."""
    snap = snapshot(mig_node("m1", (on_m1, on_m1)), mig_node("m2", (on_m2,)))
    placement = placed(run(snap, req("r", MigSlice(profile)), policy=policy), "r")
    assert placement.nodes[0].node == "m2" and placement.repartitions == ()


@pytest.mark.parametrize("policy", [name for name in POLICIES if name != "random"])
def test_on_one_node_a_mig_request_takes_the_gpu_with_an_idle_instance(policy: str) -> None:
    layouts = (("4g.40gb", "2g.20gb", "1g.10gb"), ("4g.40gb", "3g.40gb"), ("4g.40gb", "2g.20gb", "1g.10gb"))
    placement = placed(
        run(snapshot(mig_node("m1", layouts)), req("r", MigSlice("3g.40gb")), policy=policy), "r"
    )
    assert placement.nodes[0].slices[0].gpu_index == 1 and placement.repartitions == ()


def test_an_idle_7g_is_destroyed_to_carve_a_smaller_instance() -> None:
    plan = run(snapshot(mig_node("m1", (("7g.80gb",),))), req("r", MigSlice("3g.40gb")))
    assert placed(plan, "r").repartitions == (Repartition("m1", 0, ((0, "7g.80gb"),), (4, "3g.40gb")),)


def test_seven_1g_instances_fit_one_a100_and_the_eighth_waits() -> None:
    queue = [req(f"r{i}", MigSlice("1g.10gb"), submitted_at_s=i) for i in range(8)]
    plan = run(snapshot(mig_node("m1")), *queue)
    starts = sorted(placed(plan, f"r{i}").nodes[0].slices[0].mig_start for i in range(7))
    assert starts == list(range(7))
    assert plan.pending_reason("r7") is Reason.NO_CAPACITY


def test_a_busy_instance_is_never_destroyed() -> None:
    snap = snapshot(mig_node("m1", (("7g.80gb",),)))
    plan = run(snap, req("big", MigSlice("7g.80gb")), req("small", MigSlice("1g.10gb"), submitted_at_s=1))
    assert placed(plan, "big").repartitions == ()
    assert plan.pending_reason("small") is Reason.NO_CAPACITY


@every_policy
def test_a_gpu_is_laid_out_as_its_host_reports_not_as_the_fleet_declares(policy: str) -> None:
    """The fleet declares one idle 7g; the host was carved by hand into a 4g at 0 and a 1g at 6: a 1g
    slice reuses the host's instance at slot 6 with no repartition, and a 7g must destroy both."""
    fleet = Fleet(REGIONS, (mig_node("m1", (("7g.80gb",),)),))
    carved = {"m1": {0: ((0, "4g.40gb", False), (6, "1g.10gb", False))}}
    placement = placed(
        run(Snapshot(fleet, CATALOG, carved), req("r", MigSlice("1g.10gb")), policy=policy), "r"
    )
    assert placement.nodes[0].slices[0].mig_start == 6 and placement.repartitions == ()
    snap = Snapshot(fleet, CATALOG, carved)
    whole = placed(run(snap, req("w", MigSlice("7g.80gb")), policy=policy), "w")
    assert whole.repartitions == (Repartition("m1", 0, ((0, "4g.40gb"), (6, "1g.10gb")), (0, "7g.80gb")),)


@every_policy
def test_an_instance_something_else_uses_is_neither_placed_on_nor_destroyed(policy: str) -> None:
    """The host's 1g at slot 6 runs processes no rental was given: a 1g.10gb is made at slot 4 or 5
    (nothing destroyed) rather than take it, and a 7g.80gb, which would need it destroyed, does not fit."""
    fleet = Fleet(REGIONS, (mig_node("m1", (("7g.80gb",),)),))
    carved = {"m1": {0: ((0, "4g.40gb", False), (6, "1g.10gb", True))}}
    placement = placed(
        run(Snapshot(fleet, CATALOG, carved), req("r", MigSlice("1g.10gb")), policy=policy), "r"
    )
    ((repartition,),) = [placement.repartitions]
    assert repartition.destroyed == () and repartition.created in ((4, "1g.10gb"), (5, "1g.10gb"))
    plan = run(Snapshot(fleet, CATALOG, carved), req("w", MigSlice("7g.80gb")), policy=policy)
    assert plan.pending_reason("w") is Reason.NO_CAPACITY


def test_a_gpu_the_host_did_not_report_keeps_the_declared_layout() -> None:
    fleet = Fleet(REGIONS, (mig_node("m1", (("7g.80gb",), ("7g.80gb",))),))
    snap = Snapshot(fleet, CATALOG, {"m1": {1: ()}})
    plan = run(snap, req("a", MigSlice("7g.80gb")), req("b", MigSlice("7g.80gb"), submitted_at_s=1))
    by_gpu = {placed(plan, r).nodes[0].slices[0].gpu_index: placed(plan, r).repartitions for r in "ab"}
    assert by_gpu == {0: (), 1: (Repartition("m1", 1, (), (0, "7g.80gb")),)}


@pytest.mark.parametrize(
    ("reported", "problem"),
    [
        pytest.param(
            {0: ((1, "4g.40gb", False),)}, "4g.40gb cannot start at slot 1", id="start-nvidia-forbids"
        ),
        pytest.param({0: ((0, "4g.40gb", False), (2, "2g.20gb", True))}, "overlaps", id="overlap"),
        pytest.param({0: ((0, "3g.48gb", False),)}, "no MIG profile '3g.48gb'", id="another-model's-profile"),
        pytest.param({3: ((0, "7g.80gb", False),)}, "no GPU 3 (it has 2)", id="no-such-gpu"),
    ],
)
def test_a_reported_layout_that_cannot_be_is_left_out_with_the_reason(
    reported: dict[int, tuple[tuple[int, str, bool], ...]], problem: str
) -> None:
    two = mig_node("m1", ((), ()))
    good = {1: ((6, "1g.10gb", True),)}
    kept, problems = host_layouts(two, CATALOG, {**reported, **good})
    assert kept == good
    assert len(problems) == 1 and problem in problems[0] and problems[0].startswith("m1")


def test_a_layout_reported_for_a_node_the_fleet_does_not_carve_is_left_out() -> None:
    kept, problems = host_layouts(node("h1", gpus=1), CATALOG, {0: ((0, "7g.80gb", False),)})
    assert kept == {} and problems == ["h1: not a MIG node in the fleet"]


# --- selector, residency, constraints, size ----------------------------------------------------------------

SELECTOR_FLEET = (
    node("h100", model="H100-SXM-80GB"),
    node("h200", model="H200-141GB", where="cn-north/z1/pod-a/leaf-02"),
    node("mi300", model="MI300X", where="cn-north/z1/pod-a/leaf-03"),
)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param(GpuSelector(models=frozenset({"H200-141GB"})), "h200", id="model-name"),
        pytest.param(GpuSelector(models=frozenset({"h100"})), "h100", id="family-any-case"),
        pytest.param(GpuSelector(vendors=frozenset({"AMD"})), "mi300", id="vendor"),
        pytest.param(GpuSelector(min_memory_gib=141), "h200", id="min-memory"),
        pytest.param(GpuSelector(models=frozenset({"A100"})), Reason.NO_MATCHING_GPU, id="absent-family"),
        pytest.param(GpuSelector(vendors=frozenset({"huawei"})), Reason.NO_MATCHING_GPU, id="absent-vendor"),
        pytest.param(GpuSelector(min_memory_gib=200), Reason.NO_MATCHING_GPU, id="memory-too-high"),
        pytest.param(
            GpuSelector(models=frozenset({"H100"}), min_memory_gib=100),
            Reason.NO_MATCHING_GPU,
            id="both-must-hold",
        ),
    ],
)
@every_policy
def test_the_selector_picks_the_gpu(selector: GpuSelector, expected: str | Reason, policy: str) -> None:
    plan = run(snapshot(*SELECTOR_FLEET), req("r", selector=selector), policy=policy)
    if isinstance(expected, Reason):
        assert plan.pending_reason("r") is expected
    else:
        assert nodes_of(plan, "r") == [expected]


@every_policy
def test_residency_never_places_outside_the_allowed_jurisdictions(policy: str) -> None:
    fleet = (node("cn1", gpus=2), node("eu1", gpus=2, where="eu-west/z1/pod-a/leaf-01"), node("cn2", gpus=2))
    eu_only = Constraints(jurisdictions=frozenset({"EU"}))
    queue = [req(f"r{i}", constraints=eu_only, submitted_at_s=i) for i in range(4)]
    plan = run(snapshot(*fleet), *queue, policy=policy)
    assert [p.request_id for p in plan.placements] == ["r0", "r1"]
    assert {a.node for p in plan.placements for a in p.nodes} == {"eu1"}
    assert {p.reason for p in plan.pending} == {Reason.NO_CAPACITY}


def test_residency_with_no_gpu_in_the_jurisdiction_says_so() -> None:
    plan = run(
        snapshot(node("cn1")), req("r", constraints=Constraints(jurisdictions=frozenset({"EU", "SG"})))
    )
    assert plan.pending_reason("r") is Reason.RESIDENCY
    assert "EU, SG" in plan.pending[0].message


CONSTRAINT_FLEET = (
    node("plain"),
    node(
        "ib", provider="lion-city-gpu", labels={"interconnect": "ib"}, where="ap-southeast/z1/pod-a/leaf-01"
    ),
)


@pytest.mark.parametrize(
    ("constraints", "expected"),
    [
        pytest.param(Constraints(regions=frozenset({"ap-southeast"})), "ib", id="region"),
        pytest.param(Constraints(providers=frozenset({"lion-city-gpu"})), "ib", id="provider"),
        pytest.param(Constraints(labels={"interconnect": "ib"}), "ib", id="label"),
        pytest.param(
            Constraints(regions=frozenset({"eu-west"})), Reason.CONSTRAINTS, id="region-without-nodes"
        ),
        pytest.param(Constraints(providers=frozenset({"acme"})), Reason.CONSTRAINTS, id="unknown-provider"),
        pytest.param(Constraints(labels={"interconnect": "roce"}), Reason.CONSTRAINTS, id="label-value"),
        pytest.param(
            Constraints(jurisdictions=frozenset({"CN"}), labels={"interconnect": "ib"}),
            Reason.CONSTRAINTS,
            id="residency-then-label",
        ),
    ],
)
def test_constraints_rule_nodes_out(constraints: Constraints, expected: str | Reason) -> None:
    plan = run(snapshot(*CONSTRAINT_FLEET), req("r", constraints=constraints))
    if isinstance(expected, Reason):
        assert plan.pending_reason("r") is expected
    else:
        assert nodes_of(plan, "r") == [expected]


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        pytest.param(
            req(
                "r",
                WholeGpus(1),
                selector=GpuSelector(models=frozenset({"A100"})),
                constraints=Constraints(jurisdictions=frozenset({"EU"})),
            ),
            Reason.NO_MATCHING_GPU,
            id="selector-before-residency",
        ),
        pytest.param(
            req("r", constraints=Constraints(jurisdictions=frozenset({"EU"}), providers=frozenset({"x"}))),
            Reason.RESIDENCY,
            id="residency-before-constraints",
        ),
        pytest.param(
            req("r", cpu_milli=1_000_000, constraints=Constraints(providers=frozenset({"x"}))),
            Reason.CONSTRAINTS,
            id="constraints-before-size",
        ),
    ],
)
def test_the_first_filter_that_rules_everything_out_is_the_reason(request_: Request, reason: Reason) -> None:
    assert run(snapshot(node("n1")), request_).pending_reason("r") is reason


@pytest.mark.parametrize(
    ("cpu", "memory"),
    [pytest.param(64_001, 0, id="cpu"), pytest.param(0, 512 * 1024 + 1, id="memory")],
)
def test_a_request_bigger_than_every_node_is_node_too_small(cpu: int, memory: int) -> None:
    plan = run(snapshot(node("n1"), node("n2")), req("r", cpu_milli=cpu, memory_mib=memory))
    assert plan.pending_reason("r") is Reason.NODE_TOO_SMALL


@pytest.mark.parametrize(
    ("cpu", "memory"),
    [pytest.param(40_000, 0, id="cpu"), pytest.param(0, 300 * 1024, id="memory")],
)
@every_policy
def test_host_cpu_and_memory_in_use_leave_free_gpus_unplaceable(cpu: int, memory: int, policy: str) -> None:
    queue = [req(f"r{i}", cpu_milli=cpu, memory_mib=memory, submitted_at_s=i) for i in range(2)]
    plan = run(snapshot(node("n1")), *queue, policy=policy)
    assert nodes_of(plan, "r0") == ["n1"]
    assert plan.pending_reason("r1") is Reason.NO_CAPACITY


# --- gangs ------------------------------------------------------------------------------------------------


@every_policy
def test_a_gang_that_cannot_fit_whole_takes_nothing(policy: str) -> None:
    snap = snapshot(node("n1"), node("n2"), node("n3", gpus=4))
    before = [n.key for n in snap.nodes]
    plan = run(snap, req("g", WholeGpus(8), node_count=3, cpu_milli=1000), policy=policy)
    assert plan.pending_reason("g") is Reason.GANG_TOO_LARGE  # n3 can never hold 8 GPUs
    assert "at most 2 matching nodes of one GPU model in one region" in plan.pending[0].message
    assert [n.key for n in snap.nodes] == before
    assert snap.allocated_milli() == 0


def test_a_gang_with_no_fitting_node_at_all_is_no_capacity() -> None:
    snap = snapshot(node("n1"), node("n2"))
    plan = run(
        snap,
        req("a", WholeGpus(8)),
        req("b", WholeGpus(8)),
        req("g", WholeGpus(1), node_count=2, tier=Tier.SPOT),
    )
    assert plan.pending_reason("g") is Reason.NO_CAPACITY


@pytest.mark.parametrize(
    ("wheres", "expected_subtree", "expected_nodes"),
    [
        pytest.param(
            ["cn-north/z1/pod-a/leaf-01", "cn-north/z1/pod-a/leaf-02", "cn-north/z1/pod-a/leaf-02"],
            "cn-north/z1/pod-a/leaf-02",
            {"n1", "n2"},
            id="one-leaf-over-spreading",
        ),
        pytest.param(
            ["cn-north/z1/pod-a/leaf-01", "cn-north/z1/pod-b/leaf-02", "cn-north/z1/pod-b/leaf-03"],
            "cn-north/z1/pod-b",
            {"n1", "n2"},
            id="falls-back-to-a-pod",
        ),
        pytest.param(
            ["cn-north/z1/pod-a/leaf-01", "cn-north/z2/pod-b/leaf-02", "cn-north/z2/pod-c/leaf-03"],
            "cn-north/z2",
            {"n1", "n2"},
            id="falls-back-to-a-zone",
        ),
        pytest.param(
            ["eu-west/z1/pod-a/leaf-01", "cn-north/z1/pod-b/leaf-02", "cn-north/z2/pod-c/leaf-03"],
            "cn-north",
            {"n1", "n2"},
            id="falls-back-to-a-region",
        ),
    ],
)
@every_policy
def test_a_gang_goes_to_the_smallest_subtree_holding_all_its_nodes(
    wheres: list[str], expected_subtree: str, expected_nodes: set[str], policy: str
) -> None:
    snap = snapshot(*(node(f"n{i}", where=w) for i, w in enumerate(wheres)))
    plan = run(snap, req("g", WholeGpus(8), node_count=2), policy=policy)
    placement = placed(plan, "g")
    assert placement.subtree == expected_subtree
    assert set(nodes_of(plan, "g")) == expected_nodes
    assert all(len(a.slices) == 8 for a in placement.nodes)


def test_a_gang_across_regions_never_fits() -> None:
    snap = snapshot(node("cn"), node("eu", where="eu-west/z1/pod-a/leaf-01"))
    plan = run(snap, req("g", WholeGpus(1), node_count=2))
    assert plan.pending_reason("g") is Reason.GANG_TOO_LARGE
    assert snap.allocated_milli() == 0


@every_policy
def test_a_family_gang_takes_nodes_of_one_model_even_in_a_wider_subtree(policy: str) -> None:
    """`H100` allows SXM and PCIe; one SXM and one PCIe share a leaf, two PCIe share only a zone. The gang
    lands on the two PCIe nodes: its ranks form one communicator and wait for the slowest, so never a mix."""
    snap = snapshot(
        node("sxm", where="cn-north/z1/pod-a/leaf-01"),
        node("pcie-1", model="H100-PCIe", where="cn-north/z1/pod-a/leaf-01"),
        node("pcie-2", model="H100-PCIe", where="cn-north/z1/pod-b/leaf-02"),
    )
    family = GpuSelector(models=frozenset({"H100"}))
    plan = run(snap, req("g", WholeGpus(8), node_count=2, selector=family), policy=policy)
    assert set(nodes_of(plan, "g")) == {"pcie-1", "pcie-2"}
    assert placed(plan, "g").subtree == "cn-north/z1"


@every_policy
def test_a_gang_with_no_model_waits_rather_than_mixing_models(policy: str) -> None:
    """A T4 node and an H100 node are free in one leaf: a two-node gang that names no model waits for two
    of one model (`gang_incomplete`), and is refused outright where no region has them (`gang_too_large`)."""
    snap = snapshot(node("t4", model="T4", gpus=4), node("h100-1", gpus=4), node("h100-2", gpus=4))
    busy = req("busy", WholeGpus(4), selector=GpuSelector(models=frozenset({"H100-SXM-80GB"})))
    plan = run(snap, busy, req("g", WholeGpus(4), node_count=2, submitted_at_s=1), policy=policy)
    assert plan.pending_reason("g") is Reason.GANG_INCOMPLETE
    assert plan.pending[0].message == "1 nodes of one GPU model fit, 2 needed in one subtree"
    empty = snapshot(node("t4", model="T4", gpus=4), node("h100-1", gpus=4), node("h100-2", gpus=4))
    refused = never_fits(empty, req("three", WholeGpus(4), node_count=3))
    assert refused is not None and refused.reason is Reason.GANG_TOO_LARGE
    assert refused.message.startswith("at most 2 matching nodes of one GPU model in one region")


def test_a_single_node_placement_has_no_subtree() -> None:
    assert placed(run(snapshot(node("n1")), req("r")), "r").subtree == ""


# --- queue order ------------------------------------------------------------------------------------------


def test_queue_order_is_tier_then_bid_then_age_then_id() -> None:
    queue = [
        req("spot-low", tier=Tier.SPOT, bid_micros_per_hour=1_000_000, submitted_at_s=0),
        req("spot-high", tier=Tier.SPOT, bid_micros_per_hour=9_000_000, submitted_at_s=5),
        req("od-late", tier=Tier.ON_DEMAND, submitted_at_s=9),
        req("od-b", tier=Tier.ON_DEMAND, submitted_at_s=1),
        req("od-a", tier=Tier.ON_DEMAND, submitted_at_s=1),
        req("reserved", tier=Tier.RESERVED, submitted_at_s=20),
    ]
    assert [r.id for r in order_queue(queue)] == [
        "reserved",
        "od-a",
        "od-b",
        "od-late",
        "spot-high",
        "spot-low",
    ]
    market = req("spot-market", tier=Tier.SPOT, submitted_at_s=30)  # no bid: it takes the spot price
    assert [r.id for r in order_queue([*queue, market])][-3:] == ["spot-market", "spot-high", "spot-low"]


@pytest.mark.parametrize(
    ("queue", "winner"),
    [
        pytest.param(
            [
                req("spot", tier=Tier.SPOT, bid_micros_per_hour=10**9, submitted_at_s=0),
                req("on-demand", tier=Tier.ON_DEMAND, submitted_at_s=1),
                req("reserved", tier=Tier.RESERVED, submitted_at_s=2),
            ],
            "reserved",
            id="reserved-first",
        ),
        pytest.param(
            [
                req("spot", tier=Tier.SPOT, bid_micros_per_hour=10**9, submitted_at_s=0),
                req("on-demand", tier=Tier.ON_DEMAND, submitted_at_s=1),
            ],
            "on-demand",
            id="on-demand-before-spot",
        ),
        pytest.param(
            [
                req("low", tier=Tier.SPOT, bid_micros_per_hour=100, submitted_at_s=0),
                req("high", tier=Tier.SPOT, bid_micros_per_hour=200, submitted_at_s=1),
            ],
            "high",
            id="spot-by-bid",
        ),
    ],
)
@every_policy
def test_the_scarce_gpu_goes_to_the_first_in_queue_order(
    queue: list[Request], winner: str, policy: str
) -> None:
    plan = run(snapshot(node("n1", gpus=1)), *queue, policy=policy)
    assert [p.request_id for p in plan.placements] == [winner]
    assert {p.reason for p in plan.pending} == {Reason.NO_CAPACITY}


# --- snapshot operations ----------------------------------------------------------------------------------


def test_a_cordoned_node_gets_no_placements() -> None:
    snap = snapshot(node("n1"), node("n2"))
    snap.set_schedulable("n1", False)
    assert nodes_of(run(snap, req("a")), "a") == ["n2"]
    snap.set_schedulable("n2", False)
    assert run(snap, req("b")).pending_reason("b") is Reason.NO_CAPACITY
    snap.set_schedulable("n1", True)
    assert nodes_of(run(snap, req("c")), "c") == ["n1"]


def test_cordoning_twice_is_harmless() -> None:
    snap = snapshot(node("n1"))
    snap.set_schedulable("n1", False)
    snap.set_schedulable("n1", False)
    snap.set_schedulable("n1", True)
    snap.set_schedulable("n1", True)
    assert nodes_of(run(snap, req("a")), "a") == ["n1"]


@pytest.mark.parametrize(
    ("fleet_node", "shape"),
    [
        pytest.param(node("n1", gpus=2), WholeGpus(2), id="whole"),
        pytest.param(shared("n1"), GpuShare(700, 30 * 1024), id="share"),
        pytest.param(mig_node("n1"), MigSlice("4g.40gb"), id="mig"),
    ],
)
def test_release_returns_capacity_and_its_undo_takes_it_again(fleet_node: Node, shape: Shape) -> None:
    snap = snapshot(fleet_node)
    policy = BestFitPolicy()
    first = place(snap, req("a", shape, cpu_milli=60_000, memory_mib=1024), policy)
    assert isinstance(first, Placement)
    taken = snap.nodes[0].key
    assert isinstance(place(snap, req("b", shape), policy), Pending)

    undo = snap.release(first.nodes[0])
    state = snap.nodes[0]
    assert (state.cpu_free, state.memory_free) == (64_000, 512 * 1024)
    assert snap.allocated_milli() == 0
    undo()
    assert snap.nodes[0].key == taken
    assert isinstance(place(snap, req("c", shape), policy), Pending)

    snap.release(first.nodes[0])
    again = place(snap, req("d", shape), policy)
    assert isinstance(again, Placement)
    assert again.repartitions == (), "a released MIG instance stays, idle, for the next tenant"


def test_a_gang_larger_than_any_region_never_fits_and_says_so() -> None:
    """Nine 8-GPU nodes in one region when the region has eight: `gang_too_large` (a never-fits reason,
    so admission does not let it block the queue), not `gang_incomplete`."""
    from suanli.domain.queueing import NEVER_FITS

    fleet = _gang_fleet_for_ceiling()
    snapshot = Snapshot(fleet, CATALOG)
    request = Request("big", WholeGpus(8), node_count=9)
    outcome = place(snapshot, request, BestFitPolicy())
    assert isinstance(outcome, Pending) and outcome.reason is Reason.GANG_TOO_LARGE
    assert "at most 8" in outcome.message and outcome.reason in NEVER_FITS
    one = place(snapshot, Request("one", WholeGpus(8)), BestFitPolicy())
    assert isinstance(one, Placement)
    waits = place(snapshot, Request("all", WholeGpus(8), node_count=8), BestFitPolicy())
    assert isinstance(waits, Pending) and waits.reason is Reason.GANG_INCOMPLETE  # fits once "one" ends


def _gang_fleet_for_ceiling() -> Fleet:
    nodes = tuple(
        Node(f"n{i}", "r1", ("r1", "z1", "p1", f"l{i // 4}"), 64_000, 512_000, "H100-SXM-80GB", 8)
        for i in range(8)
    )
    return Fleet({"r1": Region("r1", "XX", 400.0, 1.2)}, nodes)
