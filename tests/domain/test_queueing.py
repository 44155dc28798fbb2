"""One cycle over time: strict FIFO never reorders, backfill never delays the head, fair share is fair."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog_data import CATALOG
from suanli.domain.fair_share import FairShare
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import NodeAllocation, Placement, Reason, Slice
from suanli.domain.policies import BestFitPolicy
from suanli.domain.preemption import PreemptionConfig
from suanli.domain.queue_order import (
    GREEDY_QUEUE,
    PLATFORM_QUEUE,
    BackfillOrder,
    Mode,
    Order,
    QueueConfig,
    Within,
    backfill_key,
    keep_head_first,
    oldest_wide,
    order_requests,
    response_ratio,
)
from suanli.domain.queueing import Gates, admit, pool_share
from suanli.domain.quotas import Limits, TenantLimits
from suanli.domain.request import Constraints, GpuSelector, GpuShare, MigSlice, Request, Tier, WholeGpus
from suanli.domain.reservation import OVERDUE_S, reserve
from suanli.domain.running import Running
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

REGION = Region("r", "US", 400.0, 1.2)
POLICY = BestFitPolicy()
FIFO = QueueConfig(mode=Mode.STRICT, order=Order.FIFO)
EASY = QueueConfig(mode=Mode.BACKFILL, order=Order.FIFO)
CONSERVATIVE = QueueConfig(mode=Mode.CONSERVATIVE, order=Order.FIFO)
EASY_SHORTEST = QueueConfig(mode=Mode.BACKFILL, order=Order.PRIORITY, backfill_order=BackfillOrder.SHORTEST)
EASY_RATIO = QueueConfig(mode=Mode.BACKFILL, order=Order.PRIORITY, backfill_order=BackfillOrder.RATIO)
EASY_SPARE = QueueConfig(
    mode=Mode.BACKFILL, order=Order.PRIORITY, backfill_order=BackfillOrder.RATIO, spare_free=True
)


def snapshot_of(nodes: int, gpus: int) -> Snapshot:
    fleet = Fleet(
        {"r": REGION},
        tuple(
            Node(
                f"n{i}",
                "r",
                ("r", "z", "p", f"l{i // 2}"),
                64_000,
                512_000,
                "H100-SXM-80GB",
                gpus,
                GpuMode.WHOLE,
            )
            for i in range(nodes)
        ),
    )
    return Snapshot(fleet, CATALOG)


def job(rid: str, gpus: int, at: float, duration: float | None = None, nodes: int = 1, **kw) -> Request:
    return Request(rid, WholeGpus(gpus), node_count=nodes, submitted_at_s=at, max_duration_s=duration, **kw)


def run(snapshot: Snapshot, request: Request, at: float) -> Running:
    placement = place(snapshot, request, POLICY)
    assert isinstance(placement, Placement)
    return Running(request, placement, at)


def reasons(decision) -> dict[str, Reason]:
    return {p.request_id: p.reason for p in decision.pending}


RUNNING = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 400)), max_size=10)
QUEUED = st.lists(
    st.tuples(st.integers(1, 8), st.one_of(st.none(), st.integers(1, 600)), st.integers(1, 2)),
    min_size=1,
    max_size=12,
)


def random_cycle(running, queued, now: float) -> tuple[Snapshot, list[Running], list[Request]]:
    """Four 4-GPU nodes with `running` (GPUs, seconds left) placed, and `queued` (GPUs, duration, nodes)."""
    snap = snapshot_of(4, 4)
    live = []
    for i, (gpus, remaining) in enumerate(running):
        request = job(f"r{i}", gpus, 0, now + remaining)
        outcome = place(snap, request, POLICY)
        if isinstance(outcome, Placement):
            live.append(Running(request, outcome, 0))
    queue = [
        job(f"q{i}", min(gpus, 4), float(i), duration, nodes=nodes if gpus > 4 else 1)
        for i, (gpus, duration, nodes) in enumerate(queued)
    ]
    return snap, live, queue


def test_strict_fifo_never_passes_the_head():
    snap = snapshot_of(1, 8)
    busy = run(snap, job("busy", 4, 0, 100), 0)
    queue = [job("small", 1, 3, 10), job("big", 8, 1, 10), job("first", 2, 0.5, 10)]
    decision = admit(snap, queue, [busy], POLICY, 5, FIFO)
    assert [p.request_id for p in decision.placements] == ["first"]
    assert decision.head == "big"
    assert reasons(decision) == {"big": Reason.NO_CAPACITY, "small": Reason.BLOCKED_BY_HEAD}


def test_greedy_starts_whatever_fits_and_says_why_the_rest_waits():
    """No head: a gang and a whole node that do not fit wait with `place`'s reason, and what fits starts, with
    or without a declared duration; a higher tier that does not fit preempts spot and the walk goes on."""
    snap = snapshot_of(2, 8)
    busy = run(snap, job("busy", 6, 0, 100), 0)  # n0: 2 GPUs free; n1 empty
    queue = [job("gang", 8, 1, 10, nodes=2), job("node", 8, 2), job("again", 8, 3), job("pair", 2, 4)]
    decision = admit(snap, queue, [busy], POLICY, 5, GREEDY_QUEUE)
    assert [p.request_id for p in decision.placements] == ["node", "pair"]
    assert decision.head is None and decision.head_start_s is None and decision.reserved_nodes == ()
    assert reasons(decision) == {"gang": Reason.GANG_INCOMPLETE, "again": Reason.NO_CAPACITY}

    snap = snapshot_of(2, 8)
    spot = run(snap, job("spot", 8, 0, 1000, tier=Tier.SPOT, bid_micros_per_hour=1), 0)  # n0
    busy = run(snap, job("busy", 6, 0, 1000), 0)  # n1: 2 GPUs free
    queue = [job("od", 8, 5), job("one", 1, 6)]
    decision = admit(snap, queue, [spot, busy], POLICY, 10, GREEDY_QUEUE)
    evicted = [(p.preemptor, [v.request_id for v in p.victims]) for p in decision.preemptions]
    assert evicted == [("od", ["spot"])]
    assert [p.request_id for p in decision.placements] == ["one"]


@pytest.mark.parametrize("config", [GREEDY_QUEUE, EASY_RATIO], ids=["greedy", "backfill"])
def test_capacity_promised_to_a_preemptor_is_held_until_its_victims_leave(config):
    """`od` needs all of n0: spot holds 6 GPUs, 2 are free. No one else may take those 2 in the cycle that
    gives notice nor in any cycle while the victim is under notice (nodes kept by the caller or worked out
    again); once the victim has left, `od` starts there first."""
    config = replace(config, preemption=PreemptionConfig(default_notice_s=30))
    snap = snapshot_of(1, 8)
    spot = run(snap, job("spot", 6, 0, 1000, tier=Tier.SPOT, bid_micros_per_hour=1), 0)
    queue = [job("od", 8, 5, 100), job("one", 1, 6, 10)]
    decision = admit(snap, queue, [spot], POLICY, 10, config)
    assert [p.preemptor for p in decision.preemptions] == ["od"] and decision.placements == ()
    promise = decision.preemptions[0].promised
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    late = job("late", 2, 20, 10)
    for promised in ({"od": promise}, {"od"}, {"od": None}):
        later = admit(snap, [*queue, late], [noticed], POLICY, 20, config, promised=promised)
        assert later.placements == () and reasons(later)["od"] is Reason.PREEMPTING
        assert snap.allocated_milli() == 6_000  # the two free GPUs are still free
    snap.release(spot.placement.nodes[0])  # the victim leaves at its deadline
    after = admit(snap, [*queue, late], [], POLICY, 40, config, promised={"od": promise})
    assert [p.request_id for p in after.placements] == ["od"]


def test_the_free_part_of_a_promised_gpu_share_is_held_too():
    """On one shared L40S, spot holds 600 milli; `od` is promised 800 of it (the 400 free and 400 of the
    victim's): a 300-milli share arriving during the notice waits rather than take the free part."""
    fleet = Fleet(
        {"r": REGION}, (Node("s0", "r", ("r", "z", "p", "l0"), 64_000, 512_000, "L40S", 1, GpuMode.SHARED),)
    )
    snap = Snapshot(fleet, CATALOG)
    spot = run(
        snap, Request("spot", GpuShare(600), tier=Tier.SPOT, bid_micros_per_hour=1, max_duration_s=99), 0
    )
    queue = [
        Request("od", GpuShare(800), submitted_at_s=5),
        Request("small", GpuShare(300), submitted_at_s=6),
    ]
    decision = admit(snap, queue, [spot], POLICY, 10, GREEDY_QUEUE)
    assert [p.preemptor for p in decision.preemptions] == ["od"] and decision.placements == ()
    assert reasons(decision)["small"] is Reason.NO_CAPACITY
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    later = admit(snap, queue, [noticed], POLICY, 20, GREEDY_QUEUE, promised={"od"})
    assert later.placements == () and snap.allocated_milli() == 600


def mig_snapshot() -> Snapshot:
    """One H100 in MIG mode carved as four 1g.10gb instances (slots 0-3) and a 3g.40gb (slots 4-7)."""
    layout = ("1g.10gb",) * 4 + ("3g.40gb",)
    node = Node("m0", "r", ("r", "z", "p", "l0"), 64_000, 512_000, "H100-SXM-80GB", 1, GpuMode.MIG, (layout,))
    return Snapshot(Fleet({"r": REGION}, (node,)), CATALOG)


def mig(rid: str, profile: str, at: float = 0, **kw) -> Request:
    return Request(rid, MigSlice(profile), submitted_at_s=at, max_duration_s=kw.pop("duration", 100), **kw)


@pytest.mark.parametrize("config", [GREEDY_QUEUE, EASY_RATIO], ids=["greedy", "backfill"])
def test_a_mig_slice_starts_on_a_gpu_with_less_than_one_gpu_free(config):
    """With the 3g.40gb and two 1g.10gb busy, 0.28 of the GPU is free: a 1g.10gb still starts there (the
    quick capacity check counts a MIG slice as its instance's share, not as a whole GPU)."""
    snap = mig_snapshot()
    live = [
        run(snap, mig("big", "3g.40gb"), 0),
        run(snap, mig("a", "1g.10gb"), 0),
        run(snap, mig("b", "1g.10gb"), 0),
    ]
    decision = admit(snap, [mig("c", "1g.10gb", 5)], live, POLICY, 10, config)
    assert [p.request_id for p in decision.placements] == ["c"] and decision.head is None


@pytest.mark.parametrize("config", [GREEDY_QUEUE, EASY_RATIO], ids=["greedy", "backfill"])
def test_a_mig_instance_promised_to_a_preemptor_is_held_with_the_idle_instances_in_its_slots(config):
    """`od` wants a 3g.40gb; the GPU holds a spot 1g.10gb at slot 0 and an on-demand 3g.40gb at 4: `od` is
    promised slots 0-3. While the victim has notice, the idle 1g.10gb at 1-3 wait for it: a 1g.10gb asked
    meanwhile does not take one (it would leave `od` no room and cost another victim); once the victim
    has left, `od` starts at slot 0. Each cycle gives back the MIG layout it found."""
    config = replace(config, preemption=PreemptionConfig(default_notice_s=30))
    snap = mig_snapshot()
    spot = run(snap, mig("spot", "1g.10gb", tier=Tier.SPOT, bid_micros_per_hour=1, duration=1000), 0)
    big = run(snap, mig("big", "3g.40gb", duration=1000), 0)
    layout = snap.nodes[0].gpus[0][2]
    queue = [mig("od", "3g.40gb", 5), mig("small", "1g.10gb", 6)]
    decision = admit(snap, queue, [spot, big], POLICY, 10, config)
    assert [(p.preemptor, [v.request_id for v in p.victims]) for p in decision.preemptions] == [
        ("od", ["spot"])
    ]
    promise = decision.preemptions[0].promised
    assert [(s.mig_profile, s.mig_start) for s in promise.nodes[0].slices] == [("3g.40gb", 0)]
    assert decision.placements == () and reasons(decision)["small"] is Reason.NO_CAPACITY
    assert snap.nodes[0].gpus[0][2] == layout
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    for promised in ({"od": promise}, {"od"}):
        later = admit(snap, queue, [noticed, big], POLICY, 20, config, promised=promised)
        assert later.placements == () and later.preemptions == ()
        assert snap.nodes[0].gpus[0][2] == layout
    snap.release(spot.placement.nodes[0])  # the victim leaves at its deadline
    after = admit(snap, queue, [big], POLICY, 40, config, promised={"od": promise})
    placed = {p.request_id: p.nodes[0].slices[0] for p in after.placements}
    assert (placed["od"].mig_profile, placed["od"].mig_start) == ("3g.40gb", 0)


def test_free_mig_slots_of_a_promised_instance_are_held_as_well_as_its_idle_instances():
    """Slots 0-3 are promised to `od`'s 3g.40gb: the spot victim's 1g.10gb holds slot 0, an idle 1g.10gb
    slot 3, and no instance covers slots 1 and 2. A 1g.10gb asked during the notice may create none there
    (it would block `od` at the deadline); once the victim has left, `od` starts at slot 0. Every cycle
    gives back the layout it found, with no instance added or destroyed."""
    config = replace(EASY_RATIO, preemption=PreemptionConfig(default_notice_s=30))
    node = Node("m0", "r", ("r", "z", "p", "l0"), 64_000, 512_000, "H100-SXM-80GB", 1, GpuMode.MIG)
    snap = Snapshot(Fleet({"r": REGION}, (node,)), CATALOG)

    def recorded(request: Request, profile: str, start: int, milli: int, gib: int) -> Running:
        allocation = NodeAllocation("m0", 0, 0, (Slice(0, milli, gib * 1024, profile, start),))
        snap.occupy(allocation)
        return Running(request, Placement(request.id, (allocation,)), 0)

    spot = recorded(
        mig("spot", "1g.10gb", tier=Tier.SPOT, bid_micros_per_hour=1, duration=1000), "1g.10gb", 0, 142, 10
    )
    big = recorded(mig("big", "3g.40gb", duration=1000), "3g.40gb", 4, 428, 40)
    idle = recorded(mig("gone", "1g.10gb"), "1g.10gb", 3, 142, 10)
    snap.release(idle.placement.nodes[0])  # it left: its instance stays, idle
    layout = snap.nodes[0].gpus[0][2]
    assert layout == ((0, "1g.10gb", True), (3, "1g.10gb", False), (4, "3g.40gb", True))
    queue = [mig("od", "3g.40gb", 5), mig("small", "1g.10gb", 6)]
    decision = admit(snap, queue, [spot, big], POLICY, 10, config)
    promise = decision.preemptions[0].promised
    assert [(s.mig_profile, s.mig_start) for s in promise.nodes[0].slices] == [("3g.40gb", 0)]
    assert decision.placements == () and snap.nodes[0].gpus[0][2] == layout
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    later = admit(snap, queue, [noticed, big], POLICY, 20, config, promised={"od": promise})
    assert later.placements == () and reasons(later)["small"] is Reason.NO_CAPACITY
    assert snap.nodes[0].gpus[0][2] == layout
    snap.release(spot.placement.nodes[0])
    after = admit(snap, queue, [big], POLICY, 40, config, promised={"od": promise})
    placed = {p.request_id: p.nodes[0].slices[0] for p in after.placements}
    assert (placed["od"].mig_profile, placed["od"].mig_start) == ("3g.40gb", 0)


def test_the_cpu_and_memory_promised_to_a_preemptor_are_held_too():
    """`od` needs 4 GPUs and 60 of the node's 64 cores; spot holds 6 GPUs and 40 cores. The 24 free cores
    wait for `od` through the notice: a 1-GPU job asking 8 cores waits rather than leave `od` short."""
    snap = snapshot_of(1, 8)
    spot = run(snap, job("spot", 6, 0, 1000, tier=Tier.SPOT, bid_micros_per_hour=1, cpu_milli=40_000), 0)
    queue = [job("od", 4, 5, 100, cpu_milli=60_000), job("late", 1, 6, 10, cpu_milli=8_000)]
    config = replace(GREEDY_QUEUE, preemption=PreemptionConfig(default_notice_s=30))
    decision = admit(snap, queue, [spot], POLICY, 10, config)
    assert [p.preemptor for p in decision.preemptions] == ["od"] and decision.placements == ()
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    later = admit(snap, queue, [noticed], POLICY, 20, config, promised={"od"})
    assert later.placements == () and reasons(later)["late"] is Reason.NO_CAPACITY
    assert snap.nodes[0].cpu_free == 24_000
    snap.release(spot.placement.nodes[0])
    after = admit(snap, queue, [], POLICY, 40, config, promised={"od"})
    assert [p.request_id for p in after.placements] == ["od"]  # 4 cores are left: `late` waits on


@pytest.mark.parametrize("config", [EASY, CONSERVATIVE], ids=["easy", "conservative"])
def test_a_rental_past_its_declared_end_frees_at_the_next_instant_and_nothing_backfills_in_front_of_the_head(
    config,
):
    """`late` declared 100 s and still holds n0 at 500 (it is being stopped at its time limit): the 2-node
    head is expected to start a second later under EASY and under Slurm's plan alike, on n0 and the free node,
    so not even a 12-second job takes the free node in front of it (counted a minute away, one did at each
    cycle while the stop went through, and held the head past its start); the half-busy node still takes a
    long one."""
    snap = snapshot_of(3, 8)
    late = run(snap, job("late", 8, 0, 100), 0)
    other = run(snap, job("other", 4, 0, 10_000), 0)
    queue = [job("head", 8, 1, 50, nodes=2), job("quick", 8, 2, 12), job("slow", 4, 3, 120)]
    decision = admit(snap, queue, [late, other], POLICY, 500, config)
    assert decision.head == "head" and decision.head_start_s == 500 + OVERDUE_S <= 501
    half_busy = other.placement.nodes[0].node
    assert set(decision.reserved_nodes) == {"n0", "n1", "n2"} - {half_busy}
    assert [(p.request_id, p.nodes[0].node) for p in decision.placements] == [("slow", half_busy)]
    assert reasons(decision)["quick"] in (Reason.BLOCKED_BY_HEAD, Reason.NO_CAPACITY)


def test_backfill_takes_short_jobs_holds_long_ones_and_never_passes_without_a_duration():
    snap = snapshot_of(1, 8)
    busy = run(snap, job("busy", 4, 0, 100), 0)  # ends at 100 at the latest
    queue = [
        job("head", 8, 1, 50),
        job("long", 4, 2, 5000),
        job("nolimit", 1, 3, None),
        job("short", 4, 4, 50),
    ]
    decision = admit(snap, queue, [busy], POLICY, 10, EASY)
    assert [p.request_id for p in decision.placements] == ["short"]  # ends at 60 <= head start 100
    assert decision.head == "head" and decision.head_start_s == 100
    assert reasons(decision)["long"] is Reason.BLOCKED_BY_HEAD
    assert reasons(decision)["nolimit"] is Reason.BLOCKED_BY_HEAD


def test_a_long_job_may_backfill_off_the_heads_reserved_nodes():
    snap = snapshot_of(2, 8)
    a = run(snap, job("a", 8, 0, 100), 0)  # node 0 frees at 100
    b = run(snap, job("b", 4, 0, 10_000), 0)  # node 1 keeps 4 busy
    decision = admit(snap, [job("head", 8, 1, 50), job("long", 4, 2, 5000)], [a, b], POLICY, 10, EASY)
    assert [p.request_id for p in decision.placements] == ["long"]
    assert decision.placements[0].nodes[0].node == "n1"


@pytest.mark.parametrize(
    ("config", "filler_waits"),
    [
        (EASY, Reason.BLOCKED_BY_HEAD),
        (QueueConfig(mode=Mode.CONSERVATIVE, order=Order.FIFO), Reason.NO_CAPACITY),
    ],
    ids=["easy", "conservative"],
)
def test_the_heads_reservation_counts_what_this_cycle_placed_as_ending_at_its_declared_duration(
    config, filler_waits
):
    """`first` is placed in this cycle and ends by 100, so the head starts on first's node at 100; counted
    as never ending, the head would be reserved on old's node at 1000 and `filler` (until 500) would take
    first's node's free half and delay the head by 400."""
    snap = snapshot_of(2, 8)
    old = run(snap, job("old", 8, 0, 1000), 0)
    queue = [job("first", 4, 1, 100), job("head", 8, 2, 50), job("filler", 4, 3, 500)]
    decision = admit(snap, queue, [old], POLICY, 0, config)
    assert [p.request_id for p in decision.placements] == ["first"]
    first_node = decision.placements[0].nodes[0].node
    assert (
        decision.head == "head" and decision.head_start_s == 100 and decision.reserved_nodes == (first_node,)
    )
    assert reasons(decision)["filler"] is filler_waits


@pytest.mark.parametrize(
    "config",
    [EASY, EASY_SHORTEST, EASY_RATIO, EASY_SPARE],
    ids=["easy", "easy-shortest", "easy-ratio", "easy-spare-free"],
)
@settings(max_examples=60, deadline=None)
@given(running=RUNNING, queued=QUEUED)
def test_backfill_never_delays_the_heads_reserved_start(config, running, queued):
    now = 50.0
    snap, live, queue = random_cycle(running, queued, now)
    decision = admit(snap, queue, live, POLICY, now, config)
    if decision.head is None or decision.head_start_s is None:
        return
    head = next(r for r in queue if r.id == decision.head)
    started = [Running(next(r for r in queue if r.id == p.request_id), p, now) for p in decision.placements]
    after = reserve(snap, head, live + started, POLICY, now)
    assert after is not None and after[0] <= decision.head_start_s


def test_priority_order_is_tier_then_bid_then_age():
    queue = [
        job("spot-low", 1, 0, tier=Tier.SPOT, bid_micros_per_hour=1),
        job("spot-high", 1, 5, tier=Tier.SPOT, bid_micros_per_hour=9),
        job("od-young", 1, 9),
        job("od-old", 1, 1),
        job("res", 1, 20, tier=Tier.RESERVED),
    ]
    ordered = order_requests(queue, QueueConfig(order=Order.PRIORITY), FairShare())
    assert [r.id for r in ordered] == ["res", "od-old", "od-young", "spot-high", "spot-low"]
    # spot without a bid pays the spot price whatever it is: it outranks every bid, never a higher tier
    with_market = [*queue, job("spot-market", 1, 30, tier=Tier.SPOT)]
    ordered = order_requests(with_market, QueueConfig(order=Order.PRIORITY), FairShare())
    assert [r.id for r in ordered][-3:] == ["spot-market", "spot-high", "spot-low"]
    assert next(r.id for r in order_requests(queue, FIFO, FairShare())) == "spot-low"


def test_fair_share_decays_and_is_immutable():
    fair = FairShare(half_life_s=100)
    later = fair.advance(100, {"a": 2.0})
    assert fair.usage_gpu_s == {} and later.usage_gpu_s["a"] == pytest.approx(2 * 0.5 * fair.horizon_s)
    idle = later.advance(200, {})
    assert idle.usage_gpu_s["a"] == pytest.approx(later.usage_gpu_s["a"] / 2)
    assert 0 < idle.share("a", 2) < 1


@settings(max_examples=12, deadline=None)
@given(
    weights=st.lists(st.integers(1, 4), min_size=2, max_size=3),
    durations=st.lists(st.integers(20, 200), min_size=1, max_size=4),
)
def test_fair_share_converges_to_the_weights(weights, durations):
    """Tenants with endless backlogs of 1-GPU jobs: each one's GPU-time tends to its weight's share."""
    tenants = [f"t{i}" for i in range(len(weights))]
    config = QueueConfig(
        mode=Mode.BACKFILL, order=Order.PRIORITY, weights=dict(zip(tenants, weights, strict=True))
    )
    snap = snapshot_of(2, 8)
    fair = FairShare(half_life_s=2000)
    queue: dict[str, Request] = {}
    serial = 0
    for tenant in tenants:
        for _ in range(16):
            serial += 1
            duration = durations[serial % len(durations)]
            queue[f"j{serial}"] = job(f"j{serial}", 1, 0, duration, tenant=tenant)
    running: dict[str, Running] = {}
    ends: list[tuple[float, str]] = []
    used = dict.fromkeys(tenants, 0.0)
    now, horizon = 0.0, 20_000.0
    held = dict.fromkeys(tenants, 0.0)
    while now < horizon:
        decision = admit(snap, list(queue.values()), list(running.values()), POLICY, now, config, fair)
        for p in decision.placements:
            request = queue.pop(p.request_id)
            running[request.id] = Running(request, p, now)
            held[request.tenant] += 1
            heapq.heappush(ends, (now + request.max_duration_s, request.id))
            serial += 1  # the tenant's backlog never runs dry
            queue[f"j{serial}"] = job(
                f"j{serial}", 1, now, durations[serial % len(durations)], tenant=request.tenant
            )
        following = ends[0][0]
        if now >= horizon / 2:
            for tenant in tenants:
                used[tenant] += held[tenant] * (min(following, horizon) - now)
        fair = fair.advance(following, held)
        now = following
        while ends and ends[0][0] == now:
            _, rid = heapq.heappop(ends)
            finished = running.pop(rid)
            held[finished.request.tenant] -= 1
            for allocation in finished.placement.nodes:
                snap.release(allocation)
    total = sum(used.values())
    for tenant, weight in zip(tenants, weights, strict=True):
        assert used[tenant] / total == pytest.approx(weight / sum(weights), abs=0.08)


def test_backfill_gives_the_holes_to_tenants_by_fair_share_not_to_whoever_ranks_first():
    """A reserved 16-GPU head waits for two nodes; 3 GPUs are free until then. Tenants a (weight 2) and b
    (weight 1) each have three 1-GPU jobs that would end in time, b's shorter (a higher response ratio).
    Backfill takes turns by weighted fair share, as the walk does: a gets two holes, b one. It ranked every
    candidate by ratio alone, across tenants, and b took all three (a tenant's weight counted in the walk,
    but most of an overloaded fleet's starts are backfill)."""
    snap = snapshot_of(2, 8)
    held = [run(snap, job("c-run", 8, 0, 10_000, tenant="c", tier=Tier.RESERVED), 0)]
    held.append(run(snap, job("c-run2", 5, 0, 10_000, tenant="c", tier=Tier.RESERVED), 0))
    head = job("c-head", 8, 0, 3600, nodes=2, tenant="c", tier=Tier.RESERVED)
    theirs = [job(f"a{i}", 1, 10, 1000, tenant="a") for i in range(3)]
    theirs += [job(f"b{i}", 1, 10, 500, tenant="b") for i in range(3)]
    config = replace(PLATFORM_QUEUE, weights={"a": 2.0, "b": 1.0})
    decision = admit(snap, [head, *theirs], held, POLICY, 100, config, FairShare())
    started = sorted(p.request_id for p in decision.placements)
    assert decision.head == "c-head" and len(started) == 3
    assert sum(1 for r in started if r.startswith("a")) == 2, started


def test_fair_share_does_not_count_what_a_leaving_rental_holds_against_its_tenant():
    """a's 8-GPU rental is being stopped (its GPUs free at the next instant in the plan) and b holds 4: a's
    request goes first, as it will once a's rental has left. Counted as a's, b's went first while the stop
    went through, and the order flipped back a moment later: a start shown as now was lost. A trimmed
    victim counts what it keeps."""
    snap = snapshot_of(2, 8)
    a_run = run(snap, job("a-run", 8, 0, 10_000, tenant="a"), 0)
    b_run = run(snap, job("b-run", 4, 0, 10_000, tenant="b"), 0)
    leaving = replace(a_run, preempted_by="stopping", notice_deadline_s=100.0)
    queue = [job("b-next", 4, 5, 600, tenant="b"), job("a-next", 4, 6, 600, tenant="a")]
    ordered = order_requests(queue, PLATFORM_QUEUE, FairShare(), [leaving, b_run], 100)
    assert [r.id for r in ordered] == ["a-next", "b-next"]
    staying = order_requests(queue, PLATFORM_QUEUE, FairShare(), [a_run, b_run], 100)
    assert [r.id for r in staying] == ["b-next", "a-next"]
    node = a_run.placement.nodes[0]
    kept = Placement("a-run", (replace(node, slices=node.slices[:6]),))
    trimmed = replace(a_run, preempted_by="b-x", notice_deadline_s=130.0, keeps=kept)
    assert [r.id for r in order_requests(queue, PLATFORM_QUEUE, FairShare(), [trimmed, b_run], 100)] == [
        "b-next",
        "a-next",
    ]


def test_ratio_within_a_class_puts_short_jobs_first_but_waiting_raises_the_long_ones():
    config = QueueConfig(order=Order.PRIORITY, within=Within.RATIO)
    long_old = job("long", 8, at=0, duration=8 * 3600)
    short_new = job("short", 8, at=3000, duration=3600)
    # at 1 h: short (600 + 3600) / 3600 = 1.17 beats long (3600 + 8 h) / 8 h = 1.125
    assert [r.id for r in order_requests([long_old, short_new], config, FairShare(), now=3600)] == [
        "short",
        "long",
    ]
    # after 30 h of waiting the long job's ratio is 4.75; a short job that just arrived has 1.0
    fresh = job("fresh", 8, at=30 * 3600, duration=3600)
    assert [r.id for r in order_requests([fresh, long_old], config, FairShare(), now=30 * 3600)] == [
        "long",
        "fresh",
    ]
    by_age = order_requests([short_new, long_old], QueueConfig(order=Order.PRIORITY), FairShare(), now=3600)
    assert [r.id for r in by_age] == ["long", "short"]


def test_the_last_blocked_head_keeps_its_place_in_its_class_but_higher_tiers_pass():
    queue = [job("a", 1, 0, 100), job("b", 8, 1, 100), job("res", 1, 5, 100, tier=Tier.RESERVED)]
    ordered = order_requests(queue, QueueConfig(order=Order.PRIORITY), FairShare())
    assert [r.id for r in keep_head_first(ordered, "b")] == ["res", "b", "a"]
    assert keep_head_first(ordered, "gone") == ordered


def test_spare_free_reserves_the_head_where_nothing_is_free_now_and_never_later():
    snap = snapshot_of(3, 8)
    a = run(snap, job("a", 8, 0, 100), 0)  # n0 busy until 100
    b = run(snap, job("b", 8, 0, 100), 0)  # n1 busy until 100; n2 is free now
    head = job("head", 8, 1, 50, nodes=2)
    plain = reserve(snap, head, [a, b], POLICY, 10)
    spared = reserve(snap, head, [a, b], POLICY, 10, spare_free=True)
    assert plain is not None and spared is not None and spared[0] == plain[0] == 100
    assert {n.node for n in spared[1].nodes} == {"n0", "n1"}  # n2 stays free for a long backfill


def test_spot_yields_while_a_higher_tier_waits_but_preemption_still_happens():
    config = QueueConfig(order=Order.PRIORITY, spot_yields=True, preemption=PreemptionConfig())
    snap = snapshot_of(1, 8)
    spot = run(snap, job("spot", 8, 0, 1000, tier=Tier.SPOT, bid_micros_per_hour=1), 0)
    queue = [job("od", 8, 5, 100), job("spot2", 1, 6, 10, tier=Tier.SPOT, bid_micros_per_hour=9)]
    decision = admit(snap, queue, [spot], POLICY, 10, config)
    assert [p.preemptor for p in decision.preemptions] == ["od"]  # the tier guarantee holds
    assert reasons(decision)["spot2"] is Reason.NO_CAPACITY and decision.placements == ()
    snap2 = snapshot_of(1, 8)  # no higher tier waiting: spot starts on free capacity
    alone = admit(snap2, queue[1:], [], POLICY, 10, config)
    assert [p.request_id for p in alone.placements] == ["spot2"]


def test_conservative_backfill_protects_every_booking_where_easy_protects_only_the_head():
    """`head` is booked on n0 at 100, `second` on n1 at 300: EASY lets `long` take n1's free GPUs (it
    avoids the head's node) and so delays `second` by 50 h; conservative backfill books it after."""
    snap = snapshot_of(2, 8)
    a = run(snap, job("a", 8, 0, 100), 0)  # n0 until 100
    b = run(snap, job("b", 6, 0, 300), 0)  # n1: 6 of 8 until 300
    queue = [
        job("head", 8, 1, 1000),
        job("second", 8, 2, 100),
        job("long", 2, 3, 180_000),
        job("nolimit", 2, 4, None),
        job("short", 2, 5, 200),  # ends at 210, before `second` needs n1
    ]
    easy = admit(snap, queue, [a, b], POLICY, 10, EASY)
    assert {p.request_id for p in easy.placements} == {"long"}
    for p in easy.placements:
        for allocation in p.nodes:
            snap.release(allocation)

    decision = admit(snap, queue, [a, b], POLICY, 10, CONSERVATIVE)
    assert [p.request_id for p in decision.placements] == ["short"]
    booked = {b.request_id: (b.start_s, b.end_s, b.nodes) for b in decision.bookings}
    assert booked["head"] == (100, 1100, frozenset({"n0"}))
    assert booked["second"] == (300, 400, frozenset({"n1"}))
    assert booked["long"][:2] == (400, 180_400) and booked["nolimit"] == (
        1100,
        float("inf"),
        frozenset({"n0"}),
    )
    assert decision.head == "head" and decision.head_start_s == 100
    assert "booked to start by" in next(p.message for p in decision.pending if p.request_id == "second")


def test_with_every_gpu_busy_the_servers_conservative_queue_still_books_every_request():
    """Both nodes are full: nothing can start, so a replay plans only the first booking (the rest start
    nothing this cycle either way); the server's queue (`book_when_full`) books each, so each shows its start:
    one after another on n0, which frees first (n1 only at 300)."""
    snap = snapshot_of(2, 8)
    a = run(snap, job("a", 8, 0, 100), 0)  # n0 until 100
    b = run(snap, job("b", 8, 0, 300), 0)  # n1 until 300
    queue = [job("first", 8, 1, 50), job("second", 8, 2, 50), job("third", 8, 3, 50), job("fourth", 4, 4, 50)]
    replay = admit(snap, queue, [a, b], POLICY, 10, CONSERVATIVE)
    assert [b.request_id for b in replay.bookings] == ["first"]
    server = admit(snap, queue, [a, b], POLICY, 10, replace(CONSERVATIVE, book_when_full=True))
    booked = {b.request_id: (b.start_s, sorted(b.nodes)) for b in server.bookings}
    assert booked == {
        "first": (100, ["n0"]),
        "second": (150, ["n0"]),
        "third": (200, ["n0"]),
        "fourth": (250, ["n0"]),
    }
    assert replay.placements == server.placements == ()
    assert all("booked to start by" in p.message for p in server.pending)


def test_conservative_books_nothing_past_the_window_so_later_requests_may_pass():
    snap = snapshot_of(2, 8)
    a = run(snap, job("a", 8, 0, 1000), 0)
    b = run(snap, job("b", 4, 0, 1000), 0)
    queue = [job("gang", 8, 1, 50, nodes=2), job("filler", 4, 2, 5000)]
    held = admit(snap, queue, [a, b], POLICY, 10, CONSERVATIVE)
    assert held.placements == () and [b.request_id for b in held.bookings] == ["gang", "filler"]
    narrow = QueueConfig(mode=Mode.CONSERVATIVE, order=Order.FIFO, backfill_window_s=500)
    passed = admit(snap, queue, [a, b], POLICY, 10, narrow)
    assert [p.request_id for p in passed.placements] == ["filler"] and passed.bookings == ()
    assert "backfill window" in next(p.message for p in passed.pending if p.request_id == "gang")


def test_conservative_plans_only_the_backfill_depth_and_says_when_a_request_never_fits():
    snap = snapshot_of(1, 8)
    busy = run(snap, job("busy", 7, 0, 100), 0)
    queue = [job("head", 8, 1, 50), job("huge", 8, 2, 50, nodes=3), job("next", 1, 3, 10)]
    decision = admit(snap, queue, [busy], POLICY, 10, CONSERVATIVE)
    assert reasons(decision) == {"head": Reason.NO_CAPACITY, "huge": Reason.GANG_TOO_LARGE}
    assert [p.request_id for p in decision.placements] == ["next"]  # ends at 20, before the head's 100
    snap.release(decision.placements[0].nodes[0])
    shallow = admit(snap, queue, [busy], POLICY, 10, QueueConfig(mode=Mode.CONSERVATIVE, backfill_depth=1))
    assert [b.request_id for b in shallow.bookings] == ["head"]
    assert {p.message for p in shallow.pending if p.request_id != "head"} == {"past the backfill depth"}


def test_conservative_bookings_keep_off_a_node_whose_maintenance_starts_before_they_end_or_has_begun():
    """7 of n0's GPUs are busy until 1000, n1's 8 until 500; n1's maintenance runs 600-5000. The head (8 GPUs
    for 1000 s) would fit on n1 at 500 but its window starts under it: booked on n0 at 1000. `short` (100 s)
    ends at 600, when the window starts: booked on n1 at 500. `after` is like it: at 600 n1 is in its window,
    so it waits for n0 after the head, at 2000."""
    snap = snapshot_of(2, 8)
    a = run(snap, job("a", 7, 0, 1000), 0)
    b = run(snap, job("b", 8, 0, 500), 0)
    gates = Gates(maintenance=(("n1", 600.0, 5000.0),))
    queue = [job("head", 8, 1, 1000), job("short", 8, 2, 100), job("after", 8, 3, 100)]
    decision = admit(snap, queue, [a, b], POLICY, 10, CONSERVATIVE, gates=gates)
    booked = {b.request_id: (b.start_s, b.end_s, b.nodes) for b in decision.bookings}
    assert booked == {
        "head": (1000, 2000, frozenset({"n0"})),
        "short": (500, 600, frozenset({"n1"})),
        "after": (2000, 2100, frozenset({"n0"})),
    }
    assert decision.head == "head" and decision.head_start_s == 1000


def test_a_preemptor_is_not_promised_a_node_whose_maintenance_starts_before_it_would_end():
    """Spot s0 on n0 (cheaper to evict: it started later) and s1 on n1; n0 goes into maintenance at 100.
    `od` (8 GPUs for 1000 s, starting when the 30 s notice ends at 40) would run into n0's window: s1 is the
    victim and n1 the promise. Without a declared duration it gets n0 (it would get notice at the window)."""
    config = replace(EASY, preemption=PreemptionConfig(default_notice_s=30))
    gates = Gates(maintenance=(("n0", 100.0, 5000.0),))
    snap = snapshot_of(2, 8)
    spot = {"bid_micros_per_hour": 1, "tier": Tier.SPOT}
    s0 = run(snap, job("s0", 8, 5, 10_000, **spot), 5)
    s1 = run(snap, job("s1", 8, 0, 10_000, **spot), 0)
    assert [(r.request.id, r.placement.nodes[0].node) for r in (s0, s1)] == [("s0", "n0"), ("s1", "n1")]
    decision = admit(snap, [job("od", 8, 6, 1000)], [s0, s1], POLICY, 10, config, gates=gates)
    (preemption,) = decision.preemptions
    assert [v.request_id for v in preemption.victims] == ["s1"]
    assert [a.node for a in preemption.promised.nodes] == ["n1"]
    open_ended = admit(snap, [job("od", 8, 6, None)], [s0, s1], POLICY, 10, config, gates=gates)
    assert [v.request_id for v in open_ended.preemptions[0].victims] == ["s0"]


@pytest.mark.parametrize("config", [GREEDY_QUEUE, CONSERVATIVE], ids=["greedy", "conservative"])
def test_a_request_kept_off_a_free_node_by_its_maintenance_waits_for_capacity(config):
    """n0 is free, its maintenance starts at 600; `long` (8 GPUs for 1000 s) would run into it, `short`
    (100 s) would not. `long` waits for capacity and `short` is placed. The greedy walk asked `place` why
    `long` waited without n0 cordoned: it fitted, and the assertion that it could not failed every cycle
    (the server's scheduler placed nothing while such a rental waited)."""
    snap = snapshot_of(1, 8)
    gates = Gates(maintenance=(("n0", 600.0, 5000.0),))
    decision = admit(
        snap, [job("long", 8, 1, 1000), job("short", 8, 2, 100)], [], POLICY, 10, config, gates=gates
    )
    assert [p.request_id for p in decision.placements] == ["short"]
    assert reasons(decision)["long"] is Reason.NO_CAPACITY


@settings(max_examples=80, deadline=None)
@given(running=RUNNING, queued=QUEUED)
def test_conservative_never_holds_a_node_twice_at_once(running, queued):
    """No two bookings, and no booking and a rental started now, hold one node over overlapping times;
    with running rentals released at their declared ends, so nothing started delays anyone booked."""
    now = 50.0
    snap, live, queue = random_cycle(running, queued, now)
    decision = admit(snap, queue, live, POLICY, now, CONSERVATIVE)
    by_id = {r.id: r for r in queue}
    booked = [(b.start_s, b.end_s, b.nodes, by_id[b.request_id]) for b in decision.bookings]
    started = [
        (now, now + (by_id[p.request_id].max_duration_s or math.inf), frozenset(a.node for a in p.nodes), p)
        for p in decision.placements
    ]
    for i, (start, end, nodes, request) in enumerate(booked):
        assert start > now
        # a rental that started ahead of it in the queue may share its node (bookings hold whole nodes)
        after = [b[:3] for b in booked[i + 1 :]]
        after += [s[:3] for s in started if by_id[s[3].request_id].submitted_at_s > request.submitted_at_s]
        for other_start, other_end, other_nodes in after:
            assert not (nodes & other_nodes) or end <= other_start or other_end <= start
    for b in decision.bookings:  # what runs on a booked node then has ended by its declared end
        for r in live:
            if b.nodes & {a.node for a in r.placement.nodes}:
                assert r.expected_end_s <= b.start_s or r.gpus + by_id[b.request_id].gpus_per_node <= 4


def test_conservative_books_a_node_with_the_cpu_and_memory_free_then():
    """At 100 `x`'s 7 GPUs free up on its node, but `z` keeps all but 4 cores there until 10,000: the head
    (4 GPUs, 8 cores) is booked on the other node when `y` ends at 200."""
    snap = snapshot_of(2, 8)
    x = run(snap, job("x", 7, 0, 100), 0)
    y = run(snap, job("y", 8, 0, 200), 0)
    z = run(snap, job("z", 1, 0, 10_000, cpu_milli=60_000), 0)
    assert x.placement.nodes[0].node == z.placement.nodes[0].node != y.placement.nodes[0].node
    decision = admit(snap, [job("head", 4, 1, 50, cpu_milli=8_000)], [x, y, z], POLICY, 10, CONSERVATIVE)
    (booking,) = decision.bookings
    assert (booking.start_s, booking.nodes) == (200, frozenset({y.placement.nodes[0].node}))


WIDTH = QueueConfig(
    mode=Mode.BACKFILL, order=Order.PRIORITY, within=Within.RATIO, backfill_order=BackfillOrder.RATIO
)


def test_a_request_that_takes_the_whole_pool_costs_more_in_the_ratio():
    one_gpu = job("one-gpu", 1, at=0, duration=16 * 3600)
    whole_pool = job("whole-pool", 8, nodes=8, at=6 * 3600, duration=2 * 3600)
    shares = {"one-gpu": 1 / 64, "whole-pool": 1.0}

    def share(request: Request) -> float:
        return shares[request.id]

    at_8h = 8 * 3600
    # without a width weight: whole-pool (2 h + 2 h) / 2 h = 2.0 beats one-gpu (8 h + 16 h) / 16 h = 1.5
    unweighted = order_requests([one_gpu, whole_pool], WIDTH, FairShare(), now=at_8h, pool_share=share)
    assert [r.id for r in unweighted] == ["whole-pool", "one-gpu"]
    # weight 3: whole-pool costs 2 h x 4 = 8 h, (2 + 8) / 8 = 1.25; one-gpu 16 h x (1 + 3/64), about 1.48
    weighted = replace(WIDTH, width_weight=3.0)
    ordered = order_requests([one_gpu, whole_pool], weighted, FairShare(), now=at_8h, pool_share=share)
    assert [r.id for r in ordered] == ["one-gpu", "whole-pool"]
    # and it still ages: after 40 h of waiting (42 / 8 = 5.25 against 48 / 16.75 = 2.87) it goes first
    later = order_requests([one_gpu, whole_pool], weighted, FairShare(), now=46 * 3600, pool_share=share)
    assert [r.id for r in later] == ["whole-pool", "one-gpu"]


@pytest.mark.parametrize(("width_weight", "placed"), [(0.0, "whole-pool"), (3.0, "one-gpu")])
def test_a_cycle_weighs_the_share_of_the_pool_a_request_takes(width_weight: float, placed: str):
    snapshot = snapshot_of(8, 8)
    queue = [
        job("one-gpu", 1, at=0, duration=16 * 3600),
        job("whole-pool", 8, nodes=8, at=6 * 3600, duration=7200),
    ]
    config = replace(WIDTH, width_weight=width_weight)
    decision = admit(snapshot, queue, [], POLICY, 8 * 3600, config)
    assert [p.request_id for p in decision.placements] == [placed]


WIDE_FIRST = replace(WIDTH, width_weight=3.0, wide_first_share=5 / 8)


def test_the_oldest_request_needing_whole_nodes_goes_first_unless_it_takes_most_of_its_pool():
    """On 8 nodes of 8 GPUs, the ratio puts the short one-GPU jobs first; with `wide_first_share` the oldest
    request that needs whole nodes goes first, but not the older one that needs 6 of the 8 nodes (75%)."""
    snapshot = snapshot_of(8, 8)
    queue = [
        job("six-nodes", 8, nodes=6, at=0, duration=8 * 3600),
        job("half-node", 4, at=60, duration=8 * 3600),  # not a whole node: it can share one
        job("two-nodes", 8, nodes=2, at=120, duration=8 * 3600),
        job("one-node", 8, at=180, duration=8 * 3600),
        *(job(f"small{i}", 1, at=240 + i, duration=3600) for i in range(3)),
    ]
    running = [run(snapshot, job(f"busy{i}", 8, 0, 100 * 3600), 0) for i in range(8)]  # nothing starts
    ratio = admit(snapshot, queue, running, POLICY, 3600, WIDTH)
    assert ratio.order[:3] == ("small0", "small1", "small2")
    wide_first = admit(snapshot, queue, running, POLICY, 3600, WIDE_FIRST)
    assert wide_first.order[0] == "two-nodes" and wide_first.head == "two-nodes"
    assert wide_first.order[1:4] == ("small0", "small1", "small2")  # the rest keep the ratio's order
    whole_pool_allowed = admit(
        snapshot, queue, running, POLICY, 3600, replace(WIDE_FIRST, wide_first_share=1)
    )
    assert whole_pool_allowed.order[0] == "six-nodes"


def test_only_the_first_class_with_a_whole_node_request_moves_one_and_higher_tiers_still_pass():
    queue = [
        job("old-wide", 8, nodes=2, at=0, duration=3600),
        job("small", 1, at=10, duration=60),
        job("reserved-small", 1, at=20, duration=60, tier=Tier.RESERVED),
    ]
    ordered = order_requests(queue, WIDE_FIRST, FairShare(), now=100, pool_share=lambda r: 0.1)
    assert [r.id for r in ordered] == ["reserved-small", "small", "old-wide"]
    wide = oldest_wide(ordered, lambda r: r.node_count > 1)
    assert wide is not None and wide.id == "old-wide"
    assert [r.id for r in keep_head_first(ordered, wide.id)] == ["reserved-small", "old-wide", "small"]
    assert oldest_wide(ordered, lambda r: False) is None


def test_a_backfill_floor_ranks_candidates_declared_shorter_by_their_wait():
    older = job("older", 1, at=0, duration=8 * 3600)
    newer = job("newer", 1, at=3600, duration=3600)
    now = 2 * 3600

    def first(floor_s: float) -> str:
        keys = {r.id: backfill_key(r, now, BackfillOrder.RATIO, floor_s=floor_s) for r in (older, newer)}
        return min(keys, key=keys.__getitem__)

    assert first(0.0) == "newer"  # (1 h + 1 h) / 1 h = 2 against (2 h + 8 h) / 8 h = 1.25
    assert first(64 * 3600.0) == "older"  # both cost 64 h: the longer wait wins
    assert response_ratio(newer, now, floor_s=64 * 3600.0) == pytest.approx(65 / 64)


@pytest.mark.parametrize(
    ("fill_drain_first", "placed"), [(True, {"short": "n0", "long": "n1"}), (False, {"short": "n1"})]
)
def test_a_backfill_that_ends_in_time_fills_the_drained_node_first(fill_drain_first, placed):
    """n0 drains for the head (free at 100); n1 is busy for long. Best fit would put `short` on n1's last
    two GPUs, where `long` (which cannot end by 100) is allowed; filling the drain first leaves them to it."""
    snap = snapshot_of(2, 8)
    draining = run(snap, job("draining", 4, 0, 100), 0)
    busy = run(snap, job("busy", 6, 0, 10_000), 0)
    queue = [job("head", 8, 1, 50), job("short", 2, 2, 50), job("long", 2, 3, 5000)]
    config = replace(EASY, fill_drain_first=fill_drain_first)
    decision = admit(snap, queue, [draining, busy], POLICY, 10, config)
    assert decision.head == "head" and decision.head_start_s == 100 and decision.reserved_nodes == ("n0",)
    assert {p.request_id: p.nodes[0].node for p in decision.placements} == placed


def test_the_pool_is_what_a_request_could_ever_land_on():
    h100 = [
        Node(f"h{i}", "r", ("r", "z", "p", "l0"), 64_000, 512_000, "H100-SXM-80GB", 8, GpuMode.WHOLE)
        for i in range(4)
    ]
    a100 = [
        Node(f"a{i}", "r", ("r", "z", "p", "l1"), 64_000, 512_000, "A100-80GB", 8, GpuMode.WHOLE)
        for i in range(12)
    ]
    snapshot = Snapshot(Fleet({"r": REGION}, (*h100, *a100)), CATALOG)
    on_h100 = GpuSelector(models=frozenset({"H100-SXM-80GB"}))
    assert pool_share(snapshot, job("h", 8, at=0, nodes=2, selector=on_h100)) == pytest.approx(16 / 32)
    assert pool_share(snapshot, job("any", 8, at=0)) == pytest.approx(8 / 128)
    nowhere = job("b200", 1, at=0, selector=GpuSelector(models=frozenset({"B200"})))
    assert pool_share(snapshot, nowhere) == 1.0


def test_under_backfill_a_head_kept_off_a_node_by_its_maintenance_is_reserved_after_the_window():
    """n0 (8 GPUs) is free; its maintenance runs over [600, 5000). The head `long` (8 GPUs, 1000 s) would
    run into it, so it starts when the window ends, on n0: its start is bounded, and `short`, which ends
    before the window, backfills. The head's reservation ignored the window and, with nothing running to
    release, found no start at all: every request behind the head was blocked."""
    snap = snapshot_of(1, 8)
    gates = Gates(maintenance=(("n0", 600.0, 5000.0),))
    queue = [job("long", 8, 1, 1000), job("short", 8, 2, 100)]
    decision = admit(snap, queue, [], POLICY, 10, EASY_SPARE, gates=gates)
    assert [p.request_id for p in decision.placements] == ["short"]
    assert decision.head == "long" and decision.head_start_s == 5000.0
    assert decision.reserved_nodes == ("n0",)


def test_a_head_is_not_reserved_on_a_node_whose_window_overlaps_its_run():
    """Two nodes; n0's window is [2000, 3000). The head (8 GPUs, 1500 s) can start at 1000, when both
    nodes' rentals end: not on n0, where it would run into the window, but on n1."""
    snap = snapshot_of(2, 8)
    running = [run(snap, job("a", 8, 0, 990), 10), run(snap, job("b", 8, 0, 990), 10)]
    head = job("head", 8, 5, 1500)
    plain = reserve(snap, head, running, POLICY, 10)
    assert plain is not None and [a.node for a in plain[1].nodes] == ["n0"]
    windows = (("n0", 2000.0, 3000.0),)
    start_s, placement = reserve(snap, head, running, POLICY, 10, maintenance=windows)
    assert start_s == 1000.0 and [a.node for a in placement.nodes] == ["n1"]


def test_a_ratio_cost_cap_lets_a_long_request_head_the_queue_within_a_bounded_wait():
    """A week-long request that has waited 72 h ranks (72 + 168) / 168 = 1.43 uncapped, behind a 4-h request
    that has waited 3 h (1.75); with the cost capped at 72 h it ranks (72 + 72) / 72 = 2 and goes first."""
    now = 72 * 3600.0
    week = job("week", 1, at=0, duration=7 * 24 * 3600)
    fresh = job("fresh", 1, at=now - 3 * 3600, duration=4 * 3600)
    config = QueueConfig(order=Order.PRIORITY, within=Within.RATIO)
    capped = replace(config, ratio_cost_cap_s=72 * 3600.0)
    assert [r.id for r in order_requests([week, fresh], config, FairShare(), now=now)] == ["fresh", "week"]
    assert [r.id for r in order_requests([week, fresh], capped, FairShare(), now=now)] == ["week", "fresh"]
    assert response_ratio(week, now, cap_s=72 * 3600.0) == pytest.approx(2.0)
    assert response_ratio(fresh, now, cap_s=72 * 3600.0) == pytest.approx(1.75)  # under the cap: as before
    keys = {r.id: backfill_key(r, now, BackfillOrder.RATIO, cap_s=72 * 3600.0) for r in (week, fresh)}
    assert min(keys, key=keys.__getitem__) == "week"


LONG_BUDGET = replace(EASY, long_job_s=24 * 3600.0)


def test_long_requests_hold_no_more_nodes_than_the_widest_request_leaves_and_block_nobody():
    """Four 8-GPU nodes and a waiting 4-node gang: long requests (declared over 24 h) may hold one node.
    The second long one waits (with the budget as its reason) while free nodes remain; it does not become
    the head, so the short request behind it starts, and the gang is the head."""
    snap = snapshot_of(4, 8)
    day = 24 * 3600
    queue = [
        job("long-a", 8, 0, 2 * day),
        job("long-b", 4, 1, 2 * day),
        job("short", 8, 2, 3600),
        job("wide", 8, 3, 3600, nodes=4),
    ]
    decision = admit(snap, queue, [], POLICY, 10, LONG_BUDGET)
    assert sorted(p.request_id for p in decision.placements) == ["long-a", "short"]
    assert decision.head == "wide"
    held = next(p for p in decision.pending if p.request_id == "long-b")
    assert held.reason is Reason.NO_CAPACITY and "long requests hold 1 of its pool's 4 nodes" in held.message
    without = admit(snapshot_of(4, 8), queue, [], POLICY, 10, EASY)
    assert sorted(p.request_id for p in without.placements) == ["long-a", "long-b", "short"]


def test_a_long_request_goes_to_a_node_long_requests_already_hold_first():
    """n0 runs a long job on 4 GPUs, n1 a short one on 6: best fit alone puts a new 2-GPU long job on n1's
    last two GPUs, which would keep n1 busy for days; under the budget it goes to n0."""
    day = 24 * 3600
    for config, node in ((EASY, "n1"), (LONG_BUDGET, "n0")):
        snap = snapshot_of(4, 8)
        old = run(snap, job("old-long", 4, 0, 3 * day), 0)
        busy = run(snap, job("busy", 6, 0, 3600), 0)
        assert (old.placement.nodes[0].node, busy.placement.nodes[0].node) == ("n0", "n1")
        queue = [job("long", 2, 5, 2 * day), job("wide", 8, 6, 3600, nodes=4)]
        decision = admit(snap, queue, [old, busy], POLICY, 10, config)
        assert {p.request_id: p.nodes[0].node for p in decision.placements} == {"long": node}


def test_a_request_as_wide_as_the_widest_is_not_held_by_the_long_job_budget():
    """The budget keeps room for the widest request: a long one as wide as it is that request, and starts."""
    snap = snapshot_of(4, 8)
    day = 24 * 3600
    running = [run(snap, job("long-a", 8, 0, 2 * day), 0)]
    decision = admit(snap, [job("long-wide", 8, 1, 2 * day, nodes=3)], running, POLICY, 10, LONG_BUDGET)
    assert [p.request_id for p in decision.placements] == ["long-wide"]


def test_the_widest_requests_own_nodes_do_not_count_against_the_budget_but_one_node_stays_short():
    """Five nodes; a 2-node job declared two days runs (the widest request), so narrower long requests may
    hold 5 - 2 = 3 nodes, its two not among them: the budget keeps room for the next wide request's drain,
    and the running one's nodes come back for it. Counting them, no long request could start for two days.
    Long requests of any width leave one node to short ones: the third one-node long request waits (with
    that reason), and a short request still finds a free node."""
    snap = snapshot_of(5, 8)
    day = 24 * 3600
    running = [run(snap, job("wide-long", 8, 0, 2 * day, nodes=2), 0)]
    queue = [
        job("long-a", 8, 1, 2 * day),
        job("long-b", 8, 2, 2 * day),
        job("long-c", 8, 3, 2 * day),
        job("short", 8, 4, 3600),
    ]
    decision = admit(snap, queue, running, POLICY, 10, LONG_BUDGET)
    assert sorted(p.request_id for p in decision.placements) == ["long-a", "long-b", "short"]
    held = next(p for p in decision.pending if p.request_id == "long-c")
    assert held.reason is Reason.NO_CAPACITY and "one node is kept for short requests" in held.message


@settings(max_examples=80, deadline=None)
@given(
    running=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 400)), max_size=8),
    queued=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 400), st.integers(1, 3)), min_size=1, max_size=12
    ),
)
def test_a_cycle_never_spreads_long_requests_past_the_budget(running, queued):
    """Every long request placed (declared over 100 s, narrower than the widest request) either lands on
    nodes the long requests narrower than the widest already hold or leaves them holding no more than the
    pool's nodes less the widest request's, at least one; and long requests of any width, together, then
    run on at most all nodes but one."""
    snap = snapshot_of(6, 4)
    live = []
    for i, (gpus, declared) in enumerate(running):
        outcome = place(snap, request := job(f"r{i}", gpus, 0, declared), POLICY)
        if isinstance(outcome, Placement):
            live.append(Running(request, outcome, 0))
    queue = [
        job(f"q{i}", 4 if nodes > 1 else gpus, float(i), declared, nodes=nodes)
        for i, (gpus, declared, nodes) in enumerate(queued)
    ]
    config = replace(EASY_RATIO, long_job_s=100.0)
    decision = admit(snap, queue, live, POLICY, 50, config)
    widest = max(r.node_count for r in [*queue, *(r.request for r in live)])
    budget = max(6 - widest, 1)
    long_running = [r for r in live if r.request.max_duration_s > 100]
    held = {a.node for r in long_running if r.request.node_count < widest for a in r.placement.nodes}
    long_nodes = {a.node for r in long_running for a in r.placement.nodes}
    requests = {r.id: r for r in queue}
    for placement in decision.placements:
        request = requests[placement.request_id]
        if request.max_duration_s <= 100:
            continue
        nodes = {a.node for a in placement.nodes}
        if request.node_count < widest:
            if not nodes <= held:
                assert len(held) + request.node_count <= budget, (held, placement)
            if not nodes <= long_nodes:
                assert len(long_nodes) + request.node_count <= 5, (long_nodes, placement)
            held |= nodes
        long_nodes |= nodes


