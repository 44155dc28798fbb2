"""Preemption: cheapest strictly lower-tier victims, whole gangs only, notice before the kill, no cycles."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog_data import CATALOG
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import NodeAllocation, Placement, Reason, Slice
from suanli.domain.policies import BestFitPolicy
from suanli.domain.preemption import PreemptionConfig, choose_victims, kept_through_maintenance
from suanli.domain.queue_order import Mode, Order, QueueConfig
from suanli.domain.queueing import admit
from suanli.domain.request import MigSlice, Request, Tier, WholeGpus
from suanli.domain.running import SPOT_FLOOR, Running
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

REGION = Region("r", "US", 400.0, 1.2)
POLICY = BestFitPolicy()


def snapshot_of(nodes: int, gpus: int) -> Snapshot:
    fleet = Fleet(
        {"r": REGION},
        tuple(
            Node(f"n{i}", "r", ("r", "z", "p", "l"), 64_000, 512_000, "H100-SXM-80GB", gpus, GpuMode.WHOLE)
            for i in range(nodes)
        ),
    )
    return Snapshot(fleet, CATALOG)


def start(
    snapshot: Snapshot, rid: str, gpus: int, tier: Tier, at: float, nodes: int = 1, bid=None
) -> Running:
    request = Request(rid, WholeGpus(gpus), node_count=nodes, tier=tier, bid_micros_per_hour=bid)
    placement = place(snapshot, request, POLICY)
    assert isinstance(placement, Placement)
    return Running(request, placement, at)


def state(snapshot: Snapshot):
    return [(n.cpu_free, n.memory_free, tuple(n.gpus)) for n in snapshot.nodes], snapshot.allocated_milli()


def test_picks_the_victim_that_loses_the_fewest_gpu_seconds():
    snap = snapshot_of(1, 8)
    old = start(snap, "old", 4, Tier.SPOT, at=0)
    young = start(snap, "young", 4, Tier.SPOT, at=90)
    asked = Request("od", WholeGpus(4), tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [old, young], POLICY, now=100)
    assert decision is not None
    assert [v.request_id for v in decision.victims] == ["young"]
    assert decision.victims[0].lost_gpu_s == 40


def test_victims_started_milliseconds_apart_lose_the_same_and_the_lower_bid_is_evicted():
    """Two spot rentals placed by one cycle, started by their agents 35 ms apart: the milliseconds decided
    (the later one, bid 1.8, was evicted, not the one bidding 1.6); now their run times count in whole
    seconds, so they lose the same and the lower bid goes. A second more of run time still decides."""
    snap = snapshot_of(1, 8)
    low = start(snap, "low", 4, Tier.SPOT, at=10.0, bid=1_600_000)
    high = start(snap, "high", 4, Tier.SPOT, at=10.035, bid=1_800_000)
    asked = Request("od", WholeGpus(4), tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [low, high], POLICY, now=40.0)
    assert decision is not None
    assert [(v.request_id, v.lost_gpu_s) for v in decision.victims] == [("low", 120.0)]  # lost: exact
    later = replace(high, started_at_s=11.5)
    decision = choose_victims(snap, asked, [low, later], POLICY, now=40.0)
    assert decision is not None and [v.request_id for v in decision.victims] == ["high"]


def test_the_cheapest_set_may_be_on_a_node_whose_cheapest_victim_is_not_the_fleets():
    """The fleet's cheapest victim (a1, 10 GPU-s) shares its node with a dear one (a2, 60); the other node's
    two cost 20 and 55. Freeing a node: {a1, a2} loses 70 GPU-s, {b1, b2} 75."""
    snap = snapshot_of(2, 8)
    now = 100.0
    a1 = start(snap, "a1", 4, Tier.SPOT, at=now - 10 / 4)
    a2 = start(snap, "a2", 4, Tier.SPOT, at=now - 60 / 4)
    b1 = start(snap, "b1", 2, Tier.SPOT, at=now - 20 / 2)
    b2 = start(snap, "b2", 6, Tier.SPOT, at=now - 55 / 6)
    assert {a.node for r in (a1, a2) for a in r.placement.nodes} == {"n0"}
    decision = choose_victims(
        snap, Request("od", WholeGpus(8), tier=Tier.ON_DEMAND), [a1, a2, b1, b2], POLICY, now
    )
    assert decision is not None
    assert sorted(v.request_id for v in decision.victims) == ["a1", "a2"]
    assert sum(v.lost_gpu_s for v in decision.victims) == 70


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 100)), min_size=1, max_size=8),
    asked=st.integers(1, 8),
)
def test_victims_cost_no_more_than_any_set_that_makes_room(sizes, asked):
    """Against every subset of the running spot rentals (brute force): none that lets the request fit loses
    fewer GPU-seconds than the chosen victims (`set_cost`)."""
    from itertools import combinations

    from suanli.domain.running import set_cost
    from suanli.domain.victim_search import fits_without

    snap = snapshot_of(3, 8)
    running = []
    for i, (gpus, age) in enumerate(sizes):
        request = Request(f"s{i}", WholeGpus(gpus), tier=Tier.SPOT)
        placement = place(snap, request, POLICY)
        if isinstance(placement, Placement):
            running.append(Running(request, placement, 100.0 - age))
    request = Request("od", WholeGpus(asked), tier=Tier.ON_DEMAND)
    if fits_without(snap, request, [], POLICY) is not None:
        return  # it fits already: no victims are needed
    decision = choose_victims(snap, request, running, POLICY, 100.0)
    room = [
        set_cost(chosen, 100.0)
        for k in range(1, len(running) + 1)
        for chosen in combinations(running, k)
        if fits_without(snap, request, list(chosen), POLICY) is not None
    ]
    if decision is None:
        assert room == []
        return
    victims = [r for r in running if r.request.id in {v.request_id for v in decision.victims}]
    assert set_cost(victims, 100.0)[:4] == min(room)[:4]


def nodes_of(*rentals: Running) -> set[str]:
    return {a.node for r in rentals for a in r.placement.nodes}


def test_a_gang_preemptor_clears_the_nodes_whose_victims_cost_least_in_all():
    """A 2-node gang of 8 GPUs on three full nodes. The greedy pass takes victims cheapest first (a1 10, b1
    11, c1 45, c2 45, a2 50 GPU-seconds) until two nodes are clear (n0, n2) and drops b1: 150 lost. Clearing
    n0 and n1 instead loses 10 + 50 + 11 + 55 = 126."""
    snap = snapshot_of(3, 8)
    now = 100.0
    a1 = start(snap, "a1", 1, Tier.SPOT, at=now - 10)
    a2 = start(snap, "a2", 7, Tier.SPOT, at=now - 50 / 7)
    b1 = start(snap, "b1", 1, Tier.SPOT, at=now - 11)
    b2 = start(snap, "b2", 7, Tier.SPOT, at=now - 55 / 7)
    c1 = start(snap, "c1", 4, Tier.SPOT, at=now - 45 / 4)
    c2 = start(snap, "c2", 4, Tier.SPOT, at=now - 45 / 4)
    assert (nodes_of(a1, a2), nodes_of(b1, b2), nodes_of(c1, c2)) == ({"n0"}, {"n1"}, {"n2"})
    before = state(snap)
    asked = Request("gang", WholeGpus(8), node_count=2, tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [a1, a2, b1, b2, c1, c2], POLICY, now)
    assert state(snap) == before
    assert decision is not None
    assert sorted(v.request_id for v in decision.victims) == ["a1", "a2", "b1", "b2"]
    assert sum(v.lost_gpu_s for v in decision.victims) == pytest.approx(126)
    assert {a.node for a in decision.promised.nodes} == {"n0", "n1"}


def test_a_gang_victim_that_clears_two_nodes_is_counted_once():
    """A spot gang (4 GPUs on n0 and on n1, 80 GPU-seconds) shares each node with a 30 GPU-s rental; n2
    holds two of 20. For a 2-node gang of 8 GPUs the greedy pass ends on {r1, r2, p, gang}: 150 lost.
    Clearing n0 and n1 evicts the gang once with p and q: 140."""
    snap = snapshot_of(3, 8)
    now = 100.0
    gang = start(snap, "gang", 4, Tier.SPOT, at=now - 10, nodes=2)
    p = start(snap, "p", 4, Tier.SPOT, at=now - 30 / 4)
    q = start(snap, "q", 4, Tier.SPOT, at=now - 30 / 4)
    r1 = start(snap, "r1", 4, Tier.SPOT, at=now - 5)
    r2 = start(snap, "r2", 4, Tier.SPOT, at=now - 5)
    assert (nodes_of(gang), nodes_of(p), nodes_of(q), nodes_of(r1, r2)) == (
        {"n0", "n1"},
        {"n0"},
        {"n1"},
        {"n2"},
    )
    asked = Request("asked", WholeGpus(8), node_count=2, tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [gang, p, q, r1, r2], POLICY, now)
    assert decision is not None
    victims = {v.request_id: v for v in decision.victims}
    assert sorted(victims) == ["gang", "p", "q"]
    assert victims["gang"].gpus == 8  # both of its nodes, never half
    assert sum(v.lost_gpu_s for v in decision.victims) == pytest.approx(140)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.integers(2, 4),
    gang=st.tuples(st.integers(1, 4), st.integers(0, 100)),
    singles=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 100), st.sampled_from([Tier.SPOT, Tier.ON_DEMAND])),
        max_size=6,
    ),
    asked=st.tuples(st.integers(1, 4), st.integers(2, 3)),
)
def test_gang_victims_cost_no_more_than_any_set_that_makes_room(nodes, gang, singles, asked):
    """A gang preemptor on 2-4 nodes of 4 GPUs, among a spot gang victim (on two nodes) and one-node spot
    and on-demand rentals: the victims chosen let it fit, the gang victim goes whole, and on sizes within
    the search's bounds no subset of the rentals that lets it fit costs less (`set_cost`, brute force over
    every subset). Within the bounds: a 2-node preemptor and at most SEARCH_GANG_CLEARANCES rentals on a
    node (so no node has more minimal sets than it keeps), with every node's sets in the beam at once."""
    from itertools import combinations

    from suanli.domain.running import set_cost
    from suanli.domain.victim_search import SEARCH_GANG_BEAM, SEARCH_GANG_CLEARANCES, fits_without

    snap = snapshot_of(nodes, 4)
    now = 100.0
    running = []
    gang_gpus, gang_age = gang
    shapes = [("g", gang_gpus, gang_age, Tier.SPOT, 2)]
    shapes += [(f"s{i}", gpus, age, tier, 1) for i, (gpus, age, tier) in enumerate(singles)]
    for rid, gpus, age, tier, count in shapes:
        request = Request(rid, WholeGpus(gpus), node_count=count, tier=tier)
        placement = place(snap, request, POLICY)
        if isinstance(placement, Placement):
            running.append(Running(request, placement, now - age))
    per_node, count = asked
    request = Request("res", WholeGpus(per_node), node_count=count, tier=Tier.RESERVED)
    if fits_without(snap, request, [], POLICY) is not None:
        return  # it fits already: no victims are needed
    before = state(snap)
    decision = choose_victims(snap, request, running, POLICY, now)
    assert state(snap) == before
    room = [
        set_cost(chosen, now)
        for k in range(1, len(running) + 1)
        for chosen in combinations(running, k)
        if fits_without(snap, request, list(chosen), POLICY) is not None
    ]
    if decision is None:
        assert room == []
        return
    by_id = {r.request.id: r for r in running}
    victims = [by_id[v.request_id] for v in decision.victims]
    assert fits_without(snap, request, victims, POLICY) is not None
    assert all(v.gpus == by_id[v.request_id].gpus and v.keeps is None for v in decision.victims)
    rentals_on = [sum(1 for r in running if f"n{i}" in nodes_of(r)) for i in range(nodes)]
    within_bounds = (
        count == 2
        and max(rentals_on) <= SEARCH_GANG_CLEARANCES
        and nodes * SEARCH_GANG_CLEARANCES <= SEARCH_GANG_BEAM
    )
    if within_bounds:
        assert set_cost(victims, now)[:4] == pytest.approx(min(room)[:4])


