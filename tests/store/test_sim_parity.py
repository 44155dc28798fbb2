"""The simulator replays through the server's scheduler: the same rentals, arriving and ending at the same
moments on the example fleet, start at the same moments whether the leader's cycles decide (on SQLite and
PostgreSQL, every rental's state read back from the database) or `sim.queue` does, under each of the
server's queues (`SUANLI_QUEUE`: greedy, backfill, which is `sim`'s `suanli`, and conservative). A
divergence (a phase one side runs and the other does not, a rental seen at another size, age or share)
shows as a job that starts at another time: 46 to 64 of this workload's 70 rentals start at other times
under another queue than the backfill one, and 53 to 62 when its two tenants are one (fair share orders
them). Elastic rentals too: the leader starts them smaller and grows them as the simulator does, and
both stretch an elastic rental's declared duration by the speed it runs at (on the server, its time limit);
41 (backfill) and 59 (greedy) of 70 start at other times when the leader keeps the unstretched limit.
On-demand rentals only: a preempted rental ends on the server and reruns in the simulator."""

from __future__ import annotations

import heapq
import math
import random
from datetime import timedelta

import pytest

from conftest import EXAMPLE_FLEET, T0, with_example_fleet
from suanli.app.fleet import FleetCache
from suanli.app.records import Rental, RentalSpec
from suanli.app.rentals import to_request
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.policies import BestFitPolicy
from suanli.domain.queue_order import BOOKED_QUEUE, GREEDY_QUEUE, PLATFORM_QUEUE
from suanli.sim.queue import POLICIES, run_requests

H100 = "H100-SXM-80GB"