def test_a_request_held_by_the_long_job_budget_preempts_no_one_but_a_reserved_one_is_exempt():
    """n0 runs a long on-demand job, n1-n3 short spot ones, and a 4-node gang waits (long requests may hold
    one node). A long on-demand request waits on the budget and gives no spot job notice; a long reserved
    one (an open contract's capacity is guaranteed) is not held by it, and preempts as before."""
    snap = snapshot_of(4, 8)
    day = 24 * 3600
    running = [run(snap, job("long-a", 8, 0, 2 * day), 0)]
    running += [
        run(snap, job(f"spot{i}", 8, 0, 3600, tier=Tier.SPOT, bid_micros_per_hour=1), 0) for i in (1, 2, 3)
    ]
    queue = [
        job("od-long", 8, 1, 2 * day),
        job("reserved-long", 8, 2, 2 * day, tier=Tier.RESERVED),
        job("wide", 8, 3, 3600, nodes=4),
    ]
    config = replace(LONG_BUDGET, preemption=PreemptionConfig())
    decision = admit(snap, queue, running, POLICY, 10, config)
    assert [p.preemptor for p in decision.preemptions] == ["reserved-long"]
    held = next(p for p in decision.pending if p.request_id == "od-long")
    assert held.reason is Reason.NO_CAPACITY and "long requests hold" in held.message