def test_equal_loss_goes_to_the_lower_bid_and_lower_tier_goes_first():
    snap = snapshot_of(1, 8)
    rich = start(snap, "rich", 4, Tier.SPOT, at=50, bid=3_000_000)
    poor = start(snap, "poor", 4, Tier.SPOT, at=50, bid=1_000_000)
    asked = Request("od", WholeGpus(4), tier=Tier.ON_DEMAND)
    assert [v.request_id for v in choose_victims(snap, asked, [rich, poor], POLICY, 100).victims] == ["poor"]
    snap = snapshot_of(1, 8)  # no bid: it pays the spot price whatever it is, so it offers the most
    market = start(snap, "market", 4, Tier.SPOT, at=50)
    rich = start(snap, "rich", 4, Tier.SPOT, at=50, bid=3_000_000)
    assert [v.request_id for v in choose_victims(snap, asked, [market, rich], POLICY, 100).victims] == [
        "rich"
    ]
    snap = snapshot_of(1, 8)
    on_demand = start(snap, "od1", 4, Tier.ON_DEMAND, at=99)
    spot = start(snap, "spot", 4, Tier.SPOT, at=0)
    asked = Request("res", WholeGpus(4), tier=Tier.RESERVED)
    assert [v.request_id for v in choose_victims(snap, asked, [on_demand, spot], POLICY, 100).victims] == [
        "spot"
    ]


