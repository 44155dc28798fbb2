"""Elastic starts: a request with `min_gpus` starts smaller when it does not fit whole, and grows later."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_queueing import CONSERVATIVE, EASY, POLICY, job, reasons, run, snapshot_of

from suanli.domain.elastic_start import Drain, at_size, full_gpus, grow_toward_size, smaller_sizes
from suanli.domain.errors import RequestError
from suanli.domain.plan import Placement, Reason
from suanli.domain.preemption import PreemptionConfig
from suanli.domain.queueing import admit
from suanli.domain.request import GpuShare, Request, Tier, WholeGpus
from suanli.domain.running import Running

ELASTIC = replace(EASY, elastic_start=True)


def test_a_one_node_request_shrinks_in_gpus_and_a_gang_in_whole_nodes_each_declaring_its_longer_run():
    one = job("one", 8, 0, 3600, min_gpus=2)
    assert [(r.shape.count, r.node_count, r.max_duration_s) for r in smaller_sizes(one)] == [
        (count, 1, 3600 * 8 / count) for count in range(7, 1, -1)
    ]
    gang = job("gang", 8, 0, 3600, nodes=4, min_gpus=12)  # 12 GPUs: at least 2 whole nodes
    assert [(r.shape.count, r.node_count, r.max_duration_s) for r in smaller_sizes(gang)] == [
        (8, 3, 3600 * 32 / 24),
        (8, 2, 3600 * 32 / 16),
    ]
    assert list(smaller_sizes(job("rigid", 8, 0, 3600))) == []
    assert full_gpus(gang) == 32 and {r.id for r in smaller_sizes(gang)} == {"gang"}


def test_an_elastic_request_on_fewer_gpus_declares_a_run_as_much_longer_and_a_rigid_one_keeps_its_own():
    gang = job("gang", 8, 0, 3600, nodes=4, min_gpus=8)
    assert at_size(gang, 8).max_duration_s == 3600 * 4
    assert at_size(gang, 24).max_duration_s == 3600 * 32 / 24
    assert at_size(gang, 32) == gang == at_size(gang, 40)  # at its size (or more): as declared
    assert at_size(job("rigid", 8, 0, 3600), 4).max_duration_s == 3600  # its time limit is wall-clock
    assert at_size(job("open", 8, 0, None, min_gpus=2), 4).max_duration_s is None


@pytest.mark.parametrize(
    ("shape", "nodes", "least", "message"),
    [
        (WholeGpus(8), 1, 0, "must be 1 to the 8 GPUs it asks for"),
        (WholeGpus(8), 2, 17, "must be 1 to the 16 GPUs it asks for"),
        (GpuShare(500), 1, 1, "only a request of whole GPUs can start smaller"),
    ],
)
def test_a_least_size_outside_the_request_is_refused_naming_the_field(shape, nodes, least, message):
    with pytest.raises(RequestError) as refused:
        Request("r", shape, node_count=nodes, min_gpus=least)
    assert refused.value.field == "min_gpus" and message in str(refused.value)


def partly_busy() -> tuple:
    """Two 8-GPU nodes, 5 and 4 GPUs busy for a long while: 3 and 4 free, so no 8-GPU request fits."""
    snap = snapshot_of(2, 8)
    busy = [run(snap, job("a", 5, 0, 100_000), 0), run(snap, job("b", 4, 0, 100_000), 0)]
    return snap, busy


def test_an_elastic_request_that_does_not_fit_whole_starts_on_the_most_gpus_one_node_has_free():
    snap, busy = partly_busy()
    decision = admit(snap, [job("wide", 8, 1, 3600, min_gpus=4)], busy, POLICY, 10, ELASTIC)
    (placement,) = decision.placements
    assert placement.request_id == "wide" and placement.gpus == 4 and placement.nodes[0].node == "n1"
    assert decision.head is None and "wide" not in reasons(decision)


def test_below_its_least_size_or_without_one_or_under_a_queue_without_elastic_starts_it_waits():
    for request, config in [
        (job("wide", 8, 1, 3600, min_gpus=5), ELASTIC),
        (job("wide", 8, 1, 3600), ELASTIC),
        (job("wide", 8, 1, 3600, min_gpus=4), EASY),
    ]:
        snap, busy = partly_busy()
        decision = admit(snap, [request], busy, POLICY, 10, config)
        assert decision.placements == () and reasons(decision)["wide"] is Reason.NO_CAPACITY


def test_a_gang_starts_on_fewer_whole_nodes_after_what_fits_whole_has_started():
    snap = snapshot_of(3, 8)
    busy = [run(snap, job("busy", 8, 0, 100_000), 0)]
    queue = [job("gang", 8, 1, 3600, nodes=3, min_gpus=16), job("small", 4, 2, 3600)]
    decision = admit(snap, queue, busy, POLICY, 10, ELASTIC)
    started = {p.request_id: p for p in decision.placements}
    assert started["small"].gpus == 4  # backfill first: it fits whole and ends before the head could start
    # what is left is one whole node and half of another: below the gang's least two nodes, so it waits
    assert "gang" not in started and decision.head == "gang"
    snap = snapshot_of(3, 8)
    busy = [run(snap, job("busy", 8, 0, 100_000), 0)]
    decision = admit(snap, queue[:1], busy, POLICY, 10, ELASTIC)
    (placement,) = decision.placements
    assert placement.gpus == 16 and len(placement.nodes) == 2 and decision.head is None


def test_running_elastic_rentals_grow_toward_their_size_on_what_frees_and_others_do_not():
    snap, busy = partly_busy()
    wide = job("wide", 8, 1, 3600, min_gpus=4)
    (placement,) = admit(snap, [wide], busy, POLICY, 10, ELASTIC).placements
    shrunk = Running(wide, placement, 10)
    assert grow_toward_size(snap, [*busy, shrunk], POLICY) == []  # nothing free on its node yet
    snap.release(busy[1].placement.nodes[0])  # "b" ends: its 4 GPUs on n1 come free
    (added,) = grow_toward_size(snap, [busy[0], shrunk], POLICY)
    assert isinstance(added, Placement) and added.request_id == "wide" and added.gpus == 4
    assert added.nodes[0].node == "n1"
    grown = Running(wide, replace(placement, nodes=placement.nodes + added.nodes), 20)
    assert grow_toward_size(snap, [grown], POLICY) == []  # at its size: nothing more
    under_notice = replace(shrunk, preempted_by="other")
    assert grow_toward_size(snap, [under_notice], POLICY) == []


def test_a_shrunk_gang_grows_by_whole_nodes():
    snap = snapshot_of(3, 8)
    busy = run(snap, job("busy", 8, 0, 100_000), 0)
    gang = job("gang", 8, 1, 3600, nodes=3, min_gpus=16)
    (placement,) = admit(snap, [gang], [busy], POLICY, 10, ELASTIC).placements
    assert grow_toward_size(snap, [busy, Running(gang, placement, 10)], POLICY) == []
    snap.release(busy.placement.nodes[0])
    (added,) = grow_toward_size(snap, [Running(gang, placement, 10)], POLICY)
    assert added.gpus == 8 and {a.node for a in added.nodes}.isdisjoint({a.node for a in placement.nodes})


def test_an_elastic_start_keeps_off_a_rigid_heads_drain_unless_it_ends_before_the_heads_start():
    """Two 8-GPU nodes, n0 busy until 1000 and 2 GPUs of n1 until 900: a rigid two-node head starts at
    1000 on both. An elastic request that would outlast that start does not take n1's free GPUs, whether
    the head was reserved (something started whole beside it) or not; an elastic head, which gave up that
    guarantee, does not hold them back."""
    snap = snapshot_of(2, 8)
    busy = [run(snap, job("old", 8, 0, 1000), 0), run(snap, job("half", 2, 0, 900), 0)]
    head = job("head", 8, 1, 3600, nodes=2)
    late = job("late", 8, 2, 5000, min_gpus=4)
    decision = admit(snap, [head, late], busy, POLICY, 10, ELASTIC)
    assert decision.head == "head" and decision.placements == ()  # n1's 6 free GPUs are the head's
    snap = snapshot_of(2, 8)
    busy = [run(snap, job("old", 8, 0, 1000), 0), run(snap, job("half", 2, 0, 900), 0)]
    quick = job("quick", 4, 2, 100)  # a rigid one that fits whole: the head is reserved (start 1000)
    late_too = job("late", 8, 2, 5000, min_gpus=2)  # 2 GPUs are still free on n1 after it: held
    decision = admit(snap, [head, quick, late_too], busy, POLICY, 10, ELASTIC)
    assert decision.head_start_s == 1000
    assert [(p.request_id, p.gpus) for p in decision.placements] == [("quick", 4)]
    snap = snapshot_of(2, 8)
    busy = [run(snap, job("old", 8, 0, 1000), 0), run(snap, job("half", 2, 0, 900), 0)]
    elastic_head = replace(head, min_gpus=12)  # it cannot start on 6 GPUs either, and gave up the guard
    decision = admit(snap, [elastic_head, late], busy, POLICY, 10, ELASTIC)
    assert [(p.request_id, p.gpus) for p in decision.placements] == [("late", 6)]


def test_growth_keeps_off_a_rigid_heads_drain_unless_the_rental_ends_before_the_heads_start():
    """Four 8-GPU nodes: n0 busy until 1000, an elastic gang on two of its three nodes until 5000, n1 free.
    A rigid two-node head is reserved on n0 and n1 from 1000: the gang may not take n1, since it would
    outlast that start; it may when the head starts after it ends, or when no head waits."""
    snap = snapshot_of(4, 8)
    old = run(snap, job("old", 8, 0, 1000), 0)
    with snap.cordoned({"n0", "n1"}):  # the gang's two nodes are n2 and n3
        gang = run(snap, job("gang", 8, 1, 5000, nodes=2), 1)
    elastic = Running(job("gang", 8, 1, 5000, nodes=3, min_gpus=16), gang.placement, 1)
    head = job("head", 8, 2, 3600, nodes=2)
    quick = job("quick", 1, 3, 10)  # a rigid one that fits whole, so the head is reserved
    decision = admit(snap, [head, quick], [old, elastic], POLICY, 10, ELASTIC)
    assert decision.head == "head" and decision.head_start_s == 1000
    assert set(decision.reserved_nodes) == {"n0", "n1"}
    drain = Drain.for_head(decision.reserved_nodes, decision.head_start_s)
    (started,) = decision.placements
    snap.release(started.nodes[0])  # "quick" took one GPU of n1 (it ends before 1000): gone again
    assert grow_toward_size(snap, [old, elastic], POLICY, drain) == []
    assert snap.by_name["n1"].schedulable  # the drain was kept off for the trial only
    for later in [Drain.for_head(decision.reserved_nodes, 5001), None]:
        (grown,) = grow_toward_size(snap, [old, elastic], POLICY, later)
        assert grown.request_id == "gang" and [a.node for a in grown.nodes] == ["n1"]
        for allocation in grown.nodes:
            snap.release(allocation)
    assert Drain.for_head({"n1"}, None).keep_off(10.0) == {"n1"}  # the head's start unknown: kept off
    assert Drain.for_head({"n1"}, 1000.0).keep_off(None) == {"n1"}  # its own end unknown: kept off
    bookings = Drain(((frozenset({"n1"}), 100.0), (frozenset({"n2", "n3"}), 500.0)))
    assert bookings.keep_off(50.0) == set() and bookings.keep_off(200.0) == {"n1"}
    assert bookings.keep_off(600.0) == bookings.keep_off(None) == {"n1", "n2", "n3"}


def test_spot_does_not_grow_while_a_higher_tier_waits_for_capacity():
    """One 8-GPU node: on-demand holds 2 GPUs, an elastic spot rental 4 of its 8, 2 are free. An 8-GPU
    on-demand request can neither fit nor preempt enough (evicting spot leaves it 6), so it waits: the
    decision says spot yields, and the spot rental is not grown onto the 2 free GPUs (it would only be taken
    back); with nothing of a higher tier waiting, it is."""
    config = replace(ELASTIC, spot_yields=True, preemption=PreemptionConfig(default_notice_s=30))
    snap = snapshot_of(1, 8)
    held = run(snap, job("held", 2, 0, 100_000), 0)
    spot = job("spot", 8, 1, 100_000, min_gpus=2, tier=Tier.SPOT, bid_micros_per_hour=1)
    small = run(snap, replace(spot, shape=WholeGpus(4)), 1)
    running = [held, Running(spot, small.placement, 1)]
    decision = admit(snap, [job("wide", 8, 2, 3600)], running, POLICY, 10, config)
    assert decision.placements == () and decision.preemptions == () and decision.spot_yields
    assert grow_toward_size(snap, running, POLICY, spot_yields=decision.spot_yields) == []
    (grown,) = grow_toward_size(snap, running, POLICY)
    assert grown.request_id == "spot" and grown.gpus == 2
    quiet = admit(snapshot_of(1, 8), [], [], POLICY, 10, config)
    assert not quiet.spot_yields


@pytest.mark.parametrize(("declared_s", "starts"), [(5_000, True), (15_000, False)])
def test_under_the_conservative_queue_an_elastic_start_keeps_off_every_booking_it_would_outlast(
    declared_s: float, starts: bool
):
    """Three 8-GPU nodes: n0 busy until 1,000, 4 GPUs of n1 until 20,000, n2 until 40,000. A three-node
    gang is booked first (at 40,000, the head), a two-node one at 20,000 on n0 and n1. An elastic 8-GPU
    request may start on n1's 4 free GPUs only if it ends (at half speed, twice its declared time) before
    the second booking: the head's start alone would let the longer one in, and delay that booking."""
    config = replace(CONSERVATIVE, elastic_start=True)
    snap = snapshot_of(3, 8)
    with snap.cordoned({"n1", "n2"}):
        old = run(snap, job("old", 8, 0, 1_000), 0)
    with snap.cordoned({"n0", "n2"}):
        half = run(snap, job("half", 4, 0, 20_000), 0)
    with snap.cordoned({"n0", "n1"}):
        busy = run(snap, job("busy", 8, 0, 40_000), 0)
    queue = [
        job("head", 8, 1, 3_600, nodes=3),
        job("second", 8, 2, 3_600, nodes=2),
        job("elastic", 8, 3, declared_s, min_gpus=2),
    ]
    decision = admit(snap, queue, [old, half, busy], POLICY, 10, config)
    booked = {b.request_id: (b.start_s, set(b.nodes)) for b in decision.bookings}
    assert booked["head"][0] == 40_000 and booked["second"] == (20_000, {"n0", "n1"})
    if starts:
        (placement,) = decision.placements
        assert (placement.request_id, placement.gpus, placement.nodes[0].node) == ("elastic", 4, "n1")
        assert "elastic" not in booked  # it started: no booking left for it
    else:
        assert decision.placements == () and "elastic" in booked


def test_the_oldest_elastic_rental_grows_first_however_recently_it_was_resized():
    """One 8-GPU node, two elastic rentals of 8 holding 3 each, 2 GPUs free. The one placed first takes
    them, though it was resized more recently (its `started_at_s`): `started_s` says when each began."""
    snap = snapshot_of(1, 8)
    first = job("first", 8, 0, None, min_gpus=2)
    second = job("second", 8, 1, None, min_gpus=2)
    held_first = run(snap, replace(first, shape=WholeGpus(3)), 0)
    held_second = run(snap, replace(second, shape=WholeGpus(3)), 0)
    running = [Running(first, held_first.placement, 500), Running(second, held_second.placement, 100)]
    (grown,) = grow_toward_size(snap, running, POLICY, started_s={"first": 0, "second": 100})
    assert grown.request_id == "first" and grown.gpus == 2
    snap.unplace(grown)
    (by_last_resize,) = grow_toward_size(snap, running, POLICY)  # without: by `started_at_s`
    assert by_last_resize.request_id == "second"