def two_pools() -> Snapshot:
    """One 8-GPU node of H100 (`h100`) and one of H200 (`h200`), in one region: two pools."""
    fleet = Fleet(
        {"r": REGION},
        tuple(
            Node(name, "r", ("r", "z", "p", "l0"), 64_000, 512_000, model, 8, GpuMode.WHOLE)
            for name, model in (("h100", "H100-SXM-80GB"), ("h200", "H200-141GB"))
        ),
    )
    return Snapshot(fleet, CATALOG)


def test_spot_yields_only_in_the_pools_a_waiting_higher_tier_could_use():
    """On-demand waits for the H200 node (it preempts the spot job there): spot that asks for H100 starts,
    spot that could run on either starts on the H100 node, spot that needs H200 is held and told why; a
    running elastic spot job grows on the H100 node, and one on the H200 node does not."""
    from suanli.domain.elastic_start import grow_toward_size

    snap = two_pools()
    config = QueueConfig(order=Order.PRIORITY, spot_yields=True, preemption=PreemptionConfig())

    def on(model: str) -> GpuSelector:
        return GpuSelector(models=frozenset({model}))

    six = run(snap, job("squatter", 6, 0, 1000, tier=Tier.SPOT, selector=on("H200-141GB")), 0)
    squatter = replace(six, request=replace(six.request, shape=WholeGpus(8), min_gpus=1))  # on 6 of its 8
    one = run(snap, job("small", 1, 0, 1000, tier=Tier.SPOT, selector=on("H100-SXM-80GB")), 0)
    small = replace(one, request=replace(one.request, shape=WholeGpus(2), min_gpus=1))  # on 1 of its 2
    spot = {"tier": Tier.SPOT, "bid_micros_per_hour": 5}
    queue = [
        job("od", 8, 5, 100, selector=on("H200-141GB")),
        job("on-h100", 1, 6, 10, selector=on("H100-SXM-80GB"), **spot),
        job("anywhere", 1, 7, 10, **spot),
        job("on-h200", 1, 8, 10, selector=on("H200-141GB"), **spot),
    ]
    decision = admit(snap, queue, [squatter, small], POLICY, 10, config)
    assert [p.preemptor for p in decision.preemptions] == ["od"]
    placed = {p.request_id: {a.node for a in p.nodes} for p in decision.placements}
    assert placed == {"on-h100": {"h100"}, "anywhere": {"h100"}}
    held = {p.request_id: p for p in decision.pending}["on-h200"]
    assert held.reason is Reason.NO_CAPACITY and "H200-141GB in r" in held.message
    assert decision.spot_yields == {("H200-141GB", "r")}
    unnoticed = replace(squatter, preempted_by=None)  # (noticed, it would not grow anyway)
    grown = grow_toward_size(snap, [small, unnoticed], POLICY, spot_yields=decision.spot_yields)
    assert [p.request_id for p in grown] == ["small"]
    assert {p.request_id for p in grow_toward_size(snap, [unnoticed], POLICY)} == {"squatter"}