def test_notice_comes_before_the_kill_with_per_tier_deadlines():
    snap = snapshot_of(1, 8)
    victim = start(snap, "v", 8, Tier.SPOT, at=0)
    asked = Request("od", WholeGpus(8), tier=Tier.ON_DEMAND)
    default = choose_victims(snap, asked, [victim], POLICY, now=1000)
    assert default.victims[0].deadline_s == 1030  # 30 s notice by default
    custom = choose_victims(snap, asked, [victim], POLICY, 1000, PreemptionConfig(notice_s={Tier.SPOT: 120}))
    assert custom.victims[0].deadline_s == 1120
    assert custom.promised.request_id == "od" and custom.promised.gpus == 8


def test_a_gang_is_evicted_whole_and_the_snapshot_is_untouched():
    snap = snapshot_of(2, 4)
    gang = start(snap, "gang", 2, Tier.SPOT, at=90, nodes=2)  # 2 GPUs on each node, cheapest (youngest)
    single = start(snap, "single", 2, Tier.SPOT, at=0)
    before = state(snap)
    asked = Request("od", WholeGpus(4), tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [gang, single], POLICY, now=100)
    assert state(snap) == before
    victims = {v.request_id: v for v in decision.victims}
    assert "gang" in victims and victims["gang"].gpus == 4  # both nodes' GPUs, never half


