"""`admit` on random mixed fleets (whole, shared and MIG GPUs) under every queue mode: it never fails, decides
each request once, and leaves the snapshot exactly as its placements alone make it (holds leave no trace)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import fleets, queues

from suanli.domain.catalog_data import CATALOG
from suanli.domain.contracts import Contract
from suanli.domain.inventory import Fleet
from suanli.domain.plan import Placement
from suanli.domain.policies import BestFitPolicy
from suanli.domain.queue_order import BOOKED_QUEUE, GREEDY_QUEUE, PLATFORM_QUEUE, Mode, Order, QueueConfig
from suanli.domain.queueing import Gates, admit
from suanli.domain.quotas import Limits, TenantLimits
from suanli.domain.request import Tier
from suanli.domain.running import Running
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

POLICY = BestFitPolicy()
CONFIGS = (GREEDY_QUEUE, PLATFORM_QUEUE, BOOKED_QUEUE, QueueConfig(mode=Mode.STRICT, order=Order.FIFO))


def state(snapshot: Snapshot):
    return [(n.cpu_free, n.memory_free, tuple(n.gpus)) for n in snapshot.nodes]


@settings(max_examples=500, deadline=None)
@given(
    fleet=fleets(),
    live=queues(),
    queued=queues(),
    durations=st.lists(st.one_of(st.none(), st.integers(60, 7200)), min_size=14, max_size=14),
    noticed=st.integers(0, 3),
    config=st.sampled_from(CONFIGS),
    owners=st.lists(st.sampled_from(("a", "b")), min_size=28, max_size=28),
    gated=st.booleans(),
    quota=st.integers(0, 6),
    contracted=st.integers(1, 8),
)
def test_admit_decides_each_request_once_and_leaves_only_its_placements(
    fleet: Fleet, live, queued, durations, noticed: int, config: QueueConfig, owners, gated, quota, contracted
) -> None:
    snap = Snapshot(fleet, CATALOG)
    running: list[Running] = []
    for request in live:
        owner = owners[14 + len(running)]
        request = replace(
            request, id=f"live-{request.id}", tenant=owner, max_duration_s=durations[len(running)]
        )
        outcome = place(snap, request, POLICY)
        if isinstance(outcome, Placement):
            running.append(Running(request, outcome, 0.0))
    queue = [
        replace(r, max_duration_s=d, tenant=owner)
        for r, d, owner in zip(queued, durations, owners, strict=False)
    ]
    # tenant a: a quota on all GPUs; tenant b: an open contract on the fleet's first model and region;
    # spot: a floor of 3 micros per hour
    first = fleet.nodes[0]
    gates = (
        Gates(
            Limits(MappingProxyType({"a": TenantLimits(MappingProxyType({"*": quota}))})),
            (Contract("ctr", "b", first.gpu_model, first.region, contracted, 0.0, 100.0),),
            lambda model, region: 3,
        )
        if gated
        else None
    )
    # the first queued request preempted the lowest tiers running, whose notice runs until 30
    victims = [r for r in running if r.request.tier < queue[0].tier][:noticed]
    running = [
        replace(r, preempted_by=queue[0].id, notice_deadline_s=30.0) if r in victims else r for r in running
    ]
    promised = {queue[0].id} if victims else set()

    decision = admit(snap, queue, running, POLICY, 10.0, config, promised=promised, gates=gates)

    by_id = {r.id: r for r in queue}
    by_gpus = {r.id: r.gpus_per_node * r.node_count for r in queue if r.tenant == "a"}
    placed = [p.request_id for p in decision.placements]
    waiting = [p.request_id for p in decision.pending]
    assert sorted(placed + waiting) == sorted(r.id for r in queue)  # each once, placed or pending
    replay = Snapshot(fleet, CATALOG)
    for job in running:
        for allocation in job.placement.nodes:
            replay.occupy(allocation)
    for placement in decision.placements:
        for allocation in placement.nodes:
            replay.occupy(allocation)
    assert state(snap) == state(replay)
    assert not overbooked(snap)
    if gated:  # tenant a never goes over its quota through this cycle's placements
        held = sum(r.gpus_per_node * r.node_count for r in (j.request for j in running) if r.tenant == "a")
        placed_a = sum(by_gpus[p.request_id] for p in decision.placements if p.request_id in by_gpus)
        assert placed_a == 0 or held + placed_a <= quota
    tiers = {r.request.id: r.request.tier for r in running}
    noticed_now = [v.request_id for p in decision.preemptions for v in p.victims]
    assert len(noticed_now) == len(set(noticed_now))  # no one is given notice twice in a cycle
    assert not set(noticed_now) & {v.request.id for v in victims}  # nor again while under notice
    for preemption in decision.preemptions:
        preemptor = by_id[preemption.preemptor]  # `reserved` when promoted under tenant b's contract
        tier = Tier.RESERVED if preemptor.id in decision.promoted else preemptor.tier
        assert all(tiers[v.request_id] < tier for v in preemption.victims)
        gone = {v.request_id for v in preemption.victims}
        for job in running:  # once its victims have left, the promise fits on what this cycle left
            if job.request.id in gone:
                for allocation in job.placement.nodes:
                    replay.release(allocation)
        for allocation in preemption.promised.nodes:
            replay.occupy(allocation)
        assert not overbooked(replay)


def overbooked(snapshot: Snapshot) -> bool:
    """Some node has less than nothing free: CPU, memory, or a GPU's compute or memory."""
    return any(
        n.cpu_free < 0 or n.memory_free < 0 or any(milli < 0 or mib < 0 for milli, mib, _ in n.gpus)
        for n in snapshot.nodes
    )