def test_a_blocked_head_holds_back_only_what_competes_for_its_pools():
    """The head waits for the busy H200 node: a request for H100 without a declared duration starts (it can
    never touch the head's nodes), while one that could also run on H200 stays behind the head."""
    snap = two_pools()
    h200 = GpuSelector(models=frozenset({"H200-141GB"}))
    h100 = GpuSelector(models=frozenset({"H100-SXM-80GB"}))
    busy = run(snap, job("busy", 4, 0, 1000, selector=h200), 0)
    queue = [job("head", 8, 1, 100, selector=h200), job("h100", 1, 2, None, selector=h100), job("any", 1, 3)]
    decision = admit(snap, queue, [busy], POLICY, 10, EASY)
    assert decision.head == "head" and [p.request_id for p in decision.placements] == ["h100"]
    assert reasons(decision)["any"] is Reason.BLOCKED_BY_HEAD


@pytest.mark.parametrize("config", [EASY, CONSERVATIVE], ids=["backfill", "conservative"])
def test_a_head_is_not_reserved_on_capacity_promised_to_a_preemptor(config):
    """n0 runs spot under notice (deadline 40) for `od`, which has no declared end; n1 runs `x` (4 GPUs to
    70) with 4 free. The head `h` (8 GPUs) was reserved at 40, on the victim's GPUs, which are `od`'s then;
    so a 4-GPU backfill running to 620 started on n1 and, when `od` took n0, held the head back to 620.
    Now the head starts when `x` ends, on n1, and the backfill that would outlast that waits."""
    snap = snapshot_of(2, 8)
    spot = run(snap, job("spot", 8, 0, tier=Tier.SPOT, bid_micros_per_hour=1), 0)
    x = run(snap, job("x", 4, 0, 70), 0)
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    queue = [job("od", 8, 5), job("h", 8, 6), job("c", 4, 7, 600)]
    decision = admit(snap, queue, [noticed, x], POLICY, 10, config, promised={"od"})
    assert decision.placements == (), decision.placements
    assert reasons(decision)["od"] is Reason.PREEMPTING
    assert decision.head_start_s == 70 or [b.start_s for b in decision.bookings if b.request_id == "h"] == [
        70
    ]
    assert reasons(decision)["c"] in (Reason.BLOCKED_BY_HEAD, Reason.NO_CAPACITY)
    short = admit(snap, [*queue, job("d", 4, 8, 50)], [noticed, x], POLICY, 10, config, promised={"od"})
    assert [p.request_id for p in short.placements] == ["d"]  # one that ends by 70 still backfills