def test_never_preempts_an_equal_or_higher_tier_and_spot_preempts_nobody():
    snap = snapshot_of(1, 8)
    busy = start(snap, "busy", 8, Tier.ON_DEMAND, at=0)
    assert choose_victims(snap, Request("od", WholeGpus(1), tier=Tier.ON_DEMAND), [busy], POLICY, 10) is None
    assert choose_victims(snap, Request("s", WholeGpus(1), tier=Tier.SPOT), [busy], POLICY, 10) is None


def test_a_victim_under_notice_is_not_chosen_again():
    snap = snapshot_of(1, 8)
    victim = start(snap, "v", 8, Tier.SPOT, at=0)
    noticed = Running(victim.request, victim.placement, 0, preempted_by="first", notice_deadline_s=30)
    assert choose_victims(snap, Request("od", WholeGpus(8)), [noticed], POLICY, 10) is None


@settings(max_examples=40, deadline=None)
@given(
    tiers=st.lists(st.sampled_from(list(Tier)), min_size=1, max_size=8),
    asked_tier=st.sampled_from(list(Tier)),
    asked_gpus=st.integers(1, 8),
)
def test_victims_are_always_strictly_lower_tier_so_no_cycle(tiers, asked_tier, asked_gpus):
    snap = snapshot_of(4, 8)
    running = []
    for i, tier in enumerate(tiers):
        outcome = place(snap, Request(f"r{i}", WholeGpus(4), tier=tier), POLICY)
        if isinstance(outcome, Placement):
            running.append(Running(Request(f"r{i}", WholeGpus(4), tier=tier), outcome, float(i)))
    before = state(snap)
    decision = choose_victims(
        snap, Request("x", WholeGpus(asked_gpus), tier=asked_tier), running, POLICY, 100
    )
    assert state(snap) == before
    if decision is not None:
        assert all(v.tier < asked_tier for v in decision.victims)
        # the victims cannot preempt back: their tier is lower, so the preemptor is never a candidate for them
        for v in decision.victims:
            back = Request(v.request_id, WholeGpus(1), tier=v.tier)
            preemptor = Running(Request("x", WholeGpus(asked_gpus), tier=asked_tier), decision.promised, 100)
            assert choose_victims(snap, back, [preemptor], POLICY, 101) is None


