"""The leader's scheduling cycle over many random steps on SQLite and PostgreSQL (the example fleet: whole,
shared and MIG GPUs; every tier; rentals arriving, ending, being preempted and resized to more or fewer nodes
and GPUs, under every server queue): after each cycle the leader's snapshot holds exactly what the database's
live allocations hold, a placed rental has an allocation and a pending one none, every node of a live rental
holds as many GPUs, and no victim waits past its deadline plus a cycle."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from conftest import with_example_fleet
from suanli.app.fleet import FleetCache
from suanli.app.records import LIVE_STATES, Rental, RentalSpec
from suanli.app.rentals import follow_size, per_node_gpus
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG
from suanli.domain.queue_order import BOOKED_QUEUE, GREEDY_QUEUE, PLATFORM_QUEUE
from suanli.domain.snapshot import Snapshot

MIG = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def _spec(rng: random.Random) -> RentalSpec:
    tier = rng.choice(("on_demand", "on_demand", "spot", "reserved"))
    bid = rng.randint(1, 5_000_000) if tier == "spot" else None
    duration = rng.choice((None, 600, 3600, 7200))
    kind = rng.choice(("whole", "gang", "share", "mig"))
    if kind == "whole":
        shape = dict(gpu_model="H100-SXM-80GB", gpus=rng.choice((1, 2, 4, 8)))
    elif kind == "gang":
        shape = dict(gpu_model="H100-SXM-80GB", gpus=8, nodes=rng.choice((2, 3)))
    elif kind == "share":
        shape = dict(gpu_model="L40S", share_milli=rng.choice((250, 500)), share_memory_mib=4096)
    else:
        shape = dict(gpu_model="A100-80GB", mig_profile=rng.choice(MIG))
    return RentalSpec(**shape, tier=tier, bid_micros_per_gpu_hour=bid, max_duration_s=duration)


def _free(snapshot: Snapshot) -> list[tuple]:
    """What each node has free (MIG GPUs by compute and memory, not by their idle instances' history)."""
    return [(n.name, n.cpu_free, n.memory_free, [(g[0], g[1]) for g in n.gpus]) for n in snapshot.nodes]


@pytest.mark.parametrize("queue", [GREEDY_QUEUE, PLATFORM_QUEUE, BOOKED_QUEUE], ids=lambda q: q.mode.value)
def test_random_cycles_keep_the_snapshot_and_the_database_in_step(store, clock, queue) -> None:
    _, uow = store
    with_example_fleet(uow)
    scheduler = Scheduler(
        uow, clock, CATALOG, FleetCache(CATALOG), "suanli", 0, queue=queue, notice_by_tier_s={"spot": 20}
    )
    rng = random.Random(f"{queue.mode}")
    made = 0
    totals = [0, 0, 0, 0]  # placed, noticed, ended under notice, grown
    resized = 0
    for _ in range(60):
        with uow() as u:
            for _ in range(rng.randint(0, 4)):
                made += 1
                tenant = rng.choice(("ten_a", "ten_b"))
                u.rentals.add(Rental(f"rnt_{made:03d}", tenant, "pending", _spec(rng), clock.now()))
            live = [r for r in u.rentals.list(None, 1000) if r.state in ("placed", "running")]
            for rental in rng.sample(live, k=min(len(live), rng.randint(0, 2))):  # some end
                u.rentals.set_state(rental.id, "stopped", expect=("placed", "running"), reason=None)
                u.rentals.release(rental.id, at=clock.now())
                live.remove(rental)
            whole = [r for r in live if r.spec.mig_profile is None and r.spec.share_milli is None]
            for rental in rng.sample(whole, k=min(len(whole), rng.randint(0, 1))):  # one is resized
                resize(u, rental, rng.randint(1, 3), rng.choice((None, 1, 2, 4, 8)), clock.now())
                resized += 1
            u.commit()
        clock.at += timedelta(seconds=rng.choice((1, 5, 15, 30)))
        report = scheduler.run_cycle()
        totals[0] += report.placed
        totals[1] += report.notices
        totals[2] += report.preempted + report.stopped
        totals[3] += report.grown
        if scheduler.snapshot is None:
            continue  # dropped on purpose: rebuilt from the database next cycle
        with uow() as u:
            rebuilt = Snapshot(scheduler.fleet, CATALOG)
            for _, allocation in u.rentals.allocations_by_id(
                sorted(u.rentals.live_allocation_ids())
            ).values():
                rebuilt.occupy(allocation)
            rentals = u.rentals.list(None, 1000)
            holding = u.rentals.live_allocations()
        assert _free(scheduler.snapshot) == _free(rebuilt)
        for rental in rentals:
            assert (rental.id in holding) == (rental.state in LIVE_STATES), rental
            if rental.id in holding and rental.spec.share_milli is None:
                assert len({len(a.slices) for a in holding[rental.id]}) == 1, holding[rental.id]
            if rental.state == "preempting":
                assert rental.notice_deadline is not None
                assert rental.notice_deadline >= clock.now() - timedelta(seconds=30), rental
    with uow() as u:
        regpu = sum(
            any(e.kind == "resized" and e.message.startswith("now ") for e in u.rentals.events(r.id))
            for r in u.rentals.list(None, 1000)
        )
    placed, noticed, preempted, grown = totals
    assert made > 60 and placed > 40 and noticed > 0 and preempted > 0  # the steps did exercise preemption
    assert resized > 5 and grown > 0 and regpu > 0  # and elastic resizes, GPU counts changed in place too


def resize(u, rental: Rental, nodes: int, gpus: int | None, now: datetime) -> None:
    """What `RentalService.resize` does to a live whole-GPU rental: the spec, and fewer nodes at once."""
    allocation = u.rentals.allocation(rental.id)
    spec = replace(rental.spec, nodes=nodes, gpus=rental.spec.gpus if gpus is None else gpus)
    u.rentals.update_spec(rental.id, replace(rental, spec=spec))
    if nodes < len(allocation):
        u.rentals.release(rental.id, [a.node for a in allocation[nodes:]], at=now)
        per_node = per_node_gpus(allocation)
        follow_size(u, rental, (len(allocation), per_node), (nodes, per_node), now)