def test_spot_behind_a_higher_tier_head_is_told_it_yields_not_that_it_cannot_backfill():
    """One node: 4 GPUs run to 120, an on-demand head of 8 waits. A spot rental of 4 without a duration was
    told "no declared duration: cannot backfill", though declaring one would not start it (spot keeps off
    the pool where a higher tier waits); it is told that, with or without a duration, alone or not."""
    config = replace(EASY, spot_yields=True)
    for extra in ([], [job("other", 2, 9, 10_000)]):
        snap = snapshot_of(1, 8)
        busy = run(snap, job("busy", 4, 0, 120), 0)
        queue = [job("head", 8, 5), job("spot", 4, 6, tier=Tier.SPOT), *extra]
        decision = admit(snap, queue, [busy], POLICY, 10, config)
        (told,) = [p for p in decision.pending if p.request_id == "spot"]
        assert told.reason is Reason.NO_CAPACITY and "a higher tier is waiting" in told.message, told


@pytest.mark.parametrize("config", [GREEDY_QUEUE, EASY], ids=["greedy", "backfill"])
def test_a_preemptor_starts_on_capacity_that_frees_before_its_victims_deadline(config):
    """`od` preempted spot on n1 (deadline 40); at 17 n0 frees. It waited out the notice, then was placed on
    n0 anyway, spot killed for nothing and n1 left idle. Now it starts on n0 at once, and nothing is held
    for it on n1 (its victim's notice is withdrawn by the server: its preemptor no longer waits)."""
    config = replace(config, preemption=PreemptionConfig(default_notice_s=30))
    snap = snapshot_of(2, 8)
    x = run(snap, job("x", 8, 0, 17), 0)
    spot = run(snap, job("spot", 8, 0, tier=Tier.SPOT, bid_micros_per_hour=1), 0)
    noticed = replace(spot, preempted_by="od", notice_deadline_s=40)
    queue = [job("od", 8, 5)]
    decision = admit(snap, queue, [x, noticed], POLICY, 10, config, promised={"od"})
    assert decision.placements == () and reasons(decision)["od"] is Reason.PREEMPTING
    snap.release(x.placement.nodes[0])  # x ends at 17
    later = admit(snap, queue, [noticed], POLICY, 17, config, promised={"od"})
    ((placed_on,),) = [[a.node for a in p.nodes] for p in later.placements if p.request_id == "od"]
    assert placed_on == x.placement.nodes[0].node and later.preemptions == ()