def test_admit_gives_notice_then_keeps_the_promise_when_the_victims_leave():
    snap = snapshot_of(1, 8)
    victim = start(snap, "spot", 8, Tier.SPOT, at=0)
    config = QueueConfig(mode=Mode.BACKFILL, order=Order.PRIORITY, preemption=PreemptionConfig())
    asked = Request("od", WholeGpus(8), tier=Tier.ON_DEMAND, submitted_at_s=5, max_duration_s=100)
    other = Request("od2", WholeGpus(8), tier=Tier.ON_DEMAND, submitted_at_s=1, max_duration_s=100)
    first = admit(snap, [asked], [victim], POLICY, 10, config)
    assert first.placements == () and first.pending[0].reason is Reason.PREEMPTING
    (preemption,) = first.preemptions
    assert preemption.victims[0].deadline_s == 40
    noticed = Running(victim.request, victim.placement, 0, "od", 40)
    waiting = admit(snap, [asked], [noticed], POLICY, 20, config, promised={"od"})
    assert waiting.placements == () and waiting.pending[0].reason is Reason.PREEMPTING
    for allocation in victim.placement.nodes:  # the kill at the deadline
        snap.release(allocation)
    # an older request of the same tier arrived meanwhile: the promise still goes first
    kept = admit(snap, [other, asked], [], POLICY, 40, config, promised={"od"})
    assert [p.request_id for p in kept.placements] == ["od"]


@settings(max_examples=60, deadline=None)
@given(
    running=st.lists(st.tuples(st.sampled_from(list(Tier)), st.integers(1, 8)), max_size=6),
    queued=st.lists(st.tuples(st.sampled_from(list(Tier)), st.integers(1, 8)), min_size=1, max_size=6),
    noticed=st.integers(0, 5),
    greedy=st.booleans(),
)
def test_promise_holds_never_outlive_the_cycle(running, queued, noticed, greedy):
    """Whatever the cycle holds for preemptors, the snapshot comes back with only the placements applied:
    releasing them restores it exactly, and every node is as schedulable as before."""
    snap = snapshot_of(3, 8)
    live = []
    for i, (tier, gpus) in enumerate(running):
        outcome = place(snap, Request(f"r{i}", WholeGpus(gpus), tier=tier, max_duration_s=500.0), POLICY)
        if isinstance(outcome, Placement):
            live.append(
                Running(Request(f"r{i}", WholeGpus(gpus), tier=tier, max_duration_s=500.0), outcome, 0.0)
            )
    queue = [
        Request(f"q{i}", WholeGpus(gpus), tier=tier, submitted_at_s=float(i))
        for i, (tier, gpus) in enumerate(queued)
    ]
    # the first `noticed` spot rentals are victims of the first queued request, which holds a promise
    victims = [r for r in live if r.request.tier is Tier.SPOT][:noticed]
    for victim in victims:
        live[live.index(victim)] = Running(victim.request, victim.placement, 0.0, "q0", 30.0)
    promised = {"q0"} if victims else set()
    before = state(snap)
    schedulable = [n.schedulable for n in snap.nodes]
    config = QueueConfig(
        mode=Mode.GREEDY if greedy else Mode.BACKFILL, order=Order.PRIORITY, preemption=PreemptionConfig()
    )
    decision = admit(snap, queue, live, POLICY, 10.0, config, promised=promised)
    assert [n.schedulable for n in snap.nodes] == schedulable
    for placement in decision.placements:
        for allocation in placement.nodes:
            snap.release(allocation)
    assert state(snap) == before