def _workload(seed: int, count: int, least_share: float | None = None) -> list[tuple[Rental, float]]:
    """`count` H100 rentals of two tenants (one to eight GPUs, or gangs of two to four whole nodes) arriving
    about every ten minutes, more than the eight H100 nodes can take, each with its true run time; most
    declare a duration (the true one rounded up to a power of two hours, as `sim`'s pow2h), some none.
    With `least_share`, those of two GPUs or more may start on that share of them (`min_gpus`, as `sim
    --elastic` makes its jobs)."""
    rng = random.Random(seed)
    rentals: list[tuple[Rental, float]] = []
    at_s = 0
    for n in range(count):
        at_s += rng.randint(1, 1200)
        nodes = rng.choice((1, 1, 1, 1, 1, 2, 3, 4))
        gpus = 8 if nodes > 1 else rng.choice((1, 1, 2, 4, 8))
        true_s = float(rng.randint(300, 30_000))
        declared = None if rng.random() < 0.15 else 3600 * 2 ** max(0, (int(true_s) - 1) // 3600).bit_length()
        least = None
        if least_share is not None and gpus * nodes > 1:
            least = max(1, math.ceil(least_share * gpus * nodes - 1e-9))
        spec = RentalSpec(gpu_model=H100, gpus=gpus, nodes=nodes, max_duration_s=declared, min_gpus=least)
        created = T0 + timedelta(seconds=at_s)
        tenant = rng.choice(("ten_a", "ten_a", "ten_b"))
        rentals.append((Rental(f"job-{n:03d}", tenant, "pending", spec, created), true_s))
    return rentals


def _served(uow, clock, queue_name: str, workload: list[tuple[Rental, float]]) -> dict[str, float]:
    """When each rental started (seconds from T0) under the leader's cycles: one cycle at each moment a
    rental arrives or ends, as the simulator runs one `admit` per event time; an ending rental is stopped and
    released as an API stop releases a rental whose workload never started."""
    with_example_fleet(uow)
    scheduler = Scheduler(uow, clock, CATALOG, FleetCache(CATALOG), "best-fit", 0, queue=POLICIES[queue_name])
    by_id = {rental.id: (rental, true_s) for rental, true_s in workload}
    events = [((r.created_at - T0).total_seconds(), 1, r.id) for r, _ in workload]
    heapq.heapify(events)
    started: dict[str, float] = {}
    while events:
        now_s = events[0][0]
        clock.at = T0 + timedelta(seconds=now_s)
        with uow() as u:
            while events and events[0][0] == now_s:
                _, kind, rental_id = heapq.heappop(events)
                if kind == 1:
                    u.rentals.add(by_id[rental_id][0])
                    continue
                assert u.rentals.set_state(rental_id, "stopped", expect=("placed",), reason=None)
                u.rentals.release(rental_id, at=clock.now())
            u.commit()
        report = scheduler.run_cycle()
        assert not report.dropped
        with uow() as u:
            placed = [r.id for r in u.rentals.list(None, 1000) if r.state == "placed" and r.id not in started]
        for rental_id in placed:
            started[rental_id] = now_s
            heapq.heappush(events, (now_s + by_id[rental_id][1], 0, rental_id))
    return started


def _served_elastic(
    uow, clock, queue_name: str, workload: list[tuple[Rental, float]]
) -> tuple[dict[str, float], int, int]:
    """As `_served`, for elastic rentals: each has its true run time of work at its full size, done at the
    share of its GPUs it holds (read back after every cycle, as the leader starts it smaller and grows it),
    and is stopped when that work is done; with how many started smaller, and how many resizes there were."""
    with_example_fleet(uow)
    scheduler = Scheduler(uow, clock, CATALOG, FleetCache(CATALOG), "best-fit", 0, queue=POLICIES[queue_name])
    by_id = {rental.id: (rental, true_s) for rental, true_s in workload}
    events = [((r.created_at - T0).total_seconds(), 1, r.id, 0) for r, _ in workload]
    heapq.heapify(events)
    started: dict[str, float] = {}
    work_left_s: dict[str, float] = {}
    speed: dict[str, tuple[float, float]] = {}  # live rental -> (share of its full speed, since)
    version: dict[str, int] = {}
    smaller = resizes = 0
    while events:
        now_s = events[0][0]
        clock.at = T0 + timedelta(seconds=now_s)
        with uow() as u:
            while events and events[0][0] == now_s:
                _, kind, rental_id, stamp = heapq.heappop(events)
                if kind == 1:
                    u.rentals.add(by_id[rental_id][0])
                elif stamp == version.get(rental_id):  # its work is done (a stale end is skipped)
                    assert u.rentals.set_state(rental_id, "stopped", expect=("placed",), reason=None)
                    u.rentals.release(rental_id, at=clock.now())
                    del speed[rental_id]
            u.commit()
        report = scheduler.run_cycle()
        assert not report.dropped
        with uow() as u:
            held = {rid: sum(a.gpus for a in nodes) for rid, nodes in u.rentals.live_allocations().items()}
        for rental_id, gpus in held.items():
            rental, true_s = by_id[rental_id]
            now_speed = gpus / (rental.spec.gpus * rental.spec.nodes)
            if rental_id not in started:
                started[rental_id], work_left_s[rental_id] = now_s, true_s
                smaller += now_speed < 1
            elif speed[rental_id][0] == now_speed:
                continue
            else:
                was, since = speed[rental_id]
                work_left_s[rental_id] -= (now_s - since) * was
                resizes += 1
            speed[rental_id] = (now_speed, now_s)
            version[rental_id] = version.get(rental_id, 0) + 1
            heapq.heappush(
                events, (now_s + work_left_s[rental_id] / now_speed, 0, rental_id, version[rental_id])
            )
    return started, smaller, resizes


@pytest.mark.parametrize(
    ("queue_name", "server_queue"),
    [("suanli", PLATFORM_QUEUE), ("greedy", GREEDY_QUEUE), ("conservative", BOOKED_QUEUE)],
)
def test_the_leader_and_the_simulator_start_every_rental_at_the_same_moment(
    store, clock, queue_name: str, server_queue
) -> None:
    assert POLICIES[queue_name] is server_queue  # the server's queue, as `SUANLI_QUEUE` names it
    workload = _workload(seed=3, count=70)
    served = _served(store[1], clock, queue_name, workload)
    requests = [to_request(rental) for rental, _ in workload]
    fleet = parse_fleet(EXAMPLE_FLEET, source="examples/fleet.toml", catalog=CATALOG)
    replayed = run_requests(
        fleet, requests, [t for _, t in workload], queue_name, placement=BestFitPolicy(seed=0)
    )
    simulated = {rental_id: at_s - T0.timestamp() for rental_id, at_s in replayed.started_at_s.items()}
    assert len(served) == len(workload)  # every rental started, and ended
    arrived = {rental.id: (rental.created_at - T0).total_seconds() for rental, _ in workload}
    waited = [rental_id for rental_id, at_s in served.items() if at_s > arrived[rental_id]]
    assert len(waited) > len(workload) // 3  # a queue built up: backfill and the head's drain were at work
    assert simulated == pytest.approx(served)


@pytest.mark.parametrize("queue_name", ["suanli", "greedy", "conservative"])
def test_elastic_rentals_start_smaller_and_grow_at_the_same_moments_on_the_leader_and_in_the_simulator(
    store, clock, queue_name: str
) -> None:
    """The same with rentals that may start on half their GPUs (`sim --elastic 0.5`): both sides start
    them smaller, grow them as GPUs free (off a waiting rental's planned start), and stretch their declared
    durations by the speed they run at."""
    workload = _workload(seed=3, count=70, least_share=0.5)
    served, smaller, resizes = _served_elastic(store[1], clock, queue_name, workload)
    assert smaller >= 5 and resizes >= 5  # (25, 16 under suanli; 33, 15 greedy; 9, 6 conservative)
    requests = [to_request(rental) for rental, _ in workload]
    fleet = parse_fleet(EXAMPLE_FLEET, source="examples/fleet.toml", catalog=CATALOG)
    replayed = run_requests(
        fleet, requests, [t for _, t in workload], queue_name, placement=BestFitPolicy(seed=0), elastic=0.5
    )
    simulated = {rental_id: at_s - T0.timestamp() for rental_id, at_s in replayed.started_at_s.items()}
    assert len(served) == len(workload)
    assert simulated == pytest.approx(served)