def test_a_backfilled_gang_is_not_spread_over_two_leaves_to_fill_the_heads_drain():
    """Leaves l0 (n0, n1) and l1 (n2, n3). n0 is full for good, n1 and n2 run 4 GPUs to 90, n3 runs 4 for
    good: the head (2 x 8) is reserved on n1 and n2 at 90. A 2 x 4 gang ending at 40 went to n1 and n2 (the
    drain first), a leaf each, though l1 had room for it; it goes to n2 and n3, one leaf."""
    snap = snapshot_of(4, 8)

    def on(node: str, request: Request) -> Running:
        with snap.cordoned([n for n in ("n0", "n1", "n2", "n3") if n != node]):
            return run(snap, request, 0)

    pinned = [
        on("n0", job("full", 8, 0)),
        on("n1", job("a", 4, 0, 90)),
        on("n2", job("b", 4, 0, 90)),
        on("n3", job("c", 4, 0)),
    ]
    assert [r.placement.nodes[0].node for r in pinned] == ["n0", "n1", "n2", "n3"]
    config = replace(EASY, fill_drain_first=True)
    queue = [job("head", 8, 5, nodes=2), job("gang", 4, 6, 30, nodes=2)]
    decision = admit(snap, queue, pinned, POLICY, 10, config)
    assert decision.head_start_s == 90
    ((gang,),) = [[sorted(a.node for a in p.nodes)] for p in decision.placements if p.request_id == "gang"]
    assert gang == ["n2", "n3"]


