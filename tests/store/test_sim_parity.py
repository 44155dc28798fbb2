"""The simulator replays through the server's scheduler: the same rentals, arriving and ending at the same
moments on the example fleet, start at the same moments whether the leader's cycles decide (on SQLite and
PostgreSQL, every rental's state read back from the database) or `sim.queue` does, under each of the
server's queues (`SUANLI_QUEUE`: greedy, backfill, which is `sim`'s `suanli`, and conservative). A
divergence (a phase one side runs and the other does not, a rental seen at another size, age or share)
shows as a job that starts at another time: 46 to 64 of this workload's 70 rentals start at other times
under another queue than the backfill one, and 53 to 62 when its two tenants are one (fair share orders
them). Elastic rentals too: the leader starts them smaller and grows them as the simulator does, and
both stretch an elastic rental's declared duration by the speed it runs at (on the server, its time limit);
41 (backfill) and 59 (greedy) of 70 start at other times when the leader keeps the unstretched limit. And
spot rentals, preempted with notice by on-demand ones: the same victims at the same moments, each preempted
whole submitted again at its deadline on the server (the simulator queues it again), an elastic one trimmed
to what its preemptor leaves it. And rentals that checkpoint: lent idle GPUs and taken back, saving their
work at the deadline and resuming with the rest, declaring what is left of their duration (3 of the 6
replays diverge when the leader declares the whole duration again, and all 3 rigid ones when it requeues
the victim after the cycle's decision rather than before)."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest

from conftest import EXAMPLE_FLEET, T0, with_example_fleet
from suanli.app.fleet import FleetCache
from suanli.app.records import ContractRecord, Rental, RentalSpec, domain_contract
from suanli.app.rentals import to_request
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.policies import BestFitPolicy
from suanli.domain.preemption import RESUME_S
from suanli.domain.queue_order import BOOKED_QUEUE, GREEDY_QUEUE, PLATFORM_QUEUE
from suanli.sim.queue import POLICIES, SPOT_BID_MICROS, run_requests
from suanli.sim.queue_result import QueueResult

H100 = "H100-SXM-80GB"
ENDS, DEADLINE, ARRIVES = 0, 1, 2  # event kinds, in the order the simulator handles them at one instant


def _workload(
    seed: int,
    count: int,
    least_share: float | None = None,
    spot_share: float = 0.0,
    checkpoints: bool = False,
) -> list[tuple[Rental, float]]:
    """`count` H100 rentals of two tenants (one to eight GPUs, or gangs of two to four whole nodes) arriving
    about every ten minutes, more than the eight H100 nodes can take, each with its true run time; most
    declare a duration (the true one rounded up to a power of two hours, as `sim`'s pow2h), some none.
    With `least_share`, those of two GPUs or more may start on that share of them (`min_gpus`, as `sim
    --elastic` makes its jobs); `spot_share` of them are spot, bidding 0.5 to 3 dollars per GPU-hour (as
    `sim --mix`), the rest on-demand; with `checkpoints`, every one checkpoints (as `sim --checkpoint`)."""
    rng = random.Random(seed)
    tiers = random.Random(seed + 100)
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
        spec = RentalSpec(
            gpu_model=H100,
            gpus=gpus,
            nodes=nodes,
            max_duration_s=declared,
            min_gpus=least,
            checkpoints=checkpoints,
        )
        if tiers.random() < spot_share:
            spec = replace(spec, tier="spot", bid_micros_per_gpu_hour=tiers.randint(*SPOT_BID_MICROS))
        created = T0 + timedelta(seconds=at_s)
        tenant = rng.choice(("ten_a", "ten_a", "ten_b"))
        rentals.append((Rental(f"job-{n:03d}", tenant, "pending", spec, created), true_s))
    return rentals


@dataclass
class Served:
    """What the leader's cycles did with a workload: when each rental last started (seconds from T0), how
    many started smaller than their size, how many resizes (growths and trims) and preemptions there were."""

    started: dict[str, float] = field(default_factory=dict)
    smaller: int = 0
    resizes: int = 0
    preemptions: int = 0


def _served(
    uow,
    clock,
    queue_name: str,
    workload: list[tuple[Rental, float]],
    contracts: Sequence[ContractRecord] = (),
) -> Served:
    """The workload under the leader's cycles: one cycle at each moment a rental arrives, ends, or reaches
    its notice deadline, as the simulator runs one `admit` per event time. A rental does its true run time
    of work at its full size, at the share of its GPUs it holds (read back after every cycle, as the leader
    starts it smaller, grows it and trims it), and is then stopped and released as an API stop releases a
    rental whose workload never started. A victim preempted whole is submitted again at its deadline (a new
    rental, its place by age kept), as the simulator queues it again to run from scratch; one that
    checkpoints goes back to the queue itself, saving the work it did (less the resumption it began with),
    and runs the rest plus `RESUME_S` when placed again, as the simulator's do."""
    with_example_fleet(uow)
    with uow() as u:
        for contract in contracts:
            u.contracts.add(contract)
        u.commit()
    scheduler = Scheduler(uow, clock, CATALOG, FleetCache(CATALOG), "best-fit", 0, queue=POLICIES[queue_name])
    by_id = {rental.id: (rental, true_s) for rental, true_s in workload}
    events = [((r.created_at - T0).total_seconds(), ARRIVES, r.id, 0) for r, _ in workload]
    heapq.heapify(events)
    served = Served()
    live: dict[str, str] = {}  # job (arrived) -> the rental that runs it now (a resubmission's)
    placed: set[tuple[str, int]] = set()  # placements seen: (rental, its placement count)
    done_s: dict[str, float] = {}  # job that checkpoints -> full-speed seconds of work it saved
    run_left_s: dict[str, float] = {}  # job -> its work left when its run began
    noticed: set[tuple[str, datetime | None]] = set()  # notices seen: (rental, deadline)
    work_left_s: dict[str, float] = {}  # job -> full-speed seconds of work left as of `speed`'s since
    speed: dict[str, tuple[float, float]] = {}  # job -> (share of its full speed, since)
    version: dict[str, int] = {}  # job -> its current end event (an older one is stale)
    while events:
        now_s = events[0][0]
        clock.at = T0 + timedelta(seconds=now_s)
        with uow() as u:
            while events and events[0][0] == now_s:
                _, kind, job, stamp = heapq.heappop(events)
                if kind == ARRIVES:
                    u.rentals.add(by_id[job][0])
                    live[job] = job
                elif kind == ENDS and stamp == version.get(job):  # its work is done
                    assert u.rentals.set_state(
                        live[job], "stopped", expect=("placed", "preempting"), reason=None
                    )
                    u.rentals.release(live[job], at=clock.now())
                    del speed[job]
            for job, rental_id in list(live.items()):  # victims whose deadline is now go back to the queue
                rental = u.rentals.get(rental_id)
                assert rental is not None
                due = rental.notice_deadline is not None and rental.notice_deadline <= clock.now()
                if rental.state == "preempting" and due and rental.notice_keeps is None:
                    if rental.spec.checkpoints:  # it saves its work; the cycle puts it back in the queue
                        was, since = speed[job]
                        work_now_s = work_left_s[job] - (now_s - since) * was
                        overhead_s = RESUME_S if job in done_s else 0.0
                        saved_s = max(run_left_s[job] - work_now_s - overhead_s, 0.0)
                        done_s[job] = done_s.get(job, 0.0) + saved_s
                    else:
                        live[job] = f"{job}~{served.preemptions}"  # sorts as the job did among the others
                        u.rentals.add(replace(by_id[job][0], id=live[job]))
                    version[job] = version.get(job, 0) + 1
                    speed.pop(job, None)
                    served.preemptions += 1
            u.commit()
        report = scheduler.run_cycle()
        assert not report.dropped
        with uow() as u:
            held = {rid: sum(a.gpus for a in nodes) for rid, nodes in u.rentals.live_allocations().items()}
            for job, rental_id in live.items():
                rental = u.rentals.get(rental_id)
                assert rental is not None and rental.state != "preempted"  # a victim was submitted again
                if rental.state == "preempting" and (rental_id, rental.notice_deadline) not in noticed:
                    noticed.add((rental_id, rental.notice_deadline))  # (a trimmed one may be noticed again)
                    assert rental.notice_deadline is not None
                    heapq.heappush(events, ((rental.notice_deadline - T0).total_seconds(), DEADLINE, job, 0))
                if rental_id not in held:
                    continue
                spec = by_id[job][0].spec
                now_speed = held[rental_id] / (spec.gpus * spec.nodes)
                if (rental_id, rental.placements) not in placed:
                    placed.add((rental_id, rental.placements))
                    work_left_s[job] = by_id[job][1] - done_s.get(job, 0.0)
                    if job in done_s:  # it resumes from its checkpoint
                        work_left_s[job] += RESUME_S
                    served.started[job], run_left_s[job] = now_s, work_left_s[job]
                    served.smaller += now_speed < 1
                elif speed[job][0] == now_speed:
                    continue
                else:
                    was, since = speed[job]
                    work_left_s[job] -= (now_s - since) * was
                    served.resizes += 1
                speed[job] = (now_speed, now_s)
                version[job] = version.get(job, 0) + 1
                heapq.heappush(events, (now_s + work_left_s[job] / now_speed, ENDS, job, version[job]))
    return served


def _replayed(queue_name: str, workload: list[tuple[Rental, float]], **options) -> tuple[QueueResult, dict]:
    """The workload replayed by the simulator, and when each job last started (seconds from T0)."""
    requests = [to_request(rental) for rental, _ in workload]
    fleet = parse_fleet(EXAMPLE_FLEET, source="examples/fleet.toml", catalog=CATALOG)
    result = run_requests(
        fleet, requests, [t for _, t in workload], queue_name, placement=BestFitPolicy(seed=0), **options
    )
    return result, {rental_id: at_s - T0.timestamp() for rental_id, at_s in result.started_at_s.items()}


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
    _, simulated = _replayed(queue_name, workload)
    assert len(served.started) == len(workload)  # every rental started, and ended
    arrived = {rental.id: (rental.created_at - T0).total_seconds() for rental, _ in workload}
    waited = [rental_id for rental_id, at_s in served.started.items() if at_s > arrived[rental_id]]
    assert len(waited) > len(workload) // 3  # a queue built up: backfill and the head's drain were at work
    assert simulated == pytest.approx(served.started)


@pytest.mark.parametrize("queue_name", ["suanli", "greedy", "conservative"])
def test_elastic_rentals_start_smaller_and_grow_at_the_same_moments_on_the_leader_and_in_the_simulator(
    store, clock, queue_name: str
) -> None:
    """The same with rentals that may start on half their GPUs (`sim --elastic 0.5`): both sides start
    them smaller, grow them as GPUs free (off a waiting rental's planned start), and stretch their declared
    durations by the speed they run at."""
    workload = _workload(seed=3, count=70, least_share=0.5)
    served = _served(store[1], clock, queue_name, workload)
    assert (
        served.smaller >= 5 and served.resizes >= 5
    )  # (25, 16 under suanli; 33, 15 greedy; 9, 6 conservative)
    _, simulated = _replayed(queue_name, workload, elastic=0.5)
    assert len(served.started) == len(workload)
    assert simulated == pytest.approx(served.started)


@pytest.mark.parametrize("least_share", [None, 0.5])
@pytest.mark.parametrize("queue_name", ["suanli", "greedy", "conservative"])
def test_spot_rentals_are_preempted_and_trimmed_at_the_same_moments_on_the_leader_and_in_the_simulator(
    store, clock, queue_name: str, least_share: float | None
) -> None:
    """The same with 60% of the rentals spot: on-demand ones preempt them with notice, the same victims at
    the same moments on both sides, and take their capacity at the deadline; a victim preempted whole runs
    again from the start (on the server, submitted again), an elastic one is trimmed to what the preemptor
    leaves it and runs on."""
    workload = _workload(seed=4, count=70, least_share=least_share, spot_share=0.6)
    served = _served(store[1], clock, queue_name, workload)
    options = {} if least_share is None else {"elastic": least_share}
    replayed, simulated = _replayed(queue_name, workload, **options)
    # 10, 22 and 9 victims preempted whole (suanli, greedy, conservative); elastic, 4, 17 and 4, and 1, 3
    # and 2 trimmed
    assert (served.preemptions, simulated) == (replayed.preemptions, pytest.approx(served.started))
    assert served.preemptions >= 4 and (least_share is None or replayed.trims >= 1)


@pytest.mark.parametrize("least_share", [None, 0.5])
@pytest.mark.parametrize("queue_name", ["suanli", "greedy", "conservative"])
def test_rentals_that_checkpoint_are_lent_idle_gpus_taken_back_and_resumed_at_the_same_moments(
    store, clock, queue_name: str, least_share: float | None
) -> None:
    """The same with every rental checkpointing (`sim --checkpoint`): the backfill queue lends idle GPUs to
    those that would wait and takes them back with notice, spot victims save their work, and each goes back
    to the queue and resumes with what it has left, declaring what is left of its duration."""
    workload = _workload(seed=4, count=70, least_share=least_share, spot_share=0.6, checkpoints=True)
    served = _served(store[1], clock, queue_name, workload)
    options = {"checkpoint": True} | ({} if least_share is None else {"elastic": least_share})
    replayed, simulated = _replayed(queue_name, workload, **options)
    # 25, 22 and 9 victims that went back to the queue (suanli's include borrowers taken back); elastic,
    # 11, 18 and 4, and 1, 2 and 2 trimmed
    assert (served.preemptions, simulated) == (replayed.preemptions, pytest.approx(served.started))
    assert served.preemptions >= 4 and (least_share is None or replayed.trims >= 1)


@pytest.mark.parametrize("least_share", [None, 0.5])
@pytest.mark.parametrize("queue_name", ["suanli", "greedy", "conservative"])
def test_a_contract_holds_capacity_for_its_holder_at_the_same_moments_on_the_leader_and_in_the_simulator(
    store, clock, queue_name: str, least_share: float | None
) -> None:
    """The same with 60% spot and a contract: ten_b holds 56 of the 64 H100s from the second hour to the
    ninth. Its rentals in the window (up to 56 GPUs) are reserved, on-demand keeps off the capacity held for
    it, spot borrows it and is preempted with notice when ten_b claims it: the same moments on both sides,
    and not those of the same workload without the contract (61, 58 and 62 of the 70 rentals start at other
    times under suanli, greedy and conservative). With elastic rentals (half their GPUs at least), a growth
    keeps off what is held for another tenant on both sides too."""
    workload = _workload(seed=4, count=70, least_share=least_share, spot_share=0.6)
    options = {} if least_share is None else {"elastic": least_share}
    held = ContractRecord(
        "ctr_parity", "ten_b", H100, 56, "cn-north", T0 + timedelta(hours=1), T0 + timedelta(hours=8), T0
    )
    served = _served(store[1], clock, queue_name, workload, [held])
    replayed, simulated = _replayed(queue_name, workload, contracts=[domain_contract(held)], **options)
    assert (served.preemptions, simulated) == (replayed.preemptions, pytest.approx(served.started))
    _, without = _replayed(queue_name, workload, **options)
    moved = [job for job, at_s in simulated.items() if abs(at_s - without[job]) > 1e-6]
    assert len(moved) >= 5, moved  # the contract changed the schedule