H100_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
MIG_CARVINGS = ((), ("7g.80gb",), ("3g.40gb", "3g.40gb"), ("1g.10gb",) * 4 + ("3g.40gb",))


@settings(max_examples=80, deadline=None)
@given(
    carvings=st.lists(st.sampled_from(MIG_CARVINGS), min_size=2, max_size=2),
    running=st.lists(st.tuples(st.sampled_from(list(Tier)), st.sampled_from(H100_PROFILES)), max_size=6),
    queued=st.lists(
        st.tuples(st.sampled_from(list(Tier)), st.sampled_from(H100_PROFILES)), min_size=1, max_size=5
    ),
    noticed=st.integers(0, 4),
    greedy=st.booleans(),
)
def test_mig_promise_holds_leave_no_trace(carvings, running, queued, noticed, greedy):
    """On two MIG GPUs, whatever the cycle holds for a preemptor (promised instances, idle instances in
    their slots): afterwards the snapshot is exactly the one the placements alone make, idle instances and
    all, and the promised MIG placement fits once its victims have left."""
    fleet = Fleet(
        {"r": REGION},
        (
            Node(
                "m0",
                "r",
                ("r", "z", "p", "l"),
                64_000,
                512_000,
                "H100-SXM-80GB",
                2,
                GpuMode.MIG,
                tuple(carvings),
            ),
        ),
    )
    snap = Snapshot(fleet, CATALOG)
    live = []
    for i, (tier, profile) in enumerate(running):
        request = Request(f"r{i}", MigSlice(profile), tier=tier, max_duration_s=500.0)
        outcome = place(snap, request, POLICY)
        if isinstance(outcome, Placement):
            live.append(Running(request, outcome, 0.0))
    queue = [
        Request(f"q{i}", MigSlice(profile), tier=tier, submitted_at_s=float(i))
        for i, (tier, profile) in enumerate(queued)
    ]
    victims = {r.request.id for r in live if r.request.tier < queue[0].tier}
    victims = set(sorted(victims)[:noticed])
    live = [Running(r.request, r.placement, 0.0, "q0", 30.0) if r.request.id in victims else r for r in live]
    config = QueueConfig(
        mode=Mode.GREEDY if greedy else Mode.BACKFILL, order=Order.PRIORITY, preemption=PreemptionConfig()
    )
    decision = admit(snap, queue, live, POLICY, 10.0, config, promised={"q0"} if victims else set())
    replay = Snapshot(fleet, CATALOG)
    for r in live:
        replay.occupy(r.placement.nodes[0])
    for placement in decision.placements:
        replay.occupy(placement.nodes[0])
    assert state(snap) == state(replay)
    for preemption in decision.preemptions:
        leaving = [r for r in live if r.request.id in {v.request_id for v in preemption.victims}]
        for victim in leaving:
            replay.release(victim.placement.nodes[0])
        for allocation in preemption.promised.nodes:
            replay.occupy(allocation)  # raises if the promised instance does not fit


def test_a_victim_holding_no_gpu_is_noticed_when_the_promise_needs_its_cpu():
    """Found by the admission property test: a CPU-only rental freed the CPU the promise counted on, but it
    was dropped from the victims as "a trim the promise took nothing of" (0 GPUs), so it ran on while the
    preemptor was promised its CPU: the node would have been overbooked at the deadline."""
    fleet = Fleet(
        {"r": REGION}, (Node("n0", "r", ("r", "z", "p", "l"), 32_000, 32_768, "L40S", 2, GpuMode.SHARED),)
    )
    snap = Snapshot(fleet, CATALOG)
    cpu_only = Request("cpu", WholeGpus(0), cpu_milli=16_000)
    gpus = Request("gpus", WholeGpus(2))
    running = [Running(r, place(snap, r, POLICY), 0) for r in (cpu_only, gpus)]
    assert isinstance(
        place(snap, Request("mine", WholeGpus(0), cpu_milli=16_000, tier=Tier.RESERVED), POLICY), Placement
    )
    asked = Request("res", WholeGpus(1), cpu_milli=2_000, tier=Tier.RESERVED)
    decision = choose_victims(snap, asked, running, POLICY, 10)
    assert decision is not None and {v.request_id for v in decision.victims} == {"cpu", "gpus"}