def test_a_gang_head_holds_back_nothing_in_a_region_too_small_for_it():
    """r1 has n0 and n1 (both busy for good), r2 only m0 (idle). The head, a 2-node gang, can never land in
    r2; an 8-GPU rental for r2 without a duration waited behind it ("no declared duration: cannot
    backfill") while m0 idled. It starts there: the head cannot use m0."""
    other = Region("r2", "US", 400.0, 1.2)

    def node(name: str, region: str) -> Node:
        return Node(name, region, (region, "z", "p", "l0"), 64_000, 512_000, "H100-SXM-80GB", 8)

    fleet = Fleet({"r": REGION, "r2": other}, (node("n0", "r"), node("n1", "r"), node("m0", "r2")))
    snap = Snapshot(fleet, CATALOG)
    busy = []
    for name in ("n0", "n1"):
        with snap.cordoned([n for n in ("n0", "n1", "m0") if n != name]):
            busy.append(run(snap, job(f"busy-{name}", 8, 0), 0))
    queue = [
        job("head", 8, 5, nodes=2),
        job("r2-only", 8, 6, constraints=Constraints(regions=frozenset({"r2"}))),
    ]
    decision = admit(snap, queue, busy, POLICY, 10, EASY)
    assert [(p.request_id, p.nodes[0].node) for p in decision.placements] == [("r2-only", "m0")]


