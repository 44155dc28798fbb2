"""Borrowed capacity: a request that checkpoints fills the head's drain; the head takes it back (notice)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from test_queueing import EASY, POLICY, QUEUED, RUNNING, job, random_cycle, reasons, run, snapshot_of

from suanli.domain.long_jobs import LongJobBudget
from suanli.domain.plan import Reason
from suanli.domain.preemption import DEFAULT_NOTICE_S, PreemptionConfig
from suanli.domain.queueing import admit
from suanli.domain.request import Tier
from suanli.domain.reservation import reserve
from suanli.domain.running import Running

BORROW = replace(EASY, preemption=PreemptionConfig(), borrow_idle=True)
DAY = 24 * 3600


def drained() -> tuple:
    """Two 8-GPU nodes: `old` holds n0 until 1000, and a two-node head drains n1 for it meanwhile."""
    snap = snapshot_of(2, 8)
    old = run(snap, job("old", 8, 0, 1000), 0)
    head = job("head", 8, 1, 50, nodes=2)
    return snap, old, head


def test_a_request_that_checkpoints_borrows_the_drain_where_a_plain_one_waits():
    snap, old, head = drained()
    queue = [head, job("saves", 4, 2, 5000, checkpoints=True), job("plain", 4, 3, 5000)]
    decision = admit(snap, queue, [old], POLICY, 10, BORROW)
    assert [p.request_id for p in decision.placements] == ["saves"]
    assert decision.borrowed == ("saves",) and decision.placements[0].nodes[0].node == "n1"
    assert decision.head == "head" and decision.head_start_s == 1000
    assert reasons(decision)["plain"] is Reason.BLOCKED_BY_HEAD
    snap, old, head = drained()
    without = admit(snap, queue, [old], POLICY, 10, EASY)
    assert without.placements == () and without.borrowed == ()


def borrowed_on_drain() -> tuple:
    snap, old, head = drained()
    saves = job("saves", 4, 2, 5000, checkpoints=True)
    decision = admit(snap, [head, saves], [old], POLICY, 10, BORROW)
    (placement,) = decision.placements
    return snap, old, head, Running(saves, placement, 10, borrowed=True)


def test_borrowed_gpus_count_as_free_in_the_heads_reservation_and_stay_lent_until_it_could_start():
    snap, old, head, lent = borrowed_on_drain()
    decision = admit(snap, [head, job("plain", 4, 3, 5000)], [old, lent], POLICY, 500, BORROW)
    assert decision.head == "head" and decision.head_start_s == 1000  # not 5010, when `saves` would end
    assert decision.preemptions == ()  # the head cannot start before 1000 anyway: `saves` keeps running


def test_the_head_takes_borrowed_gpus_back_with_notice_once_it_could_start():
    snap, old, head, lent = borrowed_on_drain()
    for allocation in old.placement.nodes:
        snap.release(allocation)  # `old` ends at 1000
    decision = admit(snap, [head], [lent], POLICY, 1000, BORROW)
    (taken,) = decision.preemptions
    assert taken.preemptor == "head" and [v.request_id for v in taken.victims] == ["saves"]
    assert taken.deadline_s == 1000 + DEFAULT_NOTICE_S  # the head starts within the notice period
    assert sorted(a.node for a in taken.promised.nodes) == ["n0", "n1"]
    assert reasons(decision)["head"] is Reason.PREEMPTING


def test_a_request_that_took_capacity_back_is_not_borrowed_so_there_is_no_cycle():
    snap, old, head, lent = borrowed_on_drain()
    for allocation in [*old.placement.nodes, *lent.placement.nodes]:
        snap.release(allocation)  # `old` ended, and `saves` left at its notice deadline
    queue = [head, replace(lent.request, max_duration_s=5000 - 1020)]
    decision = admit(snap, queue, [], POLICY, 1030, BORROW, promised={"head": None})
    assert [p.request_id for p in decision.placements] == ["head"] and decision.borrowed == ()


def test_plain_rentals_of_the_same_tier_and_higher_tiers_borrowing_are_never_taken_back():
    snap = snapshot_of(1, 8)
    plain = run(snap, job("plain", 8, 0, 5000), 0)
    decision = admit(snap, [job("head", 8, 1, 50)], [plain], POLICY, 10, BORROW)
    assert decision.preemptions == () and decision.head == "head"
    snap = snapshot_of(1, 8)
    lent = replace(run(snap, job("lent", 8, 0, 5000, checkpoints=True), 0), borrowed=True)
    spot = job("spot", 8, 1, 50, tier=Tier.SPOT)
    assert admit(snap, [spot], [lent], POLICY, 10, BORROW).preemptions == ()
    assert [
        p.preemptor for p in admit(snap, [job("od", 8, 1, 50)], [lent], POLICY, 10, BORROW).preemptions
    ] == ["od"]


def test_what_the_long_job_budget_holds_back_borrows_if_it_checkpoints_and_does_not_count_in_it():
    """Four 8-GPU nodes and a waiting 4-node gang: long requests may hold one node (the long-job budget);
    the second long one borrows a node instead of waiting, and the budget then counts only the first."""
    snap = snapshot_of(4, 8)
    long_budget = replace(BORROW, long_job_s=DAY)
    queue = [
        job("long-a", 8, 0, 2 * DAY),
        job("long-b", 8, 1, 2 * DAY, checkpoints=True),
        job("wide", 8, 3, 3600, nodes=4),
    ]
    decision = admit(snap, queue, [], POLICY, 10, long_budget)
    assert sorted(p.request_id for p in decision.placements) == ["long-a", "long-b"]
    assert decision.borrowed == ("long-b",) and decision.head == "wide"
    by_id = {r.id: r for r in queue}
    live = [
        Running(by_id[p.request_id], p, 10, borrowed=p.request_id == "long-b") for p in decision.placements
    ]
    budget = LongJobBudget(snap, DAY, [queue[2]], live)
    room = budget.room(job("long-c", 8, 20, 2 * DAY))
    assert room is not None and room.held == {by_id_node(decision, "long-a")}


@settings(max_examples=60, deadline=None)
@given(running=RUNNING, queued=QUEUED, saves=st.lists(st.booleans(), min_size=12, max_size=12))
def test_borrowing_never_delays_the_heads_reserved_start(running, queued, saves):
    now = 50.0
    snap, live, queue = random_cycle(running, queued, now)
    queue = [replace(r, checkpoints=s) for r, s in zip(queue, saves, strict=False)]
    decision = admit(snap, queue, live, POLICY, now, BORROW)
    if decision.head is None or decision.head_start_s is None:
        return
    head = next(r for r in queue if r.id == decision.head)
    by_id = {r.id: r for r in queue}
    started = [
        Running(by_id[p.request_id], p, now, borrowed=p.request_id in decision.borrowed)
        for p in decision.placements
    ]
    after = reserve(snap, head, live + started, POLICY, now)
    assert after is not None and after[0] <= decision.head_start_s
    assert all(by_id[r].checkpoints for r in decision.borrowed)


def by_id_node(decision, request_id: str) -> str:
    return next(p.nodes[0].node for p in decision.placements if p.request_id == request_id)


def test_a_request_that_checkpoints_may_borrow_without_declaring_its_duration():
    """Backfill needs a duration to know a request ends in time; a borrower gives the GPUs back when asked."""
    snap, old, head = drained()
    queue = [head, job("saves", 4, 2, None, checkpoints=True), job("plain", 4, 3, None)]
    decision = admit(snap, queue, [old], POLICY, 10, BORROW)
    assert decision.borrowed == ("saves",) and reasons(decision)["plain"] is Reason.BLOCKED_BY_HEAD
    (placement,) = decision.placements
    lent = Running(queue[1], placement, 10, borrowed=True)
    later = admit(snap, [head], [old, lent], POLICY, 20, BORROW)  # it does not make the head's start unknown
    assert later.head == "head"
    found = reserve(snap, head, [old, lent], POLICY, 20)
    assert found is not None and found[0] == 1000  # not unbounded: the borrower leaves when asked


def test_a_request_that_checkpoints_borrows_while_the_heads_start_cannot_be_bounded():
    """`old` declares no duration, so the head's start cannot be bounded and nothing may pass it for good;
    the idle GPUs are still lent to a request that gives them back when asked (on the server, where rentals
    seldom declare a duration, every checkpointing request waited beside idle GPUs)."""
    snap = snapshot_of(2, 8)
    old = run(snap, job("old", 8, 0, None), 0)
    head = job("head", 8, 1, 50, nodes=2)
    queue = [head, job("saves", 4, 2, None, checkpoints=True), job("plain", 4, 3, 100)]
    decision = admit(snap, queue, [old], POLICY, 10, BORROW)
    assert decision.borrowed == ("saves",) and [p.request_id for p in decision.placements] == ["saves"]
    assert reasons(decision)["plain"] is Reason.BLOCKED_BY_HEAD
    assert decision.head == "head" and decision.head_start_s is None
    (placement,) = decision.placements
    for allocation in old.placement.nodes:
        snap.release(allocation)  # `old` ends: the head takes the lent GPUs back with notice
    lent = Running(queue[1], placement, 10, borrowed=True)
    taken = admit(snap, [head], [lent], POLICY, 500, BORROW)
    assert [v.request_id for p in taken.preemptions for v in p.victims] == ["saves"]


def test_borrowed_gpus_taken_back_are_the_reclaimers_not_free_in_the_heads_reservation():
    """n0 lends 8 GPUs to `lent`, taken back with notice (deadline 40) by `od`, which has no declared end;
    n1 runs `x` (4 GPUs to 70) with 4 free. The head `h` (8 GPUs) was reserved on n0 now, as if lent GPUs
    were free for anyone, so a 4-GPU backfill running to 610 started on n1 and held it back once `od` took
    n0. Now the head starts when `x` ends, on n1, and a backfill that would outlast that waits."""
    snap = snapshot_of(2, 8)
    lent = run(snap, job("lent", 8, 0, 5000, checkpoints=True), 0)
    x = run(snap, job("x", 4, 0, 70), 0)
    reclaimed = replace(lent, borrowed=True, preempted_by="od", notice_deadline_s=40)
    queue = [job("od", 8, 5), job("h", 8, 6), job("c", 4, 7, 600)]
    decision = admit(snap, queue, [reclaimed, x], POLICY, 10, BORROW, promised={"od"})
    assert decision.placements == (), decision.placements
    assert decision.head == "h" and decision.head_start_s == 70
    assert reasons(decision)["c"] is Reason.BLOCKED_BY_HEAD