def test_an_elastic_gang_keeps_its_nodes_out_of_maintenance_only_when_they_hold_its_least_size() -> None:
    """Of a three-node gang, the nodes going into maintenance go and the rest stay, when at least its least
    count of nodes stays; a rigid gang, a one-node rental, or one left below its least ends whole."""
    gang = tuple(
        NodeAllocation(f"n{i}", 0, 0, tuple(Slice(g, 1000, 81920) for g in range(8))) for i in range(3)
    )
    assert kept_through_maintenance(gang, (2, 8), {"n1"}) == (gang[0], gang[2])
    assert kept_through_maintenance(gang, (2, 8), {"n1", "n2"}) is None  # one node left, two at least
    assert kept_through_maintenance(gang, (1, 8), {"n1", "n2"}) == (gang[0],)
    assert kept_through_maintenance(gang, None, {"n1"}) is None  # rigid
    assert kept_through_maintenance(gang[:1], (1, 4), {"n0"}) is None  # its one node
    assert kept_through_maintenance(gang, (1, 8), {"other"}) is None  # not on a node going


def test_a_gang_preemptor_takes_a_near_tie_whose_nodes_share_a_leaf_over_the_cheapest_across_two():
    """Three nodes, n0 in one leaf and n1, n2 in another, each held by an 8-GPU spot rental started a
    fraction of a second apart. A two-node gang's cheapest victims are on n0 and n1 (804 GPU-s lost), but
    those on n1 and n2 lose 812, within a second per GPU, and leave the gang in one leaf: they are chosen.
    Started 10 s apart instead, the cheapest pair is chosen, whatever the topology."""

    def chosen_with(ages: tuple[float, float, float]) -> list[str]:
        leaves = ("leaf-a", "leaf-b", "leaf-b")
        nodes = tuple(
            Node(f"n{i}", "r", ("r", "z", "p", leaf), 64_000, 512_000, "H100-SXM-80GB", 8, GpuMode.WHOLE)
            for i, leaf in enumerate(leaves)
        )
        snap = Snapshot(Fleet({"r": REGION}, nodes), CATALOG)
        running = [start(snap, f"v{i}", 8, Tier.SPOT, at=100 - age) for i, age in enumerate(ages)]
        gang = Request("gang", WholeGpus(8), node_count=2, tier=Tier.ON_DEMAND)
        decision = choose_victims(snap, gang, running, POLICY, now=100)
        assert decision is not None
        return sorted(v.request_id for v in decision.victims)

    assert chosen_with((50, 50.5, 51)) == ["v1", "v2"]
    assert chosen_with((50, 50.5, 60)) == ["v0", "v1"]


def test_a_rental_leaving_for_the_spot_floor_is_taken_first_at_its_own_deadline_and_no_one_else():
    """Two spot rentals fill a node; one is under notice for the spot floor until 120. An on-demand request
    for its GPUs is promised them at 120 (its deadline, not now + 30), and the other, younger and cheaper
    to evict by GPU-seconds, is left alone."""
    snap = snapshot_of(1, 8)
    old = start(snap, "old", 4, Tier.SPOT, at=0)
    young = start(snap, "young", 4, Tier.SPOT, at=99)
    leaving = replace(old, preempted_by=SPOT_FLOOR, notice_deadline_s=120.0)
    asked = Request("od", WholeGpus(4), tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [leaving, young], POLICY, now=100)
    assert decision is not None
    assert [(v.request_id, v.lost_gpu_s, v.deadline_s) for v in decision.victims] == [("old", 0.0, 120.0)]
    soon = replace(old, preempted_by=SPOT_FLOOR, notice_deadline_s=200.0)  # its deadline is later: 30 s
    assert [v.deadline_s for v in choose_victims(snap, asked, [soon, young], POLICY, now=100).victims] == [
        130.0
    ]