def test_a_request_its_quota_keeps_off_the_heads_model_is_not_held_behind_it():
    """Tenant t's H100 quota is full (it runs 8 on n0); n1 runs another tenant's 8 for good; an H100 head
    waits, its start unbounded. t's 4-GPU request names no model and declares no duration: it can only land
    on the A100 node, which the head can never use, but it waited behind the head ("no declared duration:
    cannot backfill") with the A100 idle. It starts there."""

    def node(name: str, model: str, gpus: int) -> Node:
        return Node(name, "r", ("r", "z", "p", "l0"), 64_000, 512_000, model, gpus)

    fleet = Fleet(
        {"r": REGION},
        (node("n0", "H100-SXM-80GB", 8), node("n1", "H100-SXM-80GB", 8), node("a0", "A100-80GB", 8)),
    )
    snap = Snapshot(fleet, CATALOG)
    h100 = GpuSelector(models=frozenset({"H100-SXM-80GB"}))
    busy = []
    for name, tenant in (("n0", "t"), ("n1", "u")):
        with snap.cordoned([n for n in ("n0", "n1", "a0") if n != name]):
            busy.append(run(snap, job(f"busy-{name}", 8, 0, selector=h100, tenant=tenant), 0))
    quota = {"t": TenantLimits(MappingProxyType({"H100-SXM-80GB": 8}))}
    gates = Gates(Limits(MappingProxyType(quota)))
    queue = [job("head", 8, 5, selector=h100, tenant="v"), job("any", 4, 6, tenant="t")]
    decision = admit(snap, queue, busy, POLICY, 10, EASY, gates=gates)
    assert [(p.request_id, p.nodes[0].node) for p in decision.placements] == [("any", "a0")]


@pytest.mark.parametrize(
    "config", [GREEDY_QUEUE, EASY, CONSERVATIVE], ids=["greedy", "backfill", "conservative"]
)
def test_a_higher_tier_waits_for_a_time_limit_that_frees_capacity_before_a_notice_would(config):
    """n0 runs spot with no end, n1 an on-demand rental of 4 GPUs whose time limit ends at 17. An on-demand
    request of 8 GPUs at 10 preempted the spot rental (notice to 40) though n1 frees at 17: the spot tenant
    lost its run and the request started 23 s later than by waiting. It waits for n1 now, and a request
    behind it does not take n1's free GPUs meanwhile; when n1 would free only after the notice ends (at 50),
    it preempts as before."""
    config = replace(config, preemption=PreemptionConfig(default_notice_s=30))
    for ends_at, preempts in ((17, False), (50, True)):
        snap = snapshot_of(2, 8)
        spot = run(snap, job("spot", 8, 0, tier=Tier.SPOT, bid_micros_per_hour=1), 0)
        x = run(snap, job("x", 4, 0, ends_at), 0)
        queue = [job("od", 8, 5), job("c", 4, 6, 600)]
        decision = admit(snap, queue, [spot, x], POLICY, 10, config)
        assert bool(decision.preemptions) is preempts, (ends_at, decision.preemptions)
        if preempts:
            continue
        assert decision.placements == () and reasons(decision)["od"] is Reason.NO_CAPACITY
        if config.mode is not Mode.GREEDY:
            booked = [b.start_s for b in decision.bookings if b.request_id == "od"]
            assert decision.head_start_s == ends_at or booked == [ends_at]
